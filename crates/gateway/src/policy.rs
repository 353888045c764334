//! Bucket policies, users' own policies and public access blocks: who may do what to a
//! bucket and its objects beyond its owner. Pure code: the gateway gives each request's
//! principal, action, resource and condition keys ([`Asked`]), and [`decide`] decides,
//! leaving to ACLs (`crate::acl`) what it does not.
//!
//! A policy is the IAM policy grammar S3 takes: statements that allow or deny actions
//! (`s3:GetObject`, `s3:*`) on resources (`arn:aws:s3:::bucket/prefix*`) to principals
//! (`*`, a user's ARN or name), under conditions on the request (`StringEquals`,
//! `StringLike`, `Numeric…`, `Date…`, `Bool`, `IpAddress`, `Null`, `Arn…`, with
//! `…IfExists`, `ForAnyValue:` and `ForAllValues:`). An explicit deny wins over everything,
//! the owner included (except a bucket policy's over the policy verbs, so that an owner can
//! never lock itself out); the owner needs no allow; anyone else needs one.
//!
//! A user's own policies (IAM inline user policies, [`Policy::parse_identity`]) are the same
//! grammar without principals: they speak of the user they are attached to. Their deny wins
//! as a bucket policy's does, over the owner too; their allow opens other users' buckets, as
//! in Ceph's gateway, whose users are one account's.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// The largest policy S3 takes (20 KiB).
pub const POLICY_BYTES_MAX: usize = 20 * 1024;

/// What a request asks to do, as policies name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    ListBucket,
    ListBucketVersions,
    ListBucketMultipartUploads,
    GetBucketLocation,
    DeleteBucket,
    GetEncryptionConfiguration,
    PutEncryptionConfiguration,
    GetBucketVersioning,
    PutBucketVersioning,
    GetBucketTagging,
    PutBucketTagging,
    GetBucketObjectLockConfiguration,
    PutBucketObjectLockConfiguration,
    GetLifecycleConfiguration,
    PutLifecycleConfiguration,
    GetBucketPolicy,
    PutBucketPolicy,
    DeleteBucketPolicy,
    GetBucketPolicyStatus,
    GetBucketPublicAccessBlock,
    PutBucketPublicAccessBlock,
    GetBucketAcl,
    PutBucketAcl,
    GetBucketOwnershipControls,
    PutBucketOwnershipControls,
    /// Reading a bucket's CORS rules.
    GetBucketCors,
    PutBucketLogging,
    GetBucketLogging,
    PutBucketRequestPayment,
    GetBucketRequestPayment,
    /// Setting or removing them.
    PutBucketCors,
    GetObject,
    GetObjectVersion,
    GetObjectAttributes,
    GetObjectVersionAttributes,
    GetObjectTorrent,
    PutObject,
    DeleteObject,
    DeleteObjectVersion,
    AbortMultipartUpload,
    ListMultipartUploadParts,
    GetObjectTagging,
    GetObjectVersionTagging,
    PutObjectTagging,
    PutObjectVersionTagging,
    DeleteObjectTagging,
    DeleteObjectVersionTagging,
    GetObjectRetention,
    PutObjectRetention,
    GetObjectLegalHold,
    PutObjectLegalHold,
    BypassGovernanceRetention,
    GetObjectAcl,
    GetObjectVersionAcl,
    PutObjectAcl,
    PutObjectVersionAcl,
    /// ListBuckets, on the resource [`ALL_BUCKETS`].
    ListAllMyBuckets,
    CreateBucket,
    /// The IAM verbs on a user's policies, on the resource [`user_resource`].
    PutUserPolicy,
    GetUserPolicy,
    ListUserPolicies,
    DeleteUserPolicy,
    /// STS's temporary credentials of the user who asks, on the resource `*`.
    GetSessionToken,
    /// The IAM verbs on roles, on the resource `crate::roles::arn`.
    CreateRole,
    GetRole,
    ListRoles,
    DeleteRole,
    UpdateAssumeRolePolicy,
    PutRolePolicy,
    GetRolePolicy,
    ListRolePolicies,
    DeleteRolePolicy,
    UpdateRole,
    /// STS's session of a role, on the role's ARN: asked of the caller's own policies and
    /// of the role's trust policy.
    AssumeRole,
    /// STS's session of a role for a web identity, on the role's ARN: asked of the
    /// role's trust policy, for the provider (`Federated`).
    AssumeRoleWithWebIdentity,
    /// Passing session tags with AssumeRole or in a web identity token: asked of the
    /// role's trust policy beside the session itself.
    TagSession,
    /// The IAM verbs on an account's users and their keys, on the user's ARN
    /// (`crate::accounts::member_arn`).
    CreateUser,
    GetUser,
    UpdateUser,
    DeleteUser,
    ListUsers,
    CreateAccessKey,
    UpdateAccessKey,
    DeleteAccessKey,
    ListAccessKeys,
    /// IAM's counts of what the caller's account holds, on the resource `*`.
    GetAccountSummary,
    /// The managed policies of a user or a role, on its ARN.
    AttachUserPolicy,
    DetachUserPolicy,
    ListAttachedUserPolicies,
    AttachRolePolicy,
    DetachRolePolicy,
    ListAttachedRolePolicies,
    /// The groups a user is in, on the user's ARN.
    ListGroupsForUser,
    /// The IAM verbs on an account's groups, on the group's ARN (`crate::groups::arn`).
    CreateGroup,
    GetGroup,
    UpdateGroup,
    DeleteGroup,
    ListGroups,
    AddUserToGroup,
    RemoveUserFromGroup,
    PutGroupPolicy,
    GetGroupPolicy,
    ListGroupPolicies,
    DeleteGroupPolicy,
    AttachGroupPolicy,
    DetachGroupPolicy,
    ListAttachedGroupPolicies,
    /// The IAM verbs on an account's OpenID Connect providers, on the provider's ARN
    /// (`crate::oidc::arn`).
    CreateOpenIDConnectProvider,
    GetOpenIDConnectProvider,
    ListOpenIDConnectProviders,
    DeleteOpenIDConnectProvider,
    AddClientIDToOpenIDConnectProvider,
    RemoveClientIDFromOpenIDConnectProvider,
    UpdateOpenIDConnectProviderThumbprint,
}

impl Action {
    /// The action's name in policies.
    pub fn name(self) -> &'static str {
        use Action::*;
        match self {
            ListBucket => "s3:ListBucket",
            ListBucketVersions => "s3:ListBucketVersions",
            ListBucketMultipartUploads => "s3:ListBucketMultipartUploads",
            GetBucketLocation => "s3:GetBucketLocation",
            DeleteBucket => "s3:DeleteBucket",
            GetEncryptionConfiguration => "s3:GetEncryptionConfiguration",
            PutEncryptionConfiguration => "s3:PutEncryptionConfiguration",
            GetBucketVersioning => "s3:GetBucketVersioning",
            PutBucketVersioning => "s3:PutBucketVersioning",
            GetBucketTagging => "s3:GetBucketTagging",
            PutBucketTagging => "s3:PutBucketTagging",
            GetBucketObjectLockConfiguration => "s3:GetBucketObjectLockConfiguration",
            PutBucketObjectLockConfiguration => "s3:PutBucketObjectLockConfiguration",
            GetLifecycleConfiguration => "s3:GetLifecycleConfiguration",
            PutLifecycleConfiguration => "s3:PutLifecycleConfiguration",
            GetBucketPolicy => "s3:GetBucketPolicy",
            PutBucketPolicy => "s3:PutBucketPolicy",
            DeleteBucketPolicy => "s3:DeleteBucketPolicy",
            GetBucketPolicyStatus => "s3:GetBucketPolicyStatus",
            GetBucketPublicAccessBlock => "s3:GetBucketPublicAccessBlock",
            PutBucketPublicAccessBlock => "s3:PutBucketPublicAccessBlock",
            GetBucketAcl => "s3:GetBucketAcl",
            PutBucketAcl => "s3:PutBucketAcl",
            GetBucketOwnershipControls => "s3:GetBucketOwnershipControls",
            PutBucketOwnershipControls => "s3:PutBucketOwnershipControls",
            GetBucketCors => "s3:GetBucketCORS",
            PutBucketLogging => "s3:PutBucketLogging",
            GetBucketLogging => "s3:GetBucketLogging",
            PutBucketRequestPayment => "s3:PutBucketRequestPayment",
            GetBucketRequestPayment => "s3:GetBucketRequestPayment",
            PutBucketCors => "s3:PutBucketCORS",
            GetObject => "s3:GetObject",
            GetObjectVersion => "s3:GetObjectVersion",
            GetObjectAttributes => "s3:GetObjectAttributes",
            GetObjectVersionAttributes => "s3:GetObjectVersionAttributes",
            GetObjectTorrent => "s3:GetObjectTorrent",
            PutObject => "s3:PutObject",
            DeleteObject => "s3:DeleteObject",
            DeleteObjectVersion => "s3:DeleteObjectVersion",
            AbortMultipartUpload => "s3:AbortMultipartUpload",
            ListMultipartUploadParts => "s3:ListMultipartUploadParts",
            GetObjectTagging => "s3:GetObjectTagging",
            GetObjectVersionTagging => "s3:GetObjectVersionTagging",
            PutObjectTagging => "s3:PutObjectTagging",
            PutObjectVersionTagging => "s3:PutObjectVersionTagging",
            DeleteObjectTagging => "s3:DeleteObjectTagging",
            DeleteObjectVersionTagging => "s3:DeleteObjectVersionTagging",
            GetObjectRetention => "s3:GetObjectRetention",
            PutObjectRetention => "s3:PutObjectRetention",
            GetObjectLegalHold => "s3:GetObjectLegalHold",
            PutObjectLegalHold => "s3:PutObjectLegalHold",
            BypassGovernanceRetention => "s3:BypassGovernanceRetention",
            GetObjectAcl => "s3:GetObjectAcl",
            GetObjectVersionAcl => "s3:GetObjectVersionAcl",
            PutObjectAcl => "s3:PutObjectAcl",
            PutObjectVersionAcl => "s3:PutObjectVersionAcl",
            ListAllMyBuckets => "s3:ListAllMyBuckets",
            CreateBucket => "s3:CreateBucket",
            PutUserPolicy => "iam:PutUserPolicy",
            GetUserPolicy => "iam:GetUserPolicy",
            ListUserPolicies => "iam:ListUserPolicies",
            DeleteUserPolicy => "iam:DeleteUserPolicy",
            GetSessionToken => "sts:GetSessionToken",
            CreateRole => "iam:CreateRole",
            GetRole => "iam:GetRole",
            ListRoles => "iam:ListRoles",
            DeleteRole => "iam:DeleteRole",
            UpdateAssumeRolePolicy => "iam:UpdateAssumeRolePolicy",
            PutRolePolicy => "iam:PutRolePolicy",
            GetRolePolicy => "iam:GetRolePolicy",
            ListRolePolicies => "iam:ListRolePolicies",
            DeleteRolePolicy => "iam:DeleteRolePolicy",
            UpdateRole => "iam:UpdateRole",
            AssumeRole => "sts:AssumeRole",
            AssumeRoleWithWebIdentity => "sts:AssumeRoleWithWebIdentity",
            TagSession => "sts:TagSession",
            CreateUser => "iam:CreateUser",
            GetUser => "iam:GetUser",
            UpdateUser => "iam:UpdateUser",
            DeleteUser => "iam:DeleteUser",
            ListUsers => "iam:ListUsers",
            CreateAccessKey => "iam:CreateAccessKey",
            UpdateAccessKey => "iam:UpdateAccessKey",
            DeleteAccessKey => "iam:DeleteAccessKey",
            ListAccessKeys => "iam:ListAccessKeys",
            GetAccountSummary => "iam:GetAccountSummary",
            AttachUserPolicy => "iam:AttachUserPolicy",
            DetachUserPolicy => "iam:DetachUserPolicy",
            ListAttachedUserPolicies => "iam:ListAttachedUserPolicies",
            AttachRolePolicy => "iam:AttachRolePolicy",
            DetachRolePolicy => "iam:DetachRolePolicy",
            ListAttachedRolePolicies => "iam:ListAttachedRolePolicies",
            ListGroupsForUser => "iam:ListGroupsForUser",
            CreateGroup => "iam:CreateGroup",
            GetGroup => "iam:GetGroup",
            UpdateGroup => "iam:UpdateGroup",
            DeleteGroup => "iam:DeleteGroup",
            ListGroups => "iam:ListGroups",
            AddUserToGroup => "iam:AddUserToGroup",
            RemoveUserFromGroup => "iam:RemoveUserFromGroup",
            PutGroupPolicy => "iam:PutGroupPolicy",
            GetGroupPolicy => "iam:GetGroupPolicy",
            ListGroupPolicies => "iam:ListGroupPolicies",
            DeleteGroupPolicy => "iam:DeleteGroupPolicy",
            AttachGroupPolicy => "iam:AttachGroupPolicy",
            DetachGroupPolicy => "iam:DetachGroupPolicy",
            ListAttachedGroupPolicies => "iam:ListAttachedGroupPolicies",
            CreateOpenIDConnectProvider => "iam:CreateOpenIDConnectProvider",
            GetOpenIDConnectProvider => "iam:GetOpenIDConnectProvider",
            ListOpenIDConnectProviders => "iam:ListOpenIDConnectProviders",
            DeleteOpenIDConnectProvider => "iam:DeleteOpenIDConnectProvider",
            AddClientIDToOpenIDConnectProvider => "iam:AddClientIDToOpenIDConnectProvider",
            RemoveClientIDFromOpenIDConnectProvider => {
                "iam:RemoveClientIDFromOpenIDConnectProvider"
            }
            UpdateOpenIDConnectProviderThumbprint => "iam:UpdateOpenIDConnectProviderThumbprint",
        }
    }

    /// The verbs on a bucket's policy, which its owner may always use.
    fn on_policy(self) -> bool {
        matches!(
            self,
            Action::GetBucketPolicy | Action::PutBucketPolicy | Action::DeleteBucketPolicy
        )
    }
}

/// How a kind of policy document is read ([`Policy::parse_identity`], [`Policy::parse_role`]).
pub type Parse = fn(&str) -> Result<Policy, String>;

/// The condition keys of a request, by lower-cased name (condition keys are not
/// case-sensitive); a key may have several values.
pub type Context = BTreeMap<String, Vec<String>>;

/// One request, as a policy judges it.
pub struct Asked<'a> {
    /// The signed-in user, or `None` for an anonymous request.
    pub principal: Option<&'a str>,
    pub action: Action,
    /// `arn:aws:s3:::bucket` or `arn:aws:s3:::bucket/key`.
    pub resource: &'a str,
    pub context: &'a Context,
    /// The account of an account's user asking in another account's bucket, where its
    /// own policies must allow too: a `Principal` naming the account names the user then
    /// (as in AWS; in its own account such a grant leaves the user to its own policies).
    pub account: Option<&'a str>,
    /// For a role's session, the role's ARN: a `Principal` naming the role names its
    /// sessions (as in AWS), though never in a NotPrincipal, which then spares the session
    /// it names alone.
    pub role: Option<&'a str>,
}

/// The condition keys of any request: the time `now`, how it came (`from`: over TLS or
/// not, and from which address) and who sent it.
pub fn common_context(
    now: time::OffsetDateTime,
    from: Option<(bool, IpAddr)>,
    principal: Option<&str>,
) -> Context {
    let mut context = Context::new();
    let mut put = |key: &str, value: String| {
        context
            .entry(key.to_ascii_lowercase())
            .or_default()
            .push(value)
    };
    if let Ok(text) = now.format(&time::format_description::well_known::Rfc3339) {
        put("aws:CurrentTime", text);
    }
    put("aws:EpochTime", now.unix_timestamp().to_string());
    if let Some((secure, address)) = from {
        put("aws:SecureTransport", secure.to_string());
        put("aws:SourceIp", address.to_canonical().to_string());
    }
    match principal {
        Some(user) => {
            put("aws:username", user.into());
            put("aws:userid", user.into());
            put("aws:PrincipalType", "User".into());
        }
        None => put("aws:PrincipalType", "Anonymous".into()),
    }
    context
}

/// Puts `tags` in `context` under `prefix` (`aws:PrincipalTag/` gives
/// `aws:PrincipalTag/KEY`); a key may have several values.
pub fn put_tags(context: &mut Context, prefix: &str, tags: &[(String, String)]) {
    for (key, value) in tags {
        let key = format!("{prefix}{key}").to_ascii_lowercase();
        context.entry(key).or_default().push(value.clone());
    }
}

/// Puts the keys of `tags`, each once, in `context` as `aws:TagKeys`.
pub fn put_tag_keys(context: &mut Context, tags: &[(String, String)]) {
    let mut keys: Vec<String> = tags.iter().map(|(key, _)| key.clone()).collect();
    keys.sort();
    keys.dedup();
    if !keys.is_empty() {
        context.insert("aws:tagkeys".into(), keys);
    }
}

/// The resource of ListBuckets: `arn:aws:s3:::*` and `*` match it.
pub const ALL_BUCKETS: &str = "arn:aws:s3:::";

/// The ARN of user `name`, which the IAM verbs on its policies act on.
pub fn user_resource(name: &str) -> String {
    format!("arn:aws:iam:::user/{name}")
}

/// The ARN of a bucket, or of one of its objects.
pub fn resource(bucket: &str, key: Option<&str>) -> String {
    match key {
        Some(key) => format!("arn:aws:s3:::{bucket}/{key}"),
        None => format!("arn:aws:s3:::{bucket}"),
    }
}

/// A bucket's public access block, in its index object's public-block attribute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicBlock {
    /// Refuse ACLs that grant to everyone or to every signed-in user.
    pub block_acls: bool,
    /// Grant nothing through such ACLs.
    pub ignore_acls: bool,
    /// Refuse a policy that allows anyone.
    pub block_policy: bool,
    /// While the policy allows anyone, let only the owner in.
    pub restrict_buckets: bool,
}

impl crate::layout::Record for PublicBlock {}

/// Whether a policy allows or denies what its statement names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect {
    Allow,
    Deny,
}

/// What a policy says of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Denied,
    /// No statement applies.
    Silent,
}

/// Who a statement is about.
#[derive(Clone, Debug, PartialEq)]
enum Principals {
    /// `*`: anyone, signed in or not.
    Anyone,
    /// These users; principals that name no user of this cluster (an account's root, a
    /// service) are kept so that the policy reads back, and match no request.
    Users(Vec<String>),
}

/// The operator of a condition, without its `…IfExists` and set qualifiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operator {
    StringEquals,
    StringEqualsIgnoreCase,
    StringLike,
    NumericEquals,
    NumericLessThan,
    NumericLessThanEquals,
    NumericGreaterThan,
    NumericGreaterThanEquals,
    DateEquals,
    DateLessThan,
    DateLessThanEquals,
    DateGreaterThan,
    DateGreaterThanEquals,
    Bool,
    IpAddress,
    ArnLike,
    Null,
}

/// How a condition with several request values is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Quantifier {
    /// The key has one value (or any of several matches).
    Single,
    /// `ForAnyValue:`: some value of the request's matches.
    AnyValue,
    /// `ForAllValues:`: every value of the request's matches (true if it has none).
    AllValues,
}

#[derive(Clone, Debug, PartialEq)]
struct Condition {
    operator: Operator,
    /// `StringNotEquals` and the like: true where the positive operator is false.
    negated: bool,
    /// `…IfExists`: true when the request has no such key.
    if_exists: bool,
    quantifier: Quantifier,
    /// Lower-cased.
    key: String,
    values: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
struct Statement {
    effect: Effect,
    principals: Principals,
    /// `NotPrincipal` (with `Deny` only): everyone but `principals`.
    not_principal: bool,
    /// Lower-cased patterns.
    actions: Vec<String>,
    not_action: bool,
    resources: Vec<String>,
    not_resource: bool,
    conditions: Vec<Condition>,
    /// Whether its resources and condition values hold policy variables
    /// (`${aws:username}`): those of a policy of Version 2012-10-17, as in IAM.
    variables: bool,
    /// The condition keys its variables name, lower-cased (none unless `variables`).
    named: Vec<String>,
}

/// A bucket policy: the document as it was given (it is answered back byte for byte) and
/// what it says. Kept as its text in the bucket's policy attribute.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Policy {
    text: String,
    statements: Vec<Statement>,
    /// A bucket's policy put with ConfirmRemoveSelfBucketAccess: its denials hold its
    /// owner out of the policy verbs too (kept beside the text, [`Policy::binding_owner`]).
    binds_owner: bool,
}

impl crate::layout::Record for Policy {}

impl From<Policy> for String {
    fn from(policy: Policy) -> String {
        policy.text
    }
}

impl TryFrom<String> for Policy {
    type Error = String;

    fn try_from(text: String) -> Result<Policy, String> {
        Policy::parse(&text)
    }
}

/// Condition keys whose value pins a request to known callers: a policy that allows
/// anyone under one of these is not public.
const PINNING_KEYS: &[&str] = &[
    "aws:sourceip",
    "aws:sourcearn",
    "aws:sourcevpc",
    "aws:sourcevpce",
    "aws:sourceaccount",
    "aws:sourceowner",
    "aws:principalaccount",
    "aws:principalarn",
    "aws:principalorgid",
    "aws:userid",
    "aws:username",
];

/// Which kind of policy a document is read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A bucket's: each statement names its principals; S3 actions only.
    Bucket,
    /// A user's own: no principals, distinct `Sid`s, S3, IAM and STS actions.
    Identity,
    /// A role's own: as a user's, but a `Principal` of everyone is taken (and means
    /// nothing: the policy is the role's), as Ceph's gateway takes it.
    Role,
    /// A role's trust policy: who may take the role on; principals, STS actions, and
    /// no resource needed (it is the role).
    Trust,
}

impl Policy {
    /// This bucket policy, holding the bucket's owner to its denials of the policy verbs
    /// too (`binds`), as S3's ConfirmRemoveSelfBucketAccess asks: the owner may otherwise
    /// always read, replace and delete its bucket's policy.
    pub fn binding_owner(self, binds: bool) -> Policy {
        Policy {
            binds_owner: binds,
            ..self
        }
    }

    pub fn binds_owner(&self) -> bool {
        self.binds_owner
    }

    /// Reads a bucket policy document; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Policy, String> {
        Policy::read(text, Kind::Bucket)
    }

    /// Reads a user's own policy document (IAM's grammar for identity policies).
    pub fn parse_identity(text: &str) -> Result<Policy, String> {
        Policy::read(text, Kind::Identity)
    }

    /// Reads a role's own policy document.
    pub fn parse_role(text: &str) -> Result<Policy, String> {
        Policy::read(text, Kind::Role)
    }

    /// Reads a role's trust policy (IAM's AssumeRolePolicyDocument).
    pub fn parse_trust(text: &str) -> Result<Policy, String> {
        Policy::read(text, Kind::Trust)
    }

    fn read(text: &str, kind: Kind) -> Result<Policy, String> {
        if text.len() > POLICY_BYTES_MAX {
            return Err(format!(
                "the policy is {} bytes, more than {POLICY_BYTES_MAX}",
                text.len()
            ));
        }
        let document: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("the policy is not JSON: {e}"))?;
        let serde_json::Value::Object(document) = document else {
            return Err("the policy is not a JSON object".into());
        };
        let mut statements = Vec::new();
        let mut sids = std::collections::BTreeSet::new();
        let mut variables = false;
        for (name, value) in &document {
            match name.as_str() {
                "Version" => match value.as_str() {
                    Some("2012-10-17") => variables = true,
                    Some("2008-10-17") => {}
                    _ => return Err(format!("unknown policy Version {value}")),
                },
                "Id" => {}
                "Statement" => {
                    let listed = match value {
                        serde_json::Value::Array(items) => items.iter().collect(),
                        single => vec![single],
                    };
                    for item in listed {
                        let sid = item.get("Sid").map(|sid| sid.to_string());
                        let named = matches!(kind, Kind::Identity | Kind::Role);
                        if named && sid.is_some_and(|sid| !sids.insert(sid)) {
                            return Err("two Statements have the same Sid".into());
                        }
                        statements.push(statement(item, kind)?);
                    }
                }
                other => return Err(format!("unknown policy element {other:?}")),
            }
        }
        if statements.is_empty() {
            return Err("the policy has no Statement".into());
        }
        for statement in &mut statements {
            statement.variables = variables;
            if variables {
                let texts = statement.conditions.iter().flat_map(|c| &c.values);
                let mut named: Vec<String> = (statement.resources.iter().chain(texts))
                    .flat_map(|text| variable_keys(text))
                    .collect();
                named.sort();
                named.dedup();
                statement.named = named;
            }
        }
        Ok(Policy {
            text: text.into(),
            statements,
            binds_owner: false,
        })
    }

    /// Checks that every resource of the policy is `bucket` or within it, as S3 requires of
    /// a bucket's policy.
    pub fn check_resources(&self, bucket: &str) -> Result<(), String> {
        for pattern in self.statements.iter().flat_map(|s| &s.resources) {
            let named = pattern
                .strip_prefix("arn:aws:s3:::")
                .map(|rest| rest.split('/').next().unwrap_or(rest));
            match named {
                Some(named) if glob(named, bucket) => {}
                _ => return Err(format!("Policy has invalid resource {pattern:?}")),
            }
        }
        Ok(())
    }

    /// The policy as it was given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the policy allows anyone, signed in or not, without a condition that pins
    /// the caller (S3's "public").
    pub fn is_public(&self) -> bool {
        self.statements.iter().any(|s| {
            s.effect == Effect::Allow
                && s.principals == Principals::Anyone
                && !s
                    .conditions
                    .iter()
                    .any(|c| PINNING_KEYS.contains(&c.key.as_str()))
        })
    }

    /// Whether some condition of the policy reads a key starting with `prefix`
    /// (lower-cased), or a variable names one, so that the gateway looks up what it needs
    /// only then.
    pub fn reads(&self, prefix: &str) -> bool {
        self.statements.iter().any(|s| {
            let mut keys = s.conditions.iter().map(|c| &c.key).chain(&s.named);
            keys.any(|key| key.starts_with(prefix))
        })
    }

    /// What the policy says of `asked` from a service (`Service:NAME`), which only a
    /// statement naming it can allow: one that allows anyone lets no service in, as S3
    /// judges the delivery of logs. A deny from any statement wins.
    pub fn judge_named(&self, asked: &Asked) -> Verdict {
        self.verdict(asked, |statement| match &statement.principals {
            Principals::Users(users) => users.iter().any(|u| Some(u.as_str()) == asked.principal),
            Principals::Anyone => false,
        })
    }

    /// What the policy says of `asked`: a deny from any statement wins.
    pub fn judge(&self, asked: &Asked) -> Verdict {
        self.verdict(asked, |_| true)
    }

    /// The statements that apply to `asked`: a deny from any wins, and without one an allow
    /// from any that `may_allow` lets allow.
    fn verdict(&self, asked: &Asked, may_allow: impl Fn(&Statement) -> bool) -> Verdict {
        let mut verdict = Verdict::Silent;
        for statement in self.statements.iter().filter(|s| s.applies(asked)) {
            match statement.effect {
                Effect::Deny => return Verdict::Denied,
                Effect::Allow if may_allow(statement) => verdict = Verdict::Allowed,
                Effect::Allow => {}
            }
        }
        verdict
    }
}

/// Whether a request may go on, as the owner and the policy see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
    /// Neither the owner nor the policy lets it in: an ACL grant still may.
    AskAcl,
}

/// What the policies of the user who asks (`identity`) say of `asked`: a deny from any
/// wins, and without a deny an allow from any.
pub fn judge_all(identity: &[Policy], asked: &Asked) -> Verdict {
    let mut verdict = Verdict::Silent;
    for policy in identity {
        match policy.judge(asked) {
            Verdict::Denied => return Verdict::Denied,
            Verdict::Allowed => verdict = Verdict::Allowed,
            Verdict::Silent => {}
        }
    }
    verdict
}

/// What a role's policies (`role`) say of `asked` for one of its sessions, bounded by the
/// session's own policy (`session`, if AssumeRole was given one): that can only take away.
pub fn judge_role(role: &[Policy], session: Option<&Policy>, asked: &Asked) -> Verdict {
    let mine = judge_all(role, asked);
    match session.map(|p| p.judge(asked)) {
        None | Some(Verdict::Allowed) => mine,
        Some(Verdict::Denied) => Verdict::Denied,
        Some(Verdict::Silent) if mine == Verdict::Denied => Verdict::Denied,
        Some(Verdict::Silent) => Verdict::Silent,
    }
}

/// What `asked`, from a role's session, gets under the bucket's `policy` and `block`, given
/// what the role says of it (`mine`, from [`judge_role`]): only what the role allows or the
/// bucket's policy grants, unless either denies it. A role owns nothing and ACLs grant to
/// users, so neither ownership nor an ACL lets a role's session in.
pub fn decide_role(
    asked: &Asked,
    policy: Option<&Policy>,
    block: PublicBlock,
    mine: Verdict,
) -> Decision {
    let verdict = policy.map_or(Verdict::Silent, |p| p.judge(asked));
    match (mine, verdict) {
        (Verdict::Denied, _) | (_, Verdict::Denied) => Decision::Deny,
        (Verdict::Allowed, _) => Decision::Allow,
        (_, Verdict::Allowed)
            if block.restrict_buckets && policy.is_some_and(Policy::is_public) =>
        {
            Decision::Deny
        }
        (_, Verdict::Allowed) => Decision::Allow,
        (Verdict::Silent, Verdict::Silent) => Decision::Deny,
    }
}

/// What `asked` from an account's user, on a bucket of another account (or of an
/// operator's user), gets under the bucket's `policy` and `block`, given what the user's
/// own policies say (`mine`): both sides must let it in, the bucket by its policy or an
/// ACL grant to the user's account, and a deny from either wins (AWS's cross-account
/// access).
pub fn decide_elsewhere(
    asked: &Asked,
    policy: Option<&Policy>,
    block: PublicBlock,
    mine: Verdict,
) -> Decision {
    let verdict = policy.map_or(Verdict::Silent, |p| p.judge(asked));
    match (mine, verdict) {
        (Verdict::Denied, _) | (_, Verdict::Denied) | (Verdict::Silent, _) => Decision::Deny,
        (Verdict::Allowed, Verdict::Allowed)
            if block.restrict_buckets && policy.is_some_and(Policy::is_public) =>
        {
            Decision::Deny
        }
        (Verdict::Allowed, Verdict::Allowed) => Decision::Allow,
        (Verdict::Allowed, Verdict::Silent) => Decision::AskAcl,
    }
}

/// What `asked`, on a bucket that `owner` owns, gets under its `policy` and `block` and
/// the policies of the user who asks (`identity`, none for an anonymous request).
pub fn decide(
    owner: &str,
    asked: &Asked,
    policy: Option<&Policy>,
    block: PublicBlock,
    identity: &[Policy],
) -> Decision {
    let mine = judge_all(identity, asked);
    if mine == Verdict::Denied {
        return Decision::Deny;
    }
    let is_owner = asked.principal == Some(owner);
    if is_owner && asked.action.on_policy() && !policy.is_some_and(Policy::binds_owner) {
        return Decision::Allow;
    }
    let verdict = policy.map_or(Verdict::Silent, |p| p.judge(asked));
    match verdict {
        Verdict::Denied => Decision::Deny,
        _ if is_owner || mine == Verdict::Allowed => Decision::Allow,
        Verdict::Allowed if block.restrict_buckets && policy.is_some_and(Policy::is_public) => {
            Decision::Deny
        }
        Verdict::Allowed => Decision::Allow,
        Verdict::Silent => Decision::AskAcl,
    }
}

impl Statement {
    fn applies(&self, asked: &Asked) -> bool {
        let principal = match (&self.principals, asked.principal) {
            (Principals::Anyone, _) => true,
            // An account (its id) names its users where they ask of another account, and a
            // role its sessions, but never in a NotPrincipal, which then spares its root (the
            // session it names) alone.
            (Principals::Users(users), Some(user)) => users.iter().any(|u| {
                u == user
                    || (!self.not_principal
                        && (asked.account.is_some_and(|a| a == u)
                            || asked.role.is_some_and(|r| r == u)))
            }),
            (Principals::Users(_), None) => false,
        };
        let action = asked.action.name().to_ascii_lowercase();
        let action = self.actions.iter().any(|a| glob(a, &action));
        let context = asked.context;
        let overflowed = std::cell::Cell::new(false);
        let read = |text: &str| {
            self.read(text, context).unwrap_or_else(|| {
                overflowed.set(true);
                Vec::new()
            })
        };
        let resource = self
            .resources
            .iter()
            .any(|r| read(r).iter().any(|r| glob_marked(r, asked.resource)));
        let named = principal != self.not_principal && action != self.not_action;
        let applies = named
            && resource != self.not_resource
            && self.conditions.iter().all(|c| c.holds(context, read));
        // Variables that stand for more patterns than are read: a deny holds, an allow
        // does not.
        match overflowed.get() {
            true => named && self.effect == Effect::Deny,
            false => applies,
        }
    }

    /// What `text` (a resource or a condition's value) stands for in `context`: itself,
    /// or the patterns its policy variables give; `None` if they are more than
    /// [`EXPANSIONS_MAX`].
    fn read(&self, text: &str, context: &Context) -> Option<Vec<Marked>> {
        match self.variables && text.contains("${") {
            true => expand(text, context),
            false => Some(vec![text.chars().map(|c| (c, true)).collect()]),
        }
    }
}

/// A pattern whose characters are each either the policy's (where `*` and `?` are
/// wildcards: `true`) or a variable's value (which matches only itself: `false`).
type Marked = Vec<(char, bool)>;

/// The text of a pattern, wildcards as characters.
fn unmarked(pattern: &Marked) -> String {
    pattern.iter().map(|&(c, _)| c).collect()
}

/// A policy variable in a text: `before${key, 'default'}after`.
struct Variable<'a> {
    before: &'a str,
    key: &'a str,
    default: Option<&'a str>,
    after: &'a str,
}

/// The first policy variable of `text`, if it has one.
fn next_variable(text: &str) -> Option<Variable<'_>> {
    let start = text.find("${")?;
    let length = text[start + 2..].find('}')?;
    let inside = &text[start + 2..start + 2 + length];
    let (key, default) = match inside.split_once(',') {
        Some((key, default)) => {
            let default = default.trim();
            let quoted = default
                .strip_prefix('\'')
                .and_then(|d| d.strip_suffix('\''));
            (key.trim(), Some(quoted.unwrap_or(default)))
        }
        None => (inside.trim(), None),
    };
    Some(Variable {
        before: &text[..start],
        key,
        default,
        after: &text[start + 2 + length + 1..],
    })
}

/// The condition keys the variables of `text` name, lower-cased.
fn variable_keys(text: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut rest = text;
    while let Some(variable) = next_variable(rest) {
        keys.push(variable.key.to_ascii_lowercase());
        rest = variable.after;
    }
    keys
}

/// The most texts one resource or condition value may stand for once its variables are
/// replaced by a request's values (several variables of several values multiply).
const EXPANSIONS_MAX: usize = 64;

/// `text` with each policy variable replaced by the request's value of its key, as IAM
/// reads them: `${aws:username}`, `${aws:PrincipalTag/team, 'none'}` (a default for a key
/// the request lacks), and `${*}`, `${?}`, `${$}` for those characters. What a variable
/// gives matches only itself, never as a wildcard. A key of several values gives a pattern
/// for each (Ceph's gateway's multi-valued session tags); a key the request lacks, with no
/// default, gives none, so that the value matches nothing. `None` past
/// [`EXPANSIONS_MAX`] patterns.
fn expand(text: &str, context: &Context) -> Option<Vec<Marked>> {
    let policy = |text: &str| text.chars().map(|c| (c, true)).collect::<Marked>();
    let mut texts = vec![Marked::new()];
    let mut rest = text;
    while let Some(Variable {
        before,
        key,
        default,
        after,
    }) = next_variable(rest)
    {
        let values: Vec<&str> = match key {
            "*" | "?" | "$" => vec![key],
            _ => match context.get(&key.to_ascii_lowercase()) {
                Some(values) if !values.is_empty() => values.iter().map(String::as_str).collect(),
                _ => default.into_iter().collect(),
            },
        };
        if texts.len() * values.len() > EXPANSIONS_MAX {
            return None;
        }
        let before = policy(before);
        texts = texts
            .iter()
            .flat_map(|text| {
                let before = &before;
                values.iter().map(move |value| {
                    let value = value.chars().map(|c| (c, false));
                    text.iter().chain(before).copied().chain(value).collect()
                })
            })
            .collect();
        rest = after;
    }
    for text in &mut texts {
        text.extend(policy(rest));
    }
    Some(texts)
}

impl Condition {
    /// Whether the condition holds of `context`, its values read with `read` (which
    /// replaces policy variables).
    fn holds(&self, context: &Context, read: impl Fn(&str) -> Vec<Marked>) -> bool {
        let given = context.get(&self.key).filter(|values| !values.is_empty());
        if self.operator == Operator::Null {
            let absent = given.is_none();
            return self
                .values
                .iter()
                .any(|v| v.eq_ignore_ascii_case("true") == absent);
        }
        let Some(given) = given else {
            return self.if_exists || self.negated || self.quantifier == Quantifier::AllValues;
        };
        let wants: Vec<(String, Marked)> = (self.values.iter())
            .flat_map(|v| read(v))
            .map(|want| (unmarked(&want), want))
            .collect();
        let matches = |value: &String| {
            wants
                .iter()
                .any(|(text, pattern)| self.compare(value, text, pattern))
        };
        match self.quantifier {
            Quantifier::AllValues if self.negated => given.iter().all(|v| !matches(v)),
            Quantifier::AllValues => given.iter().all(matches),
            _ => given.iter().any(matches) != self.negated,
        }
    }

    /// Whether the request's `value` matches the policy's `want` (as a glob, `pattern`)
    /// under the positive operator.
    fn compare(&self, value: &str, want: &str, pattern: &Marked) -> bool {
        use std::cmp::Ordering::*;
        use Operator::*;
        let numbers = || Some((value.parse::<f64>().ok()?, want.parse::<f64>().ok()?));
        let dates = || Some((date(value)?, date(want)?));
        let order = match self.operator {
            NumericEquals
            | NumericLessThan
            | NumericLessThanEquals
            | NumericGreaterThan
            | NumericGreaterThanEquals => numbers().and_then(|(a, b)| a.partial_cmp(&b)),
            DateEquals
            | DateLessThan
            | DateLessThanEquals
            | DateGreaterThan
            | DateGreaterThanEquals => dates().map(|(a, b)| a.cmp(&b)),
            _ => None,
        };
        match self.operator {
            StringEquals => value == want,
            StringEqualsIgnoreCase => value.eq_ignore_ascii_case(want),
            StringLike | ArnLike => glob_marked(pattern, value),
            Bool => value.eq_ignore_ascii_case(want),
            IpAddress => in_network(value, want),
            NumericEquals | DateEquals => order == Some(Equal),
            NumericLessThan | DateLessThan => order == Some(Less),
            NumericLessThanEquals | DateLessThanEquals => matches!(order, Some(Less | Equal)),
            NumericGreaterThan | DateGreaterThan => order == Some(Greater),
            NumericGreaterThanEquals | DateGreaterThanEquals => {
                matches!(order, Some(Greater | Equal))
            }
            Null => false,
        }
    }
}

/// A date in a condition: ISO 8601 (RFC 3339) or seconds since the epoch.
fn date(text: &str) -> Option<i128> {
    if let Ok(seconds) = text.parse::<i64>() {
        return Some(i128::from(seconds) * 1_000_000_000);
    }
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|at| at.unix_timestamp_nanos())
}

/// Whether address `value` is within `network` (`10.0.0.0/8`, or one address).
fn in_network(value: &str, network: &str) -> bool {
    let (base, bits) = match network.split_once('/') {
        Some((base, bits)) => (base, bits.parse::<u32>().ok()),
        None => (network, None),
    };
    let (Ok(address), Ok(base)) = (value.parse::<IpAddr>(), base.parse::<IpAddr>()) else {
        return false;
    };
    let (address, base, width) = match (address, base) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(a.to_bits()), u128::from(b.to_bits()), 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (a.to_bits(), b.to_bits(), 128),
        _ => return false,
    };
    let bits = bits.unwrap_or(width);
    if bits > width {
        return false;
    }
    let shift = width - bits;
    let high = |x: u128| x.checked_shr(shift).unwrap_or(0);
    high(address) == high(base)
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters and `?`
/// for one.
pub fn glob(pattern: &str, text: &str) -> bool {
    glob_marked(&pattern.chars().map(|c| (c, true)).collect(), text)
}

/// [`glob`], where a `*` or `?` marked `false` matches only itself.
fn glob_marked(pattern: &Marked, text: &str) -> bool {
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    // The last `*` seen, and where in the text its run ends so far.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(('*', true)) => {
                star = Some((p, t));
                p += 1;
            }
            Some(&(c, wild)) if (wild && c == '?') || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((at, end)) => {
                    p = at + 1;
                    t = end + 1;
                    star = Some((at, end + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == ('*', true))
}

/// One or several strings (numbers and booleans read as their text).
fn strings(value: &serde_json::Value, what: &str) -> Result<Vec<String>, String> {
    let one = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => Ok(s.clone()),
        serde_json::Value::Bool(b) => Ok(b.to_string()),
        serde_json::Value::Number(n) => Ok(n.to_string()),
        other => Err(format!("{what}: {other} is not a string")),
    };
    let values = match value {
        serde_json::Value::Array(items) => items.iter().map(one).collect::<Result<Vec<_>, _>>()?,
        single => vec![one(single)?],
    };
    if values.is_empty() {
        return Err(format!("{what} is empty"));
    }
    Ok(values)
}

fn statement(value: &serde_json::Value, kind: Kind) -> Result<Statement, String> {
    let serde_json::Value::Object(fields) = value else {
        return Err("a Statement is not a JSON object".into());
    };
    let mut effect = None;
    let mut principals = None;
    let mut not_principal = false;
    let mut actions = None;
    let mut not_action = false;
    let mut resources = None;
    let mut not_resource = false;
    let mut conditions = Vec::new();
    for (name, value) in fields {
        match name.as_str() {
            "Sid" => {}
            "Effect" => {
                effect = Some(match value.as_str() {
                    Some("Allow") => Effect::Allow,
                    Some("Deny") => Effect::Deny,
                    _ => return Err(format!("Effect {value} is neither Allow nor Deny")),
                })
            }
            "Principal" | "NotPrincipal" if kind == Kind::Identity => {
                return Err(format!("a user's policy names no {name}: it is the user's"))
            }
            "Principal" if kind == Kind::Role => {
                if principal(value)? != Principals::Anyone {
                    return Err(
                        "a role's policy names no Principal but \"*\": it is the role's".into(),
                    );
                }
            }
            "NotPrincipal" if kind == Kind::Role => {
                return Err("a role's policy names no NotPrincipal: it is the role's".into())
            }
            "Principal" | "NotPrincipal" => {
                not_principal = name == "NotPrincipal";
                principals = Some(principal(value)?);
            }
            "Action" | "NotAction" => {
                not_action = name == "NotAction";
                let given = strings(value, name)?;
                for action in &given {
                    let lower = action.to_ascii_lowercase();
                    let known = match kind {
                        Kind::Bucket => action == "*" || lower.starts_with("s3:"),
                        Kind::Identity | Kind::Role => {
                            action == "*"
                                || ["s3:", "iam:", "sts:"].iter().any(|p| lower.starts_with(p))
                        }
                        Kind::Trust => lower.starts_with("sts:"),
                    };
                    if !known {
                        return Err(format!("Policy has an invalid action {action:?}"));
                    }
                }
                actions = Some(given.iter().map(|a| a.to_ascii_lowercase()).collect());
            }
            "Resource" | "NotResource" => {
                not_resource = name == "NotResource";
                resources = Some(strings(value, name)?);
            }
            "Condition" => conditions = condition_block(value)?,
            other => return Err(format!("unknown Statement element {other:?}")),
        }
    }
    let effect = effect.ok_or("a Statement has no Effect")?;
    if not_principal && effect == Effect::Allow {
        return Err("NotPrincipal is only taken with Deny".into());
    }
    let principals = match kind {
        Kind::Bucket => principals.ok_or("a bucket policy Statement needs a Principal")?,
        Kind::Trust => principals.ok_or("a trust policy Statement needs a Principal")?,
        Kind::Identity | Kind::Role => Principals::Anyone,
    };
    // A trust policy is the role's: its statements are about the role alone.
    let resources = match (kind, resources) {
        (Kind::Trust, None) => Some(vec!["*".to_owned()]),
        (_, resources) => resources,
    };
    Ok(Statement {
        effect,
        principals,
        not_principal,
        actions: actions.ok_or("a Statement has no Action")?,
        not_action,
        resources: resources.ok_or("a Statement has no Resource")?,
        not_resource,
        conditions,
        variables: false,
        named: Vec::new(),
    })
}

/// A statement's principals: `"*"`, or `{"AWS": …, "CanonicalUser": …, "Service": …}`.
fn principal(value: &serde_json::Value) -> Result<Principals, String> {
    if value.as_str() == Some("*") {
        return Ok(Principals::Anyone);
    }
    let serde_json::Value::Object(kinds) = value else {
        return Err(format!("Principal {value} is neither \"*\" nor an object"));
    };
    let mut users = Vec::new();
    for (kind, names) in kinds {
        let names = strings(names, "Principal")?;
        match kind.as_str() {
            "AWS" if names.iter().any(|n| n == "*") => return Ok(Principals::Anyone),
            "AWS" | "CanonicalUser" => users.extend(names.iter().map(|n| user_name(n))),
            "Service" | "Federated" => users.extend(names.iter().map(|n| format!("{kind}:{n}"))),
            other => return Err(format!("unknown Principal kind {other:?}")),
        }
    }
    Ok(Principals::Users(users))
}

/// The user an AWS principal names, as requests are judged: an account's root by the
/// account's id (`arn:aws:iam::ID:root`, or the bare id), an operator's user by name
/// (`arn:aws:iam:::user/NAME`, with any other account, or a bare name). A role's session
/// named as Ceph's gateway names it (`arn:aws:iam::ID:assumed-role/ROLE/SESSION`) is its
/// STS ARN. Any other ARN (an account's user's, `arn:aws:iam::ID:user/PATH/NAME`, path and
/// all) is kept whole.
fn user_name(principal: &str) -> String {
    use crate::accounts::is_account_id;
    let Some(rest) = principal.strip_prefix("arn:aws:iam::") else {
        return principal.into();
    };
    match rest.split_once(':') {
        Some((account, session)) if session.starts_with("assumed-role/") => {
            format!("arn:aws:sts::{account}:{session}")
        }
        Some((account, "root")) if is_account_id(account) => account.into(),
        Some((account, _)) if is_account_id(account) => principal.into(),
        Some((_, user)) => match user.strip_prefix("user/") {
            Some(name) => name.into(),
            None => principal.into(),
        },
        None => principal.into(),
    }
}

/// `{"StringEquals": {"key": value(s)}, …}`.
fn condition_block(value: &serde_json::Value) -> Result<Vec<Condition>, String> {
    let serde_json::Value::Object(operators) = value else {
        return Err("a Condition is not a JSON object".into());
    };
    let mut conditions = Vec::new();
    for (name, keys) in operators {
        let (quantifier, rest) = if let Some(rest) = name.strip_prefix("ForAnyValue:") {
            (Quantifier::AnyValue, rest)
        } else if let Some(rest) = name.strip_prefix("ForAllValues:") {
            (Quantifier::AllValues, rest)
        } else {
            (Quantifier::Single, name.as_str())
        };
        let (rest, if_exists) = match rest.strip_suffix("IfExists") {
            Some(rest) => (rest, true),
            None => (rest, false),
        };
        let (operator, negated) =
            operator(rest).ok_or_else(|| format!("unknown Condition operator {name:?}"))?;
        let serde_json::Value::Object(keys) = keys else {
            return Err(format!("Condition {name} is not a JSON object"));
        };
        for (key, values) in keys {
            conditions.push(Condition {
                operator,
                negated,
                if_exists,
                quantifier,
                key: key.to_ascii_lowercase(),
                values: strings(values, key)?,
            });
        }
    }
    Ok(conditions)
}

/// An operator by name, and whether it is the negation of the one returned.
fn operator(name: &str) -> Option<(Operator, bool)> {
    use Operator::*;
    Some(match name {
        "StringEquals" => (StringEquals, false),
        "StringNotEquals" => (StringEquals, true),
        "StringEqualsIgnoreCase" => (StringEqualsIgnoreCase, false),
        "StringNotEqualsIgnoreCase" => (StringEqualsIgnoreCase, true),
        "StringLike" => (StringLike, false),
        "StringNotLike" => (StringLike, true),
        "NumericEquals" => (NumericEquals, false),
        "NumericNotEquals" => (NumericEquals, true),
        "NumericLessThan" => (NumericLessThan, false),
        "NumericLessThanEquals" => (NumericLessThanEquals, false),
        "NumericGreaterThan" => (NumericGreaterThan, false),
        "NumericGreaterThanEquals" => (NumericGreaterThanEquals, false),
        "DateEquals" => (DateEquals, false),
        "DateNotEquals" => (DateEquals, true),
        "DateLessThan" => (DateLessThan, false),
        "DateLessThanEquals" => (DateLessThanEquals, false),
        "DateGreaterThan" => (DateGreaterThan, false),
        "DateGreaterThanEquals" => (DateGreaterThanEquals, false),
        "Bool" => (Bool, false),
        "IpAddress" => (IpAddress, false),
        "NotIpAddress" => (IpAddress, true),
        "ArnEquals" | "ArnLike" => (ArnLike, false),
        "ArnNotEquals" | "ArnNotLike" => (ArnLike, true),
        "Null" => (Null, false),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(statements: &str) -> Policy {
        Policy::parse(&format!(
            r#"{{"Version": "2012-10-17", "Statement": [{statements}]}}"#
        ))
        .expect("a policy")
    }

    fn judge(policy: &Policy, principal: Option<&str>, action: Action, resource: &str) -> Verdict {
        policy.judge(&Asked {
            principal,
            action,
            resource,
            context: &Context::new(),
            account: None,
            role: None,
        })
    }

    #[test]
    fn globs_match_as_s3_does() {
        assert!(glob("*", ""));
        assert!(glob("arn:aws:s3:::b/*", "arn:aws:s3:::b/a/b/c"));
        assert!(!glob("arn:aws:s3:::b/*", "arn:aws:s3:::b"));
        assert!(glob("s3:get*", "s3:getobject"));
        assert!(glob("a?c*e", "abcdde"));
        assert!(glob("*a*a", "banana"));
        assert!(!glob("*a*b", "banana"));
        assert!(!glob("a", "ab"));
    }

    #[test]
    fn addresses_are_matched_by_network() {
        assert!(in_network("10.1.2.3", "10.0.0.0/8"));
        assert!(!in_network("11.1.2.3", "10.0.0.0/8"));
        assert!(in_network("10.0.0.0", "10.0.0.0/32"));
        assert!(in_network("1.2.3.4", "0.0.0.0/0"));
        assert!(in_network("::1", "::1"));
        assert!(!in_network("::1", "10.0.0.0/8"));
        assert!(!in_network("10.0.0.1", "10.0.0.0/33"));
    }

    #[test]
    fn an_account_names_its_root_and_its_users_and_its_user_needs_both_sides_elsewhere() {
        const A: &str = "RGW00000000000000001";
        let p = policy(&format!(
            r#"{{"Effect": "Allow", "Principal": {{"AWS": "arn:aws:iam::{A}:root"}},
                 "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}},
               {{"Effect": "Allow", "Principal": {{"AWS": "arn:aws:iam::{A}:user/team/Ann"}},
                 "Action": "s3:PutObject", "Resource": "arn:aws:s3:::b/*"}}"#
        ));
        let ann = format!("arn:aws:iam::{A}:user/team/Ann");
        let ask = |who: &str, action, account| {
            p.judge(&Asked {
                principal: Some(who),
                action,
                resource: "arn:aws:s3:::b/k",
                context: &Context::new(),
                account,
                role: None,
            })
        };
        assert_eq!(
            ask(A, Action::GetObject, None),
            Verdict::Allowed,
            "the root"
        );
        assert_eq!(
            ask(&ann, Action::GetObject, Some(A)),
            Verdict::Allowed,
            "a user of the account, from another account's bucket"
        );
        assert_eq!(
            ask(&ann, Action::GetObject, None),
            Verdict::Silent,
            "in its own account: its own policies decide"
        );
        assert_eq!(ask(&ann, Action::PutObject, None), Verdict::Allowed);
        let moved = format!("arn:aws:iam::{A}:user/other/Ann");
        assert_eq!(
            ask(&moved, Action::PutObject, None),
            Verdict::Silent,
            "the path counts"
        );
        assert_eq!(
            ask(A, Action::PutObject, None),
            Verdict::Silent,
            "not the root's"
        );
        assert_eq!(ask("Ann", Action::GetObject, None), Verdict::Silent);
        let only_root = policy(&format!(
            r#"{{"Effect": "Deny", "NotPrincipal": {{"AWS": "arn:aws:iam::{A}:root"}},
                 "Action": "s3:*", "Resource": "*"}}"#
        ));
        let denied = only_root.judge(&Asked {
            principal: Some(&ann),
            action: Action::GetObject,
            resource: "arn:aws:s3:::b/k",
            context: &Context::new(),
            account: Some(A),
            role: None,
        });
        assert_eq!(
            denied,
            Verdict::Denied,
            "a NotPrincipal of the account spares its root alone"
        );

        let asked = Asked {
            principal: Some(&ann),
            action: Action::GetObject,
            resource: "arn:aws:s3:::b/k",
            context: &Context::new(),
            account: Some(A),
            role: None,
        };
        let block = PublicBlock::default();
        let decide = |policy: Option<&Policy>, mine| decide_elsewhere(&asked, policy, block, mine);
        assert_eq!(decide(Some(&p), Verdict::Allowed), Decision::Allow);
        assert_eq!(
            decide(Some(&p), Verdict::Silent),
            Decision::Deny,
            "its own must allow"
        );
        assert_eq!(
            decide(None, Verdict::Allowed),
            Decision::AskAcl,
            "or an ACL grant"
        );
        let deny =
            policy(r#"{"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": "*"}"#);
        assert_eq!(decide(Some(&deny), Verdict::Allowed), Decision::Deny);
        assert_eq!(decide(Some(&p), Verdict::Denied), Decision::Deny);
    }

    #[test]
    fn a_policy_allows_and_denies_by_principal_action_and_resource() {
        let p = policy(
            r#"{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "s3:ListBucket",
                "Resource": ["arn:aws:s3:::b", "arn:aws:s3:::b/*"]},
               {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam:::user/alice"},
                "Action": "s3:Get*", "Resource": "arn:aws:s3:::b/public/*"},
               {"Effect": "Deny", "Principal": "*", "Action": "s3:*",
                "Resource": "arn:aws:s3:::b/public/secret"}"#,
        );
        assert_eq!(
            judge(&p, None, Action::ListBucket, "arn:aws:s3:::b"),
            Verdict::Allowed
        );
        assert_eq!(
            judge(&p, None, Action::GetObject, "arn:aws:s3:::b/public/x"),
            Verdict::Silent
        );
        assert_eq!(
            judge(
                &p,
                Some("alice"),
                Action::GetObject,
                "arn:aws:s3:::b/public/x"
            ),
            Verdict::Allowed
        );
        assert_eq!(
            judge(
                &p,
                Some("bob"),
                Action::GetObject,
                "arn:aws:s3:::b/public/x"
            ),
            Verdict::Silent
        );
        assert_eq!(
            judge(
                &p,
                Some("alice"),
                Action::GetObject,
                "arn:aws:s3:::b/public/secret"
            ),
            Verdict::Denied
        );
        assert!(p.is_public());
        assert!(p.check_resources("b").is_ok());
        assert!(p.check_resources("c").is_err());
        let empty = Context::new();
        let ask = |principal, action| Asked {
            principal,
            action,
            resource: "arn:aws:s3:::b/public/secret",
            context: &empty,
            account: None,
            role: None,
        };
        // The owner needs no allow, but a deny holds it too, except over the policy.
        let none = PublicBlock::default();
        let decision =
            |principal, action, policy| decide("owner", &ask(principal, action), policy, none, &[]);
        assert_eq!(
            decision(Some("owner"), Action::GetObject, Some(&p)),
            Decision::Deny
        );
        assert_eq!(
            decision(Some("owner"), Action::PutBucketPolicy, Some(&p)),
            Decision::Allow
        );
        assert_eq!(
            decision(Some("owner"), Action::GetObject, None),
            Decision::Allow
        );
        assert_eq!(
            decision(Some("bob"), Action::GetObject, None),
            Decision::AskAcl
        );
        // Put with ConfirmRemoveSelfBucketAccess, its denials of the policy verbs hold the
        // owner too; what it does not deny, the owner may still do.
        let locked_out = policy(
            r#"{"Effect": "Deny", "Principal": "*", "Action": "s3:PutBucketPolicy",
                "Resource": "arn:aws:s3:::b"}"#,
        );
        let binding = locked_out.clone().binding_owner(true);
        assert!(binding.binds_owner() && !locked_out.binds_owner());
        let on_bucket = |action, policy| {
            let asked = Asked {
                resource: "arn:aws:s3:::b",
                ..ask(Some("owner"), action)
            };
            decide("owner", &asked, policy, none, &[])
        };
        let put = Action::PutBucketPolicy;
        assert_eq!(on_bucket(put, Some(&locked_out)), Decision::Allow);
        assert_eq!(on_bucket(put, Some(&binding)), Decision::Deny);
        assert_eq!(
            on_bucket(Action::GetBucketPolicy, Some(&binding)),
            Decision::Allow
        );
    }

    #[test]
    fn restrict_public_buckets_lets_only_the_owner_in() {
        let p = policy(
            r#"{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                "Resource": "arn:aws:s3:::b/*"}"#,
        );
        let context = Context::new();
        let ask = |principal| Asked {
            principal,
            action: Action::GetObject,
            resource: "arn:aws:s3:::b/k",
            context: &context,
            account: None,
            role: None,
        };
        let open = PublicBlock::default();
        let restricted = PublicBlock {
            restrict_buckets: true,
            ..open
        };
        assert_eq!(
            decide("owner", &ask(None), Some(&p), open, &[]),
            Decision::Allow
        );
        assert_eq!(
            decide("owner", &ask(None), Some(&p), restricted, &[]),
            Decision::Deny
        );
        assert_eq!(
            decide("owner", &ask(Some("bob")), Some(&p), restricted, &[]),
            Decision::Deny
        );
        assert_eq!(
            decide("owner", &ask(Some("owner")), Some(&p), restricted, &[]),
            Decision::Allow
        );
    }

    #[test]
    fn a_users_own_policies_deny_over_ownership_and_allow_into_others_buckets() {
        let identity = |statements: &str| {
            Policy::parse_identity(&format!(
                r#"{{"Version": "2012-10-17", "Statement": [{statements}]}}"#
            ))
            .expect("a user policy")
        };
        let deny = identity(
            r#"{"Effect": "Deny", "Action": ["s3:ListAllMyBuckets", "s3:DeleteBucket"],
                "Resource": "arn:aws:s3:::*"}"#,
        );
        let allow = identity(
            r#"{"Sid": "a", "Effect": "Allow", "Action": "s3:ListBucket",
                "Resource": "arn:aws:s3:::b"},
               {"Sid": "b", "Effect": "Allow", "Action": "iam:*", "Resource": "*"}"#,
        );
        let context = Context::new();
        let ask = |principal, action, resource| Asked {
            principal,
            action,
            resource,
            context: &context,
            account: None,
            role: None,
        };
        let none = PublicBlock::default();
        let delete = ask(Some("owner"), Action::DeleteBucket, "arn:aws:s3:::b");
        assert_eq!(decide("owner", &delete, None, none, &[]), Decision::Allow);
        assert_eq!(
            decide("owner", &delete, None, none, std::slice::from_ref(&deny)),
            Decision::Deny
        );
        let everything = ask(Some("owner"), Action::ListAllMyBuckets, ALL_BUCKETS);
        assert_eq!(
            judge_all(std::slice::from_ref(&deny), &everything),
            Verdict::Denied
        );
        let list = ask(Some("bob"), Action::ListBucket, "arn:aws:s3:::b");
        assert_eq!(decide("owner", &list, None, none, &[]), Decision::AskAcl);
        assert_eq!(
            decide("owner", &list, None, none, std::slice::from_ref(&allow)),
            Decision::Allow
        );
        // A deny in any of the user's policies wins over an allow in another.
        let both = [allow.clone(), deny.clone()];
        let delete_other = ask(Some("bob"), Action::DeleteBucket, "arn:aws:s3:::b");
        assert_eq!(
            decide("owner", &delete_other, None, none, &both),
            Decision::Deny
        );
        let user = user_resource("carol");
        let manage = ask(Some("bob"), Action::PutUserPolicy, &user);
        assert_eq!(judge_all(&[allow], &manage), Verdict::Allowed);
        assert_eq!(judge_all(&[deny], &manage), Verdict::Silent);

        for (bad, why) in [
            (
                r#"{"Version": "2010-10-17", "Statement": {"Effect": "Allow", "Action": "*", "Resource": "*"}}"#,
                "Version",
            ),
            (r#"{"Version": "2012-10-17"}"#, "no Statement"),
            (
                r#"{"Version": "2012-10-17", "Statement": [
                {"Sid": "x", "Effect": "Allow", "Action": "*", "Resource": "*"},
                {"Sid": "x", "Effect": "Allow", "Action": "*", "Resource": "*"}]}"#,
                "same Sid",
            ),
            (
                r#"{"Version": "2012-10-17", "Statement": {"Effect": "Allow", "Action": "*",
                "Resource": "*", "Principal": "arn:aws:iam:::username"}}"#,
                "Principal",
            ),
            (
                r#"{"Version": "2012-10-17", "Statement": {"Effect": "Allow", "Action": "sqs:*",
                "Resource": "*"}}"#,
                "invalid action",
            ),
        ] {
            let refused = Policy::parse_identity(bad).expect_err(bad);
            assert!(refused.contains(why), "{bad}: {refused}");
        }
        // A bucket policy takes no IAM action.
        assert!(Policy::parse(
            r#"{"Statement": {"Effect": "Allow", "Principal": "*", "Action": "iam:*",
                "Resource": "*"}}"#
        )
        .is_err());
    }

    #[test]
    fn conditions_follow_iam() {
        let p = policy(
            r#"{"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
                "Resource": "arn:aws:s3:::b/*",
                "Condition": {"Null": {"s3:x-amz-server-side-encryption": "true"}}},
               {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject",
                "Resource": "arn:aws:s3:::b/*",
                "Condition": {"StringNotEqualsIfExists":
                    {"s3:x-amz-server-side-encryption": ["AES256", "aws:kms"]}}},
               {"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket",
                "Resource": "arn:aws:s3:::b",
                "Condition": {"StringLike": {"s3:prefix": "home/*"},
                              "NumericLessThanEquals": {"s3:max-keys": 100},
                              "Bool": {"aws:SecureTransport": true}}},
               {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                "Resource": "arn:aws:s3:::b/*",
                "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"},
                              "ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["a", "b"]},
                              "DateLessThan": {"aws:CurrentTime": "2030-01-01T00:00:00Z"}}}"#,
        );
        let verdict = |action, resource: &str, keys: &[(&str, &str)]| -> Verdict {
            let mut context = Context::new();
            for (key, value) in keys {
                context
                    .entry(key.to_ascii_lowercase())
                    .or_default()
                    .push(value.to_string());
            }
            p.judge(&Asked {
                principal: None,
                action,
                resource,
                context: &context,
                account: None,
                role: None,
            })
        };
        let put = |keys: &[(&str, &str)]| verdict(Action::PutObject, "arn:aws:s3:::b/k", keys);
        assert_eq!(put(&[]), Verdict::Denied);
        assert_eq!(
            put(&[("s3:x-amz-server-side-encryption", "AES256")]),
            Verdict::Silent
        );
        assert_eq!(
            put(&[("s3:x-amz-server-side-encryption", "aws:kms")]),
            Verdict::Silent
        );
        assert_eq!(
            put(&[("s3:x-amz-server-side-encryption", "DES")]),
            Verdict::Denied
        );
        let list = |keys: &[(&str, &str)]| verdict(Action::ListBucket, "arn:aws:s3:::b", keys);
        let secure = ("aws:securetransport", "true");
        assert_eq!(
            list(&[("s3:prefix", "home/me/"), ("s3:max-keys", "100"), secure]),
            Verdict::Allowed
        );
        assert_eq!(
            list(&[("s3:prefix", "home/me/"), ("s3:max-keys", "101"), secure]),
            Verdict::Silent
        );
        assert_eq!(list(&[("s3:prefix", "etc/"), secure]), Verdict::Silent);
        assert_eq!(
            list(&[("s3:prefix", "home/"), ("aws:securetransport", "false")]),
            Verdict::Silent
        );
        let get = |keys: &[(&str, &str)]| verdict(Action::GetObject, "arn:aws:s3:::b/k", keys);
        let now = ("aws:currenttime", "2026-11-27T00:00:00Z");
        assert_eq!(get(&[("aws:sourceip", "10.1.1.1"), now]), Verdict::Allowed);
        assert_eq!(get(&[("aws:sourceip", "127.0.0.1"), now]), Verdict::Silent);
        assert_eq!(
            get(&[
                ("aws:sourceip", "10.1.1.1"),
                ("aws:currenttime", "2031-01-01T00:00:00Z")
            ]),
            Verdict::Silent
        );
        assert_eq!(
            get(&[
                ("aws:sourceip", "10.1.1.1"),
                now,
                ("s3:requestobjecttagkeys", "a")
            ]),
            Verdict::Allowed
        );
        assert_eq!(
            get(&[
                ("aws:sourceip", "10.1.1.1"),
                now,
                ("s3:requestobjecttagkeys", "c")
            ]),
            Verdict::Silent
        );
        // A condition on the caller's address makes a policy for anyone not public.
        assert!(!policy(
            r#"{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                "Resource": "arn:aws:s3:::b/*",
                "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/32"}}}"#
        )
        .is_public());
    }

    #[test]
    fn bad_policies_are_refused_with_a_reason() {
        let refused = |text: &str| Policy::parse(text).expect_err(text);
        let statement = |body: &str| format!(r#"{{"Statement": [{{{body}}}]}}"#);
        assert!(refused("not json").contains("JSON"));
        assert!(refused(r#"{"Version": "2012-10-17"}"#).contains("no Statement"));
        assert!(refused(r#"{"Version": "2020-01-01", "Statement": []}"#).contains("Version"));
        let full = r#""Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*""#;
        assert!(refused(&statement(&format!(r#""Effect": "Maybe", {full}"#))).contains("Effect"));
        assert!(refused(&statement(
            r#""Effect": "Allow", "NotPrincipal": {"AWS": "arn:aws:iam::t:root"},
               "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*""#
        ))
        .contains("NotPrincipal"));
        assert!(refused(&statement(
            r#""Effect": "Allow", "Principal": "*", "Action": "iam:CreateUser",
               "Resource": "arn:aws:s3:::b/*""#
        ))
        .contains("action"));
        assert!(refused(&statement(&format!(
            r#""Effect": "Allow", {full}, "Condition": {{"StringSortOf": {{"a": "b"}}}}"#
        )))
        .contains("operator"));
        assert!(refused(&statement(&format!(
            r#""Effect": "Allow", {full}, "Extra": 1"#
        )))
        .contains("Extra"));
        let big = statement(&format!(
            r#""Effect": "Allow", {full}, "Sid": "{}""#,
            "x".repeat(POLICY_BYTES_MAX)
        ));
        assert!(refused(&big).contains("bytes"));
        // A policy reads back byte for byte, through its record.
        let text = statement(&format!(r#""Effect": "Allow", {full}"#));
        let p = Policy::parse(&text).expect("a policy");
        let stored: Policy = crate::layout::decode(&crate::layout::encode(&p)).expect("decodes");
        assert_eq!(stored.text(), text);
        assert!(!policy(
            r#"{"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::t:root"},
                "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::b"}"#
        )
        .is_public());
    }

    #[test]
    fn a_roles_session_gets_what_its_role_or_the_bucket_allows_and_nothing_for_owning() {
        let trust = Policy::parse_trust(
            r#"{"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
                "Principal": {"AWS": ["arn:aws:iam:::user/ann"]}, "Action": ["sts:AssumeRole"]}]}"#,
        )
        .expect("a trust policy");
        let context = Context::new();
        let ask = |principal, action, resource| Asked {
            principal,
            action,
            resource,
            context: &context,
            account: None,
            role: None,
        };
        let role_arn = crate::roles::arn_in(None, "/", "reader");
        assert_eq!(role_arn, "arn:aws:iam:::role/reader");
        let by = |who| ask(Some(who), Action::AssumeRole, &role_arn);
        assert_eq!(trust.judge(&by("ann")), Verdict::Allowed);
        assert_eq!(trust.judge(&by("bob")), Verdict::Silent);
        for (bad, why) in [
            (
                r#"{"Effect": "Allow", "Action": "sts:AssumeRole"}"#,
                "no Principal",
            ),
            (
                r#"{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject"}"#,
                "an S3 action",
            ),
        ] {
            let text = format!(r#"{{"Version": "2012-10-17", "Statement": {bad}}}"#);
            assert!(Policy::parse_trust(&text).is_err(), "{why}");
        }
        // A role's policy may say Principal "*", as Ceph's gateway takes it; no other.
        let role = Policy::parse_role(
            r#"{"Version": "2012-10-17", "Statement": {"Effect": "Allow",
                "Action": "s3:GetObject", "Principal": "*", "Resource": "arn:aws:s3:::b/*"}}"#,
        )
        .expect("a role's policy");
        assert!(Policy::parse_role(
            r#"{"Version": "2012-10-17", "Statement": {"Effect": "Allow", "Action": "s3:*",
                "Principal": {"AWS": "arn:aws:iam:::user/ann"}, "Resource": "*"}}"#
        )
        .is_err());
        let session = "arn:aws:sts:::assumed-role/reader/nightly".to_owned();
        let none = PublicBlock::default();
        let get = ask(Some(&session), Action::GetObject, "arn:aws:s3:::b/k");
        let roles = std::slice::from_ref(&role);
        let mine = |asked: &Asked| judge_role(roles, None, asked);
        assert_eq!(decide_role(&get, None, none, mine(&get)), Decision::Allow);
        // No ACL and no ownership counts: what the role does not allow is refused.
        let put = ask(Some(&session), Action::PutObject, "arn:aws:s3:::b/k");
        assert_eq!(decide_role(&put, None, none, mine(&put)), Decision::Deny);
        let nothing = judge_role(&[], None, &get);
        assert_eq!(decide_role(&get, None, none, nothing), Decision::Deny);
        // A session's own policy only takes away from the role's.
        let bound = Policy::parse_identity(
            r#"{"Version": "2012-10-17", "Statement": {"Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject"], "Resource": "arn:aws:s3:::b/public/*"}}"#,
        )
        .expect("a session policy");
        let public = ask(Some(&session), Action::GetObject, "arn:aws:s3:::b/public/k");
        assert_eq!(judge_role(roles, Some(&bound), &public), Verdict::Allowed);
        assert_eq!(judge_role(roles, Some(&bound), &get), Verdict::Silent);
        let put_public = ask(Some(&session), Action::PutObject, "arn:aws:s3:::b/public/k");
        assert_eq!(
            judge_role(roles, Some(&bound), &put_public),
            Verdict::Silent
        );
        let bucket = Policy::parse(&format!(
            r#"{{"Version": "2012-10-17", "Statement": [
                {{"Effect": "Allow", "Principal": {{"AWS": "{session}"}}, "Action": "s3:PutObject",
                  "Resource": "arn:aws:s3:::b/*"}},
                {{"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
                  "Resource": "arn:aws:s3:::b/secret"}}]}}"#
        ))
        .expect("a bucket policy");
        assert_eq!(
            decide_role(&put, Some(&bucket), none, mine(&put)),
            Decision::Allow
        );
        let secret = ask(Some(&session), Action::GetObject, "arn:aws:s3:::b/secret");
        assert_eq!(
            decide_role(&secret, Some(&bucket), none, mine(&secret)),
            Decision::Deny
        );
    }

    #[test]
    fn a_principal_naming_a_role_names_its_sessions_but_spares_none_in_a_not_principal() {
        let role = "arn:aws:iam::RGW00000000000000001:role/ops/Mover";
        let session = "arn:aws:sts::RGW00000000000000001:assumed-role/Mover/nightly";
        let bucket = Policy::parse(&format!(
            r#"{{"Version": "2012-10-17", "Statement": [
                {{"Effect": "Allow", "Principal": {{"AWS": "{role}"}}, "Action": "s3:GetObject",
                  "Resource": "arn:aws:s3:::b/*"}},
                {{"Effect": "Deny", "NotPrincipal": {{"AWS": "{role}"}}, "Action": "s3:PutObject",
                  "Resource": "arn:aws:s3:::b/*"}}]}}"#
        ))
        .expect("a bucket policy");
        let context = Context::new();
        let ask = |action, role| Asked {
            principal: Some(session),
            action,
            resource: "arn:aws:s3:::b/k",
            context: &context,
            account: None,
            role,
        };
        assert_eq!(
            bucket.judge(&ask(Action::GetObject, Some(role))),
            Verdict::Allowed
        );
        assert_eq!(bucket.judge(&ask(Action::GetObject, None)), Verdict::Silent);
        let other = "arn:aws:iam::RGW00000000000000001:role/ops/Other";
        assert_eq!(
            bucket.judge(&ask(Action::GetObject, Some(other))),
            Verdict::Silent
        );
        assert_eq!(
            bucket.judge(&ask(Action::PutObject, Some(role))),
            Verdict::Denied,
            "a NotPrincipal naming the role does not spare its sessions"
        );
    }

    #[test]
    fn variables_stand_for_the_request_s_values_in_policies_of_2012() {
        let statement = r#"{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::b/${aws:username}/*",
            "Condition": {"StringEquals": {"s3:ExistingObjectTag/team":
                ["${aws:PrincipalTag/team}", "${aws:PrincipalTag/lead, 'nobody'}"]}}}"#;
        let newer = policy(statement);
        let older = Policy::parse(&format!(
            r#"{{"Version": "2008-10-17", "Statement": [{statement}]}}"#
        ))
        .expect("a policy");
        let ask = |p: &Policy, resource: &str, tags: &[(&str, &str)]| {
            let mut context = Context::new();
            context.insert("aws:username".into(), vec!["ann".into()]);
            for (key, value) in tags {
                context
                    .entry(key.to_string())
                    .or_default()
                    .push(value.to_string());
            }
            p.judge(&Asked {
                principal: Some("ann"),
                action: Action::GetObject,
                resource,
                context: &context,
                account: None,
                role: None,
            })
        };
        let team = [
            ("s3:existingobjecttag/team", "red"),
            ("aws:principaltag/team", "blue"),
            ("aws:principaltag/team", "red"),
        ];
        assert_eq!(ask(&newer, "arn:aws:s3:::b/ann/k", &team), Verdict::Allowed);
        assert_eq!(
            ask(&newer, "arn:aws:s3:::b/bob/k", &team),
            Verdict::Silent,
            "another user's folder"
        );
        let other = [
            ("s3:existingobjecttag/team", "red"),
            ("aws:principaltag/team", "blue"),
        ];
        assert_eq!(ask(&newer, "arn:aws:s3:::b/ann/k", &other), Verdict::Silent);
        let defaulted = [("s3:existingobjecttag/team", "nobody")];
        assert_eq!(
            ask(&newer, "arn:aws:s3:::b/ann/k", &defaulted),
            Verdict::Allowed,
            "the default of a key the request lacks"
        );
        let untagged = [("s3:existingobjecttag/team", "")];
        assert_eq!(
            ask(&newer, "arn:aws:s3:::b/ann/k", &untagged),
            Verdict::Silent
        );
        assert_eq!(
            ask(&older, "arn:aws:s3:::b/ann/k", &team),
            Verdict::Silent,
            "a 2008 policy reads variables as text"
        );
        let expanded = expand("a${*}b${?}c${$}d${unclosed", &Context::new()).expect("one");
        let texts: Vec<String> = expanded.iter().map(unmarked).collect();
        assert_eq!(texts, ["a*b?c$d${unclosed"]);
        assert!(glob_marked(&expanded[0], "a*b?c$d${unclosed"));
        assert!(
            !glob_marked(&expanded[0], "axbyc$d${unclosed"),
            "the variable for a star is a star alone"
        );
        // A value brings no wildcard in: a tag "*" names the folder "*" alone.
        let mut starred = Context::new();
        starred.insert("aws:principaltag/team".into(), vec!["*".into()]);
        let folder = &expand("b/${aws:PrincipalTag/team}/*", &starred).expect("one")[0];
        assert!(glob_marked(folder, "b/*/k"));
        assert!(!glob_marked(folder, "b/red/k"));
        // Two keys of nine values each stand for 81 patterns, past the most read: a deny
        // holds, an allow does not.
        let mut many = Context::new();
        for n in 0..9 {
            many.entry("aws:principaltag/a".into())
                .or_default()
                .push(format!("a{n}"));
            many.entry("aws:principaltag/b".into())
                .or_default()
                .push(format!("b{n}"));
        }
        let crossed = |effect: &str| {
            policy(&format!(
                r#"{{"Effect": "{effect}", "Principal": "*", "Action": "s3:GetObject",
                    "Resource": "arn:aws:s3:::b/${{aws:PrincipalTag/a}}-${{aws:PrincipalTag/b}}"}}"#
            ))
        };
        let asked = |p: &Policy| {
            p.judge(&Asked {
                principal: Some("ann"),
                action: Action::GetObject,
                resource: "arn:aws:s3:::b/a0-b0",
                context: &many,
                account: None,
                role: None,
            })
        };
        assert_eq!(asked(&crossed("Deny")), Verdict::Denied);
        assert_eq!(asked(&crossed("Allow")), Verdict::Silent);
        assert!(
            crossed("Allow").reads("aws:principaltag/"),
            "a variable reads its key"
        );
    }

    #[test]
    fn a_session_named_by_ceph_s_iam_arn_is_its_sts_arn() {
        let p = policy(
            r#"{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*",
                "Principal": {"AWS": "arn:aws:iam:::assumed-role/reader/nightly"}}"#,
        );
        for (session, verdict) in [("nightly", Verdict::Allowed), ("other", Verdict::Silent)] {
            let principal = format!("arn:aws:sts:::assumed-role/reader/{session}");
            let asked = judge(&p, Some(&principal), Action::GetObject, "arn:aws:s3:::b/k");
            assert_eq!(asked, verdict, "{session}");
        }
    }
}
