//! `coffer bench s3`: N concurrent S3 clients doing PUT, then GET, of 4 MiB and 64 KiB
//! objects for a set time against a fresh `coffer up` cluster's gateway, over plain HTTP and
//! over TLS, without server-side encryption, with SSE-S3 and with SSE-C, with the content
//! in a replicated pool and in the erasure-coded data pools `--pool-types` names. Each
//! cell is a percent of plain HTTP without SSE in the first pool type from the same run,
//! with MiB/s, ops/s, latency and the gateway's CPU seconds per GiB, and each pool type's
//! raw space per byte stored.
//!
//! With `--endpoint`, the same load goes to any S3 server instead (radosgw, another
//! Coffer), over the transports its endpoints name, with the server's CPU counted from the
//! processes `--gateway-pid` and `--cluster-pid` name; what the bench wrote is removed.
//!
//! The clients are this process: each holds one HTTP/1.1 keep-alive connection (TLS through
//! rustls when the cell says so) and signs every request with SigV4 (aws-sigv4), as any S3
//! SDK does.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use md5::Digest;
use serde::Serialize;

use super::fresh::{FreshArgs, FreshCluster};
use super::pool_type::{parse_pool_type, settled_usage, PoolType};
use super::report::{
    cpu_seconds, histogram, mean_and_stddev, percent_of, print_header, size_label, write_json,
    Rates,
};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// Objects each client cycles through, so the space a run takes stays bounded.
const KEYS_PER_CLIENT: u64 = 8;
const REGION: &str = "us-east-1";

#[derive(clap::Args)]
pub struct S3Args {
    /// A reduced run (2 s cells) that finishes in about two minutes.
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    fresh: FreshArgs,
    /// Concurrent clients, each with its own connection and one request in flight.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Runs every configuration this many times (on the same cluster, in turn), and reports
    /// the mean and standard deviation of each cell's percent of the baseline.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Object sizes, comma-separated (64k, 4m).
    #[arg(long, value_delimiter = ',', default_value = "4m,64k", value_parser = parse_size)]
    io_sizes: Vec<u64>,
    /// Where the gateway's pool is sealed: edge (the gateway seals, as the pool's client;
    /// the stores keep gcm for names and metadata), as `coffer up` makes it, or osd (the
    /// stores seal, at rest gcm).
    #[arg(long, default_value = "edge", value_parser = ["edge", "osd"])]
    seal: String,
    /// Where the objects' content is kept, comma-separated: replicated (the gateway's own
    /// pool, as `coffer up` makes it) or ec:K+M (an erasure-coded data pool made for the
    /// run, with a gateway pool of its own, both sealed as --seal says; needs K + M OSDs). Every
    /// configuration is measured in each.
    #[arg(long, value_delimiter = ',', default_value = "replicated", value_parser = parse_pool_type)]
    pool_types: Vec<PoolType>,
    /// Server-side encryption of the configurations, comma-separated: none, sse-s3, sse-c
    /// (each measured over every transport; the first is the baseline's).
    #[arg(long, value_delimiter = ',', default_value = "none,sse-s3,sse-c", value_parser = parse_sse)]
    sse: Vec<Sse>,
    /// Measures this S3 server instead of a fresh cluster: http://HOST:PORT and/or
    /// https://HOST:PORT (one of each at most, comma-separated), each a transport of the
    /// configurations, the first the baseline's. Needs --access-key and --secret-key.
    #[arg(long, value_delimiter = ',', value_parser = parse_endpoint)]
    endpoint: Vec<Endpoint>,
    /// The access key of the user the bench signs as on --endpoint; it makes buckets.
    #[arg(long, requires = "endpoint")]
    access_key: Option<String>,
    /// That user's secret key.
    #[arg(long, requires = "endpoint")]
    secret_key: Option<String>,
    /// The authority (PEM) that signed an https --endpoint's certificate.
    #[arg(long, requires = "endpoint")]
    ca: Option<std::path::PathBuf>,
    /// Processes of the --endpoint's gateway (radosgw), comma-separated pids: their CPU
    /// seconds per GiB are the "gw s/GiB" column.
    #[arg(long, value_delimiter = ',', requires = "endpoint")]
    gateway_pid: Vec<u32>,
    /// The other processes of the --endpoint's cluster (OSDs, monitors), comma-separated
    /// pids: the "OSDs s/GiB" column.
    #[arg(long, value_delimiter = ',', requires = "endpoint")]
    cluster_pid: Vec<u32>,
}

fn parse_size(text: &str) -> Result<u64, String> {
    match text.to_ascii_lowercase().as_str() {
        "64k" => Ok(64 * KIB),
        "4m" => Ok(4 * MIB),
        other => Err(format!("unknown object size {other:?}; expected 64k or 4m")),
    }
}

fn parse_sse(text: &str) -> Result<Sse, String> {
    match text.to_ascii_lowercase().as_str() {
        "none" => Ok(Sse::None),
        "sse-s3" => Ok(Sse::S3),
        "sse-c" => Ok(Sse::Customer),
        other => Err(format!(
            "unknown server-side encryption {other:?}; expected none, sse-s3 or sse-c"
        )),
    }
}

/// An S3 server's address, and whether it speaks TLS there.
#[derive(Clone, Debug, PartialEq)]
struct Endpoint {
    tls: bool,
    /// HOST:PORT, as connected to and as the Host header.
    addr: String,
}

fn parse_endpoint(text: &str) -> Result<Endpoint, String> {
    let (tls, rest) = match text.split_once("://") {
        Some(("https", rest)) => (true, rest),
        Some(("http", rest)) => (false, rest),
        _ => {
            return Err(format!(
                "{text:?}: give http://HOST:PORT or https://HOST:PORT"
            ))
        }
    };
    let host_port = rest.strip_suffix('/').unwrap_or(rest);
    if host_port.is_empty() || host_port.contains(['/', '?', '@']) {
        return Err(format!(
            "{text:?}: give the server alone (scheme, host and port), no path, query or user"
        ));
    }
    // A bracketed IPv6 address without a port ends in ']'.
    let has_port = !host_port.ends_with(']')
        && host_port
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    let addr = if has_port {
        host_port.to_string()
    } else {
        format!("{host_port}:{}", if tls { 443 } else { 80 })
    };
    Ok(Endpoint { tls, addr })
}

/// One configuration: the transport and the server-side encryption.
#[derive(Clone, Copy)]
struct Config {
    tls: bool,
    sse: Sse,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Sse {
    None,
    S3,
    Customer,
}

impl Sse {
    fn name(self) -> &'static str {
        match self {
            Sse::None => "none",
            Sse::S3 => "sse-s3",
            Sse::Customer => "sse-c",
        }
    }
}

impl Config {
    fn label(&self) -> String {
        let transport = if self.tls { "https" } else { "http" };
        format!("{transport}/{}", self.sse.name())
    }
}

/// The configurations in order: each encryption (once, however often it is named) over
/// each transport, the baseline (the first of both) first.
fn configs(transports: &[bool], sses: &[Sse]) -> Vec<Config> {
    let mut once: Vec<Sse> = Vec::new();
    for &sse in sses {
        if !once.contains(&sse) {
            once.push(sse);
        }
    }
    once.into_iter()
        .flat_map(|sse| transports.iter().map(move |&tls| Config { tls, sse }))
        .collect()
}

#[derive(Debug, Serialize)]
struct Cell {
    repetition: usize,
    config: String,
    /// Where the objects' content is kept (`replicated`, `ec:4+2`).
    pool_type: String,
    transport: String,
    sse: String,
    object_size: u64,
    op: String,
    clients: usize,
    #[serde(flatten)]
    rates: Rates,
    /// CPU seconds of the gateway serving the cell, per GiB moved.
    gateway_cpu_s_per_gib: f64,
    pct_of_baseline: f64,
}

/// What every client needs to reach and sign for the gateway.
#[derive(Clone)]
struct Target {
    addr: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    access_key: String,
    secret_key: String,
    /// SSE-C headers' values: the key and its MD5, base64.
    customer: (String, String),
}

/// One client: a keep-alive connection to the gateway.
struct S3Client {
    send: SendRequest<Full<Bytes>>,
    /// The task driving the connection: its error is why a request failed.
    connection: tokio::task::JoinHandle<Result<(), String>>,
    target: Target,
}

impl S3Client {
    async fn connect(target: &Target) -> Result<S3Client, String> {
        let stream = tokio::net::TcpStream::connect(&target.addr)
            .await
            .map_err(|e| format!("{}: {e}", target.addr))?;
        let _ = stream.set_nodelay(true);
        let (send, connection) = match &target.tls {
            Some(config) => {
                let host = target.addr.rsplit_once(':').map_or("", |(host, _)| host);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| e.to_string())?;
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, stream)
                    .await
                    .map_err(|e| format!("TLS to {}: {e}", target.addr))?;
                handshake(TokioIo::new(tls)).await?
            }
            None => handshake(TokioIo::new(stream)).await?,
        };
        Ok(S3Client {
            send,
            connection,
            target: target.clone(),
        })
    }

    /// Sends a signed request; returns the bytes of the response body.
    async fn call(
        &mut self,
        method: &str,
        path: &str,
        body: Bytes,
        sse: Sse,
    ) -> Result<u64, String> {
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("https://{}{path}", self.target.addr))
            .header("host", &self.target.addr);
        let writing = method == "PUT";
        match sse {
            Sse::S3 if writing => {
                request = request.header("x-amz-server-side-encryption", "AES256")
            }
            Sse::Customer => {
                let (key, md5) = &self.target.customer;
                request = request
                    .header("x-amz-server-side-encryption-customer-algorithm", "AES256")
                    .header("x-amz-server-side-encryption-customer-key", key)
                    .header("x-amz-server-side-encryption-customer-key-md5", md5);
            }
            _ => {}
        }
        let mut request = request
            .header("content-length", body.len())
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        self.sign(&mut request)?;
        // The signature covers the https:// URI above; hyper sends the path alone.
        *request.uri_mut() = path.parse().map_err(|e| format!("{path}: {e}"))?;
        // The connection takes the next request only once it has finished the last.
        let ready = self.send.ready().await;
        let response = match ready.map(|()| self.send.send_request(request)) {
            Ok(sent) => sent.await,
            Err(e) => Err(e),
        };
        let response = match response {
            Ok(response) => response,
            Err(e) if self.connection.is_finished() => {
                let why = match (&mut self.connection).await {
                    Ok(Err(why)) => why,
                    _ => "closed".into(),
                };
                return Err(format!("{method} {path}: {e}: the connection: {why}"));
            }
            Err(e) => return Err(format!("{method} {path}: {e}")),
        };
        let status = response.status();
        // A server that ignores an SSE header stores the object as it came: its cell
        // would measure no encryption under an encryption's name.
        let said = |name: &str| response.headers().get(name).is_some_and(|v| v == "AES256");
        let unsealed = match sse {
            Sse::S3 if writing => !said("x-amz-server-side-encryption"),
            Sse::Customer => !said("x-amz-server-side-encryption-customer-algorithm"),
            _ => false,
        };
        if status.is_success() && unsealed {
            return Err(format!(
                "{method} {path}: the server answered without saying it applied {} (no \
                 AES256 in its x-amz-server-side-encryption headers); leave {} out (--sse)",
                sse.name(),
                sse.name()
            ));
        }
        let mut body = response.into_body();
        let mut bytes = 0u64;
        let mut text = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() {
                bytes += data.len() as u64;
                if !status.is_success() {
                    text.extend_from_slice(&data);
                }
            }
        }
        if !status.is_success() {
            return Err(format!(
                "{method} {path}: {status}: {}",
                String::from_utf8_lossy(&text)
            ));
        }
        Ok(bytes)
    }

    fn sign(&self, request: &mut http::Request<Full<Bytes>>) -> Result<(), String> {
        use aws_sigv4::http_request::{
            sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings,
        };
        let credentials = aws_credential_types::Credentials::new(
            &self.target.access_key,
            &self.target.secret_key,
            None,
            None,
            "coffer-bench",
        );
        let identity = credentials.into();
        let mut settings = SigningSettings::default();
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(REGION)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|e| e.to_string())?
            .into();
        let headers: Vec<(&str, &str)> = request
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
            .collect();
        let uri = request.uri().to_string();
        let signable = SignableRequest::new(
            request.method().as_str(),
            uri,
            headers.into_iter(),
            SignableBody::UnsignedPayload,
        )
        .map_err(|e| e.to_string())?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| e.to_string())?
            .into_parts();
        instructions.apply_to_request_http1x(request);
        Ok(())
    }
}

type Connected = (
    SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<Result<(), String>>,
);

async fn handshake<T>(io: TokioIo<T>) -> Result<Connected, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(async move { connection.await.map_err(|e| format!("{e:?}")) });
    Ok((send, driver))
}

/// A TLS client configuration that trusts the gateway's authority (`ca`).
fn tls_config(ca: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca)
        .map_err(|e| format!("{}: {e}", ca.display()))?
    {
        roots
            .add(cert.map_err(|e| format!("{}: {e}", ca.display()))?)
            .map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// One phase: every client runs `op` on its own keys back to back for `seconds`.
async fn phase(
    clients: &mut Vec<S3Client>,
    bucket: &str,
    put: bool,
    size: u64,
    sse: Sse,
    seconds: f64,
) -> Result<(u64, Histogram<u64>), String> {
    let data = Bytes::from(
        (0..size)
            .map(|i| (i * 131 % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for (c, mut client) in clients.drain(..).enumerate() {
        let (data, bucket) = (data.clone(), bucket.to_string());
        tasks.spawn(async move {
            let mut hist = histogram();
            let mut done = 0u64;
            while Instant::now() < deadline {
                let path = format!(
                    "/{bucket}/{}/c{c}-{}",
                    size_label(size),
                    done % KEYS_PER_CLIENT
                );
                let started = Instant::now();
                if put {
                    client.call("PUT", &path, data.clone(), sse).await?;
                } else {
                    let got = client.call("GET", &path, Bytes::new(), sse).await?;
                    if got != size {
                        return Err(format!("GET {path}: {got} bytes, expected {size}"));
                    }
                }
                hist.record(started.elapsed().as_nanos() as u64)
                    .map_err(|e| e.to_string())?;
                done += 1;
            }
            Ok::<_, String>((c, client, done, hist))
        });
    }
    let mut total = 0;
    let mut merged = histogram();
    let mut finished = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (c, client, done, hist) = joined.map_err(|e| e.to_string())??;
        finished.push((c, client, done));
        total += done;
        merged.add(&hist).map_err(|e| e.to_string())?;
    }
    finished.sort_by_key(|(c, _, _)| *c);
    for (c, mut client, done) in finished {
        // A GET phase reads every client's keys: write those the PUT phase did not reach.
        if put {
            for i in done..KEYS_PER_CLIENT {
                let path = format!("/{bucket}/{}/c{c}-{i}", size_label(size));
                client.call("PUT", &path, data.clone(), sse).await?;
            }
        }
        clients.push(client);
    }
    Ok((total, merged))
}

/// A gateway the bench starts beside the cluster's own, logging to a file of its own in the
/// cluster's directory; stopped when dropped.
struct BenchGateway {
    child: std::process::Child,
    pid_file: std::path::PathBuf,
    log: std::path::PathBuf,
}

impl BenchGateway {
    /// `coffer gw` named `name` on `addr`, for the gateway pool `pool` and its content in
    /// `data` if given, over plain HTTP or over TLS with the certificate `coffer up` made
    /// for its own gateway (for this address too).
    fn start(
        cluster: &FreshCluster,
        name: &str,
        addr: &str,
        tls: bool,
        (pool, data): (&str, Option<&str>),
    ) -> Result<BenchGateway, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let pid_file = cluster.dir().join(format!("{name}.pid"));
        let log_path = cluster.dir().join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
        let mut command = std::process::Command::new(exe);
        cluster.pin(&mut command);
        command
            .arg("--conf")
            .arg(cluster.conf_path())
            .args(["gw", "--listen", addr, "--pool", pool, "--pid-file"])
            .arg(&pid_file);
        if !tls {
            command.arg("--plain-http");
        }
        if let Some(data) = data {
            command.args(["--data-pool", data]);
        }
        let child = command
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting gateway {name}: {e}"))?;
        Ok(BenchGateway {
            child,
            pid_file,
            log: log_path,
        })
    }

    fn cpu_seconds(&self) -> f64 {
        super::fresh::pid_file_cpu_seconds(&self.pid_file)
    }
}

impl Drop for BenchGateway {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child, which has not been reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// One pool type's gateways, HTTPS and plain HTTP on one gateway pool, and its user.
struct Front {
    /// The pool holding the objects' content.
    data_pool: String,
    https_addr: String,
    /// The HTTPS gateway the bench started (`None`: `coffer up`'s own).
    https: Option<BenchGateway>,
    http_addr: String,
    http: BenchGateway,
    /// The bench user's access key.
    key: gateway::layout::AccessKey,
}

impl Front {
    /// Starts `pool_type`'s gateways: for a replicated one, a plain-HTTP gateway beside
    /// `coffer up`'s on its pool; for an erasure-coded one, both on a gateway pool made
    /// for it, whose content goes to the coded pool, both sealed at the edge with `edge`
    /// (as `coffer up`'s pools are), else by the OSDs.
    async fn start(
        cluster: &FreshCluster,
        admin: &client::Cluster,
        pool_type: PoolType,
        https_addr: &str,
        edge: bool,
    ) -> Result<Front, String> {
        let http_addr = format!("127.0.0.1:{}", crate::up::free_loopback_port()?);
        let name = pool_type.slug();
        let (gw_pool, data_pool, https) = match pool_type {
            PoolType::Replicated => {
                let pool = client::conf::GW_POOL_DEFAULT.to_string();
                (pool.clone(), pool, None)
            }
            PoolType::Erasure(_) => {
                let data = pool_type.pool(admin, edge).await?;
                let pool = format!("bench-gw-{name}");
                crate::admin::create_pool(admin, &pool, crate::admin::DEFAULT_PG_NUM, edge).await?;
                super::fresh::wait_clean(admin).await?;
                let gateway = BenchGateway::start(
                    cluster,
                    &format!("gw-https-{name}"),
                    https_addr,
                    true,
                    (&pool, Some(&data)),
                )?;
                wait_listening(https_addr, &gateway.log).await?;
                (pool, data, Some(gateway))
            }
        };
        let data = (gw_pool != data_pool).then_some(data_pool.as_str());
        let http = BenchGateway::start(
            cluster,
            &format!("gw-http-{name}"),
            &http_addr,
            false,
            (&gw_pool, data),
        )?;
        wait_listening(&http_addr, &http.log).await?;
        let pool = admin.pool(&gw_pool).await.map_err(|e| e.to_string())?;
        let user = gateway::users::create(&pool, "bench")
            .await
            .map_err(|e| e.to_string())?;
        let key = user.first_key().ok_or("the bench user has no key")?.clone();
        Ok(Front {
            data_pool,
            https_addr: https_addr.to_string(),
            https,
            http_addr,
            http,
            key,
        })
    }

    /// The CPU seconds of the gateway serving `tls` or plain HTTP so far.
    fn gateway_cpu(&self, cluster: &FreshCluster, tls: bool) -> f64 {
        match (&self.https, tls) {
            (_, false) => self.http.cpu_seconds(),
            (Some(https), true) => https.cpu_seconds(),
            (None, true) => cluster.daemon_cpu_seconds(crate::gw::GW_DIR),
        }
    }
}

/// Lines of a gateway's log an error about it quotes.
const LOG_TAIL_LINES: usize = 20;

/// Waits until the gateway logging to `log` accepts connections at `addr`; if it does not
/// within a minute, the error quotes the end of its log (the cluster's directory, and the
/// log with it, is removed when the bench ends).
async fn wait_listening(addr: &str, log: &std::path::Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        if Instant::now() > deadline {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
            return Err(format!(
                "no gateway listens on {addr}; the end of {}:\n{tail}",
                log.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

pub fn run(args: S3Args) -> Result<(), String> {
    if args.endpoint.is_empty() {
        run_fresh(&args)
    } else {
        run_endpoint(&args)
    }
}

/// What every configuration is measured with.
struct Load {
    clients: usize,
    sizes: Vec<u64>,
    seconds: f64,
}

impl Load {
    fn of(args: &S3Args) -> Load {
        Load {
            clients: args.clients.max(1),
            sizes: args.io_sizes.clone(),
            seconds: args.fresh.seconds(args.quick),
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} clients in this process, one keep-alive connection and one request in flight \
             each, SigV4-signed; PUT then GET of {:?}; {} s per cell",
            self.clients,
            self.sizes
                .iter()
                .map(|s| size_label(*s))
                .collect::<Vec<_>>(),
            self.seconds
        )
    }
}

/// How a configuration's cells are named in the table and the JSON.
struct Named {
    repetition: usize,
    config: String,
    pool_type: String,
}

/// The CPU seconds a server has used so far, serving over TLS or not: the rest of its
/// cluster's, then its gateway's.
type ServerCpu<'a> = &'a dyn Fn(bool) -> (f64, f64);

/// Measures `config` on `target`: PUT, then GET, of each of `load`'s sizes for its time,
/// by its clients, in `bucket` (made first if `make_bucket`); one cell each.
async fn measure(
    target: &Target,
    config: Config,
    (bucket, make_bucket): (&str, bool),
    load: &Load,
    named: &Named,
    server_cpu: ServerCpu<'_>,
) -> Result<Vec<Cell>, String> {
    let mut clients = Vec::new();
    for _ in 0..load.clients {
        clients.push(S3Client::connect(target).await?);
    }
    if make_bucket {
        clients[0]
            .call("PUT", &format!("/{bucket}"), Bytes::new(), Sse::None)
            .await?;
    }
    let mut cells = Vec::new();
    for &size in &load.sizes {
        for put in [true, false] {
            let ((cluster_before, gateway_before), client_before) =
                (server_cpu(config.tls), cpu_seconds());
            let started = Instant::now();
            let (ops, hist) =
                phase(&mut clients, bucket, put, size, config.sse, load.seconds).await?;
            let elapsed = started.elapsed().as_secs_f64();
            let (cluster_after, gateway_after) = server_cpu(config.tls);
            let rates = Rates::new(
                ops,
                size,
                elapsed,
                &hist,
                cluster_after - cluster_before,
                cpu_seconds() - client_before,
            );
            let gib = rates.mib_s * elapsed / 1024.0;
            let cell = Cell {
                repetition: named.repetition,
                config: named.config.clone(),
                pool_type: named.pool_type.clone(),
                transport: if config.tls { "https" } else { "http" }.into(),
                sse: config.sse.name().into(),
                object_size: size,
                op: if put { "put" } else { "get" }.into(),
                clients: load.clients,
                rates,
                gateway_cpu_s_per_gib: if gib > 0.0 {
                    (gateway_after - gateway_before) / gib
                } else {
                    0.0
                },
                pct_of_baseline: 0.0,
            };
            eprintln!(
                "{:<20} {:>3} {}: {:>7.0} ops/s {:>8.1} MiB/s, gateway CPU {:.2} s/GiB",
                cell.config,
                size_label(size),
                cell.op,
                cell.rates.ops_s,
                cell.rates.mib_s,
                cell.gateway_cpu_s_per_gib
            );
            cells.push(cell);
        }
    }
    Ok(cells)
}

/// A fresh SSE-C key's headers: the key and its MD5, base64.
fn customer_key() -> (String, String) {
    let key: [u8; 32] = rand::random();
    let b64 = base64::engine::general_purpose::STANDARD;
    (b64.encode(key), b64.encode(md5::Md5::digest(key)))
}

/// The bench against a fresh `coffer up` cluster of its own.
fn run_fresh(args: &S3Args) -> Result<(), String> {
    args.fresh.place()?;
    for pool_type in &args.pool_types {
        pool_type.check_osds(args.fresh.osds)?;
    }
    let load = Load::of(args);
    let configs = configs(&[false, true], &args.sse);
    let pools = args
        .pool_types
        .iter()
        .map(|t| {
            t.describe(args.fresh.osds)
                .map(|d| format!("{} ({d})", t.label()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    print_header(
        "coffer bench s3",
        &[
            (
                "configurations",
                format!(
                    "http|https x SSE {}, in each of {}; baseline {} in {}",
                    sse_names(&args.sse),
                    pools.join(", "),
                    configs[0].label(),
                    args.pool_types[0].label()
                ),
            ),
            (
                "cluster",
                format!(
                    "one fresh `coffer up` (at rest gcm, in transit secure, its pools sealed at \
                     the {}): 1 monitor, {} OSDs, its HTTPS gateway and a plain-HTTP one on the \
                     same pool; for a coded pool, both on a gateway pool of its own, sealed \
                     alike; under {}",
                    args.seal,
                    args.fresh.osds,
                    args.fresh.dir.display()
                ),
            ),
            ("load", load.describe()),
        ],
    );
    let dir = args.fresh.dir.join(format!("s3-{}", std::process::id()));
    let https_addr = format!("127.0.0.1:{}", crate::up::free_loopback_port()?);
    let at_rest = match args.seal.as_str() {
        "edge" => super::fresh::EDGE,
        _ => "gcm",
    };
    let cluster = FreshCluster::start(
        &dir,
        &args.fresh,
        at_rest,
        "secure",
        None,
        Some(&https_addr),
        false,
    )?;
    let conf = cluster.conf()?;
    let runtime = crate::daemon::runtime()?;
    let mut cells: Vec<Cell> = Vec::new();
    let mut spaces = Vec::new();
    runtime.block_on(async {
        let admin = super::fresh::connect_admin(&conf).await?;
        super::fresh::wait_clean(&admin).await?;
        let https_log = cluster.dir().join(crate::gw::GW_DIR).join("log");
        wait_listening(&https_addr, &https_log).await?;
        let customer = customer_key();
        let tls = tls_config(&conf.dir.join(crate::gw::GW_DIR).join(gateway::tls::CA_FILE))?;
        for pool_type in &args.pool_types {
            let https_addr = match pool_type {
                PoolType::Replicated => https_addr.clone(),
                PoolType::Erasure(_) => {
                    format!("127.0.0.1:{}", crate::up::free_loopback_port()?)
                }
            };
            let front = Front::start(
                &cluster,
                &admin,
                *pool_type,
                &https_addr,
                args.seal == "edge",
            )
            .await?;
            let server_cpu = |tls: bool| (cluster.cpu_seconds(), front.gateway_cpu(&cluster, tls));
            for (repetition, config) in
                (0..args.repeat.max(1)).flat_map(|r| configs.iter().map(move |c| (r, *c)))
            {
                let target = Target {
                    addr: if config.tls {
                        &front.https_addr
                    } else {
                        &front.http_addr
                    }
                    .clone(),
                    tls: config.tls.then(|| tls.clone()),
                    access_key: front.key.id.clone(),
                    secret_key: front.key.secret.clone(),
                    customer: customer.clone(),
                };
                let named = Named {
                    repetition,
                    config: match pool_type {
                        PoolType::Replicated => config.label(),
                        other => format!("{} {}", config.label(), other.label()),
                    },
                    pool_type: pool_type.label(),
                };
                let bucket = config.label().replace('/', "-");
                let in_bucket = (bucket.as_str(), repetition == 0);
                cells
                    .extend(measure(&target, config, in_bucket, &load, &named, &server_cpu).await?);
            }
            // The OSDs report usage every few seconds: the last cells were reads.
            let usage = settled_usage(&admin, &front.data_pool, 1).await?;
            let per_byte = usage.used_bytes as f64 / usage.stored_bytes.max(1) as f64;
            eprintln!(
                "{}: {} stored take {} in pool {}: {per_byte:.2} bytes per byte",
                pool_type.label(),
                crate::text::approximate(usage.stored_bytes),
                crate::text::approximate(usage.used_bytes),
                front.data_pool
            );
            spaces.push((pool_type.label(), per_byte));
        }
        Ok::<_, String>(())
    })?;
    drop(cluster);
    let config = serde_json::json!({
        "seconds_per_cell": load.seconds,
        "clients": load.clients,
        "osds": args.fresh.osds,
        "repeat": args.repeat.max(1),
        "seal": args.seal,
        "sse": args.sse.iter().map(|s| s.name()).collect::<Vec<_>>(),
        "pool_types": args.pool_types.iter().map(PoolType::label).collect::<Vec<_>>(),
        "space_raw_per_byte": spaces
            .iter()
            .map(|(t, r)| (t.clone(), *r))
            .collect::<std::collections::BTreeMap<_, _>>(),
    });
    report(&mut cells, args.fresh.json.as_deref(), config)?;
    for (pool_type, per_byte) in &spaces {
        println!("space: {pool_type}: {per_byte:.2} raw bytes per byte stored");
    }
    Ok(())
}

/// The bench against `--endpoint`, a server it neither starts nor stops: in buckets of its
/// own, removed with what it wrote at the end.
fn run_endpoint(args: &S3Args) -> Result<(), String> {
    let endpoints = &args.endpoint;
    let https = endpoints.iter().filter(|e| e.tls).count();
    if https > 1 || endpoints.len() - https > 1 {
        return Err(
            "--endpoint: give one http:// and one https:// endpoint at most, of one server".into(),
        );
    }
    let (Some(access_key), Some(secret_key)) = (&args.access_key, &args.secret_key) else {
        return Err(
            "--endpoint needs --access-key and --secret-key: a user of that server who may \
             create buckets"
                .into(),
        );
    };
    let tls = match (&args.ca, https > 0) {
        (Some(ca), true) => Some(tls_config(ca)?),
        (None, true) => {
            return Err(
                "an https --endpoint needs --ca FILE: the authority (PEM) that signed its \
                 certificate"
                    .into(),
            )
        }
        (_, false) => None,
    };
    let load = Load::of(args);
    let transports: Vec<bool> = endpoints.iter().map(|e| e.tls).collect();
    let configs = configs(&transports, &args.sse);
    let urls: Vec<String> = endpoints
        .iter()
        .map(|e| format!("{}://{}", if e.tls { "https" } else { "http" }, e.addr))
        .collect();
    let counted = if args.gateway_pid.is_empty() && args.cluster_pid.is_empty() {
        "its CPU is not counted (--gateway-pid, --cluster-pid)".to_string()
    } else {
        format!(
            "CPU of its gateway (pids {:?}) and of the rest of its cluster (pids {:?})",
            args.gateway_pid, args.cluster_pid
        )
    };
    print_header(
        "coffer bench s3",
        &[
            (
                "configurations",
                format!(
                    "{} x SSE {}; baseline {}",
                    urls.join(" | "),
                    sse_names(&args.sse),
                    configs[0].label()
                ),
            ),
            (
                "server",
                format!(
                    "{} (the bench neither starts nor stops it); {counted}",
                    urls.join(", ")
                ),
            ),
            ("load", load.describe()),
        ],
    );
    let sum = |pids: &[u32]| pids.iter().map(|&p| super::fresh::pid_cpu_seconds(p)).sum();
    let server_cpu = |_tls: bool| (sum(&args.cluster_pid), sum(&args.gateway_pid));
    let run_id = format!("coffer-bench-{}", std::process::id());
    let customer = customer_key();
    let runtime = crate::daemon::runtime()?;
    let mut cells: Vec<Cell> = Vec::new();
    let mut made: Vec<(Target, String)> = Vec::new();
    runtime.block_on(async {
        let measured = async {
            for (repetition, config) in
                (0..args.repeat.max(1)).flat_map(|r| configs.iter().map(move |c| (r, *c)))
            {
                let Some(endpoint) = endpoints.iter().find(|e| e.tls == config.tls) else {
                    continue;
                };
                let target = Target {
                    addr: endpoint.addr.clone(),
                    tls: tls.clone().filter(|_| config.tls),
                    access_key: access_key.clone(),
                    secret_key: secret_key.clone(),
                    customer: customer.clone(),
                };
                let bucket = format!("{run_id}-{}", config.label().replace('/', "-"));
                // Only a bucket the bench made is emptied and removed at the end.
                if repetition == 0 {
                    S3Client::connect(&target)
                        .await?
                        .call("PUT", &format!("/{bucket}"), Bytes::new(), Sse::None)
                        .await?;
                    made.push((target.clone(), bucket.clone()));
                }
                let named = Named {
                    repetition,
                    config: config.label(),
                    pool_type: "endpoint".into(),
                };
                let in_bucket = (bucket.as_str(), false);
                cells
                    .extend(measure(&target, config, in_bucket, &load, &named, &server_cpu).await?);
            }
            Ok::<_, String>(())
        }
        .await;
        remove_written(&made, &load).await;
        measured
    })?;
    let config = serde_json::json!({
        "seconds_per_cell": load.seconds,
        "clients": load.clients,
        "repeat": args.repeat.max(1),
        "endpoints": urls,
        "sse": args.sse.iter().map(|s| s.name()).collect::<Vec<_>>(),
        "gateway_pids": args.gateway_pid,
        "cluster_pids": args.cluster_pid,
    });
    report(&mut cells, args.fresh.json.as_deref(), config)
}

/// Deletes every object the bench may have written in `made`'s buckets, then the buckets;
/// what cannot be removed is said, and the bench's result stands.
async fn remove_written(made: &[(Target, String)], load: &Load) {
    for (target, bucket) in made {
        let removed = async {
            let mut client = S3Client::connect(target).await?;
            for &size in &load.sizes {
                for c in 0..load.clients {
                    for i in 0..KEYS_PER_CLIENT {
                        let path = format!("/{bucket}/{}/c{c}-{i}", size_label(size));
                        client
                            .call("DELETE", &path, Bytes::new(), Sse::None)
                            .await?;
                    }
                }
            }
            client
                .call("DELETE", &format!("/{bucket}"), Bytes::new(), Sse::None)
                .await
        };
        if let Err(e) = removed.await {
            eprintln!("coffer bench s3: could not remove bucket {bucket} and its objects: {e}");
        }
    }
}

fn sse_names(sses: &[Sse]) -> String {
    sses.iter().map(|s| s.name()).collect::<Vec<_>>().join("|")
}

/// Puts each cell as a percent of the baseline's (the first cell's configuration and pool
/// type, in the same repetition, size and operation), prints the table, and writes the
/// JSON to `json` if given, with `config`.
fn report(
    cells: &mut [Cell],
    json: Option<&Path>,
    config: serde_json::Value,
) -> Result<(), String> {
    let Some(first) = cells.first() else {
        return Err("no cell was measured".into());
    };
    let (base_config, base_type) = (first.config.clone(), first.pool_type.clone());
    for i in 0..cells.len() {
        let baseline = cells
            .iter()
            .find(|c| {
                c.config == base_config
                    && c.pool_type == base_type
                    && c.repetition == cells[i].repetition
                    && c.object_size == cells[i].object_size
                    && c.op == cells[i].op
            })
            .map_or(0.0, |c| c.rates.mib_s);
        cells[i].pct_of_baseline = percent_of(cells[i].rates.mib_s, baseline);
    }
    print_table(cells);
    if let Some(path) = json {
        write_json(path, "s3", config, cells)?;
    }
    Ok(())
}

/// The cells of one configuration, size and operation across repetitions, as mean and
/// standard deviation.
fn print_table(cells: &[Cell]) {
    println!();
    println!(
        "{:<5} {:<4} {:<20} {:>8} {:>9} {:>13} {:>9} {:>9} {:>11} {:>11} {:>10}",
        "size",
        "op",
        "config",
        "ops/s",
        "MiB/s",
        "% base (sd)",
        "p50 us",
        "p99 us",
        "gw s/GiB",
        "OSDs s/GiB",
        "load CPU"
    );
    let mut seen: Vec<(u64, &str, &str)> = Vec::new();
    for cell in cells {
        let key = (cell.object_size, cell.op.as_str(), cell.config.as_str());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let same: Vec<&Cell> = cells
            .iter()
            .filter(|c| (c.object_size, c.op.as_str(), c.config.as_str()) == key)
            .collect();
        let mean = |f: &dyn Fn(&Cell) -> f64| {
            mean_and_stddev(&same.iter().map(|c| f(c)).collect::<Vec<_>>()).0
        };
        let (pct, pct_sd) =
            mean_and_stddev(&same.iter().map(|c| c.pct_of_baseline).collect::<Vec<_>>());
        println!(
            "{:<5} {:<4} {:<20} {:>8.0} {:>9.1} {:>7.0}% ({:>3.0}) {:>9.0} {:>9.0} {:>11.2} {:>11.2} {:>9.2}s",
            size_label(cell.object_size),
            cell.op,
            cell.config,
            mean(&|c| c.rates.ops_s),
            mean(&|c| c.rates.mib_s),
            pct,
            pct_sd,
            mean(&|c| c.rates.lat_us.p50),
            mean(&|c| c.rates.lat_us.p99),
            mean(&|c| c.gateway_cpu_s_per_gib),
            mean(&|c| c.rates.cluster_cpu_s_per_gib),
            mean(&|c| c.rates.client_cpu_s)
        );
    }
}
