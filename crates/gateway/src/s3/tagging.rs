//! The tagging verbs: the tags of an object (or of one of its versions), and of a bucket.

use super::policy::allowed;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::error::Refusal;
use super::{in_bucket, Gateway};
use crate::buckets;
use crate::versions::Amend;

/// S3's limits: tags per object and per bucket, and characters per tag key and value.
const OBJECT_TAGS_MAX: usize = 10;
const BUCKET_TAGS_MAX: usize = 50;
const KEY_CHARS_MAX: usize = 128;
const VALUE_CHARS_MAX: usize = 256;

/// Tags, by key.
pub(super) type Tags = Vec<(String, String)>;

/// `tags` checked against S3's rules (at most `max`, keys of 1 to 128 characters and
/// unique, values of at most 256), sorted by key.
fn checked(tags: impl IntoIterator<Item = (String, String)>, max: usize) -> S3Result<Tags> {
    let mut tags: Tags = tags.into_iter().collect();
    if tags.len() > max {
        return Err(Refusal::Tag(format!("{} tags; at most {max} are allowed", tags.len())).into());
    }
    for (key, value) in &tags {
        if key.is_empty() || key.chars().count() > KEY_CHARS_MAX {
            return Err(
                Refusal::Tag(format!("a tag key is 1 to {KEY_CHARS_MAX} characters")).into(),
            );
        }
        if value.chars().count() > VALUE_CHARS_MAX {
            return Err(Refusal::Tag(format!(
                "a tag value is at most {VALUE_CHARS_MAX} characters"
            ))
            .into());
        }
    }
    tags.sort();
    if let Some(pair) = tags.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        return Err(Refusal::Tag(format!("tag key {:?} is given twice", pair[0].0)).into());
    }
    Ok(tags)
}

/// The tags of an `x-amz-tagging` header (a URL query: `a=1&b=2`, a key alone has an
/// empty value), checked.
pub(super) fn from_header(header: Option<&str>) -> S3Result<Tags> {
    let pairs = form_urlencoded::parse(header.unwrap_or("").as_bytes())
        .map(|(key, value)| (key.into_owned(), value.into_owned()));
    checked(pairs, OBJECT_TAGS_MAX)
}

fn from_set(set: TagSet, max: usize) -> S3Result<Tags> {
    checked(
        set.into_iter()
            .map(|tag| (tag.key.unwrap_or_default(), tag.value.unwrap_or_default())),
        max,
    )
}

fn to_set(tags: &Tags) -> TagSet {
    tags.iter()
        .map(|(key, value)| Tag {
            key: Some(key.clone()),
            value: Some(value.clone()),
        })
        .collect()
}

/// The `x-amz-tagging-count` of an object with `tags`, if it has any.
pub(super) fn count(tags: &Tags) -> Option<i32> {
    (!tags.is_empty()).then_some(tags.len() as i32)
}

pub(super) async fn put_object_tagging(
    gw: &Gateway,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let bucket = allowed!(gw, req, object PutObjectTagging / PutObjectVersionTagging);
    let input = req.input;
    let tags = from_set(input.tagging.tag_set, OBJECT_TAGS_MAX)?;
    let version = input.version_id.as_deref();
    let version_id = gw
        .amend(
            &bucket,
            &input.bucket,
            &input.key,
            version,
            Amend::Tags(tags),
        )
        .await?;
    Ok(S3Response::new(PutObjectTaggingOutput { version_id }))
}

pub(super) async fn delete_object_tagging(
    gw: &Gateway,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let bucket = allowed!(gw, req, object DeleteObjectTagging / DeleteObjectVersionTagging);
    let input = req.input;
    let version = input.version_id.as_deref();
    let untagged = Amend::Tags(Vec::new());
    let version_id = gw
        .amend(&bucket, &input.bucket, &input.key, version, untagged)
        .await?;
    Ok(S3Response::new(DeleteObjectTaggingOutput { version_id }))
}

pub(super) async fn get_object_tagging(
    gw: &Gateway,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    allowed!(gw, req, object GetObjectTagging / GetObjectVersionTagging);
    let input = req.input;
    let entry = gw
        .object(&input.bucket, &input.key, input.version_id.as_deref())
        .await?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: to_set(&entry.tags),
        version_id: entry
            .version
            .map(|tag| crate::versions::VersionId::from(tag).to_string()),
    }))
}

pub(super) async fn put_bucket_tagging(
    gw: &Gateway,
    req: S3Request<PutBucketTaggingInput>,
) -> S3Result<S3Response<PutBucketTaggingOutput>> {
    allowed!(gw, req, PutBucketTagging);
    let input = req.input;
    let tags = from_set(input.tagging.tag_set, BUCKET_TAGS_MAX)?;
    buckets::set_tags(&gw.pool, &input.bucket, &tags)
        .await
        .map_err(|e| in_bucket(e, &input.bucket))?;
    Ok(S3Response::new(PutBucketTaggingOutput::default()))
}

pub(super) async fn get_bucket_tagging(
    gw: &Gateway,
    req: S3Request<GetBucketTaggingInput>,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    allowed!(gw, req, GetBucketTagging);
    let bucket = &req.input.bucket;
    let tags = buckets::tags(&gw.pool, bucket)
        .await
        .map_err(|e| in_bucket(e, bucket))?;
    if tags.is_empty() {
        return Err(Refusal::NoTagSet(bucket.clone()).into());
    }
    Ok(S3Response::new(GetBucketTaggingOutput {
        tag_set: to_set(&tags),
    }))
}

pub(super) async fn delete_bucket_tagging(
    gw: &Gateway,
    req: S3Request<DeleteBucketTaggingInput>,
) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
    allowed!(gw, req, PutBucketTagging);
    let bucket = &req.input.bucket;
    buckets::set_tags(&gw.pool, bucket, &Vec::new())
        .await
        .map_err(|e| in_bucket(e, bucket))?;
    Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_tags_decode_sort_and_keep_s3_limits() {
        let tags = from_header(Some("foo=bar&bar&sp%20ace=a+b")).expect("valid");
        assert_eq!(
            tags,
            vec![
                ("bar".into(), String::new()),
                ("foo".into(), "bar".into()),
                ("sp ace".into(), "a b".into()),
            ]
        );
        assert_eq!(from_header(None).expect("none"), Vec::new());
        let ten: Vec<String> = (0..10).map(|i| format!("k{i}=v")).collect();
        assert_eq!(from_header(Some(&ten.join("&"))).expect("ten").len(), 10);
        let code = |header: &str| from_header(Some(header)).err().map(|e| e.code().clone());
        let invalid = Some(s3s::S3ErrorCode::InvalidTag);
        assert_eq!(code(&format!("{}&k10=v", ten.join("&"))), invalid);
        assert_eq!(code(&format!("{}=v", "k".repeat(129))), invalid);
        assert_eq!(code(&format!("k={}", "v".repeat(257))), invalid);
        assert_eq!(
            code(&format!("{}={}", "k".repeat(128), "é".repeat(256))),
            None
        );
        assert_eq!(code("a=1&a=2"), invalid);
        assert_eq!(code("=v"), invalid);
    }
}
