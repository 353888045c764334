//! `coffer image` (create, ls, info, du, resize, rm, import, export, lock break) and `coffer nbd serve`: block
//! images over the cluster and their NBD export.

use std::path::PathBuf;
use std::time::Duration;

use block::image::{self, Access};
use block::nbd::{self, Export, TlsPolicy};
use client::Pool;

use crate::admin::{connect, json, Who};

/// How long a stopping NBD server tries to give up its lock.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

#[derive(clap::Subcommand)]
pub enum ImageCommand {
    /// Creates an image of --size bytes (10G, 512M, ...); its data uses no space until written.
    Create {
        /// POOL/NAME
        image: String,
        #[arg(long, value_parser = crate::text::parse_size)]
        size: u64,
        /// Bytes per data object: a power of two from 4K to 32M.
        #[arg(long, value_parser = crate::text::parse_size, default_value = "4M")]
        object_size: u64,
        /// A pool for the image's data objects (an erasure-coded one, say); the header
        /// stays in POOL, which must be replicated.
        #[arg(long)]
        data_pool: Option<String>,
    },
    /// The pool's images.
    Ls {
        pool: String,
        #[arg(long)]
        json: bool,
    },
    /// Size, object size, features, creation time and who holds the lock.
    Info {
        /// POOL/NAME
        image: String,
        #[arg(long)]
        json: bool,
    },
    /// How many of the image's bytes are stored (the rest reads as zeros and uses no space).
    Du {
        /// POOL/NAME
        image: String,
    },
    /// Grows (also while served) or shrinks (discarding the bytes past the new size; refused
    /// while a writer has the image) an image.
    Resize {
        /// POOL/NAME
        image: String,
        #[arg(long, value_parser = crate::text::parse_size)]
        size: u64,
    },
    /// Removes an image and its data; refused while a writer has it.
    Rm {
        /// POOL/NAME
        image: String,
    },
    /// Creates image POOL/NAME from a raw file (a disk image) of the same size; runs of
    /// zeros are not stored.
    Import {
        file: PathBuf,
        /// POOL/NAME
        image: String,
        /// Bytes per data object: a power of two from 4K to 32M.
        #[arg(long, value_parser = crate::text::parse_size, default_value = "4M")]
        object_size: u64,
    },
    /// Writes an image to a new raw file (holes where it stores nothing), or to standard
    /// output with `-`. While a writer writes, the copy mixes old and new bytes: stop it
    /// first for a consistent one.
    Export {
        /// POOL/NAME
        image: String,
        file: PathBuf,
    },
    /// The image's exclusive lock.
    #[command(subcommand)]
    Lock(LockCommand),
}

#[derive(clap::Subcommand)]
pub enum LockCommand {
    /// Fences the lock's holder (the OSDs refuse its writes from now on) and frees the image:
    /// for a writer that crashed or cannot be reached.
    Break {
        /// POOL/NAME
        image: String,
    },
}

#[derive(clap::Subcommand)]
pub enum NbdCommand {
    /// Exports an image over NBD until SIGINT or SIGTERM.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// POOL/NAME
    image: String,
    /// TCP address to listen on.
    #[arg(long, default_value = "127.0.0.1:10809", conflicts_with = "socket")]
    listen: String,
    /// Listen on this Unix socket instead.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Serve reads only; takes no lock, so it may run beside the writer.
    #[arg(long)]
    read_only: bool,
    /// If another writer holds the image, wait until it stops renewing its lock (a crashed
    /// writer), then fence it off and take over, instead of failing at once.
    #[arg(long)]
    wait_lock: bool,
    /// Write this process's id here once it serves.
    #[arg(long)]
    pid_file: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (docs/metrics.md).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// A directory with the server's certificate and key (`server-cert.pem`,
    /// `server-key.pem`, as qemu-nbd names them): clients may then start TLS (`nbds://`
    /// URIs). Needed to listen on an address that is not loopback, where TLS is required.
    #[arg(long)]
    tls_dir: Option<PathBuf>,
    /// Serve nothing without TLS, on loopback too.
    #[arg(long, requires = "tls_dir", conflicts_with = "allow_plain")]
    tls_required: bool,
    /// Serve clients without TLS on an address that is not loopback: the image's data then
    /// crosses that network in the clear. Only for a network you trust.
    #[arg(long)]
    allow_plain: bool,
}

/// The server's certificate and key in a TLS directory (qemu-nbd's names; clients find
/// the authority that signed them as `ca-cert.pem` beside them, as libnbd looks for it).
pub const NBD_TLS_CERT: &str = "server-cert.pem";
pub const NBD_TLS_KEY: &str = "server-key.pem";
pub const NBD_TLS_CA: &str = "ca-cert.pem";

/// Whether TLS is required on `listen` (the addresses a TCP listener's name stands for;
/// `None` for a Unix socket): when asked, and beyond loopback, where data would cross a
/// network in the clear, unless the operator allows plaintext there.
fn tls_required(listen: Option<&[std::net::SocketAddr]>, asked: bool, allow_plain: bool) -> bool {
    asked
        || (!allow_plain
            && listen.is_some_and(|addrs| addrs.iter().any(|addr| !addr.ip().is_loopback())))
}

/// The TLS policy of `nbd serve`, from its arguments.
fn tls_policy(
    args: &ServeArgs,
    listen: Option<&[std::net::SocketAddr]>,
) -> Result<TlsPolicy, String> {
    let required = tls_required(listen, args.tls_required, args.allow_plain);
    let Some(dir) = &args.tls_dir else {
        if required {
            return Err(format!(
                "{} is not a loopback address: NBD beyond loopback needs TLS; give --tls-dir \
                 with {NBD_TLS_CERT} and {NBD_TLS_KEY} (or --allow-plain, on a network you \
                 trust)",
                args.listen
            ));
        }
        return Ok(TlsPolicy::PLAIN);
    };
    let config = gateway::serve::tls_config(&dir.join(NBD_TLS_CERT), &dir.join(NBD_TLS_KEY))?;
    let mut config = (*config).clone();
    config.alpn_protocols.clear();
    Ok(TlsPolicy {
        acceptor: Some(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config))),
        required,
    })
}

/// POOL/NAME, split.
pub fn split_spec(spec: &str) -> Result<(&str, &str), String> {
    match spec.split_once('/') {
        Some((pool, name)) if !pool.is_empty() && !name.is_empty() => Ok((pool, name)),
        _ => Err(format!("{spec:?}: name an image as POOL/NAME")),
    }
}

pub fn image(who: &Who, command: ImageCommand) -> Result<(), String> {
    let (_, runtime, cluster) = connect(who)?;
    let open = |spec: &str| -> Result<(Pool, String), String> {
        let (pool, name) = split_spec(spec)?;
        let pool = runtime
            .block_on(cluster.pool(pool))
            .map_err(|e| e.to_string())?;
        Ok((pool, name.to_string()))
    };
    let fail = |e: block::Error| e.to_string();
    match command {
        ImageCommand::Create {
            image: spec,
            size,
            object_size,
            data_pool,
        } => {
            let (pool, name) = open(&spec)?;
            let data = match &data_pool {
                Some(data) => Some(
                    runtime
                        .block_on(cluster.pool(data))
                        .map_err(|e| e.to_string())?,
                ),
                None => None,
            };
            runtime
                .block_on(image::create_with_data(
                    &pool,
                    &name,
                    size,
                    object_size,
                    data.as_ref(),
                ))
                .map_err(fail)?;
            println!(
                "image {spec} created: {}, {} objects{}",
                crate::text::size(size),
                crate::text::size(object_size),
                data_pool.map_or(String::new(), |data| format!(" in pool {data}"))
            );
            Ok(())
        }
        ImageCommand::Ls {
            pool,
            json: as_json,
        } => {
            let pool = runtime
                .block_on(cluster.pool(&pool))
                .map_err(|e| e.to_string())?;
            let names = runtime.block_on(image::list(&pool)).map_err(fail)?;
            if as_json {
                return json(&names);
            }
            for name in names {
                println!("{name}");
            }
            Ok(())
        }
        ImageCommand::Info {
            image: spec,
            json: as_json,
        } => {
            let (pool, name) = open(&spec)?;
            let info = runtime.block_on(image::info(&pool, &name)).map_err(fail)?;
            let header = &info.header;
            let data_pool = header.data_pool.map(|id| {
                cluster
                    .map()
                    .pools
                    .get(&map::PoolId(id))
                    .map_or(format!("pool id {id}, which does not exist"), |p| {
                        p.name.clone()
                    })
            });
            if as_json {
                return json(&serde_json::json!({
                    "image": spec,
                    "id": format!("{:016x}", header.id),
                    "size": header.size,
                    "object_size": header.object_size,
                    "features": header.features,
                    "created_unix_secs": header.created_unix_secs,
                    "trimming_from": header.trimming_from,
                    "data_pool": data_pool,
                    "lock": info.lock,
                }));
            }
            println!("image {spec}");
            println!("  size:         {}", crate::text::size(header.size));
            println!("  object size:  {}", crate::text::size(header.object_size));
            println!(
                "  objects:      coffer.data.{:016x}.* in pool {}",
                header.id,
                data_pool.as_deref().unwrap_or(pool.name())
            );
            println!("  features:     {:#x}", header.features);
            println!(
                "  created:      {}",
                crate::text::date(i128::from(header.created_unix_secs) * 1_000_000_000)
            );
            if let Some(from) = header.trimming_from {
                println!(
                    "  shrinking:    from {} (finished by the next writer)",
                    crate::text::size(from)
                );
            }
            match &info.lock {
                Some(owner) => println!("  locked by:    {owner}"),
                None => println!("  locked by:    nobody"),
            }
            Ok(())
        }
        ImageCommand::Du { image: spec } => {
            let (pool, name) = open(&spec)?;
            let opened = runtime
                .block_on(block::Image::open(&pool, &name, Access::ReadOnly))
                .map_err(fail)?;
            let runs = runtime
                .block_on(opened.allocation(0, opened.size()))
                .map_err(fail)?;
            let stored: u64 = runs.iter().filter(|r| r.1).map(|r| r.0).sum();
            println!(
                "{spec}: {} of {} stored ({:.1} %)",
                crate::text::size(stored),
                crate::text::size(opened.size()),
                100.0 * stored as f64 / opened.size().max(1) as f64
            );
            Ok(())
        }
        ImageCommand::Resize { image: spec, size } => {
            let (pool, name) = open(&spec)?;
            runtime
                .block_on(image::resize(&pool, &name, size))
                .map_err(fail)?;
            println!("image {spec} is now {}", crate::text::size(size));
            Ok(())
        }
        ImageCommand::Rm { image: spec } => {
            let (pool, name) = open(&spec)?;
            runtime
                .block_on(image::remove(&pool, &name))
                .map_err(fail)?;
            println!("image {spec} removed");
            Ok(())
        }
        ImageCommand::Import {
            file,
            image: spec,
            object_size,
        } => {
            let (pool, name) = open(&spec)?;
            runtime.block_on(crate::transfer::import(
                &pool,
                &name,
                &spec,
                &file,
                object_size,
            ))
        }
        ImageCommand::Export { image: spec, file } => {
            let (pool, name) = open(&spec)?;
            runtime.block_on(crate::transfer::export(&pool, &name, &spec, &file))
        }
        ImageCommand::Lock(LockCommand::Break { image: spec }) => {
            let (pool, name) = open(&spec)?;
            match runtime
                .block_on(image::break_lock(&pool, &name))
                .map_err(fail)?
            {
                Some(owner) => println!(
                    "lock of {spec} broken; {} (instance {:016x}) is fenced off",
                    owner.entity, owner.instance
                ),
                None => println!("{spec} was not locked"),
            }
            Ok(())
        }
    }
}

pub fn nbd(who: &Who, command: NbdCommand) -> Result<(), String> {
    let NbdCommand::Serve(args) = command;
    let (pool_name, name) = split_spec(&args.image)?;
    // Decided before the image is opened (and its lock taken).
    let tls = match &args.socket {
        Some(_) => tls_policy(&args, None)?,
        None => {
            use std::net::ToSocketAddrs;
            let wanted: Vec<std::net::SocketAddr> = args
                .listen
                .to_socket_addrs()
                .map_err(|e| format!("--listen {}: {e}", args.listen))?
                .collect();
            tls_policy(&args, Some(&wanted))?
        }
    };
    let (_, runtime, cluster) = crate::admin::connect_waiting(who)?;
    runtime.block_on(async {
        let pool = cluster.pool(pool_name).await.map_err(|e| e.to_string())?;
        let access = if args.read_only {
            Access::ReadOnly
        } else {
            Access::Write {
                purpose: "nbd serve",
                wait_stale: args.wait_lock,
            }
        };
        let opened = block::Image::open(&pool, name, access)
            .await
            .map_err(|e| e.to_string())?;
        let export = Export::new(opened.clone(), name);
        let serving = match &args.socket {
            Some(path) => {
                let _ = std::fs::remove_file(path);
                let listener = tokio::net::UnixListener::bind(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                println!(
                    "coffer nbd: serving {} ({}) at nbd+unix:///{name}?socket={}",
                    args.image,
                    crate::text::size(opened.size()),
                    path.display()
                );
                tokio::spawn(nbd::serve_unix(listener, export.clone(), tls))
            }
            None => {
                let listener = tokio::net::TcpListener::bind(&args.listen)
                    .await
                    .map_err(|e| format!("the NBD server cannot listen on {}: {e}", args.listen))?;
                let addr = listener.local_addr().map_err(|e| e.to_string())?;
                let uri = match (&tls.acceptor, tls.required, &args.tls_dir) {
                    (None, _, _) | (_, _, None) => format!("nbd://{addr}/{name}"),
                    (Some(_), required, Some(dir)) => format!(
                        "nbds://{addr}/{name}?tls-certificates={}{}",
                        dir.display(),
                        if required {
                            " (TLS required)"
                        } else {
                            " (or nbd:// without TLS)"
                        }
                    ),
                };
                println!(
                    "coffer nbd: serving {} ({}) at {uri}",
                    args.image,
                    crate::text::size(opened.size())
                );
                tokio::spawn(nbd::serve_tcp(listener, export.clone(), tls))
            }
        };
        crate::scrape::start(args.metrics.as_ref(), |registry| {
            messenger::metrics::register(registry);
            block::metrics::register(registry);
        });
        if let Some(path) = &args.pid_file {
            std::fs::write(path, format!("{}\n", std::process::id()))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let stopped = tokio::select! {
            result = crate::daemon::stop_signal() => result,
            result = serving => match result {
                Ok(Err(e)) => Err(format!("serving stopped: {e}")),
                _ => Err("serving stopped".into()),
            },
        };
        // No write may reach the cluster after the lock is given up.
        let _drained = export.drain().await;
        match tokio::time::timeout(RELEASE_WAIT, opened.close()).await {
            Ok(result) => result.map_err(|e| e.to_string())?,
            Err(_) => crate::daemon::tell(&format!(
                "coffer nbd: the cluster did not answer within {RELEASE_WAIT:?}; the lock of {} \
                 stays until it goes stale",
                args.image
            )),
        }
        if let Some(path) = &args.socket {
            let _ = std::fs::remove_file(path);
        }
        stopped
    })
}

#[cfg(test)]
mod tests {
    use super::tls_required;

    #[test]
    fn tls_is_required_beyond_loopback_or_when_asked() {
        let at = |text: &str| vec![text.parse::<std::net::SocketAddr>().expect("address")];
        assert!(!tls_required(
            Some(&at("127.0.0.1:10809")[..]),
            false,
            false
        ));
        assert!(!tls_required(
            Some(&at("127.3.4.5:10809")[..]),
            false,
            false
        ));
        assert!(!tls_required(Some(&at("[::1]:10809")[..]), false, false));
        assert!(!tls_required(None, false, false));
        assert!(tls_required(Some(&at("10.0.0.5:10809")[..]), false, false));
        assert!(tls_required(Some(&at("0.0.0.0:10809")[..]), false, false));
        assert!(tls_required(Some(&at("[::]:10809")[..]), false, false));
        assert!(tls_required(Some(&at("127.0.0.1:10809")[..]), true, false));
        assert!(!tls_required(Some(&at("10.0.0.5:10809")[..]), false, true));
    }
}
