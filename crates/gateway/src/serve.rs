//! The gateway's HTTP server: HTTP/1.1 with keep-alive, over TLS unless plain HTTP is asked
//! for, one task per connection.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper_util::rt::{TokioIo, TokioTimer};
use s3s::service::S3Service;
use s3s::{HttpError, HttpResponse};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to send a request's headers once it has started.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// The crypto of the TLS servers that carry data to ordinary clients (the gateway's HTTPS,
/// NBD over TLS, the dashboard): aws-lc-rs, with the records' AES-GCM from ring where
/// `keys::gcm` finds ring the faster (a CPU with VAES and VPCLMULQDQ but no AVX-512, where
/// aws-lc-rs runs 128-bit code at about half ring's speed; docs/benchmarks.md). The
/// handshake's key exchange and signatures stay on aws-lc-rs either way.
pub fn tls_provider() -> rustls::crypto::CryptoProvider {
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    match keys::gcm::Implementation::fastest() {
        keys::gcm::Implementation::Ring => rustls::crypto::CryptoProvider {
            cipher_suites: rustls::crypto::ring::default_provider().cipher_suites,
            ..provider
        },
        keys::gcm::Implementation::AwsLc => provider,
    }
}

/// A TLS server configuration from a PEM certificate chain and its PEM private key, with
/// [`tls_provider`]'s crypto.
pub fn tls_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate in it", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(tls_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `gateway` on `listener` until the task is dropped; with `tls`, every connection
/// is TLS.
pub async fn serve(
    listener: TcpListener,
    gateway: crate::Gateway,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> std::io::Result<()> {
    serve_with(
        listener,
        tls,
        annotated(gateway.clone().service(), Some(gateway)),
    )
    .await
}

/// Serves any HTTP `service` as the gateway serves S3: HTTP/1.1 with keep-alive, a task per
/// connection, over TLS when given (the handshake within [`HANDSHAKE_TIMEOUT`]), headers
/// within [`HEADER_TIMEOUT`]. The dashboard is served the same way.
pub async fn serve_with<S, B>(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    service: S,
) -> std::io::Result<()>
where
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = hyper::Response<B>,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let acceptor = tls.map(TlsAcceptor::from);
    loop {
        let (stream, peer) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let acceptor = acceptor.clone();
        let with_peer = move |tls: Option<Tls>| {
            let peer = Peer {
                address: peer,
                secure: tls.is_some(),
                tls,
            };
            hyper::service::service_fn(move |mut request: hyper::Request<_>| {
                request.extensions_mut().insert(peer);
                hyper::service::Service::call(&service, request)
            })
        };
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(true);
            let served = match acceptor {
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let service = with_peer(Some(Tls::of(tls.get_ref().1)));
                            http.serve_connection(TokioIo::new(tls), service).await
                        }
                        Ok(Err(e)) => {
                            tracing::debug!("{peer}: TLS handshake failed: {e}");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!("{peer}: no TLS handshake in {HANDSHAKE_TIMEOUT:?}");
                            return;
                        }
                    }
                }
                None => {
                    http.serve_connection(TokioIo::new(stream), with_peer(None))
                        .await
                }
            };
            if let Err(e) = served {
                tracing::debug!("{peer}: {e}");
            }
        });
    }
}

/// Where a request came from, as its policy conditions and its access log line see it (a
/// request extension).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer {
    pub address: std::net::SocketAddr,
    /// Whether it came over TLS.
    pub secure: bool,
    pub tls: Option<Tls>,
}

/// What a TLS connection agreed on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tls {
    /// `TLSv1.3`.
    pub version: &'static str,
    /// The cipher suite's IANA name (`TLS_AES_256_GCM_SHA384`).
    pub suite: &'static str,
}

impl Tls {
    fn of(connection: &rustls::ServerConnection) -> Tls {
        let version = match connection.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
            _ => "-",
        };
        let suite = connection
            .negotiated_cipher_suite()
            .and_then(|s| s.suite().as_str())
            .map_or("-", |name| match name {
                // rustls names TLS 1.3's suites apart; IANA's names are these.
                "TLS13_AES_128_GCM_SHA256" => "TLS_AES_128_GCM_SHA256",
                "TLS13_AES_256_GCM_SHA384" => "TLS_AES_256_GCM_SHA384",
                "TLS13_CHACHA20_POLY1305_SHA256" => "TLS_CHACHA20_POLY1305_SHA256",
                name => name,
            });
        Tls { version, suite }
    }
}

/// `service`, with a request id on every response (`x-amz-request-id`), and every error
/// body carrying a `Message` and that `RequestId`: clients print the message (aws-cli says
/// "Unknown" without one), and the operator finds the request in the gateway's log by its id.
/// With the `gateway` whose service it is, CORS too: preflight requests answered, and the
/// responses to web pages' requests carrying what their bucket's rules allow
/// (`crate::cors`); forms posted to a bucket answered by `crate::s3::post`; requests
/// signed for IAM or STS answered by `crate::iam`; and the requests to logged buckets
/// written to their access logs (`crate::s3::logging`).
pub(crate) fn annotated(
    service: S3Service,
    gateway: Option<crate::Gateway>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = HttpResponse,
    Error = HttpError,
    Future = impl std::future::Future<Output = Result<HttpResponse, HttpError>> + Send,
> + Clone {
    hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
        let service = service.clone();
        let gateway = gateway.clone();
        async move {
            let pool = gateway.as_ref().map(|gateway| gateway.pool().clone());
            let started = std::time::Instant::now();
            let id = format!("{:016X}", rand::random::<u64>());
            let (method, path) = (request.method().clone(), request.uri().path().to_owned());
            let received = content_length(request.headers());
            let slot = crate::metrics::VerbSlot::default();
            let noted = crate::s3::logging::Noted::default();
            let asked = crate::s3::logging::Asked::of(&request);
            let mut request = request;
            request.extensions_mut().insert(slot.clone());
            request.extensions_mut().insert(noted.clone());
            let authorization = request.headers().get(hyper::header::AUTHORIZATION);
            if let Some(path) =
                crate::s3::signed_path(authorization.map(|v| v.as_bytes()), request.uri().path())
            {
                *request.uri_mut() = with_path(request.uri(), &path);
            }
            if let (Some(pool), Some(service)) = (
                &pool,
                crate::iam::service(request.method(), request.uri().path(), request.headers()),
            ) {
                slot.note(&format!("{service:?}").to_uppercase());
                let mut response = crate::iam::answer(pool, service, request, &id).await;
                let status = response.status();
                if let Ok(value) = hyper::http::HeaderValue::from_str(&id) {
                    response.headers_mut().insert("x-amz-request-id", value);
                }
                let sent = content_length(response.headers());
                let elapsed = started.elapsed();
                crate::metrics::request(&slot, status.as_u16(), elapsed, received, sent);
                return Ok(response);
            }
            let mut response = match &pool {
                Some(pool) if request.method() == hyper::Method::OPTIONS => {
                    slot.note("CorsPreflight");
                    let path = request.uri().path();
                    match crate::s3::cors::preflight(pool, path, request.headers()).await {
                        Ok(headers) => with_headers(HttpResponse::new(s3s::Body::empty()), headers),
                        Err(refused) => refused
                            .to_http_response()
                            .map_err(|e| HttpError::new(Box::new(e)))?,
                    }
                }
                _ => {
                    let cors = pool.as_ref().and_then(|pool| {
                        let asked = crate::s3::cors::Asked::of(
                            request.method(),
                            request.uri().path(),
                            request.headers(),
                        )?;
                        Some(crate::s3::cors::allowing(pool, asked))
                    });
                    let answered = answer(&service, gateway.as_ref(), request);
                    match cors {
                        Some(cors) => {
                            let (response, headers) = tokio::join!(answered, cors);
                            with_headers(response?, headers)
                        }
                        None => answered.await?,
                    }
                }
            };
            if slot.verb() == "GetObjectAttributes" && response.status().is_success() {
                let bare = response
                    .body()
                    .bytes()
                    .and_then(|body| crate::s3::attributes::unquoted_etag(&body));
                if let Some(body) = bare {
                    response.headers_mut().remove(hyper::header::CONTENT_LENGTH);
                    *response.body_mut() = s3s::Body::from(Bytes::from(body));
                }
            }
            if let Ok(value) = hyper::http::HeaderValue::from_str(&id) {
                response.headers_mut().insert("x-amz-request-id", value);
            }
            let status = response.status();
            if status.is_client_error() || status.is_server_error() {
                let filled = response
                    .body()
                    .bytes()
                    .and_then(|body| fill_error(&body, &id, status.canonical_reason()));
                if let Some(body) = filled {
                    response.headers_mut().remove(hyper::header::CONTENT_LENGTH);
                    *response.body_mut() = s3s::Body::from(Bytes::from(body));
                }
                tracing::debug!(request_id = %id, %method, path, status = status.as_u16(), "S3 error");
            }
            let sent = content_length(response.headers());
            let took = started.elapsed();
            crate::metrics::request(&slot, status.as_u16(), took, received, sent);
            if let Some(gateway) = &gateway {
                gateway.log(&noted, asked, &response, &id, took);
            }
            Ok(response)
        }
    })
}

/// The response of `service` to `request`, or the refusal of a presigned URL's life or a
/// SigV2 date that s3s would let through; on the way, a SigV4 request dated by `Date` alone
/// given the `x-amz-date` s3s reads, and an anonymous request's aws-chunked body decoded.
/// A form posted to a bucket is `gateway`'s own to answer (`crate::s3::post`).
async fn answer(
    service: &S3Service,
    gateway: Option<&crate::Gateway>,
    mut request: hyper::Request<hyper::body::Incoming>,
) -> Result<HttpResponse, HttpError> {
    let answered = match gateway.zip(crate::s3::post::form_bucket(&request)) {
        Some((gateway, bucket)) => crate::s3::post::answer(gateway, bucket, request).await,
        None => {
            crate::s3::date_sigv4_by_date(request.headers_mut());
            let checked = crate::s3::check_presigned_life(request.uri().query())
                .and_then(|()| {
                    crate::s3::check_v2_date(request.headers(), time::OffsetDateTime::now_utc())
                })
                .and_then(|()| crate::s3::unchunked(request.map(s3s::Body::from)));
            match checked {
                Ok(request) => return service.call(request).await,
                Err(refused) => Err(refused),
            }
        }
    };
    answered.or_else(|refused| {
        refused
            .to_http_response()
            .map_err(|e| HttpError::new(Box::new(e)))
    })
}

/// `response` with `headers` added.
fn with_headers(mut response: HttpResponse, headers: Vec<(&'static str, String)>) -> HttpResponse {
    for (name, value) in headers {
        if let Ok(value) = hyper::http::HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// `uri` with its path replaced by `path`, its query kept.
fn with_path(uri: &hyper::Uri, path: &str) -> hyper::Uri {
    let mut parts = uri.clone().into_parts();
    let path_and_query = match uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    };
    parts.path_and_query = path_and_query.parse().ok();
    hyper::Uri::from_parts(parts).unwrap_or_else(|_| uri.clone())
}

/// A message's Content-Length (0 without one).
fn content_length(headers: &hyper::HeaderMap) -> u64 {
    headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// An S3 error body with a `Message` (the code's usual text when it had none, or an empty
/// one) and `RequestId` added; `None` when `body` is not an `<Error>` document or has both.
fn fill_error(body: &[u8], id: &str, reason: Option<&str>) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let end = text.rfind("</Error>")?;
    let code = xml_texts(body, "Code")
        .into_iter()
        .next()
        .unwrap_or_default();
    let code = code.as_str();
    let mut out = text[..end].to_string();
    let has_message = out
        .split_once("<Message>")
        .is_some_and(|(_, rest)| !rest.starts_with("</Message>"));
    if !has_message {
        out = out
            .replace("<Message></Message>", "")
            .replace("<Message/>", "");
        let message = default_message(code)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{} ({code})", reason.unwrap_or("error")));
        out.push_str(&format!("<Message>{}</Message>", escape(&message)));
    }
    let has_id = out.contains("<RequestId>");
    if has_message && has_id {
        return None;
    }
    if !has_id {
        out.push_str(&format!("<RequestId>{id}</RequestId>"));
    }
    out.push_str(&text[end..]);
    Some(out)
}

/// The texts of the elements `name` of an XML document, unescaped.
pub(crate) fn xml_texts(body: &[u8], name: &str) -> Vec<String> {
    let Ok(text) = std::str::from_utf8(body) else {
        return Vec::new();
    };
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    text.split(open.as_str())
        .skip(1)
        .filter_map(|rest| rest.split_once(close.as_str()))
        .map(|(value, _)| {
            value
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&apos;", "'")
                .replace("&amp;", "&")
        })
        .collect()
}

/// What S3 says for the codes whose errors may come without a message of ours.
fn default_message(code: &str) -> Option<&'static str> {
    Some(match code {
        "AccessDenied" => "Access Denied",
        "InvalidAccessKeyId" => "The access key ID you provided does not exist in our records.",
        "SignatureDoesNotMatch" => {
            "The request signature we calculated does not match the signature you provided. \
             Check your key and signing method."
        }
        "RequestTimeTooSkewed" => {
            "The difference between the request time and the current time is too large."
        }
        "NoSuchKey" => "The specified key does not exist.",
        "NoSuchBucket" => "The specified bucket does not exist.",
        "NoSuchUpload" => "The specified multipart upload does not exist.",
        "MethodNotAllowed" => "The specified method is not allowed against this resource.",
        "NotImplemented" => "A header you provided implies functionality that is not implemented.",
        "MissingContentLength" => "You must provide the Content-Length HTTP header.",
        "InvalidArgument" => "Invalid Argument",
        "InvalidRequest" => "Invalid Request",
        "MalformedXML" => "The XML you provided was not well-formed or did not validate.",
        "InternalError" => "We encountered an internal error. Please try again.",
        _ => return None,
    })
}

/// `text` made safe inside an XML element or a quoted attribute.
pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use std::io::{Read, Write};

    /// Moves every TLS record `from` has to send into `to`, and opens them there.
    fn pump(from: &mut rustls::Connection, to: &mut rustls::Connection) {
        let mut wire = Vec::new();
        while from.wants_write() {
            from.write_tls(&mut wire).expect("write records");
        }
        let mut unread = &wire[..];
        while !unread.is_empty() {
            to.read_tls(&mut unread).expect("read records");
            to.process_new_packets().expect("the records open");
        }
    }

    /// The servers' records in each AES-GCM suite (ring's on a CPU where `keys::gcm` takes
    /// ring, aws-lc-rs's elsewhere) open in a client of aws-lc-rs alone, and its records
    /// open in the server: the two libraries speak the same TLS.
    #[test]
    fn each_aes_gcm_suite_carries_data_both_ways_to_an_aws_lc_client() {
        let dir = tempfile::tempdir().expect("tempdir");
        let made = crate::tls::generate(&["localhost".into()]).expect("generate");
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert, &made.chain).expect("write");
        std::fs::write(&key, &made.key).expect("write");
        let server_config = tls_config(&cert, &key).expect("a server configuration");
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from_pem_slice(made.ca.as_bytes()).expect("ca"))
            .expect("trust the authority");
        let roots = Arc::new(roots);
        let aws_lc = rustls::crypto::aws_lc_rs::default_provider();
        let suites: Vec<_> = tls_provider()
            .cipher_suites
            .into_iter()
            .filter(|s| {
                let name = s.suite().as_str().unwrap_or_default();
                name.contains("_AES_") && !name.contains("_RSA_")
            })
            .collect();
        assert!(
            suites.len() >= 4,
            "TLS 1.3 and 1.2 (ECDSA, as the gateway's certificate) AES-GCM suites: {suites:?}"
        );
        for suite in suites {
            let theirs = aws_lc
                .cipher_suites
                .iter()
                .find(|s| s.suite() == suite.suite())
                .copied()
                .expect("aws-lc-rs has the suite");
            let provider = rustls::crypto::CryptoProvider {
                cipher_suites: vec![theirs],
                ..rustls::crypto::aws_lc_rs::default_provider()
            };
            let client_config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
                .with_protocol_versions(&[suite.version()])
                .expect("versions")
                .with_root_certificates(roots.clone())
                .with_no_client_auth();
            let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
            let mut client = rustls::Connection::from(
                rustls::ClientConnection::new(Arc::new(client_config), name).expect("client"),
            );
            let mut server = rustls::Connection::from(
                rustls::ServerConnection::new(server_config.clone()).expect("server"),
            );
            for _ in 0..8 {
                pump(&mut client, &mut server);
                pump(&mut server, &mut client);
            }
            assert!(
                !client.is_handshaking() && !server.is_handshaking(),
                "{suite:?}"
            );
            assert_eq!(
                server.negotiated_cipher_suite().map(|s| s.suite()),
                Some(suite.suite())
            );
            for (round, seed) in (0..4u8).zip([3u8, 101, 200, 255]) {
                let sent: Vec<u8> = (0..100_000u32).map(|i| (i as u8) ^ seed).collect();
                let (from, to) = match round % 2 {
                    0 => (&mut server, &mut client),
                    _ => (&mut client, &mut server),
                };
                let mut got = Vec::new();
                for piece in sent.chunks(16 << 10) {
                    from.writer().write_all(piece).expect("send");
                    pump(from, to);
                    let mut received = vec![0; piece.len()];
                    to.reader().read_exact(&mut received).expect("receive");
                    got.extend(received);
                }
                assert!(got == sent, "{suite:?}: round {round} changed the data");
            }
        }
    }

    const DECL: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>";

    #[test]
    fn error_bodies_get_a_message_and_a_request_id() {
        let bare = format!("{DECL}<Error><Code>InvalidAccessKeyId</Code></Error>");
        let filled = fill_error(bare.as_bytes(), "ID1", Some("Forbidden")).expect("filled");
        assert_eq!(
            filled,
            format!(
                "{DECL}<Error><Code>InvalidAccessKeyId</Code><Message>The access key ID you \
                 provided does not exist in our records.</Message><RequestId>ID1</RequestId>\
                 </Error>"
            )
        );
        let empty = "<Error><Code>Weird</Code><Message></Message></Error>";
        assert_eq!(
            fill_error(empty.as_bytes(), "ID2", Some("Bad Request")).expect("filled"),
            "<Error><Code>Weird</Code><Message>Bad Request (Weird)</Message>\
             <RequestId>ID2</RequestId></Error>"
        );
        let ours = "<Error><Code>NoSuchBucket</Code><Message>bucket b does not exist</Message>\
                    </Error>";
        assert_eq!(
            fill_error(ours.as_bytes(), "ID3", None).expect("filled"),
            "<Error><Code>NoSuchBucket</Code><Message>bucket b does not exist</Message>\
             <RequestId>ID3</RequestId></Error>"
        );
        let whole = "<Error><Code>X</Code><Message>m</Message><RequestId>R</RequestId></Error>";
        assert_eq!(fill_error(whole.as_bytes(), "ID4", None), None);
        assert_eq!(fill_error(b"<ListBucketResult/>", "ID5", None), None);
    }
}
