//! IAM's verbs on an account's users and access keys (CreateUser, GetUser, UpdateUser,
//! DeleteUser, ListUsers, CreateAccessKey, UpdateAccessKey, DeleteAccessKey,
//! ListAccessKeys), and the lists of what Coffer's accounts do not hold (groups, OIDC
//! providers), which answer empty.
//!
//! An account's root may use them on its account's users; an account's user when its own
//! policies allow `iam:VERB` on the user's ARN (`arn:aws:iam::ACCOUNT:user/PATH/NAME`),
//! judged before the answer says whether that user exists. A verb that names no user acts
//! on the caller. The operator's users are made with `coffer user create`, outside IAM.

use client::Pool;

use super::{escape, iso_time, may, param, Answered, IamRefusal, Origin, Params};
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
    "ListGroups",
    "ListOpenIDConnectProviders",
    "GetAccountSummary",
];

/// The most users ListUsers answers at once, and when not asked (IAM's).
const LIST_MAX: usize = 1000;
const LIST_DEFAULT: usize = 100;

/// Does IAM's verb `verb` on users or keys for `signer`.
pub(super) async fn act(
    pool: &Pool,
    signer: &User,
    verb: &str,
    params: &Params,
    from: Origin,
) -> Result<Answered, IamRefusal> {
    match verb {
        "ListGroups" => return Ok(Answered::Empty("ListGroups", "Groups")),
        "ListOpenIDConnectProviders" => {
            return Ok(Answered::Empty(
                "ListOpenIDConnectProviders",
                "OpenIDConnectProviderList",
            ))
        }
        "GetUser" if !params.contains_key("UserName") => {
            return Ok(Answered::User("GetUser", signer.clone()))
        }
        _ => {}
    }
    let Some(member) = &signer.account else {
        return Err(IamRefusal::Invalid(format!(
            "{verb} acts in an account: an account's root or user may use it (the operator \
             makes accounts with `coffer account create`, and its own users with `coffer \
             user create`)"
        )));
    };
    let account = member.account.as_str();
    if verb == "GetAccountSummary" {
        may(signer, Action::GetAccountSummary, "*", from)?;
        let users = accounts::members(pool, account, "/").await?.len();
        let user_policies = crate::users::USER_POLICIES_BYTES_MAX;
        return Ok(Answered::Summary(vec![
            ("Users", users),
            ("UsersQuota", accounts::USERS_MAX),
            ("Groups", 0),
            ("GroupsQuota", 0),
            ("AccessKeysPerUserQuota", crate::users::KEYS_MAX),
            ("UserPolicySizeQuota", user_policies),
        ]));
    }
    if verb == "ListUsers" {
        let prefix = params.get("PathPrefix").map_or("/", String::as_str);
        let resource = accounts::member_arn(account, prefix, "*");
        may(signer, Action::ListUsers, &resource, from)?;
        let found = accounts::members(pool, account, prefix).await?;
        return listed(found, params);
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
    // The user the verb names, or the caller; judged on its ARN (with its path) before
    // learning whether it exists.
    let (name, target) = match params.get("UserName") {
        Some(name) => (name.as_str(), accounts::member(pool, account, name).await?),
        None => (member.name.as_str(), Some(signer.clone())),
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
            Answered::Key(accounts::shown(&target), key)
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
        _ => Answered::Keys(accounts::shown(&target), target.keys),
    })
}

/// ListUsers' page of `found` (by record name) after `Marker`, at most `MaxItems`.
fn listed(found: Vec<User>, params: &Params) -> Result<Answered, IamRefusal> {
    let most = match params.get("MaxItems") {
        None => LIST_DEFAULT,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=LIST_MAX).contains(&n) => n,
            _ => {
                return Err(IamRefusal::Invalid(format!(
                    "MaxItems {text:?}: from 1 to {LIST_MAX}"
                )))
            }
        },
    };
    let after = params.get("Marker");
    let mut page: Vec<User> = found
        .into_iter()
        .filter(|user| after.is_none_or(|marker| user.name.as_str() > marker.as_str()))
        .take(most + 1)
        .collect();
    let more = page.len() > most;
    page.truncate(most);
    let marker = more.then(|| page.last().map(|u| u.name.clone())).flatten();
    Ok(Answered::Users(page, marker))
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
        escape(&accounts::shown(user)),
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
