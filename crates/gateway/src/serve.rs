//! The gateway's HTTP server: HTTP/1.1 with keep-alive, over TLS unless plain HTTP is asked
//! for, one task per connection.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use s3s::service::S3Service;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to send a request's headers once it has started.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// A TLS server configuration from a PEM certificate chain and its PEM private key.
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
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `service` on `listener` until the task is dropped; with `tls`, every connection
/// is TLS.
pub async fn serve(
    listener: TcpListener,
    service: S3Service,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> std::io::Result<()> {
    let acceptor = tls.map(TlsAcceptor::from);
    loop {
        let (stream, peer) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(true);
            let served = match acceptor {
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => http.serve_connection(TokioIo::new(tls), service).await,
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
                None => http.serve_connection(TokioIo::new(stream), service).await,
            };
            if let Err(e) = served {
                tracing::debug!("{peer}: {e}");
            }
        });
    }
}
