//! The object verbs: put, get, head, delete one or many; and what GET and HEAD answer of an
//! object (its conditions, range or part, type and metadata).

use super::policy::allowed;
use super::policy::{versioned, ObjectRef};
use crate::policy::Action;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::acl::asked_acl;
use super::checksum::{self, asked_checksum, set_checksum, show_checksum};
use super::encryption::{customer_key, write_encryption};
use super::error::Refusal;
use super::lifecycle;
use super::lock::{self, asked_lock};
use super::tagging;
use super::upload::part_number;
use super::{
    check_key, content_headers, content_md5, encryption, etag, from_unix_seconds, in_bucket,
    made_version, modified, new_entry, sorted_metadata, timestamp, version_id, write_body, Gateway,
};
use crate::buckets::Judged;
use crate::chunked::Trailers;
use crate::layout::ObjectEntry;
use crate::versions::{self, VersionId};
use crate::Error;

/// The most keys one DeleteObjects may name (S3's limit).
const DELETE_KEYS_MAX: usize = 1000;

/// The conditions of a GET or HEAD (`If-Match`, `If-None-Match`, `If-Modified-Since`,
/// `If-Unmodified-Since`), checked in RFC 9110's order, as S3 does: a failed `If-Match` or
/// `If-Unmodified-Since` is PreconditionFailed (412), a failed `If-None-Match` or
/// `If-Modified-Since` is NotModified (304). A date condition is ignored when its ETag
/// counterpart is given; dates compare to the second, as HTTP dates carry. On a copy's
/// source (`x-amz-copy-source-if-*`) every failed condition is PreconditionFailed.
pub(super) struct Conditions<'a> {
    pub if_match: Option<&'a ETagCondition>,
    pub if_none_match: Option<&'a ETagCondition>,
    pub if_modified_since: Option<&'a Timestamp>,
    pub if_unmodified_since: Option<&'a Timestamp>,
    pub on_copy_source: bool,
}

/// The [`Conditions`] of a GetObject or HeadObject input.
macro_rules! conditions {
    ($input:expr) => {
        Conditions {
            if_match: $input.if_match.as_ref(),
            if_none_match: $input.if_none_match.as_ref(),
            if_modified_since: $input.if_modified_since.as_ref(),
            if_unmodified_since: $input.if_unmodified_since.as_ref(),
            on_copy_source: false,
        }
    };
}

impl Conditions<'_> {
    pub fn check(&self, entry: &ObjectEntry) -> S3Result<()> {
        let matches = |condition: &ETagCondition| match condition {
            ETagCondition::Any => true,
            ETagCondition::ETag(tag) => tag.value() == entry.etag,
        };
        let modified = timestamp(entry.mtime_ns / 1_000_000_000 * 1_000_000_000);
        match self.if_match {
            Some(condition) if !matches(condition) => {
                return Err(Refusal::PreconditionFailed("the ETag does not match If-Match").into())
            }
            Some(_) => {}
            None => {
                if self
                    .if_unmodified_since
                    .is_some_and(|since| modified > *since)
                {
                    return Err(Refusal::PreconditionFailed(
                        "the object was modified after If-Unmodified-Since",
                    )
                    .into());
                }
            }
        }
        let why = match self.if_none_match {
            Some(condition) if matches(condition) => "the ETag matches If-None-Match",
            Some(_) => return Ok(()),
            None if self
                .if_modified_since
                .is_some_and(|since| modified <= *since) =>
            {
                "the object was not modified after If-Modified-Since"
            }
            None => return Ok(()),
        };
        Err(if self.on_copy_source {
            Refusal::PreconditionFailed(why)
        } else {
            Refusal::NotModified {
                etag: entry.etag.clone(),
            }
        }
        .into())
    }
}

/// What a conditional write (PutObject, CompleteMultipartUpload) asks of the entry it
/// replaces, checked in its commit: `If-Match`, an object with that ETag (or any, for
/// `*`); `If-None-Match`, no object with that ETag (or none at all, for `*`). A failed
/// condition is `Precondition`, except `If-Match` without an object: `NoObject`, S3's
/// NoSuchKey.
pub(super) fn replacing(
    (if_match, if_none_match): &(Option<ETagCondition>, Option<ETagCondition>),
) -> impl Fn(Judged) -> Result<(), Error> + '_ {
    move |judged| {
        let old = judged.object();
        let matches = |condition: &ETagCondition| match (condition, old) {
            (_, None) => false,
            (ETagCondition::Any, Some(_)) => true,
            (ETagCondition::ETag(tag), Some(old)) => tag.value() == old.etag,
        };
        match (if_match, old) {
            (Some(_), None) => return Err(Error::NoObject("If-Match needs one".into())),
            (Some(condition), Some(_)) if !matches(condition) => {
                return Err(Error::Precondition(
                    "the ETag does not match If-Match".into(),
                ))
            }
            _ => {}
        }
        if if_none_match.as_ref().is_some_and(matches) {
            return Err(Error::Precondition(
                "the object matches If-None-Match".into(),
            ));
        }
        Ok(())
    }
}

/// The conditions of a conditional delete: `If-Match` (an ETag, or `*` for any object), and
/// Ceph's `x-amz-if-match-last-modified-time` and `x-amz-if-match-size` (DeleteObject), or
/// the ETag, LastModifiedTime and Size of one key of a DeleteObjects.
#[derive(Default)]
pub(super) struct DeleteIf {
    etag: Option<ETagCondition>,
    modified: Option<Timestamp>,
    size: Option<i64>,
}

impl DeleteIf {
    /// Judged on the version a delete removes (its key's current one, unless it names one):
    /// every condition given must hold of its object; under a delete marker only
    /// `If-Match: *` holds. With nothing there, a conditional delete does nothing (not even
    /// a delete marker): `NoObject`, which [`Gateway::delete`] answers as done.
    fn check(&self, judged: Judged) -> Result<(), Error> {
        let entry = match judged {
            Judged::Nothing
                if self.etag.is_none() && self.modified.is_none() && self.size.is_none() =>
            {
                return Ok(())
            }
            Judged::Nothing => return Err(Error::NoObject("nothing to delete".into())),
            Judged::Marker => {
                let any = matches!(self.etag, None | Some(ETagCondition::Any));
                if any && self.modified.is_none() && self.size.is_none() {
                    return Ok(());
                }
                return Err(Error::Precondition(
                    "the object is deleted (a delete marker)".into(),
                ));
            }
            Judged::Object(entry) => entry,
        };
        let etag = match &self.etag {
            Some(ETagCondition::ETag(tag)) => tag.value() == entry.etag,
            Some(ETagCondition::Any) | None => true,
        };
        let seconds = (entry.mtime_ns / 1_000_000_000) as i64;
        let modified = self
            .modified
            .clone()
            .is_none_or(|at| super::unix_seconds(at) == seconds);
        let size = self.size.is_none_or(|size| size == entry.size as i64);
        match (etag, modified, size) {
            (false, ..) => Err(Error::Precondition(
                "the ETag does not match If-Match".into(),
            )),
            (_, false, _) => Err(Error::Precondition(
                "the object was not last modified at x-amz-if-match-last-modified-time".into(),
            )),
            (.., false) => Err(Error::Precondition(
                "the object's size is not x-amz-if-match-size".into(),
            )),
            _ => Ok(()),
        }
    }
}

/// A GET or HEAD that names a server-side encryption is refused, as S3 does: an object is
/// read with the encryption it was stored with (only SSE-C's key is the client's to give).
pub(super) fn refuse_encryption_headers(headers: &hyper::HeaderMap) -> S3Result<()> {
    let named = [
        "x-amz-server-side-encryption",
        "x-amz-server-side-encryption-aws-kms-key-id",
    ]
    .into_iter()
    .find(|name| headers.contains_key(*name));
    match named {
        Some(name) => Err(Refusal::Invalid(format!(
            "{name} is for writes; a read gets the encryption the object was stored with"
        ))
        .into()),
        None => Ok(()),
    }
}

fn metadata(entry: &ObjectEntry) -> Option<Metadata> {
    (!entry.metadata.is_empty()).then(|| entry.metadata.iter().cloned().collect())
}

/// A GET's output with the headers its `response-*` parameters ask for in place of the
/// stored ones.
fn overridden(mut output: GetObjectOutput, input: &GetObjectInput) -> GetObjectOutput {
    let asked = [
        (&mut output.cache_control, &input.response_cache_control),
        (
            &mut output.content_disposition,
            &input.response_content_disposition,
        ),
        (
            &mut output.content_encoding,
            &input.response_content_encoding,
        ),
        (
            &mut output.content_language,
            &input.response_content_language,
        ),
        (&mut output.content_type, &input.response_content_type),
    ];
    for (header, asked) in asked {
        if asked.is_some() {
            header.clone_from(asked);
        }
    }
    if input.response_expires.is_some() {
        output.expires.clone_from(&input.response_expires);
    }
    output
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
            return Err(Refusal::BadRequest("give a Range or a partNumber, not both").into())
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
                _ => return Err(Refusal::Part(format!("the object has no part {number}")).into()),
            }
        }
        (None, None) => return Ok((0..entry.size, None)),
    };
    let text = (span.end > span.start)
        .then(|| format!("bytes {}-{}/{}", span.start, span.end - 1, entry.size));
    Ok((span, text))
}

pub(super) async fn put_object(
    gw: &Gateway,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    let (bucket, stored) = allowed!(gw, req, write PutObject);
    let writer = gw.principal(&req).await?;
    let md5 = content_md5(&req.headers)?;
    check_key(&req.input.key)?;
    let tags = tagging::from_header(req.input.tagging.as_deref())?;
    let asked = asked_lock!(req.input)?;
    lock::check_allowed(&bucket, &asked)?;
    let asked_acl = asked_acl!(req.input);
    let (name, key) = (&req.input.bucket, &req.input.key);
    gw.check_settings(&req, name, key, &asked_acl, !tags.is_empty(), &asked)
        .await?;
    let input = req.input;
    let conditions = (input.if_match.clone(), input.if_none_match.clone());
    let acl = gw.object_acl(writer.as_deref(), asked_acl, &bucket).await?;
    let checksum = asked_checksum!(input, &req.headers)?;
    let (customer, sse) = write_encryption!(&bucket, input);
    let sealing = gw.sealing(&sse, customer.as_ref()).await?;
    let trailers = Trailers::of(req.trailing_headers.as_ref(), &req.extensions);
    let checked = checksum.as_ref().map(|c| (c, trailers.as_ref()));
    let body = (input.body, input.content_length);
    let written = write_body(&gw.data, body, md5, checked, sealing).await?;
    let headers = content_headers!(input);
    let mut entry = new_entry(
        &written,
        input.content_type,
        sorted_metadata(input.metadata),
        headers,
        tags,
        sse,
        customer.as_ref(),
    );
    entry.lock = lock::for_new(&bucket, asked, entry.mtime_ns);
    entry.acl = acl;
    let made = gw
        .commit(
            &bucket,
            &input.bucket,
            &input.key,
            Some(stored),
            &entry,
            replacing(&conditions),
        )
        .await?;
    let described = encryption::describe(&entry.sse, customer.as_ref());
    let mut output = PutObjectOutput {
        e_tag: Some(etag(&entry)),
        expiration: lifecycle::expiration(&bucket, &input.key, &entry),
        version_id: made_version(made),
        server_side_encryption: described.sse,
        ssekms_key_id: described.kms_key,
        sse_customer_algorithm: described.customer_algorithm,
        sse_customer_key_md5: described.customer_key_md5,
        ..Default::default()
    };
    show_checksum!(output, entry);
    Ok(S3Response::new(output))
}

pub(super) async fn get_object(
    gw: &Gateway,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let (bucket, current) = allowed!(gw, req, read GetObject / GetObjectVersion);
    refuse_encryption_headers(&req.headers)?;
    let (name, key, version) = (&req.input.bucket, &req.input.key, &req.input.version_id);
    let mut entry = gw
        .readable(&req, &bucket, name, key, version.as_deref(), current)
        .await?;
    let input = req.input;
    // At once: the list of segments and the data key may take round trips.
    let hold = gw.hold(&mut entry).await?;
    conditions!(input).check(&entry)?;
    // The span first: a part that does not exist is InvalidPart, key or no key.
    let (range, content_range) = span(&entry, input.range.as_ref(), input.part_number)?;
    let customer = customer_key!(input)?;
    encryption::check_customer(&entry.sse, customer.as_ref())?;
    let body = gw
        .read(&entry, range.clone(), customer.as_ref(), hold)
        .await?;
    let described = encryption::describe(&entry.sse, customer.as_ref());
    let locked = lock::shown(&entry.lock);
    let headers = &entry.headers;
    let shown_checksum = checksum::read(
        &entry,
        input.checksum_mode.as_ref(),
        input.part_number,
        input.range.is_some(),
    );
    let mut output = GetObjectOutput {
        body: Some(StreamingBlob::wrap(body)),
        content_length: Some((range.end - range.start) as i64),
        content_range,
        parts_count: input.part_number.and(parts_count(&entry)),
        accept_ranges: Some("bytes".into()),
        e_tag: Some(etag(&entry)),
        last_modified: Some(modified(&entry)),
        version_id: entry.version.map(|tag| VersionId::from(tag).to_string()),
        content_type: content_type(&entry),
        cache_control: headers.cache_control.clone(),
        content_disposition: headers.content_disposition.clone(),
        content_encoding: headers.content_encoding.clone(),
        content_language: headers.content_language.clone(),
        expires: headers.expires.and_then(from_unix_seconds),
        metadata: metadata(&entry),
        tag_count: tagging::count(&entry.tags),
        expiration: input
            .version_id
            .is_none()
            .then(|| lifecycle::expiration(&bucket, &input.key, &entry))
            .flatten(),
        object_lock_mode: locked.mode,
        object_lock_retain_until_date: locked.until,
        object_lock_legal_hold_status: locked.legal_hold,
        server_side_encryption: described.sse,
        ssekms_key_id: described.kms_key,
        sse_customer_algorithm: described.customer_algorithm,
        sse_customer_key_md5: described.customer_key_md5,
        checksum_type: shown_checksum
            .as_ref()
            .map(|(_, kind)| checksum::shown_type(*kind)),
        ..Default::default()
    };
    set_checksum!(output, shown_checksum.map(|(shown, _)| shown));
    Ok(S3Response::new(overridden(output, &input)))
}

pub(super) async fn head_object(
    gw: &Gateway,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let (bucket, current) = allowed!(gw, req, read GetObject / GetObjectVersion);
    refuse_encryption_headers(&req.headers)?;
    let (name, key, version) = (&req.input.bucket, &req.input.key, &req.input.version_id);
    let mut entry = gw
        .readable(&req, &bucket, name, key, version.as_deref(), current)
        .await?;
    if req.input.part_number.is_some() {
        gw.with_segments(&mut entry).await?;
    }
    let input = req.input;
    conditions!(input).check(&entry)?;
    let (range, content_range) = span(&entry, input.range.as_ref(), input.part_number)?;
    let customer = customer_key!(input)?;
    encryption::check_customer(&entry.sse, customer.as_ref())?;
    let described = encryption::describe(&entry.sse, customer.as_ref());
    let locked = lock::shown(&entry.lock);
    let shown_checksum = checksum::read(
        &entry,
        input.checksum_mode.as_ref(),
        input.part_number,
        input.range.is_some(),
    );
    let mut output = HeadObjectOutput {
        content_length: Some((range.end - range.start) as i64),
        content_range,
        parts_count: input.part_number.and(parts_count(&entry)),
        accept_ranges: Some("bytes".into()),
        e_tag: Some(etag(&entry)),
        last_modified: Some(modified(&entry)),
        version_id: entry.version.map(|tag| VersionId::from(tag).to_string()),
        content_type: content_type(&entry),
        cache_control: entry.headers.cache_control.clone(),
        content_disposition: entry.headers.content_disposition.clone(),
        content_encoding: entry.headers.content_encoding.clone(),
        content_language: entry.headers.content_language.clone(),
        expires: entry.headers.expires.and_then(from_unix_seconds),
        metadata: metadata(&entry),
        expiration: input
            .version_id
            .is_none()
            .then(|| lifecycle::expiration(&bucket, &input.key, &entry))
            .flatten(),
        object_lock_mode: locked.mode,
        object_lock_retain_until_date: locked.until,
        object_lock_legal_hold_status: locked.legal_hold,
        server_side_encryption: described.sse,
        ssekms_key_id: described.kms_key,
        sse_customer_algorithm: described.customer_algorithm,
        sse_customer_key_md5: described.customer_key_md5,
        checksum_type: shown_checksum
            .as_ref()
            .map(|(_, kind)| checksum::shown_type(*kind)),
        ..Default::default()
    };
    set_checksum!(output, shown_checksum.map(|(shown, _)| shown));
    let mut response = S3Response::new(output);
    // S3's HEAD gives the tag count as GET does; s3s's HeadObject output has no field for it.
    if let Some(count) = tagging::count(&entry.tags) {
        response.headers.insert(
            "x-amz-tagging-count",
            hyper::header::HeaderValue::from(count),
        );
    }
    Ok(response)
}

pub(super) async fn delete_object(
    gw: &Gateway,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let bucket = allowed!(gw, req, object DeleteObject / DeleteObjectVersion);
    let bypass = allowed!(gw, req, bypass);
    let input = req.input;
    let version = input.version_id.as_deref().map(version_id).transpose()?;
    let when = DeleteIf {
        etag: input.if_match,
        modified: input.if_match_last_modified_time,
        size: input.if_match_size,
    };
    let done = gw
        .delete(
            &bucket,
            &input.bucket,
            &input.key,
            version,
            bypass,
            |judged| when.check(judged),
        )
        .await
        .map_err(|e| in_bucket(e, &input.bucket))?;
    Ok(S3Response::new(DeleteObjectOutput {
        delete_marker: done.delete_marker.then_some(true),
        version_id: done.version.map(|id| id.to_string()),
        ..Default::default()
    }))
}

pub(super) async fn delete_objects(
    gw: &Gateway,
    mut req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let principal = gw.principal(&req).await?;
    let principal = principal.as_deref();
    let name = req.input.bucket.clone();
    let bucket = gw.bucket(&name).await?;
    // Refused whole, as S3 does, not key by key.
    super::policy::refuse_unpaid(&req, principal, &bucket, &name)?;
    let objects = std::mem::take(&mut req.input.delete.objects);
    let input = &req.input;
    if objects.len() > DELETE_KEYS_MAX {
        return Err(Refusal::Malformed(format!(
            "DeleteObjects takes at most {DELETE_KEYS_MAX} keys"
        ))
        .into());
    }
    let quiet = input.delete.quiet.unwrap_or(false);
    let bypass = input.bypass_governance_retention.unwrap_or(false);
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for object in objects {
        let when = DeleteIf {
            etag: object.e_tag.clone().map(ETagCondition::ETag),
            modified: object.last_modified_time.clone(),
            size: object.size,
        };
        let target = Some(ObjectRef {
            key: &object.key,
            version: object.version_id.as_deref(),
        });
        let action = versioned(
            &object.version_id,
            Action::DeleteObject,
            Action::DeleteObjectVersion,
        );
        let mut checked = gw
            .check(&req, principal, &bucket, action, &name, target)
            .await;
        if bypass && checked.is_ok() {
            let action = Action::BypassGovernanceRetention;
            checked = gw
                .check(&req, principal, &bucket, action, &name, target)
                .await;
        }
        let version = object.version_id.as_deref().map(version_id).transpose();
        let done = match checked.and(version) {
            Ok(version) => gw
                .delete(&bucket, &name, &object.key, version, bypass, |judged| {
                    when.check(judged)
                })
                .await
                .map_err(|e| in_bucket(e, &name)),
            Err(e) => Err(e),
        };
        match done {
            Ok(_) if quiet => {}
            Ok(done) => deleted.push(deleted_object(object, done)),
            Err(e) => errors.push(s3s::dto::Error {
                code: Some(e.code().as_str().into()),
                message: e.message().map(Into::into),
                key: Some(object.key),
                version_id: object.version_id,
            }),
        }
    }
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: Some(deleted),
        errors: (!errors.is_empty()).then_some(errors),
        ..Default::default()
    }))
}

/// What DeleteObjects reports of one deletion: the version asked, and for a delete marker
/// (made, or removed by its id) that it was one and its id.
fn deleted_object(asked: ObjectIdentifier, done: versions::Plan) -> DeletedObject {
    let marker_id = done
        .delete_marker
        .then(|| done.version.map(|id| id.to_string()))
        .flatten();
    DeletedObject {
        delete_marker: done.delete_marker.then_some(true),
        delete_marker_version_id: marker_id,
        key: Some(asked.key),
        version_id: asked.version_id,
    }
}
