//! The multipart upload verbs: create, upload a part, complete, abort, and list parts and
//! uploads.

use std::collections::HashMap;

use super::policy::allowed;
use s3s::dto::*;
use s3s::{S3Error, S3Request, S3Response, S3Result};

use super::acl::asked_acl;
use super::checksum::{self, asked_checksum, given_checksum, set_checksum, show_checksum};
use super::encryption::CustomerKey;
use super::encryption::{customer_key, write_encryption};
use super::error::Refusal;
use super::list::encoder;
use super::lock::{self, asked_lock};
use super::object::replacing;
use super::tagging;
use super::{
    check_key, content_headers, content_md5, encryption, etag, in_bucket, made_version,
    sorted_metadata, timestamp, write_body, Gateway, MAX_KEYS_DEFAULT,
};
use crate::chunked::Trailers;
use crate::layout::{self, ObjectEntry, PartRecord, Segment, Sse, UploadRecord};
use crate::versions::{Change, VersionId};
use crate::{buckets, data, multipart, Error};

/// S3's limits on multipart uploads: part numbers, and the size of every part but the last.
const PART_NUMBER_MAX: i32 = 10_000;
pub const PART_MIN_BYTES_DEFAULT: u64 = 5 << 20;

impl Gateway {
    /// The record of an upload in progress, or `NoSuchUpload`.
    pub(super) async fn upload(&self, bucket: &str, key: &str, id: &str) -> S3Result<UploadRecord> {
        match multipart::record(&self.pool, bucket, key, id).await {
            Ok(Some(record)) => Ok(record),
            Ok(None) => Err(Refusal::NoUpload(id.into()).into()),
            Err(e) => Err(e.into()),
        }
    }

    fn upload_error(&self, e: Error, id: &str) -> S3Error {
        match e {
            Error::NotFound(_) => Refusal::NoUpload(id.into()).into(),
            e => e.into(),
        }
    }

    /// Records `written` as part `number` of upload `id` (encrypted as `sse`, with
    /// `customer`'s key under SSE-C), and frees the part it replaces; if the upload is
    /// gone, frees `written` instead.
    pub(super) async fn put_part(
        &self,
        id: &str,
        number: u32,
        written: &data::Written,
        sse: &Option<Sse>,
        customer: Option<&CustomerKey>,
    ) -> S3Result<PartRecord> {
        let part = PartRecord {
            segment: written.segment(),
            md5: encryption::etag_bytes(sse, written.md5, &written.instance, customer),
            mtime_ns: layout::now_ns(),
            checksum: written.checksum.as_ref().map(|c| c.digest.clone()),
        };
        match multipart::put_part(&self.pool, id, number, &part).await {
            Ok(old) => {
                if let Some(old) = old {
                    data::remove_segment(&self.data, &old.segment).await;
                }
                Ok(part)
            }
            Err(e) => {
                data::remove_segment(&self.data, &part.segment).await;
                Err(self.upload_error(e, id))
            }
        }
    }
}

/// The stored parts a completion names, in order, after S3's checks: ascending numbers,
/// uploaded parts with matching ETags, every part but the last at least 5 MiB.
fn chosen_parts<'a>(
    asked: &[CompletedPart],
    stored: &'a HashMap<u32, PartRecord>,
    part_min_bytes: u64,
) -> S3Result<Vec<&'a PartRecord>> {
    let mut chosen = Vec::with_capacity(asked.len());
    let mut previous = 0;
    for (i, part) in asked.iter().enumerate() {
        let number = part_number(part.part_number.unwrap_or(0))?;
        if number <= previous {
            return Err(Refusal::PartOrder.into());
        }
        previous = number;
        let Some(stored) = stored.get(&number) else {
            return Err(Refusal::Part(format!("part {number} was not uploaded")).into());
        };
        let md5_hex = layout::hex(&stored.md5);
        if part.e_tag.as_ref().is_some_and(|e| e.value() != md5_hex) {
            return Err(Refusal::Part(format!(
                "part {number}'s ETag is \"{md5_hex}\", not the one given"
            ))
            .into());
        }
        if i + 1 < asked.len() && stored.segment.size < part_min_bytes {
            return Err(Refusal::PartTooSmall {
                number,
                size: stored.segment.size,
                least: part_min_bytes,
            }
            .into());
        }
        chosen.push(stored);
    }
    Ok(chosen)
}

/// The parts a completion lists, with a part number listed several times in a row kept once,
/// as its last entry: a client that sent a part again, and listed both answers, means the
/// part as it was stored last (as RGW reads the list). Other orders are left for
/// `chosen_parts` to refuse.
fn last_of_each_number(mut asked: Vec<CompletedPart>) -> Vec<CompletedPart> {
    asked.reverse();
    asked.dedup_by_key(|part| part.part_number);
    asked.reverse();
    asked
}

/// The ETag of a completed multipart upload: the MD5 of its parts' MD5s, and their count.
fn multipart_etag(md5s: &[[u8; 16]]) -> String {
    use md5::Digest;
    let digest = md5::Md5::digest(md5s.concat());
    format!("{}-{}", layout::hex(&digest), md5s.len())
}

pub(super) fn part_number(number: i32) -> S3Result<u32> {
    if (1..=PART_NUMBER_MAX).contains(&number) {
        Ok(number as u32)
    } else {
        Err(Refusal::Invalid(format!("part numbers are 1 to {PART_NUMBER_MAX}")).into())
    }
}

pub(super) async fn create_multipart_upload(
    gw: &Gateway,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let writer = gw.principal(&req).await?;
    let bucket = allowed!(gw, req, object PutObject);
    check_key(&req.input.key)?;
    let tags = tagging::from_header(req.input.tagging.as_deref())?;
    // The bucket's default retention is added at completion.
    let lock = asked_lock!(req.input)?;
    lock::check_allowed(&bucket, &lock)?;
    let (name, key) = (&req.input.bucket, &req.input.key);
    gw.check_settings(
        &req,
        name,
        key,
        &asked_acl!(req.input),
        !tags.is_empty(),
        &lock,
    )
    .await?;
    let input = req.input;
    let acl = gw
        .object_acl(writer.as_deref(), asked_acl!(input), &bucket)
        .await?;
    let (customer, sse) = write_encryption!(&bucket, input);
    if let Some(Sse::Kms { key }) = &sse {
        encryption::check_kms_key(gw.kms.as_ref(), key).await?;
    }
    let described = encryption::describe(&sse, customer.as_ref());
    let checksum = checksum::for_upload(
        input.checksum_algorithm.as_ref(),
        input.checksum_type.as_ref(),
    )?;
    let record = UploadRecord {
        // As S3 names an anonymous initiator.
        initiator: writer.unwrap_or_else(|| "anonymous".into()),
        initiated_ns: layout::now_ns(),
        headers: content_headers!(input),
        content_type: input.content_type,
        metadata: sorted_metadata(input.metadata),
        sse,
        tags,
        lock,
        acl,
        checksum,
    };
    let id = multipart::create(&gw.pool, &input.bucket, &input.key, &record)
        .await
        .map_err(|e| in_bucket(e, &input.bucket))?;
    Ok(S3Response::new(CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(id),
        server_side_encryption: described.sse,
        ssekms_key_id: described.kms_key,
        sse_customer_algorithm: described.customer_algorithm,
        sse_customer_key_md5: described.customer_key_md5,
        checksum_algorithm: checksum.map(|(algorithm, _)| checksum::shown_algorithm(algorithm)),
        checksum_type: checksum.map(|(_, kind)| checksum::shown_type(kind)),
        ..Default::default()
    }))
}

pub(super) async fn upload_part(
    gw: &Gateway,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    allowed!(gw, req, object PutObject);
    let md5 = content_md5(&req.headers)?;
    let input = req.input;
    let number = part_number(input.part_number)?;
    let record = gw
        .upload(&input.bucket, &input.key, &input.upload_id)
        .await?;
    let customer = customer_key!(input)?;
    encryption::check_customer(&record.sse, customer.as_ref())?;
    let asked = checksum::for_part(record.checksum, asked_checksum!(input, &req.headers)?)?;
    let sealing = gw.sealing(&record.sse, customer.as_ref()).await?;
    let trailers = Trailers::of(req.trailing_headers.as_ref(), &req.extensions);
    let checked = asked.as_ref().map(|c| (c, trailers.as_ref()));
    let body = (input.body, input.content_length);
    let written = write_body(&gw.data, body, md5, checked, sealing).await?;
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
    let mut output = UploadPartOutput {
        e_tag: Some(ETag::Strong(layout::hex(&part.md5))),
        server_side_encryption: described.sse,
        ssekms_key_id: described.kms_key,
        sse_customer_algorithm: described.customer_algorithm,
        sse_customer_key_md5: described.customer_key_md5,
        ..Default::default()
    };
    set_checksum!(output, written.checksum.map(|c| (c.algorithm, c.shown())));
    Ok(S3Response::new(output))
}

pub(super) async fn complete_multipart_upload(
    gw: &Gateway,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let bucket = allowed!(gw, req, object PutObject);
    let input = req.input;
    // An SSE-C upload is completed with its key, as its parts are written.
    let customer = customer_key!(input)?;
    let record = match gw.upload(&input.bucket, &input.key, &input.upload_id).await {
        Ok(record) => record,
        Err(gone) => {
            let (bucket, key, id) = (input.bucket, input.key, input.upload_id);
            return completed_before(gw, bucket, key, &id, customer.as_ref(), gone).await;
        }
    };
    encryption::check_customer(&record.sse, customer.as_ref())?;
    let given_checksum = record
        .checksum
        .and_then(|(algorithm, _)| given_checksum!(input, algorithm).map(str::to_owned));
    let asked = last_of_each_number(
        input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default(),
    );
    if asked.is_empty() {
        return Err(Refusal::Malformed("name at least one part".into()).into());
    }
    // Marked first, so that no part changes between the check below and the commit.
    multipart::mark_completing(&gw.pool, &input.upload_id)
        .await
        .map_err(|e| gw.upload_error(e, &input.upload_id))?;
    let stored: HashMap<u32, PartRecord> = multipart::all_parts(&gw.pool, &input.upload_id)
        .await?
        .into_iter()
        .collect();
    let chosen = chosen_parts(&asked, &stored, gw.part_min_bytes).and_then(|chosen| {
        let checksum = checksum::completed(
            record.checksum,
            &asked,
            &chosen,
            given_checksum.as_deref(),
            input.checksum_type.as_ref(),
        )?;
        Ok((chosen, checksum))
    });
    let (chosen, checksum) = match chosen {
        Ok(chosen) => chosen,
        Err(refused) => {
            multipart::unmark_completing(&gw.pool, &input.upload_id).await;
            return Err(refused);
        }
    };
    let md5s: Vec<[u8; 16]> = chosen.iter().map(|p| p.md5).collect();
    let segments: Vec<Segment> = chosen.iter().map(|p| p.segment.clone()).collect();
    let mut entry = ObjectEntry {
        size: segments.iter().map(|s| s.size).sum(),
        etag: multipart_etag(&md5s),
        mtime_ns: layout::now_ns(),
        content_type: record.content_type,
        metadata: record.metadata,
        segments: segments.clone(),
        sse: record.sse,
        headers: record.headers,
        upload_id: Some(input.upload_id.clone()),
        version: None,
        tags: record.tags,
        lock: record.lock,
        acl: record.acl,
        checksum,
        listed: None,
    };
    entry.lock = lock::for_new(&bucket, record.lock, entry.mtime_ns);
    if let Err(e) = data::list_segments(&gw.data, &mut entry).await {
        multipart::unmark_completing(&gw.pool, &input.upload_id).await;
        return Err(e.into());
    }
    // The list is the completion's own: freed with it if the commit is refused.
    let list = entry.listed.as_ref().map(|listed| listed.segment());
    let drop_list = async || {
        if let Some(list) = &list {
            data::remove_segment(&gw.data, list).await;
        }
    };
    // Not gw.commit: on failure the parts stay with the upload, to complete again. The
    // commit also stops listing the upload, so that a second completion cannot commit it
    // again (as a second version naming the same parts).
    let conditions = (input.if_match.clone(), input.if_none_match.clone());
    let check = replacing(&conditions);
    let change = Change::Put(entry.clone());
    let made = match buckets::apply(
        &gw.pool,
        &input.bucket,
        &input.key,
        bucket.versioning.into(),
        change,
        Some(&input.upload_id),
        check,
    )
    .await
    {
        Ok(plan) => {
            gw.free(plan.freed, &segments).await;
            plan.version
        }
        Err(refused @ (Error::Precondition(_) | Error::NoObject(_))) => {
            drop_list().await;
            multipart::unmark_completing(&gw.pool, &input.upload_id).await;
            return Err(refused.into());
        }
        Err(e) if multipart::is_no_upload(&e, &input.upload_id) => {
            drop_list().await;
            let gone = Refusal::NoUpload(input.upload_id.clone()).into();
            let (bucket, key, id) = (input.bucket, input.key, input.upload_id);
            return completed_before(gw, bucket, key, &id, customer.as_ref(), gone).await;
        }
        // Perhaps committed: a list no entry names is garbage for `coffer gw gc`.
        Err(e) => return Err(in_bucket(e, &input.bucket)),
    };
    let used: Vec<String> = segments.iter().map(|s| s.instance.clone()).collect();
    let parts: Vec<PartRecord> = stored.into_values().collect();
    multipart::finish(&gw.pools(), &input.upload_id, &parts, &used).await;
    Ok(completed(
        input.bucket,
        input.key,
        &entry,
        made_version(made),
        customer.as_ref(),
    ))
}

/// The answer to a completion of an upload no longer listed: if it made the key's current
/// object, S3 answers as it did the first time; else `gone`.
async fn completed_before(
    gw: &Gateway,
    bucket: String,
    key: String,
    upload_id: &str,
    customer: Option<&CustomerKey>,
    gone: S3Error,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    match buckets::entry(&gw.pool, &bucket, &key)
        .await
        .map_err(|e| in_bucket(e, &bucket))?
    {
        Some(entry) if entry.upload_id.as_deref() == Some(upload_id) => {
            encryption::check_customer(&entry.sse, customer)?;
            let version = made_version(entry.version.map(VersionId::from));
            Ok(completed(bucket, key, &entry, version, customer))
        }
        _ => Err(gone),
    }
}

/// The answer to a completion that made `entry` object `key` of `bucket`, as version
/// `version` where versions are kept, with `customer`'s key under SSE-C.
fn completed(
    bucket: String,
    key: String,
    entry: &ObjectEntry,
    version: Option<String>,
    customer: Option<&CustomerKey>,
) -> S3Response<CompleteMultipartUploadOutput> {
    let described = encryption::describe(&entry.sse, customer);
    let mut output = CompleteMultipartUploadOutput {
        location: Some(format!("/{bucket}/{key}")),
        bucket: Some(bucket),
        key: Some(key),
        e_tag: Some(etag(entry)),
        server_side_encryption: described.sse,
        ssekms_key_id: described.kms_key,
        version_id: version,
        ..Default::default()
    };
    show_checksum!(output, entry);
    let mut response = S3Response::new(output);
    // As every other SSE-C answer does; s3s's CompleteMultipartUpload output has no fields
    // for them.
    let customer_headers = [
        (
            "x-amz-server-side-encryption-customer-algorithm",
            described.customer_algorithm,
        ),
        (
            "x-amz-server-side-encryption-customer-key-md5",
            described.customer_key_md5,
        ),
    ];
    for (name, value) in customer_headers {
        if let Some(value) = value.and_then(|v| hyper::header::HeaderValue::from_str(&v).ok()) {
            response.headers.insert(name, value);
        }
    }
    response
}

pub(super) async fn abort_multipart_upload(
    gw: &Gateway,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    allowed!(gw, req, object AbortMultipartUpload);
    let input = req.input;
    gw.upload(&input.bucket, &input.key, &input.upload_id)
        .await?;
    multipart::abort(&gw.pools(), &input.bucket, &input.key, &input.upload_id)
        .await
        .map_err(|e| gw.upload_error(e, &input.upload_id))?;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

pub(super) async fn list_parts(
    gw: &Gateway,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let bucket = allowed!(gw, req, object ListMultipartUploadParts);
    let input = req.input;
    let record = gw
        .upload(&input.bucket, &input.key, &input.upload_id)
        .await?;
    let max = input
        .max_parts
        .unwrap_or(MAX_KEYS_DEFAULT)
        .clamp(0, MAX_KEYS_DEFAULT);
    let after = input.part_number_marker.unwrap_or(0).max(0) as u32;
    let (mut page, more) = multipart::parts(&gw.pool, &input.upload_id, after, max as u32 + 1)
        .await
        .map_err(|e| gw.upload_error(e, &input.upload_id))?;
    let truncated = page.len() > max as usize || more;
    page.truncate(max as usize);
    let next = page.last().map(|(number, _)| *number as i32);
    let parts: Parts = page
        .into_iter()
        .map(|(number, part)| {
            let mut shown = Part {
                part_number: Some(number as i32),
                size: Some(part.segment.size as i64),
                e_tag: Some(ETag::Strong(layout::hex(&part.md5))),
                last_modified: Some(timestamp(part.mtime_ns)),
                ..Default::default()
            };
            let algorithm = record.checksum.map(|(algorithm, _)| algorithm);
            set_checksum!(
                shown,
                algorithm.zip(part.checksum.as_deref().map(crate::checksum::encode))
            );
            shown
        })
        .collect();
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(input.upload_id),
        parts: Some(parts),
        is_truncated: Some(truncated),
        next_part_number_marker: truncated.then_some(next).flatten(),
        part_number_marker: input.part_number_marker,
        max_parts: Some(max),
        initiator: Some(initiator(&record)),
        owner: Some(upload_owner(&record, &bucket)),
        checksum_algorithm: record
            .checksum
            .map(|(algorithm, _)| checksum::shown_algorithm(algorithm)),
        checksum_type: record.checksum.map(|(_, kind)| checksum::shown_type(kind)),
        ..Default::default()
    }))
}

pub(super) async fn list_multipart_uploads(
    gw: &Gateway,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let bucket = allowed!(gw, req, ListBucketMultipartUploads);
    let input = req.input;
    let max = input
        .max_uploads
        .unwrap_or(MAX_KEYS_DEFAULT)
        .clamp(0, MAX_KEYS_DEFAULT);
    let (uploads, truncated) = multipart::list(
        &gw.pool,
        &input.bucket,
        input.prefix.as_deref().unwrap_or(""),
        input.key_marker.as_deref(),
        input.upload_id_marker.as_deref(),
        max as usize,
    )
    .await?;
    let encode = encoder(&input.encoding_type);
    let next = uploads.last().map(|(key, id, _)| (encode(key), id.clone()));
    let listed: MultipartUploadList = uploads
        .into_iter()
        .map(|(key, id, record)| MultipartUpload {
            key: Some(encode(&key)),
            upload_id: Some(id),
            initiated: Some(timestamp(record.initiated_ns)),
            initiator: Some(initiator(&record)),
            owner: Some(upload_owner(&record, &bucket)),
            ..Default::default()
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

/// Who began an upload.
fn initiator(record: &UploadRecord) -> Initiator {
    Initiator {
        display_name: Some(record.initiator.clone()),
        id: Some(record.initiator.clone()),
    }
}

/// Who will own the object an upload makes: as its ACL says, else the bucket's owner.
fn upload_owner(record: &UploadRecord, bucket: &crate::buckets::Bucket) -> Owner {
    let owner = record
        .acl
        .as_ref()
        .map_or(&bucket.info.owner, |acl| &acl.owner);
    super::acl::owner(owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(number: i32, etag: &str) -> CompletedPart {
        CompletedPart {
            part_number: Some(number),
            e_tag: Some(s3s::dto::ETag::Strong(etag.to_owned())),
            ..Default::default()
        }
    }

    #[test]
    fn a_part_listed_twice_in_a_row_counts_as_its_last_entry() {
        let asked = vec![
            part(1, "b"),
            part(1, "a"),
            part(2, "c"),
            part(3, "d"),
            part(3, "e"),
        ];
        let kept: Vec<(Option<i32>, String)> = last_of_each_number(asked)
            .into_iter()
            .map(|p| {
                (
                    p.part_number,
                    p.e_tag.map(|e| e.value().to_owned()).unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            kept,
            vec![
                (Some(1), "a".into()),
                (Some(2), "c".into()),
                (Some(3), "e".into())
            ]
        );
        // Out of order stays out of order, for chosen_parts to refuse.
        let unordered = last_of_each_number(vec![part(2, "x"), part(1, "y"), part(2, "z")]);
        assert_eq!(unordered.len(), 3);
    }
}
