//! Who may do what: every verb asks [`Gateway::allowed`] before it touches a bucket, which
//! reads the bucket's owner, policy and public access block and lets `crate::policy`
//! decide. Here too are the verbs on policies (Put, Get and DeleteBucketPolicy,
//! GetBucketPolicyStatus) and on public access blocks.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::error::Refusal;
use super::{in_bucket, Gateway};
use crate::policy::{self, Action, Asked, Context, Policy, PublicBlock};
use crate::serve::Peer;
use crate::{buckets, Error};

impl Gateway {
    /// The user who signed `req`, or `None` for an anonymous request.
    pub(super) async fn principal<T>(&self, req: &S3Request<T>) -> S3Result<Option<String>> {
        match &req.credentials {
            Some(_) => self.user(req).await.map(Some),
            None => Ok(None),
        }
    }

    /// Bucket `name`, if `req` may do `action` on it (on its object `key`, if given).
    pub(super) async fn allowed<T>(
        &self,
        req: &S3Request<T>,
        action: Action,
        name: &str,
        key: Option<&str>,
    ) -> S3Result<buckets::Bucket> {
        let principal = self.principal(req).await?;
        let bucket = self.bucket(name).await?;
        self.check(req, principal.as_deref(), &bucket, action, name, key)
            .await?;
        Ok(bucket)
    }

    /// Bucket `name`, whoever asks: only for a verb that then checks each thing it does
    /// with [`Gateway::check`].
    pub(super) async fn bucket(&self, name: &str) -> S3Result<buckets::Bucket> {
        match buckets::info(&self.pool, name).await {
            Ok(found) => Ok(found),
            Err(Error::NotFound(_)) => Err(Refusal::NoBucket(name.into()).into()),
            Err(e) => Err(e.into()),
        }
    }

    /// Checks that `principal`, sending `req`, may do `action` on `bucket` (named `name`),
    /// or on its object `key`.
    pub(super) async fn check<T>(
        &self,
        req: &S3Request<T>,
        principal: Option<&str>,
        bucket: &buckets::Bucket,
        action: Action,
        name: &str,
        key: Option<&str>,
    ) -> S3Result<()> {
        let owner = bucket.info.owner.as_str();
        let resource = policy::resource(name, key);
        let denied = || Refusal::Denied {
            who: principal.map(str::to_owned),
            action: action.name(),
            resource: resource.clone(),
        };
        let Some(found) = &bucket.policy else {
            // No policy: the owner only, with no need to read the request further.
            return match principal == Some(owner) {
                true => Ok(()),
                false => Err(denied().into()),
            };
        };
        let mut context = context(req, principal);
        if let Some(key) = key.filter(|_| found.reads("s3:existingobjecttag/")) {
            let version = query(req, "versionId");
            // An object that is not there has no tags; the verb answers for it.
            if let Ok(entry) = self.object(name, key, version.as_deref()).await {
                for (tag, value) in entry.tags {
                    let key = format!("s3:existingobjecttag/{}", tag.to_ascii_lowercase());
                    context.entry(key).or_default().push(value);
                }
            }
        }
        let asked = Asked {
            principal,
            action,
            resource: &resource,
            context: &context,
        };
        let block = bucket.public_block.unwrap_or_default();
        if policy::allowed(owner, &asked, Some(found), block) {
            return Ok(());
        }
        // A caller who may list the key (s3:ListBucket with the key as prefix) learns that
        // it is missing (404), as in S3; anyone else gets 403 either way.
        let Some(key) =
            key.filter(|_| matches!(action, Action::GetObject | Action::GetObjectVersion))
        else {
            return Err(denied().into());
        };
        context.insert("s3:prefix".into(), vec![key.into()]);
        let bucket_resource = policy::resource(name, None);
        let list = Asked {
            principal,
            action: Action::ListBucket,
            resource: &bucket_resource,
            context: &context,
        };
        if policy::allowed(owner, &list, Some(found), block) {
            let version = query(req, "versionId");
            self.object(name, key, version.as_deref()).await?;
        }
        Err(denied().into())
    }
}

/// [`Gateway::allowed`] for a verb's request, whose input names the bucket (and key):
/// `allowed!(gw, req, ListBucket)` on the bucket, `allowed!(gw, req, object PutObject)` on
/// its object, `allowed!(gw, req, object GetObject / GetObjectVersion)` with the second
/// action where the request names a version. `allowed!(gw, req, bypass)` is whether the
/// request asks to bypass governance retention, which it must then be allowed.
macro_rules! allowed {
    ($gw:ident, $req:ident, object $plain:ident / $version:ident) => {{
        let action = super::policy::versioned(
            &$req.input.version_id,
            crate::policy::Action::$plain,
            crate::policy::Action::$version,
        );
        let key = Some($req.input.key.as_str());
        $gw.allowed(&$req, action, &$req.input.bucket, key).await?
    }};
    ($gw:ident, $req:ident, object $action:ident) => {{
        let (action, key) = (
            crate::policy::Action::$action,
            Some($req.input.key.as_str()),
        );
        $gw.allowed(&$req, action, &$req.input.bucket, key).await?
    }};
    ($gw:ident, $req:ident, bypass) => {{
        let bypass = $req.input.bypass_governance_retention.unwrap_or(false);
        if bypass {
            let action = crate::policy::Action::BypassGovernanceRetention;
            let key = Some($req.input.key.as_str());
            $gw.allowed(&$req, action, &$req.input.bucket, key).await?;
        }
        bypass
    }};
    ($gw:ident, $req:ident, $action:ident) => {{
        let action = crate::policy::Action::$action;
        $gw.allowed(&$req, action, &$req.input.bucket, None).await?
    }};
}
pub(super) use allowed;

/// `plain` on an object's current version, `version` when the request names a version.
pub(super) fn versioned<V>(version: &Option<V>, plain: Action, version_action: Action) -> Action {
    match version {
        Some(_) => version_action,
        None => plain,
    }
}

/// The value of query parameter `name` of `req`, decoded.
fn query<T>(req: &S3Request<T>, name: &str) -> Option<String> {
    let query = req.uri.query()?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(given, _)| given == name)
        .map(|(_, value)| value.into_owned())
}

/// The condition keys of `req` from `principal`.
fn context<T>(req: &S3Request<T>, principal: Option<&str>) -> Context {
    let mut context = Context::new();
    let mut put = |key: &str, value: String| {
        context
            .entry(key.to_ascii_lowercase())
            .or_default()
            .push(value)
    };
    let now = time::OffsetDateTime::now_utc();
    if let Ok(text) = now.format(&time::format_description::well_known::Rfc3339) {
        put("aws:CurrentTime", text);
    }
    put("aws:EpochTime", now.unix_timestamp().to_string());
    if let Some(peer) = req.extensions.get::<Peer>() {
        put("aws:SecureTransport", peer.secure.to_string());
        put("aws:SourceIp", peer.address.ip().to_canonical().to_string());
    }
    match principal {
        Some(user) => {
            put("aws:username", user.into());
            put("aws:userid", user.into());
            put("aws:PrincipalType", "User".into());
        }
        None => put("aws:PrincipalType", "Anonymous".into()),
    }
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
    let signature = match (authorization, query(req, "X-Amz-Algorithm")) {
        (Some(header), _) if header.starts_with("AWS4-") => Some("AWS4-HMAC-SHA256"),
        (Some(_), _) => Some("AWS"),
        (None, Some(_)) => Some("AWS4-HMAC-SHA256"),
        (None, None) => query(req, "Signature").map(|_| "AWS"),
    };
    if let Some(signature) = signature {
        put("s3:signatureversion", signature.into());
        let how = if authorization.is_some() {
            "REST-HEADER"
        } else {
            "REST-QUERY-STRING"
        };
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
        .map_err(Refusal::MalformedPolicy)?;
    let block = bucket.public_block.unwrap_or_default();
    if block.block_policy && given.is_public() {
        return Err(Refusal::Denied {
            who: gw.principal(&req).await?,
            action: "set a public policy (the bucket's public access block blocks it)",
            resource: policy::resource(name, None),
        }
        .into());
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
    let public = bucket.policy.as_ref().is_some_and(Policy::is_public);
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
