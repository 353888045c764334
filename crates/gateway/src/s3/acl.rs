//! ACLs: the verbs on them (Get and PutBucketAcl, Get and PutObjectAcl), the ACL that
//! CreateBucket, PutObject, CopyObject and CreateMultipartUpload ask for (a canned one or
//! `x-amz-grant-*` headers), and object ownership (Put, Get and
//! DeleteBucketOwnershipControls), which can turn ACLs off.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::error::Refusal;
use super::policy::{self, allowed};
use super::{in_bucket, Gateway};
use crate::acl::{self, Acl, Named, Ownership};
use crate::policy::Action;
use crate::versions::Amend;
use crate::{accounts, buckets, users};

/// The ACL a request asks for, as given: a canned ACL, or grants by permission, each a
/// header's text.
#[derive(Debug, Default)]
pub(super) struct AskedAcl {
    pub canned: Option<String>,
    pub grants: Vec<(acl::Permission, String)>,
}

/// The [`AskedAcl`] of a request's input: `asked_acl!(input)` for an object's (which has
/// no WRITE grant), `asked_acl!(input, bucket)` for a bucket's.
macro_rules! asked_acl {
    ($input:expr) => {
        asked_acl!(@ $input, [])
    };
    ($input:expr, bucket) => {
        asked_acl!(@ $input, [(crate::acl::Permission::Write, $input.grant_write.clone())])
    };
    (@ $input:expr, [$($extra:expr),*]) => {
        super::acl::AskedAcl {
            canned: $input.acl.as_ref().map(|a| a.as_str().to_owned()),
            grants: [
                (crate::acl::Permission::Read, $input.grant_read.clone()),
                $($extra,)*
                (crate::acl::Permission::ReadAcp, $input.grant_read_acp.clone()),
                (crate::acl::Permission::WriteAcp, $input.grant_write_acp.clone()),
                (crate::acl::Permission::FullControl, $input.grant_full_control.clone()),
            ]
            .into_iter()
            .filter_map(|(permission, given)| given.map(|given| (permission, given)))
            .collect(),
        }
    };
}
pub(super) use asked_acl;

impl Gateway {
    /// The ACL `asked` describes for something `owner` owns in `bucket` (whose owner is
    /// `bucket_owner`; none for a bucket being created), checked against the object
    /// `ownership` (the bucket's, or the one it is created with) and the bucket's public
    /// access block; `None` if nothing was asked.
    pub(super) async fn new_acl(
        &self,
        asked: AskedAcl,
        owner: &str,
        bucket_owner: &str,
        bucket: Option<&buckets::Bucket>,
        ownership: Option<Ownership>,
    ) -> S3Result<Option<Acl>> {
        let acl = match (asked.canned, asked.grants.is_empty()) {
            (None, true) => return Ok(None),
            (Some(_), false) => {
                return Err(Refusal::BadRequest(
                    "give either a canned ACL or x-amz-grant headers, not both",
                )
                .into())
            }
            (Some(canned), true) => {
                let enforced = ownership == Some(Ownership::BucketOwnerEnforced);
                if enforced && canned != "bucket-owner-full-control" {
                    return Err(Refusal::AclsOff.into());
                }
                Acl::canned(&canned, owner, bucket_owner).map_err(Refusal::Invalid)?
            }
            (None, false) => {
                let mut grants = Vec::new();
                for (permission, text) in asked.grants {
                    for named in acl::header_grantees(&text).map_err(Refusal::Invalid)? {
                        grants.push(acl::Grant {
                            grantee: self.grantee(named).await?,
                            permission,
                        });
                    }
                }
                Acl {
                    owner: owner.into(),
                    grants,
                }
            }
        };
        self.checked(acl, bucket).map(Some)
    }

    /// The ACL of an object that `writer` (`None`: anonymous) writes to `bucket`, asking
    /// for `asked`: none where the bucket owner owns it with no grant to others.
    pub(super) async fn object_acl(
        &self,
        writer: Option<&str>,
        asked: AskedAcl,
        bucket: &buckets::Bucket,
    ) -> S3Result<Option<Acl>> {
        let bucket_owner = bucket.info.owner.as_str();
        let canned = asked.canned.as_deref();
        let owner =
            Ownership::object_owner(bucket.ownership, writer, canned, bucket_owner).to_owned();
        let acl = self
            .new_acl(asked, &owner, bucket_owner, Some(bucket), bucket.ownership)
            .await?;
        Ok(acl.or_else(|| (owner != bucket_owner).then(|| Acl::private(&owner))))
    }

    /// `acl`, if `bucket` takes it: ACLs on, and no public grant where public ACLs are
    /// blocked.
    fn checked(&self, acl: Acl, bucket: Option<&buckets::Bucket>) -> S3Result<Acl> {
        let Some(bucket) = bucket else { return Ok(acl) };
        let owner_only = acl.grants.iter().all(|g| {
            g.permission == acl::Permission::FullControl
                && matches!(&g.grantee, acl::Grantee::User(user) if *user == bucket.info.owner)
        });
        if bucket.ownership == Some(Ownership::BucketOwnerEnforced) && !owner_only {
            return Err(Refusal::AclsOff.into());
        }
        if acl.grants.len() > acl::GRANTS_MAX {
            return Err(
                Refusal::Invalid(format!("an ACL has at most {} grants", acl::GRANTS_MAX)).into(),
            );
        }
        if bucket.public_block.is_some_and(|b| b.block_acls) && acl.is_public() {
            return Err(Refusal::Blocked("an ACL that grants to everyone").into());
        }
        Ok(acl)
    }

    /// The grantee a request names: a user of the cluster, or a group.
    async fn grantee(&self, named: Named) -> S3Result<acl::Grantee> {
        match named {
            // A user, or an account (by its id); an account's users are granted through
            // their account.
            Named::Id(id) => match users::get(&self.pool, &id).await? {
                Some(user) if user.account.as_ref().is_none_or(|a| a.root) => {
                    Ok(acl::Grantee::User(id))
                }
                _ => Err(Refusal::Invalid(format!("no user {id} to grant to")).into()),
            },
            Named::Uri(uri) => acl::Grantee::group(&uri)
                .ok_or_else(|| Refusal::Invalid(format!("no group {uri} to grant to")).into()),
            Named::Email(address) => match accounts::by_email(&self.pool, &address).await? {
                Some(account) => Ok(acl::Grantee::User(account)),
                None => Err(Refusal::GrantByEmail(address).into()),
            },
        }
    }

    /// The ACL a PutBucketAcl or PutObjectAcl asks for, in its headers or its body.
    async fn put_acl(
        &self,
        asked: AskedAcl,
        body: Option<AccessControlPolicy>,
        owner: &str,
        bucket: &buckets::Bucket,
    ) -> S3Result<Acl> {
        let given = asked.canned.is_some() || !asked.grants.is_empty();
        match (given, body) {
            (true, Some(_)) => Err(Refusal::BadRequest(
                "give either an ACL in the body or in the headers, not both",
            )
            .into()),
            (true, None) => Ok(self
                .new_acl(
                    asked,
                    owner,
                    &bucket.info.owner,
                    Some(bucket),
                    bucket.ownership,
                )
                .await?
                .unwrap_or_else(|| Acl::private(owner))),
            (false, Some(policy)) => {
                let mut grants = Vec::new();
                for grant in policy.grants.unwrap_or_default() {
                    let (Some(grantee), Some(permission)) = (grant.grantee, grant.permission)
                    else {
                        return Err(Refusal::Malformed(
                            "a Grant names its Grantee and Permission".into(),
                        )
                        .into());
                    };
                    let permission =
                        acl::Permission::parse(permission.as_str()).ok_or_else(|| {
                            Refusal::Malformed(format!(
                                "unknown permission {}",
                                permission.as_str()
                            ))
                        })?;
                    let named = match (
                        grantee.type_.as_str(),
                        grantee.id,
                        grantee.uri,
                        grantee.email_address,
                    ) {
                        (Type::CANONICAL_USER, Some(id), _, _) => Named::Id(id),
                        (Type::GROUP, _, Some(uri), _) => Named::Uri(uri),
                        (Type::AMAZON_CUSTOMER_BY_EMAIL, _, _, Some(address)) => {
                            Named::Email(address)
                        }
                        (other, ..) => {
                            return Err(Refusal::Malformed(format!(
                                "a grantee of type {other} names no one"
                            ))
                            .into())
                        }
                    };
                    grants.push(acl::Grant {
                        grantee: self.grantee(named).await?,
                        permission,
                    });
                }
                self.checked(
                    Acl {
                        owner: owner.into(),
                        grants,
                    },
                    Some(bucket),
                )
            }
            (false, None) => Err(Refusal::Malformed("give an ACL".into()).into()),
        }
    }
}

/// An ACL as S3 answers it: the owner, and the grants.
fn shown(acl: &Acl) -> (Owner, Grants) {
    // Grants to groups first, as Ceph's gateway lists them.
    let (groups, users): (Vec<_>, Vec<_>) = acl
        .grants
        .iter()
        .partition(|g| !matches!(g.grantee, acl::Grantee::User(_)));
    let grants = groups
        .into_iter()
        .chain(users)
        .map(|g| {
            let grantee = match &g.grantee {
                acl::Grantee::User(user) => Grantee {
                    display_name: Some(user.clone()),
                    id: Some(user.clone()),
                    type_: Type::from_static(Type::CANONICAL_USER),
                    email_address: None,
                    uri: None,
                },
                group => Grantee {
                    display_name: None,
                    id: None,
                    type_: Type::from_static(Type::GROUP),
                    email_address: None,
                    uri: group.uri().map(str::to_owned),
                },
            };
            Grant {
                grantee: Some(grantee),
                permission: Some(Permission::from(g.permission.as_str().to_owned())),
            }
        })
        .collect();
    (owner(&acl.owner), grants)
}

/// An owner as S3 names it: the user's name is both its id and its display name.
pub(super) fn owner(user: &str) -> Owner {
    Owner {
        display_name: Some(user.into()),
        id: Some(user.into()),
    }
}

pub(super) async fn get_bucket_acl(
    gw: &Gateway,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    let bucket = allowed!(gw, req, GetBucketAcl);
    let acl = bucket
        .acl
        .unwrap_or_else(|| Acl::private(&bucket.info.owner));
    let (owner, grants) = shown(&acl);
    Ok(S3Response::new(GetBucketAclOutput {
        owner: Some(owner),
        grants: Some(grants),
    }))
}

pub(super) async fn put_bucket_acl(
    gw: &Gateway,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    let bucket = allowed!(gw, req, PutBucketAcl);
    let input = req.input;
    let asked = asked_acl!(input, bucket);
    let acl = gw
        .put_acl(
            asked,
            input.access_control_policy,
            &bucket.info.owner,
            &bucket,
        )
        .await?;
    buckets::set_acl(&gw.pool, &input.bucket, &acl)
        .await
        .map_err(|e| in_bucket(e, &input.bucket))?;
    Ok(S3Response::new(PutBucketAclOutput::default()))
}

pub(super) async fn get_object_acl(
    gw: &Gateway,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let bucket = allowed!(gw, req, object GetObjectAcl / GetObjectVersionAcl);
    let (name, key, version) = (&req.input.bucket, &req.input.key, &req.input.version_id);
    let entry = gw.object(name, key, version.as_deref()).await?;
    let action = policy::versioned(version, Action::GetObjectAcl, Action::GetObjectVersionAcl);
    let principal = gw.principal(&req).await?;
    policy::check_unowned(&bucket, &entry, principal.as_deref(), (name, key), action)?;
    let acl = entry
        .acl
        .unwrap_or_else(|| Acl::private(&bucket.info.owner));
    let (owner, grants) = shown(&acl);
    Ok(S3Response::new(GetObjectAclOutput {
        owner: Some(owner),
        grants: Some(grants),
        ..Default::default()
    }))
}

pub(super) async fn put_object_acl(
    gw: &Gateway,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    let bucket = allowed!(gw, req, object PutObjectAcl / PutObjectVersionAcl);
    let (name, key, version) = (&req.input.bucket, &req.input.key, &req.input.version_id);
    let entry = gw.object(name, key, version.as_deref()).await?;
    let action = policy::versioned(version, Action::PutObjectAcl, Action::PutObjectVersionAcl);
    let principal = gw.principal(&req).await?;
    policy::check_unowned(&bucket, &entry, principal.as_deref(), (name, key), action)?;
    let input = req.input;
    let version = input.version_id.as_deref();
    let owner = entry
        .acl
        .map_or_else(|| bucket.info.owner.clone(), |acl| acl.owner);
    let asked = asked_acl!(input);
    let acl = gw
        .put_acl(asked, input.access_control_policy, &owner, &bucket)
        .await?;
    gw.amend(&bucket, &input.bucket, &input.key, version, Amend::Acl(acl))
        .await?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}

pub(super) async fn put_bucket_ownership_controls(
    gw: &Gateway,
    req: S3Request<PutBucketOwnershipControlsInput>,
) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
    let bucket = allowed!(gw, req, PutBucketOwnershipControls);
    let input = req.input;
    let ownership = match input.ownership_controls.rules.as_slice() {
        [rule] => Ownership::parse(rule.object_ownership.as_str()).ok_or_else(|| {
            Refusal::Malformed(format!(
                "unknown ObjectOwnership {}",
                rule.object_ownership.as_str()
            ))
        })?,
        _ => return Err(Refusal::Malformed("give exactly one ownership rule".into()).into()),
    };
    let shared = bucket.acl.as_ref().is_some_and(|acl| {
        acl.grants
            .iter()
            .any(|g| g.grantee != acl::Grantee::User(bucket.info.owner.clone()))
    });
    if ownership == Ownership::BucketOwnerEnforced && shared {
        return Err(Refusal::SharedAcl(input.bucket.clone()).into());
    }
    buckets::set_ownership(&gw.pool, &input.bucket, Some(ownership))
        .await
        .map_err(|e| in_bucket(e, &input.bucket))?;
    Ok(S3Response::new(PutBucketOwnershipControlsOutput::default()))
}

pub(super) async fn get_bucket_ownership_controls(
    gw: &Gateway,
    req: S3Request<GetBucketOwnershipControlsInput>,
) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
    let bucket = allowed!(gw, req, GetBucketOwnershipControls);
    let ownership = bucket
        .ownership
        .ok_or_else(|| Refusal::NoOwnershipControls(req.input.bucket.clone()))?;
    Ok(S3Response::new(GetBucketOwnershipControlsOutput {
        ownership_controls: Some(OwnershipControls {
            rules: vec![OwnershipControlsRule {
                object_ownership: ObjectOwnership::from(ownership.as_str().to_owned()),
            }],
        }),
    }))
}

pub(super) async fn delete_bucket_ownership_controls(
    gw: &Gateway,
    req: S3Request<DeleteBucketOwnershipControlsInput>,
) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
    allowed!(gw, req, PutBucketOwnershipControls);
    let name = &req.input.bucket;
    buckets::set_ownership(&gw.pool, name, None)
        .await
        .map_err(|e| in_bucket(e, name))?;
    Ok(S3Response::new(
        DeleteBucketOwnershipControlsOutput::default(),
    ))
}
