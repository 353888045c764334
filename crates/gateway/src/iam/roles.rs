//! IAM's verbs on roles (CreateRole, GetRole, ListRoles, DeleteRole, UpdateRole,
//! UpdateAssumeRolePolicy, Put/Get/List/DeleteRolePolicy, Attach/Detach/ListAttached-
//! RolePolicies) and STS's AssumeRole.
//!
//! A role's session acts with the role's policies alone: the role's trust policy must name
//! the user who asks (`{"AWS": "arn:aws:iam:::user/NAME"}`) for `sts:AssumeRole`, and the
//! user's own policies must not deny it. What the session makes is owned by that user.

use client::Pool;

use super::{
    escape, iso_time, may, param, seconds, url_encoded, verdict, Answered, Caller, Holding,
    IamRefusal, Origin, Params,
};
use crate::layout::{Role, RoleTaken, Session};
use crate::policy::{self, Action, Asked, Policy, Verdict};
use crate::roles::{self, NewRole};
use crate::users::{self, Holder};
use crate::{oidc, web_identity};

/// The IAM verbs served here.
pub(super) const VERBS: &[&str] = &[
    "CreateRole",
    "GetRole",
    "ListRoles",
    "DeleteRole",
    "UpdateAssumeRolePolicy",
    "PutRolePolicy",
    "GetRolePolicy",
    "ListRolePolicies",
    "DeleteRolePolicy",
    "UpdateRole",
    "AttachRolePolicy",
    "DetachRolePolicy",
    "ListAttachedRolePolicies",
];

/// The longest RoleSessionName (STS's).
const SESSION_NAME_BYTES_MAX: usize = 64;
/// The longest session policy (STS's).
const SESSION_POLICY_CHARS_MAX: usize = 2048;

/// Does IAM's role verb `verb` for `signer`, whose own policies must allow `iam:VERB` on
/// the role's ARN (an account's root may do anything in its account): on the roles of the
/// signer's account, or the operator's users' roles for one of them.
pub(super) async fn act(
    pool: &Pool,
    signer: &Caller,
    verb: &str,
    params: &Params,
    from: Origin,
) -> Result<Answered, IamRefusal> {
    let account = signer.account();
    if verb == "ListRoles" {
        let prefix = params.get("PathPrefix").map_or("/", String::as_str);
        let resource = roles::arn_in(account, prefix, "*");
        may(signer, Action::ListRoles, &resource, from)?;
        return Ok(Answered::Roles(roles::list(pool, account, prefix).await?));
    }
    let name = param(params, "RoleName")?;
    if verb == "CreateRole" {
        if params.contains_key("PermissionsBoundary") {
            return Err(IamRefusal::Invalid(
                "permissions boundaries are not served: a role's own policies bound it".into(),
            ));
        }
        let path = params.get("Path").map(String::as_str);
        let resource = roles::arn_in(account, path.unwrap_or("/"), name);
        may(signer, Action::CreateRole, &resource, from)?;
        let asked = NewRole {
            account,
            name,
            path,
            trust: param(params, "AssumeRolePolicyDocument")?,
            description: params.get("Description").map_or("", String::as_str),
            max_session_seconds: seconds(params, "MaxSessionDuration")?,
            tags: tags(params),
        };
        return Ok(Answered::Role(
            "CreateRole",
            roles::create(pool, asked).await?,
        ));
    }
    // The caller is judged on the role's ARN (with its path) before learning whether the
    // role exists.
    let found = roles::get(pool, account, name).await?;
    let resource = match &found {
        Some(role) => roles::arn(role),
        None => roles::arn_in(account, "/", name),
    };
    let action = match verb {
        "GetRole" => Action::GetRole,
        "UpdateRole" => Action::UpdateRole,
        "DeleteRole" => Action::DeleteRole,
        "UpdateAssumeRolePolicy" => Action::UpdateAssumeRolePolicy,
        "PutRolePolicy" => Action::PutRolePolicy,
        "GetRolePolicy" => Action::GetRolePolicy,
        "ListRolePolicies" => Action::ListRolePolicies,
        "DeleteRolePolicy" => Action::DeleteRolePolicy,
        "AttachRolePolicy" => Action::AttachRolePolicy,
        "DetachRolePolicy" => Action::DetachRolePolicy,
        "ListAttachedRolePolicies" => Action::ListAttachedRolePolicies,
        other => return Err(IamRefusal::UnknownAction(other.into())),
    };
    may(signer, action, &resource, from)?;
    let found = || {
        found
            .clone()
            .ok_or_else(|| IamRefusal::NoSuchEntity(format!("role {name}")))
    };
    Ok(match action {
        Action::GetRole => Answered::Role("GetRole", found()?),
        Action::UpdateRole => {
            let description = params.get("Description").map(String::as_str);
            let longest = seconds(params, "MaxSessionDuration")?;
            roles::update_role(pool, &found()?, description, longest).await?;
            Answered::Nothing("UpdateRole")
        }
        Action::DeleteRole => {
            roles::remove(pool, &found()?).await?;
            Answered::Done("DeleteRole")
        }
        Action::UpdateAssumeRolePolicy => {
            roles::put_trust(pool, &found()?, param(params, "PolicyDocument")?).await?;
            Answered::Done("UpdateAssumeRolePolicy")
        }
        Action::PutRolePolicy => {
            let (policy, document) = (
                param(params, "PolicyName")?,
                param(params, "PolicyDocument")?,
            );
            roles::set_policy(pool, &found()?, policy, Some(document)).await?;
            Answered::Done("PutRolePolicy")
        }
        Action::DeleteRolePolicy => {
            let policy = param(params, "PolicyName")?;
            roles::set_policy(pool, &found()?, policy, None).await?;
            Answered::Done("DeleteRolePolicy")
        }
        Action::AttachRolePolicy => {
            roles::attach(pool, &found()?, param(params, "PolicyArn")?, true).await?;
            Answered::Done("AttachRolePolicy")
        }
        Action::DetachRolePolicy => {
            roles::attach(pool, &found()?, param(params, "PolicyArn")?, false).await?;
            Answered::Done("DetachRolePolicy")
        }
        Action::ListAttachedRolePolicies => Answered::Attached(Holding::Role, found()?.attached),
        Action::GetRolePolicy => {
            let policy = param(params, "PolicyName")?;
            let role = found()?;
            let document = role
                .policy(policy)
                .ok_or_else(|| IamRefusal::NoSuchEntity(format!("policy {policy} of role {name}")))?
                .to_owned();
            Answered::Policy {
                of: Holding::Role,
                holder: name.into(),
                name: policy.into(),
                document,
            }
        }
        _ => Answered::Names(
            Holding::Role,
            found()?
                .policies
                .into_iter()
                .map(|(name, _)| name)
                .collect(),
        ),
    })
}

/// The tags a request gives (`Tags.member.N.Key` and `.Value`, from 1 on), in order.
fn tags(params: &Params) -> Vec<(String, String)> {
    let mut tags = Vec::new();
    for n in 1.. {
        let Some(key) = params.get(&format!("Tags.member.{n}.Key")) else {
            break;
        };
        let value = params
            .get(&format!("Tags.member.{n}.Value"))
            .cloned()
            .unwrap_or_default();
        tags.push((key.clone(), value));
    }
    tags
}

/// STS's AssumeRole: a session of the role `RoleArn` names, for a user (or a user's own
/// session) whom the role's trust policy lets in and whose own policies do not deny it.
pub(super) async fn assume(
    pool: &Pool,
    holder: &Holder,
    params: &Params,
    from: Origin,
) -> Result<Answered, IamRefusal> {
    let user = holder.user();
    let denied = |action: &'static str| IamRefusal::Denied {
        who: crate::accounts::arn(user),
        action,
    };
    if holder.role().is_some() {
        return Err(denied("AssumeRole with a role's session (role chaining)"));
    }
    let arn = param(params, "RoleArn")?;
    let (session_name, bound) = session_params(params)?;
    let tags = tags(params);
    roles::check_tags(&tags)?;
    roles::check_session_tags(&tags)?;
    // An account's root or user takes on accounts' roles alone.
    let role = named_role(pool, arn, user.account.is_some())
        .await?
        .ok_or_else(|| denied("sts:AssumeRole on that role"))?;
    let resource = roles::arn(&role);
    let caller = Caller::read(pool, user.clone()).await?;
    if verdict(&caller, Action::AssumeRole, &resource, from)? == Verdict::Denied {
        return Err(denied("sts:AssumeRole on that role"));
    }
    // Passing tags is the caller's to do too: its own deny of sts:TagSession holds.
    if !tags.is_empty() && verdict(&caller, Action::TagSession, &resource, from)? == Verdict::Denied
    {
        return Err(denied("sts:TagSession on that role"));
    }
    let trust = roles::trust_of(&role)?;
    let shown = crate::accounts::shown(user);
    let mut context = policy::common_context(time::OffsetDateTime::now_utc(), from, Some(shown));
    context.insert("sts:rolesessionname".into(), vec![session_name.into()]);
    if let Some(external) = params.get("ExternalId") {
        context.insert("sts:externalid".into(), vec![external.clone()]);
    }
    tag_context(&mut context, &role, &tags);
    // A trust policy names an account's root by the account, its user by its ARN.
    let principal = match &user.account {
        Some(member) if member.root => member.account.clone(),
        Some(_) => crate::accounts::arn(user),
        None => user.name.clone(),
    };
    let asked = Asked {
        principal: Some(&principal),
        action: Action::AssumeRole,
        resource: &resource,
        context: &context,
        account: None,
        role: None,
    };
    if !trusted(&trust, asked, !tags.is_empty()) {
        return Err(denied(
            "sts:AssumeRole (and sts:TagSession, with tags) on that role",
        ));
    }
    let seconds = users::session_seconds(seconds(params, "DurationSeconds")?, Some(&role))?;
    let taken = RoleTaken {
        name: role.record(),
        id: role.id.clone(),
        session_name: session_name.into(),
        policy: bound,
        tags,
    };
    let now = crate::layout::now_ns();
    let (access_key, session) =
        users::create_session(pool, user, Some(taken), seconds, now).await?;
    Ok(Answered::Assumed {
        access_key,
        session,
        role,
    })
}

/// STS's AssumeRoleWithWebIdentity, which no key signs: a session of the role `RoleArn`
/// names for whom an OpenID Connect provider vouches in `WebIdentityToken`. The account
/// the ARN gives (the operator's users' for their roles) must trust the provider that
/// issued the token ([`crate::oidc`]); the token must be for it and verify under a key it
/// publishes with a certificate the provider record lists ([`web_identity`]); the role must
/// exist; and its trust
/// policy must let the provider's identity in (`"Federated": PROVIDER-ARN`, with the
/// token's claims as `NAME:sub`, `NAME:aud`, `NAME:app_id` and `NAME:azp`). The session
/// acts as the account's root in an account, or as a user kept for the identity
/// ([`users::federated`]) for the operator's roles: what it makes is theirs.
pub(super) async fn assume_with_web_identity(
    pool: &Pool,
    params: &Params,
    from: Origin,
) -> Result<Answered, IamRefusal> {
    let arn = param(params, "RoleArn")?;
    let (session_name, bound) = session_params(params)?;
    if params.contains_key("ProviderId") {
        return Err(IamRefusal::Invalid(
            "ProviderId names an OAuth 2.0 provider, which is not served: OpenID Connect \
             tokens name their issuer"
                .into(),
        ));
    }
    let token = web_identity::Token::read(param(params, "WebIdentityToken")?)?;
    let claims = &token.claims;
    // The token is judged before the role is looked up: who cannot show a good token
    // learns nothing of which roles exist.
    let (role_account, _) = role_named(arn)?;
    let name = oidc::name(&claims.iss);
    let provider = oidc::get(pool, role_account.unwrap_or_default(), name)
        .await?
        .ok_or_else(|| {
            web_identity::Refusal::Invalid(format!(
                "no OpenID Connect provider for {} is trusted where the role is",
                claims.iss
            ))
        })?;
    let now = time::OffsetDateTime::now_utc();
    let audience = token.check(&provider, now.unix_timestamp())?;
    let keys = web_identity::keys(&provider.url, false).await?;
    match token.verify(&keys, &provider.thumbprints) {
        Err(web_identity::Refusal::UnknownKey(_)) => {
            let keys = web_identity::keys(&provider.url, true).await?;
            token.verify(&keys, &provider.thumbprints)?;
        }
        verified => verified?,
    }
    let denied = || IamRefusal::Denied {
        who: format!("{} of {}", claims.sub, claims.iss),
        action: "sts:AssumeRoleWithWebIdentity (and sts:TagSession, with tags) on that role",
    };
    let role = named_role(pool, arn, false).await?.ok_or_else(denied)?;
    let principal = format!("Federated:{}", oidc::arn(&provider));
    let mut context = policy::common_context(now, from, None);
    // Not an anonymous request: the provider vouches for the caller.
    context.remove("aws:principaltype");
    context.insert("sts:rolesessionname".into(), vec![session_name.into()]);
    let key = |claim: &str| format!("{name}:{claim}").to_ascii_lowercase();
    context.insert(key("sub"), vec![claims.sub.clone()]);
    context.insert(key("aud"), claims.aud.clone());
    // Ceph's gateway's name for the audience.
    context.insert(key("app_id"), claims.aud.clone());
    if let Some(azp) = &claims.azp {
        context.insert(key("azp"), vec![azp.clone()]);
    }
    tag_context(&mut context, &role, &claims.tags);
    let resource = roles::arn(&role);
    let asked = Asked {
        principal: Some(&principal),
        action: Action::AssumeRoleWithWebIdentity,
        resource: &resource,
        context: &context,
        account: None,
        role: None,
    };
    if !trusted(&roles::trust_of(&role)?, asked, !claims.tags.is_empty()) {
        return Err(denied());
    }
    let seconds = users::session_seconds(seconds(params, "DurationSeconds")?, Some(&role))?;
    let owner = match &role.account {
        Some(account) => users::get(pool, account)
            .await?
            .ok_or_else(|| IamRefusal::NoSuchEntity(format!("account {account}")))?,
        // A user of that name with keys is someone else's: the identity is refused (and
        // the operator told why).
        None => match users::federated(pool, name, &claims.sub).await {
            Err(crate::Error::Conflict(why)) => {
                tracing::warn!("web identity refused: {why}");
                return Err(denied());
            }
            found => found?,
        },
    };
    let taken = RoleTaken {
        name: role.record(),
        id: role.id.clone(),
        session_name: session_name.into(),
        policy: bound,
        tags: claims.tags.clone(),
    };
    let (access_key, session) =
        users::create_session(pool, &owner, Some(taken), seconds, crate::layout::now_ns()).await?;
    Ok(Answered::Result(
        "AssumeRoleWithWebIdentity",
        format!(
            "{}<SubjectFromWebIdentityToken>{}</SubjectFromWebIdentityToken>{}\
             <Provider>{}</Provider><Audience>{}</Audience>\
             <PackedPolicySize>0</PackedPolicySize>",
            super::credentials_xml(&access_key, &session),
            escape(&claims.sub),
            assumed_xml(&role, &session),
            escape(&claims.iss),
            escape(&audience)
        ),
    ))
}

/// Whether a role's `trust` policy lets `asked` in and, for a session to carry tags, lets
/// them be passed (`sts:TagSession`) too.
fn trusted(trust: &Policy, asked: Asked, tagged: bool) -> bool {
    let tag = Asked {
        action: Action::TagSession,
        ..asked
    };
    trust.judge(&asked) == Verdict::Allowed && (!tagged || trust.judge(&tag) == Verdict::Allowed)
}

/// Puts a session's `tags` in `context` as a trust policy reads them
/// (`aws:RequestTag/KEY`, `aws:TagKeys`), beside the tags of the `role` asked for
/// (`iam:ResourceTag/KEY`).
fn tag_context(context: &mut policy::Context, role: &Role, tags: &[(String, String)]) {
    policy::put_tags(context, "aws:RequestTag/", tags);
    policy::put_tag_keys(context, tags);
    policy::put_tags(context, "iam:ResourceTag/", &role.tags);
}

/// The RoleSessionName and the session policy (`Policy`) that AssumeRole and
/// AssumeRoleWithWebIdentity take; managed session policies are refused.
fn session_params(params: &Params) -> Result<(&str, Option<String>), IamRefusal> {
    let session_name = param(params, "RoleSessionName")?;
    check_session_name(session_name)?;
    if params.keys().any(|k| k.starts_with("PolicyArns")) {
        return Err(IamRefusal::Invalid(
            "managed session policies (PolicyArns) are not served: give the policy itself \
             (Policy)"
                .into(),
        ));
    }
    let bound = params
        .get("Policy")
        .map(|text| session_policy(text))
        .transpose()?;
    Ok((session_name, bound))
}

/// The role `arn` names: of the account it gives, or of the operator's users when it gives
/// none (or one that is no account's); none of the operator's when `accounts_only`. A
/// role that does not exist is answered as one that does not trust the caller: the answer
/// tells nothing of which roles exist.
async fn named_role(
    pool: &Pool,
    arn: &str,
    accounts_only: bool,
) -> Result<Option<Role>, IamRefusal> {
    let (role_account, path_name) = role_named(arn)?;
    if role_account.is_none() && accounts_only {
        return Ok(None);
    }
    let name = path_name.rsplit('/').next().unwrap_or(path_name);
    let found = roles::get(pool, role_account, name).await?;
    Ok(found.filter(|role| {
        // An account's role's name in any case, as the account finds it.
        let (path, given) = path_name.rsplit_once('/').unwrap_or(("", path_name));
        let same = match role.account {
            Some(_) => given.eq_ignore_ascii_case(&role.name),
            None => given == role.name,
        };
        format!("/{path}/").replace("//", "/") == role.path && same
    }))
}

/// The account a role's ARN gives (none for the operator's: no account's id) and the
/// role's path and name.
fn role_named(arn: &str) -> Result<(Option<&str>, &str), IamRefusal> {
    let named = arn
        .strip_prefix("arn:aws:iam::")
        .and_then(|rest| rest.split_once(":role/"));
    let Some((account, path_name)) = named else {
        return Err(IamRefusal::Invalid(format!(
            "RoleArn {arn:?} names no role"
        )));
    };
    Ok((
        Some(account).filter(|a| crate::accounts::is_account_id(a)),
        path_name,
    ))
}

/// AssumeRole's `Policy`, the session's own: IAM's grammar of a user's policy, in at most
/// [`SESSION_POLICY_CHARS_MAX`] characters (STS's limit).
fn session_policy(text: &str) -> Result<String, IamRefusal> {
    let chars = text.chars().count();
    if chars > SESSION_POLICY_CHARS_MAX {
        return Err(IamRefusal::Invalid(format!(
            "the session policy has {chars} characters, more than {SESSION_POLICY_CHARS_MAX}"
        )));
    }
    Policy::parse_identity(text).map_err(IamRefusal::Document)?;
    Ok(text.into())
}

fn check_session_name(name: &str) -> Result<(), IamRefusal> {
    let ok = (2..=SESSION_NAME_BYTES_MAX).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(IamRefusal::Invalid(format!(
            "RoleSessionName {name:?}: use 2 to {SESSION_NAME_BYTES_MAX} letters, digits or \
             '+=,.@_-'"
        )))
    }
}

/// The ARN and the id of `session`, of `role`.
fn session_identity(role: &Role, session: &Session) -> (String, String) {
    let session_name = session
        .role
        .as_ref()
        .map_or("", |taken| taken.session_name.as_str());
    (
        roles::session_arn(role, session_name),
        format!("{}:{session_name}", role.id),
    )
}

/// GetCallerIdentity's answer for a session of `role`.
pub(super) fn caller(role: &Role, session: &Session) -> Answered {
    let (arn, id) = session_identity(role, session);
    Answered::Caller {
        arn,
        id,
        account: role.account.clone(),
    }
}

/// A role as IAM describes it (inside `<Role>` or a list's `<member>`).
pub(super) fn role_xml(role: &Role) -> String {
    let tags: String = role
        .tags
        .iter()
        .map(|(key, value)| {
            format!(
                "<member><Key>{}</Key><Value>{}</Value></member>",
                escape(key),
                escape(value)
            )
        })
        .collect();
    format!(
        "<Path>{}</Path><RoleName>{}</RoleName><RoleId>{}</RoleId><Arn>{}</Arn>\
         <CreateDate>{}</CreateDate><AssumeRolePolicyDocument>{}</AssumeRolePolicyDocument>\
         <Description>{}</Description><MaxSessionDuration>{}</MaxSessionDuration>\
         <Tags>{tags}</Tags>",
        escape(&role.path),
        escape(&role.name),
        escape(&role.id),
        escape(&roles::arn(role)),
        iso_time(role.created_ns),
        url_encoded(&role.trust),
        escape(&role.description),
        role.max_session_seconds
    )
}

/// AssumeRole's `<AssumedRoleUser>`: the session's id and ARN.
pub(super) fn assumed_xml(role: &Role, session: &Session) -> String {
    let (arn, id) = session_identity(role, session);
    format!(
        "<AssumedRoleUser><AssumedRoleId>{}</AssumedRoleId><Arn>{}</Arn></AssumedRoleUser>",
        escape(&id),
        escape(&arn)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role() -> Role {
        Role {
            name: "reader".into(),
            path: "/team/".into(),
            id: "AROAX".into(),
            created_ns: 1_796_040_000_000_000_000,
            trust: r#"{"a": 1}"#.into(),
            description: "reads & lists".into(),
            max_session_seconds: 3600,
            tags: vec![("k".into(), "v".into())],
            policies: Vec::new(),
            account: None,
            attached: Vec::new(),
        }
    }

    #[test]
    fn roles_and_their_sessions_are_described_as_iam_and_sts_do() {
        let got = role_xml(&role());
        assert!(
            got.starts_with(
                "<Path>/team/</Path><RoleName>reader</RoleName><RoleId>AROAX</RoleId>\
                 <Arn>arn:aws:iam:::role/team/reader</Arn><CreateDate>2026-11-30T12:00:00Z\
                 </CreateDate><AssumeRolePolicyDocument>%7B%22a%22%3A%201%7D\
                 </AssumeRolePolicyDocument><Description>reads &amp; lists</Description>"
            ),
            "{got}"
        );
        assert!(got.ends_with("<Tags><member><Key>k</Key><Value>v</Value></member></Tags>"));
        let session = Session {
            user: "ann".into(),
            user_created_ns: 1,
            secret_key: "S".into(),
            token: "T".into(),
            expires_ns: 2,
            role: Some(RoleTaken {
                name: "reader".into(),
                id: "AROAX".into(),
                session_name: "nightly".into(),
                policy: None,
                tags: Vec::new(),
            }),
        };
        assert_eq!(
            assumed_xml(&role(), &session),
            "<AssumedRoleUser><AssumedRoleId>AROAX:nightly</AssumedRoleId>\
             <Arn>arn:aws:sts:::assumed-role/reader/nightly</Arn></AssumedRoleUser>"
        );
        for bad in ["a", "a b", &"n".repeat(65)] {
            assert!(check_session_name(bad).is_err(), "{bad}");
        }
        let mut params = Params::new();
        params.insert("Tags.member.1.Key".into(), "a".into());
        params.insert("Tags.member.1.Value".into(), "1".into());
        params.insert("Tags.member.2.Key".into(), "b".into());
        params.insert("Tags.member.3.Value".into(), "lost".into());
        assert_eq!(
            tags(&params),
            [("a".into(), "1".into()), ("b".into(), String::new())]
        );
    }
}
