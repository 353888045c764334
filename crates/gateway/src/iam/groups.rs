//! IAM's verbs on an account's groups (CreateGroup, GetGroup, UpdateGroup, DeleteGroup,
//! ListGroups, AddUserToGroup, RemoveUserFromGroup, ListGroupsForUser, and the group's
//! policies: Put/Get/List/DeleteGroupPolicy, Attach/Detach/ListAttachedGroupPolicies).
//!
//! An account's root may use them on its account's groups; an account's user when its
//! policies allow `iam:VERB` on the group's ARN (`arn:aws:iam::ACCOUNT:group/PATH/NAME`;
//! ListGroupsForUser: on the user's), judged before the answer says whether the group
//! exists.

use client::Pool;

use super::{
    escape, iso_time, may, outside_accounts, page, param, Answered, Caller, Holding, IamRefusal,
    Origin, Params,
};
use crate::layout::Group;
use crate::policy::Action;
use crate::{accounts, groups};

/// The IAM verbs served here.
pub(super) const VERBS: &[&str] = &[
    "CreateGroup",
    "GetGroup",
    "UpdateGroup",
    "DeleteGroup",
    "ListGroups",
    "AddUserToGroup",
    "RemoveUserFromGroup",
    "ListGroupsForUser",
    "PutGroupPolicy",
    "GetGroupPolicy",
    "ListGroupPolicies",
    "DeleteGroupPolicy",
    "AttachGroupPolicy",
    "DetachGroupPolicy",
    "ListAttachedGroupPolicies",
];

/// Does IAM's verb `verb` on groups for `signer`.
pub(super) async fn act(
    pool: &Pool,
    signer: &Caller,
    verb: &str,
    params: &Params,
    from: Origin,
) -> Result<Answered, IamRefusal> {
    let Some(account) = signer.account() else {
        if verb == "ListGroups" {
            // The operator's users are in no group: the list is what there is.
            return Ok(Answered::Groups("ListGroups", Vec::new(), None));
        }
        return Err(outside_accounts(verb));
    };
    match verb {
        "ListGroups" => {
            let prefix = params.get("PathPrefix").map_or("/", String::as_str);
            let resource = groups::arn_in(account, prefix, "*");
            may(signer, Action::ListGroups, &resource, from)?;
            let found = groups::list(pool, account, prefix).await?;
            let (found, marker) = page(found, |group| group.name.to_lowercase(), params)?;
            return Ok(Answered::Groups("ListGroups", found, marker));
        }
        "CreateGroup" => {
            let name = param(params, "GroupName")?;
            let path = params.get("Path").map(String::as_str);
            let resource = groups::arn_in(account, path.unwrap_or("/"), name);
            may(signer, Action::CreateGroup, &resource, from)?;
            let group = groups::create(pool, account, name, path).await?;
            return Ok(Answered::Group("CreateGroup", group, None));
        }
        "ListGroupsForUser" => {
            let name = param(params, "UserName")?;
            let found = accounts::member(pool, account, name).await?;
            let resource = match &found {
                Some(user) => accounts::arn(user),
                None => accounts::member_arn(account, "/", name),
            };
            may(signer, Action::ListGroupsForUser, &resource, from)?;
            let user = found.ok_or_else(|| IamRefusal::NoSuchEntity(format!("user {name}")))?;
            let found = groups::of_user(pool, &user).await?;
            return Ok(Answered::Groups("ListGroupsForUser", found, None));
        }
        _ => {}
    }
    let action = match verb {
        "GetGroup" => Action::GetGroup,
        "UpdateGroup" => Action::UpdateGroup,
        "DeleteGroup" => Action::DeleteGroup,
        "AddUserToGroup" => Action::AddUserToGroup,
        "RemoveUserFromGroup" => Action::RemoveUserFromGroup,
        "PutGroupPolicy" => Action::PutGroupPolicy,
        "GetGroupPolicy" => Action::GetGroupPolicy,
        "ListGroupPolicies" => Action::ListGroupPolicies,
        "DeleteGroupPolicy" => Action::DeleteGroupPolicy,
        "AttachGroupPolicy" => Action::AttachGroupPolicy,
        "DetachGroupPolicy" => Action::DetachGroupPolicy,
        "ListAttachedGroupPolicies" => Action::ListAttachedGroupPolicies,
        other => return Err(IamRefusal::UnknownAction(other.into())),
    };
    // The group the verb names, judged on its ARN (with its path) before learning whether
    // it exists.
    let name = param(params, "GroupName")?;
    let found = groups::get(pool, account, name).await?;
    let resource = match &found {
        Some(group) => groups::arn(group),
        None => groups::arn_in(account, "/", name),
    };
    may(signer, action, &resource, from)?;
    let group = found.ok_or_else(|| IamRefusal::NoSuchEntity(format!("group {name}")))?;
    Ok(match action {
        Action::GetGroup => {
            let users = groups::members(pool, &group).await?;
            Answered::Group("GetGroup", group, Some(users))
        }
        Action::UpdateGroup => {
            let new_name = params.get("NewGroupName").map(String::as_str);
            let new_path = params.get("NewPath").map(String::as_str);
            // Where the group goes is judged too.
            let to = groups::arn_in(
                account,
                new_path.unwrap_or(&group.path),
                new_name.unwrap_or(&group.name),
            );
            may(signer, action, &to, from)?;
            groups::rename(pool, &group, new_name, new_path).await?;
            Answered::Done("UpdateGroup")
        }
        Action::DeleteGroup => {
            groups::remove(pool, &group).await?;
            Answered::Done("DeleteGroup")
        }
        Action::AddUserToGroup | Action::RemoveUserFromGroup => {
            let user_name = param(params, "UserName")?;
            let user = accounts::member(pool, account, user_name)
                .await?
                .filter(|user| !user.account.as_ref().is_some_and(|a| a.root))
                .ok_or_else(|| IamRefusal::NoSuchEntity(format!("user {user_name}")))?;
            let join = action == Action::AddUserToGroup;
            groups::set_member(pool, &group, &user, user_name, join).await?;
            Answered::Done(if join {
                "AddUserToGroup"
            } else {
                "RemoveUserFromGroup"
            })
        }
        Action::PutGroupPolicy => {
            let (policy, document) = (
                param(params, "PolicyName")?,
                param(params, "PolicyDocument")?,
            );
            groups::set_policy(pool, &group, policy, Some(document)).await?;
            Answered::Done("PutGroupPolicy")
        }
        Action::DeleteGroupPolicy => {
            groups::set_policy(pool, &group, param(params, "PolicyName")?, None).await?;
            Answered::Done("DeleteGroupPolicy")
        }
        Action::GetGroupPolicy => {
            let policy = param(params, "PolicyName")?;
            let document = group
                .policy(policy)
                .ok_or_else(|| {
                    IamRefusal::NoSuchEntity(format!("policy {policy} of group {name}"))
                })?
                .to_owned();
            Answered::Policy {
                of: Holding::Group,
                holder: group.name,
                name: policy.into(),
                document,
            }
        }
        Action::ListGroupPolicies => Answered::Names(
            Holding::Group,
            group.policies.into_iter().map(|(name, _)| name).collect(),
        ),
        Action::AttachGroupPolicy | Action::DetachGroupPolicy => {
            let attach = action == Action::AttachGroupPolicy;
            groups::attach(pool, &group, param(params, "PolicyArn")?, attach).await?;
            Answered::Done(if attach {
                "AttachGroupPolicy"
            } else {
                "DetachGroupPolicy"
            })
        }
        _ => Answered::Attached(Holding::Group, group.attached),
    })
}

/// A group as IAM's answers describe it.
pub(super) fn group_xml(group: &Group) -> String {
    format!(
        "<Path>{}</Path><GroupName>{}</GroupName><GroupId>{}</GroupId><Arn>{}</Arn>\
         <CreateDate>{}</CreateDate>",
        escape(&group.path),
        escape(&group.name),
        escape(&group.id),
        escape(&groups::arn(group)),
        iso_time(group.created_ns)
    )
}
