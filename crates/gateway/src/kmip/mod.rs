//! A KMIP server as the gateway's KMS ([`Kms`]), over TLS with a client certificate. Each
//! version of a KMS key is one 256-bit AES key on the server, made there and never sent out,
//! named `coffer-kms:NAME:vN` in the object group `coffer-kms`. A data key is made here and
//! wrapped by the server's Encrypt under the newest version, with AES-GCM, a fresh 12-byte
//! nonce and the version's name as additional data; what is stored is nonce ‖ ciphertext ‖
//! tag. Removing a key revokes and destroys every version. The gateway's data-key cache
//! keeps GETs of recently used keys off the server.

mod message;
pub mod ttlv;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use keys::SecretKey;
use message::{Answer, Operation};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use ttlv::Item;

use crate::kms::{error_chain as chain, DataKey, Kms, KmsError};

/// How long one call to the server (connecting included) may take before it counts as
/// unavailable.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from a server; KMIP answers to these calls are far smaller.
const MAX_ANSWER: usize = 1 << 20;
/// The object group every version of every KMS key is made in.
const GROUP: &str = "coffer-kms";

/// The server object that holds `version` of KMS key `key`: its name, which is also the
/// additional data of every wrap it makes.
fn object_name(key: &str, version: u32) -> String {
    format!("{GROUP}:{key}:v{version}")
}

/// The KMS key and version an object named by [`object_name`] holds; None for other names.
fn parse_object_name(name: &str) -> Option<(String, u32)> {
    let (key, version) = name
        .strip_prefix(GROUP)?
        .strip_prefix(':')?
        .rsplit_once(":v")?;
    let number: u32 = version.parse().ok().filter(|v| *v > 0)?;
    // Only the form object_name writes: no sign, no leading zeros.
    (!key.is_empty() && number.to_string() == version).then(|| (key.to_string(), number))
}

/// Every KMS key on the server: its versions and the objects that hold each, in order of
/// their ids. A version is one object, unless two gateways made it at once (each makes the
/// key of SSE-S3 when it starts, and `coffer kms key rotate` may run beside another): then
/// every one of them wraps with the first and unwraps with whichever opens the data key.
type Inventory = BTreeMap<String, BTreeMap<u32, Vec<String>>>;

/// A KMIP server: where it is, how to reach it, and the names of the objects seen so far
/// (an object's name never changes, so each is asked for once).
pub struct KmipKms {
    address: String,
    server: ServerName<'static>,
    tls: tokio_rustls::TlsConnector,
    link: tokio::sync::Mutex<Option<TlsStream<TcpStream>>>,
    names: std::sync::Mutex<HashMap<String, Option<(String, u32)>>>,
}

impl KmipKms {
    /// The server at `address` (`HOST:PORT`), whose certificate `ca` (PEM) signs, reached as
    /// the client whose PEM `certificate` chain and `key` are given. Nothing is sent yet.
    pub fn connect(
        address: &str,
        certificate: &Path,
        key: &Path,
        ca: &Path,
    ) -> Result<KmipKms, String> {
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
        let private =
            PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
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
        Ok(KmipKms {
            address,
            server,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
            link: tokio::sync::Mutex::new(None),
            names: Default::default(),
        })
    }

    /// `operation` with `payload`: the answer's payload. One call at a time goes over the
    /// one connection, which is made again after any failure. A call on a connection that
    /// had served before is tried once more on a fresh one (the server may have closed it),
    /// except Create, which must not run twice.
    async fn call(&self, operation: Operation, payload: Vec<Item>) -> Result<Item, KmsError> {
        let request = message::request(operation, payload);
        let mut link = self.link.lock().await;
        let reused = link.is_some();
        let answer = match self.exchange(&mut link, &request).await {
            Err(e) if reused && operation != Operation::Create => {
                tracing::debug!(error = %e, "KMIP connection closed; calling again");
                self.exchange(&mut link, &request).await
            }
            answer => answer,
        };
        match answer {
            Ok(bytes) => message::response(&bytes, operation).map_err(refusal),
            Err(e) => {
                *link = None;
                Err(KmsError::Unavailable(format!(
                    "KMIP server {}: {e}",
                    self.address
                )))
            }
        }
    }

    /// Sends `request` over `link` (connecting it first if it is not) and reads the answer's
    /// bytes, all within [`CALL_TIMEOUT`]; on failure `link` is dropped.
    async fn exchange(
        &self,
        link: &mut Option<TlsStream<TcpStream>>,
        request: &[u8],
    ) -> Result<Vec<u8>, String> {
        let exchanged = tokio::time::timeout(CALL_TIMEOUT, async {
            if link.is_none() {
                let tcp = TcpStream::connect(&self.address).await?;
                tcp.set_nodelay(true)?;
                *link = Some(self.tls.connect(self.server.clone(), tcp).await?);
            }
            let stream = link.as_mut().expect("connected above");
            stream.write_all(request).await?;
            stream.flush().await?;
            let mut header = [0u8; 8];
            stream.read_exact(&mut header).await?;
            let length = ttlv::message_length(&header);
            if length > MAX_ANSWER {
                return Err(std::io::Error::other(format!(
                    "an answer of {length} bytes is more than a KMS call gets"
                )));
            }
            let mut answer = vec![0; length];
            answer[..8].copy_from_slice(&header);
            stream.read_exact(&mut answer[8..]).await?;
            Ok(answer)
        })
        .await;
        let failed = match exchanged {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(e)) => chain(&e),
            Err(_) => format!("no answer within {} s", CALL_TIMEOUT.as_secs()),
        };
        *link = None;
        Err(failed)
    }

    /// Every KMS key on the server and the objects of its versions: the group's objects
    /// listed, and the names of those not seen before asked for.
    async fn inventory(&self) -> Result<Inventory, KmsError> {
        let found = self.call(Operation::Locate, message::locate(GROUP)).await?;
        let ids = message::located(&found);
        let unnamed: Vec<String> = {
            let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
            ids.iter()
                .filter(|id| !names.contains_key(*id))
                .cloned()
                .collect()
        };
        for id in unnamed {
            let attributes = self
                .call(Operation::GetAttributes, message::get_names(&id))
                .await?;
            let ours = message::names(&attributes)
                .iter()
                .find_map(|name| parse_object_name(name));
            self.names
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, ours);
        }
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        let mut inventory = Inventory::new();
        for id in ids {
            if let Some(Some((key, version))) = names.get(&id) {
                let held = inventory
                    .entry(key.clone())
                    .or_default()
                    .entry(*version)
                    .or_default();
                held.push(id);
                held.sort();
            }
        }
        Ok(inventory)
    }

    /// The versions of `key` and their objects.
    async fn versions(&self, key: &str) -> Result<BTreeMap<u32, Vec<String>>, KmsError> {
        self.inventory()
            .await?
            .remove(key)
            .ok_or_else(|| KmsError::NoSuchKey(key.into()))
    }

    /// Makes `version` of `key` on the server, ready to wrap.
    async fn make_version(&self, key: &str, version: u32) -> Result<(), KmsError> {
        let name = object_name(key, version);
        let made = self
            .call(Operation::Create, message::create(&name, GROUP))
            .await?;
        let id = message::named_id(&made)
            .ok_or_else(|| KmsError::Failed("the KMIP server's Create named no object".into()))?;
        self.call(Operation::Activate, message::object(&id)).await?;
        self.names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Some((key.to_string(), version)));
        Ok(())
    }

    /// The objects known to hold `version` of `key`, in order of their ids.
    fn known(&self, key: &str, version: u32) -> Vec<String> {
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        let mut ids: Vec<String> = names
            .iter()
            .filter(|(_, named)| {
                named
                    .as_ref()
                    .is_some_and(|(k, v)| k == key && *v == version)
            })
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// The data key `wrapped` by object `id`, whose name is `aad`. An object the server no
    /// longer has is forgotten.
    async fn open(&self, id: &str, aad: &str, wrapped: &[u8]) -> Result<SecretKey<32>, KmsError> {
        let payload = message::decrypt(id, wrapped, aad.as_bytes())
            .ok_or_else(|| KmsError::Failed(format!("a data key wrapped by {aad} is too short")))?;
        let answer = self.call(Operation::Decrypt, payload).await;
        if let Err(KmsError::NoSuchKey(_)) = answer {
            self.names
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(id);
        }
        let opened = message::opened(&answer?)
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .map(zeroize::Zeroizing::new)
            .ok_or_else(|| KmsError::Failed(format!("{aad} did not unwrap a 32-byte data key")))?;
        Ok(SecretKey::from_bytes(*opened))
    }

    /// A data key wrapped by the newest version of `key`.
    async fn wrap(&self, key: &str, data_key: &SecretKey<32>) -> Result<(u32, Vec<u8>), KmsError> {
        let (version, id) = self
            .versions(key)
            .await?
            .pop_last()
            .and_then(|(version, ids)| Some((version, ids.into_iter().next()?)))
            .ok_or_else(|| KmsError::NoSuchKey(key.into()))?;
        let nonce: [u8; message::NONCE_BYTES] = rand::random();
        let aad = object_name(key, version);
        let payload = message::encrypt(&id, data_key.expose(), &nonce, aad.as_bytes());
        let answer = self
            .call(Operation::Encrypt, payload)
            .await
            .map_err(|e| gone(key, e))?;
        let wrapped = message::sealed(&answer, &nonce).ok_or_else(|| {
            KmsError::Failed("the KMIP server's Encrypt gave no ciphertext and tag".into())
        })?;
        Ok((version, wrapped))
    }
}

/// What a server's refusal means to the gateway.
fn refusal(answer: Answer) -> KmsError {
    match answer {
        Answer::Refused {
            reason: Some(message::reason::ITEM_NOT_FOUND),
            message,
        } => KmsError::NoSuchKey(message),
        Answer::Refused {
            reason:
                Some(
                    message::reason::PERMISSION_DENIED
                    | message::reason::AUTHENTICATION_NOT_SUCCESSFUL,
                ),
            message,
        } => KmsError::Denied(message),
        Answer::Refused { message, .. } => {
            KmsError::Failed(format!("the KMIP server refused: {message}"))
        }
        Answer::Malformed(why) => {
            KmsError::Unavailable(format!("the KMIP server's answer is malformed: {why}"))
        }
    }
}

/// A missing object, said in terms of the KMS key it held.
fn gone(key: &str, e: KmsError) -> KmsError {
    match e {
        KmsError::NoSuchKey(_) => KmsError::NoSuchKey(key.into()),
        e => e,
    }
}

#[async_trait::async_trait]
impl Kms for KmipKms {
    async fn generate(&self, key: &str) -> Result<DataKey, KmsError> {
        let plaintext = SecretKey::<32>::generate();
        let (version, wrapped) = self.wrap(key, &plaintext).await?;
        Ok(DataKey {
            version,
            plaintext,
            wrapped,
        })
    }

    async fn decrypt(
        &self,
        key: &str,
        version: u32,
        wrapped: &[u8],
    ) -> Result<SecretKey<32>, KmsError> {
        let aad = object_name(key, version);
        let mut tried = Vec::new();
        let mut failed = KmsError::NoSuchKey(key.into());
        // The objects of that version seen before, then (if none opens it) those there now.
        for listed in [false, true] {
            let ids = match listed {
                false => self.known(key, version),
                true => self
                    .versions(key)
                    .await?
                    .remove(&version)
                    .unwrap_or_default(),
            };
            for id in ids {
                if tried.contains(&id) {
                    continue;
                }
                match self.open(&id, &aad, wrapped).await {
                    Ok(opened) => return Ok(opened),
                    Err(KmsError::Unavailable(why)) => return Err(KmsError::Unavailable(why)),
                    Err(e) => failed = e,
                }
                tried.push(id);
            }
        }
        Err(gone(key, failed))
    }

    async fn rewrap(
        &self,
        key: &str,
        version: u32,
        wrapped: &[u8],
    ) -> Result<(u32, Vec<u8>), KmsError> {
        let data_key = self.decrypt(key, version, wrapped).await?;
        self.wrap(key, &data_key).await
    }

    async fn keys(&self) -> Result<Vec<String>, KmsError> {
        Ok(self.inventory().await?.into_keys().collect())
    }

    async fn ensure(&self, key: &str) -> Result<(), KmsError> {
        match self.versions(key).await {
            Ok(_) => Ok(()),
            Err(KmsError::NoSuchKey(_)) => self.make_version(key, 1).await,
            Err(e) => Err(e),
        }
    }

    async fn create(&self, key: &str) -> Result<(), KmsError> {
        match self.versions(key).await {
            Ok(_) => Err(KmsError::Failed(format!("KMS key {key} exists"))),
            Err(KmsError::NoSuchKey(_)) => self.make_version(key, 1).await,
            Err(e) => Err(e),
        }
    }

    async fn rotate(&self, key: &str) -> Result<u32, KmsError> {
        let newest = self.newest(key).await?;
        self.make_version(key, newest + 1).await?;
        Ok(newest + 1)
    }

    async fn newest(&self, key: &str) -> Result<u32, KmsError> {
        self.versions(key)
            .await?
            .last_key_value()
            .map(|(version, _)| *version)
            .ok_or_else(|| KmsError::NoSuchKey(key.into()))
    }

    async fn remove(&self, key: &str) -> Result<(), KmsError> {
        for id in self.versions(key).await?.into_values().flatten() {
            // A version revoked by an earlier, interrupted removal is refused a second
            // revocation by some servers; destroying it is what matters.
            if let Err(e) = self.call(Operation::Revoke, message::revoke(&id)).await {
                tracing::debug!(key, id, error = %e, "revoking a KMIP object");
            }
            self.call(Operation::Destroy, message::object(&id))
                .await
                .map_err(|e| gone(key, e))?;
            self.names
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_carry_the_key_and_version() {
        for (key, version) in [("coffer/s3", 1), ("a:vb:v", 12), ("arn:aws:kms:k/1", 3)] {
            let name = object_name(key, version);
            assert_eq!(parse_object_name(&name), Some((key.to_string(), version)));
        }
        for other in [
            "coffer-kms:key",
            "coffer-kms::v1",
            "coffer-kms:key:v0",
            "coffer-kms:key:vx",
            "coffer-kms:key:v01",
            "coffer-kms:key:v+1",
            "coffer-kmsx:key:v1",
            "mine:key:v1",
        ] {
            assert_eq!(parse_object_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_bad_address_or_missing_file_is_refused_before_any_call() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing.pem");
        for bad in ["127.0.0.1", ":5696", "host:port", "host:70000"] {
            let refused = KmipKms::connect(bad, &missing, &missing, &missing).err();
            assert!(
                refused.as_deref().is_some_and(|e| e.contains("HOST:PORT")),
                "{bad}: {refused:?}"
            );
        }
        let refused = KmipKms::connect("127.0.0.1:5696", &missing, &missing, &missing).err();
        assert!(
            refused
                .as_deref()
                .is_some_and(|e| e.contains("missing.pem")),
            "{refused:?}"
        );
    }

    #[test]
    fn refusals_keep_their_meaning() {
        let refused = |reason| Answer::Refused {
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
            refusal(Answer::Malformed("x".into())),
            KmsError::Unavailable(_)
        ));
    }
}
