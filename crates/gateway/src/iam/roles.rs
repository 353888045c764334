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
    // The role an ARN names: of the account it gives, or of the operator's users when it
    // gives none (or one that is no account's).
    let named = arn
        .strip_prefix("arn:aws:iam::")
        .and_then(|rest| rest.split_once(":role/"));
    let Some((role_account, path_name)) = named else {
        return Err(IamRefusal::Invalid(format!(
            "RoleArn {arn:?} names no role"
        )));
    };
    let role_account = Some(role_account).filter(|a| crate::accounts::is_account_id(a));
    let name = path_name.rsplit('/').next().unwrap_or(path_name);
    // A role that does not exist is refused as one that does not trust the caller: the
    // answer tells nothing of which roles exist. An account's root or user takes on
    // accounts' roles alone.
    let role = match (role_account, &user.account) {
        (None, Some(_)) => None,
        _ => roles::get(pool, role_account, name).await?,
    }
    .filter(|role| {
        // An account's role's name in any case, as the account finds it.
        let (path, given) = path_name.rsplit_once('/').unwrap_or(("", path_name));
        let same = match role.account {
            Some(_) => given.eq_ignore_ascii_case(&role.name),
            None => given == role.name,
        };
        format!("/{path}/").replace("//", "/") == role.path && same
    })
    .ok_or_else(|| denied("sts:AssumeRole on that role"))?;
    let resource = roles::arn(&role);
    let caller = Caller::read(pool, user.clone()).await?;
    if verdict(&caller, Action::AssumeRole, &resource, from)? == Verdict::Denied {
        return Err(denied("sts:AssumeRole on that role"));
    }
    let trust = roles::trust_of(&role)?;
    let shown = crate::accounts::shown(user);
    let mut context = policy::common_context(time::OffsetDateTime::now_utc(), from, Some(shown));
    context.insert("sts:rolesessionname".into(), vec![session_name.into()]);
    if let Some(external) = params.get("ExternalId") {
        context.insert("sts:externalid".into(), vec![external.clone()]);
    }
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
    if trust.judge(&asked) != Verdict::Allowed {
        return Err(denied("sts:AssumeRole on that role"));
    }
    let seconds = users::session_seconds(seconds(params, "DurationSeconds")?, Some(&role))?;
    let taken = RoleTaken {
        name: role.record(),
        id: role.id.clone(),
        session_name: session_name.into(),
        policy: bound,
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
