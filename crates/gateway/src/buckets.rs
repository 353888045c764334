//! Buckets and their indexes: who owns a bucket, which objects it holds.

use bytes::Bytes;
use std::collections::BTreeMap;

use client::{ObjectOp, OpResult, Pool};

use crate::access_log::Logging;
use crate::acl::{Acl, Ownership};
use crate::cors::Cors;
use crate::layout::{self, BucketInfo, Head, IndexKey, ObjectEntry, Order, Sse, Version};
use crate::lifecycle::Lifecycle;
use crate::lock::BucketLock;
use crate::omap::{Pages, PAGE};
use crate::policy::{Policy, PublicBlock};
use crate::versions::{self, Change, Found, Plan, VersionId, Versioning};
use crate::{Error, Pools};

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

/// A bucket as its index object's attributes describe it.
#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    pub info: BucketInfo,
    pub versioning: Versioning,
    /// Its object lock, once enabled.
    pub lock: Option<BucketLock>,
    pub lifecycle: Option<Lifecycle>,
    pub policy: Option<Policy>,
    pub public_block: Option<PublicBlock>,
    /// Its ACL; none is its owner's alone.
    pub acl: Option<Acl>,
    pub ownership: Option<Ownership>,
    pub cors: Option<Cors>,
    /// Where its access logs go.
    pub logging: Option<Logging>,
    /// The default encryption of its new objects.
    pub encryption: Option<Sse>,
    /// Whether its requesters pay (PutBucketRequestPayment): then anyone but its owner
    /// must say they do, with `x-amz-request-payer: requester`.
    pub requester_pays: bool,
}

/// The mark of a bucket policy that binds the bucket's owner ([`Policy::binding_owner`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BindsOwner;

impl layout::Record for BindsOwner {}

/// The mark of a bucket whose requesters pay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RequesterPays;

impl layout::Record for RequesterPays {}

/// The owner, creation time, versioning, object lock, lifecycle, policy, public access
/// block, ACL, object ownership, CORS rules, logging, default encryption and request
/// payment of `bucket`.
pub async fn info(pool: &Pool, bucket: &str) -> Result<Bucket, Error> {
    let attrs = pool
        .attrs(&layout::index_object(bucket))
        .await
        .map_err(|e| missing(e, bucket))?;
    described(bucket, &attrs)
}

/// What the index held of a key when it was read: its entry and its head as stored, which
/// a commit made from that read asserts are still there.
#[derive(Clone, Debug)]
pub struct Stored {
    entry: Option<Vec<u8>>,
    head: Option<Vec<u8>>,
}

impl Stored {
    /// From the read of a key's two index entries (the key's, then its head's).
    fn of(read: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Stored {
        let mut values = read.into_iter().map(|(_, value)| value);
        Stored {
            entry: values.next().flatten(),
            head: values.next().flatten(),
        }
    }

    /// The key's current object and head, decoded.
    pub fn current(&self) -> Result<Current, Error> {
        Ok((
            decoded(self.entry.as_deref())?,
            decoded(self.head.as_deref())?,
        ))
    }
}

/// Bucket `bucket`, and what its index holds of `key`, in one request to the index object:
/// what a GET or HEAD of the key's current version needs before its data, and a PUT of
/// the key before its data, so that its commit ([`apply`] from a [`Basis`] that carries
/// it) need not read the index again.
pub async fn info_and_stored(
    pool: &Pool,
    bucket: &str,
    key: &str,
) -> Result<(Bucket, Stored), Error> {
    let ops = vec![
        ObjectOp::GetAttrs,
        ObjectOp::OmapGet {
            keys: vec![key.as_bytes().to_vec(), layout::head_key(key)],
        },
    ];
    let (results, _) = pool
        .operate(&layout::index_object(bucket), ops, Bytes::new())
        .await
        .map_err(|e| missing(e, bucket))?;
    let mut results = results.into_iter();
    match (results.next(), results.next(), results.next()) {
        (Some(OpResult::Attrs(attrs)), Some(OpResult::Omap(read)), None) => {
            Ok((described(bucket, &attrs)?, Stored::of(read)))
        }
        other => Err(Error::Internal(format!(
            "bucket {bucket}: unexpected results {other:?}"
        ))),
    }
}

/// The bucket its index object's attributes `attrs` describe.
fn described(bucket: &str, attrs: &BTreeMap<String, Vec<u8>>) -> Result<Bucket, Error> {
    let Some(info) = attrs.get(layout::BUCKET_ATTR) else {
        return Err(Error::NotFound(format!("bucket {bucket}")));
    };
    let binds_owner = attrs
        .get(layout::POLICY_BINDS_OWNER_ATTR)
        .map(Vec::as_slice);
    let binds_owner = decoded::<BindsOwner>(binds_owner)?.is_some();
    Ok(Bucket {
        info: layout::decode(info).map_err(Error::Corrupt)?,
        versioning: Versioning::from_attr(attrs.get(layout::VERSIONING_ATTR).map(Vec::as_slice))?,
        lock: decoded(attrs.get(layout::LOCK_ATTR).map(Vec::as_slice))?,
        lifecycle: decoded(attrs.get(layout::LIFECYCLE_ATTR).map(Vec::as_slice))?,
        policy: decoded::<Policy>(attrs.get(layout::POLICY_ATTR).map(Vec::as_slice))?
            .map(|policy| policy.binding_owner(binds_owner)),
        public_block: decoded(attrs.get(layout::PUBLIC_BLOCK_ATTR).map(Vec::as_slice))?,
        acl: decoded(attrs.get(layout::ACL_ATTR).map(Vec::as_slice))?,
        ownership: decoded(attrs.get(layout::OWNERSHIP_ATTR).map(Vec::as_slice))?,
        cors: decoded(attrs.get(layout::CORS_ATTR).map(Vec::as_slice))?,
        logging: decoded(attrs.get(layout::LOGGING_ATTR).map(Vec::as_slice))?,
        encryption: decoded(attrs.get(layout::ENCRYPTION_ATTR).map(Vec::as_slice))?,
        requester_pays: decoded::<RequesterPays>(
            attrs.get(layout::REQUEST_PAYMENT_ATTR).map(Vec::as_slice),
        )?
        .is_some(),
    })
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

/// How a new bucket starts, besides its owner.
#[derive(Clone, Debug, Default)]
pub struct Setup {
    /// Object lock (and so versioning) enabled.
    pub locked: bool,
    pub acl: Option<Acl>,
    pub ownership: Option<Ownership>,
}

/// Creates `bucket` owned by `owner`, set up as `setup` says, in one commit. `Exists`
/// carries the current owner's name.
pub async fn create(pool: &Pool, bucket: &str, owner: &str, setup: Setup) -> Result<(), Error> {
    let record = BucketInfo {
        owner: owner.into(),
        created_ns: layout::now_ns(),
    };
    let mut ops = vec![
        ObjectOp::Create { exclusive: true },
        ObjectOp::SetAttr {
            name: layout::BUCKET_ATTR.into(),
            value: layout::encode(&record),
        },
    ];
    if let Some(acl) = &setup.acl {
        ops.push(ObjectOp::SetAttr {
            name: layout::ACL_ATTR.into(),
            value: layout::encode(acl),
        });
    }
    if let Some(ownership) = &setup.ownership {
        ops.push(ObjectOp::SetAttr {
            name: layout::OWNERSHIP_ATTR.into(),
            value: layout::encode(ownership),
        });
    }
    if let (true, Some(enabled)) = (setup.locked, Versioning::Enabled.attr()) {
        ops.push(ObjectOp::SetAttr {
            name: layout::VERSIONING_ATTR.into(),
            value: enabled,
        });
        ops.push(ObjectOp::SetAttr {
            name: layout::LOCK_ATTR.into(),
            value: layout::encode(&BucketLock::default()),
        });
    }
    match pool
        .operate(&layout::index_object(bucket), ops, Bytes::new())
        .await
    {
        Ok(_) => list_in_buckets(pool, bucket, &record).await,
        Err(client::Error::Exists) => {
            let current = info(pool, bucket).await?.info;
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
pub async fn remove(pools: &Pools, bucket: &str) -> Result<(), Error> {
    let pool = &pools.meta;
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
    let (first, _) = pool.omap_list(&index, None, 1).await?;
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
        if let Err(e) = crate::multipart::abort(pools, bucket, &key, &id).await {
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

/// Sets (or with `None`, removes) the lifecycle rules of `bucket`.
pub async fn set_lifecycle(
    pool: &Pool,
    bucket: &str,
    lifecycle: Option<&Lifecycle>,
) -> Result<(), Error> {
    let value = lifecycle.map(layout::encode);
    set_bucket_attr(pool, bucket, layout::LIFECYCLE_ATTR, value).await
}

/// Sets `bucket`'s policy, and whether it binds the bucket's owner, in one commit (`None`
/// removes both).
pub async fn set_policy(pool: &Pool, bucket: &str, policy: Option<&Policy>) -> Result<(), Error> {
    let binds = policy
        .filter(|p| p.binds_owner())
        .map(|_| layout::encode(&BindsOwner));
    let ops = vec![
        ObjectOp::AssertExists,
        attr_op(layout::POLICY_ATTR, policy.map(layout::encode)),
        attr_op(layout::POLICY_BINDS_OWNER_ATTR, binds),
    ];
    pool.operate(&layout::index_object(bucket), ops, Bytes::new())
        .await
        .map_err(|e| missing(e, bucket))?;
    Ok(())
}

/// Removes `bucket`'s policy without reading it (the administrator's removal must work
/// even where a policy no longer parses); `false` if it had none.
pub async fn remove_policy(pool: &Pool, bucket: &str) -> Result<bool, Error> {
    let attrs = pool
        .attrs(&layout::index_object(bucket))
        .await
        .map_err(|e| missing(e, bucket))?;
    if !attrs.contains_key(layout::BUCKET_ATTR) {
        return Err(Error::NotFound(format!("bucket {bucket}")));
    }
    if !attrs.contains_key(layout::POLICY_ATTR) {
        return Ok(false);
    }
    set_policy(pool, bucket, None).await?;
    Ok(true)
}

/// Sets `bucket`'s ACL.
pub async fn set_acl(pool: &Pool, bucket: &str, acl: &Acl) -> Result<(), Error> {
    set_bucket_attr(pool, bucket, layout::ACL_ATTR, Some(layout::encode(acl))).await
}

/// Sets `bucket`'s object ownership (`None` removes it).
pub async fn set_ownership(
    pool: &Pool,
    bucket: &str,
    ownership: Option<Ownership>,
) -> Result<(), Error> {
    let value = ownership.as_ref().map(layout::encode);
    set_bucket_attr(pool, bucket, layout::OWNERSHIP_ATTR, value).await
}

/// Sets `bucket`'s CORS rules (`None` removes them).
pub async fn set_cors(pool: &Pool, bucket: &str, cors: Option<&Cors>) -> Result<(), Error> {
    let value = cors.map(layout::encode);
    set_bucket_attr(pool, bucket, layout::CORS_ATTR, value).await
}

/// Sets where `bucket`'s access logs go (`None`: nowhere).
pub async fn set_logging(
    pool: &Pool,
    bucket: &str,
    logging: Option<&Logging>,
) -> Result<(), Error> {
    let value = logging.map(layout::encode);
    set_bucket_attr(pool, bucket, layout::LOGGING_ATTR, value).await
}

/// Makes `bucket`'s requesters pay, or (`false`) its owner.
pub async fn set_requester_pays(pool: &Pool, bucket: &str, requester: bool) -> Result<(), Error> {
    let value = requester.then(|| layout::encode(&RequesterPays));
    set_bucket_attr(pool, bucket, layout::REQUEST_PAYMENT_ATTR, value).await
}

/// Sets `bucket`'s public access block (`None` removes it).
pub async fn set_public_block(
    pool: &Pool,
    bucket: &str,
    block: Option<&PublicBlock>,
) -> Result<(), Error> {
    let value = block.map(layout::encode);
    set_bucket_attr(pool, bucket, layout::PUBLIC_BLOCK_ATTR, value).await
}

/// Sets attribute `name` of `bucket`'s index object to `value` (`None` removes it), if the
/// bucket exists.
async fn set_bucket_attr(
    pool: &Pool,
    bucket: &str,
    name: &str,
    value: Option<Vec<u8>>,
) -> Result<(), Error> {
    let op = attr_op(name, value);
    pool.operate(
        &layout::index_object(bucket),
        vec![ObjectOp::AssertExists, op],
        Bytes::new(),
    )
    .await
    .map_err(|e| missing(e, bucket))?;
    Ok(())
}

/// Sets attribute `name` to `value`, or removes it (`None`).
fn attr_op(name: &str, value: Option<Vec<u8>>) -> ObjectOp {
    let name = name.to_owned();
    match value {
        Some(value) => ObjectOp::SetAttr { name, value },
        None => ObjectOp::RemoveAttr { name },
    }
}

/// The tags of `bucket` (none if it has none).
pub async fn tags(pool: &Pool, bucket: &str) -> Result<Vec<(String, String)>, Error> {
    let attrs = pool
        .attrs(&layout::index_object(bucket))
        .await
        .map_err(|e| missing(e, bucket))?;
    match attrs.get(layout::TAGS_ATTR) {
        Some(bytes) => Ok(layout::decode::<layout::Tags>(bytes)
            .map_err(Error::Corrupt)?
            .0),
        None => Ok(Vec::new()),
    }
}

/// Sets the tags of `bucket` (none removes them).
pub async fn set_tags(pool: &Pool, bucket: &str, tags: &[(String, String)]) -> Result<(), Error> {
    let value = (!tags.is_empty()).then(|| layout::encode(&layout::Tags(tags.to_vec())));
    set_bucket_attr(pool, bucket, layout::TAGS_ATTR, value).await
}

/// A failure to read `bucket`'s index object: `NotFound` when the bucket is gone (it may go
/// between a request's first look and its commit).
fn missing(e: client::Error, bucket: &str) -> Error {
    match e {
        client::Error::NotFound => Error::NotFound(format!("bucket {bucket}")),
        e => e.into(),
    }
}

/// The index entry of `key` in `bucket` (its current version), if there is one.
pub async fn entry(pool: &Pool, bucket: &str, key: &str) -> Result<Option<ObjectEntry>, Error> {
    let found = pool
        .omap_get(&layout::index_object(bucket), vec![key.as_bytes().to_vec()])
        .await
        .map_err(|e| missing(e, bucket))?;
    decoded(
        found
            .into_iter()
            .next()
            .and_then(|(_, value)| value)
            .as_deref(),
    )
}

/// How many times a change reads the key again when another change of the same key came
/// between its read and its write.
const COMMIT_TRIES: usize = 32;

/// What a change's conditions are judged on: the version it removes, for a change of one
/// version; else the key's current version.
#[derive(Clone, Copy, Debug)]
pub enum Judged<'a> {
    Nothing,
    Object(&'a ObjectEntry),
    Marker,
}

impl<'a> Judged<'a> {
    fn of(found: &'a Found, change: &Change) -> Judged<'a> {
        let unversioned = found.current.as_ref().filter(|c| c.version.is_none());
        match (change, &found.target, unversioned) {
            (Change::DeleteVersion { .. }, Some(Version::Object(entry)), _) => {
                Judged::Object(entry)
            }
            (Change::DeleteVersion { .. }, Some(Version::Marker { .. }), _) => Judged::Marker,
            (
                Change::DeleteVersion {
                    id: VersionId::Null,
                    ..
                },
                None,
                Some(entry),
            ) => Judged::Object(entry),
            (Change::DeleteVersion { .. }, ..) => Judged::Nothing,
            _ => match (&found.current, &found.head) {
                (Some(entry), _) => Judged::Object(entry),
                (None, Some(_)) => Judged::Marker,
                (None, None) => Judged::Nothing,
            },
        }
    }

    /// The object judged, if there is one (none under a delete marker).
    pub fn object(self) -> Option<&'a ObjectEntry> {
        match self {
            Judged::Object(entry) => Some(entry),
            Judged::Nothing | Judged::Marker => None,
        }
    }
}

/// What a change of a key is first decided from: the bucket's versioning as the caller read
/// it, and what the index held of the key if the caller read that with the bucket
/// ([`info_and_stored`]); else [`apply`] reads it. A commit that finds either changed
/// reads both again.
#[derive(Clone, Debug)]
pub struct Basis {
    pub versioning: Versioning,
    pub stored: Option<Stored>,
}

impl From<Versioning> for Basis {
    fn from(versioning: Versioning) -> Basis {
        Basis {
            versioning,
            stored: None,
        }
    }
}

/// Makes `change` of object `key` in `bucket`, atomically, if `check` accepts what it
/// judges ([`Judged`]: S3's conditional writes and deletes; `|_| Ok(())` for none); returns
/// what it did
/// (see [`versions::plan`]), whose `freed` objects the caller removes. The change is
/// committed on the condition that the key's entry and head, the bucket's versioning
/// (as `basis` gives them) and the bucket itself are as read: a change in between makes it
/// read and decide again. Fails with `NotFound` if the bucket is gone, and
/// with `Busy` while it is being deleted.
///
/// A multipart completion names its upload (`ends_upload`): the upload stops being listed
/// in the same commit, which fails with `NotFound` if it is not listed, so that of two
/// completions of one upload only one makes an object of its parts.
pub async fn apply(
    pool: &Pool,
    bucket: &str,
    key: &str,
    basis: Basis,
    change: Change,
    ends_upload: Option<&str>,
    check: impl Fn(Judged) -> Result<(), Error>,
) -> Result<Plan, Error> {
    let index = layout::index_object(bucket);
    let head_key = layout::head_key(key);
    let upload_key = ends_upload.map(|id| layout::upload_key(key, id));
    let Basis {
        mut versioning,
        stored: mut known,
    } = basis;
    assert!(
        known.is_none() || upload_key.is_none(),
        "a completion reads its upload's record with the key's entries"
    );
    for _ in 0..COMMIT_TRIES {
        let (stored_entry, stored_head, stored_upload) = match known.take() {
            Some(Stored { entry, head }) => (entry, head, None),
            _ => {
                let mut keys = vec![key.as_bytes().to_vec(), head_key.clone()];
                keys.extend(upload_key.clone());
                let read = pool
                    .omap_get(&index, keys)
                    .await
                    .map_err(|e| missing(e, bucket))?;
                let stored = |at: &[u8]| {
                    read.iter()
                        .find(|(k, _)| k.as_slice() == at)
                        .and_then(|(_, v)| v.clone())
                };
                let upload = match (&upload_key, ends_upload) {
                    (Some(at), Some(id)) => match stored(at) {
                        Some(record) => Some((at.clone(), record)),
                        None => return Err(crate::multipart::no_upload(id)),
                    },
                    _ => None,
                };
                (stored(key.as_bytes()), stored(&head_key), upload)
            }
        };
        let mut found = Found {
            current: decoded(stored_entry.as_deref())?,
            head: decoded(stored_head.as_deref())?,
            ..Found::default()
        };
        if let Some(order) = versions::touched(versioning, &change, found.head.as_ref()) {
            (found.target, found.next) = around(pool, &index, key, &order).await?;
        }
        check(Judged::of(&found, &change))?;
        let plan = versions::plan(
            key,
            versioning,
            found,
            change.clone(),
            layout::now_ns(),
            rand::random(),
        )?;
        if plan.set.is_empty() && plan.remove.is_empty() && stored_upload.is_none() {
            return Ok(plan);
        }
        let mut ops = vec![
            ObjectOp::AssertExists,
            ObjectOp::AssertAttr {
                name: layout::DELETING_ATTR.into(),
                value: None,
            },
            ObjectOp::AssertAttr {
                name: layout::VERSIONING_ATTR.into(),
                value: versioning.attr(),
            },
            ObjectOp::AssertOmap {
                key: key.as_bytes().to_vec(),
                value: stored_entry,
            },
            ObjectOp::AssertOmap {
                key: head_key.clone(),
                value: stored_head,
            },
        ];
        let mut remove = plan.remove.clone();
        if let Some((at, record)) = stored_upload {
            ops.push(ObjectOp::AssertOmap {
                key: at.clone(),
                value: Some(record),
            });
            remove.push(at);
        }
        if !remove.is_empty() {
            ops.push(ObjectOp::OmapRemove { keys: remove });
        }
        if !plan.set.is_empty() {
            ops.push(ObjectOp::OmapSet {
                entries: plan.set.clone(),
            });
        }
        match pool.operate(&index, ops, Bytes::new()).await {
            Ok(_) => return Ok(plan),
            Err(client::Error::NotFound) => {
                return Err(Error::NotFound(format!("bucket {bucket}")))
            }
            Err(client::Error::Mismatch(_)) => {
                let attrs = pool.attrs(&index).await.map_err(|e| missing(e, bucket))?;
                if attrs.contains_key(layout::DELETING_ATTR) {
                    return Err(Error::Busy(format!("bucket {bucket} is being deleted")));
                }
                versioning =
                    Versioning::from_attr(attrs.get(layout::VERSIONING_ATTR).map(Vec::as_slice))?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Busy(format!(
        "object {key} of bucket {bucket} changed under {COMMIT_TRIES} commits in a row"
    )))
}

fn decoded<T: layout::Record>(bytes: Option<&[u8]>) -> Result<Option<T>, Error> {
    bytes
        .map(|bytes| layout::decode(bytes).map_err(Error::Corrupt))
        .transpose()
}

/// Version `order` of `key`, if it exists, and the version after it (the next newest).
async fn around(
    pool: &Pool,
    index: &str,
    key: &str,
    order: &Order,
) -> Result<(Option<Version>, Option<(Order, Version)>), Error> {
    let at = layout::version_key(key, order);
    let (page, _) = pool.omap_list(index, layout::before(&at), 2).await?;
    let mut entries = page.into_iter();
    match entries.next() {
        Some((found, value)) if found == at => {
            let target = layout::decode(&value).map_err(Error::Corrupt)?;
            let next = match entries.next() {
                Some((next, value)) => match layout::parse_index_key(&next) {
                    IndexKey::Version(of, order) if of == key.as_bytes() => {
                        Some((order, layout::decode(&value).map_err(Error::Corrupt)?))
                    }
                    _ => None,
                },
                None => None,
            };
            Ok((Some(target), next))
        }
        _ => Ok((None, None)),
    }
}

/// A key's current object and its head (where versions are kept), either absent.
pub type Current = (Option<ObjectEntry>, Option<Head>);

/// The current object of `key` in `bucket` and the key's head.
pub async fn current(pool: &Pool, bucket: &str, key: &str) -> Result<Current, Error> {
    let read = pool
        .omap_get(
            &layout::index_object(bucket),
            vec![key.as_bytes().to_vec(), layout::head_key(key)],
        )
        .await
        .map_err(|e| missing(e, bucket))?;
    Stored::of(read).current()
}

/// Version `id` of `key` in `bucket`, if it exists.
pub async fn version(
    pool: &Pool,
    bucket: &str,
    key: &str,
    id: VersionId,
) -> Result<Option<Version>, Error> {
    let order = match id {
        VersionId::Order(order) => order,
        VersionId::Null => match current(pool, bucket, key).await? {
            (
                _,
                Some(Head {
                    null: Some(order), ..
                }),
            ) => order,
            (Some(entry), None) if entry.version.is_none() => {
                return Ok(Some(Version::Object(entry)))
            }
            _ => return Ok(None),
        },
    };
    let found = pool
        .omap_get(
            &layout::index_object(bucket),
            vec![layout::version_key(key, &order)],
        )
        .await
        .map_err(|e| missing(e, bucket))?;
    decoded(found.into_iter().next().and_then(|(_, v)| v).as_deref())
}

/// Sets the versioning state of `bucket` (S3 never returns a bucket to unversioned);
/// suspending it is refused (`BucketState`) once object lock is enabled, in the same commit
/// that would suspend it.
pub async fn set_versioning(pool: &Pool, bucket: &str, state: Versioning) -> Result<(), Error> {
    let Some(value) = state.attr() else {
        return Err(Error::Invalid(
            "a bucket's versioning is Enabled or Suspended".into(),
        ));
    };
    let mut ops = vec![ObjectOp::AssertExists];
    if state == Versioning::Suspended {
        ops.push(ObjectOp::AssertAttr {
            name: layout::LOCK_ATTR.into(),
            value: None,
        });
    }
    ops.push(ObjectOp::SetAttr {
        name: layout::VERSIONING_ATTR.into(),
        value,
    });
    match pool
        .operate(&layout::index_object(bucket), ops, Bytes::new())
        .await
    {
        Ok(_) => Ok(()),
        Err(client::Error::Mismatch(_)) => Err(Error::BucketState(format!(
            "bucket {bucket} has object lock enabled: its versioning stays enabled"
        ))),
        Err(e) => Err(missing(e, bucket)),
    }
}

/// Sets the object lock of `bucket` (enabling it, for good, if it was not), which needs its
/// versioning enabled (`BucketState` otherwise, decided in the same commit).
pub async fn set_lock(pool: &Pool, bucket: &str, lock: &BucketLock) -> Result<(), Error> {
    let ops = vec![
        ObjectOp::AssertExists,
        ObjectOp::AssertAttr {
            name: layout::VERSIONING_ATTR.into(),
            value: Versioning::Enabled.attr(),
        },
        ObjectOp::SetAttr {
            name: layout::LOCK_ATTR.into(),
            value: layout::encode(lock),
        },
    ];
    match pool
        .operate(&layout::index_object(bucket), ops, Bytes::new())
        .await
    {
        Ok(_) => Ok(()),
        Err(client::Error::Mismatch(_)) => Err(Error::BucketState(format!(
            "bucket {bucket} needs versioning enabled before object lock"
        ))),
        Err(e) => Err(missing(e, bucket)),
    }
}

/// Index entries of `bucket` after `after` (exclusive), in key order, at most `limit` (fewer
/// where they would not fit one reply), and whether more follow.
pub async fn page(
    pool: &Pool,
    bucket: &str,
    after: Option<Vec<u8>>,
    limit: u32,
) -> Result<(Vec<(Vec<u8>, Vec<u8>)>, bool), Error> {
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
        let (page, more) = page(pool, bucket, bound.clone(), PAGE).await?;
        let mut jumped = false;
        for (key_bytes, value) in page {
            if !matches!(layout::parse_index_key(&key_bytes), IndexKey::Object(_)) {
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
            let rolled = common_prefix(&key, prefix, delimiter);
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
        if !more && !jumped {
            return Ok(out);
        }
    }
}

/// The common prefix `key` (which starts with `prefix`) is rolled up into: up to the first
/// `delimiter` past the prefix, if there is one.
fn common_prefix(key: &str, prefix: &str, delimiter: Option<&str>) -> Option<String> {
    let d = delimiter?;
    key[prefix.len()..]
        .find(d)
        .map(|at| key[..prefix.len() + at + d.len()].to_string())
}

/// Marks a listing cut short at its limit: it goes on after its last key or prefix.
fn finish(mut out: Listing) -> Listing {
    let last_object = out.objects.last().map(|(key, _)| key.clone());
    let last_prefix = out.prefixes.last().cloned();
    out.next = last_object.max(last_prefix);
    out
}

/// One version in a listing of versions: `latest` if it is its key's newest. An object
/// written while the bucket was never versioned is listed as its key's only version, "null".
#[derive(Debug, PartialEq)]
pub struct Listed {
    pub key: String,
    pub version: Version,
    pub latest: bool,
}

impl Listed {
    pub fn id(&self) -> VersionId {
        self.version.tag().map_or(VersionId::Null, VersionId::from)
    }
}

/// One page of ListObjectVersions.
#[derive(Debug, Default, PartialEq)]
pub struct VersionListing {
    pub versions: Vec<Listed>,
    pub prefixes: Vec<String>,
    /// Set when more follow: the key and version to list on after. The version is given by
    /// its order even for a "null" one, so that listing on finds its place when it is gone.
    pub next: Option<(String, Option<String>)>,
}

/// Where ListObjectVersions starts: after every version of `key`, or after its version `id`.
pub struct VersionMarker<'a> {
    pub key: &'a str,
    pub id: Option<VersionId>,
}

/// Index entries of one region of a bucket's index (object keys, or versions), read a page
/// at a time from a bound that can move forward.
struct Region<'a> {
    pool: &'a Pool,
    index: &'a str,
    versions: bool,
    after: Option<Vec<u8>>,
    page: std::collections::VecDeque<(Vec<u8>, Vec<u8>)>,
    done: bool,
}

impl<'a> Region<'a> {
    fn new(pool: &'a Pool, index: &'a str, versions: bool, after: Option<Vec<u8>>) -> Self {
        Region {
            pool,
            index,
            versions,
            after,
            page: Default::default(),
            done: false,
        }
    }

    /// Moves the region on to the keys after `bound` (never back).
    fn seek(&mut self, bound: Vec<u8>) {
        self.page.retain(|(key, _)| *key > bound);
        if self.page.is_empty() && self.after.as_ref().is_none_or(|after| bound > *after) {
            self.after = Some(bound);
        }
    }

    fn contains(&self, key: &[u8]) -> bool {
        match key.first() {
            Some(&layout::VERSIONS) => self.versions,
            Some(&first) => !self.versions && first < layout::VERSIONS,
            None => false,
        }
    }

    /// The next entry of the region, without taking it; `None` at its end.
    async fn peek(&mut self) -> Result<Option<&(Vec<u8>, Vec<u8>)>, Error> {
        while self.page.is_empty() && !self.done {
            let (page, more) = self
                .pool
                .omap_list(self.index, self.after.clone(), PAGE)
                .await?;
            self.done = !more;
            if let Some((last, _)) = page.last() {
                self.after = Some(last.clone());
            }
            for (key, value) in page {
                if !self.contains(&key) {
                    // Regions are contiguous: the first key outside ends this one.
                    self.done = true;
                    break;
                }
                self.page.push_back((key, value));
            }
        }
        Ok(self.page.front())
    }

    fn take(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
        self.page.pop_front()
    }
}

/// Lists the versions of `bucket`'s objects the way ListObjectVersions does: keys that start
/// with `prefix` in key order, each key's versions newest first, from after `marker`, keys
/// with `delimiter` past the prefix rolled up into one common prefix each, at most `max`
/// versions and prefixes in all.
pub async fn version_listing(
    pool: &Pool,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    marker: Option<VersionMarker<'_>>,
    max: usize,
) -> Result<VersionListing, Error> {
    let mut out = VersionListing::default();
    if max == 0 {
        return Ok(out);
    }
    let index = layout::index_object(bucket);
    let in_versions = |key: &[u8]| [&[layout::VERSIONS][..], key].concat();
    let mut objects = Region::new(pool, &index, false, layout::before(prefix.as_bytes()));
    let mut versions = Region::new(
        pool,
        &index,
        true,
        layout::before(&in_versions(prefix.as_bytes())),
    );
    // The head of the key being listed, to tell its newest version.
    let mut head: Option<(Vec<u8>, Head)> = None;
    let after = marker.as_ref().map(|m| m.key);
    if let Some(marker) = &marker {
        let key = marker.key.as_bytes();
        objects.seek(key.to_vec());
        let (_, marker_head) = current(pool, bucket, marker.key).await?;
        let within = match (marker.id, &marker_head) {
            (Some(VersionId::Order(order)), _) => Some(order),
            (Some(VersionId::Null), Some(h)) => h.null,
            _ => None,
        };
        match within {
            Some(order) => {
                versions.seek(layout::version_key(marker.key, &order));
                head = marker_head.map(|h| (key.to_vec(), h));
            }
            None => versions.seek(layout::past(&[&in_versions(key)[..], &[0]].concat())),
        }
    }
    let delimiter = delimiter.filter(|d| !d.is_empty());
    let mut count = 0;
    loop {
        // The smaller key of the two regions comes first.
        let object_key = objects.peek().await?.map(|(k, _)| k.clone());
        let version_key = versions.peek().await?.map(|(k, _)| k.clone());
        let version_of = version_key
            .as_deref()
            .and_then(|k| match layout::parse_index_key(k) {
                IndexKey::Head(of) | IndexKey::Version(of, _) => Some(of.to_vec()),
                _ => None,
            });
        let from_objects = match (&object_key, &version_of) {
            (None, None) => return Ok(out),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(object), Some(of)) => object <= of,
        };
        let key_bytes = if from_objects {
            object_key.clone().unwrap_or_default()
        } else {
            version_of.clone().unwrap_or_default()
        };
        let key = String::from_utf8_lossy(&key_bytes).into_owned();
        if !key.starts_with(prefix) {
            if key.as_str() > prefix {
                return Ok(out);
            }
            if from_objects {
                objects.take();
            } else {
                versions.take();
            }
            continue;
        }
        let rolled = common_prefix(&key, prefix, delimiter);
        if let Some(common) = rolled {
            // Everything under this prefix is one entry; go on past all of it.
            objects.seek(layout::past(common.as_bytes()));
            versions.seek(layout::past(&in_versions(common.as_bytes())));
            if after.is_some_and(|a| common.as_str() <= a) {
                continue;
            }
            if count == max {
                return Ok(finish_versions(out));
            }
            out.prefixes.push(common);
            count += 1;
            continue;
        }
        let listed = if from_objects {
            let Some((_, value)) = objects.take() else {
                continue;
            };
            let entry: ObjectEntry = layout::decode(&value).map_err(Error::Corrupt)?;
            if entry.version.is_some() {
                // A copy of its key's newest version, which the versions list.
                continue;
            }
            Listed {
                key,
                version: Version::Object(entry),
                latest: true,
            }
        } else {
            let Some((entry_key, value)) = versions.take() else {
                continue;
            };
            match layout::parse_index_key(&entry_key) {
                IndexKey::Head(_) => {
                    head = Some((key_bytes, layout::decode(&value).map_err(Error::Corrupt)?));
                    continue;
                }
                IndexKey::Version(_, order) => {
                    let latest = head
                        .as_ref()
                        .is_some_and(|(of, h)| *of == key_bytes && h.newest == order);
                    Listed {
                        key,
                        version: layout::decode(&value).map_err(Error::Corrupt)?,
                        latest,
                    }
                }
                _ => continue,
            }
        };
        if count == max {
            return Ok(finish_versions(out));
        }
        out.versions.push(listed);
        count += 1;
    }
}

/// Marks a version listing cut short at its limit: it goes on after its last version or
/// prefix.
fn finish_versions(mut out: VersionListing) -> VersionListing {
    let last_version = out.versions.last().map(|listed| {
        let marker = match listed.version.tag() {
            Some(tag) => VersionId::Order(tag.order),
            None => VersionId::Null,
        };
        (listed.key.clone(), Some(marker.to_string()))
    });
    let last_prefix = out.prefixes.last().map(|p| (p.clone(), None));
    out.next = match (last_version, last_prefix) {
        (Some(v), Some(p)) => Some(if p.0 > v.0 { p } else { v }),
        (v, p) => v.or(p),
    };
    out
}
