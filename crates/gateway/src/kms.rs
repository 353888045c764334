//! The key management service behind server-side encryption, as a trait: the built-in
//! backend is the monitors' KMS ([`MonitorKms`]); the external ones (Vault's or OpenBao's
//! transit engine, `crate::vault`, and a KMIP server, `crate::kmip`) implement the same
//! calls.

use keys::SecretKey;

/// A fresh data key: in the clear, and as wrapped by `version` of its KMS key.
pub struct DataKey {
    pub version: u32,
    pub plaintext: SecretKey<32>,
    pub wrapped: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum KmsError {
    /// The key does not exist (or was removed): what it protects cannot be read.
    #[error("KMS key {0} does not exist")]
    NoSuchKey(String),
    /// The KMS refuses this gateway (its identity, or the link it came over).
    #[error("the KMS refuses: {0}")]
    Denied(String),
    /// The KMS did not answer, or failed; trying again may work.
    #[error("the KMS is unavailable: {0}")]
    Unavailable(String),
    /// The KMS turned the request down for a reason of its own (a key that exists).
    #[error("{0}")]
    Failed(String),
}

#[async_trait::async_trait]
pub trait Kms: Send + Sync + 'static {
    /// A fresh data key wrapped by the newest version of `key`.
    async fn generate(&self, key: &str) -> Result<DataKey, KmsError>;
    /// The data key `wrapped` by `version` of `key`.
    async fn decrypt(
        &self,
        key: &str,
        version: u32,
        wrapped: &[u8],
    ) -> Result<SecretKey<32>, KmsError>;
    /// The data key `wrapped` by `version` of `key`, wrapped again by the newest version of
    /// `key`: that version and the new wrap (rotation's rewrap; the data key is unchanged).
    async fn rewrap(
        &self,
        key: &str,
        version: u32,
        wrapped: &[u8],
    ) -> Result<(u32, Vec<u8>), KmsError>;
    /// The names of the keys that exist.
    async fn keys(&self) -> Result<Vec<String>, KmsError>;
    /// Creates `key`; an existing key is not an error.
    async fn ensure(&self, key: &str) -> Result<(), KmsError>;
    /// Creates `key`; an existing key is refused.
    async fn create(&self, key: &str) -> Result<(), KmsError>;
    /// Adds a version to `key`, which wraps new data keys from then on; returns it.
    async fn rotate(&self, key: &str) -> Result<u32, KmsError>;
    /// The newest version of `key`.
    async fn newest(&self, key: &str) -> Result<u32, KmsError>;
    /// Removes `key` and every version of it: what its data keys protect can no longer be
    /// read (crypto-shredding).
    async fn remove(&self, key: &str) -> Result<(), KmsError>;
    /// What the client of the KMS must do now and then (renew its token, for one); the
    /// gateway calls it every few seconds. Nothing, unless a backend says otherwise.
    async fn upkeep(&self) -> Result<(), KmsError> {
        Ok(())
    }
}

/// An error with its causes, which say what an external KMS's connection found (refused,
/// a certificate).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The KMS the monitors keep (design/monitors.md), reached over the cluster connection.
pub struct MonitorKms {
    pub cluster: client::Cluster,
}

fn kms_error(key: &str, e: client::Error) -> KmsError {
    match e {
        client::Error::Failed(why) if why.contains("does not exist") => {
            KmsError::NoSuchKey(key.into())
        }
        client::Error::Denied(why) => KmsError::Denied(why),
        client::Error::Failed(why) => KmsError::Failed(why),
        e => KmsError::Unavailable(e.to_string()),
    }
}

#[async_trait::async_trait]
impl Kms for MonitorKms {
    async fn generate(&self, key: &str) -> Result<DataKey, KmsError> {
        let made = self
            .cluster
            .kms_generate(key)
            .await
            .map_err(|e| kms_error(key, e))?;
        Ok(DataKey {
            version: made.version,
            plaintext: made.plaintext,
            wrapped: made.wrapped,
        })
    }

    async fn decrypt(
        &self,
        key: &str,
        version: u32,
        wrapped: &[u8],
    ) -> Result<SecretKey<32>, KmsError> {
        self.cluster
            .kms_decrypt(key, version, wrapped)
            .await
            .map(|opened| opened.plaintext)
            .map_err(|e| kms_error(key, e))
    }

    async fn rewrap(
        &self,
        key: &str,
        version: u32,
        wrapped: &[u8],
    ) -> Result<(u32, Vec<u8>), KmsError> {
        self.cluster
            .kms_rewrap(key, version, wrapped)
            .await
            .map_err(|e| kms_error(key, e))
    }

    async fn keys(&self) -> Result<Vec<String>, KmsError> {
        let keys = self
            .cluster
            .kms_keys()
            .await
            .map_err(|e| kms_error("", e))?;
        Ok(keys.into_iter().map(|k| k.name).collect())
    }

    async fn ensure(&self, key: &str) -> Result<(), KmsError> {
        if self.keys().await?.iter().any(|k| k == key) {
            return Ok(());
        }
        match self.cluster.kms_key_create(key).await {
            Ok(()) => Ok(()),
            // Another gateway may have made it meanwhile (the monitors refuse the second
            // create, however that refusal reaches us): then it is there now.
            Err(e) if self.keys().await?.iter().any(|k| k == key) => {
                tracing::debug!(key, error = %e, "KMS key made meanwhile by another gateway");
                Ok(())
            }
            Err(e) => Err(kms_error(key, e)),
        }
    }

    async fn create(&self, key: &str) -> Result<(), KmsError> {
        self.cluster
            .kms_key_create(key)
            .await
            .map_err(|e| kms_error(key, e))
    }

    async fn rotate(&self, key: &str) -> Result<u32, KmsError> {
        self.cluster
            .kms_key_rotate(key)
            .await
            .map_err(|e| kms_error(key, e))?;
        self.newest(key).await
    }

    async fn newest(&self, key: &str) -> Result<u32, KmsError> {
        let keys = self
            .cluster
            .kms_keys()
            .await
            .map_err(|e| kms_error(key, e))?;
        keys.iter()
            .find(|k| k.name == key)
            .map(|k| k.versions)
            .ok_or_else(|| KmsError::NoSuchKey(key.into()))
    }

    async fn remove(&self, key: &str) -> Result<(), KmsError> {
        self.cluster
            .kms_key_remove(key)
            .await
            .map_err(|e| kms_error(key, e))
    }
}
