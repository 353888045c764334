//! Multipart uploads: their records, their parts, and how they end (completed into an
//! object, or aborted).
//!
//! An upload is `gw.upload.ID` (its parts in the omap, by number) and an entry in its
//! bucket's index, after the object keys. Parts are written like PUTs, each as its own instance.
//! Completion first marks the upload `completing`: from then on no part can be added or
//! replaced and it cannot be aborted, so the parts the new object's index entry names stay
//! as they are. The index entry then commits, and the upload's records and its unused parts
//! are removed.

use bytes::Bytes;
use client::{ObjectOp, Pool};

use crate::layout::{self, PartRecord, UploadRecord};
use crate::omap::PAGE;
use crate::{data, Error, Pools};

/// The attribute of an upload's object once its completion has begun.
const COMPLETING_ATTR: &str = "completing";

pub(crate) fn no_upload(id: &str) -> Error {
    Error::NotFound(format!("upload {id}"))
}

/// Whether `e` says that upload `id` is not (or no longer) listed.
pub(crate) fn is_no_upload(e: &Error, id: &str) -> bool {
    matches!(e, Error::NotFound(what) if *what == format!("upload {id}"))
}

/// Starts an upload of `key` in `bucket`; returns its id.
pub async fn create(
    pool: &Pool,
    bucket: &str,
    key: &str,
    record: &UploadRecord,
) -> Result<String, Error> {
    // Upload ids sort by creation time, so a key's uploads list in the order they began.
    let id = format!("{:016x}{:016x}", layout::now_ns(), rand::random::<u64>());
    pool.create(&layout::upload_object(&id), true).await?;
    let ops = vec![
        ObjectOp::AssertExists,
        ObjectOp::AssertAttr {
            name: layout::DELETING_ATTR.into(),
            value: None,
        },
        ObjectOp::OmapSet {
            entries: vec![(layout::upload_key(key, &id), layout::encode(record))],
        },
    ];
    match pool
        .operate(&layout::index_object(bucket), ops, Bytes::new())
        .await
    {
        Ok(_) => Ok(id),
        Err(e) => {
            let _ = pool.remove(&layout::upload_object(&id)).await;
            Err(match e {
                client::Error::NotFound => Error::NotFound(format!("bucket {bucket}")),
                client::Error::Mismatch(_) => {
                    Error::Busy(format!("bucket {bucket} is being deleted"))
                }
                e => e.into(),
            })
        }
    }
}

/// The record of upload `id` of `key` in `bucket`, if it is in progress.
pub async fn record(
    pool: &Pool,
    bucket: &str,
    key: &str,
    id: &str,
) -> Result<Option<UploadRecord>, Error> {
    let found = match pool
        .omap_get(
            &layout::index_object(bucket),
            vec![layout::upload_key(key, id)],
        )
        .await
    {
        Ok(found) => found,
        Err(client::Error::NotFound) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    match found.into_iter().next().and_then(|(_, value)| value) {
        Some(bytes) => Ok(Some(layout::decode(&bytes).map_err(Error::Corrupt)?)),
        None => Ok(None),
    }
}

/// Makes `part` part `number` of upload `id`; returns the part it replaced.
pub async fn put_part(
    pool: &Pool,
    id: &str,
    number: u32,
    part: &PartRecord,
) -> Result<Option<PartRecord>, Error> {
    let object = layout::upload_object(id);
    let old = match pool.omap_get(&object, vec![layout::part_key(number)]).await {
        Ok(found) => found.into_iter().next().and_then(|(_, value)| value),
        Err(client::Error::NotFound) => return Err(no_upload(id)),
        Err(e) => return Err(e.into()),
    };
    let ops = vec![
        ObjectOp::AssertExists,
        ObjectOp::AssertAttr {
            name: COMPLETING_ATTR.into(),
            value: None,
        },
        ObjectOp::OmapSet {
            entries: vec![(layout::part_key(number), layout::encode(part))],
        },
    ];
    match pool.operate(&object, ops, Bytes::new()).await {
        Ok(_) => match old {
            Some(bytes) => Ok(Some(layout::decode(&bytes).map_err(Error::Corrupt)?)),
            None => Ok(None),
        },
        Err(client::Error::NotFound) => Err(no_upload(id)),
        Err(client::Error::Mismatch(_)) => {
            Err(Error::Busy(format!("upload {id} is being completed")))
        }
        Err(e) => Err(e.into()),
    }
}

/// Parts of upload `id` numbered above `after`, in order, at most `limit` (fewer where they
/// would not fit one reply), and whether more follow.
pub async fn parts(
    pool: &Pool,
    id: &str,
    after: u32,
    limit: u32,
) -> Result<(Vec<(u32, PartRecord)>, bool), Error> {
    let after = (after > 0).then(|| layout::part_key(after));
    let (page, more) = match pool
        .omap_list(&layout::upload_object(id), after, limit)
        .await
    {
        Ok(listed) => listed,
        Err(client::Error::NotFound) => return Err(no_upload(id)),
        Err(e) => return Err(e.into()),
    };
    let parts = page
        .into_iter()
        .map(|(key, value)| {
            let number = <[u8; 4]>::try_from(key.as_slice())
                .map(u32::from_be_bytes)
                .map_err(|_| Error::Corrupt(format!("part key {key:?}")))?;
            Ok((number, layout::decode(&value).map_err(Error::Corrupt)?))
        })
        .collect::<Result<_, Error>>()?;
    Ok((parts, more))
}

/// Every part of upload `id`.
pub async fn all_parts(pool: &Pool, id: &str) -> Result<Vec<(u32, PartRecord)>, Error> {
    let mut out = Vec::new();
    loop {
        let after = out.last().map_or(0, |(number, _)| *number);
        let (page, more) = parts(pool, id, after, PAGE).await?;
        out.extend(page);
        if !more {
            return Ok(out);
        }
    }
}

/// Begins the completion of upload `id`: no part changes and no abort after this.
pub async fn mark_completing(pool: &Pool, id: &str) -> Result<(), Error> {
    let ops = vec![
        ObjectOp::AssertExists,
        ObjectOp::SetAttr {
            name: COMPLETING_ATTR.into(),
            value: vec![1],
        },
    ];
    match pool
        .operate(&layout::upload_object(id), ops, Bytes::new())
        .await
    {
        Ok(_) => Ok(()),
        Err(client::Error::NotFound) => Err(no_upload(id)),
        Err(e) => Err(e.into()),
    }
}

/// Undoes [`mark_completing`] for a completion refused before it committed, so that parts
/// can be uploaded again and the upload aborted. If this fails, the upload stays marked; a
/// completion with the right parts still succeeds.
pub async fn unmark_completing(pool: &Pool, id: &str) {
    if let Err(e) = pool
        .remove_attr(&layout::upload_object(id), COMPLETING_ATTR)
        .await
    {
        tracing::warn!("unmarking upload {id}: {e}; it stays marked completing");
    }
}

/// When upload `id` last changed, if it is marked completing (else `None`).
pub async fn completing_since(pool: &Pool, id: &str) -> Result<Option<u64>, Error> {
    let object = layout::upload_object(id);
    let attrs = match pool.attrs(&object).await {
        Ok(attrs) => attrs,
        Err(client::Error::NotFound) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if !attrs.contains_key(COMPLETING_ATTR) {
        return Ok(None);
    }
    match pool.stat(&object).await {
        Ok(stat) => Ok(Some(stat.mtime_ns)),
        Err(client::Error::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Removes what is left of upload `id` once its completion committed (which stopped
/// listing it): the content of its parts that `used` does not list (by instance), and its
/// parts record.
pub async fn finish(pools: &Pools, id: &str, parts: &[PartRecord], used: &[String]) {
    for part in parts {
        if !used.contains(&part.segment.instance) {
            data::remove_segment(&pools.data, &part.segment).await;
        }
    }
    if let Err(e) = pools.meta.remove(&layout::upload_object(id)).await {
        tracing::warn!("removing upload {id}'s parts record: {e}; it stays as garbage");
    }
}

/// Aborts upload `id`: its parts are removed and it is no longer listed. Refused once its
/// completion has begun.
pub async fn abort(pools: &Pools, bucket: &str, key: &str, id: &str) -> Result<(), Error> {
    let pool = &pools.meta;
    let parts = all_parts(pool, id).await?;
    let ops = vec![
        ObjectOp::AssertAttr {
            name: COMPLETING_ATTR.into(),
            value: None,
        },
        ObjectOp::Remove,
    ];
    match pool
        .operate(&layout::upload_object(id), ops, Bytes::new())
        .await
    {
        Ok(_) => {}
        Err(client::Error::NotFound) => return Err(no_upload(id)),
        Err(client::Error::Mismatch(_)) => {
            return Err(Error::Busy(format!("upload {id} is being completed")))
        }
        Err(e) => return Err(e.into()),
    }
    pool.omap_remove(
        &layout::index_object(bucket),
        vec![layout::upload_key(key, id)],
    )
    .await?;
    for (_, part) in parts {
        data::remove_segment(&pools.data, &part.segment).await;
    }
    Ok(())
}

/// Uploads in progress in `bucket` whose keys start with `prefix`, after the upload
/// (`key_marker`, `id_marker`), in order, at most `max`; and whether more follow.
pub async fn list(
    pool: &Pool,
    bucket: &str,
    prefix: &str,
    key_marker: Option<&str>,
    id_marker: Option<&str>,
    max: usize,
) -> Result<(Vec<(String, String, UploadRecord)>, bool), Error> {
    let mut bound = layout::before(&layout::upload_key(prefix, "")[..prefix.len() + 1]);
    if let Some(marker) = key_marker.filter(|m| !m.is_empty()) {
        // After every upload of the marker key, or after the marker upload of it.
        let after = match id_marker.filter(|m| !m.is_empty()) {
            Some(id) => layout::upload_key(marker, id),
            None => layout::past(&layout::upload_key(marker, "")),
        };
        if bound.as_deref().is_none_or(|b| after.as_slice() > b) {
            bound = Some(after);
        }
    }
    let mut out = Vec::new();
    loop {
        let (page, more) = match pool
            .omap_list(&layout::index_object(bucket), bound.clone(), PAGE)
            .await
        {
            Ok(listed) => listed,
            Err(client::Error::NotFound) => return Ok((out, false)),
            Err(e) => return Err(e.into()),
        };
        for (entry_key, value) in page {
            bound = Some(entry_key.clone());
            let Some((key, id)) = layout::parse_upload_key(&entry_key) else {
                continue;
            };
            if !key.starts_with(prefix) {
                if key.as_str() > prefix {
                    return Ok((out, false));
                }
                continue;
            }
            if out.len() == max {
                return Ok((out, true));
            }
            out.push((key, id, layout::decode(&value).map_err(Error::Corrupt)?));
        }
        if !more {
            return Ok((out, false));
        }
    }
}
