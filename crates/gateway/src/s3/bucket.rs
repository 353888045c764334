//! The bucket verbs: list, create (with object lock if asked), delete, head, location,
//! default encryption, versioning and request payment.

use super::policy::allowed;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::acl::asked_acl;
use super::error::Refusal;
use super::list::continuation;
use super::{encryption, in_bucket, timestamp, Gateway};
use crate::acl::{Acl, Ownership};
use crate::policy::{self, Action};
use crate::versions::Versioning;
use crate::{buckets, layout, Error};

/// The most buckets one ListBuckets page holds (S3's limit, and its default).
const BUCKETS_PAGE_MAX: i32 = 10_000;

pub(super) async fn list_buckets(
    gw: &Gateway,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let user = gw.user(&req).await?;
    gw.check_identity(&req, Action::ListAllMyBuckets, policy::ALL_BUCKETS)
        .await?;
    let input = req.input;
    let after = input
        .continuation_token
        .as_deref()
        .map(continuation)
        .transpose()?;
    let prefix = input.prefix.as_deref().unwrap_or("");
    let max = input
        .max_buckets
        .unwrap_or(BUCKETS_PAGE_MAX)
        .clamp(1, BUCKETS_PAGE_MAX) as usize;
    // In name order, as the buckets' omap holds them.
    let mut owned: Buckets = buckets::list(&gw.pool)
        .await?
        .into_iter()
        .filter(|(name, info)| {
            info.owner == user
                && name.starts_with(prefix)
                && after.as_ref().is_none_or(|after| name > after)
        })
        .take(max + 1)
        .map(|(name, info)| Bucket {
            name: Some(name),
            creation_date: Some(timestamp(info.created_ns)),
            bucket_region: Some(gw.region.to_string()),
        })
        .collect();
    let next = (owned.len() > max).then(|| {
        owned.truncate(max);
        let last = owned.last().and_then(|b| b.name.as_deref()).unwrap_or("");
        layout::hex(last.as_bytes())
    });
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(owned),
        continuation_token: next,
        prefix: input.prefix,
        owner: Some(Owner {
            display_name: Some(user.clone()),
            id: Some(user),
        }),
    }))
}

pub(super) async fn create_bucket(
    gw: &Gateway,
    req: S3Request<CreateBucketInput>,
) -> S3Result<S3Response<CreateBucketOutput>> {
    let user = gw.user(&req).await?;
    let bucket = &req.input.bucket;
    // s3s has checked S3's other naming rules; these two of DNS's it lets through.
    if bucket.contains(".-") || bucket.contains("-.") {
        return Err(Refusal::BucketName(bucket.clone()).into());
    }
    let resource = policy::resource(bucket, None);
    gw.check_identity(&req, Action::CreateBucket, &resource)
        .await?;
    let ownership = match &req.input.object_ownership {
        Some(given) => Some(Ownership::parse(given.as_str()).ok_or_else(|| {
            Refusal::Invalid(format!("unknown x-amz-object-ownership {}", given.as_str()))
        })?),
        None => None,
    };
    let constraint = req
        .input
        .create_bucket_configuration
        .as_ref()
        .and_then(|c| c.location_constraint.as_ref());
    located(&gw.region, constraint.map(|c| c.as_str()))?;
    let asked = asked_acl!(req.input, bucket);
    let locked = req.input.object_lock_enabled_for_bucket.unwrap_or(false);
    // What the creation sets beyond the bucket, as the verbs that set it later are asked.
    for (setting, action) in [
        (
            asked.canned.is_some() || !asked.grants.is_empty(),
            Action::PutBucketAcl,
        ),
        (locked, Action::PutBucketObjectLockConfiguration),
        (ownership.is_some(), Action::PutBucketOwnershipControls),
    ] {
        if setting {
            gw.check_identity(&req, action, &resource).await?;
        }
    }
    let acl = gw.new_acl(asked, &user, &user, None, ownership).await?;
    let setup = buckets::Setup {
        locked,
        acl: acl.clone(),
        ownership,
    };
    match buckets::create(&gw.pool, bucket, &user, setup).await {
        Ok(()) => {}
        // Asking again for one's own bucket succeeds, as in S3's us-east-1, unless it asks
        // for another ACL than the bucket has (the ACL would not be applied).
        Err(Error::Exists(owner)) if owner == user && same_acl(gw, bucket, acl, &user).await? => {}
        Err(Error::Exists(_)) => return Err(Refusal::BucketTaken(bucket.clone()).into()),
        Err(e) => return Err(e.into()),
    }
    Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{bucket}")),
    }))
}

/// Whether `bucket` has ACL `asked` (`None`: its owner's alone).
async fn same_acl(gw: &Gateway, bucket: &str, asked: Option<Acl>, owner: &str) -> S3Result<bool> {
    let current = gw.bucket(bucket).await?.acl;
    let private = || Acl::private(owner);
    Ok(current.unwrap_or_else(private) == asked.unwrap_or_else(private))
}

pub(super) async fn delete_bucket(
    gw: &Gateway,
    req: S3Request<DeleteBucketInput>,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    allowed!(gw, req, DeleteBucket);
    let bucket = &req.input.bucket;
    match buckets::remove(&gw.pools(), bucket).await {
        Ok(()) => Ok(S3Response::new(DeleteBucketOutput::default())),
        Err(Error::NotEmpty(_)) => Err(Refusal::BucketNotEmpty(bucket.clone()).into()),
        Err(e) => Err(e.into()),
    }
}

pub(super) async fn head_bucket(
    gw: &Gateway,
    req: S3Request<HeadBucketInput>,
) -> S3Result<S3Response<HeadBucketOutput>> {
    allowed!(gw, req, ListBucket);
    Ok(S3Response::new(HeadBucketOutput {
        bucket_region: Some(gw.region.to_string()),
        ..Default::default()
    }))
}

pub(super) async fn get_bucket_location(
    gw: &Gateway,
    req: S3Request<GetBucketLocationInput>,
) -> S3Result<S3Response<GetBucketLocationOutput>> {
    allowed!(gw, req, GetBucketLocation);
    // Every bucket is in the gateway's region; S3 names us-east-1 by no constraint.
    let location_constraint = (*gw.region != *super::REGION_DEFAULT)
        .then(|| BucketLocationConstraint::from(gw.region.to_string()));
    Ok(S3Response::new(GetBucketLocationOutput {
        location_constraint,
    }))
}

/// Whether `region` can name a gateway's region: 1 to 63 lowercase letters, digits and
/// dashes, starting and ending with a letter or digit.
pub fn region_name(region: &str) -> Result<(), String> {
    let fits = (1..=63).contains(&region.len())
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !region.starts_with('-')
        && !region.ends_with('-');
    match fits {
        true => Ok(()),
        false => Err(format!(
            "{region:?} is not a region name: 1 to 63 lowercase letters, digits and dashes"
        )),
    }
}

/// Whether a bucket created with location `constraint` can be in `region`, the gateway's:
/// no constraint, an empty one or the region's own name.
fn located(region: &str, constraint: Option<&str>) -> Result<(), Refusal> {
    match constraint {
        None | Some("") => Ok(()),
        Some(asked) if asked == region => Ok(()),
        Some(asked) => Err(Refusal::Location {
            asked: asked.to_owned(),
            region: region.to_owned(),
        }),
    }
}

pub(super) async fn put_bucket_encryption(
    gw: &Gateway,
    req: S3Request<PutBucketEncryptionInput>,
) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
    allowed!(gw, req, PutEncryptionConfiguration);
    let input = req.input;
    let rules = input.server_side_encryption_configuration.rules;
    let default = match rules.as_slice() {
        [rule] => rule
            .apply_server_side_encryption_by_default
            .as_ref()
            .ok_or(Refusal::Malformed(
                "the rule has no default encryption".into(),
            ))?,
        _ => return Err(Refusal::Malformed("give exactly one rule".into()).into()),
    };
    let sse = encryption::requested(&default.sse_algorithm, &default.kms_master_key_id)?;
    buckets::set_encryption(&gw.pool, &input.bucket, Some(&sse)).await?;
    Ok(S3Response::new(PutBucketEncryptionOutput::default()))
}

pub(super) async fn get_bucket_encryption(
    gw: &Gateway,
    req: S3Request<GetBucketEncryptionInput>,
) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
    let bucket = allowed!(gw, req, GetEncryptionConfiguration);
    let Some(sse) = bucket.encryption else {
        return Err(Refusal::NoDefaultEncryption(req.input.bucket.clone()).into());
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

pub(super) async fn delete_bucket_encryption(
    gw: &Gateway,
    req: S3Request<DeleteBucketEncryptionInput>,
) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
    allowed!(gw, req, PutEncryptionConfiguration);
    let bucket = &req.input.bucket;
    buckets::set_encryption(&gw.pool, bucket, None).await?;
    Ok(S3Response::new(DeleteBucketEncryptionOutput::default()))
}

pub(super) async fn put_bucket_versioning(
    gw: &Gateway,
    req: S3Request<PutBucketVersioningInput>,
) -> S3Result<S3Response<PutBucketVersioningOutput>> {
    allowed!(gw, req, PutBucketVersioning);
    let input = req.input;
    let configuration = input.versioning_configuration;
    if configuration
        .mfa_delete
        .as_ref()
        .is_some_and(|m| m.as_str() == MFADelete::ENABLED)
    {
        return Err(Refusal::NotServed("MFA delete").into());
    }
    let state = match configuration.status.as_ref().map(|s| s.as_str()) {
        Some(BucketVersioningStatus::ENABLED) => Versioning::Enabled,
        Some(BucketVersioningStatus::SUSPENDED) => Versioning::Suspended,
        _ => {
            return Err(
                Refusal::Malformed("the versioning status is Enabled or Suspended".into()).into(),
            )
        }
    };
    buckets::set_versioning(&gw.pool, &input.bucket, state)
        .await
        .map_err(|e| in_bucket(e, &input.bucket))?;
    Ok(S3Response::new(PutBucketVersioningOutput::default()))
}

pub(super) async fn get_bucket_versioning(
    gw: &Gateway,
    req: S3Request<GetBucketVersioningInput>,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    let bucket = allowed!(gw, req, GetBucketVersioning);
    let status = match bucket.versioning {
        Versioning::Unversioned => None,
        Versioning::Enabled => Some(BucketVersioningStatus::ENABLED),
        Versioning::Suspended => Some(BucketVersioningStatus::SUSPENDED),
    };
    Ok(S3Response::new(GetBucketVersioningOutput {
        status: status.map(BucketVersioningStatus::from_static),
        ..Default::default()
    }))
}

/// Who pays for requests to the bucket. Nothing is billed; a bucket whose requesters pay
/// refuses every request of anyone but its owner that does not say it pays (S3's rule,
/// which clients meet with `x-amz-request-payer: requester`), and takes no access logs.
pub(super) async fn put_bucket_request_payment(
    gw: &Gateway,
    req: S3Request<PutBucketRequestPaymentInput>,
) -> S3Result<S3Response<PutBucketRequestPaymentOutput>> {
    allowed!(gw, req, PutBucketRequestPayment);
    let payer = &req.input.request_payment_configuration.payer;
    let requester = match payer.as_str() {
        Payer::REQUESTER => true,
        Payer::BUCKET_OWNER => false,
        other => {
            return Err(Refusal::Malformed(format!(
                "Payer {other} is not Requester or BucketOwner"
            ))
            .into())
        }
    };
    let name = &req.input.bucket;
    buckets::set_requester_pays(&gw.pool, name, requester)
        .await
        .map_err(|e| in_bucket(e, name))?;
    Ok(S3Response::new(PutBucketRequestPaymentOutput::default()))
}

pub(super) async fn get_bucket_request_payment(
    gw: &Gateway,
    req: S3Request<GetBucketRequestPaymentInput>,
) -> S3Result<S3Response<GetBucketRequestPaymentOutput>> {
    let bucket = allowed!(gw, req, GetBucketRequestPayment);
    let payer = match bucket.requester_pays {
        true => Payer::REQUESTER,
        false => Payer::BUCKET_OWNER,
    };
    Ok(S3Response::new(GetBucketRequestPaymentOutput {
        payer: Some(Payer::from_static(payer)),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::{S3Error, S3ErrorCode};

    #[test]
    fn region_names_are_lowercase_letters_digits_and_inner_dashes() {
        for good in ["us-east-1", "default", "a", "eu-2", &"r".repeat(63)] {
            assert!(region_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "US-EAST-1",
            "-east",
            "east-",
            "eu_west",
            "a b",
            &"r".repeat(64),
        ] {
            assert!(region_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_bucket_may_be_located_only_in_the_gateways_region() {
        assert!(located("default", None).is_ok());
        assert!(located("default", Some("")).is_ok());
        assert!(located("default", Some("default")).is_ok());
        let refused = located("default", Some("us-east-1")).expect_err("another region");
        assert_eq!(
            S3Error::from(refused).code(),
            &S3ErrorCode::IllegalLocationConstraintException
        );
        assert!(located("us-east-1", Some("eu-west-1")).is_err());
        assert!(located("us-east-1", Some("us-east-1")).is_ok());
    }
}
