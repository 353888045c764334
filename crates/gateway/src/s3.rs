//! The S3 operations, on the pool's buckets and objects. s3s has parsed the request and
//! checked its signature before any of these runs; each checks that the signed-in user owns
//! the bucket it touches.

use std::collections::HashMap;
use std::sync::Mutex;

use base64::Engine;
use client::Pool;
use s3s::auth::{S3Auth, SecretKey};
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, S3};

use crate::encryption::{self, CustomerKey};
use crate::kms::{Kms, MonitorKms};
use crate::layout::{self, BucketInfo, ObjectEntry, PartRecord, Segment, Sse, UploadRecord};
use crate::sse::KeyCache;
use crate::{buckets, data, multipart, users, Error};

/// The keys of one ListObjects page when the client asks for none in particular (S3's).
const MAX_KEYS_DEFAULT: i32 = 1000;
/// S3's limits on multipart uploads: part numbers, and the size of every part but the last.
const PART_NUMBER_MAX: i32 = 10_000;
const PART_BYTES_MIN: u64 = 5 << 20;
/// The most keys one DeleteObjects may name (S3's limit).
const DELETE_KEYS_MAX: usize = 1000;
/// The largest single PUT or part (S3's).
const PUT_BYTES_MAX: u64 = 5 << 30;

/// The gateway's S3 implementation on one pool.
#[derive(Clone)]
pub struct Gateway {
    pool: Pool,
    /// Access key to user name: a key never changes hands, so this needs no expiry (a
    /// removed user's key no longer signs anything: [`Gateway::secret`] looks it up anew).
    names: std::sync::Arc<Mutex<HashMap<String, String>>>,
    /// Where data keys come from.
    kms: std::sync::Arc<dyn Kms>,
    /// Unwrapped data keys of encrypted objects.
    cache: KeyCache,
    /// Content being streamed, and its removals waiting for that.
    readers: crate::readers::Readers,
}

/// How often the gateway asks the KMS which keys exist, to forget the data keys of removed
/// ones.
const KMS_SWEEP: std::time::Duration = std::time::Duration::from_secs(5);

impl Gateway {
    /// A gateway on `pool` with the monitors' KMS.
    pub async fn start(pool: Pool) -> Result<Gateway, Error> {
        let kms = MonitorKms {
            cluster: pool.cluster().clone(),
        };
        Gateway::with_kms(pool, std::sync::Arc::new(kms)).await
    }

    /// A gateway on `pool` with `kms`: makes sure the KMS key of SSE-S3 exists, and starts
    /// forgetting the cached data keys of KMS keys that are removed.
    pub async fn with_kms(pool: Pool, kms: std::sync::Arc<dyn Kms>) -> Result<Gateway, Error> {
        kms.ensure(crate::sse::MANAGED_KEY)
            .await
            .map_err(|e| Error::Internal(e.to_string()))?;
        let gateway = Gateway {
            readers: crate::readers::Readers::new(pool.clone()),
            pool,
            names: Default::default(),
            kms: kms.clone(),
            cache: KeyCache::default(),
        };
        let cache = gateway.cache.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(KMS_SWEEP).await;
                match kms.keys().await {
                    Ok(names) => cache.keep_only(&names),
                    Err(e) => tracing::warn!("listing KMS keys: {e}"),
                }
            }
        });
        Ok(gateway)
    }

    /// The service s3s serves: this gateway, with its users' keys checking signatures.
    pub fn service(self) -> s3s::service::S3Service {
        let mut builder = s3s::service::S3ServiceBuilder::new(self.clone());
        builder.set_auth(self);
        builder.set_access(crate::metrics::NoteVerb);
        builder.build()
    }

    /// The name of the user who signed `req` (s3s refuses unsigned requests before this).
    async fn user<T>(&self, req: &S3Request<T>) -> S3Result<String> {
        let Some(credentials) = &req.credentials else {
            return Err(s3_error!(AccessDenied, "sign the request"));
        };
        let key = &credentials.access_key;
        if let Some(name) = self.names_lock().get(key) {
            return Ok(name.clone());
        }
        match users::by_access_key(&self.pool, key).await.map_err(fail)? {
            Some(user) => {
                self.names_lock().insert(key.clone(), user.name.clone());
                Ok(user.name)
            }
            None => Err(s3_error!(InvalidAccessKeyId)),
        }
    }

    fn names_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The bucket, if `user` owns it.
    async fn owned(&self, user: &str, bucket: &str) -> S3Result<BucketInfo> {
        match buckets::info(&self.pool, bucket).await {
            Ok(info) if info.owner == user => Ok(info),
            Ok(_) => Err(s3_error!(
                AccessDenied,
                "bucket {bucket} belongs to another user"
            )),
            Err(Error::NotFound(_)) => Err(no_bucket(bucket)),
            Err(e) => Err(fail(e)),
        }
    }

    async fn entry(&self, bucket: &str, key: &str) -> S3Result<ObjectEntry> {
        match buckets::entry(&self.pool, bucket, key)
            .await
            .map_err(fail)?
        {
            Some(entry) => Ok(entry),
            None => Err(s3_error!(NoSuchKey, "no object {key} in bucket {bucket}")),
        }
    }

    /// Frees the content of `old` that `entry`, which replaced it, does not use (a completion
    /// committed twice names the same instances).
    async fn free_replaced(&self, old: Option<ObjectEntry>, entry: &ObjectEntry) {
        for segment in old.iter().flat_map(|old| &old.segments) {
            if !entry
                .segments
                .iter()
                .any(|s| s.instance == segment.instance)
            {
                self.readers.remove_segment(segment).await;
            }
        }
    }

    /// Commits a written upload as `key` of `bucket`, and frees the content it replaces. If
    /// the commit fails, the upload's own stripes are freed.
    async fn commit(&self, bucket: &str, key: &str, entry: &ObjectEntry) -> S3Result<()> {
        match buckets::commit(&self.pool, bucket, key, entry).await {
            Ok(old) => {
                self.free_replaced(old, entry).await;
                Ok(())
            }
            Err(e) => {
                data::remove(&self.pool, entry).await;
                Err(match e {
                    Error::NotFound(_) => no_bucket(bucket),
                    e => fail(e),
                })
            }
        }
    }

    /// What a write asks of encryption: its SSE-C key (from the three customer headers) and
    /// the encryption the new object gets (its headers', else the bucket's default).
    async fn write_encryption(
        &self,
        bucket: &str,
        asked: &Option<ServerSideEncryption>,
        kms_key: &Option<String>,
        [algorithm, key, key_md5]: [&Option<String>; 3],
    ) -> S3Result<(Option<CustomerKey>, Option<Sse>)> {
        let customer = encryption::customer_key(algorithm, key, key_md5)?;
        let sse =
            encryption::for_write(&self.pool, bucket, asked, kms_key, customer.as_ref()).await?;
        Ok((customer, sse))
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

    async fn keys(
        &self,
        entry: &ObjectEntry,
        customer: Option<&CustomerKey>,
    ) -> S3Result<Vec<Option<std::sync::Arc<keys::SecretKey<32>>>>> {
        encryption::segment_keys(self.kms.as_ref(), &self.cache, entry, customer).await
    }

    /// The content `range` of a copy's source, opened with the copy-source SSE-C key if it
    /// has one.
    async fn source_reader(
        &self,
        source: &ObjectEntry,
        range: std::ops::Range<u64>,
        algorithm: &Option<String>,
        key: &Option<String>,
        key_md5: &Option<String>,
    ) -> S3Result<data::Reader> {
        let hold = self.readers.hold(source);
        let customer = encryption::customer_key(algorithm, key, key_md5)?;
        encryption::check_customer(&source.sse, customer.as_ref())?;
        let keys = self.keys(source, customer.as_ref()).await?;
        Ok(data::read(&self.pool, source, range, keys, hold))
    }

    /// The record of an upload in progress, or `NoSuchUpload`.
    async fn upload(&self, bucket: &str, key: &str, id: &str) -> S3Result<UploadRecord> {
        match multipart::record(&self.pool, bucket, key, id).await {
            Ok(Some(record)) => Ok(record),
            Ok(None) => Err(s3_error!(
                NoSuchUpload,
                "no upload {id} of {key} in progress in bucket {bucket}"
            )),
            Err(e) => Err(fail(e)),
        }
    }

    fn upload_error(&self, e: Error, id: &str) -> S3Error {
        match e {
            Error::NotFound(_) => s3_error!(NoSuchUpload, "no upload {id} in progress"),
            e => fail(e),
        }
    }

    /// Records `written` as part `number` of upload `id`, and frees the part it replaces;
    /// if the upload is gone, frees `written` instead.
    async fn put_part(
        &self,
        id: &str,
        number: u32,
        written: &data::Written,
        sse: &Option<Sse>,
    ) -> S3Result<PartRecord> {
        let part = PartRecord {
            segment: written.segment(),
            md5: encryption::etag_bytes(sse, written.md5, &written.instance),
            mtime_ns: layout::now_ns(),
        };
        match multipart::put_part(&self.pool, id, number, &part).await {
            Ok(old) => {
                if let Some(old) = old {
                    data::remove_segment(&self.pool, &old.segment).await;
                }
                Ok(part)
            }
            Err(e) => {
                data::remove_segment(&self.pool, &part.segment).await;
                Err(self.upload_error(e, id))
            }
        }
    }

    async fn delete_key(&self, bucket: &str, key: &str) -> Result<(), Error> {
        if let Some(old) = buckets::uncommit(&self.pool, bucket, key).await? {
            self.readers.remove(&old).await;
        }
        Ok(())
    }

    async fn list(
        &self,
        bucket: &str,
        prefix: Option<&str>,
        delimiter: Option<&str>,
        after: Option<&str>,
        max_keys: Option<i32>,
    ) -> S3Result<(buckets::Listing, i32)> {
        let max = max_keys
            .unwrap_or(MAX_KEYS_DEFAULT)
            .clamp(0, MAX_KEYS_DEFAULT);
        let listing = buckets::listing(
            &self.pool,
            bucket,
            prefix.unwrap_or(""),
            delimiter,
            after,
            max as usize,
        )
        .await
        .map_err(fail)?;
        Ok((listing, max))
    }
}

#[async_trait::async_trait]
impl S3Auth for Gateway {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match users::by_access_key(&self.pool, access_key).await {
            Ok(Some(user)) => Ok(SecretKey::from(user.secret_key)),
            Ok(None) => Err(s3_error!(InvalidAccessKeyId)),
            Err(e) => Err(fail(e)),
        }
    }
}

fn no_bucket(bucket: &str) -> S3Error {
    S3Error::with_message(
        S3ErrorCode::NoSuchBucket,
        format!("bucket {bucket} does not exist"),
    )
}

/// The S3 error for a failure of the gateway or the cluster (clients retry 503s).
fn fail(e: Error) -> S3Error {
    match e {
        Error::Cluster(client::Error::Timeout { .. }) | Error::Cluster(client::Error::Mon(_)) => {
            tracing::warn!("{e}");
            S3Error::with_message(S3ErrorCode::ServiceUnavailable, e.to_string())
        }
        Error::Invalid(message) => S3Error::with_message(S3ErrorCode::InvalidArgument, message),
        Error::Cluster(client::Error::NoSpace(why)) => {
            // As Ceph's gateway answers ENOSPC: 507 InsufficientCapacity.
            let mut full = S3Error::with_message(
                S3ErrorCode::Custom("InsufficientCapacity".into()),
                format!("no space: {why}"),
            );
            full.set_status_code(hyper::StatusCode::INSUFFICIENT_STORAGE);
            full
        }
        Error::Busy(_) => S3Error::with_message(S3ErrorCode::OperationAborted, e.to_string()),
        Error::Cluster(client::Error::Integrity(_)) => {
            // Every copy is damaged: S3 has no code for it, so a 500 whose message says so
            // (never the bytes).
            tracing::error!("{e}");
            S3Error::with_message(S3ErrorCode::InternalError, e.to_string())
        }
        e => {
            tracing::warn!("{e}");
            S3Error::with_message(S3ErrorCode::InternalError, e.to_string())
        }
    }
}

fn etag(entry: &ObjectEntry) -> ETag {
    ETag::Strong(entry.etag.clone())
}

fn timestamp(ns: u64) -> Timestamp {
    Timestamp::from(std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns))
}

fn modified(entry: &ObjectEntry) -> Timestamp {
    timestamp(entry.mtime_ns)
}

/// The conditions of a GET or HEAD (`If-Match`, `If-None-Match`, `If-Modified-Since`,
/// `If-Unmodified-Since`), checked in RFC 9110's order, as S3 does: a failed `If-Match` or
/// `If-Unmodified-Since` is PreconditionFailed (412), a failed `If-None-Match` or
/// `If-Modified-Since` is NotModified (304). A date condition is ignored when its ETag
/// counterpart is given; dates compare to the second, as HTTP dates carry.
struct Conditions<'a> {
    if_match: Option<&'a ETagCondition>,
    if_none_match: Option<&'a ETagCondition>,
    if_modified_since: Option<&'a Timestamp>,
    if_unmodified_since: Option<&'a Timestamp>,
}

/// The [`Conditions`] of a GetObject or HeadObject input.
macro_rules! conditions {
    ($input:expr) => {
        Conditions {
            if_match: $input.if_match.as_ref(),
            if_none_match: $input.if_none_match.as_ref(),
            if_modified_since: $input.if_modified_since.as_ref(),
            if_unmodified_since: $input.if_unmodified_since.as_ref(),
        }
    };
}

impl Conditions<'_> {
    fn check(&self, entry: &ObjectEntry) -> S3Result<()> {
        let matches = |condition: &ETagCondition| match condition {
            ETagCondition::Any => true,
            ETagCondition::ETag(tag) => tag.value() == entry.etag,
        };
        let modified = timestamp(entry.mtime_ns / 1_000_000_000 * 1_000_000_000);
        match self.if_match {
            Some(condition) if !matches(condition) => {
                return Err(s3_error!(
                    PreconditionFailed,
                    "the ETag does not match If-Match"
                ))
            }
            Some(_) => {}
            None => {
                if self
                    .if_unmodified_since
                    .is_some_and(|since| modified > *since)
                {
                    return Err(s3_error!(
                        PreconditionFailed,
                        "the object was modified after If-Unmodified-Since"
                    ));
                }
            }
        }
        match self.if_none_match {
            Some(condition) if matches(condition) => {
                Err(s3_error!(NotModified, "the ETag matches If-None-Match"))
            }
            Some(_) => Ok(()),
            None if self
                .if_modified_since
                .is_some_and(|since| modified <= *since) =>
            {
                Err(s3_error!(
                    NotModified,
                    "the object was not modified after If-Modified-Since"
                ))
            }
            None => Ok(()),
        }
    }
}

fn metadata(entry: &ObjectEntry) -> Option<Metadata> {
    (!entry.metadata.is_empty()).then(|| entry.metadata.iter().cloned().collect())
}

fn check_key(key: &str) -> S3Result<()> {
    if key.is_empty() || key.len() > layout::KEY_BYTES_MAX {
        return Err(s3_error!(
            KeyTooLongError,
            "object keys are 1 to {} bytes",
            layout::KEY_BYTES_MAX
        ));
    }
    Ok(())
}

/// A new index entry for content just written, encrypted as `sse`.
fn new_entry(
    written: &data::Written,
    content_type: Option<String>,
    metadata: Vec<(String, String)>,
    sse: Option<Sse>,
) -> ObjectEntry {
    let etag = encryption::etag_bytes(&sse, written.md5, &written.instance);
    ObjectEntry {
        size: written.size,
        etag: layout::hex(&etag),
        mtime_ns: layout::now_ns(),
        content_type,
        metadata,
        segments: vec![written.segment()],
        sse,
    }
}

/// The content type S3 reports for an object stored without one.
const CONTENT_TYPE_DEFAULT: &str = "binary/octet-stream";

fn content_type(entry: &ObjectEntry) -> Option<String> {
    Some(
        entry
            .content_type
            .clone()
            .unwrap_or_else(|| CONTENT_TYPE_DEFAULT.into()),
    )
}

fn sorted_metadata(metadata: Option<Metadata>) -> Vec<(String, String)> {
    let mut metadata: Vec<(String, String)> = metadata.unwrap_or_default().into_iter().collect();
    metadata.sort();
    metadata
}

/// The decoded Content-MD5 header, if there is one.
fn content_md5(header: &Option<String>) -> S3Result<Option<Vec<u8>>> {
    match header {
        Some(text) => Ok(Some(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .ok()
                .filter(|md5| md5.len() == 16)
                .ok_or_else(|| s3_error!(InvalidDigest, "Content-MD5 is not a base64 MD5"))?,
        )),
        None => Ok(None),
    }
}

/// Writes a request body as a new instance, checked against its Content-Length and
/// Content-MD5; nothing of it stays if it fails.
async fn write_body(
    pool: &Pool,
    body: Option<StreamingBlob>,
    content_length: Option<i64>,
    content_md5: &Option<String>,
    sealing: Option<data::Sealing>,
) -> S3Result<data::Written> {
    let expected_md5 = self::content_md5(content_md5)?;
    if content_length.is_some_and(|len| len as u64 > PUT_BYTES_MAX) {
        return Err(s3_error!(
            EntityTooLarge,
            "a PUT or part is at most {PUT_BYTES_MAX} bytes"
        ));
    }
    let written = match body {
        Some(body) => data::write(pool, body, sealing).await,
        None => data::write(pool, futures::stream::empty::<Result<_, Error>>(), sealing).await,
    }
    .map_err(|e| match e {
        Error::Body(message) => S3Error::with_message(S3ErrorCode::IncompleteBody, message),
        e => fail(e),
    })?;
    let short = content_length.is_some_and(|len| len as u64 != written.size);
    let corrupt = expected_md5.is_some_and(|md5| md5 != written.md5);
    if short || corrupt {
        data::remove_segment(pool, &written.segment()).await;
        return Err(if corrupt {
            s3_error!(BadDigest, "the content does not match its Content-MD5")
        } else {
            s3_error!(IncompleteBody, "the body is not Content-Length bytes")
        });
    }
    Ok(written)
}

/// The stored parts a completion names, in order, after S3's checks: ascending numbers,
/// uploaded parts with matching ETags, every part but the last at least 5 MiB.
fn chosen_parts<'a>(
    asked: &[CompletedPart],
    stored: &'a HashMap<u32, PartRecord>,
) -> S3Result<Vec<&'a PartRecord>> {
    let mut chosen = Vec::with_capacity(asked.len());
    let mut previous = 0;
    for (i, part) in asked.iter().enumerate() {
        let number = part_number(part.part_number.unwrap_or(0))?;
        if number <= previous {
            return Err(s3_error!(
                InvalidPartOrder,
                "parts must be listed in ascending order"
            ));
        }
        previous = number;
        let Some(stored) = stored.get(&number) else {
            return Err(s3_error!(InvalidPart, "part {number} was not uploaded"));
        };
        let md5_hex = layout::hex(&stored.md5);
        if part.e_tag.as_ref().is_some_and(|e| e.value() != md5_hex) {
            return Err(s3_error!(
                InvalidPart,
                "part {number}'s ETag is \"{md5_hex}\", not the one given"
            ));
        }
        if i + 1 < asked.len() && stored.segment.size < PART_BYTES_MIN {
            return Err(s3_error!(
                EntityTooSmall,
                "part {number} is {} bytes; every part but the last needs {PART_BYTES_MIN}",
                stored.segment.size
            ));
        }
        chosen.push(stored);
    }
    Ok(chosen)
}

/// The ETag of a completed multipart upload: the MD5 of its parts' MD5s, and their count.
fn multipart_etag(md5s: &[[u8; 16]]) -> String {
    use md5::Digest;
    let digest = md5::Md5::digest(md5s.concat());
    format!("{}-{}", layout::hex(&digest), md5s.len())
}

/// The parts of a multipart object (its ETag ends in `-COUNT`); `None` for a single PUT.
fn parts_count(entry: &ObjectEntry) -> Option<i32> {
    let (_, count) = entry.etag.rsplit_once('-')?;
    count.parse().ok()
}

/// What GET and HEAD return of `entry`: the whole object, a `Range` of it, or one part
/// (`partNumber`, as S3: part 1 of a single PUT is all of it); and the Content-Range that
/// goes with a part of it.
fn span(
    entry: &ObjectEntry,
    range: Option<&Range>,
    part: Option<i32>,
) -> S3Result<(std::ops::Range<u64>, Option<String>)> {
    let span = match (range, part) {
        (Some(_), Some(_)) => {
            return Err(s3_error!(
                InvalidRequest,
                "give a Range or a partNumber, not both"
            ))
        }
        (Some(range), None) => range.check(entry.size)?,
        (None, Some(number)) => {
            let number = part_number(number)? as usize;
            match parts_count(entry) {
                Some(_) if number <= entry.segments.len() => {
                    let start: u64 = entry.segments[..number - 1].iter().map(|s| s.size).sum();
                    start..start + entry.segments[number - 1].size
                }
                None if number == 1 => 0..entry.size,
                _ => return Err(s3_error!(InvalidPart, "the object has no part {number}")),
            }
        }
        (None, None) => return Ok((0..entry.size, None)),
    };
    let text = (span.end > span.start)
        .then(|| format!("bytes {}-{}/{}", span.start, span.end - 1, entry.size));
    Ok((span, text))
}

fn part_number(number: i32) -> S3Result<u32> {
    if (1..=PART_NUMBER_MAX).contains(&number) {
        Ok(number as u32)
    } else {
        Err(s3_error!(
            InvalidArgument,
            "part numbers are 1 to {PART_NUMBER_MAX}"
        ))
    }
}

/// The byte range of an UploadPartCopy source (`bytes=FIRST-LAST`), within `size`.
fn copy_range(text: Option<&str>, size: u64) -> S3Result<std::ops::Range<u64>> {
    let Some(text) = text else {
        return Ok(0..size);
    };
    let parsed = text.strip_prefix("bytes=").and_then(|span| {
        let (first, last) = span.split_once('-')?;
        Some((first.parse::<u64>().ok()?, last.parse::<u64>().ok()?))
    });
    match parsed {
        Some((first, last)) if first <= last && last < size => Ok(first..last + 1),
        _ => Err(s3_error!(
            InvalidRange,
            "x-amz-copy-source-range {text} is not within the {size} bytes of the source"
        )),
    }
}

/// Percent-encodes `text` as S3 does for `encoding-type=url` (all but unreserved characters
/// and '/').
fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn encoder(encoding: &Option<EncodingType>) -> impl Fn(&str) -> String {
    let url = encoding
        .as_ref()
        .is_some_and(|e| e.as_str() == EncodingType::URL);
    move |text: &str| {
        if url {
            url_encode(text)
        } else {
            text.to_string()
        }
    }
}

fn contents(listing: &buckets::Listing, encode: &impl Fn(&str) -> String) -> ObjectList {
    listing
        .objects
        .iter()
        .map(|(key, entry)| Object {
            key: Some(encode(key)),
            size: Some(entry.size as i64),
            e_tag: Some(etag(entry)),
            last_modified: Some(modified(entry)),
            storage_class: Some(ObjectStorageClass::from_static(
                ObjectStorageClass::STANDARD,
            )),
            ..Default::default()
        })
        .collect()
}

fn common_prefixes(
    listing: &buckets::Listing,
    encode: &impl Fn(&str) -> String,
) -> Option<CommonPrefixList> {
    (!listing.prefixes.is_empty()).then(|| {
        listing
            .prefixes
            .iter()
            .map(|p| CommonPrefix {
                prefix: Some(encode(p)),
            })
            .collect()
    })
}

fn unhex(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let user = self.user(&req).await?;
        let owned: Buckets = buckets::list(&self.pool)
            .await
            .map_err(fail)?
            .into_iter()
            .filter(|(_, info)| info.owner == user)
            .map(|(name, info)| Bucket {
                name: Some(name),
                creation_date: Some(timestamp(info.created_ns)),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(owned),
            owner: Some(Owner {
                display_name: Some(user.clone()),
                id: Some(user),
            }),
            ..Default::default()
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let user = self.user(&req).await?;
        let bucket = &req.input.bucket;
        match buckets::create(&self.pool, bucket, &user).await {
            Ok(()) => Ok(S3Response::new(CreateBucketOutput {
                location: Some(format!("/{bucket}")),
            })),
            Err(Error::Exists(owner)) if owner == user => Err(s3_error!(
                BucketAlreadyOwnedByYou,
                "you already own bucket {bucket}"
            )),
            Err(Error::Exists(_)) => Err(s3_error!(
                BucketAlreadyExists,
                "bucket {bucket} belongs to another user"
            )),
            Err(e) => Err(fail(e)),
        }
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let user = self.user(&req).await?;
        let bucket = &req.input.bucket;
        self.owned(&user, bucket).await?;
        match buckets::remove(&self.pool, bucket).await {
            Ok(()) => Ok(S3Response::new(DeleteBucketOutput::default())),
            Err(Error::NotEmpty(_)) => Err(s3_error!(
                BucketNotEmpty,
                "bucket {bucket} holds objects; delete them first"
            )),
            Err(e) => Err(fail(e)),
        }
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let user = self.user(&req).await?;
        self.owned(&user, &req.input.bucket).await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let user = self.user(&req).await?;
        self.owned(&user, &req.input.bucket).await?;
        // No constraint means us-east-1, the one region a Coffer cluster answers as.
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn put_bucket_encryption(
        &self,
        req: S3Request<PutBucketEncryptionInput>,
    ) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        self.owned(&user, &input.bucket).await?;
        let rules = input.server_side_encryption_configuration.rules;
        let default = match rules.as_slice() {
            [rule] => rule
                .apply_server_side_encryption_by_default
                .as_ref()
                .ok_or_else(|| s3_error!(MalformedXML, "the rule has no default encryption"))?,
            _ => return Err(s3_error!(MalformedXML, "give exactly one rule")),
        };
        let sse = encryption::requested(&default.sse_algorithm, &default.kms_master_key_id)?;
        buckets::set_encryption(&self.pool, &input.bucket, Some(&sse))
            .await
            .map_err(fail)?;
        Ok(S3Response::new(PutBucketEncryptionOutput::default()))
    }

    async fn get_bucket_encryption(
        &self,
        req: S3Request<GetBucketEncryptionInput>,
    ) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
        let user = self.user(&req).await?;
        let bucket = &req.input.bucket;
        self.owned(&user, bucket).await?;
        let Some(sse) = buckets::encryption(&self.pool, bucket)
            .await
            .map_err(fail)?
        else {
            return Err(s3_error!(
                ServerSideEncryptionConfigurationNotFoundError,
                "bucket {bucket} has no default encryption"
            ));
        };
        let described = encryption::describe(&Some(sse), None);
        let rule = ServerSideEncryptionRule {
            apply_server_side_encryption_by_default: described.sse.map(|algorithm| {
                ServerSideEncryptionByDefault {
                    sse_algorithm: algorithm,
                    kms_master_key_id: described.kms_key,
                }
            }),
            ..Default::default()
        };
        Ok(S3Response::new(GetBucketEncryptionOutput {
            server_side_encryption_configuration: Some(ServerSideEncryptionConfiguration {
                rules: vec![rule],
            }),
        }))
    }

    async fn delete_bucket_encryption(
        &self,
        req: S3Request<DeleteBucketEncryptionInput>,
    ) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
        let user = self.user(&req).await?;
        let bucket = &req.input.bucket;
        self.owned(&user, bucket).await?;
        buckets::set_encryption(&self.pool, bucket, None)
            .await
            .map_err(fail)?;
        Ok(S3Response::new(DeleteBucketEncryptionOutput::default()))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        check_key(&input.key)?;
        self.owned(&user, &input.bucket).await?;
        let (customer, sse) = self
            .write_encryption(
                &input.bucket,
                &input.server_side_encryption,
                &input.ssekms_key_id,
                [
                    &input.sse_customer_algorithm,
                    &input.sse_customer_key,
                    &input.sse_customer_key_md5,
                ],
            )
            .await?;
        let sealing = self.sealing(&sse, customer.as_ref()).await?;
        let written = write_body(
            &self.pool,
            input.body,
            input.content_length,
            &input.content_md5,
            sealing,
        )
        .await?;
        let entry = new_entry(
            &written,
            input.content_type,
            sorted_metadata(input.metadata),
            sse,
        );
        self.commit(&input.bucket, &input.key, &entry).await?;
        let described = encryption::describe(&entry.sse, customer.as_ref());
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(etag(&entry)),
            server_side_encryption: described.sse,
            ssekms_key_id: described.kms_key,
            sse_customer_algorithm: described.customer_algorithm,
            sse_customer_key_md5: described.customer_key_md5,
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        self.owned(&user, &input.bucket).await?;
        let entry = self.entry(&input.bucket, &input.key).await?;
        // At once: the data key may take a round trip to the KMS.
        let hold = self.readers.hold(&entry);
        conditions!(input).check(&entry)?;
        let customer = encryption::customer_key(
            &input.sse_customer_algorithm,
            &input.sse_customer_key,
            &input.sse_customer_key_md5,
        )?;
        encryption::check_customer(&entry.sse, customer.as_ref())?;
        let keys = self.keys(&entry, customer.as_ref()).await?;
        let (range, content_range) = span(&entry, input.range.as_ref(), input.part_number)?;
        let body = data::read(&self.pool, &entry, range.clone(), keys, hold);
        let described = encryption::describe(&entry.sse, customer.as_ref());
        Ok(S3Response::new(GetObjectOutput {
            body: Some(StreamingBlob::wrap(body)),
            content_length: Some((range.end - range.start) as i64),
            content_range,
            parts_count: input.part_number.and(parts_count(&entry)),
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag(&entry)),
            last_modified: Some(modified(&entry)),
            content_type: content_type(&entry),
            metadata: metadata(&entry),
            server_side_encryption: described.sse,
            ssekms_key_id: described.kms_key,
            sse_customer_algorithm: described.customer_algorithm,
            sse_customer_key_md5: described.customer_key_md5,
            ..Default::default()
        }))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        self.owned(&user, &input.bucket).await?;
        let entry = self.entry(&input.bucket, &input.key).await?;
        conditions!(input).check(&entry)?;
        let customer = encryption::customer_key(
            &input.sse_customer_algorithm,
            &input.sse_customer_key,
            &input.sse_customer_key_md5,
        )?;
        encryption::check_customer(&entry.sse, customer.as_ref())?;
        let described = encryption::describe(&entry.sse, customer.as_ref());
        let (range, content_range) = span(&entry, input.range.as_ref(), input.part_number)?;
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some((range.end - range.start) as i64),
            content_range,
            parts_count: input.part_number.and(parts_count(&entry)),
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag(&entry)),
            last_modified: Some(modified(&entry)),
            content_type: content_type(&entry),
            metadata: metadata(&entry),
            server_side_encryption: described.sse,
            ssekms_key_id: described.kms_key,
            sse_customer_algorithm: described.customer_algorithm,
            sse_customer_key_md5: described.customer_key_md5,
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        self.owned(&user, &input.bucket).await?;
        self.delete_key(&input.bucket, &input.key)
            .await
            .map_err(fail)?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        self.owned(&user, &input.bucket).await?;
        if input.delete.objects.len() > DELETE_KEYS_MAX {
            return Err(s3_error!(
                MalformedXML,
                "DeleteObjects takes at most {DELETE_KEYS_MAX} keys"
            ));
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for object in input.delete.objects {
            match self.delete_key(&input.bucket, &object.key).await {
                Ok(()) if quiet => {}
                Ok(()) => deleted.push(DeletedObject {
                    key: Some(object.key),
                    ..Default::default()
                }),
                Err(e) => errors.push(s3s::dto::Error {
                    code: Some("InternalError".into()),
                    message: Some(e.to_string()),
                    key: Some(object.key),
                    ..Default::default()
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        check_key(&input.key)?;
        let CopySource::Bucket {
            bucket: source_bucket,
            key: source_key,
            ..
        } = &input.copy_source
        else {
            return Err(s3_error!(NotImplemented, "copy from an access point"));
        };
        self.owned(&user, source_bucket).await?;
        self.owned(&user, &input.bucket).await?;
        let source = self.entry(source_bucket, source_key).await?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        let customer = encryption::customer_key(
            &input.sse_customer_algorithm,
            &input.sse_customer_key,
            &input.sse_customer_key_md5,
        )?;
        let changes_encryption = customer.is_some() || input.server_side_encryption.is_some();
        if !replace
            && !changes_encryption
            && **source_bucket == *input.bucket
            && **source_key == *input.key
        {
            return Err(s3_error!(
                InvalidRequest,
                "copying an object onto itself needs the metadata directive REPLACE"
            ));
        }
        let reader = self
            .source_reader(
                &source,
                0..source.size,
                &input.copy_source_sse_customer_algorithm,
                &input.copy_source_sse_customer_key,
                &input.copy_source_sse_customer_key_md5,
            )
            .await?;
        let sse = encryption::for_write(
            &self.pool,
            &input.bucket,
            &input.server_side_encryption,
            &input.ssekms_key_id,
            customer.as_ref(),
        )
        .await?;
        let sealing = self.sealing(&sse, customer.as_ref()).await?;
        let written = data::write(&self.pool, reader, sealing)
            .await
            .map_err(fail)?;
        let (content_type, metadata) = if replace {
            (input.content_type, sorted_metadata(input.metadata))
        } else {
            (source.content_type.clone(), source.metadata.clone())
        };
        let entry = new_entry(&written, content_type, metadata, sse);
        self.commit(&input.bucket, &input.key, &entry).await?;
        let described = encryption::describe(&entry.sse, customer.as_ref());
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(etag(&entry)),
                last_modified: Some(modified(&entry)),
                ..Default::default()
            }),
            server_side_encryption: described.sse,
            ssekms_key_id: described.kms_key,
            sse_customer_algorithm: described.customer_algorithm,
            sse_customer_key_md5: described.customer_key_md5,
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        check_key(&input.key)?;
        self.owned(&user, &input.bucket).await?;
        let (customer, sse) = self
            .write_encryption(
                &input.bucket,
                &input.server_side_encryption,
                &input.ssekms_key_id,
                [
                    &input.sse_customer_algorithm,
                    &input.sse_customer_key,
                    &input.sse_customer_key_md5,
                ],
            )
            .await?;
        if let Some(Sse::Kms { key }) = &sse {
            encryption::check_kms_key(self.kms.as_ref(), key).await?;
        }
        let described = encryption::describe(&sse, customer.as_ref());
        let record = UploadRecord {
            initiator: user,
            initiated_ns: layout::now_ns(),
            content_type: input.content_type,
            metadata: sorted_metadata(input.metadata),
            sse,
        };
        let id = multipart::create(&self.pool, &input.bucket, &input.key, &record)
            .await
            .map_err(|e| match e {
                Error::NotFound(_) => no_bucket(&input.bucket),
                e => fail(e),
            })?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            server_side_encryption: described.sse,
            ssekms_key_id: described.kms_key,
            sse_customer_algorithm: described.customer_algorithm,
            sse_customer_key_md5: described.customer_key_md5,
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        let number = part_number(input.part_number)?;
        self.owned(&user, &input.bucket).await?;
        let record = self
            .upload(&input.bucket, &input.key, &input.upload_id)
            .await?;
        let customer = encryption::customer_key(
            &input.sse_customer_algorithm,
            &input.sse_customer_key,
            &input.sse_customer_key_md5,
        )?;
        encryption::check_customer(&record.sse, customer.as_ref())?;
        let sealing = self.sealing(&record.sse, customer.as_ref()).await?;
        let written = write_body(
            &self.pool,
            input.body,
            input.content_length,
            &input.content_md5,
            sealing,
        )
        .await?;
        let part = self
            .put_part(&input.upload_id, number, &written, &record.sse)
            .await?;
        let described = encryption::describe(&record.sse, customer.as_ref());
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(ETag::Strong(layout::hex(&part.md5))),
            server_side_encryption: described.sse,
            ssekms_key_id: described.kms_key,
            sse_customer_algorithm: described.customer_algorithm,
            sse_customer_key_md5: described.customer_key_md5,
            ..Default::default()
        }))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        let number = part_number(input.part_number)?;
        let CopySource::Bucket {
            bucket: source_bucket,
            key: source_key,
            ..
        } = &input.copy_source
        else {
            return Err(s3_error!(NotImplemented, "copy from an access point"));
        };
        self.owned(&user, source_bucket).await?;
        self.owned(&user, &input.bucket).await?;
        let record = self
            .upload(&input.bucket, &input.key, &input.upload_id)
            .await?;
        let customer = encryption::customer_key(
            &input.sse_customer_algorithm,
            &input.sse_customer_key,
            &input.sse_customer_key_md5,
        )?;
        encryption::check_customer(&record.sse, customer.as_ref())?;
        let source = self.entry(source_bucket, source_key).await?;
        let range = copy_range(input.copy_source_range.as_deref(), source.size)?;
        let reader = self
            .source_reader(
                &source,
                range,
                &input.copy_source_sse_customer_algorithm,
                &input.copy_source_sse_customer_key,
                &input.copy_source_sse_customer_key_md5,
            )
            .await?;
        let sealing = self.sealing(&record.sse, customer.as_ref()).await?;
        let written = data::write(&self.pool, reader, sealing)
            .await
            .map_err(fail)?;
        let part = self
            .put_part(&input.upload_id, number, &written, &record.sse)
            .await?;
        let described = encryption::describe(&record.sse, customer.as_ref());
        Ok(S3Response::new(UploadPartCopyOutput {
            server_side_encryption: described.sse,
            ssekms_key_id: described.kms_key,
            sse_customer_algorithm: described.customer_algorithm,
            sse_customer_key_md5: described.customer_key_md5,
            copy_part_result: Some(CopyPartResult {
                e_tag: Some(ETag::Strong(layout::hex(&part.md5))),
                last_modified: Some(timestamp(part.mtime_ns)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        self.owned(&user, &input.bucket).await?;
        let record = self
            .upload(&input.bucket, &input.key, &input.upload_id)
            .await?;
        let asked = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default();
        if asked.is_empty() {
            return Err(s3_error!(MalformedXML, "name at least one part"));
        }
        // Marked first, so that no part changes between the check below and the commit.
        multipart::mark_completing(&self.pool, &input.upload_id)
            .await
            .map_err(|e| self.upload_error(e, &input.upload_id))?;
        let stored: HashMap<u32, PartRecord> = multipart::all_parts(&self.pool, &input.upload_id)
            .await
            .map_err(fail)?
            .into_iter()
            .collect();
        let chosen = match chosen_parts(&asked, &stored) {
            Ok(chosen) => chosen,
            Err(refused) => {
                multipart::unmark_completing(&self.pool, &input.upload_id).await;
                return Err(refused);
            }
        };
        let md5s: Vec<[u8; 16]> = chosen.iter().map(|p| p.md5).collect();
        let segments: Vec<Segment> = chosen.iter().map(|p| p.segment.clone()).collect();
        let entry = ObjectEntry {
            size: segments.iter().map(|s| s.size).sum(),
            etag: multipart_etag(&md5s),
            mtime_ns: layout::now_ns(),
            content_type: record.content_type,
            metadata: record.metadata,
            segments,
            sse: record.sse,
        };
        // Not self.commit: on failure the parts stay with the upload, to complete again.
        match buckets::commit(&self.pool, &input.bucket, &input.key, &entry).await {
            Ok(old) => self.free_replaced(old, &entry).await,
            Err(Error::NotFound(_)) => return Err(no_bucket(&input.bucket)),
            Err(e) => return Err(fail(e)),
        }
        let used: Vec<String> = entry.segments.iter().map(|s| s.instance.clone()).collect();
        let parts: Vec<PartRecord> = stored.into_values().collect();
        multipart::finish(
            &self.pool,
            &input.bucket,
            &input.key,
            &input.upload_id,
            &parts,
            &used,
        )
        .await;
        let described = encryption::describe(&entry.sse, None);
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            bucket: Some(input.bucket),
            key: Some(input.key),
            e_tag: Some(etag(&entry)),
            server_side_encryption: described.sse,
            ssekms_key_id: described.kms_key,
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        self.owned(&user, &input.bucket).await?;
        self.upload(&input.bucket, &input.key, &input.upload_id)
            .await?;
        multipart::abort(&self.pool, &input.bucket, &input.key, &input.upload_id)
            .await
            .map_err(|e| self.upload_error(e, &input.upload_id))?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        self.owned(&user, &input.bucket).await?;
        let record = self
            .upload(&input.bucket, &input.key, &input.upload_id)
            .await?;
        let max = input
            .max_parts
            .unwrap_or(MAX_KEYS_DEFAULT)
            .clamp(0, MAX_KEYS_DEFAULT);
        let after = input.part_number_marker.unwrap_or(0).max(0) as u32;
        let mut page = multipart::parts(&self.pool, &input.upload_id, after, max as u32 + 1)
            .await
            .map_err(|e| self.upload_error(e, &input.upload_id))?;
        let truncated = page.len() > max as usize;
        page.truncate(max as usize);
        let next = page.last().map(|(number, _)| *number as i32);
        let parts: Parts = page
            .into_iter()
            .map(|(number, part)| Part {
                part_number: Some(number as i32),
                size: Some(part.segment.size as i64),
                e_tag: Some(ETag::Strong(layout::hex(&part.md5))),
                last_modified: Some(timestamp(part.mtime_ns)),
                ..Default::default()
            })
            .collect();
        let who = Owner {
            display_name: Some(record.initiator.clone()),
            id: Some(record.initiator.clone()),
        };
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            parts: Some(parts),
            is_truncated: Some(truncated),
            next_part_number_marker: truncated.then_some(next).flatten(),
            part_number_marker: input.part_number_marker,
            max_parts: Some(max),
            initiator: Some(Initiator {
                display_name: who.display_name.clone(),
                id: who.id.clone(),
            }),
            owner: Some(who),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        self.owned(&user, &input.bucket).await?;
        let max = input
            .max_uploads
            .unwrap_or(MAX_KEYS_DEFAULT)
            .clamp(0, MAX_KEYS_DEFAULT);
        let (uploads, truncated) = multipart::list(
            &self.pool,
            &input.bucket,
            input.prefix.as_deref().unwrap_or(""),
            input.key_marker.as_deref(),
            input.upload_id_marker.as_deref(),
            max as usize,
        )
        .await
        .map_err(fail)?;
        let encode = encoder(&input.encoding_type);
        let next = uploads.last().map(|(key, id, _)| (encode(key), id.clone()));
        let listed: MultipartUploadList = uploads
            .into_iter()
            .map(|(key, id, record)| {
                let who = Owner {
                    display_name: Some(record.initiator.clone()),
                    id: Some(record.initiator.clone()),
                };
                MultipartUpload {
                    key: Some(encode(&key)),
                    upload_id: Some(id),
                    initiated: Some(timestamp(record.initiated_ns)),
                    initiator: Some(Initiator {
                        display_name: who.display_name.clone(),
                        id: who.id.clone(),
                    }),
                    owner: Some(who),
                    ..Default::default()
                }
            })
            .collect();
        let (next_key, next_id) = match next.filter(|_| truncated) {
            Some((key, id)) => (Some(key), Some(id)),
            None => (None, None),
        };
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            uploads: Some(listed),
            is_truncated: Some(truncated),
            next_key_marker: next_key,
            next_upload_id_marker: next_id,
            key_marker: input.key_marker,
            upload_id_marker: input.upload_id_marker,
            prefix: input.prefix,
            max_uploads: Some(max),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        self.owned(&user, &input.bucket).await?;
        let (listing, max) = self
            .list(
                &input.bucket,
                input.prefix.as_deref(),
                input.delimiter.as_deref(),
                input.marker.as_deref(),
                input.max_keys,
            )
            .await?;
        let encode = encoder(&input.encoding_type);
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            contents: Some(contents(&listing, &encode)),
            common_prefixes: common_prefixes(&listing, &encode),
            is_truncated: Some(listing.next.is_some()),
            next_marker: listing.next.as_deref().map(&encode),
            marker: input.marker.as_deref().map(&encode),
            prefix: Some(encode(input.prefix.as_deref().unwrap_or(""))),
            delimiter: input.delimiter.as_deref().map(&encode),
            max_keys: Some(max),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let user = self.user(&req).await?;
        let input = req.input;
        self.owned(&user, &input.bucket).await?;
        let after = match &input.continuation_token {
            Some(token) => Some(
                unhex(token)
                    .ok_or_else(|| s3_error!(InvalidArgument, "not a continuation token"))?,
            ),
            None => input.start_after.clone(),
        };
        let (listing, max) = self
            .list(
                &input.bucket,
                input.prefix.as_deref(),
                input.delimiter.as_deref(),
                after.as_deref(),
                input.max_keys,
            )
            .await?;
        let encode = encoder(&input.encoding_type);
        let count = listing.objects.len() + listing.prefixes.len();
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            contents: Some(contents(&listing, &encode)),
            common_prefixes: common_prefixes(&listing, &encode),
            key_count: Some(count as i32),
            is_truncated: Some(listing.next.is_some()),
            next_continuation_token: listing.next.as_deref().map(|n| layout::hex(n.as_bytes())),
            continuation_token: input.continuation_token,
            start_after: input.start_after.as_deref().map(&encode),
            prefix: Some(encode(input.prefix.as_deref().unwrap_or(""))),
            delimiter: input.delimiter.as_deref().map(&encode),
            max_keys: Some(max),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_encoding_keeps_slashes_and_unreserved_characters() {
        assert_eq!(url_encode("a/b c+d~é"), "a/b%20c%2Bd~%C3%A9");
    }

    #[test]
    fn continuation_tokens_round_trip_and_junk_is_refused() {
        let key = "photos/2026/é.jpg";
        assert_eq!(unhex(&layout::hex(key.as_bytes())).as_deref(), Some(key));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }
}
