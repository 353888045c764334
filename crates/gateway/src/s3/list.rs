//! The listing verbs, ListObjects and ListObjectsV2, and the encodings of keys they share
//! with ListMultipartUploads.

use super::policy::allowed;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::error::Refusal;
use super::{etag, in_bucket, modified, timestamp, version_id, Gateway, MAX_KEYS_DEFAULT};
use crate::buckets;
use crate::layout::{self, Version};

impl Gateway {
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
            delimiter.filter(|d| !d.is_empty()),
            after,
            max as usize,
        )
        .await?;
        Ok((listing, max))
    }
}

/// Percent-encodes `text` as S3 does for `encoding-type=url` (all but unreserved characters
/// and '/').
pub(super) fn url_encode(text: &str) -> String {
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

pub(super) fn encoder(encoding: &Option<EncodingType>) -> impl Fn(&str) -> String {
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

/// The objects of a listing page, each with its owner if `bucket_owner` is given (the owner
/// of objects written before ACLs were kept, and of those its ACL gives no other).
fn contents(
    listing: &buckets::Listing,
    encode: &impl Fn(&str) -> String,
    bucket_owner: Option<&str>,
) -> ObjectList {
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
            owner: bucket_owner.map(|bucket_owner| {
                super::acl::owner(entry.acl.as_ref().map_or(bucket_owner, |acl| &acl.owner))
            }),
            ..Default::default()
        })
        .collect()
}

/// The delimiter a listing answers with: the one asked, unless it is empty (which groups
/// nothing, and which S3 leaves out).
fn echoed_delimiter(
    delimiter: &Option<String>,
    encode: &impl Fn(&str) -> String,
) -> Option<String> {
    delimiter.as_deref().filter(|d| !d.is_empty()).map(encode)
}

fn common_prefixes(
    prefixes: &[String],
    encode: &impl Fn(&str) -> String,
) -> Option<CommonPrefixList> {
    (!prefixes.is_empty()).then(|| {
        prefixes
            .iter()
            .map(|p| CommonPrefix {
                prefix: Some(encode(p)),
            })
            .collect()
    })
}

/// The name a continuation token (of a listing of objects or buckets) carries on from.
pub(super) fn continuation(token: &str) -> S3Result<String> {
    Ok(unhex(token).ok_or_else(|| Refusal::Invalid("not a continuation token".into()))?)
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

pub(super) async fn list_objects(
    gw: &Gateway,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let user = allowed!(gw, req, ListBucket).info.owner;
    let input = req.input;
    let (listing, max) = gw
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
        contents: Some(contents(&listing, &encode, Some(&user))),
        common_prefixes: common_prefixes(&listing.prefixes, &encode),
        is_truncated: Some(listing.next.is_some()),
        next_marker: listing.next.as_deref().map(&encode),
        marker: Some(encode(input.marker.as_deref().unwrap_or(""))),
        // Version 1 gives the prefix as asked, even with encoding-type=url (clients decode
        // only its keys, markers and delimiter).
        prefix: Some(input.prefix.unwrap_or_default()),
        delimiter: echoed_delimiter(&input.delimiter, &encode),
        max_keys: Some(max),
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
}

pub(super) async fn list_objects_v2(
    gw: &Gateway,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let user = allowed!(gw, req, ListBucket).info.owner;
    let input = req.input;
    let after = match &input.continuation_token {
        Some(token) => Some(continuation(token)?),
        None => input.start_after.clone(),
    };
    let (listing, max) = gw
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
        contents: Some(contents(
            &listing,
            &encode,
            input.fetch_owner.unwrap_or(false).then_some(&user),
        )),
        common_prefixes: common_prefixes(&listing.prefixes, &encode),
        key_count: Some(count as i32),
        is_truncated: Some(listing.next.is_some()),
        next_continuation_token: listing.next.as_deref().map(|n| layout::hex(n.as_bytes())),
        continuation_token: input.continuation_token,
        start_after: input.start_after.as_deref().map(&encode),
        prefix: Some(encode(input.prefix.as_deref().unwrap_or(""))),
        delimiter: echoed_delimiter(&input.delimiter, &encode),
        max_keys: Some(max),
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
}

pub(super) async fn list_object_versions(
    gw: &Gateway,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let user = allowed!(gw, req, ListBucketVersions).info.owner;
    let input = req.input;
    let max = input
        .max_keys
        .unwrap_or(MAX_KEYS_DEFAULT)
        .clamp(0, MAX_KEYS_DEFAULT);
    let key_marker = input.key_marker.as_deref().filter(|k| !k.is_empty());
    let version_marker = input
        .version_id_marker
        .as_deref()
        .filter(|v| !v.is_empty())
        .map(version_id)
        .transpose()?;
    let marker = key_marker.map(|key| buckets::VersionMarker {
        key,
        id: version_marker,
    });
    let listing = buckets::version_listing(
        &gw.pool,
        &input.bucket,
        input.prefix.as_deref().unwrap_or(""),
        input.delimiter.as_deref(),
        marker,
        max as usize,
    )
    .await
    .map_err(|e| in_bucket(e, &input.bucket))?;
    let encode = encoder(&input.encoding_type);
    let owner = super::acl::owner(&user);
    let mut versions = Vec::new();
    let mut markers = Vec::new();
    for listed in &listing.versions {
        let version_id = Some(listed.id().to_string());
        let key = Some(encode(&listed.key));
        let last_modified = Some(timestamp(listed.version.mtime_ns()));
        match &listed.version {
            Version::Object(entry) => versions.push(ObjectVersion {
                e_tag: Some(etag(entry)),
                is_latest: Some(listed.latest),
                key,
                last_modified,
                owner: Some(
                    entry
                        .acl
                        .as_ref()
                        .map_or(owner.clone(), |acl| super::acl::owner(&acl.owner)),
                ),
                size: Some(entry.size as i64),
                storage_class: Some(ObjectVersionStorageClass::from_static(
                    ObjectVersionStorageClass::STANDARD,
                )),
                version_id,
                ..Default::default()
            }),
            Version::Marker { .. } => markers.push(DeleteMarkerEntry {
                is_latest: Some(listed.latest),
                key,
                last_modified,
                owner: Some(owner.clone()),
                version_id,
            }),
        }
    }
    let (next_key, next_version) = listing.next.clone().unzip();
    Ok(S3Response::new(ListObjectVersionsOutput {
        name: Some(input.bucket),
        versions: (!versions.is_empty()).then_some(versions),
        delete_markers: (!markers.is_empty()).then_some(markers),
        common_prefixes: common_prefixes(&listing.prefixes, &encode),
        is_truncated: Some(listing.next.is_some()),
        next_key_marker: next_key.as_deref().map(&encode),
        next_version_id_marker: next_version.flatten(),
        key_marker: Some(encode(key_marker.unwrap_or(""))),
        version_id_marker: input.version_id_marker,
        prefix: Some(encode(input.prefix.as_deref().unwrap_or(""))),
        delimiter: echoed_delimiter(&input.delimiter, &encode),
        max_keys: Some(max),
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
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
