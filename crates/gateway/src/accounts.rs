//! Accounts, as in IAM and Ceph's gateway: an account has a root, made by the operator
//! (`coffer account create`), who may do anything in it, and users the root (or a user the
//! account's policies allow) makes through IAM's API. What an account's root or users make
//! is the account's: its root is the owner, under the account's id. An account's user acts
//! only as its own policies (or a bucket's policy) allow.
//!
//! Records: the root is a user record named by the account's id, the account's users are
//! records named `ID$name` (the name in lower case: names are unique in an account whatever
//! their case), both beside the operator's users in the users' object, so an account's users
//! list in the order of their names.

use client::Pool;
use rand::Rng;

use crate::layout::{self, AccessKey, InAccount, User};
use crate::users::{self, ACCESS_KEY_ALPHABET, KEYS_MAX};
use crate::Error;

/// An account's id is `RGW` and this many digits, as Ceph's gateway makes them.
const ID_DIGITS: usize = 17;
/// The most users an account holds (Ceph's gateway's default).
pub const USERS_MAX: usize = 1000;
/// IAM's limit on a user's name.
const USER_NAME_BYTES_MAX: usize = 64;
/// The limit on an account's name and email address.
const ACCOUNT_NAME_BYTES_MAX: usize = 64;
const EMAIL_BYTES_MAX: usize = 254;

/// Whether `name` has the form of an account's id (no operator's user may have it).
pub fn is_account_id(name: &str) -> bool {
    name.len() == 3 + ID_DIGITS
        && name.starts_with("RGW")
        && name[3..].bytes().all(|b| b.is_ascii_digit())
}

/// Who owns what `user` makes: their account (its root's name) for an account's root or
/// user, else the user.
pub fn owner(user: &User) -> &str {
    user.account.as_ref().map_or(&user.name, |a| &a.account)
}

/// The account whose email address is `address` (its id), if one has it.
pub async fn by_email(pool: &Pool, address: &str) -> Result<Option<String>, Error> {
    let roots = roots(pool).await?;
    let found = roots.into_iter().find(|root| {
        root.account
            .as_ref()
            .is_some_and(|a| !a.email.is_empty() && a.email.eq_ignore_ascii_case(address))
    });
    Ok(found.map(|root| root.name))
}

/// The ARN of an account's root.
pub fn root_arn(account: &str) -> String {
    format!("arn:aws:iam::{account}:root")
}

/// The ARN of `user`: an operator's user's, an account's root's or an account's user's.
pub fn arn(user: &User) -> String {
    match &user.account {
        None => crate::policy::user_resource(&user.name),
        Some(member) if member.root => root_arn(&member.account),
        Some(member) => member_arn(&member.account, &member.path, &member.name),
    }
}

/// The ARN of user `name` under `path` in `account`, which IAM's verbs on it act on.
pub fn member_arn(account: &str, path: &str, name: &str) -> String {
    format!("arn:aws:iam::{account}:user{path}{name}")
}

/// Creates an account named `name`, with its root and the root's first key.
pub async fn create(pool: &Pool, name: &str, email: &str) -> Result<User, Error> {
    users::check_iam_name("account", name, ACCOUNT_NAME_BYTES_MAX)?;
    let mailed = email.len() <= EMAIL_BYTES_MAX && email.bytes().all(|b| b.is_ascii_graphic());
    if !mailed {
        return Err(Error::Invalid(format!("email address {email:?}")));
    }
    for root in roots(pool).await? {
        let Some(other) = root.account else { continue };
        if other.name == name {
            return Err(Error::Exists(format!("account {name}")));
        }
        if !email.is_empty() && other.email.eq_ignore_ascii_case(email) {
            return Err(Error::Exists(format!(
                "an account with email address {email}"
            )));
        }
    }
    let id = {
        let mut rng = rand::rng();
        let digits: String = (0..ID_DIGITS)
            .map(|_| char::from(b'0' + rng.random_range(0..10u8)))
            .collect();
        format!("RGW{digits}")
    };
    let now = layout::now_ns();
    let root = User {
        name: id.clone(),
        keys: vec![users::new_key(now)],
        created_ns: now,
        policies: Vec::new(),
        account: Some(InAccount {
            account: id.clone(),
            name: name.into(),
            path: "/".into(),
            id,
            root: true,
            email: email.into(),
        }),
        attached: Vec::new(),
        groups: Vec::new(),
    };
    users::insert(pool, &root).await?;
    Ok(root)
}

/// Every account's root, by the account's id.
pub async fn roots(pool: &Pool) -> Result<Vec<User>, Error> {
    let every = users::listed(pool, b"name/RGW").await?;
    Ok(every
        .into_iter()
        .filter(|u| u.account.as_ref().is_some_and(|a| a.root))
        .collect())
}

/// Removes account `id`, with its root and the root's keys; refused while it has users,
/// groups or roles, or owns buckets.
pub async fn remove(pool: &Pool, id: &str) -> Result<(), Error> {
    let found = users::read_record::<User>(pool, layout::user_key(id)).await?;
    let Some((bytes, root)) = found.filter(|(_, u)| u.account.as_ref().is_some_and(|a| a.root))
    else {
        return Err(Error::NotFound(format!("account {id}")));
    };
    let members = members(pool, id, "/").await?;
    if !members.is_empty() {
        return Err(Error::Conflict(format!(
            "account {id} has {} users; remove them first",
            members.len()
        )));
    }
    let groups = crate::groups::list(pool, id, "/").await?;
    if !groups.is_empty() {
        return Err(Error::Conflict(format!(
            "account {id} has {} groups; remove them first",
            groups.len()
        )));
    }
    let roles = crate::roles::list(pool, Some(id), "/").await?;
    if !roles.is_empty() {
        return Err(Error::Conflict(format!(
            "account {id} has {} roles; remove them first",
            roles.len()
        )));
    }
    let providers = crate::oidc::list(pool, id).await?;
    if !providers.is_empty() {
        return Err(Error::Conflict(format!(
            "account {id} trusts {} OpenID Connect providers; remove them first",
            providers.len()
        )));
    }
    let owned = crate::buckets::list(pool)
        .await?
        .into_iter()
        .filter(|(_, info)| info.owner == id)
        .count();
    if owned > 0 {
        return Err(Error::Conflict(format!(
            "account {id} owns {owned} buckets; empty and remove them first"
        )));
    }
    // The root as read: a key made meanwhile fails the removal rather than outlive it.
    let mut keys = vec![layout::user_key(id)];
    keys.extend(root.keys.iter().map(|k| layout::access_key_key(&k.id)));
    users::remove_as_read(
        pool,
        layout::user_key(id),
        bytes,
        keys,
        &format!("account {id}"),
    )
    .await
}

/// Account `account`'s users whose path starts with `prefix`, by name in lower case.
pub async fn members(pool: &Pool, account: &str, prefix: &str) -> Result<Vec<User>, Error> {
    let every = users::listed(pool, format!("name/{account}$").as_bytes()).await?;
    Ok(every
        .into_iter()
        .filter(|u| {
            u.account
                .as_ref()
                .is_some_and(|a| a.path.starts_with(prefix))
        })
        .collect())
}

/// Refuses a user name IAM would not take.
fn check_user_name(name: &str) -> Result<(), Error> {
    users::check_iam_name("user", name, USER_NAME_BYTES_MAX)
}

/// Creates user `name` under `path` (`None`: `/`) in account `account`, with no key.
pub async fn create_member(
    pool: &Pool,
    account: &str,
    name: &str,
    path: Option<&str>,
) -> Result<User, Error> {
    check_user_name(name)?;
    let path = path.unwrap_or("/");
    crate::roles::check_path(path)?;
    if members(pool, account, "/").await?.len() >= USERS_MAX {
        return Err(Error::Limit(format!(
            "an account holds at most {USERS_MAX} users"
        )));
    }
    let user = User {
        name: layout::member_name(account, name),
        keys: Vec::new(),
        created_ns: layout::now_ns(),
        policies: Vec::new(),
        account: Some(InAccount {
            account: account.into(),
            name: name.into(),
            path: path.into(),
            id: format!("AIDA{}", users::random_text(17, ACCESS_KEY_ALPHABET)),
            root: false,
            email: String::new(),
        }),
        attached: Vec::new(),
        groups: Vec::new(),
    };
    match users::insert(pool, &user).await {
        Err(Error::Exists(_)) => Err(Error::Exists(format!("user {name}"))),
        done => done.map(|()| user),
    }
}

/// Account `account`'s user `name` (in any case), if there is one.
pub async fn member(pool: &Pool, account: &str, name: &str) -> Result<Option<User>, Error> {
    users::get(pool, &layout::member_name(account, name)).await
}

/// Gives account `account`'s user `name` the name `new_name` and the path `new_path`, where
/// given.
pub async fn update_member(
    pool: &Pool,
    account: &str,
    name: &str,
    new_name: Option<&str>,
    new_path: Option<&str>,
) -> Result<User, Error> {
    if let Some(new_name) = new_name {
        check_user_name(new_name)?;
    }
    if let Some(new_path) = new_path {
        crate::roles::check_path(new_path)?;
    }
    let record = layout::member_name(account, name);
    let changed = users::update(pool, &record, name, |mut user: User| {
        let member = user.account.as_mut().ok_or_else(|| no_user(name))?;
        if let Some(new_name) = new_name {
            member.name = new_name.into();
            user.name = layout::member_name(account, new_name);
        }
        if let Some(new_path) = new_path {
            member.path = new_path.into();
        }
        Ok(user)
    })
    .await;
    match changed {
        Err(Error::NotFound(_)) => Err(no_user(name)),
        Err(Error::Exists(_)) => Err(Error::Exists(format!("user {}", new_name.unwrap_or(name)))),
        changed => changed,
    }
}

fn no_user(name: &str) -> Error {
    Error::NotFound(format!("user {name}"))
}

/// Removes account `account`'s user `name`; refused while they have keys or policies
/// (IAM's DeleteConflict). Their sessions end with them, and they leave their groups.
pub async fn remove_member(pool: &Pool, account: &str, name: &str) -> Result<(), Error> {
    let record = layout::member_name(account, name);
    let Some((bytes, user)) = users::read_record::<User>(pool, layout::user_key(&record)).await?
    else {
        return Err(no_user(name));
    };
    if !user.keys.is_empty() || !user.policies.is_empty() || !user.attached.is_empty() {
        return Err(Error::Conflict(format!(
            "user {name} has access keys or policies: remove them first"
        )));
    }
    let key = layout::user_key(&record);
    users::remove_as_read(pool, key.clone(), bytes, vec![key], &format!("user {name}")).await
}

/// Gives `user` a fresh key; refused when they have [`KEYS_MAX`] already (IAM's
/// LimitExceeded).
pub async fn create_key(pool: &Pool, user: &User) -> Result<AccessKey, Error> {
    let key = users::new_key(layout::now_ns());
    users::update(pool, &user.name, shown(user), |mut user| {
        if user.keys.len() >= KEYS_MAX {
            return Err(Error::Limit(format!(
                "a user has at most {KEYS_MAX} access keys"
            )));
        }
        user.keys.push(key.clone());
        Ok(user)
    })
    .await?;
    Ok(key)
}

/// Makes `user`'s key `id` active or inactive.
pub async fn set_key_active(pool: &Pool, user: &User, id: &str, active: bool) -> Result<(), Error> {
    users::update(pool, &user.name, shown(user), |mut user| {
        let key = user.keys.iter_mut().find(|k| k.id == id);
        key.ok_or_else(|| no_key(id))?.active = active;
        Ok(user)
    })
    .await?;
    Ok(())
}

/// Removes `user`'s key `id`.
pub async fn remove_key(pool: &Pool, user: &User, id: &str) -> Result<(), Error> {
    users::update(pool, &user.name, shown(user), |mut user| {
        let before = user.keys.len();
        user.keys.retain(|k| k.id != id);
        if user.keys.len() == before {
            return Err(no_key(id));
        }
        Ok(user)
    })
    .await?;
    Ok(())
}

/// The name IAM shows for `user`: an account's user's as given, else the record's.
pub fn shown(user: &User) -> &str {
    match &user.account {
        Some(member) => &member.name,
        None => &user.name,
    }
}

fn no_key(id: &str) -> Error {
    Error::NotFound(format!("access key {id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_ids_and_arns_have_iam_s_forms() {
        assert!(is_account_id("RGW00000000000000001"));
        assert!(!is_account_id("RGW0000000000000001"), "16 digits");
        assert!(!is_account_id("RGX00000000000000001"));
        assert!(!is_account_id("RGW0000000000000000a"));
        let member = User {
            name: layout::member_name("RGW00000000000000001", "Ann"),
            keys: Vec::new(),
            created_ns: 1,
            policies: Vec::new(),
            account: Some(InAccount {
                account: "RGW00000000000000001".into(),
                name: "Ann".into(),
                path: "/a/".into(),
                id: "AIDA".into(),
                root: false,
                email: String::new(),
            }),
            attached: Vec::new(),
            groups: Vec::new(),
        };
        assert_eq!(member.name, "RGW00000000000000001$ann");
        assert_eq!(arn(&member), "arn:aws:iam::RGW00000000000000001:user/a/Ann");
        let mut root = member.clone();
        if let Some(a) = root.account.as_mut() {
            a.root = true;
        }
        assert_eq!(arn(&root), "arn:aws:iam::RGW00000000000000001:root");
        root.account = None;
        root.name = "bob".into();
        assert_eq!(arn(&root), "arn:aws:iam:::user/bob");
    }
}
