//! The S3 operations, on the pool's buckets and objects. s3s has parsed the request and
//! checked its signature (if it has one) before any of these runs; each asks
//! [`policy`] whether the request's user, or an anonymous request, may do what it asks.
//!
//! One file per group of verbs (buckets, objects, copies, multipart uploads, listings, tags,
//! object lock, lifecycle, policies, ACLs, CORS); the
//! table at the end of this file routes each S3 verb to its handler, and [`error`] is the
//! one place that chooses S3's error codes.

mod acl;
pub(crate) mod attributes;
mod bucket;
mod checksum;
mod copy;
pub(crate) mod cors;
mod encryption;
mod error;
mod lifecycle;
mod list;
mod lock;
pub(crate) mod logging;
mod object;
mod policy;
pub(crate) mod post;
mod select;
mod tagging;
mod torrent;
mod upload;

use std::collections::HashMap;
use std::sync::Mutex;

use base64::Engine;
use client::Pool;
use s3s::auth::{S3Auth, SecretKey};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, S3};

use crate::chunked::Trailers;
use crate::kms::{Kms, MonitorKms};
use crate::layout::{self, ContentHeaders, ObjectEntry, Segment, Sse, Version};
use crate::sse::KeyCache;
use crate::versions::{self, Amend, Change, VersionId, Versioning};
use crate::{buckets, data, users, Error, Pools};
use encryption::CustomerKey;
pub(crate) use error::Refusal;

/// The keys of one listing page when the client asks for none in particular (S3's).
const MAX_KEYS_DEFAULT: i32 = 1000;
/// The largest single PUT or part (S3's).
const PUT_BYTES_MAX: u64 = 5 << 30;

/// The gateway's S3 implementation on one pool.
#[derive(Clone)]
pub struct Gateway {
    /// Users, buckets, indexes and upload records.
    pool: Pool,
    /// The content's stripes ([`crate::pools`]).
    data: Pool,
    /// Access key to the user who holds it, as the last signature check read them (every
    /// signed request's check reads the user anew, so a change to a user's policies holds
    /// from the next request on, and a removed user's key signs nothing).
    signers: std::sync::Arc<Mutex<Signers>>,
    /// Where data keys come from.
    kms: std::sync::Arc<dyn Kms>,
    /// Unwrapped data keys of encrypted objects.
    cache: KeyCache,
    /// Content being streamed, and its removals waiting for that.
    readers: crate::readers::Readers,
    /// Access log lines waiting for delivery ([`logging`]).
    logs: std::sync::Arc<Mutex<crate::access_log::Batches>>,
    /// The region the gateway answers as ([`Gateway::in_region`]).
    region: std::sync::Arc<str>,
    /// The least size of every part of a multipart upload but the last
    /// ([`Gateway::with_part_min`]).
    part_min_bytes: u64,
}

/// The region a gateway answers as unless given another: the one clients assume when
/// told none.
pub const REGION_DEFAULT: &str = "us-east-1";
pub use bucket::region_name;
pub use upload::PART_MIN_BYTES_DEFAULT;

/// How often the gateway asks the KMS which keys exist, to forget the data keys of removed
/// ones, and lets its client do its upkeep.
const KMS_SWEEP: std::time::Duration = std::time::Duration::from_secs(5);
/// How often the gateway applies buckets' lifecycle rules (at most).
const LIFECYCLE_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

impl Gateway {
    /// A gateway on `pools` with the monitors' KMS.
    pub async fn start(pools: Pools) -> Result<Gateway, Error> {
        let kms = MonitorKms {
            cluster: pools.meta.cluster().clone(),
        };
        Gateway::with_kms(pools, std::sync::Arc::new(kms)).await
    }

    /// A gateway on `pools` with `kms`: makes sure the KMS key of SSE-S3 exists, and starts
    /// forgetting the cached data keys of KMS keys that are removed.
    pub async fn with_kms(pools: Pools, kms: std::sync::Arc<dyn Kms>) -> Result<Gateway, Error> {
        kms.ensure(crate::sse::MANAGED_KEY)
            .await
            .map_err(|e| Error::Internal(e.to_string()))?;
        let gateway = Gateway {
            readers: crate::readers::Readers::new(pools.data.clone()),
            pool: pools.meta,
            data: pools.data,
            signers: Default::default(),
            kms: kms.clone(),
            cache: KeyCache::default(),
            logs: Default::default(),
            region: REGION_DEFAULT.into(),
            part_min_bytes: PART_MIN_BYTES_DEFAULT,
        };
        let cache = gateway.cache.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(KMS_SWEEP).await;
                if let Err(e) = kms.upkeep().await {
                    tracing::warn!("KMS upkeep: {e}");
                }
                match kms.keys().await {
                    Ok(names) => cache.keep_only(&names),
                    Err(e) => tracing::warn!("listing KMS keys: {e}"),
                }
            }
        });
        Ok(gateway)
    }

    /// The gateway answering as `region` (a name of 1 to 63 lowercase letters, digits and
    /// dashes, such as `us-east-1` or Ceph's `default`): the location of every bucket, the
    /// only location constraint CreateBucket takes, and the region partitioned access log
    /// keys name. Clients may sign for any region.
    pub fn in_region(mut self, region: &str) -> Result<Gateway, String> {
        region_name(region)?;
        self.region = region.into();
        Ok(self)
    }

    /// Takes parts of a multipart upload as small as `bytes` (S3's least is 5 MiB, every
    /// part but the last): smaller only to test uploads of many parts, as Ceph's
    /// rgw_multipart_min_part_size.
    pub fn with_part_min(mut self, bytes: u64) -> Gateway {
        self.part_min_bytes = bytes;
        self
    }

    /// Applies buckets' lifecycle rules from now on, with a day of `day` (shorter only in
    /// tests): every hour, or four times a lifecycle day if that is shorter. Several
    /// gateways on one pool each do; their changes are conditional, so a rule applies once.
    pub fn expire_on_schedule(&self, day: std::time::Duration) {
        let gateway = self.clone();
        let day_ns = day.as_nanos().clamp(1, u128::from(u64::MAX)) as u64;
        let every = (day / 4).clamp(std::time::Duration::from_secs(1), LIFECYCLE_EVERY);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let free = |freed| {
                    let gateway = gateway.clone();
                    Box::pin(async move { gateway.free(freed, &[]).await }) as _
                };
                match crate::maintenance::lifecycle(
                    &gateway.pools(),
                    layout::now_ns(),
                    day_ns,
                    &free,
                )
                .await
                {
                    Ok(done) if done == crate::maintenance::Expired::default() => {}
                    Ok(done)
                        if done.objects + done.noncurrent + done.markers + done.uploads == 0 =>
                    {
                        tracing::debug!("{}", crate::maintenance::expired_summary(&done))
                    }
                    Ok(done) => tracing::info!("{}", crate::maintenance::expired_summary(&done)),
                    Err(e) => tracing::warn!("lifecycle: {e}"),
                }
            }
        });
    }

    /// The pool the gateway serves.
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The service s3s serves: this gateway, with its users' keys checking signatures.
    pub fn service(self) -> s3s::service::S3Service {
        let mut builder = s3s::service::S3ServiceBuilder::new(self.clone());
        builder.set_auth(self);
        builder.set_access(crate::metrics::NoteVerb);
        builder.build()
    }

    /// The name of the user who signed `req`; an unsigned request is refused.
    async fn user<T>(&self, req: &S3Request<T>) -> S3Result<String> {
        Ok(self.signer(req).await?.name.clone())
    }

    /// The user who signed `req`, with their policies; an unsigned request is refused.
    async fn signer<T>(&self, req: &S3Request<T>) -> S3Result<std::sync::Arc<Signer>> {
        let Some(credentials) = &req.credentials else {
            return Err(Refusal::Unsigned.into());
        };
        let key = &credentials.access_key;
        let kept = self.signers_lock().by_key.get(key).map(|(_, s)| s.clone());
        let signer = match kept {
            Some(signer) => signer,
            None => match self.read_signer(key).await? {
                (_, Some(signer)) => signer,
                (_, None) => return Err(Refusal::UnknownAccessKey.into()),
            },
        };
        if let Some(token) = &signer.token {
            // A session's key signs only with its token, in the header or, presigned, the
            // query (both signed).
            let given = req
                .headers
                .get("x-amz-security-token")
                .map(|v| v.as_bytes().to_vec())
                .or_else(|| {
                    let query = req.uri.query()?;
                    form_urlencoded::parse(query.as_bytes())
                        .find(|(name, _)| name.eq_ignore_ascii_case("x-amz-security-token"))
                        .map(|(_, value)| value.as_bytes().to_vec())
                });
            let matches = given.is_some_and(|given| {
                aws_lc_rs::constant_time::verify_slices_are_equal(&given, token.as_bytes()).is_ok()
            });
            if !matches {
                return Err(Refusal::InvalidToken.into());
            }
        }
        Ok(signer)
    }

    /// Reads the holder of access key `key` anew and keeps them, unless a read begun later
    /// was kept first: their secret key and what the gateway needs of them to decide their
    /// requests, or `None` for a key no one holds.
    async fn read_signer(&self, key: &str) -> S3Result<(String, Option<std::sync::Arc<Signer>>)> {
        let begun = {
            let mut signers = self.signers_lock();
            signers.reads += 1;
            signers.reads
        };
        let Some(holder) = users::holder(&self.pool, key).await? else {
            self.signers_lock().by_key.remove(key);
            return Ok((String::new(), None));
        };
        if let Some(session) = holder.session() {
            if session.is_expired(layout::now_ns()) {
                self.signers_lock().by_key.remove(key);
                if let Err(e) = users::remove_session(&self.pool, key).await {
                    tracing::warn!("removing an expired session: {e}");
                }
                return Err(Refusal::ExpiredToken.into());
            }
        }
        let secret = holder.secret_key().to_owned();
        let token = holder.session().map(|session| session.token.clone());
        // A role's session acts with the role's policies, under the session's ARN.
        let (user, role) = match holder {
            users::Holder::User { user, .. } => (user, None),
            users::Holder::Session {
                user,
                role,
                session,
            } => {
                let taken = session.role.zip(role);
                (user, taken)
            }
        };
        let unreadable = |e: Error| {
            tracing::error!("{e}");
            Error::Internal("a policy of the signer cannot be read".into())
        };
        // The policies it acts with: a role's, or a user's with its groups'.
        let groups = match &role {
            Some(_) => Vec::new(),
            None => crate::groups::by_ids(&self.pool, &user.groups).await?,
        };
        let (documents, parse): (_, crate::policy::Parse) = match &role {
            Some((_, role)) => (
                crate::roles::documents(role),
                crate::policy::Policy::parse_role,
            ),
            None => (
                users::documents(&user, &groups),
                crate::policy::Policy::parse_identity,
            ),
        };
        let documents = documents.map_err(unreadable)?;
        let texts = documents.iter().map(|d| d.text);
        let mut signers = self.signers_lock();
        let kept = signers.by_key.get(key);
        if let Some((_, newer)) = kept.filter(|(read, _)| *read > begun) {
            return Ok((secret, Some(newer.clone())));
        }
        // An account's user is judged as itself, under its own policies alone.
        let member = user.account.as_ref().filter(|a| !a.root);
        let bounded = match (&role, member) {
            (Some((taken, role)), _) => Some(Bounded {
                principal: crate::roles::session_arn(role, &taken.session_name),
                id: format!("{}:{}", role.id, taken.session_name),
                username: None,
                role: Some(crate::roles::arn(role)),
                tags: crate::roles::principal_tags(role, &taken.tags),
            }),
            (None, Some(member)) => Some(Bounded {
                principal: crate::accounts::arn(&user),
                id: member.id.clone(),
                username: Some(member.name.clone()),
                role: None,
                tags: Vec::new(),
            }),
            (None, None) => None,
        };
        // What an account's role's session makes is the role's account's; what an operator's
        // role's session makes, its user's.
        let name = match &role {
            Some((_, role)) => role.account.as_deref(),
            None => None,
        }
        .unwrap_or(crate::accounts::owner(&user));
        let signer = match kept {
            // The same signer and policies as last read: kept as they were read then.
            Some((_, signer))
                if signer.texts.iter().map(String::as_str).eq(texts)
                    && signer.token == token
                    && signer.name == name
                    && signer.bounded == bounded =>
            {
                signer.clone()
            }
            _ => {
                let policies = users::read_documents(&documents, parse).map_err(unreadable)?;
                let bound = role.as_ref().and_then(|(taken, _)| taken.policy.as_deref());
                let session_policy = bound
                    .map(|text| {
                        crate::policy::Policy::parse_identity(text).map_err(|e| {
                            unreadable(Error::Corrupt(format!("a session's policy: {e}")))
                        })
                    })
                    .transpose()?;
                std::sync::Arc::new(Signer {
                    texts: documents.iter().map(|d| d.text.to_owned()).collect(),
                    name: name.to_owned(),
                    policies,
                    session_policy,
                    token,
                    bounded,
                })
            }
        };
        signers.by_key.insert(key.into(), (begun, signer.clone()));
        Ok((secret, Some(signer)))
    }

    fn signers_lock(&self) -> std::sync::MutexGuard<'_, Signers> {
        self.signers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The object GET, HEAD and copies read: version `version` of `key` if one is asked,
    /// else its current version.
    async fn object(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
    ) -> S3Result<ObjectEntry> {
        let Some(version) = version else {
            let current = buckets::current(&self.pool, bucket, key)
                .await
                .map_err(|e| in_bucket(e, bucket))?;
            return current_entry(bucket, key, current);
        };
        let id = version_id(version)?;
        match buckets::version(&self.pool, bucket, key, id)
            .await
            .map_err(|e| in_bucket(e, bucket))?
        {
            Some(Version::Object(entry)) => Ok(entry),
            Some(Version::Marker { .. }) => Err(Refusal::MarkerVersion {
                key: key.into(),
                version: version.into(),
            }
            .into()),
            None => Err(Refusal::NoVersion {
                key: key.into(),
                version: version.into(),
            }
            .into()),
        }
    }

    /// Its pools, for what works on both.
    fn pools(&self) -> Pools {
        Pools {
            meta: self.pool.clone(),
            data: self.data.clone(),
        }
    }

    /// Frees the content of `freed` but the segments `kept` (those of the object a change
    /// made: a completion committed twice names the same instances). A list of segments
    /// that cannot be read leaves its segments as garbage for `coffer gw gc`.
    async fn free(&self, freed: Vec<ObjectEntry>, kept: &[Segment]) {
        for mut old in freed {
            if let Err(e) = data::with_segments(&self.data, &mut old).await {
                tracing::warn!("{e}: its segments stay as garbage");
            }
            let segments: Vec<Segment> = old
                .segments
                .into_iter()
                .filter(|segment| !kept.iter().any(|s| s.instance == segment.instance))
                .collect();
            match &old.listed {
                Some(listed) => {
                    self.readers
                        .remove_listed(&listed.segment(), segments)
                        .await
                }
                None => {
                    for segment in &segments {
                        self.readers.remove_segment(segment).await;
                    }
                }
            }
        }
    }

    /// Holds `entry`'s content for a verb that streams it ([`crate::readers`]), and fills
    /// in its segments where it keeps them out of line: at once, before any round trip, as
    /// the entry was read.
    async fn hold(&self, entry: &mut ObjectEntry) -> S3Result<crate::readers::Hold> {
        let hold = self.readers.hold(entry);
        self.with_segments(entry).await?;
        Ok(hold)
    }

    /// Fills in `entry`'s segments where it keeps them out of line, for a verb that reads
    /// its content or its parts. A list gone meanwhile was freed by a change of the object:
    /// the client may ask again.
    async fn with_segments(&self, entry: &mut ObjectEntry) -> S3Result<()> {
        match data::with_segments(&self.data, entry).await {
            Err(Error::NotFound(what)) => Err(Error::Busy(format!(
                "the object changed while it was read ({what} is gone)"
            ))
            .into()),
            done => done.map_err(Into::into),
        }
    }

    /// Commits a written upload as `key` of `bucket` (a new version where versions are
    /// kept) if `check` accepts its current object (see [`buckets::apply`]), and frees the
    /// content it replaces; returns the version made. `stored` is what the index held of
    /// the key when `bucket` was read, if it was read with it. If the commit fails, the
    /// upload's own stripes are freed.
    async fn commit(
        &self,
        bucket: &buckets::Bucket,
        name: &str,
        key: &str,
        stored: Option<buckets::Stored>,
        entry: &ObjectEntry,
        check: impl Fn(buckets::Judged) -> Result<(), Error>,
    ) -> S3Result<Option<VersionId>> {
        let change = Change::Put(entry.clone());
        let basis = buckets::Basis {
            versioning: bucket.versioning,
            stored,
        };
        match buckets::apply(&self.pool, name, key, basis, change, None, check).await {
            Ok(plan) => {
                self.free(plan.freed, &entry.segments).await;
                Ok(plan.version)
            }
            Err(e) => {
                data::remove(&self.data, entry).await;
                Err(in_bucket(e, name))
            }
        }
    }

    /// Deletes object `key` of `bucket`, or one version of it, if `check` accepts it and
    /// object lock does not hold it (`bypass` lifts a governance retention); returns what
    /// was done. A check that finds no object (`NoObject`) leaves nothing to do, which is
    /// done.
    async fn delete(
        &self,
        bucket: &buckets::Bucket,
        name: &str,
        key: &str,
        version: Option<VersionId>,
        bypass: bool,
        check: impl Fn(buckets::Judged) -> Result<(), Error>,
    ) -> Result<versions::Plan, Error> {
        let change = version.map_or(Change::Delete, |id| Change::DeleteVersion {
            id,
            bypass,
            noncurrent: false,
        });
        let mut plan = buckets::apply(
            &self.pool,
            name,
            key,
            bucket.versioning.into(),
            change,
            None,
            check,
        )
        .await
        .or_else(|e| match e {
            Error::NoObject(_) => Ok(versions::Plan::default()),
            e => Err(e),
        })?;
        self.free(std::mem::take(&mut plan.freed), &[]).await;
        Ok(plan)
    }

    /// Amends `key` of `bucket` (version `version` if given, else the current one); returns
    /// the id of the version amended, where versions are kept.
    async fn amend(
        &self,
        bucket: &buckets::Bucket,
        name: &str,
        key: &str,
        version: Option<&str>,
        amend: Amend,
    ) -> S3Result<Option<String>> {
        let version = version.map(version_id).transpose()?;
        let change = Change::Amend { version, amend };
        let plan = buckets::apply(
            &self.pool,
            name,
            key,
            bucket.versioning.into(),
            change,
            None,
            |_| Ok(()),
        )
        .await
        .map_err(|e| in_bucket(e, name))?;
        Ok(plan
            .version
            .filter(|_| bucket.versioning != Versioning::Unversioned)
            .map(|id| id.to_string()))
    }

    /// A fresh data key for new content encrypted as `sse`, if it is encrypted.
    async fn sealing(
        &self,
        sse: &Option<Sse>,
        customer: Option<&CustomerKey>,
    ) -> S3Result<Option<data::Sealing>> {
        match sse {
            Some(sse) => Ok(Some(
                encryption::new_sealing(self.kms.as_ref(), sse, customer).await?,
            )),
            None => Ok(None),
        }
    }

    /// Reads bytes `range` of `entry`'s content, held by `hold`, with `customer`'s key
    /// under SSE-C: once it has the data keys of the segments the range lies in.
    async fn read(
        &self,
        entry: &ObjectEntry,
        range: std::ops::Range<u64>,
        customer: Option<&CustomerKey>,
        hold: crate::readers::Hold,
    ) -> S3Result<data::Reader> {
        let (kms, cache) = (self.kms.as_ref(), &self.cache);
        let keys = encryption::segment_keys(kms, cache, entry, customer, range.clone()).await?;
        Ok(data::read(&self.data, entry, range, keys, hold))
    }
}

/// A user as the gateway decides the requests they sign: their name and the policies they
/// act with (their own and their groups', or a role's for a role's session), as given and
/// read.
pub(crate) struct Signer {
    /// The owner of what the signer makes: the user, or their account (its root's name).
    pub name: String,
    /// The texts of the policies' documents, in order ([`users::documents`]): a signer
    /// read again with the same is kept.
    texts: Vec<String>,
    pub policies: Vec<crate::policy::Policy>,
    /// A session's token, which its requests must carry (`sts:authentication` is then
    /// true in their condition keys).
    pub token: Option<String>,
    /// For a role's session and an account's user: its requests are decided under its own
    /// policies and the bucket's alone, with `policy::decide_role`.
    pub bounded: Option<Bounded>,
    /// A role's session's own policy, which bounds the role's (`policy::judge_role`).
    pub session_policy: Option<crate::policy::Policy>,
}

/// A role's session or an account's user, as its requests are judged.
#[derive(PartialEq)]
pub(crate) struct Bounded {
    /// The principal its requests are judged as: `arn:aws:sts:::assumed-role/ROLE/SESSION`,
    /// or an account's user's ARN (`arn:aws:iam::ID:user/PATH/NAME`).
    pub principal: String,
    /// `ROLEID:SESSION`, or the user's id (`aws:userid` in its condition keys).
    pub id: String,
    /// An account's user's name (`aws:username`); none for a role's session.
    pub username: Option<String>,
    /// A role's session's role's ARN, which a bucket policy may name for all its sessions.
    pub role: Option<String>,
    /// A role's session's tags ([`crate::roles::principal_tags`]): `aws:PrincipalTag/KEY`.
    pub tags: Vec<(String, String)>,
}

impl Signer {
    /// Who the signer's requests are judged as: the user, a role's session's ARN or an
    /// account's user.
    pub fn principal(&self) -> &str {
        self.bounded.as_ref().map_or(&self.name, |b| &b.principal)
    }

    /// What the signer's own policies say of `asked`: a user's, or a role's bounded by its
    /// session's.
    pub fn judge(&self, asked: &crate::policy::Asked) -> crate::policy::Verdict {
        match &self.bounded {
            Some(_) => {
                crate::policy::judge_role(&self.policies, self.session_policy.as_ref(), asked)
            }
            None => crate::policy::judge_all(&self.policies, asked),
        }
    }
}

/// The holders of access keys, each with the number of the read that found them.
#[derive(Default)]
struct Signers {
    /// Reads begun so far.
    reads: u64,
    by_key: HashMap<String, (u64, std::sync::Arc<Signer>)>,
}

#[async_trait::async_trait]
impl S3Auth for Gateway {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.read_signer(access_key).await? {
            (secret, Some(_)) => Ok(SecretKey::from(secret)),
            (_, None) => Err(Refusal::UnknownAccessKey.into()),
        }
    }
}

fn etag(entry: &ObjectEntry) -> ETag {
    ETag::Strong(entry.etag.clone())
}

fn timestamp(ns: u64) -> Timestamp {
    Timestamp::from(std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns))
}

/// `ns` as an HTTP date (`Wed, 02 Dec 2026 12:00:00 GMT`), as headers give times.
fn http_date(ns: u64) -> Option<String> {
    let mut date = Vec::new();
    timestamp(ns)
        .format(s3s::dto::TimestampFormat::HttpDate, &mut date)
        .ok()?;
    String::from_utf8(date).ok()
}

fn modified(entry: &ObjectEntry) -> Timestamp {
    timestamp(entry.mtime_ns)
}

/// The current object of `key` in `bucket`, from what the index holds of it: refused as
/// a delete marker where its newest version is one, as missing where it has none.
fn current_entry(bucket: &str, key: &str, current: buckets::Current) -> S3Result<ObjectEntry> {
    match current {
        (Some(entry), _) => Ok(entry),
        // Versions but no current one: the newest is a delete marker.
        (None, Some(head)) => Err(Refusal::Deleted {
            key: key.into(),
            version: versions::newest_id(&head).to_string(),
        }
        .into()),
        (None, None) => Err(Refusal::NoKey {
            bucket: bucket.into(),
            key: key.into(),
        }
        .into()),
    }
}

/// The error of a write to `bucket`'s records: the bucket may have gone meanwhile.
fn in_bucket(e: Error, bucket: &str) -> s3s::S3Error {
    match e {
        Error::NotFound(_) => Refusal::NoBucket(bucket.into()).into(),
        e => e.into(),
    }
}

fn check_key(key: &str) -> S3Result<()> {
    if key.is_empty() || key.len() > layout::KEY_BYTES_MAX {
        return Err(Refusal::KeyLength(layout::KEY_BYTES_MAX).into());
    }
    // A NUL would let one key's versions sort among another's (`layout::head_key`).
    if key.contains('\0') {
        return Err(Refusal::Invalid("object keys may not contain NUL".into()).into());
    }
    Ok(())
}

/// A version id a client gave.
fn version_id(text: &str) -> S3Result<VersionId> {
    VersionId::parse(text).ok_or_else(|| Refusal::VersionId(text.into()).into())
}

/// The version id S3 answers with for a version a write made: none where versions are not
/// kept, nor for a "null" version.
fn made_version(made: Option<VersionId>) -> Option<String> {
    made.filter(|id| *id != VersionId::Null)
        .map(|id| id.to_string())
}

/// A new index entry for content just written, encrypted as `sse` (with `customer`'s key
/// under SSE-C).
fn new_entry(
    written: &data::Written,
    content_type: Option<String>,
    metadata: Vec<(String, String)>,
    headers: ContentHeaders,
    tags: tagging::Tags,
    sse: Option<Sse>,
    customer: Option<&CustomerKey>,
) -> ObjectEntry {
    let etag = encryption::etag_bytes(&sse, written.md5, &written.instance, customer);
    ObjectEntry {
        size: written.size,
        etag: layout::hex(&etag),
        mtime_ns: layout::now_ns(),
        content_type,
        metadata,
        segments: vec![written.segment()],
        sse,
        headers,
        upload_id: None,
        version: None,
        tags,
        lock: crate::lock::Lock::default(),
        acl: None,
        checksum: written.checksum.clone(),
        listed: None,
    }
}

/// The [`ContentHeaders`] that a PutObject, CopyObject or CreateMultipartUpload input gives.
macro_rules! content_headers {
    ($input:expr) => {
        crate::layout::ContentHeaders {
            cache_control: $input.cache_control.clone(),
            content_disposition: $input.content_disposition.clone(),
            content_encoding: super::stored_encoding($input.content_encoding.as_deref()),
            content_language: $input.content_language.clone(),
            expires: $input.expires.clone().map(super::unix_seconds),
        }
    };
}
use content_headers;

/// The longest life of a presigned URL (S3's: a week).
const PRESIGNED_SECONDS_MAX: i64 = 7 * 24 * 3600;

/// Refuses a SigV4 presigned URL whose `X-Amz-Expires` is not 0 to a week, which s3s lets
/// through (more than a week) or answers as a malformed request (a negative one): S3
/// refuses both as not authorized.
pub(crate) fn check_presigned_life(query: Option<&str>) -> S3Result<()> {
    let expires = query
        .unwrap_or("")
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == "X-Amz-Expires");
    match expires {
        Some((_, seconds)) => match seconds.parse::<i64>() {
            Ok(seconds) if (0..=PRESIGNED_SECONDS_MAX).contains(&seconds) => Ok(()),
            _ => Err(Refusal::PresignedLife(seconds.into()).into()),
        },
        None => Ok(()),
    }
}

/// `request`, with its body decoded if it is an anonymous request's unsigned aws-chunked
/// body (`crate::chunked`), which s3s passes on still framed: its Content-Length becomes
/// the data's, and its trailers reach the verbs as a request extension.
pub(crate) fn unchunked(mut request: s3s::HttpRequest) -> S3Result<s3s::HttpRequest> {
    let headers = request.headers();
    let unsigned = headers
        .get("x-amz-content-sha256")
        .is_some_and(|value| value == crate::chunked::UNSIGNED_TRAILER);
    let signed = headers.contains_key(hyper::header::AUTHORIZATION)
        || request.uri().query().is_some_and(|query| {
            query
                .split('&')
                .any(|pair| pair.starts_with("X-Amz-Signature=") || pair.starts_with("Signature="))
        });
    if !unsigned || signed {
        return Ok(request);
    }
    let declared = headers
        .get("x-amz-decoded-content-length")
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
        .ok_or(Refusal::DecodedLength)?;
    let body = std::mem::take(request.body_mut());
    let (body, trailers) = crate::chunked::Unchunked::new(body, declared);
    *request.body_mut() = s3s::Body::from(Box::pin(body) as s3s::stream::DynByteStream);
    request.extensions_mut().insert(trailers);
    let headers = request.headers_mut();
    headers.remove(hyper::header::TRANSFER_ENCODING);
    headers.insert(hyper::header::CONTENT_LENGTH, declared.into());
    headers.insert(
        "x-amz-content-sha256",
        hyper::header::HeaderValue::from_static("UNSIGNED-PAYLOAD"),
    );
    Ok(request)
}

/// The path s3s should check a SigV2 header signature against, when it is not the request's
/// own: a path-style request for a bucket (`/BUCKET`) is signed as `/BUCKET/`, the
/// canonical resource of a bucket, by botocore and the other SigV2 signers, where s3s takes
/// the path as it came.
pub(crate) fn signed_path(authorization: Option<&[u8]>, path: &str) -> Option<String> {
    let v2 = authorization.is_some_and(|value| value.starts_with(b"AWS "));
    let bucket = path.strip_prefix('/')?;
    (v2 && !bucket.is_empty() && !bucket.contains('/')).then(|| format!("{path}/"))
}

/// Dates a SigV4 request that is dated only by `Date` (SigV4 allows either header; botocore
/// signs with `Date` whenever a request carries one), which s3s cannot read: the date is
/// copied into `x-amz-date` in SigV4's form. That is safe because s3s builds the string to
/// sign from `x-amz-date` and checks the credential's date and the skew against it: the
/// copied value is the signer's own timestamp, so a `Date` changed in transit changes what
/// is checked and the signature fails, and a stale one is refused as skewed. (The header
/// itself is not in SignedHeaders: it was absent when signed.) Anything else (another
/// scheme, `x-amz-date` present, a date that does not parse) is left as it came, for s3s
/// to judge.
pub(crate) fn date_sigv4_by_date(headers: &mut hyper::HeaderMap) {
    let v4 = headers
        .get(hyper::header::AUTHORIZATION)
        .is_some_and(|value| value.as_bytes().starts_with(b"AWS4-HMAC-SHA256 "));
    if !v4 || headers.contains_key("x-amz-date") {
        return;
    }
    let Some(given) = headers
        .get(hyper::header::DATE)
        .and_then(|v| v.to_str().ok())
    else {
        return;
    };
    // Python's formatdate() and others name the zone -0000 or +0000; the HTTP date s3s
    // parses says GMT.
    let given = given.trim();
    let in_gmt = match given
        .strip_suffix(" -0000")
        .or_else(|| given.strip_suffix(" +0000"))
    {
        Some(rest) => format!("{rest} GMT"),
        None => given.to_owned(),
    };
    let Ok(date) = Timestamp::parse(s3s::dto::TimestampFormat::HttpDate, &in_gmt) else {
        return;
    };
    let date = time::OffsetDateTime::from(date);
    let amz_date = format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        date.year(),
        u8::from(date.month()),
        date.day(),
        date.hour(),
        date.minute(),
        date.second()
    );
    if let Ok(value) = hyper::header::HeaderValue::from_str(&amz_date) {
        headers.insert("x-amz-date", value);
    }
}

/// How far a SigV2 request's date may be from the gateway's clock (S3's 15 minutes).
const V2_SKEW_SECONDS_MAX: i64 = 15 * 60;

/// Checks the date of a request signed with SigV2 in its header, which s3s signs but never
/// dates, so that a captured request cannot be replayed later: `x-amz-date` if given, else
/// `Date`, must be an HTTP date (else AccessDenied) within 15 minutes of `now` (else
/// RequestTimeTooSkewed).
pub(crate) fn check_v2_date(headers: &hyper::HeaderMap, now: time::OffsetDateTime) -> S3Result<()> {
    let v2 = headers
        .get(hyper::header::AUTHORIZATION)
        .is_some_and(|value| value.as_bytes().starts_with(b"AWS "));
    if !v2 {
        return Ok(());
    }
    let given = headers
        .get("x-amz-date")
        .or_else(|| headers.get(hyper::header::DATE))
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .unwrap_or_default();
    let date = Timestamp::parse(s3s::dto::TimestampFormat::HttpDate, given.trim())
        .ok()
        .map(time::OffsetDateTime::from)
        .filter(|date| date.unix_timestamp() >= 0)
        .ok_or(Refusal::BadDate(given))?;
    let skew = (now - date).whole_seconds().abs();
    if skew > V2_SKEW_SECONDS_MAX {
        return Err(Refusal::Skewed(skew).into());
    }
    Ok(())
}

/// The Content-Encoding kept of a request's: without `aws-chunked`, which names how this
/// request's body was framed (SigV4 streaming), not the object.
fn stored_encoding(given: Option<&str>) -> Option<String> {
    let kept: Vec<&str> = given?
        .split(',')
        .map(str::trim)
        .filter(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

fn unix_seconds(time: Timestamp) -> i64 {
    time::OffsetDateTime::from(time).unix_timestamp()
}

fn from_unix_seconds(seconds: i64) -> Option<Timestamp> {
    time::OffsetDateTime::from_unix_timestamp(seconds)
        .ok()
        .map(Timestamp::from)
}

fn sorted_metadata(metadata: Option<Metadata>) -> Vec<(String, String)> {
    let mut metadata: Vec<(String, String)> = metadata.unwrap_or_default().into_iter().collect();
    metadata.sort();
    metadata
}

/// The request's Content-MD5, decoded, if it has one; one that is not a base64 MD5 (an
/// empty one included, which s3s reads as none) is refused.
fn content_md5(headers: &hyper::HeaderMap) -> S3Result<Option<[u8; 16]>> {
    let Some(value) = headers.get("content-md5") else {
        return Ok(None);
    };
    let md5 = base64::engine::general_purpose::STANDARD
        .decode(value.as_bytes())
        .ok()
        .and_then(|md5| <[u8; 16]>::try_from(md5).ok())
        .ok_or(Refusal::ContentMd5)?;
    Ok(Some(md5))
}

/// Writes a request body (and its Content-Length) as a new instance, checked against that,
/// `expected_md5` (its Content-MD5) and the `checksum` it asks for (with the trailers that
/// may carry its value); nothing of it stays if it fails.
async fn write_body(
    pool: &Pool,
    (body, content_length): (Option<StreamingBlob>, Option<i64>),
    expected_md5: Option<[u8; 16]>,
    checksum: Option<(&crate::checksum::Asked, Option<&Trailers>)>,
    sealing: Option<data::Sealing>,
) -> S3Result<data::Written> {
    if content_length.is_some_and(|len| len as u64 > PUT_BYTES_MAX) {
        return Err(Refusal::TooLarge(PUT_BYTES_MAX).into());
    }
    let algorithm = checksum.map(|(asked, _)| asked.algorithm);
    let written = match body {
        Some(body) => data::write(pool, body, sealing, algorithm).await,
        None => {
            let empty = futures::stream::empty::<Result<_, Error>>();
            data::write(pool, empty, sealing, algorithm).await
        }
    }?;
    let short = content_length.is_some_and(|len| len as u64 != written.size);
    let corrupt = expected_md5.is_some_and(|md5| md5 != written.md5);
    let checked = match (checksum, &written.checksum) {
        (Some((asked, trailers)), Some(computed)) => {
            checksum::check_given(asked, trailers, &computed.digest)
        }
        _ => Ok(()),
    };
    if short || corrupt || checked.is_err() {
        data::remove_segment(pool, &written.segment()).await;
        checked?;
        return Err(if corrupt {
            Refusal::BadDigest
        } else {
            Refusal::IncompleteBody("the body is not Content-Length bytes".into())
        }
        .into());
    }
    Ok(written)
}

/// Routes each S3 verb that the gateway serves to its handler, `module::verb(gateway, req)`;
/// s3s answers NotImplemented to the rest.
macro_rules! verbs {
    ($($module:ident::$verb:ident($input:ident) -> $output:ident;)*) => {
        #[async_trait::async_trait]
        impl S3 for Gateway {
            $(
                async fn $verb(&self, req: S3Request<$input>) -> S3Result<S3Response<$output>> {
                    $module::$verb(self, req).await
                }
            )*
        }
    };
}

verbs! {
    bucket::list_buckets(ListBucketsInput) -> ListBucketsOutput;
    bucket::create_bucket(CreateBucketInput) -> CreateBucketOutput;
    bucket::delete_bucket(DeleteBucketInput) -> DeleteBucketOutput;
    bucket::head_bucket(HeadBucketInput) -> HeadBucketOutput;
    bucket::get_bucket_location(GetBucketLocationInput) -> GetBucketLocationOutput;
    bucket::put_bucket_encryption(PutBucketEncryptionInput) -> PutBucketEncryptionOutput;
    bucket::get_bucket_encryption(GetBucketEncryptionInput) -> GetBucketEncryptionOutput;
    bucket::delete_bucket_encryption(DeleteBucketEncryptionInput) -> DeleteBucketEncryptionOutput;
    bucket::put_bucket_versioning(PutBucketVersioningInput) -> PutBucketVersioningOutput;
    bucket::get_bucket_versioning(GetBucketVersioningInput) -> GetBucketVersioningOutput;
    object::put_object(PutObjectInput) -> PutObjectOutput;
    object::get_object(GetObjectInput) -> GetObjectOutput;
    object::head_object(HeadObjectInput) -> HeadObjectOutput;
    attributes::get_object_attributes(GetObjectAttributesInput) -> GetObjectAttributesOutput;
    select::select_object_content(SelectObjectContentInput) -> SelectObjectContentOutput;
    torrent::get_object_torrent(GetObjectTorrentInput) -> GetObjectTorrentOutput;
    object::delete_object(DeleteObjectInput) -> DeleteObjectOutput;
    object::delete_objects(DeleteObjectsInput) -> DeleteObjectsOutput;
    copy::copy_object(CopyObjectInput) -> CopyObjectOutput;
    copy::upload_part_copy(UploadPartCopyInput) -> UploadPartCopyOutput;
    upload::create_multipart_upload(CreateMultipartUploadInput) -> CreateMultipartUploadOutput;
    upload::upload_part(UploadPartInput) -> UploadPartOutput;
    upload::complete_multipart_upload(CompleteMultipartUploadInput) -> CompleteMultipartUploadOutput;
    upload::abort_multipart_upload(AbortMultipartUploadInput) -> AbortMultipartUploadOutput;
    upload::list_parts(ListPartsInput) -> ListPartsOutput;
    upload::list_multipart_uploads(ListMultipartUploadsInput) -> ListMultipartUploadsOutput;
    list::list_objects(ListObjectsInput) -> ListObjectsOutput;
    list::list_objects_v2(ListObjectsV2Input) -> ListObjectsV2Output;
    list::list_object_versions(ListObjectVersionsInput) -> ListObjectVersionsOutput;
    tagging::put_object_tagging(PutObjectTaggingInput) -> PutObjectTaggingOutput;
    tagging::get_object_tagging(GetObjectTaggingInput) -> GetObjectTaggingOutput;
    tagging::delete_object_tagging(DeleteObjectTaggingInput) -> DeleteObjectTaggingOutput;
    tagging::put_bucket_tagging(PutBucketTaggingInput) -> PutBucketTaggingOutput;
    tagging::get_bucket_tagging(GetBucketTaggingInput) -> GetBucketTaggingOutput;
    tagging::delete_bucket_tagging(DeleteBucketTaggingInput) -> DeleteBucketTaggingOutput;
    lock::put_object_lock_configuration(PutObjectLockConfigurationInput) -> PutObjectLockConfigurationOutput;
    lock::get_object_lock_configuration(GetObjectLockConfigurationInput) -> GetObjectLockConfigurationOutput;
    lock::put_object_retention(PutObjectRetentionInput) -> PutObjectRetentionOutput;
    lock::get_object_retention(GetObjectRetentionInput) -> GetObjectRetentionOutput;
    lock::put_object_legal_hold(PutObjectLegalHoldInput) -> PutObjectLegalHoldOutput;
    lock::get_object_legal_hold(GetObjectLegalHoldInput) -> GetObjectLegalHoldOutput;
    lifecycle::put_bucket_lifecycle_configuration(PutBucketLifecycleConfigurationInput) -> PutBucketLifecycleConfigurationOutput;
    lifecycle::get_bucket_lifecycle_configuration(GetBucketLifecycleConfigurationInput) -> GetBucketLifecycleConfigurationOutput;
    lifecycle::delete_bucket_lifecycle(DeleteBucketLifecycleInput) -> DeleteBucketLifecycleOutput;
    acl::get_bucket_acl(GetBucketAclInput) -> GetBucketAclOutput;
    acl::put_bucket_acl(PutBucketAclInput) -> PutBucketAclOutput;
    acl::get_object_acl(GetObjectAclInput) -> GetObjectAclOutput;
    acl::put_object_acl(PutObjectAclInput) -> PutObjectAclOutput;
    acl::put_bucket_ownership_controls(PutBucketOwnershipControlsInput) -> PutBucketOwnershipControlsOutput;
    acl::get_bucket_ownership_controls(GetBucketOwnershipControlsInput) -> GetBucketOwnershipControlsOutput;
    acl::delete_bucket_ownership_controls(DeleteBucketOwnershipControlsInput) -> DeleteBucketOwnershipControlsOutput;
    cors::put_bucket_cors(PutBucketCorsInput) -> PutBucketCorsOutput;
    cors::get_bucket_cors(GetBucketCorsInput) -> GetBucketCorsOutput;
    cors::delete_bucket_cors(DeleteBucketCorsInput) -> DeleteBucketCorsOutput;
    logging::put_bucket_logging(PutBucketLoggingInput) -> PutBucketLoggingOutput;
    logging::get_bucket_logging(GetBucketLoggingInput) -> GetBucketLoggingOutput;
    bucket::put_bucket_request_payment(PutBucketRequestPaymentInput) -> PutBucketRequestPaymentOutput;
    bucket::get_bucket_request_payment(GetBucketRequestPaymentInput) -> GetBucketRequestPaymentOutput;
    policy::put_bucket_policy(PutBucketPolicyInput) -> PutBucketPolicyOutput;
    policy::get_bucket_policy(GetBucketPolicyInput) -> GetBucketPolicyOutput;
    policy::delete_bucket_policy(DeleteBucketPolicyInput) -> DeleteBucketPolicyOutput;
    policy::get_bucket_policy_status(GetBucketPolicyStatusInput) -> GetBucketPolicyStatusOutput;
    policy::put_public_access_block(PutPublicAccessBlockInput) -> PutPublicAccessBlockOutput;
    policy::get_public_access_block(GetPublicAccessBlockInput) -> GetPublicAccessBlockOutput;
    policy::delete_public_access_block(DeletePublicAccessBlockInput) -> DeletePublicAccessBlockOutput;
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::S3ErrorCode;

    #[test]
    fn sigv2_bucket_requests_are_checked_as_signed() {
        let v2 = Some(&b"AWS AKID:c2lnbmF0dXJl"[..]);
        let v4 = Some(&b"AWS4-HMAC-SHA256 Credential=AKID/20261127/us-east-1/s3/aws4_request"[..]);
        assert_eq!(signed_path(v2, "/photos"), Some("/photos/".into()));
        assert_eq!(signed_path(v2, "/photos/"), None);
        assert_eq!(signed_path(v2, "/photos/cat.jpg"), None);
        assert_eq!(signed_path(v2, "/"), None);
        assert_eq!(signed_path(v4, "/photos"), None);
        assert_eq!(signed_path(None, "/photos"), None);
    }

    #[test]
    fn a_sigv4_request_dated_by_date_alone_gets_its_x_amz_date() {
        let v4 = "AWS4-HMAC-SHA256 Credential=AKID/20261128/us-east-1/s3/aws4_request, \
                  SignedHeaders=date;host, Signature=00";
        let dated = |headers: &[(&str, &str)]| {
            let mut map = hyper::HeaderMap::new();
            for (name, value) in headers {
                let name = hyper::header::HeaderName::from_bytes(name.as_bytes()).expect("a name");
                map.insert(name, value.parse().expect("a value"));
            }
            date_sigv4_by_date(&mut map);
            map.get("x-amz-date")
                .map(|v| v.to_str().expect("ascii").to_owned())
        };
        for date in [
            "Sat, 28 Nov 2026 11:45:07 GMT",
            "Sat, 28 Nov 2026 11:45:07 -0000",
        ] {
            assert_eq!(
                dated(&[("authorization", v4), ("date", date)]).as_deref(),
                Some("20261128T114507Z"),
                "{date}"
            );
        }
        // Its own x-amz-date is kept; SigV2 and unsigned requests, and dates that do not
        // parse, are left alone.
        let own = [
            ("authorization", v4),
            ("date", "Sat, 28 Nov 2026 11:45:07 GMT"),
        ];
        let mut with_own = own.to_vec();
        with_own.push(("x-amz-date", "20261128T000000Z"));
        assert_eq!(dated(&with_own).as_deref(), Some("20261128T000000Z"));
        assert_eq!(dated(&[("authorization", "AWS AKID:c2ln"), own[1]]), None);
        assert_eq!(dated(&[own[1]]), None);
        assert_eq!(dated(&[("authorization", v4), ("date", "yesterday")]), None);
    }

    #[test]
    fn sigv2_requests_are_dated_within_15_minutes() {
        let now = time::OffsetDateTime::from_unix_timestamp(1_795_000_000).expect("a time");
        let request = |date: Option<(&str, &str)>| {
            let mut headers = hyper::HeaderMap::new();
            headers.insert("authorization", "AWS AKID:c2ln".parse().expect("a value"));
            if let Some((name, value)) = date {
                let name = hyper::header::HeaderName::from_bytes(name.as_bytes()).expect("a name");
                headers.insert(name, value.parse().expect("a value"));
            }
            headers
        };
        let code = |headers| check_v2_date(&headers, now).err().map(|e| e.code().clone());
        let http = |at: time::OffsetDateTime| {
            let mut text = Vec::new();
            Timestamp::from(at)
                .format(s3s::dto::TimestampFormat::HttpDate, &mut text)
                .expect("formats");
            String::from_utf8(text).expect("ascii")
        };
        let minute = time::Duration::minutes(1);
        assert_eq!(code(request(Some(("date", &http(now))))), None);
        assert_eq!(
            code(request(Some(("x-amz-date", &http(now - 14 * minute))))),
            None
        );
        assert_eq!(
            code(request(Some(("date", &http(now + 14 * minute))))),
            None
        );
        let skewed = Some(S3ErrorCode::RequestTimeTooSkewed);
        assert_eq!(
            code(request(Some(("date", &http(now - 16 * minute))))),
            skewed
        );
        assert_eq!(
            code(request(Some((
                "x-amz-date",
                "Tue, 07 Jul 2010 21:53:04 GMT"
            )))),
            skewed
        );
        assert_eq!(
            code(request(Some((
                "x-amz-date",
                "Tue, 07 Jul 9999 21:53:04 GMT"
            )))),
            skewed
        );
        let denied = Some(S3ErrorCode::AccessDenied);
        assert_eq!(code(request(Some(("x-amz-date", "Bad Date")))), denied);
        assert_eq!(code(request(Some(("x-amz-date", "")))), denied);
        assert_eq!(
            code(request(Some((
                "x-amz-date",
                "Tue, 07 Jul 1950 21:53:04 GMT"
            )))),
            denied
        );
        assert_eq!(code(request(None)), denied);
        // x-amz-date wins over Date, as in the signature.
        let mut both = request(Some(("date", &http(now))));
        both.insert("x-amz-date", "Bad Date".parse().expect("a value"));
        assert_eq!(code(both), denied);
        // Other signatures are not this check's.
        let mut v4 = hyper::HeaderMap::new();
        v4.insert(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=x".parse().expect("a value"),
        );
        assert_eq!(
            check_v2_date(&v4, now).err().map(|e| e.code().clone()),
            None
        );
    }

    #[test]
    fn presigned_urls_live_at_most_a_week() {
        let url = |expires: &str| {
            format!("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires={expires}&X-Amz-Signature=ab")
        };
        assert!(check_presigned_life(None).is_ok());
        assert!(check_presigned_life(Some("list-type=2")).is_ok());
        assert!(check_presigned_life(Some(&url("0"))).is_ok());
        assert!(check_presigned_life(Some(&url("604800"))).is_ok());
        for refused in ["604801", "-7", "", "1e3"] {
            let e = check_presigned_life(Some(&url(refused))).expect_err(refused);
            assert_eq!(e.code(), &s3s::S3ErrorCode::AccessDenied);
        }
    }

    #[test]
    fn the_stored_encoding_drops_the_request_framing() {
        assert_eq!(stored_encoding(Some("gzip")), Some("gzip".into()));
        assert_eq!(
            stored_encoding(Some("identity,aws-chunked")),
            Some("identity".into())
        );
        assert_eq!(stored_encoding(Some("aws-chunked")), None);
        assert_eq!(
            stored_encoding(Some("gzip, AWS-Chunked, br")),
            Some("gzip, br".into())
        );
        assert_eq!(stored_encoding(None), None);
    }
}
