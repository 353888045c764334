//! The copy verbs: CopyObject, and UploadPartCopy, which copies into a part of an upload.

use super::policy::{allowed, check_unowned, versioned, ObjectRef};
use crate::policy::Action;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::acl::asked_acl;
use super::checksum::{set_checksum, show_checksum};
use super::encryption::customer_key;
use super::encryption::CustomerKey;
use super::error::Refusal;
use super::lock::{self, asked_lock};
use super::object::Conditions;
use super::tagging;
use super::upload::part_number;
use super::{
    check_key, content_headers, encryption, etag, made_version, modified, new_entry,
    sorted_metadata, timestamp, Gateway,
};
use crate::buckets;
use crate::checksum::Algorithm;
use crate::data;
use crate::layout::{self, ObjectEntry};
use crate::versions::VersionId;

impl Gateway {
    /// The content `range` of a copy's source, opened with the copy-source SSE-C key if it
    /// has one.
    async fn source_reader(
        &self,
        source: &ObjectEntry,
        range: std::ops::Range<u64>,
        customer: Option<CustomerKey>,
    ) -> S3Result<data::Reader> {
        let mut source = source.clone();
        let hold = self.hold(&mut source).await?;
        encryption::check_customer(&source.sse, customer.as_ref())?;
        self.read(&source, range, customer.as_ref(), hold).await
    }
}

/// The [`Conditions`] a CopyObject or UploadPartCopy puts on its source.
macro_rules! source_conditions {
    ($input:expr) => {
        Conditions {
            if_match: $input.copy_source_if_match.as_ref(),
            if_none_match: $input.copy_source_if_none_match.as_ref(),
            if_modified_since: $input.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: $input.copy_source_if_unmodified_since.as_ref(),
            on_copy_source: true,
        }
    };
}

/// The byte range of an UploadPartCopy source (`bytes=FIRST-LAST`), within `size`.
fn copy_range(text: Option<&str>, size: u64) -> S3Result<std::ops::Range<u64>> {
    let Some(text) = text else {
        return Ok(0..size);
    };
    let number = |digits: &str| {
        let all_digits = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
        all_digits.then(|| digits.parse::<u64>().ok()).flatten()
    };
    let parsed = text.strip_prefix("bytes=").and_then(|span| {
        let (first, last) = span.split_once('-')?;
        Some((number(first)?, number(last)?))
    });
    let Some((first, last)) = parsed else {
        return Err(Refusal::Invalid(format!(
            "x-amz-copy-source-range {text:?} is not of the form bytes=FIRST-LAST"
        ))
        .into());
    };
    if first <= last && last < size {
        Ok(first..last + 1)
    } else {
        Err(Refusal::Range(format!(
            "x-amz-copy-source-range {text:?} is not within the {size} bytes of the source"
        ))
        .into())
    }
}

/// Checks that `req` may read the source of its copy; returns the source's bucket.
async fn readable_source<T>(
    gw: &Gateway,
    req: &S3Request<T>,
    source: &CopySource,
) -> S3Result<buckets::Bucket> {
    let CopySource::Bucket {
        bucket,
        key,
        version_id,
    } = source
    else {
        return Err(Refusal::NotServed("copy from an access point").into());
    };
    let action = versioned(version_id, Action::GetObject, Action::GetObjectVersion);
    let object = ObjectRef {
        key,
        version: version_id.as_deref(),
    };
    gw.allowed(req, action, bucket, Some(object)).await
}

/// [`check_unowned`] for a copy's `source` version, read from `source_bucket`.
fn check_source(
    source_bucket: &buckets::Bucket,
    source: &ObjectEntry,
    principal: Option<&str>,
    (name, key, version): (&str, &str, Option<&str>),
) -> S3Result<()> {
    let action = versioned(&version, Action::GetObject, Action::GetObjectVersion);
    check_unowned(source_bucket, source, principal, (name, key), action)
}

pub(super) async fn copy_object(
    gw: &Gateway,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let bucket = allowed!(gw, req, object PutObject);
    let from = readable_source(gw, &req, &req.input.copy_source).await?;
    let writer = gw.principal(&req).await?;
    let asked = asked_lock!(req.input)?;
    let replaces_tags = req.input.tagging.is_some()
        && req
            .input
            .tagging_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE);
    let (name, key) = (&req.input.bucket, &req.input.key);
    gw.check_settings(
        &req,
        name,
        key,
        &asked_acl!(req.input),
        replaces_tags,
        &asked,
    )
    .await?;
    let input = req.input;
    check_key(&input.key)?;
    let CopySource::Bucket {
        bucket: source_bucket,
        key: source_key,
        version_id: source_version,
    } = &input.copy_source
    else {
        return Err(Refusal::NotServed("copy from an access point").into());
    };
    // The copy's own lock and ACL, never its source's.
    lock::check_allowed(&bucket, &asked)?;
    let acl = gw
        .object_acl(writer.as_deref(), asked_acl!(input), &bucket)
        .await?;
    let source = gw
        .object(source_bucket, source_key, source_version.as_deref())
        .await?;
    let named = (&**source_bucket, &**source_key, source_version.as_deref());
    check_source(&from, &source, writer.as_deref(), named)?;
    source_conditions!(input).check(&source)?;
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
    let replace_tags = input
        .tagging_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE);
    let customer = customer_key!(input)?;
    let changes_encryption = customer.is_some() || input.server_side_encryption.is_some();
    if !replace
        && !replace_tags
        && !changes_encryption
        && source_version.is_none()
        && **source_bucket == *input.bucket
        && **source_key == *input.key
    {
        return Err(Refusal::BadRequest(
            "copying an object onto itself needs the metadata directive REPLACE",
        )
        .into());
    }
    let reader = gw
        .source_reader(&source, 0..source.size, customer_key!(input, copy_source)?)
        .await?;
    let sse = encryption::for_write(
        &bucket,
        &input.server_side_encryption,
        &input.ssekms_key_id,
        customer.as_ref(),
    )?;
    let sealing = gw.sealing(&sse, customer.as_ref()).await?;
    // The copy's checksum: the one asked for, else one of the source's algorithm, of the
    // whole content.
    let algorithm = match &input.checksum_algorithm {
        Some(asked) => Some(Algorithm::named(asked.as_str()).map_err(Refusal::Checksum)?),
        None => source.checksum.as_ref().map(|c| c.algorithm),
    };
    let written = data::write(&gw.data, reader, sealing, algorithm).await?;
    let (content_type, metadata, headers) = if replace {
        let headers = content_headers!(input);
        (input.content_type, sorted_metadata(input.metadata), headers)
    } else {
        let source = source.clone();
        (source.content_type, source.metadata, source.headers)
    };
    let tags = if replace_tags {
        tagging::from_header(input.tagging.as_deref())?
    } else {
        source.tags.clone()
    };
    let mut entry = new_entry(
        &written,
        content_type,
        metadata,
        headers,
        tags,
        sse,
        customer.as_ref(),
    );
    entry.lock = lock::for_new(&bucket, asked, entry.mtime_ns);
    entry.acl = acl;
    let made = gw
        .commit(&bucket, &input.bucket, &input.key, None, &entry, |_| Ok(()))
        .await?;
    let described = encryption::describe(&entry.sse, customer.as_ref());
    Ok(S3Response::new(CopyObjectOutput {
        version_id: made_version(made),
        copy_source_version_id: source.version.map(|tag| VersionId::from(tag).to_string()),
        copy_object_result: Some(copy_result(&entry)),
        server_side_encryption: described.sse,
        ssekms_key_id: described.kms_key,
        sse_customer_algorithm: described.customer_algorithm,
        sse_customer_key_md5: described.customer_key_md5,
        ..Default::default()
    }))
}

pub(super) async fn upload_part_copy(
    gw: &Gateway,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    allowed!(gw, req, object PutObject);
    let from = readable_source(gw, &req, &req.input.copy_source).await?;
    let principal = gw.principal(&req).await?;
    let input = req.input;
    let number = part_number(input.part_number)?;
    let CopySource::Bucket {
        bucket: source_bucket,
        key: source_key,
        version_id: source_version,
    } = &input.copy_source
    else {
        return Err(Refusal::NotServed("copy from an access point").into());
    };
    let record = gw
        .upload(&input.bucket, &input.key, &input.upload_id)
        .await?;
    let customer = customer_key!(input)?;
    encryption::check_customer(&record.sse, customer.as_ref())?;
    let source = gw
        .object(source_bucket, source_key, source_version.as_deref())
        .await?;
    let named = (&**source_bucket, &**source_key, source_version.as_deref());
    check_source(&from, &source, principal.as_deref(), named)?;
    source_conditions!(input).check(&source)?;
    let range = copy_range(input.copy_source_range.as_deref(), source.size)?;
    let reader = gw
        .source_reader(&source, range, customer_key!(input, copy_source)?)
        .await?;
    let sealing = gw.sealing(&record.sse, customer.as_ref()).await?;
    let algorithm = record.checksum.map(|(algorithm, _)| algorithm);
    let written = data::write(&gw.data, reader, sealing, algorithm).await?;
    let part = gw
        .put_part(
            &input.upload_id,
            number,
            &written,
            &record.sse,
            customer.as_ref(),
        )
        .await?;
    let described = encryption::describe(&record.sse, customer.as_ref());
    Ok(S3Response::new(UploadPartCopyOutput {
        server_side_encryption: described.sse,
        ssekms_key_id: described.kms_key,
        sse_customer_algorithm: described.customer_algorithm,
        sse_customer_key_md5: described.customer_key_md5,
        copy_part_result: Some({
            let mut result = CopyPartResult {
                e_tag: Some(ETag::Strong(layout::hex(&part.md5))),
                last_modified: Some(timestamp(part.mtime_ns)),
                ..Default::default()
            };
            set_checksum!(result, written.checksum.map(|c| (c.algorithm, c.shown())));
            result
        }),
        ..Default::default()
    }))
}

/// What a CopyObject answers of the copy it made.
fn copy_result(entry: &ObjectEntry) -> CopyObjectResult {
    let mut result = CopyObjectResult {
        e_tag: Some(etag(entry)),
        last_modified: Some(modified(entry)),
        ..Default::default()
    };
    show_checksum!(result, entry);
    result
}
