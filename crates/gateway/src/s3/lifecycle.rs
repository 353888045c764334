//! The lifecycle verbs: a bucket's lifecycle rules, set (checked against S3's rules), read
//! and removed; and the `x-amz-expiration` that PUT, GET and HEAD give an object a rule
//! expires. `crate::lifecycle` decides what the rules expire; `maintenance::lifecycle`
//! applies them.

use super::policy::allowed;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::error::Refusal;
use super::{http_date, in_bucket, timestamp, Gateway};
use crate::buckets::{self, Bucket};
use crate::layout::{self, ObjectEntry};
use crate::lifecycle::{self, Expiration, Filter, Lifecycle, Noncurrent, Rule, ID_CHARS_MAX};

/// The most rules one bucket has (S3's limit).
const RULES_MAX: usize = 1000;

fn invalid(why: impl Into<String>) -> s3s::S3Error {
    Refusal::Invalid(why.into()).into()
}

fn malformed(why: impl Into<String>) -> s3s::S3Error {
    Refusal::Malformed(why.into()).into()
}

/// A count of days a rule gives: 1 or more.
fn days(given: i32, what: &str) -> S3Result<u32> {
    u32::try_from(given)
        .ok()
        .filter(|days| *days > 0)
        .ok_or_else(|| invalid(format!("{what} is a positive number of days")))
}

fn size(given: Option<i64>) -> S3Result<Option<u64>> {
    given
        .map(|size| u64::try_from(size).map_err(|_| invalid("object sizes are not negative")))
        .transpose()
}

/// The filter of a rule: its own prefix (S3's older form), or a filter of a prefix, a tag,
/// sizes, or all of them joined by `And`.
fn filter(prefix: Option<String>, given: Option<LifecycleRuleFilter>) -> S3Result<Filter> {
    let Some(given) = given else {
        return Ok(Filter {
            prefix: prefix.unwrap_or_default(),
            rule_prefix: true,
            ..Filter::default()
        });
    };
    if prefix.is_some() {
        return Err(malformed("a rule gives its prefix or a Filter, not both"));
    }
    // S3 takes either one condition or `And`; Ceph's gateway also takes both, and then
    // every condition given must hold, as here.
    let mut tags: Vec<Tag> = given.tag.into_iter().collect();
    let mut prefixes: Vec<String> = given.prefix.into_iter().collect();
    let mut greater = vec![given.object_size_greater_than];
    let mut less = vec![given.object_size_less_than];
    if let Some(and) = given.and {
        prefixes.extend(and.prefix);
        tags.extend(and.tags.unwrap_or_default());
        greater.push(and.object_size_greater_than);
        less.push(and.object_size_less_than);
    }
    // Of two prefixes, only keys with the longer one can match both.
    prefixes.sort_by_key(String::len);
    let prefix = prefixes.last().cloned().unwrap_or_default();
    if prefixes.iter().any(|p| !prefix.starts_with(p.as_str())) {
        return Err(malformed(format!(
            "a Filter's prefixes {prefixes:?} match no key together"
        )));
    }
    let tags = tags
        .into_iter()
        .map(|tag| (tag.key.unwrap_or_default(), tag.value.unwrap_or_default()))
        .collect();
    let sizes = |given: Vec<Option<i64>>| -> S3Result<Vec<u64>> {
        given
            .into_iter()
            .flatten()
            .map(|s| size(Some(s)).map(Option::unwrap_or_default))
            .collect()
    };
    Ok(Filter {
        prefix,
        rule_prefix: false,
        tags,
        size_greater_than: sizes(greater)?.into_iter().max(),
        size_less_than: sizes(less)?.into_iter().min(),
    })
}

/// A rule as PutBucketLifecycleConfiguration gives it, checked.
fn rule(given: LifecycleRule) -> S3Result<Rule> {
    let id = match given.id {
        Some(id) if id.chars().count() > ID_CHARS_MAX => {
            return Err(invalid(format!(
                "a rule id is at most {ID_CHARS_MAX} characters"
            )))
        }
        Some(id) if !id.is_empty() => id,
        _ => layout::hex(&rand::random::<[u8; 8]>()),
    };
    let enabled = match given.status.as_str() {
        ExpirationStatus::ENABLED => true,
        ExpirationStatus::DISABLED => false,
        other => {
            return Err(malformed(format!(
                "rule {id}: its Status is Enabled or Disabled, not {other:?}"
            )))
        }
    };
    if given.transitions.is_some_and(|t| !t.is_empty())
        || given
            .noncurrent_version_transitions
            .is_some_and(|t| !t.is_empty())
    {
        return Err(Refusal::StorageClass(
            "a Coffer cluster has one storage class: lifecycle rules have no transitions",
        )
        .into());
    }
    let (mut expiration, mut expired_marker) = (None, false);
    if let Some(given) = given.expiration {
        expired_marker = given.expired_object_delete_marker.unwrap_or(false);
        expiration = match (given.days, given.date) {
            (Some(n), None) => Some(Expiration::Days(days(n, "an expiration")?)),
            (None, Some(date)) => {
                let at = time::OffsetDateTime::from(date);
                if at.time() != time::Time::MIDNIGHT {
                    return Err(invalid("an expiration date is a midnight, UTC"));
                }
                let ns = u64::try_from(at.unix_timestamp_nanos())
                    .map_err(|_| invalid("an expiration date is after 1970"))?;
                Some(Expiration::Date(ns))
            }
            (None, None) => None,
            (Some(_), Some(_)) => {
                return Err(malformed("an expiration gives Days or a Date, not both"))
            }
        };
        if expiration.is_some() && expired_marker {
            return Err(malformed(
                "ExpiredObjectDeleteMarker goes in an expiration without Days or a Date",
            ));
        }
    }
    let noncurrent = given
        .noncurrent_version_expiration
        .map(|given| -> S3Result<Noncurrent> {
            let Some(n) = given.noncurrent_days else {
                return Err(malformed(
                    "a noncurrent version expiration gives NoncurrentDays",
                ));
            };
            let keep = given
                .newer_noncurrent_versions
                .map(|keep| days(keep, "NewerNoncurrentVersions"))
                .transpose()?;
            Ok(Noncurrent {
                days: days(n, "a noncurrent version expiration")?,
                keep,
            })
        })
        .transpose()?;
    let abort_upload_days = given
        .abort_incomplete_multipart_upload
        .and_then(|a| a.days_after_initiation)
        .map(|n| days(n, "an abort of incomplete multipart uploads"))
        .transpose()?;
    if expiration.is_none()
        && !expired_marker
        && noncurrent.is_none()
        && abort_upload_days.is_none()
    {
        return Err(malformed(format!("rule {id} gives no action")));
    }
    let filter = filter(given.prefix, given.filter)?;
    if abort_upload_days.is_some() && (!filter.tags.is_empty()) {
        return Err(invalid(
            "an abort of incomplete multipart uploads cannot be filtered by tags",
        ));
    }
    Ok(Rule {
        id,
        enabled,
        filter,
        expiration,
        expired_marker,
        noncurrent,
        abort_upload_days,
    })
}

/// A rule as GetBucketLifecycleConfiguration gives it back.
fn given_back(rule: &Rule) -> LifecycleRule {
    let filter = &rule.filter;
    let tags: Vec<Tag> = filter
        .tags
        .iter()
        .map(|(key, value)| Tag {
            key: Some(key.clone()),
            value: Some(value.clone()),
        })
        .collect();
    let conditions = usize::from(!filter.prefix.is_empty())
        + tags.len()
        + usize::from(filter.size_greater_than.is_some())
        + usize::from(filter.size_less_than.is_some());
    let size = |size: Option<u64>| size.map(|s| s as i64);
    let given_filter = if filter.rule_prefix {
        None
    } else if conditions > 1 {
        Some(LifecycleRuleFilter {
            and: Some(LifecycleRuleAndOperator {
                prefix: (!filter.prefix.is_empty()).then(|| filter.prefix.clone()),
                tags: (!tags.is_empty()).then_some(tags),
                object_size_greater_than: size(filter.size_greater_than),
                object_size_less_than: size(filter.size_less_than),
            }),
            ..Default::default()
        })
    } else {
        Some(LifecycleRuleFilter {
            prefix: (!filter.prefix.is_empty()).then(|| filter.prefix.clone()),
            tag: tags.into_iter().next(),
            object_size_greater_than: size(filter.size_greater_than),
            object_size_less_than: size(filter.size_less_than),
            ..Default::default()
        })
    };
    let expiration = (rule.expiration.is_some() || rule.expired_marker).then(|| {
        let (days, date) = match rule.expiration {
            Some(Expiration::Days(days)) => (Some(days as i32), None),
            Some(Expiration::Date(ns)) => (None, Some(timestamp(ns))),
            None => (None, None),
        };
        LifecycleExpiration {
            days,
            date,
            expired_object_delete_marker: rule.expired_marker.then_some(true),
        }
    });
    LifecycleRule {
        id: Some(rule.id.clone()),
        status: ExpirationStatus::from(
            if rule.enabled {
                ExpirationStatus::ENABLED
            } else {
                ExpirationStatus::DISABLED
            }
            .to_owned(),
        ),
        prefix: filter.rule_prefix.then(|| filter.prefix.clone()),
        filter: given_filter,
        expiration,
        noncurrent_version_expiration: rule.noncurrent.map(|n| NoncurrentVersionExpiration {
            noncurrent_days: Some(n.days as i32),
            newer_noncurrent_versions: n.keep.map(|keep| keep as i32),
        }),
        abort_incomplete_multipart_upload: rule.abort_upload_days.map(|days| {
            AbortIncompleteMultipartUpload {
                days_after_initiation: Some(days as i32),
            }
        }),
        noncurrent_version_transitions: None,
        transitions: None,
    }
}

/// The `x-amz-expiration` of the current object `entry` (of `key`) in `bucket`, if a rule
/// expires it: its date (in real days, whatever the gateway's lifecycle day) and the rule's
/// id. (Not for a version asked by id: a current-object rule does not expire those.)
pub(super) fn expiration(bucket: &Bucket, key: &str, entry: &ObjectEntry) -> Option<String> {
    let (at, rule) = bucket
        .lifecycle
        .as_ref()?
        .expiry(key, entry, lifecycle::DAY_NS)?;
    let date = http_date(at)?;
    Some(format!("expiry-date=\"{date}\", rule-id=\"{}\"", rule.id))
}

pub(super) async fn put_bucket_lifecycle_configuration(
    gw: &Gateway,
    req: S3Request<PutBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
    allowed!(gw, req, PutLifecycleConfiguration);
    let input = req.input;
    let given = input
        .lifecycle_configuration
        .map(|c| c.rules)
        .unwrap_or_default();
    if given.is_empty() || given.len() > RULES_MAX {
        return Err(malformed(format!(
            "a lifecycle configuration has 1 to {RULES_MAX} rules"
        )));
    }
    let rules = given.into_iter().map(rule).collect::<S3Result<Vec<_>>>()?;
    let mut ids: Vec<&str> = rules.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    if let Some(twice) = ids.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(invalid(format!("rule id {:?} is given twice", twice[0])));
    }
    buckets::set_lifecycle(&gw.pool, &input.bucket, Some(&Lifecycle { rules }))
        .await
        .map_err(|e| in_bucket(e, &input.bucket))?;
    Ok(S3Response::new(
        PutBucketLifecycleConfigurationOutput::default(),
    ))
}

pub(super) async fn get_bucket_lifecycle_configuration(
    gw: &Gateway,
    req: S3Request<GetBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
    let bucket_found = allowed!(gw, req, GetLifecycleConfiguration);
    let bucket = &req.input.bucket;
    let Some(lifecycle) = bucket_found.lifecycle else {
        return Err(Refusal::NoLifecycle(bucket.clone()).into());
    };
    Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
        rules: Some(lifecycle.rules.iter().map(given_back).collect()),
        ..Default::default()
    }))
}

pub(super) async fn delete_bucket_lifecycle(
    gw: &Gateway,
    req: S3Request<DeleteBucketLifecycleInput>,
) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
    allowed!(gw, req, PutLifecycleConfiguration);
    let bucket = &req.input.bucket;
    buckets::set_lifecycle(&gw.pool, bucket, None)
        .await
        .map_err(|e| in_bucket(e, bucket))?;
    Ok(S3Response::new(DeleteBucketLifecycleOutput::default()))
}
