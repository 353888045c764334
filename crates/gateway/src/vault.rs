//! Vault's or OpenBao's transit engine as the gateway's KMS ([`Kms`]), through vaultrs: a
//! KMS key is a transit key, a data key comes from `datakey/plaintext` and is stored as the
//! ciphertext transit gives (`vault:vN:...`, N the key version that wraps it), unwrapped by
//! `decrypt` and rewrapped by `rewrap`. The key material never leaves the server; the
//! gateway's data-key cache keeps GETs of recently used keys off it.

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use keys::SecretKey;
use vaultrs::api::transit::requests::{DataKeyType, UpdateKeyConfigurationRequest};
use vaultrs::client::{VaultClient, VaultClientSettingsBuilder};
use vaultrs::error::ClientError;

use crate::kms::{error_chain as chain, DataKey, Kms, KmsError};

/// How long one call to the server may take before it counts as unavailable.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A transit engine: the server's client, where the engine is mounted, and when the token
/// is to be renewed.
pub struct VaultKms {
    client: VaultClient,
    mount: String,
    renewal: std::sync::Mutex<Renewal>,
}

/// When a token is to be renewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Renewal {
    /// Not looked up yet.
    Unknown,
    /// It does not expire, or cannot be renewed.
    Never,
    At(Instant),
}

/// When to renew a token that `renewable` or not, has `ttl_seconds` left at `now` (0: it
/// does not expire): halfway, so that one failed attempt leaves time for others.
fn next_renewal(now: Instant, ttl_seconds: u64, renewable: bool) -> Renewal {
    if !renewable || ttl_seconds == 0 {
        return Renewal::Never;
    }
    Renewal::At(now + Duration::from_secs(ttl_seconds / 2))
}

impl VaultKms {
    /// The transit engine mounted at `mount` of the server at `address` (`https://...`),
    /// reached with `token`, trusting `ca` (PEM) beside the system's roots.
    pub fn connect(
        address: &str,
        mount: &str,
        token: &str,
        ca: Option<&Path>,
    ) -> Result<VaultKms, String> {
        let uri: hyper::Uri = address
            .parse()
            .map_err(|e| format!("Vault address {address:?}: {e}"))?;
        if !matches!(uri.scheme_str(), Some("https" | "http")) || uri.host().is_none() {
            return Err(format!("Vault address {address:?}: give https://HOST:PORT"));
        }
        let mut settings = VaultClientSettingsBuilder::default();
        settings
            .address(address)
            .token(token.trim())
            .verify(true)
            .timeout(Some(CALL_TIMEOUT))
            .ca_certs(
                ca.map(|path| path.display().to_string())
                    .into_iter()
                    .collect(),
            );
        let settings = settings
            .build()
            .map_err(|e| format!("Vault settings: {e}"))?;
        let client = VaultClient::new(settings).map_err(|e| format!("Vault client: {e}"))?;
        Ok(VaultKms {
            client,
            mount: mount.to_string(),
            renewal: std::sync::Mutex::new(Renewal::Unknown),
        })
    }
}

/// The transit name of KMS key `key`. Transit takes `[A-Za-z0-9_]`, with `-` and `.`
/// inside a name only; every other byte, and `_` itself, becomes `_XX` (its hex in capitals):
/// `coffer/s3`, the key of SSE-S3, is `coffer_2Fs3` in transit.
fn transit_name(key: &str) -> String {
    let last = key.len().saturating_sub(1);
    let mut name = String::with_capacity(key.len());
    for (at, byte) in key.bytes().enumerate() {
        let inside = at != 0 && at != last;
        if byte.is_ascii_alphanumeric() || (inside && matches!(byte, b'-' | b'.')) {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("_{byte:02X}"));
        }
    }
    name
}

/// The KMS key a transit name stands for ([`transit_name`] undone; a name made in transit
/// by hand is itself unless it holds `_` and two hex capitals).
fn key_name(transit: &str) -> String {
    let bytes = transit.as_bytes();
    let mut key = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = (bytes[at] == b'_')
            .then(|| transit.get(at + 1..at + 3))
            .flatten()
            .filter(|hex| {
                hex.bytes()
                    .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
            })
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                key.push(byte);
                at += 3;
            }
            None => {
                key.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&key).into_owned()
}

/// The key version that wrapped `ciphertext` (`vault:v3:...` is version 3).
fn version_of(ciphertext: &str) -> Result<u32, KmsError> {
    ciphertext
        .strip_prefix("vault:v")
        .and_then(|rest| rest.split_once(':'))
        .and_then(|(version, _)| version.parse().ok())
        .ok_or_else(|| {
            KmsError::Failed(format!(
                "a wrapped data key {ciphertext:.16}... is not transit's vault:vN:..."
            ))
        })
}

/// The 32 bytes of a base64 plaintext transit gave.
fn data_key(plaintext: &str) -> Result<SecretKey<32>, KmsError> {
    let bytes = zeroize::Zeroizing::new(
        base64::engine::general_purpose::STANDARD
            .decode(plaintext)
            .map_err(|_| KmsError::Failed("transit gave a data key that is not base64".into()))?,
    );
    if bytes.len() != 32 {
        return Err(KmsError::Failed(
            "transit gave a data key that is not 32 bytes".into(),
        ));
    }
    let mut key = zeroize::Zeroizing::new([0u8; 32]);
    key.copy_from_slice(&bytes);
    Ok(SecretKey::from_bytes(*key))
}

/// A wrapped data key as stored, `version` recorded beside it: the ciphertext's text, which
/// must name the same version.
fn recorded(wrapped: &[u8], version: u32) -> Result<&str, KmsError> {
    let text = std::str::from_utf8(wrapped)
        .map_err(|_| KmsError::Failed("a wrapped data key is not transit's text".into()))?;
    let named = version_of(text)?;
    if named != version {
        return Err(KmsError::Failed(format!(
            "a data key recorded under version {version} was wrapped by version {named}"
        )));
    }
    Ok(text)
}

/// What a failed call means: transit answers 400 with "not found" for a missing key (and
/// 404 to a list of none); 403 is a token that may not; a path no engine serves is the
/// configuration's mistake.
fn refused(key: &str, e: ClientError) -> KmsError {
    match e {
        ClientError::APIError { code: 403, errors } => KmsError::Denied(errors.join("; ")),
        ClientError::APIError { code, errors }
            if errors.iter().any(|e| e.contains("no handler for route")) =>
        {
            KmsError::Failed(format!(
                "Vault answered {code}: {} (is a transit engine mounted there?)",
                errors.join("; ")
            ))
        }
        ClientError::APIError { code, errors }
            if code == 404 || errors.iter().any(|e| e.contains("not found")) =>
        {
            KmsError::NoSuchKey(key.into())
        }
        ClientError::APIError { code, errors } => {
            KmsError::Failed(format!("Vault answered {code}: {}", errors.join("; ")))
        }
        e => KmsError::Unavailable(chain(&e)),
    }
}

#[async_trait::async_trait]
impl Kms for VaultKms {
    async fn generate(&self, key: &str) -> Result<DataKey, KmsError> {
        let made = vaultrs::transit::generate::data_key(
            &self.client,
            &self.mount,
            &transit_name(key),
            DataKeyType::Plaintext,
            None,
        )
        .await
        .map_err(|e| refused(key, e))?;
        let plaintext = made
            .plaintext
            .ok_or_else(|| KmsError::Failed("transit gave no plaintext data key".into()))?;
        Ok(DataKey {
            version: version_of(&made.ciphertext)?,
            plaintext: data_key(&plaintext)?,
            wrapped: made.ciphertext.into_bytes(),
        })
    }

    async fn decrypt(
        &self,
        key: &str,
        version: u32,
        wrapped: &[u8],
    ) -> Result<SecretKey<32>, KmsError> {
        let opened = vaultrs::transit::data::decrypt(
            &self.client,
            &self.mount,
            &transit_name(key),
            recorded(wrapped, version)?,
            None,
        )
        .await
        .map_err(|e| refused(key, e))?;
        data_key(&opened.plaintext)
    }

    async fn rewrap(
        &self,
        key: &str,
        version: u32,
        wrapped: &[u8],
    ) -> Result<(u32, Vec<u8>), KmsError> {
        let rewrapped = vaultrs::transit::data::rewrap(
            &self.client,
            &self.mount,
            &transit_name(key),
            recorded(wrapped, version)?,
            None,
        )
        .await
        .map_err(|e| refused(key, e))?;
        let version = version_of(&rewrapped.ciphertext)?;
        Ok((version, rewrapped.ciphertext.into_bytes()))
    }

    async fn keys(&self) -> Result<Vec<String>, KmsError> {
        match vaultrs::transit::key::list(&self.client, &self.mount).await {
            Ok(listed) => Ok(listed.keys.iter().map(|name| key_name(name)).collect()),
            Err(ClientError::APIError { code: 404, .. }) => Ok(Vec::new()),
            Err(e) => Err(refused("", e)),
        }
    }

    async fn ensure(&self, key: &str) -> Result<(), KmsError> {
        // Creating a key that exists changes nothing in transit.
        vaultrs::transit::key::create(&self.client, &self.mount, &transit_name(key), None)
            .await
            .map_err(|e| refused(key, e))
    }

    async fn create(&self, key: &str) -> Result<(), KmsError> {
        if self.keys().await?.iter().any(|k| k == key) {
            return Err(KmsError::Failed(format!("KMS key {key} exists")));
        }
        self.ensure(key).await
    }

    async fn rotate(&self, key: &str) -> Result<u32, KmsError> {
        vaultrs::transit::key::rotate(&self.client, &self.mount, &transit_name(key))
            .await
            .map_err(|e| refused(key, e))?;
        self.newest(key).await
    }

    async fn newest(&self, key: &str) -> Result<u32, KmsError> {
        use vaultrs::api::transit::responses::ReadKeyData;
        let read = vaultrs::transit::key::read(&self.client, &self.mount, &transit_name(key))
            .await
            .map_err(|e| refused(key, e))?;
        let versions: Vec<u32> = match read.keys {
            ReadKeyData::Symmetric(versions) => {
                versions.keys().filter_map(|v| v.parse().ok()).collect()
            }
            ReadKeyData::Asymmetric(versions) => {
                versions.keys().filter_map(|v| v.parse().ok()).collect()
            }
        };
        versions
            .into_iter()
            .max()
            .ok_or_else(|| KmsError::Failed(format!("transit key {key} has no versions")))
    }

    /// Renews the token halfway through its life: a token with a TTL (a periodic one, or
    /// one of a role) would otherwise expire under a gateway that runs for longer.
    async fn upkeep(&self) -> Result<(), KmsError> {
        let now = Instant::now();
        let state = *self.renewal.lock().unwrap_or_else(|p| p.into_inner());
        let next = match state {
            Renewal::Never => return Ok(()),
            Renewal::At(at) if now < at => return Ok(()),
            Renewal::Unknown => {
                let token = vaultrs::token::lookup_self(&self.client)
                    .await
                    .map_err(|e| refused("", e))?;
                next_renewal(now, token.ttl, token.renewable.unwrap_or(false))
            }
            Renewal::At(_) => {
                let renewed = vaultrs::token::renew_self(&self.client, None)
                    .await
                    .map_err(|e| refused("", e))?;
                tracing::info!(ttl_seconds = renewed.lease_duration, "Vault token renewed");
                next_renewal(now, renewed.lease_duration, renewed.renewable)
            }
        };
        *self.renewal.lock().unwrap_or_else(|p| p.into_inner()) = next;
        Ok(())
    }

    async fn remove(&self, key: &str) -> Result<(), KmsError> {
        // Transit deletes a key only once its configuration allows it.
        let mut allow = UpdateKeyConfigurationRequest::builder();
        allow.deletion_allowed(true);
        vaultrs::transit::key::update(
            &self.client,
            &self.mount,
            &transit_name(key),
            Some(&mut allow),
        )
        .await
        .map_err(|e| refused(key, e))?;
        vaultrs::transit::key::delete(&self.client, &self.mount, &transit_name(key))
            .await
            .map_err(|e| refused(key, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_read_from_the_ciphertext() {
        assert_eq!(version_of("vault:v3:abc=").ok(), Some(3));
        assert_eq!(version_of("vault:v12:a:b").ok(), Some(12));
        for bad in ["vault:3:abc", "vault:vx:abc", "v3:abc", "vault:v3"] {
            assert!(version_of(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn key_names_become_names_transit_takes_and_back() {
        for (key, transit) in [
            ("coffer/s3", "coffer_2Fs3"),
            ("plain-key.1", "plain-key.1"),
            ("a_b", "a_5Fb"),
            ("-edge.", "_2Dedge_2E"),
            ("a@b", "a_40b"),
            ("arn:aws:kms:key/1", "arn_3Aaws_3Akms_3Akey_2F1"),
            ("clé", "cl_C3_A9"),
        ] {
            assert_eq!(transit_name(key), transit, "{key}");
            assert_eq!(key_name(transit), key, "{transit}");
        }
        for by_hand in ["made.by-hand", "my_key", "odd_4", "lower_ab"] {
            assert_eq!(key_name(by_hand), by_hand);
        }
    }

    #[test]
    fn a_stored_wrap_must_name_its_recorded_version() {
        assert_eq!(recorded(b"vault:v2:abc", 2).ok(), Some("vault:v2:abc"));
        assert!(recorded(b"vault:v2:abc", 1).is_err());
        assert!(recorded(b"\xff", 1).is_err());
    }

    #[test]
    fn a_token_is_renewed_halfway_unless_it_never_expires() {
        let now = Instant::now();
        let halfway = Renewal::At(now + Duration::from_secs(30));
        assert_eq!(next_renewal(now, 60, true), halfway);
        assert_eq!(next_renewal(now, 60, false), Renewal::Never);
        assert_eq!(next_renewal(now, 0, true), Renewal::Never);
    }

    #[test]
    fn a_data_key_is_32_bytes_of_base64() {
        let encoded = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        assert!(data_key(&encoded).is_ok());
        let short = base64::engine::general_purpose::STANDARD.encode([7u8; 16]);
        assert!(data_key(&short).is_err());
        assert!(data_key("not base64!").is_err());
    }

    #[test]
    fn an_address_that_is_not_a_url_is_refused_before_vaultrs_sees_it() {
        for bad in ["127.0.0.1:8200", "ftp://host:1", "https://", "not a url"] {
            assert!(
                VaultKms::connect(bad, "transit", "t", None).is_err(),
                "{bad}"
            );
        }
    }
}
