//! S3 users: a name, an access key and a secret key, kept in the gateway's pool.

use bytes::Bytes;
use client::{ObjectOp, Pool};
use rand::Rng;

use crate::layout::{self, User};
use crate::omap::Pages;
use crate::Error;

const NAME_BYTES_MAX: usize = 64;

fn check_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'@'));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "user name {name:?}: use 1 to {NAME_BYTES_MAX} letters, digits, '_', '-', '.' or '@'"
        )))
    }
}

fn random_text(len: usize, alphabet: &[u8]) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(alphabet[rng.random_range(0..alphabet.len())]))
        .collect()
}

/// Creates user `name` with fresh keys (20 characters of access key, as AWS's, and 40 of
/// secret: 238 random bits).
pub async fn create(pool: &Pool, name: &str) -> Result<User, Error> {
    check_name(name)?;
    if get(pool, name).await?.is_some() {
        return Err(Error::Exists(format!("user {name}")));
    }
    let user = User {
        name: name.into(),
        access_key: format!("CK{}", random_text(18, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")),
        secret_key: random_text(
            40,
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
        ),
        created_ns: layout::now_ns(),
    };
    let record = layout::encode(&user);
    let ops = vec![
        ObjectOp::Create { exclusive: false },
        ObjectOp::OmapSet {
            entries: vec![
                (layout::user_key(name), record.clone()),
                (layout::access_key_key(&user.access_key), record),
            ],
        },
    ];
    pool.operate(layout::USERS, ops, Bytes::new()).await?;
    Ok(user)
}

async fn lookup(pool: &Pool, key: Vec<u8>) -> Result<Option<User>, Error> {
    match pool.omap_get(layout::USERS, vec![key]).await {
        Ok(found) => match found.into_iter().next().and_then(|(_, value)| value) {
            Some(bytes) => Ok(Some(layout::decode(&bytes).map_err(Error::Corrupt)?)),
            None => Ok(None),
        },
        Err(client::Error::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub async fn get(pool: &Pool, name: &str) -> Result<Option<User>, Error> {
    lookup(pool, layout::user_key(name)).await
}

pub async fn by_access_key(pool: &Pool, access_key: &str) -> Result<Option<User>, Error> {
    lookup(pool, layout::access_key_key(access_key)).await
}

/// Every user, by name.
pub async fn list(pool: &Pool) -> Result<Vec<User>, Error> {
    let mut users = Vec::new();
    let mut pages = Pages::new(pool, layout::USERS, layout::before(b"name/"));
    while let Some(page) = pages.next().await? {
        for (key, value) in page {
            if !key.starts_with(b"name/") {
                return Ok(users);
            }
            users.push(layout::decode(&value).map_err(Error::Corrupt)?);
        }
    }
    Ok(users)
}

/// Removes user `name`; refused while the user owns a bucket (their objects would have no
/// owner left to reach them).
pub async fn remove(pool: &Pool, name: &str) -> Result<(), Error> {
    let Some(user) = get(pool, name).await? else {
        return Err(Error::NotFound(format!("user {name}")));
    };
    let owned: Vec<String> = crate::buckets::list(pool)
        .await?
        .into_iter()
        .filter(|(_, info)| info.owner == name)
        .map(|(bucket, _)| bucket)
        .collect();
    if !owned.is_empty() {
        return Err(Error::Invalid(format!(
            "user {name} owns buckets ({}); empty and remove them first",
            owned.join(", ")
        )));
    }
    let keys = vec![
        layout::user_key(name),
        layout::access_key_key(&user.access_key),
    ];
    pool.omap_remove(layout::USERS, keys).await?;
    Ok(())
}
