//! Who may do what: every verb asks [`Gateway::allowed`] before it touches a bucket, which
//! reads the bucket's owner, policy and public access block and lets `crate::policy`
//! decide. Here too are the verbs on policies (Put, Get and DeleteBucketPolicy,
//! GetBucketPolicyStatus) and on public access blocks.

use std::sync::Arc;

use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};

use super::error::Refusal;
use super::{in_bucket, Gateway, Signer};
use crate::accounts::is_account_id;
use crate::acl::{self, Ownership, Scope};
use crate::layout::ObjectEntry;
use crate::policy::{self, Action, Asked, Context, Decision, Policy, PublicBlock, Verdict};
use crate::serve::Peer;
use crate::{buckets, Error};

/// The object a request acts on: a key, and the version named if any.
#[derive(Clone, Copy, Debug)]
pub(super) struct ObjectRef<'a> {
    pub key: &'a str,
    pub version: Option<&'a str>,
}

impl Gateway {
    /// The user who signed `req`, or `None` for an anonymous request.
    pub(super) async fn principal<T>(&self, req: &S3Request<T>) -> S3Result<Option<String>> {
        match &req.credentials {
            Some(_) => self.user(req).await.map(Some),
            None => Ok(None),
        }
    }

    /// The own policies of the user who signed `req` (none for an anonymous request).
    async fn identity<T>(&self, req: &S3Request<T>) -> S3Result<Option<Arc<Signer>>> {
        match &req.credentials {
            Some(_) => self.signer(req).await.map(Some),
            None => Ok(None),
        }
    }

    /// Refuses `req` where its signer's own policies deny `action` on `resource` (a role's
    /// session: unless the role's allow it): for the verbs that act on no bucket yet
    /// (ListBuckets, CreateBucket).
    pub(super) async fn check_identity<T>(
        &self,
        req: &S3Request<T>,
        action: Action,
        resource: &str,
    ) -> S3Result<()> {
        self.check_own(req, &[action], resource, None).await
    }

    /// [`Gateway::check_identity`] for each of `actions`, with the signer read once; the
    /// tags of `bucket`, if given, are the resource's (`s3:ResourceTag`).
    async fn check_own<T>(
        &self,
        req: &S3Request<T>,
        actions: &[Action],
        resource: &str,
        bucket: Option<&str>,
    ) -> S3Result<()> {
        let Some(signer) = self.identity(req).await? else {
            return Ok(());
        };
        if actions.is_empty() || (signer.policies.is_empty() && signer.bounded.is_none()) {
            return Ok(());
        }
        let mut context = signed_context(req, &signer);
        let mut own = signer.policies.iter().chain(&signer.session_policy);
        if let Some(name) = bucket.filter(|_| own.any(|p| p.reads("s3:resourcetag/"))) {
            let tags = self.bucket_tags(name).await?;
            policy::put_tags(&mut context, "s3:ResourceTag/", &tags);
        }
        for &action in actions {
            let asked = Asked {
                principal: Some(signer.principal()),
                action,
                resource,
                context: &context,
                account: None,
                role: None,
            };
            if let (Verdict::Denied, _) | (Verdict::Silent, Some(_)) =
                (signer.judge(&asked), &signer.bounded)
            {
                return Err(Refusal::Denied {
                    who: Some(signer.principal().to_owned()),
                    action: action.name(),
                    resource: resource.into(),
                }
                .into());
            }
        }
        Ok(())
    }

    /// Refuses a write (PutObject, CopyObject, CreateMultipartUpload) of `key` in bucket
    /// `name` whose settings beyond the object (an ACL, tags, a retention, a legal hold) the
    /// signer's own policies do not let them set, as the verbs that set them later are asked:
    /// a user's deny of `s3:PutObjectAcl` and the like refuses, and a role's session needs
    /// the role's allow. (A bucket's ACL lets its grantees write objects with their ACL, as
    /// in S3.)
    pub(super) async fn check_settings<T>(
        &self,
        req: &S3Request<T>,
        name: &str,
        key: &str,
        acl: &super::acl::AskedAcl,
        tags: bool,
        lock: &crate::lock::Lock,
    ) -> S3Result<()> {
        let settings = [
            (
                acl.canned.is_some() || !acl.grants.is_empty(),
                Action::PutObjectAcl,
            ),
            (tags, Action::PutObjectTagging),
            (lock.retention.is_some(), Action::PutObjectRetention),
            (lock.legal_hold.is_some(), Action::PutObjectLegalHold),
        ];
        let actions: Vec<Action> = settings
            .into_iter()
            .filter_map(|(set, action)| set.then_some(action))
            .collect();
        self.check_own(
            req,
            &actions,
            &policy::resource(name, Some(key)),
            Some(name),
        )
        .await
    }

    async fn bucket_tags(&self, name: &str) -> S3Result<Vec<(String, String)>> {
        buckets::tags(&self.pool, name)
            .await
            .map_err(|e| in_bucket(e, name))
    }

    /// Bucket `name`, if `req` may do `action` on it (on its object `object`, if given).
    pub(super) async fn allowed<T>(
        &self,
        req: &S3Request<T>,
        action: Action,
        name: &str,
        object: Option<ObjectRef<'_>>,
    ) -> S3Result<buckets::Bucket> {
        let principal = self.principal(req).await?;
        let bucket = self.bucket(name).await?;
        self.check(req, principal.as_deref(), &bucket, action, name, object)
            .await?;
        Ok(bucket)
    }

    /// [`Gateway::allowed`] for a verb that reads `object`, with the object's current
    /// version and head when it names no version, read with the bucket in one request, for
    /// [`Gateway::readable`]; `None` when it names one.
    pub(super) async fn allowed_to_read<T>(
        &self,
        req: &S3Request<T>,
        action: Action,
        name: &str,
        object: ObjectRef<'_>,
    ) -> S3Result<(buckets::Bucket, Option<buckets::Current>)> {
        match object.version {
            None => {
                let (bucket, stored) = self.allowed_with_entries(req, action, name, object).await?;
                let current = stored.current().map_err(|e| no_bucket(e, name))?;
                Ok((bucket, Some(current)))
            }
            Some(_) => Ok((self.allowed(req, action, name, Some(object)).await?, None)),
        }
    }

    /// [`Gateway::allowed`] for a verb on `object`'s key, with what the index holds of the
    /// key read with the bucket in one request: for a PUT's commit ([`buckets::Basis`]),
    /// and for a read of the key's current version ([`Gateway::allowed_to_read`]).
    pub(super) async fn allowed_with_entries<T>(
        &self,
        req: &S3Request<T>,
        action: Action,
        name: &str,
        object: ObjectRef<'_>,
    ) -> S3Result<(buckets::Bucket, buckets::Stored)> {
        let principal = self.principal(req).await?;
        let (bucket, stored) = buckets::info_and_stored(&self.pool, name, object.key)
            .await
            .map_err(|e| no_bucket(e, name))?;
        self.check(
            req,
            principal.as_deref(),
            &bucket,
            action,
            name,
            Some(object),
        )
        .await?;
        Ok((bucket, stored))
    }

    /// Bucket `name`, whoever asks: only for a verb that then checks each thing it does
    /// with [`Gateway::check`].
    pub(super) async fn bucket(&self, name: &str) -> S3Result<buckets::Bucket> {
        buckets::info(&self.pool, name)
            .await
            .map_err(|e| no_bucket(e, name))
    }

    /// Checks that `principal`, sending `req`, may do `action` on `bucket` (named `name`),
    /// or on its object `object`: as the owner, under the bucket's policy, or by an ACL
    /// grant; and, if the request names the owner it expects, that the bucket is theirs.
    pub(super) async fn check<T>(
        &self,
        req: &S3Request<T>,
        principal: Option<&str>,
        bucket: &buckets::Bucket,
        action: Action,
        name: &str,
        object: Option<ObjectRef<'_>>,
    ) -> S3Result<()> {
        let key = object.map(|o| o.key);
        let version = object.and_then(|o| o.version);
        let owner = bucket.info.owner.as_str();
        let resource = policy::resource(name, key);
        let expected = req.headers.get("x-amz-expected-bucket-owner");
        if expected.is_some_and(|expected| expected.as_bytes() != owner.as_bytes()) {
            return Err(Refusal::UnexpectedOwner(name.into()).into());
        }
        refuse_unpaid(req, principal, bucket, name)?;
        let signer = self.identity(req).await?;
        self.note_checked(req, name, bucket, judged(principal, signer.as_deref()));
        let denied = || Refusal::Denied {
            who: judged(principal, signer.as_deref()).map(str::to_owned),
            action: action.name(),
            resource: resource.clone(),
        };
        let identity = signer.as_ref().map_or(&[][..], |s| &s.policies[..]);
        // A role's session (or an account's user) is judged as itself, by its own policies
        // and the bucket's alone.
        let plain = signer.as_ref().is_none_or(|s| s.bounded.is_none()) && identity.is_empty();
        let decision = match &bucket.policy {
            // No policy: nothing of the request needs reading for its owner.
            None if plain && principal == Some(owner) => Decision::Allow,
            None if plain => Decision::AskAcl,
            found => {
                let mut context = context(req, principal, signer.as_deref());
                let bound = signer.as_ref().and_then(|s| s.session_policy.as_ref());
                let reads = |prefix: &str| {
                    found
                        .iter()
                        .chain(identity)
                        .chain(bound)
                        .any(|p| p.reads(prefix))
                };
                // s3:ResourceTag is Ceph's gateway's (S3 has none): the object's tags for
                // what is done to an object, the bucket's for the bucket and for writing
                // into it.
                let resource_tags = reads("s3:resourcetag/");
                let writes = matches!(action, Action::PutObject | Action::PutObjectTagging);
                let object_tags = match key
                    .filter(|_| reads("s3:existingobjecttag/") || (resource_tags && !writes))
                {
                    // An object that is not there has no tags; the verb answers for it.
                    Some(key) => (self.object(name, key, version).await)
                        .map(|entry| entry.tags)
                        .unwrap_or_default(),
                    None => Vec::new(),
                };
                policy::put_tags(&mut context, "s3:ExistingObjectTag/", &object_tags);
                if resource_tags {
                    let tags = match key.filter(|_| !writes) {
                        Some(_) => object_tags,
                        None => self.bucket_tags(name).await?,
                    };
                    policy::put_tags(&mut context, "s3:ResourceTag/", &tags);
                }
                let asked = Asked {
                    principal: judged(principal, signer.as_deref()),
                    action,
                    resource: &resource,
                    context: &context,
                    account: None,
                    role: None,
                };
                decide(bucket, signer.as_deref(), &asked)
            }
        };
        match decision {
            Decision::Allow => return self.deliver_due(req, name).await,
            Decision::Deny => return Err(denied().into()),
            Decision::AskAcl => {}
        }
        let entry = match key {
            Some(key) if acl::needed(action).is_some_and(|(scope, _)| scope == Scope::Object) => {
                self.object(name, key, version).await.ok()
            }
            _ => None,
        };
        if acl_grants(bucket, entry.as_ref(), principal, action) {
            self.note_acl_required(req, name);
            return self.deliver_due(req, name).await;
        }
        let reads = matches!(action, Action::GetObject | Action::GetObjectVersion);
        let Some(key) = key.filter(|_| reads) else {
            return Err(denied().into());
        };
        if entry.is_none() && self.may_list(req, bucket, name, key).await? {
            self.object(name, key, version).await?;
        }
        Err(denied().into())
    }

    /// Whether the caller of `req` may list `key` in `bucket` (named `name`): s3:ListBucket
    /// with the key as prefix. Only such a caller learns that a key is missing (404), as in
    /// S3; anyone else gets 403 either way.
    async fn may_list<T>(
        &self,
        req: &S3Request<T>,
        bucket: &buckets::Bucket,
        name: &str,
        key: &str,
    ) -> S3Result<bool> {
        let principal = self.principal(req).await?;
        let signer = self.identity(req).await?;
        let mut context = context(req, principal.as_deref(), signer.as_deref());
        context.insert("s3:prefix".into(), vec![key.into()]);
        let list = Asked {
            principal: judged(principal.as_deref(), signer.as_deref()),
            action: Action::ListBucket,
            resource: &policy::resource(name, None),
            context: &context,
            account: None,
            role: None,
        };
        Ok(match decide(bucket, signer.as_deref(), &list) {
            Decision::Allow => true,
            Decision::Deny => false,
            Decision::AskAcl => acl_grants(bucket, None, principal.as_deref(), Action::ListBucket),
        })
    }

    /// Version `version` of `key` (else its current version) in `bucket` (named `name`),
    /// for a verb that reads it and that `req` may use: a missing one is refused as denied
    /// (403) unless the caller may list it (404).
    pub(super) async fn readable<T>(
        &self,
        req: &S3Request<T>,
        bucket: &buckets::Bucket,
        name: &str,
        key: &str,
        version: Option<&str>,
        current: Option<buckets::Current>,
    ) -> S3Result<ObjectEntry> {
        let found = match current {
            Some(current) => super::current_entry(name, key, current),
            None => self.object(name, key, version).await,
        };
        match found {
            Err(e)
                if matches!(
                    e.code(),
                    S3ErrorCode::NoSuchKey | S3ErrorCode::NoSuchVersion
                ) && !self.may_list(req, bucket, name, key).await? =>
            {
                let signer = self.identity(req).await?;
                let principal = self.principal(req).await?;
                Err(Refusal::Denied {
                    who: judged(principal.as_deref(), signer.as_deref()).map(str::to_owned),
                    action: Action::GetObject.name(),
                    resource: policy::resource(name, Some(key)),
                }
                .into())
            }
            Ok(entry) => {
                let principal = self.principal(req).await?;
                let object = (name, key);
                check_unowned(
                    bucket,
                    &entry,
                    principal.as_deref(),
                    object,
                    Action::GetObject,
                )?;
                Ok(entry)
            }
            refused => refused,
        }
    }
}

/// S3's object ownership: unless the bucket owner owns every object in it
/// (`BucketOwnerEnforced`), an object another user owns is read, its ACL read or changed,
/// only as that object's ACL grants, whatever the bucket's owner or policy allow; the
/// bucket's owner may still delete it, as in S3, and its own owner needs no grant. Asked
/// by the verbs once they have read `entry`, the version of `key` in `bucket` (named
/// `name`) that `principal` does `action` on, so that no request reads anything more.
pub(super) fn check_unowned(
    bucket: &buckets::Bucket,
    entry: &ObjectEntry,
    principal: Option<&str>,
    (name, key): (&str, &str),
    action: Action,
) -> S3Result<()> {
    let owner = bucket.info.owner.as_str();
    let Some(acl) = entry.acl.as_ref().filter(|acl| acl.owner != owner) else {
        return Ok(());
    };
    let enforced = bucket.ownership == Some(Ownership::BucketOwnerEnforced);
    if enforced || principal == Some(acl.owner.as_str()) {
        return Ok(());
    }
    if acl_grants(bucket, Some(entry), principal, action) {
        return Ok(());
    }
    Err(Refusal::Denied {
        who: principal.map(str::to_owned),
        action: action.name(),
        resource: policy::resource(name, Some(key)),
    }
    .into())
}

/// Who a request is judged as: a role's session's ARN or an account's user, else the user
/// who signed it.
fn judged<'a>(principal: Option<&'a str>, signer: Option<&'a Signer>) -> Option<&'a str> {
    match signer {
        Some(signer) if signer.bounded.is_some() => Some(signer.principal()),
        _ => principal,
    }
}

/// The condition keys of `req`, signed by `signer` or from `principal`.
fn context<T>(req: &S3Request<T>, principal: Option<&str>, signer: Option<&Signer>) -> Context {
    match signer {
        Some(signer) => signed_context(req, signer),
        None => request_context(req, principal),
    }
}

/// What the bucket's owner and policy and the signer's own policies say of `asked`:
/// - an account's user, or a session of an account's role: in the account's buckets by
///   [`policy::decide_role`] (its own policies or the bucket's allow it), elsewhere by
///   [`policy::decide_elsewhere`] (both sides allow it, the bucket by its policy or an ACL
///   grant to the account);
/// - a session of an operator's role: by [`policy::decide_role`], but in an account's bucket
///   both sides must allow it (ACLs grant to no role);
/// - an account's root elsewhere, and an operator's user in an account's bucket: by the
///   bucket's allow (its policy or an ACL), their own policies only denying, so that what
///   they allow themselves opens no other account's bucket;
/// - else (the owner, anonymous requests, the operator's users among theirs) by
///   [`policy::decide`].
fn decide(bucket: &buckets::Bucket, signer: Option<&Signer>, asked: &Asked) -> Decision {
    let block = bucket.public_block.unwrap_or_default();
    let policy = bucket.policy.as_ref();
    let owner = &bucket.info.owner;
    let Some(signer) = signer else {
        return policy::decide(owner, asked, policy, block, &[]);
    };
    // A role's session is named by its role's ARN too.
    let role = signer.bounded.as_ref().and_then(|b| b.role.as_deref());
    let asked = &Asked { role, ..*asked };
    let elsewhere = signer.name != *owner;
    let of_account = is_account_id(&signer.name);
    match &signer.bounded {
        Some(_) if of_account && elsewhere => {
            let asked = Asked {
                account: Some(&signer.name),
                ..*asked
            };
            policy::decide_elsewhere(&asked, policy, block, signer.judge(&asked))
        }
        Some(_) if !of_account && is_account_id(owner) => {
            match policy::decide_elsewhere(asked, policy, block, signer.judge(asked)) {
                Decision::AskAcl => Decision::Deny,
                decided => decided,
            }
        }
        Some(_) => {
            let decided = policy::decide_role(asked, policy, block, signer.judge(asked));
            // What a bucket grants a role is bounded by its session's policy, as in AWS:
            // only a grant to the session itself is not.
            match (&signer.session_policy, decided) {
                (Some(session), Decision::Allow) if asked.role.is_some() => {
                    let itself = Asked {
                        role: None,
                        ..*asked
                    };
                    let by_itself =
                        policy::decide_role(&itself, policy, block, signer.judge(&itself));
                    if by_itself == Decision::Allow || session.judge(asked) == Verdict::Allowed {
                        Decision::Allow
                    } else {
                        Decision::Deny
                    }
                }
                (_, decided) => decided,
            }
        }
        None if elsewhere && (is_account_id(owner) || of_account) => {
            let mine = match signer.judge(asked) {
                Verdict::Denied => Verdict::Denied,
                _ => Verdict::Allowed,
            };
            policy::decide_elsewhere(asked, policy, block, mine)
        }
        None => policy::decide(owner, asked, policy, block, &signer.policies),
    }
}

/// A bucket's read that failed, as S3 answers it: `NoSuchBucket` where there is none.
fn no_bucket(e: Error, name: &str) -> s3s::S3Error {
    match e {
        Error::NotFound(_) => Refusal::NoBucket(name.into()).into(),
        e => e.into(),
    }
}

/// [`Gateway::allowed`] for a verb's request, whose input names the bucket (and key):
/// `allowed!(gw, req, ListBucket)` on the bucket, `allowed!(gw, req, object PutObject)` on
/// its object, `allowed!(gw, req, object GetObject / GetObjectVersion)` with the second
/// action where the request names a version; `allowed!(gw, req, read GetObject /
/// GetObjectVersion)` is that through [`Gateway::allowed_to_read`], with the object's
/// current version for [`Gateway::readable`]; `allowed!(gw, req, write PutObject)` is the
/// object's through [`Gateway::allowed_with_entries`], with what the index holds of the key for
/// the commit. `allowed!(gw, req, bypass)` is whether the
/// request asks to bypass governance retention, which it must then be allowed.
macro_rules! allowed {
    (@versioned $req:ident, $plain:ident / $version:ident) => {{
        let action = super::policy::versioned(
            &$req.input.version_id,
            crate::policy::Action::$plain,
            crate::policy::Action::$version,
        );
        let object = super::policy::ObjectRef {
            key: &$req.input.key,
            version: $req.input.version_id.as_deref(),
        };
        (action, object)
    }};
    ($gw:ident, $req:ident, read $plain:ident / $version:ident) => {{
        let (action, object) = allowed!(@versioned $req, $plain / $version);
        $gw.allowed_to_read(&$req, action, &$req.input.bucket, object)
            .await?
    }};
    ($gw:ident, $req:ident, object $plain:ident / $version:ident) => {{
        let (action, object) = allowed!(@versioned $req, $plain / $version);
        $gw.allowed(&$req, action, &$req.input.bucket, Some(object))
            .await?
    }};
    ($gw:ident, $req:ident, object $action:ident) => {{
        let version = super::policy::query(&$req, "versionId");
        let object = super::policy::ObjectRef {
            key: &$req.input.key,
            version: version.as_deref(),
        };
        let action = crate::policy::Action::$action;
        $gw.allowed(&$req, action, &$req.input.bucket, Some(object))
            .await?
    }};
    ($gw:ident, $req:ident, write $action:ident) => {{
        let version = super::policy::query(&$req, "versionId");
        let object = super::policy::ObjectRef {
            key: &$req.input.key,
            version: version.as_deref(),
        };
        let action = crate::policy::Action::$action;
        $gw.allowed_with_entries(&$req, action, &$req.input.bucket, object)
            .await?
    }};
    ($gw:ident, $req:ident, bypass) => {{
        let bypass = $req.input.bypass_governance_retention.unwrap_or(false);
        if bypass {
            let action = crate::policy::Action::BypassGovernanceRetention;
            let object = super::policy::ObjectRef {
                key: &$req.input.key,
                version: $req.input.version_id.as_deref(),
            };
            $gw.allowed(&$req, action, &$req.input.bucket, Some(object))
                .await?;
        }
        bypass
    }};
    ($gw:ident, $req:ident, $action:ident) => {{
        let action = crate::policy::Action::$action;
        $gw.allowed(&$req, action, &$req.input.bucket, None).await?
    }};
}
pub(super) use allowed;

/// Whether an ACL grants `principal` what `action` needs: the bucket's, or that of the
/// object version `object` (read by the caller when the action is on one). ACLs are off
/// where the bucket owner owns every object; public grants count for nothing under
/// `IgnorePublicAcls`.
fn acl_grants(
    bucket: &buckets::Bucket,
    object: Option<&ObjectEntry>,
    principal: Option<&str>,
    action: Action,
) -> bool {
    if bucket.ownership == Some(Ownership::BucketOwnerEnforced) {
        return false;
    }
    let Some((scope, permission)) = acl::needed(action) else {
        return false;
    };
    let ignore_public = bucket.public_block.is_some_and(|b| b.ignore_acls);
    let acl = match scope {
        Scope::Bucket => bucket.acl.as_ref(),
        Scope::Object => object.and_then(|entry| entry.acl.as_ref()),
    };
    acl.is_some_and(|acl| acl.allows(principal, permission, ignore_public))
}

/// `plain` on an object's current version, `version` when the request names a version.
pub(super) fn versioned<V>(version: &Option<V>, plain: Action, version_action: Action) -> Action {
    match version {
        Some(_) => version_action,
        None => plain,
    }
}

/// The value of query parameter `name` of `req`, decoded.
/// S3's rule for a bucket whose requesters pay: anyone but its owner says it pays
/// (`x-amz-request-payer: requester`, in the headers or a presigned URL's query); no one
/// anonymous may.
pub(super) fn refuse_unpaid<T>(
    req: &S3Request<T>,
    principal: Option<&str>,
    bucket: &buckets::Bucket,
    name: &str,
) -> S3Result<()> {
    if !bucket.requester_pays || principal == Some(bucket.info.owner.as_str()) {
        return Ok(());
    }
    let pays = match req.headers.get("x-amz-request-payer") {
        Some(payer) => payer.as_bytes().eq_ignore_ascii_case(b"requester"),
        None => query(req, "x-amz-request-payer")
            .is_some_and(|payer| payer.eq_ignore_ascii_case("requester")),
    };
    match pays && principal.is_some() {
        true => Ok(()),
        false => Err(Refusal::RequesterPays(name.into()).into()),
    }
}

pub(super) fn query<T>(req: &S3Request<T>, name: &str) -> Option<String> {
    let query = req.uri.query()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(given, _)| given == name)
        .map(|(_, value)| value.into_owned())
}

/// The condition keys of `req`, signed by `signer`: with `sts:authentication` true for a
/// session's request.
fn signed_context<T>(req: &S3Request<T>, signer: &Signer) -> Context {
    let mut context = request_context(req, Some(&signer.name));
    if signer.token.is_some() {
        context.insert("sts:authentication".into(), vec!["true".into()]);
    }
    if let Some(bounded) = &signer.bounded {
        // A role's session is not its user: no user name, the session's id, as in AWS. An
        // account's user has its own name and id.
        context.remove("aws:username");
        context.insert("aws:userid".into(), vec![bounded.id.clone()]);
        let kind = match &bounded.username {
            Some(name) => {
                context.insert("aws:username".into(), vec![name.clone()]);
                "User"
            }
            None => "AssumedRole",
        };
        context.insert("aws:principaltype".into(), vec![kind.into()]);
        // Its tags, and their keys as aws:TagKeys (as Ceph's gateway gives them to a
        // role's permission policy).
        policy::put_tags(&mut context, "aws:PrincipalTag/", &bounded.tags);
        policy::put_tag_keys(&mut context, &bounded.tags);
    }
    context
}

/// The condition keys of `req` from `principal`.
fn request_context<T>(req: &S3Request<T>, principal: Option<&str>) -> Context {
    let peer = req.extensions.get::<Peer>();
    let mut context = policy::common_context(
        time::OffsetDateTime::now_utc(),
        peer.map(|peer| (peer.secure, peer.address.ip())),
        principal,
    );
    let mut put = |key: &str, value: String| {
        context
            .entry(key.to_ascii_lowercase())
            .or_default()
            .push(value)
    };
    for (name, value) in &req.headers {
        let Ok(value) = value.to_str() else { continue };
        let name = name.as_str();
        if name.starts_with("x-amz-") {
            put(&format!("s3:{name}"), value.into());
        }
        match name {
            "referer" => put("aws:Referer", value.into()),
            "user-agent" => put("aws:UserAgent", value.into()),
            "x-amz-tagging" => {
                for (tag, tag_value) in form_urlencoded::parse(value.as_bytes()) {
                    put(
                        &format!("s3:RequestObjectTag/{tag}"),
                        tag_value.into_owned(),
                    );
                    put("s3:RequestObjectTagKeys", tag.into_owned());
                }
            }
            _ => {}
        }
    }
    let authorization = req
        .headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let signed = match (authorization, query(req, "X-Amz-Algorithm")) {
        (Some(header), _) if header.starts_with("AWS4-") => {
            Some(("AWS4-HMAC-SHA256", "REST-HEADER"))
        }
        (Some(_), _) => Some(("AWS", "REST-HEADER")),
        (None, Some(_)) => Some(("AWS4-HMAC-SHA256", "REST-QUERY-STRING")),
        (None, None) => query(req, "Signature").map(|_| ("AWS", "REST-QUERY-STRING")),
    };
    let posted = req.extensions.get::<super::post::Posted>();
    let signed = match posted {
        Some(posted) => posted.signature.map(|signature| (signature, "POST")),
        None => signed,
    };
    if let Some((signature, how)) = signed {
        put("s3:signatureversion", signature.into());
        put("s3:authType", how.into());
    }
    for (parameter, key) in [
        ("prefix", "s3:prefix"),
        ("delimiter", "s3:delimiter"),
        ("max-keys", "s3:max-keys"),
        ("versionId", "s3:VersionId"),
    ] {
        if let Some(value) = query(req, parameter) {
            put(key, value);
        }
    }
    context
}

pub(super) async fn put_bucket_policy(
    gw: &Gateway,
    req: S3Request<PutBucketPolicyInput>,
) -> S3Result<S3Response<PutBucketPolicyOutput>> {
    let name = &req.input.bucket;
    let bucket = gw
        .allowed(&req, Action::PutBucketPolicy, name, None)
        .await?;
    let given = Policy::parse(&req.input.policy)
        .and_then(|p| p.check_resources(name).map(|()| p))
        .map_err(Refusal::MalformedPolicy)?
        .binding_owner(req.input.confirm_remove_self_bucket_access == Some(true));
    let block = bucket.public_block.unwrap_or_default();
    if block.block_policy && given.is_public() {
        return Err(Refusal::Blocked("a policy that allows everyone").into());
    }
    buckets::set_policy(&gw.pool, name, Some(&given))
        .await
        .map_err(|e| in_bucket(e, name))?;
    Ok(S3Response::new(PutBucketPolicyOutput::default()))
}

pub(super) async fn get_bucket_policy(
    gw: &Gateway,
    req: S3Request<GetBucketPolicyInput>,
) -> S3Result<S3Response<GetBucketPolicyOutput>> {
    let name = &req.input.bucket;
    let bucket = gw
        .allowed(&req, Action::GetBucketPolicy, name, None)
        .await?;
    let policy = bucket
        .policy
        .ok_or_else(|| Refusal::NoPolicy(name.clone()))?;
    Ok(S3Response::new(GetBucketPolicyOutput {
        policy: Some(policy.into()),
    }))
}

pub(super) async fn delete_bucket_policy(
    gw: &Gateway,
    req: S3Request<DeleteBucketPolicyInput>,
) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
    let name = &req.input.bucket;
    gw.allowed(&req, Action::DeleteBucketPolicy, name, None)
        .await?;
    buckets::set_policy(&gw.pool, name, None)
        .await
        .map_err(|e| in_bucket(e, name))?;
    Ok(S3Response::new(DeleteBucketPolicyOutput::default()))
}

pub(super) async fn get_bucket_policy_status(
    gw: &Gateway,
    req: S3Request<GetBucketPolicyStatusInput>,
) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
    let name = &req.input.bucket;
    let bucket = gw
        .allowed(&req, Action::GetBucketPolicyStatus, name, None)
        .await?;
    let public = bucket.policy.as_ref().is_some_and(Policy::is_public)
        || bucket.acl.as_ref().is_some_and(acl::Acl::is_public);
    Ok(S3Response::new(GetBucketPolicyStatusOutput {
        policy_status: Some(PolicyStatus {
            is_public: Some(public),
        }),
    }))
}

pub(super) async fn put_public_access_block(
    gw: &Gateway,
    req: S3Request<PutPublicAccessBlockInput>,
) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
    let name = &req.input.bucket;
    gw.allowed(&req, Action::PutBucketPublicAccessBlock, name, None)
        .await?;
    let given = &req.input.public_access_block_configuration;
    let block = PublicBlock {
        block_acls: given.block_public_acls.unwrap_or(false),
        ignore_acls: given.ignore_public_acls.unwrap_or(false),
        block_policy: given.block_public_policy.unwrap_or(false),
        restrict_buckets: given.restrict_public_buckets.unwrap_or(false),
    };
    buckets::set_public_block(&gw.pool, name, Some(&block))
        .await
        .map_err(|e| in_bucket(e, name))?;
    Ok(S3Response::new(PutPublicAccessBlockOutput::default()))
}

pub(super) async fn get_public_access_block(
    gw: &Gateway,
    req: S3Request<GetPublicAccessBlockInput>,
) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
    let name = &req.input.bucket;
    let bucket = gw
        .allowed(&req, Action::GetBucketPublicAccessBlock, name, None)
        .await?;
    let block = bucket
        .public_block
        .ok_or_else(|| Refusal::NoPublicBlock(name.clone()))?;
    Ok(S3Response::new(GetPublicAccessBlockOutput {
        public_access_block_configuration: Some(PublicAccessBlockConfiguration {
            block_public_acls: Some(block.block_acls),
            ignore_public_acls: Some(block.ignore_acls),
            block_public_policy: Some(block.block_policy),
            restrict_public_buckets: Some(block.restrict_buckets),
        }),
    }))
}

pub(super) async fn delete_public_access_block(
    gw: &Gateway,
    req: S3Request<DeletePublicAccessBlockInput>,
) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
    let name = &req.input.bucket;
    gw.allowed(&req, Action::PutBucketPublicAccessBlock, name, None)
        .await?;
    buckets::set_public_block(&gw.pool, name, None)
        .await
        .map_err(|e| in_bucket(e, name))?;
    Ok(S3Response::new(DeletePublicAccessBlockOutput::default()))
}
