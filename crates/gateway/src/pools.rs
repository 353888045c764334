//! The gateway's two pools: its own (users, buckets, indexes, upload records: omap, so a
//! replicated pool) and the data pool that holds the content's stripes, which may be an
//! erasure-coded one (`coffer gw --data-pool`), or the gateway's pool itself. The choice is
//! made once, by the first gateway to start on the pool (a data pool of its own only before
//! any bucket exists), and recorded on both sides: `gw.config` in the gateway's pool names
//! the data pool, and `gw.data-of` in the data pool names the gateway's pool, so that no
//! second gateway pool can share it (a garbage collection of one would remove the other's
//! stripes as strays). Every later start, `gw gc` and `gw lifecycle run` follow the record.

use std::collections::BTreeMap;

use bytes::Bytes;
use client::{ObjectOp, Pool};

use crate::Error;

/// In the gateway's pool: its data pool, when not itself.
pub const CONFIG: &str = "gw.config";
/// In a data pool: the gateway pool it serves.
pub const DATA_OF: &str = "gw.data-of";
/// The attribute of either that names the other pool, by id.
const POOL_ATTR: &str = "pool";

#[derive(Clone)]
pub struct Pools {
    /// Users, buckets, indexes and upload records.
    pub meta: Pool,
    /// The content's stripes (`meta` itself unless chosen otherwise).
    pub data: Pool,
}

impl Pools {
    /// The pools of the gateway pool `meta`: the data pool its record names; else `data`
    /// (recorded now, if `meta` holds no bucket yet); else `meta` itself (recorded now).
    pub async fn open(meta: Pool, data: Option<&str>) -> Result<Pools, Error> {
        let recorded = recorded(&meta, CONFIG).await?;
        let wanted = match data {
            Some(name) if name != meta.name() => Some(meta.cluster().pool(name).await?),
            _ => None,
        };
        match (recorded, wanted) {
            (Some(id), wanted) => {
                let data = pool_by_id(&meta, id).await?;
                if let Some(other) = wanted.filter(|w| w.id().0 != id) {
                    return Err(Error::Invalid(format!(
                        "gateway pool {} keeps its data in pool {}: --data-pool {} cannot \
                         change that",
                        meta.name(),
                        data.name(),
                        other.name()
                    )));
                }
                Ok(Pools { meta, data })
            }
            // Recorded too, so that no later start moves the data elsewhere and no other
            // gateway pool takes this one for its data.
            (None, None) => {
                claim(&meta, DATA_OF, &meta).await?;
                claim(&meta, CONFIG, &meta).await?;
                Ok(Pools {
                    data: meta.clone(),
                    meta,
                })
            }
            (None, Some(data)) => {
                if !crate::buckets::list(&meta).await?.is_empty() {
                    return Err(Error::Invalid(format!(
                        "gateway pool {} already holds buckets whose data is in it: a data \
                         pool is chosen before the first bucket",
                        meta.name()
                    )));
                }
                claim(&data, DATA_OF, &meta).await?;
                claim(&meta, CONFIG, &data).await?;
                Ok(Pools { meta, data })
            }
        }
    }
}

/// The pool id that `object` of `pool` names, if the object exists.
async fn recorded(pool: &Pool, object: &str) -> Result<Option<u64>, Error> {
    let attrs = match pool.attrs(object).await {
        Ok(attrs) => attrs,
        Err(client::Error::NotFound) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    pool_attr(&attrs)
        .map(Some)
        .ok_or_else(|| Error::Corrupt(format!("{object} in pool {} names no pool", pool.name())))
}

fn pool_attr(attrs: &BTreeMap<String, Vec<u8>>) -> Option<u64> {
    let bytes = attrs.get(POOL_ATTR)?;
    Some(u64::from_le_bytes(bytes.as_slice().try_into().ok()?))
}

async fn pool_by_id(meta: &Pool, id: u64) -> Result<Pool, Error> {
    let name = pool_name(meta, id).ok_or_else(|| {
        Error::NotFound(format!(
            "pool {id}, the data pool gateway pool {} records",
            meta.name()
        ))
    })?;
    Ok(meta.cluster().pool(&name).await?)
}

/// The name of the pool whose id is `id`, if it exists.
fn pool_name(any: &Pool, id: u64) -> Option<String> {
    let map = any.cluster().map();
    let pool = map.pools.values().find(|p| p.id.0 == id)?;
    Some(pool.name.clone())
}

/// Makes `object` of `pool` name `other`, once: a record that already names it is kept;
/// one that names another pool is a refusal.
async fn claim(pool: &Pool, object: &str, other: &Pool) -> Result<(), Error> {
    let ops = vec![
        ObjectOp::Create { exclusive: true },
        ObjectOp::SetAttr {
            name: POOL_ATTR.into(),
            value: other.id().0.to_le_bytes().to_vec(),
        },
    ];
    match pool.operate(object, ops, Bytes::new()).await {
        Ok(_) => return Ok(()),
        Err(client::Error::Exists) => {}
        Err(e) => return Err(e.into()),
    }
    match recorded(pool, object).await? {
        Some(id) if id == other.id().0 => Ok(()),
        Some(id) => {
            let named = pool_name(other, id);
            Err(Error::Invalid(format!(
                "pool {}'s {object} names pool {}, not {}: a data pool serves one gateway pool",
                pool.name(),
                named.unwrap_or_else(|| id.to_string()),
                other.name()
            )))
        }
        None => Err(Error::Busy(format!(
            "{object} in pool {} changed",
            pool.name()
        ))),
    }
}
