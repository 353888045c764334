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

use crate::layout::{self, BucketInfo, ObjectEntry};
use crate::{buckets, data, users, Error};

/// The keys of one ListObjects page when the client asks for none in particular (S3's).
const MAX_KEYS_DEFAULT: i32 = 1000;

/// The gateway's S3 implementation on one pool.
#[derive(Clone)]
pub struct Gateway {
    pool: Pool,
    /// Access key to user name: a key never changes hands, so this needs no expiry (a
    /// removed user's key no longer signs anything: [`Gateway::secret`] looks it up anew).
    names: std::sync::Arc<Mutex<HashMap<String, String>>>,
}

impl Gateway {
    pub fn new(pool: Pool) -> Gateway {
        Gateway {
            pool,
            names: Default::default(),
        }
    }

    /// The service s3s serves: this gateway, with its users' keys checking signatures.
    pub fn service(self) -> s3s::service::S3Service {
        let mut builder = s3s::service::S3ServiceBuilder::new(self.clone());
        builder.set_auth(self);
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

    /// Commits a written upload as `key` of `bucket`, and frees the content it replaces. If
    /// the commit fails, the upload's own stripes are freed.
    async fn commit(&self, bucket: &str, key: &str, entry: &ObjectEntry) -> S3Result<()> {
        match buckets::commit(&self.pool, bucket, key, entry).await {
            Ok(old) => {
                if let Some(old) = old.filter(|old| old.instance != entry.instance) {
                    data::remove(&self.pool, &old).await;
                }
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

    async fn delete_key(&self, bucket: &str, key: &str) -> Result<(), Error> {
        if let Some(old) = buckets::uncommit(&self.pool, bucket, key).await? {
            data::remove(&self.pool, &old).await;
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
        Error::Busy(_) => S3Error::with_message(S3ErrorCode::OperationAborted, e.to_string()),
        e => {
            tracing::warn!("{e}");
            S3Error::with_message(S3ErrorCode::InternalError, e.to_string())
        }
    }
}

fn etag(entry: &ObjectEntry) -> ETag {
    ETag::Strong(entry.md5_hex.clone())
}

fn modified(entry: &ObjectEntry) -> Timestamp {
    Timestamp::from(std::time::UNIX_EPOCH + std::time::Duration::from_nanos(entry.mtime_ns))
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

/// A new index entry for content just written.
fn new_entry(
    written: &data::Written,
    content_type: Option<String>,
    metadata: Option<Metadata>,
) -> ObjectEntry {
    let mut metadata: Vec<(String, String)> = metadata.unwrap_or_default().into_iter().collect();
    metadata.sort();
    ObjectEntry {
        size: written.size,
        md5_hex: written.md5_hex(),
        mtime_ns: layout::now_ns(),
        content_type,
        metadata,
        instance: written.instance.clone(),
        stripe_bytes: layout::STRIPE_BYTES,
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
                creation_date: Some(Timestamp::from(
                    std::time::UNIX_EPOCH + std::time::Duration::from_nanos(info.created_ns),
                )),
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

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let user = self.user(&req).await?;
        let input = req.input;
        check_key(&input.key)?;
        self.owned(&user, &input.bucket).await?;
        let expected_md5 = match &input.content_md5 {
            Some(text) => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .ok()
                    .filter(|md5| md5.len() == 16)
                    .ok_or_else(|| s3_error!(InvalidDigest, "Content-MD5 is not a base64 MD5"))?,
            ),
            None => None,
        };
        let written = match input.body {
            Some(body) => data::write(&self.pool, body).await,
            None => data::write(&self.pool, futures::stream::empty::<Result<_, Error>>()).await,
        }
        .map_err(|e| match e {
            Error::Body(message) => S3Error::with_message(S3ErrorCode::IncompleteBody, message),
            e => fail(e),
        })?;
        let short = input
            .content_length
            .is_some_and(|len| len as u64 != written.size);
        let corrupt = expected_md5.is_some_and(|md5| md5 != written.md5);
        if short || corrupt {
            data::remove_stripes(
                &self.pool,
                &written.instance,
                written.size.div_ceil(layout::STRIPE_BYTES),
            )
            .await;
            return Err(if corrupt {
                s3_error!(BadDigest, "the content does not match its Content-MD5")
            } else {
                s3_error!(IncompleteBody, "the body is not Content-Length bytes")
            });
        }
        let entry = new_entry(&written, input.content_type, input.metadata);
        self.commit(&input.bucket, &input.key, &entry).await?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(etag(&entry)),
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
        let (range, content_range) = match &input.range {
            Some(range) => {
                let span = range.check(entry.size)?;
                let text = format!("bytes {}-{}/{}", span.start, span.end - 1, entry.size);
                (span, Some(text))
            }
            None => (0..entry.size, None),
        };
        let body = data::read(&self.pool, &entry, range.clone());
        Ok(S3Response::new(GetObjectOutput {
            body: Some(StreamingBlob::wrap(body)),
            content_length: Some((range.end - range.start) as i64),
            content_range,
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag(&entry)),
            last_modified: Some(modified(&entry)),
            content_type: entry.content_type.clone(),
            metadata: metadata(&entry),
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
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(entry.size as i64),
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag(&entry)),
            last_modified: Some(modified(&entry)),
            content_type: entry.content_type.clone(),
            metadata: metadata(&entry),
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
        if !replace && **source_bucket == *input.bucket && **source_key == *input.key {
            return Err(s3_error!(
                InvalidRequest,
                "copying an object onto itself needs the metadata directive REPLACE"
            ));
        }
        let reader = data::read(&self.pool, &source, 0..source.size);
        let written = data::write(&self.pool, reader).await.map_err(fail)?;
        let entry = if replace {
            new_entry(&written, input.content_type, input.metadata)
        } else {
            ObjectEntry {
                metadata: source.metadata.clone(),
                ..new_entry(&written, source.content_type.clone(), None)
            }
        };
        self.commit(&input.bucket, &input.key, &entry).await?;
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(etag(&entry)),
                last_modified: Some(modified(&entry)),
                ..Default::default()
            }),
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
            next_continuation_token: listing.next.as_deref().map(|n| hex(n.as_bytes())),
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
        assert_eq!(unhex(&hex(key.as_bytes())).as_deref(), Some(key));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }
}
