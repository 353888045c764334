//! The object lock verbs: a bucket's object lock configuration, and the retention and legal
//! hold of an object (or of one of its versions); and the lock that a PUT, a copy or a
//! multipart upload asks for with its headers. The rules themselves are `crate::lock`'s.

use super::policy::allowed;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::error::Refusal;
use super::{in_bucket, timestamp, Gateway};
use crate::buckets::{self, Bucket};
use crate::layout;
use crate::lock::{BucketLock, Lock, Mode, Period, Retention, DAYS_MAX, YEARS_MAX};
use crate::versions::Amend;

/// A date a client gave, in nanoseconds since 1970.
fn date_ns(date: &Timestamp) -> S3Result<u64> {
    let ns = time::OffsetDateTime::from(date.clone()).unix_timestamp_nanos();
    u64::try_from(ns)
        .map_err(|_| Refusal::Invalid("a retain-until date is between 1970 and 2554".into()).into())
}

/// The retention of `mode` until `until`, which must be in the future; `bad_mode` is the
/// refusal of a mode S3 does not name.
fn retention(
    mode: &str,
    until: &Timestamp,
    bad_mode: fn(String) -> Refusal,
) -> S3Result<Retention> {
    let mode = Mode::parse(mode).ok_or_else(|| {
        bad_mode(format!(
            "{mode:?} is not an object lock mode: GOVERNANCE or COMPLIANCE"
        ))
    })?;
    let until_ns = date_ns(until)?;
    if until_ns <= layout::now_ns() {
        return Err(Refusal::Invalid("the retain-until date must be in the future".into()).into());
    }
    Ok(Retention { mode, until_ns })
}

fn legal_hold(status: &str, bad: fn(String) -> Refusal) -> S3Result<bool> {
    match status {
        ObjectLockLegalHoldStatus::ON => Ok(true),
        ObjectLockLegalHoldStatus::OFF => Ok(false),
        _ => Err(bad(format!("{status:?} is not a legal hold status: ON or OFF")).into()),
    }
}

/// The lock that a write's `x-amz-object-lock-*` headers ask for.
pub(super) fn asked(
    mode: Option<&ObjectLockMode>,
    until: Option<&Timestamp>,
    hold: Option<&ObjectLockLegalHoldStatus>,
) -> S3Result<Lock> {
    let retention = match (mode, until) {
        (Some(mode), Some(until)) => Some(retention(mode.as_str(), until, Refusal::Invalid)?),
        (None, None) => None,
        _ => {
            return Err(Refusal::Invalid(
                "x-amz-object-lock-mode and x-amz-object-lock-retain-until-date go together".into(),
            )
            .into())
        }
    };
    let legal_hold = hold
        .map(|h| legal_hold(h.as_str(), Refusal::Invalid))
        .transpose()?;
    Ok(Lock {
        retention,
        legal_hold,
    })
}

/// The lock that a PutObject, CopyObject or CreateMultipartUpload input asks for.
macro_rules! asked_lock {
    ($input:expr) => {
        super::lock::asked(
            $input.object_lock_mode.as_ref(),
            $input.object_lock_retain_until_date.as_ref(),
            $input.object_lock_legal_hold_status.as_ref(),
        )
    };
}
pub(super) use asked_lock;

/// Refuses a lock asked of a bucket without object lock.
pub(super) fn check_allowed(bucket: &Bucket, asked: &Lock) -> S3Result<()> {
    if bucket.lock.is_none() && !asked.is_none() {
        return Err(Refusal::BadRequest(
            "the bucket has no object lock: create it with object lock enabled",
        )
        .into());
    }
    Ok(())
}

/// The lock of an object made at `made_ns` in `bucket` that asked for `asked` (allowed by
/// [`check_allowed`]): its own, else the bucket's default retention, counted from then.
pub(super) fn for_new(bucket: &Bucket, asked: Lock, made_ns: u64) -> Lock {
    match &bucket.lock {
        Some(lock) => lock.for_new(asked, made_ns),
        None => asked,
    }
}

/// How GET and HEAD show an object's lock: mode, retain-until date, legal hold.
pub(super) struct Shown {
    pub mode: Option<ObjectLockMode>,
    pub until: Option<Timestamp>,
    pub legal_hold: Option<ObjectLockLegalHoldStatus>,
}

pub(super) fn shown(lock: &Lock) -> Shown {
    Shown {
        mode: lock
            .retention
            .map(|r| ObjectLockMode::from(r.mode.as_str().to_owned())),
        until: lock.retention.map(|r| timestamp(r.until_ns)),
        legal_hold: lock.legal_hold.map(hold_status),
    }
}

fn hold_status(on: bool) -> ObjectLockLegalHoldStatus {
    let status = if on {
        ObjectLockLegalHoldStatus::ON
    } else {
        ObjectLockLegalHoldStatus::OFF
    };
    ObjectLockLegalHoldStatus::from(status.to_owned())
}

/// `bucket`, which an object lock request on one of its objects needs to have object lock.
fn locked(bucket: Bucket) -> S3Result<Bucket> {
    if bucket.lock.is_none() {
        return Err(Refusal::BadRequest("the bucket has no object lock configuration").into());
    }
    Ok(bucket)
}

/// A default retention as a PutObjectLockConfiguration gives it.
fn default_retention(given: DefaultRetention) -> S3Result<crate::lock::DefaultRetention> {
    let Some(mode) = given.mode.as_ref().and_then(|m| Mode::parse(m.as_str())) else {
        return Err(Refusal::Malformed(
            "a default retention's Mode is GOVERNANCE or COMPLIANCE".into(),
        )
        .into());
    };
    let period = match (given.days, given.years) {
        (Some(days), None) if (1..=DAYS_MAX as i32).contains(&days) => Period::Days(days as u32),
        (None, Some(years)) if (1..=YEARS_MAX as i32).contains(&years) => {
            Period::Years(years as u32)
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(Refusal::RetentionPeriod(format!(
                "a default retention is 1 to {DAYS_MAX} days or 1 to {YEARS_MAX} years"
            ))
            .into())
        }
        _ => {
            return Err(
                Refusal::Malformed("a default retention gives either Days or Years".into()).into(),
            )
        }
    };
    Ok(crate::lock::DefaultRetention { mode, period })
}

pub(super) async fn put_object_lock_configuration(
    gw: &Gateway,
    req: S3Request<PutObjectLockConfigurationInput>,
) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
    allowed!(gw, req, PutBucketObjectLockConfiguration);
    let input = req.input;
    let Some(configuration) = input.object_lock_configuration else {
        return Err(Refusal::Malformed("give an ObjectLockConfiguration".into()).into());
    };
    let enabled = configuration
        .object_lock_enabled
        .as_ref()
        .is_some_and(|e| e.as_str() == ObjectLockEnabled::ENABLED);
    if !enabled {
        return Err(Refusal::Malformed(
            "ObjectLockEnabled is Enabled: object lock cannot be disabled".into(),
        )
        .into());
    }
    let default = match configuration.rule {
        Some(rule) => match rule.default_retention {
            Some(given) => Some(default_retention(given)?),
            None => return Err(Refusal::Malformed("a Rule gives a DefaultRetention".into()).into()),
        },
        None => None,
    };
    buckets::set_lock(&gw.pool, &input.bucket, &BucketLock { default })
        .await
        .map_err(|e| in_bucket(e, &input.bucket))?;
    Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
}

pub(super) async fn get_object_lock_configuration(
    gw: &Gateway,
    req: S3Request<GetObjectLockConfigurationInput>,
) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
    let found = allowed!(gw, req, GetBucketObjectLockConfiguration);
    let bucket = &req.input.bucket;
    let Some(lock) = found.lock else {
        return Err(Refusal::NoLockConfiguration(bucket.clone()).into());
    };
    let rule = lock.default.map(|d| {
        let (days, years) = match d.period {
            Period::Days(days) => (Some(days as i32), None),
            Period::Years(years) => (None, Some(years as i32)),
        };
        ObjectLockRule {
            default_retention: Some(DefaultRetention {
                days,
                years,
                mode: Some(ObjectLockRetentionMode::from(d.mode.as_str().to_owned())),
            }),
        }
    });
    Ok(S3Response::new(GetObjectLockConfigurationOutput {
        object_lock_configuration: Some(ObjectLockConfiguration {
            object_lock_enabled: Some(ObjectLockEnabled::from(
                ObjectLockEnabled::ENABLED.to_owned(),
            )),
            rule,
        }),
    }))
}

pub(super) async fn put_object_retention(
    gw: &Gateway,
    req: S3Request<PutObjectRetentionInput>,
) -> S3Result<S3Response<PutObjectRetentionOutput>> {
    let bucket = locked(allowed!(gw, req, object PutObjectRetention))?;
    let bypass = allowed!(gw, req, bypass);
    let input = req.input;
    let given = input.retention.unwrap_or_default();
    // No mode and no date removes the retention, as S3's.
    let retention = match (given.mode, given.retain_until_date) {
        (Some(mode), Some(until)) => Some(retention(mode.as_str(), &until, Refusal::Malformed)?),
        (None, None) => None,
        _ => {
            return Err(Refusal::Malformed(
                "a Retention gives both its Mode and its RetainUntilDate".into(),
            )
            .into())
        }
    };
    let amend = Amend::Retention { retention, bypass };
    let version = input.version_id.as_deref();
    gw.amend(&bucket, &input.bucket, &input.key, version, amend)
        .await?;
    Ok(S3Response::new(PutObjectRetentionOutput::default()))
}

pub(super) async fn get_object_retention(
    gw: &Gateway,
    req: S3Request<GetObjectRetentionInput>,
) -> S3Result<S3Response<GetObjectRetentionOutput>> {
    locked(allowed!(gw, req, object GetObjectRetention))?;
    let input = req.input;
    let version = input.version_id.as_deref();
    let entry = gw.object(&input.bucket, &input.key, version).await?;
    let Some(retention) = entry.lock.retention else {
        return Err(Refusal::NoObjectLock(format!("{} has no retention", input.key)).into());
    };
    Ok(S3Response::new(GetObjectRetentionOutput {
        retention: Some(ObjectLockRetention {
            mode: Some(ObjectLockRetentionMode::from(
                retention.mode.as_str().to_owned(),
            )),
            retain_until_date: Some(timestamp(retention.until_ns)),
        }),
    }))
}

pub(super) async fn put_object_legal_hold(
    gw: &Gateway,
    req: S3Request<PutObjectLegalHoldInput>,
) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
    let bucket = locked(allowed!(gw, req, object PutObjectLegalHold))?;
    let input = req.input;
    let status = input.legal_hold.and_then(|h| h.status);
    let Some(status) = status else {
        return Err(Refusal::Malformed("a LegalHold gives its Status".into()).into());
    };
    let on = legal_hold(status.as_str(), Refusal::Malformed)?;
    let version = input.version_id.as_deref();
    gw.amend(
        &bucket,
        &input.bucket,
        &input.key,
        version,
        Amend::LegalHold(on),
    )
    .await?;
    Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
}

pub(super) async fn get_object_legal_hold(
    gw: &Gateway,
    req: S3Request<GetObjectLegalHoldInput>,
) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
    locked(allowed!(gw, req, object GetObjectLegalHold))?;
    let input = req.input;
    let version = input.version_id.as_deref();
    let entry = gw.object(&input.bucket, &input.key, version).await?;
    let Some(on) = entry.lock.legal_hold else {
        return Err(Refusal::NoObjectLock(format!("{} has no legal hold", input.key)).into());
    };
    Ok(S3Response::new(GetObjectLegalHoldOutput {
        legal_hold: Some(ObjectLockLegalHold {
            status: Some(hold_status(on)),
        }),
    }))
}
