//! `coffer gw` (the S3 gateway), `coffer user` (its users) and `coffer kms` (the monitors'
//! KMS, whose keys protect its server-side encryption).

use std::path::{Path, PathBuf};
use std::time::Duration;

use client::conf::{Conf, GW_POOL_DEFAULT};

use crate::admin::{connect, json, Who};

/// Where the gateway listens when neither the command line nor the configuration says (the
/// port Ceph's RGW uses).
pub const LISTEN_DEFAULT: &str = "127.0.0.1:7480";
/// The directory, beside the configuration, of the gateway `coffer up` runs: its
/// certificate, log and pid file.
pub const GW_DIR: &str = "gw";
/// How long a stopping gateway takes, at most, to deliver the access log lines it holds.
const LOG_DELIVERY_ON_STOP: Duration = Duration::from_secs(10);

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct GwCli {
    #[command(flatten)]
    pub serve: GwArgs,
    #[command(subcommand)]
    pub command: Option<GwCommand>,
}

#[derive(clap::Subcommand)]
pub enum GwCommand {
    /// Removes what gateways killed mid-request leave behind: object data that no object
    /// and no multipart upload names, and upload records no bucket lists.
    Gc {
        /// Spare anything written more recently than this (s, m, h or d): writes in
        /// progress are not named yet, so make it longer than any upload takes.
        #[arg(long, default_value = "1d", value_parser = parse_age)]
        older_than: Duration,
        /// Count what would be removed, and remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// The gateway's pool [default: the configuration's [gw] pool, else s3].
        #[arg(long)]
        pool: Option<String>,
    },
    /// Buckets' lifecycle rules (the gateway applies them on its own every hour).
    #[command(subcommand)]
    Lifecycle(LifecycleCommand),
    /// Buckets' policies, as the cluster's administrator.
    #[command(subcommand)]
    BucketPolicy(BucketPolicyCommand),
}

#[derive(clap::Subcommand)]
pub enum BucketPolicyCommand {
    /// Removes BUCKET's policy whoever it denies: the way back in when a policy put with
    /// ConfirmRemoveSelfBucketAccess denies even the bucket's owner the policy verbs.
    Rm {
        bucket: String,
        /// The gateway's pool [default: the configuration's [gw] pool, else s3].
        #[arg(long)]
        pool: Option<String>,
    },
}

#[derive(clap::Subcommand)]
pub enum LifecycleCommand {
    /// Applies every bucket's lifecycle rules now: expires objects and noncurrent versions,
    /// removes delete markers left alone, aborts old incomplete uploads.
    Run {
        /// How long a lifecycle day lasts for this pass (s, m, h or d): shorter only to
        /// test rules, as Ceph's rgw_lc_debug_interval.
        #[arg(long, default_value = "1d", value_parser = parse_age)]
        day: Duration,
        /// The gateway's pool [default: the configuration's [gw] pool, else s3].
        #[arg(long)]
        pool: Option<String>,
    },
}

/// An age such as `90s`, `30m`, `2h` or `1d` (a bare number is seconds).
fn parse_age(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let seconds_per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(format!("{text:?}: give a number and s, m, h or d")),
    };
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: give a number and s, m, h or d"))?;
    Ok(Duration::from_secs(number.saturating_mul(seconds_per)))
}

#[derive(clap::Args)]
pub struct GwArgs {
    /// Address to listen on [default: the configuration's [gw] listen, else 127.0.0.1:7480].
    #[arg(long)]
    listen: Option<String>,
    /// The pool of users, buckets and objects [default: the configuration's [gw] pool, else s3].
    #[arg(long)]
    pool: Option<String>,
    /// The pool that holds the objects' content, an erasure-coded one for example; chosen
    /// when the gateway first starts on its pool, before any bucket exists, and kept
    /// [default: the gateway's pool].
    #[arg(long)]
    data_pool: Option<String>,
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
    /// Serve Prometheus metrics at http://ADDR/metrics (docs/metrics.md).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// How long a lifecycle day lasts (s, m, h or d): shorter only to test rules, as Ceph's
    /// rgw_lc_debug_interval [default: the configuration's [gw] lifecycle_day_seconds, else
    /// 1d].
    #[arg(long, value_parser = parse_age)]
    lifecycle_day: Option<Duration>,
    /// How long access log lines wait before a request to their bucket delivers them (s, m,
    /// h or d) [default: the configuration's [gw] access_log_roll_seconds, else 5m].
    #[arg(long, value_parser = parse_age)]
    access_log_roll: Option<Duration>,
    /// The region it answers as: every bucket's location, and the only location constraint
    /// CreateBucket takes [default: the configuration's [gw] region, else us-east-1]. The
    /// client settings `coffer user create` prints name the configuration's.
    #[arg(long)]
    region: Option<String>,
    /// The least size of every part of a multipart upload but the last: smaller only to
    /// test uploads of many parts, as Ceph's rgw_multipart_min_part_size [default: the
    /// configuration's [gw] part_min_bytes, else 5M, S3's].
    #[arg(long, value_parser = crate::text::parse_size)]
    part_min: Option<u64>,
}

#[derive(clap::Subcommand)]
pub enum UserCommand {
    /// Creates a user and prints its access and secret keys (and, for the gateway of the
    /// configuration's pool, the settings of the usual clients).
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
    /// A user's own policies (IAM inline user policies): put, get, ls, rm. A user whose
    /// policies allow `iam:PutUserPolicy` and the like may then manage them over IAM's API.
    #[command(subcommand)]
    Policy(UserPolicyCommand),
}

#[derive(clap::Subcommand)]
pub enum UserPolicyCommand {
    /// Attaches policy NAME to USER, replacing one of that name: an IAM policy document
    /// (JSON) from FILE, or from standard input with `-`.
    Put {
        user: String,
        name: String,
        file: PathBuf,
    },
    /// Prints policy NAME of USER.
    Get { user: String, name: String },
    /// Lists USER's policies.
    Ls { user: String },
    /// Removes policy NAME from USER.
    Rm { user: String, name: String },
}

#[derive(clap::Subcommand)]
pub enum KmsCommand {
    /// Keys of the built-in KMS: create, ls, rotate, rewrap, rm.
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
    /// Adds a version, then rewraps every data key of the gateway's objects and uploads
    /// under it. Data keys stay the same: no data is re-encrypted.
    Rotate {
        name: String,
        /// The gateway's pool [default: the configuration's [gw] pool, else s3].
        #[arg(long)]
        pool: Option<String>,
    },
    /// Rewraps under the newest version what an older version still wraps (what a rotation
    /// left, if it was interrupted or writes raced it).
    Rewrap {
        name: String,
        /// The gateway's pool [default: the configuration's [gw] pool, else s3].
        #[arg(long)]
        pool: Option<String>,
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

/// The KMS the configuration names: its `[kms]` section's Vault or OpenBao transit engine,
/// or KMIP server; else the monitors'.
pub fn configured_kms(
    conf: &Conf,
    cluster: &client::Cluster,
) -> Result<std::sync::Arc<dyn gateway::kms::Kms>, String> {
    use client::conf::KmsBackend;
    let Some(section) = &conf.kms else {
        return Ok(std::sync::Arc::new(gateway::kms::MonitorKms {
            cluster: cluster.clone(),
        }));
    };
    let kms: std::sync::Arc<dyn gateway::kms::Kms> = match section.backend()? {
        KmsBackend::Vault {
            address,
            mount,
            token_file,
            ca,
        } => {
            let token_file = conf.dir.join(token_file);
            let token = std::fs::read_to_string(&token_file)
                .map_err(|e| format!("[kms] token_file {}: {e}", token_file.display()))?;
            let ca = ca.map(|ca| conf.dir.join(ca));
            std::sync::Arc::new(
                gateway::vault::VaultKms::connect(address, mount, &token, ca.as_deref())
                    .map_err(|e| format!("[kms]: {e}"))?,
            )
        }
        KmsBackend::Kmip {
            address,
            certificate,
            private_key,
            ca,
        } => std::sync::Arc::new(
            gateway::kmip::KmipKms::connect(
                address,
                &conf.dir.join(certificate),
                &conf.dir.join(private_key),
                &conf.dir.join(ca),
            )
            .map_err(|e| format!("[kms]: {e}"))?,
        ),
    };
    Ok(kms)
}

pub fn kms(who: &Who, command: KmsCommand) -> Result<(), String> {
    let KmsCommand::Key(command) = command;
    let (conf, runtime, cluster) = connect(who)?;
    let kms = configured_kms(&conf, &cluster)?;
    runtime.block_on(async {
        let done = |result: Result<(), gateway::kms::KmsError>| result.map_err(|e| e.to_string());
        match command {
            KmsKeyCommand::Create { name } => {
                done(kms.create(&name).await)?;
                println!("KMS key {name} created");
            }
            KmsKeyCommand::Rotate { name, pool } => {
                let pool = pool_name(&conf, pool);
                println!("{}", rotate(&cluster, kms.as_ref(), &name, &pool).await?);
            }
            KmsKeyCommand::Rewrap { name, pool } => {
                let pool = pool_name(&conf, pool);
                println!("{}", rewrap(&cluster, kms.as_ref(), &name, &pool).await?);
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
                done(kms.remove(&name).await)?;
                println!("KMS key {name} removed");
            }
            KmsKeyCommand::Ls { json: as_json } => {
                let mut keys = Vec::new();
                for name in kms.keys().await.map_err(|e| e.to_string())? {
                    let newest = kms.newest(&name).await.map_err(|e| e.to_string())?;
                    keys.push((name, newest));
                }
                if as_json {
                    let listed: Vec<_> = keys
                        .iter()
                        .map(|(name, versions)| serde_json::json!({"name": name, "versions": versions}))
                        .collect();
                    return json(&listed);
                }
                for (name, versions) in keys {
                    let versions = crate::text::count(versions.into(), "version", "versions");
                    println!("{name}  ({versions})");
                }
            }
        }
        Ok(())
    })
}

/// Rotates KMS key `name` (a new version wraps new data keys) and rewraps the data keys
/// of the gateway's pool `pool_name` under it; returns what was done, for a person.
pub async fn rotate(
    cluster: &client::Cluster,
    kms: &dyn gateway::kms::Kms,
    name: &str,
    pool_name: &str,
) -> Result<String, String> {
    kms.rotate(name).await.map_err(|e| e.to_string())?;
    let rewrapped = rewrap(cluster, kms, name, pool_name).await.map_err(|e| {
        format!(
            "KMS key {name} rotated, but {e}\nthe rotation itself is done: `coffer kms key \
             rewrap {name}` finishes the rewrap (rotating again would add another version)"
        )
    })?;
    Ok(format!("KMS key {name} rotated\n{rewrapped}"))
}

/// Rewraps the data keys of KMS key `name` in the gateway's pool under its newest version;
/// returns what was done, for a person.
async fn rewrap(
    cluster: &client::Cluster,
    kms: &dyn gateway::kms::Kms,
    name: &str,
    pool_name: &str,
) -> Result<String, String> {
    let newest = kms.newest(name).await.map_err(|e| e.to_string())?;
    let pool = match cluster.pool(pool_name).await {
        Ok(pool) => pool,
        Err(client::Error::NoSuchPool(_)) => {
            return Ok(format!("no gateway pool {pool_name}: nothing to rewrap"));
        }
        Err(e) => return Err(e.to_string()),
    };
    let pools = gateway::Pools::open(pool, None)
        .await
        .map_err(|e| format!("the data pool of gateway pool {pool_name}: {e}"))?;
    let what = format!("rewrap of KMS key {name}");
    let progress = crate::progress::Progress::new(&what, 0, "buckets");
    let rewrapped = gateway::maintenance::rewrap(&pools, kms, name, newest, &|done, total| {
        progress.reached(done, total)
    })
    .await;
    progress.finish();
    let done = rewrapped
        .map_err(|e| format!("rewrapping the data keys of {name} in pool {pool_name}: {e}"))?;
    if done.changed + done.failed > 0 {
        return Err(format!(
            "{} records kept changing during the rewrap and {} could not be rewritten (see \
             the log); run `coffer kms key rewrap {name}` again",
            done.changed, done.failed
        ));
    }
    Ok(format!(
        "rewrapped {} data keys of {} objects and parts in pool {pool_name} under version \
         {newest}",
        done.keys, done.records
    ))
}

pub fn command(who: &Who, command: GwCommand) -> Result<(), String> {
    let (older_than, dry_run, pool) = match command {
        GwCommand::Gc {
            older_than,
            dry_run,
            pool,
        } => (older_than, dry_run, pool),
        GwCommand::Lifecycle(LifecycleCommand::Run { day, pool }) => {
            return lifecycle_run(who, day, pool)
        }
        GwCommand::BucketPolicy(BucketPolicyCommand::Rm { bucket, pool }) => {
            return bucket_policy_rm(who, &bucket, pool)
        }
    };
    let (conf, runtime, cluster) = connect(who)?;
    let pool_name = pool_name(&conf, pool);
    runtime.block_on(async {
        let pools = open_pools(&cluster, &pool_name, None).await?;
        let what = format!("garbage collection in pool {pool_name}");
        let progress = crate::progress::Progress::new(&what, 0, "steps");
        let collected =
            gateway::maintenance::collect(&pools, older_than, dry_run, &|done, total| {
                progress.reached(done, total)
            })
            .await;
        progress.finish();
        let found =
            collected.map_err(|e| format!("collecting garbage in pool {pool_name}: {e}"))?;
        let verb = if dry_run { "would remove" } else { "removed" };
        println!(
            "{verb} {} stripe objects ({} bytes) of {} writes no object or upload names, and \
             {} stray upload records, in pool {pool_name}",
            found.stripes, found.bytes, found.instances, found.uploads
        );
        let verb = if dry_run { "would finish" } else { "finished" };
        println!(
            "{verb} {} multipart completions cut after their commit",
            found.completions
        );
        let verb = if dry_run { "would remove" } else { "removed" };
        println!(
            "{verb} {} sessions that expired or whose user or role is gone",
            found.sessions
        );
        Ok(())
    })
}

/// `coffer gw lifecycle run`: one pass of every bucket's lifecycle rules, with a day of
/// `day`.
fn lifecycle_run(who: &Who, day: Duration, pool: Option<String>) -> Result<(), String> {
    let (conf, runtime, cluster) = connect(who)?;
    let pool_name = pool_name(&conf, pool);
    runtime.block_on(async {
        let pools = open_pools(&cluster, &pool_name, None).await?;
        let day_ns = day.as_nanos().clamp(1, u128::from(u64::MAX)) as u64;
        let free = |freed: Vec<gateway::layout::ObjectEntry>| {
            let data = pools.data.clone();
            Box::pin(async move {
                for entry in &freed {
                    gateway::data::remove(&data, entry).await;
                }
            }) as _
        };
        let done =
            gateway::maintenance::lifecycle(&pools, gateway::layout::now_ns(), day_ns, &free)
                .await
                .map_err(|e| format!("lifecycle of pool {pool_name}: {e}"))?;
        println!("{}", gateway::maintenance::expired_summary(&done));
        Ok(())
    })
}

fn bucket_policy_rm(who: &Who, bucket: &str, pool: Option<String>) -> Result<(), String> {
    let (conf, runtime, cluster) = connect(who)?;
    let pool_name = pool_name(&conf, pool);
    runtime.block_on(async {
        let pool = open_pool(&cluster, &pool_name).await?;
        let removed = gateway::buckets::remove_policy(&pool, bucket)
            .await
            .map_err(|e| e.to_string())?;
        if !removed {
            return Err(format!("bucket {bucket} has no policy"));
        }
        println!("the policy of bucket {bucket} removed");
        Ok(())
    })
}

/// The gateway's pool: `explicit`, else the configuration's, else the default.
pub fn pool_name(conf: &Conf, explicit: Option<String>) -> String {
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

/// The gateway pool `name` and its data pool (`data` if it has none yet).
async fn open_pools(
    cluster: &client::Cluster,
    name: &str,
    data: Option<&str>,
) -> Result<gateway::Pools, String> {
    let pool = open_pool(cluster, name).await?;
    if let Some(data) = data {
        open_pool(cluster, data).await?;
    }
    gateway::Pools::open(pool, data)
        .await
        .map_err(|e| format!("the data pool of gateway pool {name}: {e}"))
}

pub fn serve(who: &Who, args: GwArgs) -> Result<(), String> {
    let (conf, runtime, cluster) = crate::admin::connect_waiting(who)?;
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
    let region = args
        .region
        .or_else(|| conf.gw.as_ref().and_then(|gw| gw.region.clone()))
        .unwrap_or_else(|| gateway::REGION_DEFAULT.to_owned());
    gateway::region_name(&region).map_err(|e| format!("the gateway's region: {e}"))?;
    let pool_name = pool_name(&conf, args.pool);
    runtime.block_on(async {
        let pools = open_pools(&cluster, &pool_name, args.data_pool.as_deref()).await?;
        // Before the socket exists, so that whoever finds it listening finds the pid too.
        if let Some(path) = &args.pid_file {
            std::fs::write(path, format!("{}\n", std::process::id()))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .map_err(|e| format!("the S3 gateway cannot listen on {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let data = match pools.data.name() {
            same if same == pool_name => String::new(),
            other => format!(" (data in pool {other})"),
        };
        println!("coffer gw: serving S3 on pool {pool_name}{data} at {scheme}://{addr}");
        let kms = configured_kms(&conf, &cluster)?;
        let gateway = gateway::Gateway::with_kms(pools, kms)
            .await
            .map_err(|e| format!("starting the gateway: {e}"))?
            .in_region(&region)?
            .with_part_min(
                args.part_min
                    .or_else(|| conf.gw.as_ref().and_then(|gw| gw.part_min_bytes))
                    .unwrap_or(gateway::PART_MIN_BYTES_DEFAULT),
            );
        let day = args
            .lifecycle_day
            .or_else(|| {
                conf.gw
                    .as_ref()
                    .and_then(|gw| gw.lifecycle_day_seconds)
                    .map(Duration::from_secs)
            })
            .unwrap_or(Duration::from_secs(86_400));
        gateway.expire_on_schedule(day);
        let roll = args
            .access_log_roll
            .or_else(|| {
                conf.gw
                    .as_ref()
                    .and_then(|gw| gw.access_log_roll_seconds)
                    .map(Duration::from_secs)
            })
            .unwrap_or(Duration::from_secs(
                gateway::access_log::ROLL_SECONDS_DEFAULT,
            ));
        if roll.is_zero() {
            return Err("--access-log-roll: give a time longer than zero".into());
        }
        gateway.deliver_logs_on_schedule(roll);
        crate::scrape::start(args.metrics.as_ref(), |registry| {
            messenger::metrics::register(registry);
            gateway::metrics::register(registry);
        });
        let serving = tokio::spawn(gateway::serve::serve(listener, gateway.clone(), tls));
        let stopped = tokio::select! {
            result = crate::daemon::stop_signal() => result,
            result = serving => Err(match result {
                Ok(Err(e)) => format!("serving stopped: {e}"),
                _ => "serving stopped".into(),
            }),
        };
        // The access log lines it holds would be lost with the process.
        if tokio::time::timeout(LOG_DELIVERY_ON_STOP, gateway.deliver_all_logs())
            .await
            .is_err()
        {
            crate::daemon::tell(&format!(
                "coffer gw: access logs not all delivered in {LOG_DELIVERY_ON_STOP:?}"
            ));
        }
        stopped
    })
}

#[derive(clap::Args)]
pub struct AccountCli {
    /// The gateway's pool, where its accounts are [default: the configuration's [gw] pool,
    /// else s3].
    #[arg(long, global = true)]
    pool: Option<String>,
    #[command(subcommand)]
    command: AccountCommand,
}

#[derive(clap::Subcommand)]
pub enum AccountCommand {
    /// Creates an account and prints its id and its root's access and secret keys. The
    /// root makes the account's users through IAM's API.
    Create {
        name: String,
        /// The account's email address.
        #[arg(long, default_value = "")]
        email: String,
        #[arg(long)]
        json: bool,
    },
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Removes an account, by id (refused while it has users, groups, roles or buckets).
    Rm { id: String },
}

pub fn account(who: &Who, cli: AccountCli) -> Result<(), String> {
    let (conf, runtime, cluster) = connect(who)?;
    let configured = pool_name(&conf, None);
    let pool_name = pool_name(&conf, cli.pool);
    runtime.block_on(async {
        let pool = open_pool(&cluster, &pool_name).await?;
        match cli.command {
            AccountCommand::Create {
                name,
                email,
                json: as_json,
            } => {
                let root = gateway::accounts::create(&pool, &name, &email)
                    .await
                    .map_err(|e| e.to_string())?;
                let key = root
                    .first_key()
                    .ok_or("the new account's root has no key")?;
                if as_json {
                    return json(&serde_json::json!({
                        "account": root.name,
                        "name": name,
                        "access_key": key.id,
                        "secret_key": key.secret,
                    }));
                }
                println!("account:    {} ({name})", root.name);
                println!("root:       {}", gateway::accounts::root_arn(&root.name));
                print_key(&conf, pool_name == configured, key);
                Ok(())
            }
            AccountCommand::Ls { json: as_json } => {
                let roots = gateway::accounts::roots(&pool)
                    .await
                    .map_err(|e| e.to_string())?;
                let about = |root: &gateway::layout::User| {
                    let account = root.account.as_ref();
                    (
                        account.map_or("", |a| a.name.as_str()).to_owned(),
                        account.map_or("", |a| a.email.as_str()).to_owned(),
                    )
                };
                if as_json {
                    let listed: Vec<_> = roots
                        .iter()
                        .map(|root| {
                            let (name, email) = about(root);
                            serde_json::json!({"account": root.name, "name": name,
                                "email": email, "access_key": key_ids(root)})
                        })
                        .collect();
                    return json(&listed);
                }
                for root in &roots {
                    let (name, email) = about(root);
                    println!("{}  {name}  {email}  {}", root.name, key_ids(root));
                }
                println!("{} accounts", roots.len());
                Ok(())
            }
            AccountCommand::Rm { id } => {
                gateway::accounts::remove(&pool, &id)
                    .await
                    .map_err(|e| e.to_string())?;
                println!("account {id} removed");
                Ok(())
            }
        }
    })
}

#[derive(clap::Args)]
pub struct UserCli {
    /// The gateway's pool, where its users are [default: the configuration's [gw] pool,
    /// else s3].
    #[arg(long, global = true)]
    pool: Option<String>,
    #[command(subcommand)]
    command: UserCommand,
}

/// Prints a new access key and, for the gateway of the configuration's pool (`ours`), the
/// settings of the usual clients.
fn print_key(conf: &Conf, ours: bool, key: &gateway::layout::AccessKey) {
    println!("access key: {}", key.id);
    println!("secret key: {}", key.secret);
    if let Some(gw) = conf.gw.as_ref().filter(|_| ours) {
        let ca = conf.dir.join(GW_DIR).join(gateway::tls::CA_FILE);
        print!("{}", client_settings(gw, &ca, &key.id, &key.secret));
    }
}

/// A user's access keys, as listings show them: comma-separated, inactive ones marked.
pub fn key_ids(user: &gateway::layout::User) -> String {
    let shown: Vec<String> = user
        .keys
        .iter()
        .map(|k| match k.active {
            true => k.id.clone(),
            false => format!("{} (inactive)", k.id),
        })
        .collect();
    shown.join(",")
}

pub fn user(who: &Who, cli: UserCli) -> Result<(), String> {
    let (conf, runtime, cluster) = connect(who)?;
    let configured = pool_name(&conf, None);
    let pool_name = pool_name(&conf, cli.pool);
    let command = cli.command;
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
                let key = user.first_key().ok_or("the new user has no key")?;
                if as_json {
                    return json(&serde_json::json!({
                        "user": user.name,
                        "access_key": key.id,
                        "secret_key": key.secret,
                    }));
                }
                println!("user:       {}", user.name);
                print_key(&conf, pool_name == configured, key);
                Ok(())
            }
            UserCommand::Ls { json: as_json } => {
                let users = gateway::users::list(&pool)
                    .await
                    .map_err(|e| e.to_string())?;
                if as_json {
                    let listed: Vec<_> = users
                        .iter()
                        .map(|u| serde_json::json!({"user": u.name, "access_key": key_ids(u)}))
                        .collect();
                    return json(&listed);
                }
                for user in users {
                    println!("{}  {}", user.name, key_ids(&user));
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
            UserCommand::Policy(command) => user_policy(&pool, command).await,
        }
    })
}

async fn user_policy(pool: &client::Pool, command: UserPolicyCommand) -> Result<(), String> {
    let found = |user: String| async move {
        gateway::users::get(pool, &user)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("user {user} does not exist"))
    };
    match command {
        UserPolicyCommand::Put { user, name, file } => {
            let document = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin())
            } else {
                std::fs::read_to_string(&file)
            }
            .map_err(|e| format!("{}: {e}", file.display()))?;
            gateway::users::set_policy(pool, &user, &user, &name, Some(&document))
                .await
                .map_err(|e| e.to_string())?;
            println!(
                "policy {name} of user {user} set ({} bytes)",
                document.len()
            );
        }
        UserPolicyCommand::Get { user, name } => {
            let found = found(user.clone()).await?;
            let document = found
                .policy(&name)
                .ok_or_else(|| format!("user {user} has no policy {name}"))?;
            println!("{document}");
        }
        UserPolicyCommand::Ls { user } => {
            for (name, document) in found(user).await?.policies {
                println!("{name}  ({} bytes)", document.len());
            }
        }
        UserPolicyCommand::Rm { user, name } => {
            gateway::users::set_policy(pool, &user, &user, &name, None)
                .await
                .map_err(|e| e.to_string())?;
            println!("policy {name} of user {user} removed");
        }
    }
    Ok(())
}

/// The settings that point the usual S3 clients at a gateway, ready to paste: aws-cli,
/// s3cmd, rclone and boto3, path-style, in the gateway's region (`[gw] region`, else
/// us-east-1), trusting the cluster's authority `ca`.
pub fn client_settings(
    gw: &client::conf::GwSection,
    ca: &Path,
    access: &str,
    secret: &str,
) -> String {
    let endpoint = format!("https://{}", gw.listen);
    let region = gw.region.as_deref().unwrap_or(gateway::REGION_DEFAULT);
    let ca = ca.display();
    let host = &gw.listen;
    format!(
        "\nto use it (the gateway at {endpoint}, its certificates signed by {ca}):\n\
         aws-cli:\n  export AWS_ACCESS_KEY_ID={access} AWS_SECRET_ACCESS_KEY={secret} \
         AWS_DEFAULT_REGION={region} AWS_ENDPOINT_URL={endpoint} AWS_CA_BUNDLE={ca}\n  \
         aws s3 ls\n\
         s3cmd:\n  s3cmd --access_key={access} --secret_key={secret} --host={host} \
         --host-bucket={host} --ca-certs={ca} --region={region} ls\n\
         rclone:\n  export RCLONE_CONFIG_COFFER_TYPE=s3 RCLONE_CONFIG_COFFER_PROVIDER=Other \
         RCLONE_CONFIG_COFFER_ACCESS_KEY_ID={access} RCLONE_CONFIG_COFFER_SECRET_ACCESS_KEY={secret} \
         RCLONE_CONFIG_COFFER_ENDPOINT={endpoint} RCLONE_CONFIG_COFFER_FORCE_PATH_STYLE=true \
         RCLONE_CA_CERT={ca}\n  env -u AWS_CA_BUNDLE rclone lsd coffer:   \
         # rclone 1.60's S3 backend fails while AWS_CA_BUNDLE is set\n\
         boto3:\n  s3 = boto3.client(\"s3\", endpoint_url=\"{endpoint}\", verify=\"{ca}\", \
         region_name=\"{region}\", aws_access_key_id=\"{access}\", \
         aws_secret_access_key=\"{secret}\")\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_take_a_unit_or_mean_seconds() {
        assert_eq!(parse_age("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_age("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_age("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_age("1d"), Ok(Duration::from_secs(86400)));
        for bad in ["", "h", "1w", "1.5h", "-1s"] {
            assert!(parse_age(bad).is_err(), "{bad:?}");
        }
    }
}
