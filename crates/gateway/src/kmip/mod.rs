//! A KMIP server as the gateway's KMS ([`Kms`]), over TLS with a client certificate. Each
//! version of a KMS key is one 256-bit AES key on the server, made there and never sent out,
//! named `coffer-kms:NAME:vN` in the object group `coffer-kms`. A data key is made here and
//! wrapped by the server's Encrypt under the newest version, with AES-GCM, a fresh random
//! 12-byte nonce and the version's name as additional data; what is stored is nonce ‖
//! ciphertext ‖ tag. Removing a key revokes and destroys every version. The gateway's
//! data-key cache keeps GETs of recently used keys off the server.

mod link;
pub(crate) mod message;
pub mod ttlv;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use keys::SecretKey;
use message::Operation;

use crate::kms::{DataKey, Kms, KmsError};

/// The object group every version of every KMS key is made in.
const GROUP: &str = "coffer-kms";

/// The name of the server object that holds `version` of KMS key `key`, which is also the
/// additional data of every wrap it makes.
fn version_name(key: &str, version: u32) -> String {
    format!("{GROUP}:{key}:v{version}")
}

/// The KMS key and version an object named by [`version_name`] holds; None for other names.
fn parse_version_name(name: &str) -> Option<(String, u32)> {
    let (key, version) = name
        .strip_prefix(GROUP)?
        .strip_prefix(':')?
        .rsplit_once(":v")?;
    let number: u32 = version.parse().ok().filter(|v| *v > 0)?;
    // Only the form version_name writes: no sign, no leading zeros.
    (!key.is_empty() && number.to_string() == version).then(|| (key.to_string(), number))
}

/// Every KMS key on the server: its versions and the objects that hold each, their ids in
/// string order. A version is one object, unless two gateways made it at once (each makes
/// the key of SSE-S3 when it starts, and `coffer kms key rotate` may run beside another):
/// then every one of them wraps with the first id in that order and unwraps with
/// whichever object opens the data key.
type Inventory = BTreeMap<String, BTreeMap<u32, Vec<String>>>;

/// A KMIP server, and the names of the objects seen on it so far (an object's name never
/// changes, so each is asked for once; None for objects not of this scheme).
pub struct KmipKms {
    link: link::Link,
    names: std::sync::Mutex<HashMap<String, Option<(String, u32)>>>,
}

/// A missing object, said in terms of the KMS key it held.
fn gone(key: &str, e: KmsError) -> KmsError {
    match e {
        KmsError::NoSuchKey(_) => KmsError::NoSuchKey(key.into()),
        e => e,
    }
}

impl KmipKms {
    /// The server at `address` (`HOST:PORT`), whose certificate `ca` (PEM) signs, reached as
    /// the client whose PEM `certificate` chain and `private_key` are given. Nothing is sent
    /// yet.
    pub fn connect(
        address: &str,
        certificate: &Path,
        private_key: &Path,
        ca: &Path,
    ) -> Result<KmipKms, String> {
        Ok(KmipKms {
            link: link::Link::new(address, certificate, private_key, ca)?,
            names: Default::default(),
        })
    }

    fn names(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<(String, u32)>>> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every KMS key on the server and the objects of its versions: the group's objects
    /// listed, and the names of those not seen before asked for. An object destroyed
    /// between the two is left out.
    async fn inventory(&self) -> Result<Inventory, KmsError> {
        let found = self
            .link
            .call(Operation::Locate, message::locate(GROUP))
            .await?;
        let ids = message::located(&found);
        let unnamed: Vec<String> = {
            let names = self.names();
            ids.iter()
                .filter(|id| !names.contains_key(*id))
                .cloned()
                .collect()
        };
        for id in unnamed {
            let attributes = match self
                .link
                .call(Operation::GetAttributes, message::get_names(&id))
                .await
            {
                Err(KmsError::NoSuchKey(_)) => continue,
                attributes => attributes?,
            };
            let ours = message::names(&attributes)
                .iter()
                .find_map(|name| parse_version_name(name));
            self.names().insert(id, ours);
        }
        let names = self.names();
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

    /// Makes `version` of `key` on the server, ready to wrap. An object whose activation
    /// fails is destroyed again if it can be; one that stays is activated on first use.
    async fn make_version(&self, key: &str, version: u32) -> Result<(), KmsError> {
        let name = version_name(key, version);
        let made = self
            .link
            .call(Operation::Create, message::create(&name, GROUP))
            .await?;
        let id = message::named_id(&made)
            .ok_or_else(|| KmsError::Failed("the KMIP server's Create named no object".into()))?;
        if let Err(e) = self
            .link
            .call(Operation::Activate, message::object(&id))
            .await
        {
            if let Err(left) = self
                .link
                .call(Operation::Destroy, message::object(&id))
                .await
            {
                tracing::warn!(name, id, error = %left, "a KMIP object left pre-active");
            }
            return Err(gone(key, e));
        }
        self.names().insert(id, Some((key.to_string(), version)));
        Ok(())
    }

    /// The objects known to hold `version` of `key`, their ids in string order.
    fn known(&self, key: &str, version: u32) -> Vec<String> {
        let mut ids: Vec<String> = self
            .names()
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

    /// The data key `wrapped` by object `id`, whose name is `name`. An object the server no
    /// longer has is forgotten.
    async fn open(&self, id: &str, name: &str, wrapped: &[u8]) -> Result<SecretKey<32>, KmsError> {
        let payload = message::decrypt(id, wrapped, name.as_bytes()).ok_or_else(|| {
            KmsError::Failed(format!("a data key wrapped by {name} is too short"))
        })?;
        let answer = self.link.call(Operation::Decrypt, payload).await;
        if let Err(KmsError::NoSuchKey(_)) = answer {
            self.names().remove(id);
        }
        let opened = message::opened(&answer?)
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .map(zeroize::Zeroizing::new)
            .ok_or_else(|| KmsError::Failed(format!("{name} did not unwrap a 32-byte data key")))?;
        Ok(SecretKey::from_bytes(*opened))
    }

    /// `data_key` wrapped by the newest version of `key`. An object an interrupted creation
    /// left pre-active is activated first: the server wraps only under active keys.
    async fn wrap(&self, key: &str, data_key: &SecretKey<32>) -> Result<(u32, Vec<u8>), KmsError> {
        let (version, id) = self
            .versions(key)
            .await?
            .pop_last()
            .and_then(|(version, ids)| Some((version, ids.into_iter().next()?)))
            .ok_or_else(|| KmsError::NoSuchKey(key.into()))?;
        let name = version_name(key, version);
        let nonce: [u8; message::NONCE_BYTES] = rand::random();
        let encrypt = || message::encrypt(&id, data_key.expose(), &nonce, name.as_bytes());
        let answer = match self.link.call(Operation::Encrypt, encrypt()).await {
            Err(KmsError::Denied(why)) => {
                tracing::info!(name, id, "activating a KMIP object before wrapping: {why}");
                self.link
                    .call(Operation::Activate, message::object(&id))
                    .await?;
                self.link.call(Operation::Encrypt, encrypt()).await?
            }
            answer => answer?,
        };
        let wrapped = message::sealed(&answer, &nonce).ok_or_else(|| {
            KmsError::Failed("the KMIP server's Encrypt gave no ciphertext and tag".into())
        })?;
        Ok((version, wrapped))
    }

    /// The data key `wrapped` by `version` of `key`: by the objects of that version seen
    /// before, then (if none opens it) by those there now.
    async fn unwrap(
        &self,
        key: &str,
        version: u32,
        wrapped: &[u8],
    ) -> Result<SecretKey<32>, KmsError> {
        let name = version_name(key, version);
        let mut tried = Vec::new();
        let mut failed = KmsError::NoSuchKey(key.into());
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
                match self.open(&id, &name, wrapped).await {
                    Ok(opened) => return Ok(opened),
                    Err(KmsError::Unavailable(why)) => return Err(KmsError::Unavailable(why)),
                    Err(e) => failed = e,
                }
                tried.push(id);
            }
        }
        Err(failed)
    }

    /// Revokes and destroys every version of `key`. A version revoked by an earlier,
    /// interrupted removal may be refused a second revocation; destroying it is what
    /// matters.
    async fn destroy(&self, key: &str) -> Result<(), KmsError> {
        for id in self.versions(key).await?.into_values().flatten() {
            if let Err(e) = self
                .link
                .call(Operation::Revoke, message::revoke(&id))
                .await
            {
                tracing::debug!(key, id, error = %e, "revoking a KMIP object");
            }
            self.link
                .call(Operation::Destroy, message::object(&id))
                .await?;
            self.names().remove(&id);
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Kms for KmipKms {
    async fn generate(&self, key: &str) -> Result<DataKey, KmsError> {
        let plaintext = SecretKey::<32>::generate();
        let (version, wrapped) = self.wrap(key, &plaintext).await.map_err(|e| gone(key, e))?;
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
        self.unwrap(key, version, wrapped)
            .await
            .map_err(|e| gone(key, e))
    }

    async fn rewrap(
        &self,
        key: &str,
        version: u32,
        wrapped: &[u8],
    ) -> Result<(u32, Vec<u8>), KmsError> {
        let data_key = self.decrypt(key, version, wrapped).await?;
        self.wrap(key, &data_key).await.map_err(|e| gone(key, e))
    }

    async fn keys(&self) -> Result<Vec<String>, KmsError> {
        Ok(self.inventory().await?.into_keys().collect())
    }

    async fn ensure(&self, key: &str) -> Result<(), KmsError> {
        if self.inventory().await?.contains_key(key) {
            return Ok(());
        }
        self.make_version(key, 1).await
    }

    async fn create(&self, key: &str) -> Result<(), KmsError> {
        if self.inventory().await?.contains_key(key) {
            return Err(KmsError::Failed(format!("KMS key {key} exists")));
        }
        self.make_version(key, 1).await
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
        self.destroy(key).await.map_err(|e| gone(key, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_names_carry_the_key_and_version() {
        for (key, version) in [("coffer/s3", 1), ("a:vb:v", 12), ("arn:aws:kms:k/1", 3)] {
            let name = version_name(key, version);
            assert_eq!(parse_version_name(&name), Some((key.to_string(), version)));
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
            assert_eq!(parse_version_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_missing_object_is_named_by_its_key() {
        let named = gone(
            "photos",
            KmsError::NoSuchKey("Could not locate object: 17".into()),
        );
        assert!(matches!(named, KmsError::NoSuchKey(key) if key == "photos"));
        assert!(matches!(
            gone("photos", KmsError::Failed("x".into())),
            KmsError::Failed(_)
        ));
    }
}
