//! GetObjectAttributes: what S3 keeps of an object besides its content (ETag, checksum,
//! parts, storage class, size), as much of it as the request asks for.

use super::policy::allowed;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::checksum::{set_checksum, show_checksum};
use super::encryption::customer_key;
use super::{encryption, modified, Gateway, MAX_KEYS_DEFAULT};
use crate::layout::ObjectEntry;
use crate::versions::VersionId;

/// The parts of a multipart `entry` after part `after`, at most `max` of them.
fn parts(entry: &ObjectEntry, after: i32, max: i32) -> GetObjectAttributesParts {
    let algorithm = entry.checksum.as_ref().map(|c| c.algorithm);
    let digests = entry.checksum.as_ref().map(|c| c.parts.as_slice());
    let listed: Vec<ObjectPart> = entry
        .segments
        .iter()
        .enumerate()
        .map(|(i, segment)| (i as i32 + 1, segment))
        .filter(|(number, _)| *number > after)
        .take(max as usize)
        .map(|(number, segment)| {
            let mut part = ObjectPart {
                part_number: Some(number),
                size: Some(segment.size as i64),
                ..Default::default()
            };
            let digest = digests.and_then(|d| d.get(number as usize - 1));
            set_checksum!(
                part,
                algorithm.zip(digest.map(|d| crate::checksum::encode(d)))
            );
            part
        })
        .collect();
    let last = listed.last().and_then(|part| part.part_number);
    let truncated = last.is_some_and(|last| (last as usize) < entry.segments.len());
    GetObjectAttributesParts {
        is_truncated: Some(truncated),
        max_parts: Some(max),
        next_part_number_marker: last.filter(|_| truncated),
        part_number_marker: Some(after),
        parts: Some(listed),
        total_parts_count: Some(entry.segments.len() as i32),
    }
}

pub(super) async fn get_object_attributes(
    gw: &Gateway,
    req: S3Request<GetObjectAttributesInput>,
) -> S3Result<S3Response<GetObjectAttributesOutput>> {
    let (bucket, current) =
        allowed!(gw, req, read GetObjectAttributes / GetObjectVersionAttributes);
    let (name, key, version) = (&req.input.bucket, &req.input.key, &req.input.version_id);
    let mut entry = gw
        .readable(&req, &bucket, name, key, version.as_deref(), current)
        .await?;
    gw.with_segments(&mut entry).await?;
    let input = req.input;
    let customer = customer_key!(input)?;
    encryption::check_customer(&entry.sse, customer.as_ref())?;
    // One header, its names joined by commas, which s3s leaves as one value.
    let asked: Vec<&str> = input
        .object_attributes
        .iter()
        .flat_map(|names| names.as_str().split(','))
        .map(str::trim)
        .collect();
    let wants = |name: &str| asked.contains(&name);
    let multipart = entry.upload_id.is_some();
    let checksum = (entry.checksum.is_some() && wants(ObjectAttributes::CHECKSUM)).then(|| {
        let mut shown = Checksum::default();
        show_checksum!(shown, entry);
        shown
    });
    let max = input
        .max_parts
        .unwrap_or(MAX_KEYS_DEFAULT)
        .clamp(0, MAX_KEYS_DEFAULT);
    let after = input.part_number_marker.unwrap_or(0).max(0);
    let output = GetObjectAttributesOutput {
        e_tag: wants(ObjectAttributes::ETAG).then(|| ETag::Strong(entry.etag.clone())),
        checksum,
        object_parts: (multipart && wants(ObjectAttributes::OBJECT_PARTS))
            .then(|| parts(&entry, after, max)),
        object_size: wants(ObjectAttributes::OBJECT_SIZE).then_some(entry.size as i64),
        storage_class: wants(ObjectAttributes::STORAGE_CLASS)
            .then(|| StorageClass::from_static(StorageClass::STANDARD)),
        last_modified: Some(modified(&entry)),
        version_id: entry.version.map(|tag| VersionId::from(tag).to_string()),
        ..Default::default()
    };
    Ok(S3Response::new(output))
}

/// A GetObjectAttributes answer's body with its ETag bare, as S3 gives it there (and
/// clients compare it), where s3s 0.14 writes every ETag quoted.
pub(crate) fn unquoted_etag(body: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("<ETag>\"")? + "<ETag>".len();
    let end = start + text[start..].find("</ETag>")?;
    let quoted = &text[start..end];
    let bare = quoted.strip_prefix('"')?.strip_suffix('"')?;
    Some(format!("{}{bare}{}", &text[..start], &text[end..]).into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_etag_loses_its_quotes_and_nothing_else_changes() {
        let body = br#"<?xml version="1.0"?><GetObjectAttributesResponse><ETag>"ab-2"</ETag><ObjectSize>5</ObjectSize></GetObjectAttributesResponse>"#;
        let bare = unquoted_etag(body).expect("an ETag");
        assert_eq!(
            String::from_utf8(bare).expect("text"),
            r#"<?xml version="1.0"?><GetObjectAttributesResponse><ETag>ab-2</ETag><ObjectSize>5</ObjectSize></GetObjectAttributesResponse>"#
        );
        assert_eq!(unquoted_etag(b"<ObjectSize>5</ObjectSize>"), None);
    }
}
