//! An account's groups (IAM's groups): a user in a group acts with the group's policies,
//! inline and managed, besides its own.
//!
//! Records, in the users' object beside the users: a group's record under its id
//! (`group/ID`, [`layout::group_key`]), and its name in lower case naming that id
//! (`groupname/ACCOUNT$name`), so that names are unique in an account whatever their case.
//! A user's record lists the ids of its groups: a signature reads the user, then its groups
//! in one more read; a group renamed keeps its users; a user removed leaves its groups.
//! A user's record may name a group removed while the user was being added to it: such an
//! id names no group and grants nothing.

use bytes::Bytes;
use client::{ObjectOp, Pool};

use crate::layout::{self, Group, User};
use crate::omap::Pages;
use crate::policy::Policy;
use crate::users::{self, ACCESS_KEY_ALPHABET};
use crate::Error;

/// The most groups an account holds, and a user is in (IAM's default quotas).
pub const GROUPS_MAX: usize = 300;
pub const GROUPS_PER_USER_MAX: usize = 10;
/// IAM's limit on a group's name.
const NAME_BYTES_MAX: usize = 128;

/// The ARN of group `name` under `path` in `account`.
pub fn arn_in(account: &str, path: &str, name: &str) -> String {
    format!("arn:aws:iam::{account}:group{path}{name}")
}

/// The ARN of `group`.
pub fn arn(group: &Group) -> String {
    arn_in(&group.account, &group.path, &group.name)
}

fn check_name(name: &str) -> Result<(), Error> {
    users::check_iam_name("group", name, NAME_BYTES_MAX)
}

/// Creates group `name` under `path` (`None`: `/`) in `account`, unless one of its name
/// (in any case) exists.
pub async fn create(
    pool: &Pool,
    account: &str,
    name: &str,
    path: Option<&str>,
) -> Result<Group, Error> {
    check_name(name)?;
    let path = path.unwrap_or("/");
    crate::roles::check_path(path)?;
    if list(pool, account, "/").await?.len() >= GROUPS_MAX {
        return Err(Error::Limit(format!(
            "an account holds at most {GROUPS_MAX} groups"
        )));
    }
    let group = Group {
        name: name.into(),
        path: path.into(),
        id: format!("AGPA{}", users::random_text(17, ACCESS_KEY_ALPHABET)),
        account: account.into(),
        created_ns: layout::now_ns(),
        policies: Vec::new(),
        attached: Vec::new(),
    };
    let name_key = layout::group_name_key(account, name);
    let ops = vec![
        ObjectOp::Create { exclusive: false },
        ObjectOp::AssertOmap {
            key: name_key.clone(),
            value: None,
        },
        ObjectOp::OmapSet {
            entries: vec![
                (name_key, group.id.clone().into_bytes()),
                (layout::group_key(&group.id), layout::encode(&group)),
            ],
        },
    ];
    match pool.operate(layout::USERS, ops, Bytes::new()).await {
        Ok(_) => Ok(group),
        Err(client::Error::Mismatch(_)) => Err(Error::Exists(format!("group {name}"))),
        Err(e) => Err(e.into()),
    }
}

/// Group `name` (in any case) of `account`, if there is one.
pub async fn get(pool: &Pool, account: &str, name: &str) -> Result<Option<Group>, Error> {
    let key = layout::group_name_key(account, name);
    let id = match pool.omap_get(layout::USERS, vec![key]).await {
        Ok(found) => found.into_iter().next().and_then(|(_, value)| value),
        Err(client::Error::NotFound) => None,
        Err(e) => return Err(e.into()),
    };
    let Some(id) = id else {
        return Ok(None);
    };
    let id = String::from_utf8(id).map_err(|_| Error::Corrupt(format!("group {name}'s id")))?;
    Ok(by_ids(pool, &[id])
        .await?
        .into_iter()
        .find(|group| group.account == account))
}

/// The groups of `ids` that exist, in no particular order.
pub async fn by_ids(pool: &Pool, ids: &[String]) -> Result<Vec<Group>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let keys = ids.iter().map(|id| layout::group_key(id)).collect();
    let found = match pool.omap_get(layout::USERS, keys).await {
        Ok(found) => found,
        Err(client::Error::NotFound) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    found
        .into_iter()
        .filter_map(|(_, value)| value)
        .map(|bytes| layout::decode(&bytes).map_err(Error::Corrupt))
        .collect()
}

/// `user`'s groups (none for a user in none), by name in lower case.
pub async fn of_user(pool: &Pool, user: &User) -> Result<Vec<Group>, Error> {
    let mut groups = by_ids(pool, &user.groups).await?;
    groups.sort_by_key(|group| group.name.to_lowercase());
    Ok(groups)
}

/// `account`'s groups whose path starts with `prefix`, by name in lower case.
pub async fn list(pool: &Pool, account: &str, prefix: &str) -> Result<Vec<Group>, Error> {
    let start = layout::group_name_key(account, "");
    let mut ids = Vec::new();
    let mut pages = Pages::new(pool, layout::USERS, layout::before(&start));
    'pages: while let Some(page) = pages.next().await? {
        for (key, value) in page {
            if !key.starts_with(&start) {
                break 'pages;
            }
            ids.push(String::from_utf8(value).map_err(|_| {
                Error::Corrupt(format!(
                    "the group id under {}",
                    String::from_utf8_lossy(&key)
                ))
            })?);
        }
    }
    let mut groups: Vec<Group> = by_ids(pool, &ids)
        .await?
        .into_iter()
        .filter(|group| group.account == account && group.path.starts_with(prefix))
        .collect();
    groups.sort_by_key(|group| group.name.to_lowercase());
    Ok(groups)
}

/// `group`'s users, by name in lower case.
pub async fn members(pool: &Pool, group: &Group) -> Result<Vec<User>, Error> {
    let users = crate::accounts::members(pool, &group.account, "/").await?;
    Ok(users
        .into_iter()
        .filter(|user| user.groups.contains(&group.id))
        .collect())
}

/// Changes group `judged` as `change` makes it, unless it was removed since it was read (a
/// group of the same name made since is another): a new name moves its name's record,
/// refused if another group has that name. Returns the group written.
pub async fn update(
    pool: &Pool,
    judged: &Group,
    change: impl Fn(Group) -> Result<Group, Error>,
) -> Result<Group, Error> {
    let key = layout::group_key(&judged.id);
    let what = format!("group {}", judged.name);
    for _ in 0..users::UPDATE_TRIES {
        let Some((bytes, found)) = users::read_record::<Group>(pool, key.clone()).await? else {
            return Err(Error::NotFound(what));
        };
        let changed = change(found.clone())?;
        debug_assert_eq!((&changed.id, &changed.account), (&found.id, &found.account));
        let mut ops = vec![ObjectOp::AssertOmap {
            key: key.clone(),
            value: Some(bytes),
        }];
        let old_name = layout::group_name_key(&found.account, &found.name);
        let new_name = layout::group_name_key(&changed.account, &changed.name);
        let mut entries = vec![(key.clone(), layout::encode(&changed))];
        if new_name != old_name {
            if get(pool, &changed.account, &changed.name).await?.is_some() {
                return Err(Error::Exists(format!("group {}", changed.name)));
            }
            ops.push(ObjectOp::AssertOmap {
                key: new_name.clone(),
                value: None,
            });
            ops.push(ObjectOp::OmapRemove {
                keys: vec![old_name],
            });
            entries.push((new_name, changed.id.clone().into_bytes()));
        }
        ops.push(ObjectOp::OmapSet { entries });
        match pool.operate(layout::USERS, ops, Bytes::new()).await {
            Ok(_) => return Ok(changed),
            Err(client::Error::Mismatch(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Busy(format!("{what} is being changed by others")))
}

/// Gives group `judged` the name `new_name` and the path `new_path`, where given (IAM's
/// UpdateGroup).
pub async fn rename(
    pool: &Pool,
    judged: &Group,
    new_name: Option<&str>,
    new_path: Option<&str>,
) -> Result<Group, Error> {
    if let Some(new_name) = new_name {
        check_name(new_name)?;
    }
    if let Some(new_path) = new_path {
        crate::roles::check_path(new_path)?;
    }
    update(pool, judged, |mut group| {
        if let Some(new_name) = new_name {
            group.name = new_name.into();
        }
        if let Some(new_path) = new_path {
            group.path = new_path.into();
        }
        Ok(group)
    })
    .await
}

/// Sets group `judged`'s policy `name` to `document`, or removes it without one.
pub async fn set_policy(
    pool: &Pool,
    judged: &Group,
    name: &str,
    document: Option<&str>,
) -> Result<Group, Error> {
    let holder = format!("group {}", judged.name);
    update(pool, judged, |mut group| {
        let parse = Policy::parse_identity;
        users::change_policy(&mut group.policies, &holder, name, document, parse)?;
        Ok(group)
    })
    .await
}

/// Attaches managed policy `arn` to group `judged` (`attach`), or detaches it.
pub async fn attach(pool: &Pool, judged: &Group, arn: &str, attach: bool) -> Result<(), Error> {
    let holder = format!("group {}", judged.name);
    update(pool, judged, |mut group| {
        crate::managed::change(&mut group.attached, &holder, arn, attach)?;
        Ok(group)
    })
    .await
    .map(drop)
}

/// Removes group `judged`; refused while it has users or policies (IAM's DeleteConflict).
pub async fn remove(pool: &Pool, judged: &Group) -> Result<(), Error> {
    let name = &judged.name;
    let key = layout::group_key(&judged.id);
    let Some((bytes, group)) = users::read_record::<Group>(pool, key.clone()).await? else {
        return Err(Error::NotFound(format!("group {name}")));
    };
    if !group.policies.is_empty() || !group.attached.is_empty() {
        return Err(Error::Conflict(format!(
            "group {name} has policies; remove them first"
        )));
    }
    let users = members(pool, &group).await?.len();
    if users > 0 {
        return Err(Error::Conflict(format!(
            "group {name} has {users} users; remove them from it first"
        )));
    }
    let keys = vec![
        key.clone(),
        layout::group_name_key(&group.account, &group.name),
    ];
    users::remove_as_read(pool, key, bytes, keys, &format!("group {name}")).await
}

/// Puts `user` (shown as `shown`) in `group` (`join`), or takes them out of it; ids in the
/// user's record that name no group (one removed while the user joined it) go too.
pub async fn set_member(
    pool: &Pool,
    group: &Group,
    user: &User,
    shown: &str,
    join: bool,
) -> Result<(), Error> {
    let found = by_ids(pool, &user.groups).await?;
    let gone: Vec<&String> = user
        .groups
        .iter()
        .filter(|id| *id != &group.id && !found.iter().any(|g| g.id == **id))
        .collect();
    users::update(pool, &user.name, shown, |mut user| {
        user.groups.retain(|id| !gone.contains(&id));
        let at = user.groups.iter().position(|id| *id == group.id);
        match (join, at) {
            (true, Some(_)) => {}
            (true, None) if user.groups.len() >= GROUPS_PER_USER_MAX => {
                return Err(Error::Limit(format!(
                    "user {shown} is in {GROUPS_PER_USER_MAX} groups already"
                )))
            }
            (true, None) => user.groups.push(group.id.clone()),
            (false, Some(at)) => {
                user.groups.remove(at);
            }
            (false, None) => {
                return Err(Error::NotFound(format!(
                    "user {shown} in group {}",
                    group.name
                )))
            }
        }
        Ok(user)
    })
    .await
    .map(drop)
}
