//! Walks over everything the gateway stores, for the operator's commands: rewrapping data
//! keys after a KMS key's rotation (`coffer kms key rotate`), collecting the stripes no
//! record names (`coffer gw gc`), and applying buckets' lifecycle rules (`coffer gw
//! lifecycle run`, and the gateway on its schedule).
//!
//! The records that name stripes are object index entries ([`ObjectEntry`]), the object
//! versions of versioned buckets ([`Version`]), the lists of segments such records keep
//! out of line ([`layout::Listed`]) and the parts of multipart uploads in progress
//! ([`PartRecord`]); see [`layout`].

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use bytes::Bytes;
use client::{ObjectOp, Pool};

use crate::buckets::Judged;
use crate::kms::{Kms, KmsError};
use crate::layout::{self, IndexKey, ObjectEntry, Order, PartRecord, SealedKey, Segment, Version};
use crate::lifecycle::Lifecycle;
use crate::omap::Pages;
use crate::versions::{Change, VersionId, Versioning};
use crate::{buckets, data, multipart, Error, Pools};

/// Compare-and-swap attempts on one record that keeps changing under the walk.
const SWAP_TRIES: usize = 3;

/// What [`rewrap`] did.
#[derive(Debug, Default, PartialEq)]
pub struct Rewrapped {
    /// Data keys now wrapped by the newest version.
    pub keys: u64,
    /// Object index entries and upload parts rewritten.
    pub records: u64,
    /// Records that changed under the walk each time it tried; running it again finishes
    /// them.
    pub changed: u64,
    /// Records the cluster refused to rewrite (logged each).
    pub failed: u64,
}

/// Rewraps every data key that a version of KMS key `key` older than `newest` wraps, in
/// object entries and in the parts of uploads in progress, so that only version `newest`
/// wraps them. Data keys stay the same, so no data is re-encrypted. Each record is swapped
/// only if it did not change meanwhile (a record rewritten by a client has fresh keys). An
/// entry that keeps its segments out of line gets a new list; the old one is left to
/// [`collect`], as no entry names it.
pub async fn rewrap(
    pools: &Pools,
    kms: &dyn Kms,
    key: &str,
    newest: u32,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Rewrapped, Error> {
    let (pool, data) = (&pools.meta, &pools.data);
    let mut done = Rewrapped::default();
    let listing = object_names(pool).await?;
    let buckets = bucket_names(pool, &listing).await?;
    let total = buckets.len() as u64;
    for (at, bucket) in buckets.into_iter().enumerate() {
        progress(at as u64, total);
        let index = layout::index_object(&bucket);
        let mut pages = Pages::new(pool, &index, None);
        while let Some(page) = pages.next().await? {
            for (entry_key, value) in page {
                match layout::parse_index_key(&entry_key) {
                    IndexKey::Object(_) => {
                        let rewrap_entry = async |entry: &mut ObjectEntry| {
                            rewrap_entry(data, kms, key, newest, entry).await
                        };
                        swap(pool, &index, &entry_key, value, rewrap_entry, &mut done).await?;
                    }
                    IndexKey::Version(..) => {
                        let rewrap_version = async |version: &mut Version| match version {
                            Version::Object(entry) => {
                                rewrap_entry(data, kms, key, newest, entry).await
                            }
                            Version::Marker { .. } => Ok(0),
                        };
                        swap(pool, &index, &entry_key, value, rewrap_version, &mut done).await?;
                    }
                    IndexKey::Upload => {
                        if let Some((_, id)) = layout::parse_upload_key(&entry_key) {
                            rewrap_upload(pool, kms, key, newest, &id, &mut done).await?;
                        }
                    }
                    IndexKey::Head(_) | IndexKey::Unknown => {}
                }
            }
        }
    }
    Ok(done)
}

async fn rewrap_upload(
    pool: &Pool,
    kms: &dyn Kms,
    key: &str,
    newest: u32,
    id: &str,
    done: &mut Rewrapped,
) -> Result<(), Error> {
    let object = layout::upload_object(id);
    // A missing upload object was completed or aborted meanwhile: nothing to do.
    let mut pages = Pages::new(pool, &object, None);
    while let Some(page) = pages.next().await? {
        for (part_key, value) in page {
            let rewrap_part = async |part: &mut PartRecord| {
                rewrap_segments(kms, key, newest, std::iter::once(&mut part.segment)).await
            };
            swap(pool, &object, &part_key, value, rewrap_part, done).await?;
        }
    }
    Ok(())
}

/// Rewraps the data keys of `entry`'s segments that an older version of `key` wraps;
/// returns how many. Segments kept out of line go to a new list.
async fn rewrap_entry(
    data: &Pool,
    kms: &dyn Kms,
    key: &str,
    newest: u32,
    entry: &mut ObjectEntry,
) -> Result<u64, Error> {
    if entry.listed.is_none() {
        return rewrap_segments(kms, key, newest, entry.segments.iter_mut()).await;
    }
    match data::with_segments(data, entry).await {
        Ok(()) => {}
        // Freed since the entry was read: the entry is gone or changed, with fresh keys.
        Err(Error::NotFound(_)) => return Ok(0),
        Err(e) => return Err(e),
    }
    let count = rewrap_segments(kms, key, newest, entry.segments.iter_mut()).await?;
    if count == 0 {
        return Ok(0);
    }
    entry.listed = None;
    data::list_segments(data, entry).await?;
    Ok(count)
}

/// Rewraps the data keys of `segments` that an older version of `key` wraps; returns how
/// many.
async fn rewrap_segments<'a>(
    kms: &dyn Kms,
    key: &str,
    newest: u32,
    segments: impl Iterator<Item = &'a mut Segment>,
) -> Result<u64, Error> {
    let mut count = 0;
    for segment in segments {
        let Some(SealedKey::Kms {
            key: wrapped_by,
            version,
            wrapped,
        }) = &mut segment.sealed
        else {
            continue;
        };
        if wrapped_by != key || *version >= newest {
            continue;
        }
        let (new_version, new_wrapped) = kms
            .rewrap(key, *version, wrapped)
            .await
            .map_err(|e| kms_failure(key, e))?;
        if new_version < newest {
            return Err(Error::Internal(format!(
                "the KMS rewrapped under version {new_version} of {key}, not {newest}"
            )));
        }
        *version = new_version;
        *wrapped = new_wrapped;
        count += 1;
    }
    Ok(count)
}

fn kms_failure(key: &str, e: KmsError) -> Error {
    match e {
        KmsError::NoSuchKey(_) => Error::NotFound(format!("KMS key {key}")),
        e => Error::Internal(e.to_string()),
    }
}

/// Rewrites the record at `entry_key` of `object` (now `value`) through `change`, if it
/// changes anything, and only if the record still holds what `change` saw: on a mismatch it
/// reads the record again and retries.
async fn swap<T, F>(
    pool: &Pool,
    object: &str,
    entry_key: &[u8],
    mut value: Vec<u8>,
    change: F,
    done: &mut Rewrapped,
) -> Result<(), Error>
where
    T: layout::Record,
    F: AsyncFn(&mut T) -> Result<u64, Error>,
{
    for _ in 0..SWAP_TRIES {
        let mut record: T = layout::decode(&value)
            .map_err(|e| Error::Corrupt(format!("{object} {}: {e}", layout::hex(entry_key))))?;
        let keys = change(&mut record).await?;
        if keys == 0 {
            return Ok(());
        }
        let ops = vec![
            ObjectOp::AssertOmap {
                key: entry_key.to_vec(),
                value: Some(value),
            },
            ObjectOp::OmapSet {
                entries: vec![(entry_key.to_vec(), layout::encode(&record))],
            },
        ];
        match pool.operate(object, ops, Bytes::new()).await {
            Ok(_) => {
                done.keys += keys;
                done.records += 1;
                return Ok(());
            }
            Err(client::Error::Mismatch(_)) => {}
            Err(client::Error::NotFound) => return Ok(()),
            Err(e) => {
                // One record the cluster will not take (too large for one request, say)
                // must not stop the walk; it is counted, and the rest go on.
                tracing::warn!("rewrapping {object} {}: {e}", layout::hex(entry_key));
                done.failed += 1;
                return Ok(());
            }
        }
        let found = match pool.omap_get(object, vec![entry_key.to_vec()]).await {
            Ok(found) => found.into_iter().next().and_then(|(_, value)| value),
            Err(client::Error::NotFound) => None,
            Err(e) => return Err(e.into()),
        };
        match found {
            Some(now) => value = now,
            // Removed meanwhile: nothing left to rewrap.
            None => return Ok(()),
        }
    }
    done.changed += 1;
    Ok(())
}

/// What [`collect`] found, and removed unless it was a dry run.
#[derive(Debug, Default, PartialEq)]
pub struct Collected {
    /// Upload instances that no record names.
    pub instances: u64,
    /// Their stripe objects.
    pub stripes: u64,
    pub bytes: u64,
    /// Records of multipart uploads that no bucket lists (left by an interrupted
    /// completion, abort or start).
    pub uploads: u64,
    /// Completions cut after their object committed, now finished: the upload is no longer
    /// listed and the parts the object does not use are removed.
    pub completions: u64,
    /// Session records (STS's temporary keys) that can act no more: expired, or of a user
    /// or role that is gone.
    pub sessions: u64,
}

/// Finds the stripes that no object entry and no part of a listed upload names, whose
/// newest stripe is older than `older_than`, and removes them (unless `dry_run`); likewise
/// upload records no bucket lists, and completions cut after their commit (finished). These are what a gateway killed mid-request leaves: the
/// stripes of a PUT whose entry never committed, or of an overwritten object whose old
/// content was not yet removed. Sessions that can act no more go too
/// ([`crate::users::sweep_sessions`]).
///
/// A write in progress is not yet named by any record; `older_than` spares it, so it must be
/// longer than any single PUT or part upload takes. Uploads are read before objects: a
/// completion moves parts from an upload into an object entry, and reading in that order
/// sees the parts in one place or the other.
/// `progress` hears how far the walk is, in steps (each bucket twice, then each write
/// whose stripes no record names), as (done, total so far).
pub async fn collect(
    pools: &Pools,
    older_than: Duration,
    dry_run: bool,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Collected, Error> {
    let (pool, data) = (&pools.meta, &pools.data);
    // Before anything is read: whatever is recorded while the walk runs is newer than this.
    let older_than = u64::try_from(older_than.as_nanos()).unwrap_or(u64::MAX);
    let cutoff = layout::now_ns().saturating_sub(older_than);
    // Listed first: what a write adds later is not a candidate at all.
    let listing = object_names(pool).await?;
    // The data pool's own, if it is another.
    let data_listing = if data.id() == pool.id() {
        Vec::new()
    } else {
        object_names(data).await?
    };
    let bucket_names = bucket_names(pool, &listing).await?;
    let mut out = Collected::default();
    let mut named = HashSet::new();
    let mut listed_uploads = HashSet::new();
    let walk = 2 * bucket_names.len() as u64;
    let mut step = 0;
    for bucket in &bucket_names {
        progress(step, walk);
        step += 1;
        let index = layout::index_object(bucket);
        let mut uploads = Vec::new();
        let mut pages = Pages::new(pool, &index, layout::before(&[layout::UPLOADS]));
        while let Some(page) = pages.next().await? {
            uploads.extend(
                page.iter()
                    .filter_map(|(key, _)| layout::parse_upload_key(key)),
            );
        }
        for (key, id) in uploads {
            let parts = match multipart::all_parts(pool, &id).await {
                Ok(parts) => parts,
                Err(Error::NotFound(_)) => Vec::new(),
                Err(e) => return Err(e),
            };
            let parts: Vec<PartRecord> = parts.into_iter().map(|(_, part)| part).collect();
            let finished =
                finish_cut_completion(pools, bucket, &key, &id, &parts, cutoff, dry_run).await?;
            if finished {
                out.completions += 1;
            }
            if !finished || dry_run {
                named.extend(parts.into_iter().map(|part| part.segment.instance));
                listed_uploads.insert(id);
            }
        }
    }
    for bucket in &bucket_names {
        progress(step, walk);
        step += 1;
        let index = layout::index_object(bucket);
        let mut pages = Pages::new(pool, &index, None);
        'objects: while let Some(page) = pages.next().await? {
            for (key, value) in page {
                let corrupt = |e| Error::Corrupt(format!("bucket {bucket}: {e}"));
                let entry = match layout::parse_index_key(&key) {
                    IndexKey::Object(_) => {
                        layout::decode::<ObjectEntry>(&value).map_err(corrupt)?
                    }
                    IndexKey::Version(..) => match layout::decode(&value).map_err(corrupt)? {
                        Version::Object(entry) => entry,
                        Version::Marker { .. } => continue,
                    },
                    IndexKey::Upload => break 'objects,
                    IndexKey::Head(_) | IndexKey::Unknown => continue,
                };
                named.extend(named_instances(data, entry).await?);
            }
        }
    }

    let mut instances: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut stray_uploads = Vec::new();
    for name in listing.iter().chain(&data_listing) {
        if let Some(instance) = stripe_instance(name) {
            if !named.contains(instance) {
                instances
                    .entry(instance.to_string())
                    .or_default()
                    .push(name.to_string());
            }
        } else if let Some(id) = name.strip_prefix("gw.upload.") {
            if !listed_uploads.contains(id) {
                stray_uploads.push(name.to_string());
            }
        }
    }

    let total = walk + instances.len() as u64;
    for (_, stripes) in instances {
        progress(step, total);
        step += 1;
        let mut newest = 0;
        let mut bytes = 0;
        for name in &stripes {
            match data.stat(name).await {
                Ok(stat) => {
                    newest = newest.max(stat.mtime_ns);
                    bytes += stat.size;
                }
                Err(client::Error::NotFound) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if newest > cutoff {
            continue;
        }
        out.instances += 1;
        out.stripes += stripes.len() as u64;
        out.bytes += bytes;
        if !dry_run {
            for name in &stripes {
                remove(data, name).await?;
            }
        }
    }
    for name in stray_uploads {
        match pool.stat(&name).await {
            Ok(stat) if stat.mtime_ns <= cutoff => {}
            Ok(_) | Err(client::Error::NotFound) => continue,
            Err(e) => return Err(e.into()),
        }
        out.uploads += 1;
        if !dry_run {
            remove(pool, &name).await?;
        }
    }
    out.sessions = crate::users::sweep_sessions(pool, layout::now_ns(), dry_run).await?;
    Ok(out)
}

/// The data instances `entry` names: its segments', and its list's where it keeps them
/// out of line. A list gone since the entry was read was freed with its segments.
async fn named_instances(data: &Pool, mut entry: ObjectEntry) -> Result<Vec<String>, Error> {
    match data::with_segments(data, &mut entry).await {
        Ok(()) => {}
        Err(Error::NotFound(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    }
    let list = entry.listed.map(|listed| listed.instance);
    Ok(entry
        .segments
        .into_iter()
        .map(|s| s.instance)
        .chain(list)
        .collect())
}

/// The names of every object of the pool.
async fn object_names(pool: &Pool) -> Result<Vec<String>, Error> {
    let names = pool.list().await?;
    Ok(names.iter().map(|name| name.as_str().to_string()).collect())
}

/// Every bucket: those `gw.buckets` lists, and those whose index object is in `listing`
/// (a CreateBucket cut between its two writes makes a bucket that works but is not listed).
async fn bucket_names(pool: &Pool, listing: &[String]) -> Result<Vec<String>, Error> {
    let mut names: BTreeSet<String> = buckets::list(pool)
        .await?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let prefix = layout::index_object("");
    names.extend(
        listing
            .iter()
            .filter_map(|name| name.strip_prefix(prefix.as_str()))
            .map(str::to_string),
    );
    Ok(names.into_iter().collect())
}

/// Finishes upload `id` of `key` in `bucket` (unless `dry_run`) if a crash cut its
/// completion after the object committed: it is marked completing, has not changed since
/// `cutoff`, and the object `key` names some of its parts. Says whether it was (or would be)
/// finished. A completion cut before its commit is left alone: the client may complete it
/// again. (Completions commit and stop listing their upload in one request now; uploads
/// left listed after their commit are from gateways before that.)
async fn finish_cut_completion(
    pools: &Pools,
    bucket: &str,
    key: &str,
    id: &str,
    parts: &[PartRecord],
    cutoff: u64,
    dry_run: bool,
) -> Result<bool, Error> {
    let pool = &pools.meta;
    match multipart::completing_since(pool, id).await? {
        Some(since) if since <= cutoff => {}
        _ => return Ok(false),
    }
    let Some(mut entry) = buckets::entry(pool, bucket, key).await? else {
        return Ok(false);
    };
    match data::with_segments(&pools.data, &mut entry).await {
        Ok(()) => {}
        // Freed since the entry was read: the object changed, and this is for the next walk.
        Err(Error::NotFound(_)) => return Ok(false),
        Err(e) => return Err(e),
    }
    let used: Vec<String> = entry.segments.into_iter().map(|s| s.instance).collect();
    if !parts
        .iter()
        .any(|part| used.contains(&part.segment.instance))
    {
        return Ok(false);
    }
    if !dry_run {
        pool.omap_remove(
            &layout::index_object(bucket),
            vec![layout::upload_key(key, id)],
        )
        .await?;
        multipart::finish(pools, id, parts, &used).await;
    }
    Ok(true)
}

/// What a lifecycle pass did.
#[derive(Debug, Default, PartialEq)]
pub struct Expired {
    /// Buckets with lifecycle rules.
    pub buckets: u64,
    /// Current objects expired (removed, or hidden by a delete marker where versions are
    /// kept).
    pub objects: u64,
    /// Noncurrent versions removed.
    pub noncurrent: u64,
    /// Delete markers removed, left with no version behind them.
    pub markers: u64,
    /// Incomplete multipart uploads aborted.
    pub uploads: u64,
    /// Versions that expired but that object lock holds.
    pub held: u64,
    /// Objects that changed between the walk and the change: left for the next pass.
    pub changed: u64,
    /// Buckets whose pass failed (logged each); the others went on.
    pub failed: u64,
}

/// One line for people: what a lifecycle pass did.
pub fn expired_summary(done: &Expired) -> String {
    let mut line = format!(
        "lifecycle: {} buckets with rules; expired {} objects and {} noncurrent versions, \
         removed {} lone delete markers, aborted {} incomplete uploads",
        done.buckets, done.objects, done.noncurrent, done.markers, done.uploads
    );
    if done.held > 0 {
        line += &format!("; {} expired versions are held by object lock", done.held);
    }
    if done.failed > 0 {
        line += &format!("; {} buckets failed (see the log)", done.failed);
    }
    if done.changed > 0 {
        line += &format!(
            "; {} objects changed meanwhile, left for the next pass",
            done.changed
        );
    }
    line
}

/// Removes the content of objects no record names any more (the gateway waits for the
/// reads in progress; the CLI removes at once).
pub type Free<'a> =
    &'a (dyn Fn(Vec<ObjectEntry>) -> futures::future::BoxFuture<'static, ()> + Send + Sync);

/// Applies the lifecycle rules of every bucket that has some at `now_ns` (a day lasting
/// `day_ns`: shorter only in tests), each removal through [`buckets::apply`] on the
/// condition that what expired is still there as it was read; `free` removes the content
/// of what goes.
pub async fn lifecycle(
    pools: &Pools,
    now_ns: u64,
    day_ns: u64,
    free: Free<'_>,
) -> Result<Expired, Error> {
    let pool = &pools.meta;
    let mut done = Expired::default();
    for (bucket, _) in buckets::list(pool).await? {
        let found = match buckets::info(pool, &bucket).await {
            Ok(found) => found,
            Err(Error::NotFound(_)) => continue,
            Err(e) => return Err(e),
        };
        let Some(rules) = &found.lifecycle else {
            continue;
        };
        done.buckets += 1;
        let pass = Pass {
            pool,
            pools,
            bucket: &bucket,
            versioning: found.versioning,
            rules,
            now_ns,
            day_ns,
            free,
        };
        let passed = match pass.objects(&mut done).await {
            Ok(()) => pass.uploads(&mut done).await,
            Err(e) => Err(e),
        };
        if let Err(e) = passed {
            tracing::warn!("lifecycle of bucket {bucket}: {e}");
            done.failed += 1;
        }
    }
    Ok(done)
}

/// One bucket's lifecycle pass.
struct Pass<'a> {
    /// The gateway's own pool (`pools.meta`).
    pool: &'a Pool,
    pools: &'a Pools,
    bucket: &'a str,
    versioning: Versioning,
    rules: &'a Lifecycle,
    now_ns: u64,
    day_ns: u64,
    free: Free<'a>,
}

/// The versions of one key, newest first, as the walk meets them.
type KeyVersions = (Vec<u8>, Vec<(Order, Version)>);

impl Pass<'_> {
    /// Walks the bucket's index once: current objects under their keys, then each key's
    /// versions together.
    async fn objects(&self, done: &mut Expired) -> Result<(), Error> {
        let index = layout::index_object(self.bucket);
        let mut pages = Pages::new(self.pool, &index, None);
        let mut versions: Option<KeyVersions> = None;
        while let Some(page) = pages.next().await? {
            for (entry_key, value) in page {
                match layout::parse_index_key(&entry_key) {
                    IndexKey::Object(key) => {
                        let entry: ObjectEntry = layout::decode(&value).map_err(Error::Corrupt)?;
                        let key = String::from_utf8_lossy(key).into_owned();
                        self.current(&key, entry, done).await?;
                    }
                    IndexKey::Version(key, order) => {
                        let version: Version = layout::decode(&value).map_err(Error::Corrupt)?;
                        match &mut versions {
                            Some((of, list)) if of.as_slice() == key => list.push((order, version)),
                            _ => {
                                if let Some(previous) = versions.take() {
                                    self.versions(previous, done).await?;
                                }
                                versions = Some((key.to_vec(), vec![(order, version)]));
                            }
                        }
                    }
                    IndexKey::Head(_) | IndexKey::Upload | IndexKey::Unknown => {}
                }
            }
        }
        if let Some(last) = versions {
            self.versions(last, done).await?;
        }
        Ok(())
    }

    /// Expires the current object `entry` of `key` if a rule says so by now.
    async fn current(
        &self,
        key: &str,
        entry: ObjectEntry,
        done: &mut Expired,
    ) -> Result<(), Error> {
        match self.rules.expiry(key, &entry, self.day_ns) {
            Some((at, _)) if at <= self.now_ns => {}
            _ => return Ok(()),
        }
        if self.change(key, Change::Delete, Some(&entry), done).await? {
            done.objects += 1;
        }
        Ok(())
    }

    /// Removes the noncurrent versions of one key that have expired, and its delete marker
    /// if that is all that is left.
    async fn versions(
        &self,
        (key, versions): KeyVersions,
        done: &mut Expired,
    ) -> Result<(), Error> {
        let key = String::from_utf8_lossy(&key).into_owned();
        let id = |order: Order, version: &Version| match version.tag() {
            Some(tag) if tag.null => VersionId::Null,
            _ => VersionId::Order(order),
        };
        if let [(order, marker @ Version::Marker { mtime_ns, .. })] = versions.as_slice() {
            if self
                .rules
                .marker_expired(&key, *mtime_ns, self.now_ns, self.day_ns)
            {
                let change = Change::DeleteVersion {
                    id: id(*order, marker),
                    bypass: false,
                    noncurrent: false,
                };
                if self.change(&key, change, None, done).await? {
                    done.markers += 1;
                }
            }
            return Ok(());
        }
        for (newer, pair) in versions.windows(2).enumerate() {
            let [(_, replacing), (order, version)] = pair else {
                continue;
            };
            let Version::Object(entry) = version else {
                continue;
            };
            let since = match replacing {
                Version::Object(newer) => newer.mtime_ns,
                Version::Marker { mtime_ns, .. } => *mtime_ns,
            };
            let expired =
                self.rules
                    .noncurrent_expired(&key, entry, since, newer, self.now_ns, self.day_ns);
            if !expired {
                continue;
            }
            let change = Change::DeleteVersion {
                id: id(*order, version),
                bypass: false,
                noncurrent: true,
            };
            if self.change(&key, change, Some(entry), done).await? {
                done.noncurrent += 1;
            }
        }
        Ok(())
    }

    /// Makes `change` of `key` if what it judges is still `expected` (an object, or for
    /// `None` a delete marker); returns whether it was made. Object lock's refusals and
    /// changes meanwhile are counted, not failures.
    async fn change(
        &self,
        key: &str,
        change: Change,
        expected: Option<&ObjectEntry>,
        done: &mut Expired,
    ) -> Result<bool, Error> {
        let unchanged = |judged: Judged| {
            let same = match (judged, expected) {
                (Judged::Object(now), Some(then)) => {
                    now.mtime_ns == then.mtime_ns && now.etag == then.etag
                }
                (Judged::Marker, None) => true,
                _ => false,
            };
            if same {
                Ok(())
            } else {
                Err(Error::Precondition(format!("{key} changed")))
            }
        };
        let versioning = self.versioning;
        match buckets::apply(
            self.pool,
            self.bucket,
            key,
            versioning.into(),
            change,
            None,
            unchanged,
        )
        .await
        {
            Ok(plan) => {
                (self.free)(plan.freed).await;
                Ok(true)
            }
            Err(Error::Locked(why)) => {
                tracing::debug!("lifecycle of bucket {}: {why}", self.bucket);
                done.held += 1;
                Ok(false)
            }
            Err(Error::Precondition(_) | Error::Busy(_)) => {
                done.changed += 1;
                Ok(false)
            }
            Err(Error::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Aborts the bucket's multipart uploads that a rule says have run too long.
    async fn uploads(&self, done: &mut Expired) -> Result<(), Error> {
        let (uploads, _) =
            multipart::list(self.pool, self.bucket, "", None, None, usize::MAX).await?;
        for (key, id, record) in uploads {
            if !self
                .rules
                .upload_expired(&key, record.initiated_ns, self.now_ns, self.day_ns)
            {
                continue;
            }
            match multipart::abort(self.pools, self.bucket, &key, &id).await {
                Ok(()) => done.uploads += 1,
                Err(e) if multipart::is_no_upload(&e, &id) => {}
                Err(Error::Busy(_)) => done.changed += 1,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The instance of a stripe object's name (`gw.data.INSTANCE.N`).
fn stripe_instance(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("gw.data.")?;
    let (instance, stripe) = rest.rsplit_once('.')?;
    stripe.parse::<u64>().ok().map(|_| instance)
}

async fn remove(pool: &Pool, name: &str) -> Result<(), Error> {
    match pool.remove(name).await {
        Ok(()) | Err(client::Error::NotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripe_names_give_their_instance() {
        let instance = layout::new_instance();
        let name = layout::stripe_object(&instance, 12);
        assert_eq!(stripe_instance(&name), Some(instance.as_str()));
        assert_eq!(stripe_instance("gw.data.abc"), None);
        assert_eq!(stripe_instance("gw.upload.abc.1"), None);
        assert_eq!(stripe_instance("gw.data.abc.x"), None);
    }
}
