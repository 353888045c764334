//! S3 users: a name, an access key, a secret key and the user's own policies, kept in the
//! gateway's pool.

use bytes::Bytes;
use client::{ObjectOp, Pool};
use rand::Rng;

use crate::layout::{self, Session, User};
use crate::omap::Pages;
use crate::policy::Policy;
use crate::Error;

const NAME_BYTES_MAX: usize = 64;
/// The longest policy name (IAM's).
pub const POLICY_NAME_BYTES_MAX: usize = 128;
/// The most bytes of policy documents one user holds, all together: the user's record,
/// policies included, is read for every request the user signs.
pub const USER_POLICIES_BYTES_MAX: usize = 20 * 1024;
/// The shortest and longest life of a session, and its life when none is asked (STS's).
pub const SESSION_SECONDS_MIN: u64 = 900;
pub const SESSION_SECONDS_MAX: u64 = 129_600;
pub const SESSION_SECONDS_DEFAULT: u64 = 43_200;
/// The alphabet of access keys (AWS's).
const ACCESS_KEY_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const SECRET_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
/// How many times a change to a user's record is tried while others change it too.
const UPDATE_TRIES: usize = 8;

/// Why a user's policy is refused, as IAM tells these apart.
#[derive(Debug, thiserror::Error)]
pub enum PolicyRefusal {
    /// The policy's name (IAM's ValidationError).
    #[error("policy name {0:?}: use 1 to 128 letters, digits or '+=,.@_-'")]
    Name(String),
    /// The document (IAM's MalformedPolicyDocument).
    #[error("{0}")]
    Document(String),
    /// The user's policies would be too large together (IAM's LimitExceeded).
    #[error(
        "user {user}'s policies would take {bytes} bytes, more than {USER_POLICIES_BYTES_MAX}"
    )]
    TooLarge { user: String, bytes: usize },
}

fn check_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'@'));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "user name {name:?}: use 1 to {NAME_BYTES_MAX} letters, digits, '_', '-', '.' or '@'"
        )))
    }
}

fn random_text(len: usize, alphabet: &[u8]) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(alphabet[rng.random_range(0..alphabet.len())]))
        .collect()
}

/// Creates user `name` with fresh keys (20 characters of access key, as AWS's, and 40 of
/// secret: 238 random bits).
pub async fn create(pool: &Pool, name: &str) -> Result<User, Error> {
    check_name(name)?;
    if get(pool, name).await?.is_some() {
        return Err(Error::Exists(format!("user {name}")));
    }
    let user = User {
        name: name.into(),
        access_key: format!("CK{}", random_text(18, ACCESS_KEY_ALPHABET)),
        secret_key: random_text(40, SECRET_ALPHABET),
        created_ns: layout::now_ns(),
        policies: Vec::new(),
    };
    let record = layout::encode(&user);
    let ops = vec![
        ObjectOp::Create { exclusive: false },
        ObjectOp::OmapSet {
            entries: vec![
                (layout::user_key(name), record.clone()),
                (layout::access_key_key(&user.access_key), record),
            ],
        },
    ];
    pool.operate(layout::USERS, ops, Bytes::new()).await?;
    Ok(user)
}

pub async fn get(pool: &Pool, name: &str) -> Result<Option<User>, Error> {
    match pool
        .omap_get(layout::USERS, vec![layout::user_key(name)])
        .await
    {
        Ok(found) => match found.into_iter().next().and_then(|(_, value)| value) {
            Some(bytes) => Ok(Some(layout::decode(&bytes).map_err(Error::Corrupt)?)),
            None => Ok(None),
        },
        Err(client::Error::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Who holds an access key: a user, or a session of one.
pub enum Holder {
    User(User),
    Session { session: Session, user: User },
}

impl Holder {
    /// The user the key acts as.
    pub fn user(&self) -> &User {
        match self {
            Holder::User(user) | Holder::Session { user, .. } => user,
        }
    }

    /// The secret the key signs with.
    pub fn secret_key(&self) -> &str {
        match self {
            Holder::User(user) => &user.secret_key,
            Holder::Session { session, .. } => &session.secret_key,
        }
    }

    /// The session, for a session's key.
    pub fn session(&self) -> Option<&Session> {
        match self {
            Holder::User(_) => None,
            Holder::Session { session, .. } => Some(session),
        }
    }
}

/// Who holds access key `key`, a user or a session (whose user is read too); `None` when no
/// one does, or a session's user is gone (removed, even if a user of that name was made
/// since). An expired session is still answered: the caller refuses it as such.
pub async fn holder(pool: &Pool, key: &str) -> Result<Option<Holder>, Error> {
    let asked = vec![layout::access_key_key(key), layout::session_key(key)];
    let found = match pool.omap_get(layout::USERS, asked).await {
        Ok(found) => found,
        Err(client::Error::NotFound) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let (mut user, mut session) = (None, None);
    for (found_key, value) in found {
        if found_key == layout::access_key_key(key) {
            user = value;
        } else if found_key == layout::session_key(key) {
            session = value;
        }
    }
    if let Some(bytes) = user {
        return Ok(Some(Holder::User(
            layout::decode(&bytes).map_err(Error::Corrupt)?,
        )));
    }
    let Some(bytes) = session else {
        return Ok(None);
    };
    let session: Session = layout::decode(&bytes).map_err(Error::Corrupt)?;
    Ok(get(pool, &session.user)
        .await?
        .filter(|user| user.created_ns == session.user_created_ns)
        .map(|user| Holder::Session { session, user }))
}

/// New temporary credentials of `user` for `seconds` (between [`SESSION_SECONDS_MIN`] and
/// [`SESSION_SECONDS_MAX`]) from `now_ns`: the access key and the session.
pub async fn create_session(
    pool: &Pool,
    user: &User,
    seconds: u64,
    now_ns: u64,
) -> Result<(String, Session), Error> {
    if !(SESSION_SECONDS_MIN..=SESSION_SECONDS_MAX).contains(&seconds) {
        return Err(Error::Invalid(format!(
            "DurationSeconds {seconds}: from {SESSION_SECONDS_MIN} to {SESSION_SECONDS_MAX}"
        )));
    }
    let access_key = format!("CS{}", random_text(18, ACCESS_KEY_ALPHABET));
    let session = Session {
        user: user.name.clone(),
        user_created_ns: user.created_ns,
        secret_key: random_text(40, SECRET_ALPHABET),
        token: random_text(64, SECRET_ALPHABET),
        expires_ns: now_ns.saturating_add(seconds * 1_000_000_000),
    };
    let ops = vec![
        ObjectOp::Create { exclusive: false },
        ObjectOp::OmapSet {
            entries: vec![(layout::session_key(&access_key), layout::encode(&session))],
        },
    ];
    pool.operate(layout::USERS, ops, Bytes::new()).await?;
    Ok((access_key, session))
}

/// Forgets the session of access key `key` (once it has expired).
pub async fn remove_session(pool: &Pool, key: &str) -> Result<(), Error> {
    match pool
        .omap_remove(layout::USERS, vec![layout::session_key(key)])
        .await
    {
        Ok(_) | Err(client::Error::NotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Every user, by name.
pub async fn list(pool: &Pool) -> Result<Vec<User>, Error> {
    let mut users = Vec::new();
    let mut pages = Pages::new(pool, layout::USERS, layout::before(b"name/"));
    while let Some(page) = pages.next().await? {
        for (key, value) in page {
            if !key.starts_with(b"name/") {
                return Ok(users);
            }
            users.push(layout::decode(&value).map_err(Error::Corrupt)?);
        }
    }
    Ok(users)
}

/// Removes user `name`; refused while the user owns a bucket (their objects would have no
/// owner left to reach them).
pub async fn remove(pool: &Pool, name: &str) -> Result<(), Error> {
    let Some(user) = get(pool, name).await? else {
        return Err(Error::NotFound(format!("user {name}")));
    };
    let owned: Vec<String> = crate::buckets::list(pool)
        .await?
        .into_iter()
        .filter(|(_, info)| info.owner == name)
        .map(|(bucket, _)| bucket)
        .collect();
    if !owned.is_empty() {
        return Err(Error::Invalid(format!(
            "user {name} owns buckets ({}); empty and remove them first",
            owned.join(", ")
        )));
    }
    let keys = vec![
        layout::user_key(name),
        layout::access_key_key(&user.access_key),
    ];
    pool.omap_remove(layout::USERS, keys).await?;
    Ok(())
}

/// `user` with policy `name` set to `document` (replacing one of that name), or why not.
fn with_policy(mut user: User, name: &str, document: &str) -> Result<User, PolicyRefusal> {
    let named = !name.is_empty()
        && name.len() <= POLICY_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b));
    if !named {
        return Err(PolicyRefusal::Name(name.into()));
    }
    Policy::parse_identity(document).map_err(PolicyRefusal::Document)?;
    match user
        .policies
        .binary_search_by(|(given, _)| given.as_str().cmp(name))
    {
        Ok(at) => user.policies[at].1 = document.into(),
        Err(at) => user.policies.insert(at, (name.into(), document.into())),
    }
    let bytes = user.policies.iter().map(|(_, text)| text.len()).sum();
    if bytes > USER_POLICIES_BYTES_MAX {
        return Err(PolicyRefusal::TooLarge {
            user: user.name,
            bytes,
        });
    }
    Ok(user)
}

/// `user`'s own policies, read.
pub fn policies_of(user: &User) -> Result<Vec<Policy>, Error> {
    let read = |(name, text): &(String, String)| {
        Policy::parse_identity(text)
            .map_err(|e| Error::Corrupt(format!("policy {name} of user {}: {e}", user.name)))
    };
    user.policies.iter().map(read).collect()
}

/// Sets user `user`'s policy `name` to `document`.
pub async fn put_policy(pool: &Pool, user: &str, name: &str, document: &str) -> Result<(), Error> {
    update(pool, user, |found| {
        with_policy(found, name, document).map_err(Error::UserPolicy)
    })
    .await
}

/// Removes user `user`'s policy `name`.
pub async fn delete_policy(pool: &Pool, user: &str, name: &str) -> Result<(), Error> {
    update(pool, user, |mut found| {
        let before = found.policies.len();
        found.policies.retain(|(given, _)| given != name);
        if found.policies.len() == before {
            return Err(Error::NotFound(format!("policy {name} of user {user}")));
        }
        Ok(found)
    })
    .await
}

/// Rewrites user `name`'s record as `change` makes it, under both its keys, provided no one
/// changed or removed it meanwhile (else it reads it again).
async fn update(
    pool: &Pool,
    name: &str,
    change: impl Fn(User) -> Result<User, Error>,
) -> Result<(), Error> {
    let key = layout::user_key(name);
    for _ in 0..UPDATE_TRIES {
        let found = match pool.omap_get(layout::USERS, vec![key.clone()]).await {
            Ok(found) => found.into_iter().next().and_then(|(_, value)| value),
            Err(client::Error::NotFound) => None,
            Err(e) => return Err(e.into()),
        };
        let Some(bytes) = found else {
            return Err(Error::NotFound(format!("user {name}")));
        };
        let user = change(layout::decode(&bytes).map_err(Error::Corrupt)?)?;
        let record = layout::encode(&user);
        let ops = vec![
            ObjectOp::AssertOmap {
                key: key.clone(),
                value: Some(bytes),
            },
            ObjectOp::OmapSet {
                entries: vec![
                    (key.clone(), record.clone()),
                    (layout::access_key_key(&user.access_key), record),
                ],
            },
        ];
        match pool.operate(layout::USERS, ops, Bytes::new()).await {
            Ok(_) => return Ok(()),
            Err(client::Error::Mismatch(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Busy(format!(
        "user {name} is being changed by others"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> User {
        User {
            name: "ann".into(),
            access_key: "CKA".into(),
            secret_key: "s".into(),
            created_ns: 1,
            policies: Vec::new(),
        }
    }

    const ALL: &str = r#"{"Version": "2012-10-17",
        "Statement": {"Effect": "Allow", "Action": "*", "Resource": "*"}}"#;

    #[test]
    fn policies_are_kept_by_name_and_refused_with_the_reason() {
        let one = with_policy(user(), "b", ALL).expect("set");
        let two = with_policy(one, "a", ALL).expect("set");
        let again = with_policy(two, "b", ALL).expect("replaced");
        let names: Vec<_> = again.policies.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let long = "P".repeat(POLICY_NAME_BYTES_MAX + 1);
        for bad in ["", "a b", long.as_str()] {
            assert!(matches!(
                with_policy(user(), bad, ALL),
                Err(PolicyRefusal::Name(_))
            ));
        }
        assert!(matches!(
            with_policy(user(), "a", r#"{"Version": "2012-10-17"}"#),
            Err(PolicyRefusal::Document(_))
        ));
        let statement = r#"{"Effect": "Allow", "Action": "*", "Resource": "*"}"#;
        // Two documents of about 10 KiB each: the first fits, the second not beside it.
        let half = format!(
            r#"{{"Version": "2012-10-17", "Statement": [{}]}}"#,
            vec![statement; 200].join(",")
        );
        assert!(half.len() < USER_POLICIES_BYTES_MAX && 2 * half.len() > USER_POLICIES_BYTES_MAX);
        let once = with_policy(user(), "a", &half).expect("under the limit");
        assert!(matches!(
            with_policy(once, "b", &half),
            Err(PolicyRefusal::TooLarge { .. })
        ));
    }
}
