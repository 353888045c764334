//! The built-in KMS: named keys with versions, kept in the replicated state, that wrap and
//! unwrap data keys for the front ends (the S3 gateway's server-side encryption). A data key
//! is wrapped by one version of a key, bound to the key's name and version; rotation adds a
//! version, rewrapping moves a wrapped data key to the newest version (the data key stays the
//! same, so nothing it sealed is re-encrypted), and removing a key leaves every data key it
//! wrapped unopenable.

use keys::{KeyEncryptionKey, SecretKey, WrappedKey};

use crate::state::KmsKey;

const NAME_BYTES_MAX: usize = 128;
/// KMS keys named so wrap pools' data keys; only pool commands touch them.
pub const POOL_KEY_PREFIX: &str = "pool.";

/// Refuses the KMS keys of pools to the general KMS requests and commands: a pool's keys
/// are released only by `PoolKeys`, under the pool's capabilities.
pub fn check_not_pool_key(name: &str) -> Result<(), String> {
    if name.starts_with(POOL_KEY_PREFIX) {
        return Err(format!(
            "KMS key {name}: keys named {POOL_KEY_PREFIX}* belong to pools sealed at the edge"
        ));
    }
    Ok(())
}

pub fn check_name(name: &str) -> Result<(), String> {
    check_not_pool_key(name)?;
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/' | b':'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "KMS key name {name:?}: use 1 to {NAME_BYTES_MAX} letters, digits, '_', '-', '.', \
             '/' or ':'"
        ))
    }
}

/// What a wrapped data key is bound to: the key's name and version.
fn context(name: &str, version: u32) -> Vec<u8> {
    format!("coffer-kms:{name}:{version}").into_bytes()
}

fn version_key(key: &KmsKey, name: &str, version: u32) -> Result<KeyEncryptionKey, String> {
    let material = version
        .checked_sub(1)
        .and_then(|i| key.versions.get(i as usize))
        .ok_or_else(|| format!("KMS key {name} has no version {version}"))?;
    let bytes: [u8; 32] = material
        .as_slice()
        .try_into()
        .map_err(|_| format!("KMS key {name} version {version} is damaged"))?;
    Ok(KeyEncryptionKey::from_bytes(bytes))
}

/// A fresh data key, and its wrap by the newest version of `key` (numbered from 1).
pub fn generate(key: &KmsKey, name: &str) -> Result<(u32, SecretKey<32>, WrappedKey), String> {
    let version = key.versions.len() as u32;
    let kek = version_key(key, name, version)?;
    let data_key = SecretKey::<32>::generate();
    let wrapped = keys::wrap(&kek, &data_key, &context(name, version));
    Ok((version, data_key, wrapped))
}

/// The data key `wrapped` by version `version` of `key`.
pub fn decrypt(
    key: &KmsKey,
    name: &str,
    version: u32,
    wrapped: &[u8],
) -> Result<SecretKey<32>, String> {
    let kek = version_key(key, name, version)?;
    keys::unwrap(
        &kek,
        &WrappedKey::from_bytes(wrapped.to_vec()),
        &context(name, version),
    )
    .map_err(|_| format!("the data key is not one KMS key {name} version {version} wrapped"))
}

/// The data key `wrapped` by version `version` of `key`, wrapped again by the newest
/// version, with that version's number.
pub fn rewrap(
    key: &KmsKey,
    name: &str,
    version: u32,
    wrapped: &[u8],
) -> Result<(u32, WrappedKey), String> {
    let data_key = decrypt(key, name, version, wrapped)?;
    let newest = key.versions.len() as u32;
    let kek = version_key(key, name, newest)?;
    Ok((newest, keys::wrap(&kek, &data_key, &context(name, newest))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_with(versions: usize) -> KmsKey {
        KmsKey {
            versions: (0..versions)
                .map(|_| KeyEncryptionKey::generate().expose().to_vec())
                .collect(),
            created_ns: 0,
        }
    }

    #[test]
    fn data_keys_open_under_their_version_only() {
        let mut key = key_with(1);
        let (v1, plain1, wrapped1) = generate(&key, "k").expect("generate");
        assert_eq!(v1, 1);
        key.versions
            .push(KeyEncryptionKey::generate().expose().to_vec());
        let (v2, plain2, wrapped2) = generate(&key, "k").expect("generate");
        assert_eq!(v2, 2);
        let opened1 = decrypt(&key, "k", 1, wrapped1.as_bytes()).expect("old version opens");
        assert_eq!(opened1.expose(), plain1.expose());
        let opened2 = decrypt(&key, "k", 2, wrapped2.as_bytes()).expect("new version opens");
        assert_eq!(opened2.expose(), plain2.expose());
        assert!(decrypt(&key, "k", 2, wrapped1.as_bytes()).is_err());
        assert!(decrypt(&key, "other", 1, wrapped1.as_bytes()).is_err());
        assert!(decrypt(&key, "k", 3, wrapped1.as_bytes()).is_err());
        assert!(decrypt(&key, "k", 0, wrapped1.as_bytes()).is_err());

        // Rewrapping moves a data key to the newest version and leaves it the same key.
        let (v, rewrapped) = rewrap(&key, "k", 1, wrapped1.as_bytes()).expect("rewrap");
        assert_eq!(v, 2);
        let opened = decrypt(&key, "k", 2, rewrapped.as_bytes()).expect("opens under v2");
        assert_eq!(opened.expose(), plain1.expose());
        assert!(rewrap(&key, "k", 2, wrapped1.as_bytes()).is_err());
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("coffer/sse-s3").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a b").is_err());
    }
}
