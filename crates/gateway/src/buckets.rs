//! Buckets and their indexes: who owns a bucket, which objects it holds.

use bytes::Bytes;
use client::{ObjectOp, Pool};

use crate::layout::{self, BucketInfo, ObjectEntry, Sse};
use crate::omap::{Pages, PAGE};
use crate::Error;

/// Every bucket with its owner, by name.
pub async fn list(pool: &Pool) -> Result<Vec<(String, BucketInfo)>, Error> {
    let mut out = Vec::new();
    let mut pages = Pages::new(pool, layout::BUCKETS, None);
    while let Some(page) = pages.next().await? {
        for (key, value) in page {
            let name = String::from_utf8_lossy(&key).into_owned();
            out.push((name, layout::decode(&value).map_err(Error::Corrupt)?));
        }
    }
    Ok(out)
}

/// The owner and creation time of `bucket`.
pub async fn info(pool: &Pool, bucket: &str) -> Result<BucketInfo, Error> {
    match pool.attrs(&layout::index_object(bucket)).await {
        Ok(attrs) => match attrs.get(layout::BUCKET_ATTR) {
            Some(bytes) => layout::decode(bytes).map_err(Error::Corrupt),
            None => Err(Error::NotFound(format!("bucket {bucket}"))),
        },
        Err(client::Error::NotFound) => Err(Error::NotFound(format!("bucket {bucket}"))),
        Err(e) => Err(e.into()),
    }
}

async fn list_in_buckets(pool: &Pool, bucket: &str, info: &BucketInfo) -> Result<(), Error> {
    let ops = vec![
        ObjectOp::Create { exclusive: false },
        ObjectOp::OmapSet {
            entries: vec![(bucket.as_bytes().to_vec(), layout::encode(info))],
        },
    ];
    pool.operate(layout::BUCKETS, ops, Bytes::new()).await?;
    Ok(())
}

/// Creates `bucket` owned by `owner`. `Exists` carries the current owner's name.
pub async fn create(pool: &Pool, bucket: &str, owner: &str) -> Result<(), Error> {
    let record = BucketInfo {
        owner: owner.into(),
        created_ns: layout::now_ns(),
    };
    let ops = vec![
        ObjectOp::Create { exclusive: true },
        ObjectOp::SetAttr {
            name: layout::BUCKET_ATTR.into(),
            value: layout::encode(&record),
        },
    ];
    match pool
        .operate(&layout::index_object(bucket), ops, Bytes::new())
        .await
    {
        Ok(_) => list_in_buckets(pool, bucket, &record).await,
        Err(client::Error::Exists) => {
            let current = info(pool, bucket).await?;
            // A creation that stopped between claiming the name and listing the bucket
            // is finished here, by its owner asking again.
            if current.owner == owner {
                list_in_buckets(pool, bucket, &current).await?;
            }
            Err(Error::Exists(current.owner))
        }
        Err(e) => Err(e.into()),
    }
}

/// Removes `bucket` if it holds no object. The bucket is marked first, so that a PUT that
/// commits after the emptiness check is refused rather than removed with the index.
pub async fn remove(pool: &Pool, bucket: &str) -> Result<(), Error> {
    let index = layout::index_object(bucket);
    let mark = ObjectOp::SetAttr {
        name: layout::DELETING_ATTR.into(),
        value: vec![1],
    };
    pool.operate(&index, vec![ObjectOp::AssertExists, mark], Bytes::new())
        .await
        .map_err(|e| match e {
            client::Error::NotFound => Error::NotFound(format!("bucket {bucket}")),
            e => e.into(),
        })?;
    let first = pool.omap_list(&index, None, 1).await?;
    let holds_objects = first
        .first()
        .is_some_and(|(key, _)| key.first() != Some(&layout::UPLOADS));
    if holds_objects {
        pool.remove_attr(&index, layout::DELETING_ATTR).await?;
        return Err(Error::NotEmpty(bucket.into()));
    }
    // Uploads in progress go with the bucket (no new one can start now).
    let (uploads, _) = crate::multipart::list(pool, bucket, "", None, None, usize::MAX).await?;
    for (key, id, _) in uploads {
        if let Err(e) = crate::multipart::abort(pool, bucket, &key, &id).await {
            pool.remove_attr(&index, layout::DELETING_ATTR).await?;
            return Err(e);
        }
    }
    pool.omap_remove(layout::BUCKETS, vec![bucket.as_bytes().to_vec()])
        .await?;
    match pool.remove(&index).await {
        Ok(()) | Err(client::Error::NotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The default encryption of `bucket`'s new objects, if it has one.
pub async fn encryption(pool: &Pool, bucket: &str) -> Result<Option<Sse>, Error> {
    let attrs = pool
        .attrs(&layout::index_object(bucket))
        .await
        .map_err(|e| missing(e, bucket))?;
    match attrs.get(layout::ENCRYPTION_ATTR) {
        Some(bytes) => Ok(Some(layout::decode(bytes).map_err(Error::Corrupt)?)),
        None => Ok(None),
    }
}

/// Sets (or with `None`, removes) the default encryption of `bucket`'s new objects.
pub async fn set_encryption(pool: &Pool, bucket: &str, sse: Option<&Sse>) -> Result<(), Error> {
    let index = layout::index_object(bucket);
    match sse {
        Some(sse) => {
            pool.set_attr(&index, layout::ENCRYPTION_ATTR, &layout::encode(sse))
                .await?
        }
        None => pool.remove_attr(&index, layout::ENCRYPTION_ATTR).await?,
    }
    Ok(())
}

/// A failure to read `bucket`'s index object: `NotFound` when the bucket is gone (it may go
/// between a request's first look and its commit).
fn missing(e: client::Error, bucket: &str) -> Error {
    match e {
        client::Error::NotFound => Error::NotFound(format!("bucket {bucket}")),
        e => e.into(),
    }
}

/// The index entry of `key` in `bucket`, if there is one.
pub async fn entry(pool: &Pool, bucket: &str, key: &str) -> Result<Option<ObjectEntry>, Error> {
    Ok(stored_entry(pool, bucket, key).await?.1)
}

/// The index entry of `key` in `bucket` as stored, and decoded.
async fn stored_entry(
    pool: &Pool,
    bucket: &str,
    key: &str,
) -> Result<(Option<Vec<u8>>, Option<ObjectEntry>), Error> {
    let found = pool
        .omap_get(&layout::index_object(bucket), vec![key.as_bytes().to_vec()])
        .await
        .map_err(|e| missing(e, bucket))?;
    match found.into_iter().next().and_then(|(_, value)| value) {
        Some(bytes) => {
            let entry = layout::decode(&bytes).map_err(Error::Corrupt)?;
            Ok((Some(bytes), Some(entry)))
        }
        None => Ok((None, None)),
    }
}

/// How many times a commit reads the entry it replaces again when another commit of the
/// same key came between its read and its write.
const COMMIT_TRIES: usize = 32;

/// Makes `entry` the object `key` of `bucket`, atomically, if `check` accepts the entry it
/// replaces (S3's conditional writes; `|_| Ok(())` for none); returns that entry. The
/// replaced entry is the one the write found: a commit in between makes it read again.
/// Fails with `NotFound` if the bucket is gone, and with `Busy` while it is being deleted.
pub async fn commit(
    pool: &Pool,
    bucket: &str,
    key: &str,
    entry: &ObjectEntry,
    check: impl Fn(Option<&ObjectEntry>) -> Result<(), Error>,
) -> Result<Option<ObjectEntry>, Error> {
    let index = layout::index_object(bucket);
    for _ in 0..COMMIT_TRIES {
        let (stored, old) = stored_entry(pool, bucket, key).await?;
        check(old.as_ref())?;
        let ops = vec![
            ObjectOp::AssertExists,
            ObjectOp::AssertAttr {
                name: layout::DELETING_ATTR.into(),
                value: None,
            },
            ObjectOp::AssertOmap {
                key: key.as_bytes().to_vec(),
                value: stored,
            },
            ObjectOp::OmapSet {
                entries: vec![(key.as_bytes().to_vec(), layout::encode(entry))],
            },
        ];
        match pool.operate(&index, ops, Bytes::new()).await {
            Ok(_) => return Ok(old),
            Err(client::Error::NotFound) => {
                return Err(Error::NotFound(format!("bucket {bucket}")))
            }
            Err(client::Error::Mismatch(_)) => {
                if pool
                    .attrs(&index)
                    .await
                    .map_err(|e| missing(e, bucket))?
                    .contains_key(layout::DELETING_ATTR)
                {
                    return Err(Error::Busy(format!("bucket {bucket} is being deleted")));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Busy(format!(
        "object {key} of bucket {bucket} changed under {COMMIT_TRIES} commits in a row"
    )))
}

/// Removes object `key` from the index of `bucket`; returns its entry if it had one.
pub async fn uncommit(pool: &Pool, bucket: &str, key: &str) -> Result<Option<ObjectEntry>, Error> {
    let old = entry(pool, bucket, key).await?;
    if old.is_some() {
        pool.omap_remove(&layout::index_object(bucket), vec![key.as_bytes().to_vec()])
            .await?;
    }
    Ok(old)
}

/// Index entries of `bucket` after `after` (exclusive), in key order, at most `limit`.
pub async fn page(
    pool: &Pool,
    bucket: &str,
    after: Option<Vec<u8>>,
    limit: u32,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>, Error> {
    Ok(pool
        .omap_list(&layout::index_object(bucket), after, limit)
        .await?)
}

/// One page of a listing: objects and common prefixes in key order.
#[derive(Debug, Default, PartialEq)]
pub struct Listing {
    pub objects: Vec<(String, ObjectEntry)>,
    pub prefixes: Vec<String>,
    /// Set when more keys follow: the last key or common prefix of this page, to list on
    /// from.
    pub next: Option<String>,
}

/// Lists `bucket` the way ListObjects does: keys that start with `prefix`, after `after`,
/// those with `delimiter` past the prefix rolled up into one common prefix each, at most
/// `max` keys and prefixes in all.
pub async fn listing(
    pool: &Pool,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max: usize,
) -> Result<Listing, Error> {
    let mut out = Listing::default();
    if max == 0 {
        return Ok(out);
    }
    let mut bound = layout::before(prefix.as_bytes());
    if let Some(after) = after {
        if bound.as_deref().is_none_or(|b| after.as_bytes() > b) {
            bound = Some(after.as_bytes().to_vec());
        }
    }
    let delimiter = delimiter.filter(|d| !d.is_empty());
    let mut count = 0;
    loop {
        let page = page(pool, bucket, bound.clone(), PAGE).await?;
        let full = page.len() == PAGE as usize;
        let mut jumped = false;
        for (key_bytes, value) in page {
            if key_bytes.first() == Some(&layout::UPLOADS) {
                return Ok(out);
            }
            let key = String::from_utf8_lossy(&key_bytes).into_owned();
            bound = Some(key_bytes.clone());
            if !key.starts_with(prefix) {
                if key.as_str() > prefix {
                    return Ok(out);
                }
                continue;
            }
            let rolled = delimiter.and_then(|d| {
                key[prefix.len()..]
                    .find(d)
                    .map(|at| key[..prefix.len() + at + d.len()].to_string())
            });
            if let Some(common) = rolled {
                // Everything under this prefix is one entry; go on past all of it.
                bound = Some(layout::past(common.as_bytes()));
                if after.is_some_and(|a| common.as_str() <= a) {
                    jumped = true;
                    break;
                }
                if count == max {
                    return Ok(finish(out));
                }
                out.prefixes.push(common);
                count += 1;
                jumped = true;
                break;
            }
            if count == max {
                return Ok(finish(out));
            }
            out.objects
                .push((key, layout::decode(&value).map_err(Error::Corrupt)?));
            count += 1;
        }
        if !full && !jumped {
            return Ok(out);
        }
    }
}

/// Marks a listing cut short at its limit: it goes on after its last key or prefix.
fn finish(mut out: Listing) -> Listing {
    let last_object = out.objects.last().map(|(key, _)| key.clone());
    let last_prefix = out.prefixes.last().cloned();
    out.next = last_object.max(last_prefix);
    out
}
