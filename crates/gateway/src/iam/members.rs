//! IAM's verbs on an account's users and access keys (CreateUser, GetUser, UpdateUser,
//! DeleteUser, ListUsers, CreateAccessKey, UpdateAccessKey, DeleteAccessKey,
//! ListAccessKeys), GetAccountSummary, and the list of what Coffer's accounts do not hold
//! (OIDC providers), which answers empty.
//!
//! An account's root may use them on its account's users; an account's user when its own
//! policies allow `iam:VERB` on the user's ARN (`arn:aws:iam::ACCOUNT:user/PATH/NAME`),
//! judged before the answer says whether that user exists. A verb that names no user acts
//! on the caller. The operator's users are made with `coffer user create`, outside IAM.

use client::Pool;

use super::{escape, iso_time, may, page, param, Answered, Caller, IamRefusal, Origin, Params};
use crate::accounts;
use crate::layout::{AccessKey, User};
use crate::policy::Action;

/// The IAM verbs served here.
pub(super) const VERBS: &[&str] = &[
    "CreateUser",
    "GetUser",
    "UpdateUser",
    "DeleteUser",
    "ListUsers",
    "CreateAccessKey",
    "UpdateAccessKey",
    "DeleteAccessKey",
    "ListAccessKeys",
    "GetAccountSummary",
];

/// Does IAM's verb `verb` on users or keys for `signer`.
pub(super) async fn act(
    pool: &Pool,
    signer: &Caller,
    verb: &str,
    params: &Params,
    from: Origin,
) -> Result<Answered, IamRefusal> {
    match verb {
        "GetUser" if !params.contains_key("UserName") => {
            let me = signer
                .signing_user()
                .ok_or(IamRefusal::Missing("UserName"))?;
            return Ok(Answered::User("GetUser", me.clone()));
        }
        _ => {}
    }
    let Some(account) = signer.account() else {
        return Err(IamRefusal::Invalid(format!(
            "{verb} acts in an account: an account's root or user may use it (the operator \
             makes accounts with `coffer account create`, and its own users with `coffer \
             user create`)"
        )));
    };
    if verb == "GetAccountSummary" {
        may(signer, Action::GetAccountSummary, "*", from)?;
        let users = accounts::members(pool, account, "/").await?.len();
        let groups = crate::groups::list(pool, account, "/").await?.len();
        let user_policies = crate::users::USER_POLICIES_BYTES_MAX;
        return Ok(Answered::Summary(vec![
            ("Users", users),
            ("UsersQuota", accounts::USERS_MAX),
            ("Groups", groups),
            ("GroupsQuota", crate::groups::GROUPS_MAX),
            ("GroupsPerUserQuota", crate::groups::GROUPS_PER_USER_MAX),
            ("AttachedPoliciesPerUserQuota", crate::managed::ATTACHED_MAX),
            (
                "AttachedPoliciesPerGroupQuota",
                crate::managed::ATTACHED_MAX,
            ),
            ("AttachedPoliciesPerRoleQuota", crate::managed::ATTACHED_MAX),
            ("AccessKeysPerUserQuota", crate::users::KEYS_MAX),
            ("UserPolicySizeQuota", user_policies),
        ]));
    }
    if verb == "ListUsers" {
        let prefix = params.get("PathPrefix").map_or("/", String::as_str);
        let resource = accounts::member_arn(account, prefix, "*");
        may(signer, Action::ListUsers, &resource, from)?;
        let found = accounts::members(pool, account, prefix).await?;
        let (users, marker) = page(found, |user| user.name.clone(), params)?;
        return Ok(Answered::Users(users, marker));
    }
    if verb == "CreateUser" {
        let name = param(params, "UserName")?;
        let path = params.get("Path").map(String::as_str);
        let resource = accounts::member_arn(account, path.unwrap_or("/"), name);
        may(signer, Action::CreateUser, &resource, from)?;
        let user = accounts::create_member(pool, account, name, path).await?;
        return Ok(Answered::User("CreateUser", user));
    }
    let action = match verb {
        "GetUser" => Action::GetUser,
        "UpdateUser" => Action::UpdateUser,
        "DeleteUser" => Action::DeleteUser,
        "CreateAccessKey" => Action::CreateAccessKey,
        "UpdateAccessKey" => Action::UpdateAccessKey,
        "DeleteAccessKey" => Action::DeleteAccessKey,
        "ListAccessKeys" => Action::ListAccessKeys,
        other => return Err(IamRefusal::UnknownAction(other.into())),
    };
    // The user the verb names, or the user who signed; judged on its ARN (with its path)
    // before learning whether it exists.
    let (name, target) = match (params.get("UserName"), signer.signing_user()) {
        (Some(name), _) => (name.as_str(), accounts::member(pool, account, name).await?),
        (None, Some(me)) => (accounts::shown(me), Some(me.clone())),
        (None, None) => return Err(IamRefusal::Missing("UserName")),
    };
    let resource = match &target {
        Some(user) => accounts::arn(user),
        None => accounts::member_arn(account, "/", name),
    };
    may(signer, action, &resource, from)?;
    let target = target.ok_or_else(|| IamRefusal::NoSuchEntity(format!("user {name}")))?;
    if let (Action::UpdateUser, Some(member)) = (action, &target.account) {
        // Where the user goes is judged too.
        let path = params.get("NewPath").unwrap_or(&member.path);
        let to = params.get("NewUserName").unwrap_or(&member.name);
        may(
            signer,
            action,
            &accounts::member_arn(account, path, to),
            from,
        )?;
    }
    Ok(match action {
        Action::GetUser => Answered::User("GetUser", target),
        Action::UpdateUser => {
            let new_name = params.get("NewUserName").map(String::as_str);
            let new_path = params.get("NewPath").map(String::as_str);
            if target.account.as_ref().is_some_and(|a| a.root) {
                return Err(IamRefusal::Invalid(
                    "an account's root keeps its name".into(),
                ));
            }
            accounts::update_member(pool, account, name, new_name, new_path).await?;
            Answered::Done("UpdateUser")
        }
        Action::DeleteUser => {
            if target.account.as_ref().is_some_and(|a| a.root) {
                return Err(IamRefusal::Invalid(
                    "an account's root is removed with its account".into(),
                ));
            }
            accounts::remove_member(pool, account, name).await?;
            Answered::Done("DeleteUser")
        }
        Action::CreateAccessKey => {
            let key = accounts::create_key(pool, &target).await?;
            Answered::Key(accounts::shown(&target).into(), key)
        }
        Action::UpdateAccessKey => {
            let active = match param(params, "Status")? {
                "Active" => true,
                "Inactive" => false,
                other => {
                    return Err(IamRefusal::Invalid(format!(
                        "Status {other:?} is neither Active nor Inactive"
                    )))
                }
            };
            let id = param(params, "AccessKeyId")?;
            accounts::set_key_active(pool, &target, id, active).await?;
            Answered::Done("UpdateAccessKey")
        }
        Action::DeleteAccessKey => {
            let id = param(params, "AccessKeyId")?;
            accounts::remove_key(pool, &target, id).await?;
            Answered::Done("DeleteAccessKey")
        }
        _ => Answered::Keys(accounts::shown(&target).into(), target.keys),
    })
}

/// A user as IAM's answers describe it.
pub(super) fn user_xml(user: &User) -> String {
    let (path, id) = match &user.account {
        Some(member) => (member.path.as_str(), member.id.as_str()),
        None => ("/", user.name.as_str()),
    };
    format!(
        "<Path>{}</Path><UserName>{}</UserName><UserId>{}</UserId><Arn>{}</Arn>\
         <CreateDate>{}</CreateDate>",
        escape(path),
        escape(accounts::shown(user)),
        escape(id),
        escape(&accounts::arn(user)),
        iso_time(user.created_ns)
    )
}

/// An access key as ListAccessKeys describes it (CreateAccessKey adds its secret).
pub(super) fn key_xml(user: &str, key: &AccessKey) -> String {
    let status = if key.active { "Active" } else { "Inactive" };
    format!(
        "<UserName>{}</UserName><AccessKeyId>{}</AccessKeyId><Status>{status}</Status>\
         <CreateDate>{}</CreateDate>",
        escape(user),
        escape(&key.id),
        iso_time(key.created_ns)
    )
}
