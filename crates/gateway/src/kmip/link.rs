//! The connection to a KMIP server: one TLS link (rustls, TLS 1.2 or 1.3, the gateway's
//! client certificate), one call at a time, made again after any failure.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use zeroize::Zeroizing;

use super::message::{self, Operation, Refusal};
use super::ttlv::{self, Item};
use crate::kms::{error_chain, KmsError};

/// How long one call may take, waiting for the link and a second attempt included, before
/// the server counts as unavailable.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from a server; KMIP answers to these calls are far smaller.
const ANSWER_BYTES_MAX: usize = 1 << 20;

type Stream = TlsStream<TcpStream>;

/// A KMIP server: where it is, how to reach it, and the link to it while it is idle.
pub struct Link {
    address: String,
    server: ServerName<'static>,
    tls: tokio_rustls::TlsConnector,
    idle: tokio::sync::Mutex<Option<Stream>>,
}

/// How an exchange broke.
enum Broken {
    /// Before the server answered a byte: on a link that served before, the server most
    /// likely closed it meanwhile, and the request may be sent again on a new one.
    BeforeAnswer(std::io::Error),
    /// Connecting, or in the middle of the answer.
    Otherwise(std::io::Error),
}

impl Link {
    /// The server at `address` (`HOST:PORT`), whose certificate `ca` (PEM) signs, reached as
    /// the client whose PEM `certificate` chain and `private_key` are given. Nothing is sent
    /// yet.
    pub fn new(
        address: &str,
        certificate: &Path,
        private_key: &Path,
        ca: &Path,
    ) -> Result<Link, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let (host, port) = address
            .rsplit_once(':')
            .filter(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
            .ok_or_else(|| format!("KMIP address {address:?}: give HOST:PORT"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let server = ServerName::try_from(host.to_string())
            .map_err(|e| format!("KMIP address {address:?}: {e}"))?;
        let pem_certs = |path: &Path| {
            CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("{}: {e}", path.display()))
                .and_then(|certs| match certs.is_empty() {
                    true => Err(format!("{}: no certificate in it", path.display())),
                    false => Ok(certs),
                })
        };
        let mut roots = rustls::RootCertStore::empty();
        for cert in pem_certs(ca)? {
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", ca.display()))?;
        }
        let chain = pem_certs(certificate)?;
        let private = PrivateKeyDer::from_pem_file(private_key)
            .map_err(|e| format!("{}: {e}", private_key.display()))?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        // KMIP's profiles require TLS 1.2; servers often offer nothing newer.
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, private)
            .map_err(|e| format!("{}: {e}", certificate.display()))?;
        let address = match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        };
        Ok(Link {
            address,
            server,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
            idle: tokio::sync::Mutex::new(None),
        })
    }

    /// `operation` with `payload`: the answer's payload. The link is taken out while in use
    /// and put back only after a whole answer, so a call dropped halfway drops its link
    /// with it and never leaves an answer for the next call to read. A call whose link had
    /// served before and broke before any answer is sent again on a new link, except
    /// Create, which must not run twice.
    pub async fn call(&self, operation: Operation, payload: Vec<Item>) -> Result<Item, KmsError> {
        let request = Zeroizing::new(message::request(operation, payload));
        let called = tokio::time::timeout(CALL_TIMEOUT, async {
            let mut idle = self.idle.lock().await;
            let reused = idle.take();
            let retry = reused.is_some() && operation != Operation::Create;
            let (stream, answer) = match self.exchange(reused, &request).await {
                Err(Broken::BeforeAnswer(e)) if retry => {
                    tracing::debug!(error = %e, "KMIP link closed; calling again on a new one");
                    self.exchange(None, &request).await
                }
                exchanged => exchanged,
            }
            .map_err(|broken| match broken {
                Broken::BeforeAnswer(e) | Broken::Otherwise(e) => self.unavailable(&e),
            })?;
            let answered = message::response(&answer, operation);
            // A malformed answer leaves the link's framing in doubt.
            if !matches!(answered, Err(Refusal::Malformed(_))) {
                *idle = Some(stream);
            }
            answered.map_err(refusal)
        })
        .await;
        called.unwrap_or_else(|_| {
            Err(KmsError::Unavailable(format!(
                "KMIP server {}: no answer within {} s",
                self.address,
                CALL_TIMEOUT.as_secs()
            )))
        })
    }

    /// Sends `request` over `stream` (a new link if none) and reads the answer's bytes.
    async fn exchange(
        &self,
        stream: Option<Stream>,
        request: &[u8],
    ) -> Result<(Stream, Zeroizing<Vec<u8>>), Broken> {
        let mut stream = match stream {
            Some(stream) => stream,
            None => self.connect().await.map_err(Broken::Otherwise)?,
        };
        let mut header = [0u8; 8];
        let first = async {
            stream.write_all(request).await?;
            stream.flush().await?;
            match stream.read(&mut header[..1]).await? {
                0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
                _ => Ok(()),
            }
        };
        first.await.map_err(Broken::BeforeAnswer)?;
        stream
            .read_exact(&mut header[1..])
            .await
            .map_err(Broken::Otherwise)?;
        let length = ttlv::message_length(&header);
        if length > ANSWER_BYTES_MAX {
            return Err(Broken::Otherwise(std::io::Error::other(format!(
                "an answer of {length} bytes is more than a KMS call gets"
            ))));
        }
        let mut answer = Zeroizing::new(vec![0; length]);
        answer[..8].copy_from_slice(&header);
        stream
            .read_exact(&mut answer[8..])
            .await
            .map_err(Broken::Otherwise)?;
        Ok((stream, answer))
    }

    async fn connect(&self) -> std::io::Result<Stream> {
        let tcp = TcpStream::connect(&self.address).await?;
        tcp.set_nodelay(true)?;
        self.tls.connect(self.server.clone(), tcp).await
    }

    /// What an IO failure means: a certificate either side refused is the configuration's
    /// to fix (clients retrying would not help); anything else, the server is unavailable.
    fn unavailable(&self, e: &std::io::Error) -> KmsError {
        use rustls::AlertDescription as Alert;
        let why = format!("KMIP server {}: {}", self.address, error_chain(e));
        match e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            Some(
                rustls::Error::InvalidCertificate(_)
                | rustls::Error::NoCertificatesPresented
                | rustls::Error::AlertReceived(
                    Alert::BadCertificate
                    | Alert::UnsupportedCertificate
                    | Alert::CertificateRevoked
                    | Alert::CertificateExpired
                    | Alert::CertificateUnknown
                    | Alert::UnknownCA
                    | Alert::AccessDenied
                    | Alert::CertificateRequired,
                ),
            ) => KmsError::Denied(why),
            _ => KmsError::Unavailable(why),
        }
    }
}

/// What a server's refusal means to the gateway. An object it does not find is a missing
/// key; the callers name the key.
fn refusal(refused: Refusal) -> KmsError {
    match refused {
        Refusal::Server {
            reason: Some(message::reason::ITEM_NOT_FOUND),
            message,
        } => KmsError::NoSuchKey(message),
        Refusal::Server {
            reason:
                Some(
                    message::reason::PERMISSION_DENIED
                    | message::reason::AUTHENTICATION_NOT_SUCCESSFUL,
                ),
            message,
        } => KmsError::Denied(format!("the KMIP server refused: {message}")),
        Refusal::Server { message, .. } => {
            KmsError::Failed(format!("the KMIP server refused: {message}"))
        }
        Refusal::Malformed(why) => {
            KmsError::Unavailable(format!("the KMIP server's answer is malformed: {why}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_address_or_missing_file_is_refused_before_any_call() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing.pem");
        for bad in ["127.0.0.1", ":5696", "host:port", "host:70000"] {
            let refused = Link::new(bad, &missing, &missing, &missing).err();
            assert!(
                refused.as_deref().is_some_and(|e| e.contains("HOST:PORT")),
                "{bad}: {refused:?}"
            );
        }
        let refused = Link::new("127.0.0.1:5696", &missing, &missing, &missing).err();
        assert!(
            refused
                .as_deref()
                .is_some_and(|e| e.contains("missing.pem")),
            "{refused:?}"
        );
    }

    #[test]
    fn refusals_keep_their_meaning() {
        let refused = |reason| Refusal::Server {
            reason: Some(reason),
            message: "m".into(),
        };
        assert!(matches!(
            refusal(refused(message::reason::ITEM_NOT_FOUND)),
            KmsError::NoSuchKey(_)
        ));
        assert!(matches!(
            refusal(refused(message::reason::PERMISSION_DENIED)),
            KmsError::Denied(_)
        ));
        assert!(matches!(refusal(refused(0x0B)), KmsError::Failed(_)));
        assert!(matches!(
            refusal(Refusal::Malformed("x".into())),
            KmsError::Unavailable(_)
        ));
    }
}
