//! `coffer gw` (the S3 gateway), `coffer user` (its users) and `coffer kms` (the monitors'
//! KMS, whose keys protect its server-side encryption).

use std::path::PathBuf;

use client::conf::{Conf, GW_POOL_DEFAULT};

use crate::admin::{connect, json, Who};

/// Where the gateway listens when neither the command line nor the configuration says (the
/// port Ceph's RGW uses).
pub const LISTEN_DEFAULT: &str = "127.0.0.1:7480";
/// The directory, beside the configuration, of the gateway `coffer up` runs: its
/// certificate, log and pid file.
pub const GW_DIR: &str = "gw";

#[derive(clap::Args)]
pub struct GwArgs {
    /// Address to listen on [default: the configuration's [gw] listen, else 127.0.0.1:7480].
    #[arg(long)]
    listen: Option<String>,
    /// The pool of users, buckets and objects [default: the configuration's [gw] pool, else s3].
    #[arg(long)]
    pool: Option<String>,
    /// PEM certificate chain to serve [default: gw/cert.pem beside the configuration, as
    /// `coffer up` makes it].
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve plain HTTP: requests, keys' signatures and data cross the network readable.
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key"])]
    plain_http: bool,
    /// Write this process's id here once serving.
    #[arg(long)]
    pid_file: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
pub enum UserCommand {
    /// Creates a user and prints its access and secret keys.
    Create {
        name: String,
        #[arg(long)]
        json: bool,
    },
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Removes a user (refused while it owns buckets).
    Rm { name: String },
}

#[derive(clap::Subcommand)]
pub enum KmsCommand {
    /// Keys of the built-in KMS: create, ls, rotate, rm.
    #[command(subcommand)]
    Key(KmsKeyCommand),
}

#[derive(clap::Subcommand)]
pub enum KmsKeyCommand {
    Create {
        name: String,
    },
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Adds a version: new data keys are wrapped by it; older data keys still open with
    /// the version that wrapped them. No data is re-encrypted.
    Rotate {
        name: String,
    },
    /// Removes the key and every version of it: everything its data keys protect becomes
    /// unreadable, for good (crypto-shredding).
    Rm {
        name: String,
        /// Required: what the key protects cannot be read again.
        #[arg(long)]
        yes_i_really_mean_it: bool,
    },
}

pub fn kms(who: &Who, command: KmsCommand) -> Result<(), String> {
    let KmsCommand::Key(command) = command;
    let (_, runtime, cluster) = connect(who)?;
    runtime.block_on(async {
        let done = |result: Result<(), client::Error>| result.map_err(|e| e.to_string());
        match command {
            KmsKeyCommand::Create { name } => {
                done(cluster.kms_key_create(&name).await)?;
                println!("KMS key {name} created");
            }
            KmsKeyCommand::Rotate { name } => {
                done(cluster.kms_key_rotate(&name).await)?;
                println!("KMS key {name} rotated");
            }
            KmsKeyCommand::Rm {
                name,
                yes_i_really_mean_it,
            } => {
                if !yes_i_really_mean_it {
                    return Err(format!(
                        "removing KMS key {name} makes every object it protects unreadable; \
                         add --yes-i-really-mean-it"
                    ));
                }
                done(cluster.kms_key_remove(&name).await)?;
                println!("KMS key {name} removed");
            }
            KmsKeyCommand::Ls { json: as_json } => {
                let keys = cluster.kms_keys().await.map_err(|e| e.to_string())?;
                if as_json {
                    let listed: Vec<_> = keys
                        .iter()
                        .map(|k| serde_json::json!({"name": k.name, "versions": k.versions}))
                        .collect();
                    return json(&listed);
                }
                for key in keys {
                    println!("{}  ({} versions)", key.name, key.versions);
                }
            }
        }
        Ok(())
    })
}

fn pool_name(conf: &Conf, explicit: Option<String>) -> String {
    explicit
        .or_else(|| conf.gw.as_ref().map(|gw| gw.pool.clone()))
        .unwrap_or_else(|| GW_POOL_DEFAULT.into())
}

async fn open_pool(cluster: &client::Cluster, name: &str) -> Result<client::Pool, String> {
    cluster.pool(name).await.map_err(|e| match e {
        client::Error::NoSuchPool(_) => {
            format!("pool {name} does not exist; create it with `coffer pool create {name}`")
        }
        e => e.to_string(),
    })
}

pub fn serve(who: &Who, args: GwArgs) -> Result<(), String> {
    let (conf, runtime, cluster) = connect(who)?;
    let listen = args
        .listen
        .or_else(|| conf.gw.as_ref().map(|gw| gw.listen.clone()))
        .unwrap_or_else(|| LISTEN_DEFAULT.into());
    let tls = if args.plain_http {
        None
    } else {
        let dir = conf.dir.join(GW_DIR);
        let cert = args
            .tls_cert
            .unwrap_or_else(|| dir.join(gateway::tls::CERT_FILE));
        let key = args
            .tls_key
            .unwrap_or_else(|| dir.join(gateway::tls::KEY_FILE));
        if !cert.exists() {
            return Err(format!(
                "no certificate at {}: give --tls-cert and --tls-key, or --plain-http",
                cert.display()
            ));
        }
        Some(gateway::serve::tls_config(&cert, &key)?)
    };
    let pool_name = pool_name(&conf, args.pool);
    runtime.block_on(async {
        let pool = open_pool(&cluster, &pool_name).await?;
        // Before the socket exists, so that whoever finds it listening finds the pid too.
        if let Some(path) = &args.pid_file {
            std::fs::write(path, format!("{}\n", std::process::id()))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        println!("coffer gw: serving S3 on pool {pool_name} at {scheme}://{addr}");
        let service = gateway::Gateway::start(pool)
            .await
            .map_err(|e| format!("starting the gateway: {e}"))?
            .service();
        let serving = tokio::spawn(gateway::serve::serve(listener, service, tls));
        tokio::select! {
            result = crate::daemon::stop_signal() => result,
            result = serving => Err(match result {
                Ok(Err(e)) => format!("serving stopped: {e}"),
                _ => "serving stopped".into(),
            }),
        }
    })
}

pub fn user(who: &Who, command: UserCommand) -> Result<(), String> {
    let (conf, runtime, cluster) = connect(who)?;
    let pool_name = pool_name(&conf, None);
    runtime.block_on(async {
        let pool = open_pool(&cluster, &pool_name).await?;
        match command {
            UserCommand::Create {
                name,
                json: as_json,
            } => {
                let user = gateway::users::create(&pool, &name)
                    .await
                    .map_err(|e| e.to_string())?;
                if as_json {
                    return json(&serde_json::json!({
                        "user": user.name,
                        "access_key": user.access_key,
                        "secret_key": user.secret_key,
                    }));
                }
                println!("user:       {}", user.name);
                println!("access key: {}", user.access_key);
                println!("secret key: {}", user.secret_key);
                Ok(())
            }
            UserCommand::Ls { json: as_json } => {
                let users = gateway::users::list(&pool)
                    .await
                    .map_err(|e| e.to_string())?;
                if as_json {
                    let listed: Vec<_> = users
                        .iter()
                        .map(|u| serde_json::json!({"user": u.name, "access_key": u.access_key}))
                        .collect();
                    return json(&listed);
                }
                for user in users {
                    println!("{}  {}", user.name, user.access_key);
                }
                Ok(())
            }
            UserCommand::Rm { name } => {
                gateway::users::remove(&pool, &name)
                    .await
                    .map_err(|e| e.to_string())?;
                println!("user {name} removed");
                Ok(())
            }
        }
    })
}
