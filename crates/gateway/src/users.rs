//! S3 users: a name, an access key, a secret key and the user's own policies, kept in the
//! gateway's pool; and the sessions (temporary keys) of users and of roles.

use bytes::Bytes;
use client::{ObjectOp, Pool};
use rand::Rng;

use crate::layout::{self, AccessKey, Group, Record, Role, RoleTaken, Session, User};
use std::collections::HashMap;

use crate::omap::{self, Pages};
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
pub const TOKEN_SESSION_SECONDS_DEFAULT: u64 = 43_200;
/// The alphabet of access keys (AWS's).
pub(crate) const ACCESS_KEY_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const SECRET_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
/// How long past its expiry a session's record is kept by [`sweep_sessions`].
pub const SWEEP_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);
/// The most access keys a user holds at once (IAM's).
pub const KEYS_MAX: usize = 2;
/// How many times a change to a user's, a role's or a group's record is tried while others
/// change it too.
pub(crate) const UPDATE_TRIES: usize = 8;

/// Why a user's or a role's policy is refused, as IAM tells these apart.
#[derive(Debug, thiserror::Error)]
pub enum PolicyRefusal {
    /// The policy's name (IAM's ValidationError).
    #[error("policy name {0:?}: use 1 to 128 letters, digits or '+=,.@_-'")]
    Name(String),
    /// The document (IAM's MalformedPolicyDocument).
    #[error("{0}")]
    Document(String),
    /// The holder's policies would be too large together (IAM's LimitExceeded); `holder`
    /// is "user NAME" or "role NAME".
    #[error("{holder}'s policies would take {bytes} bytes, more than {USER_POLICIES_BYTES_MAX}")]
    TooLarge { holder: String, bytes: usize },
}

/// Whether `name` is an IAM name of at most `most` bytes (of a user in an account, a role,
/// a policy): letters, digits and `+=,.@_-`.
pub(crate) fn is_iam_name(name: &str, most: usize) -> bool {
    !name.is_empty()
        && name.len() <= most
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b))
}

/// Refuses `what`'s name `name` (an account's, a user's in an account, a group's, a
/// role's) unless [`is_iam_name`] takes it.
pub(crate) fn check_iam_name(what: &str, name: &str, most: usize) -> Result<(), Error> {
    if is_iam_name(name, most) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "{what} name {name:?}: use 1 to {most} letters, digits or '+=,.@_-'"
        )))
    }
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

pub(crate) fn random_text(len: usize, alphabet: &[u8]) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(alphabet[rng.random_range(0..alphabet.len())]))
        .collect()
}

/// A fresh access key, made at `now_ns`: 20 characters of id, as AWS's, and 40 of secret
/// (238 random bits).
pub(crate) fn new_key(now_ns: u64) -> AccessKey {
    AccessKey {
        id: format!("CK{}", random_text(18, ACCESS_KEY_ALPHABET)),
        secret: random_text(40, SECRET_ALPHABET),
        created_ns: now_ns,
        active: true,
    }
}

/// Creates user `name` with a fresh key.
pub async fn create(pool: &Pool, name: &str) -> Result<User, Error> {
    check_name(name)?;
    if crate::accounts::is_account_id(name) {
        return Err(Error::Invalid(format!(
            "user name {name:?} has the form of an account's id"
        )));
    }
    let now = layout::now_ns();
    let user = User {
        name: name.into(),
        keys: vec![new_key(now)],
        created_ns: now,
        policies: Vec::new(),
        account: None,
        attached: Vec::new(),
        groups: Vec::new(),
    };
    insert(pool, &user).await?;
    Ok(user)
}

/// Stores the new record `user`, under its name and each of its keys, unless a user of
/// that name exists.
pub(crate) async fn insert(pool: &Pool, user: &User) -> Result<(), Error> {
    let record = layout::encode(user);
    let key = layout::user_key(&user.name);
    let mut entries = vec![(key.clone(), record.clone())];
    entries.extend(
        user.keys
            .iter()
            .map(|k| (layout::access_key_key(&k.id), record.clone())),
    );
    let ops = vec![
        ObjectOp::Create { exclusive: false },
        ObjectOp::AssertOmap { key, value: None },
        ObjectOp::OmapSet { entries },
    ];
    match pool.operate(layout::USERS, ops, Bytes::new()).await {
        Ok(_) => Ok(()),
        Err(client::Error::Mismatch(_)) => Err(Error::Exists(format!("user {}", user.name))),
        Err(e) => Err(e.into()),
    }
}

/// The user kept for web identity `subject` of provider `provider` (its name, the URL
/// without the scheme), whose sessions of the operator's roles act as it: made, with no
/// key, on first use. Named `oidc.` and 24 hex digits of the SHA-256 of both, so that any
/// subject fits a user name and two identities do not meet in one. A user of that name
/// the operator made by hand, with keys, is refused rather than taken for the identity.
pub async fn federated(pool: &Pool, provider: &str, subject: &str) -> Result<User, Error> {
    let digest = aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA256,
        format!("{provider}\n{subject}").as_bytes(),
    );
    let name = format!("oidc.{}", layout::hex(&digest.as_ref()[..12]));
    let kept = |user: User| match user.keys.is_empty() {
        true => Ok(user),
        false => Err(Error::Conflict(format!(
            "user {name} has access keys: it is not the one kept for web identity {subject} \
             of {provider}"
        ))),
    };
    if let Some(user) = get(pool, &name).await? {
        return kept(user);
    }
    let user = User {
        name: name.clone(),
        keys: Vec::new(),
        created_ns: layout::now_ns(),
        policies: Vec::new(),
        account: None,
        attached: Vec::new(),
        groups: Vec::new(),
    };
    match insert(pool, &user).await {
        Ok(()) => Ok(user),
        // Made by a request beside this one.
        Err(Error::Exists(_)) => kept(
            get(pool, &name)
                .await?
                .ok_or_else(|| Error::Busy(format!("user {name}")))?,
        ),
        Err(e) => Err(e),
    }
}

pub async fn get(pool: &Pool, name: &str) -> Result<Option<User>, Error> {
    Ok(read_record(pool, layout::user_key(name))
        .await?
        .map(|(_, user)| user))
}

/// Writes `value` under `key` in the users' object unless a record is there already:
/// false, and nothing written, when one is.
pub(crate) async fn create_record(
    pool: &Pool,
    key: Vec<u8>,
    value: Vec<u8>,
) -> Result<bool, Error> {
    let ops = vec![
        ObjectOp::Create { exclusive: false },
        ObjectOp::AssertOmap {
            key: key.clone(),
            value: None,
        },
        ObjectOp::OmapSet {
            entries: vec![(key, value)],
        },
    ];
    match pool.operate(layout::USERS, ops, Bytes::new()).await {
        Ok(_) => Ok(true),
        Err(client::Error::Mismatch(_)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The record under `key` in the users' object, if there is one, with its bytes as stored
/// (which a compare-and-swap asserts).
pub(crate) async fn read_record<R: Record>(
    pool: &Pool,
    key: Vec<u8>,
) -> Result<Option<(Vec<u8>, R)>, Error> {
    let found = match pool.omap_get(layout::USERS, vec![key]).await {
        Ok(found) => found.into_iter().next().and_then(|(_, value)| value),
        Err(client::Error::NotFound) => None,
        Err(e) => return Err(e.into()),
    };
    match found {
        Some(bytes) => {
            let record = layout::decode(&bytes).map_err(Error::Corrupt)?;
            Ok(Some((bytes, record)))
        }
        None => Ok(None),
    }
}

/// Removes `keys` provided the record under `key` is still `bytes`, as the caller read it
/// (else `Busy`, naming `what`): nothing is removed on a decision made on a stale record.
pub(crate) async fn remove_as_read(
    pool: &Pool,
    key: Vec<u8>,
    bytes: Vec<u8>,
    keys: Vec<Vec<u8>>,
    what: &str,
) -> Result<(), Error> {
    let ops = vec![
        ObjectOp::AssertOmap {
            key,
            value: Some(bytes),
        },
        ObjectOp::OmapRemove { keys },
    ];
    match pool.operate(layout::USERS, ops, Bytes::new()).await {
        Ok(_) => Ok(()),
        Err(client::Error::Mismatch(_)) => {
            Err(Error::Busy(format!("{what} is being changed by others")))
        }
        Err(e) => Err(e.into()),
    }
}

/// Who holds an access key: a user (with the secret of that key), or a session of one (of a
/// role, for a role's session).
pub enum Holder {
    User {
        user: User,
        secret: String,
    },
    Session {
        session: Session,
        user: User,
        role: Option<Box<Role>>,
    },
}

impl Holder {
    /// The user the key acts as (the one who took the role on, for a role's session).
    pub fn user(&self) -> &User {
        match self {
            Holder::User { user, .. } | Holder::Session { user, .. } => user,
        }
    }

    /// The role, for a role's session.
    pub fn role(&self) -> Option<&Role> {
        match self {
            Holder::User { .. } => None,
            Holder::Session { role, .. } => role.as_deref(),
        }
    }

    /// The secret the key signs with.
    pub fn secret_key(&self) -> &str {
        match self {
            Holder::User { secret, .. } => secret,
            Holder::Session { session, .. } => &session.secret_key,
        }
    }

    /// The session, for a session's key.
    pub fn session(&self) -> Option<&Session> {
        match self {
            Holder::User { .. } => None,
            Holder::Session { session, .. } => Some(session),
        }
    }
}

/// Who holds access key `key`, a user or a session (whose user, and role, are read too);
/// `None` when no one does, the key is inactive, or a session's user or role is gone
/// (removed, even if one of that name was made since). An expired session is still
/// answered: the caller refuses it as such.
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
        let user: User = layout::decode(&bytes).map_err(Error::Corrupt)?;
        let Some(secret) = user.active_key(key).map(|k| k.secret.clone()) else {
            return Ok(None);
        };
        return Ok(Some(Holder::User { user, secret }));
    }
    let Some(bytes) = session else {
        return Ok(None);
    };
    let session: Session = layout::decode(&bytes).map_err(Error::Corrupt)?;
    let mut asked = vec![layout::user_key(&session.user)];
    asked.extend(
        session
            .role
            .iter()
            .map(|taken| layout::role_key(&taken.name)),
    );
    let found = pool.omap_get(layout::USERS, asked).await?;
    let (mut user, mut role) = (None, None);
    for (found_key, value) in found {
        let Some(value) = value else { continue };
        if found_key == layout::user_key(&session.user) {
            user = Some(layout::decode::<User>(&value).map_err(Error::Corrupt)?);
        } else {
            role = Some(layout::decode::<Role>(&value).map_err(Error::Corrupt)?);
        }
    }
    let Some(user) = user.filter(|user| user.created_ns == session.user_created_ns) else {
        return Ok(None);
    };
    let role = match &session.role {
        None => None,
        Some(taken) => match role.filter(|role| role.id == taken.id) {
            Some(role) => Some(Box::new(role)),
            None => return Ok(None),
        },
    };
    Ok(Some(Holder::Session {
        session,
        user,
        role,
    }))
}

/// The life of a session asked for `asked` seconds (`None`: the default), of `user`'s own
/// or of `role` taken on: from [`SESSION_SECONDS_MIN`] to [`SESSION_SECONDS_MAX`] (the
/// role's longest for a role, an hour by default, as STS's).
pub fn session_seconds(asked: Option<u64>, role: Option<&Role>) -> Result<u64, Error> {
    let (longest, default) = match role {
        Some(role) => (
            role.max_session_seconds,
            crate::roles::ROLE_SESSION_SECONDS_DEFAULT,
        ),
        None => (SESSION_SECONDS_MAX, TOKEN_SESSION_SECONDS_DEFAULT),
    };
    let seconds = asked.unwrap_or(default.min(longest));
    if !(SESSION_SECONDS_MIN..=longest).contains(&seconds) {
        return Err(Error::Invalid(format!(
            "DurationSeconds {seconds}: from {SESSION_SECONDS_MIN} to {longest}"
        )));
    }
    Ok(seconds)
}

/// New temporary credentials of `user` for `seconds` (see [`session_seconds`]) from
/// `now_ns`, acting as `role` if given: the access key and the session.
pub async fn create_session(
    pool: &Pool,
    user: &User,
    role: Option<RoleTaken>,
    seconds: u64,
    now_ns: u64,
) -> Result<(String, Session), Error> {
    let access_key = format!("CS{}", random_text(18, ACCESS_KEY_ALPHABET));
    let session = Session {
        user: user.name.clone(),
        user_created_ns: user.created_ns,
        secret_key: random_text(40, SECRET_ALPHABET),
        token: random_text(64, SECRET_ALPHABET),
        expires_ns: now_ns.saturating_add(seconds * 1_000_000_000),
        role,
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

/// Finds the session records that can act no more at `now_ns` (expired [`SWEEP_GRACE`]
/// ago, or of a user or a role removed since, or made again under its name) and removes
/// them unless `dry_run`; how many. An unused session keeps its record until this runs
/// (`coffer gw gc`).
pub async fn sweep_sessions(pool: &Pool, now_ns: u64, dry_run: bool) -> Result<u64, Error> {
    // Sessions first: a user (or role) missing from the lists read next was removed after
    // the session was made (or the session was made as it was being removed, and holds
    // nothing either way).
    let mut sessions = Vec::new();
    let mut pages = Pages::new(pool, layout::USERS, layout::before(b"session/"));
    'pages: while let Some(page) = pages.next().await? {
        for (key, value) in page {
            if !key.starts_with(b"session/") {
                break 'pages;
            }
            // A record this gateway cannot read (damaged, or of a newer format) is left
            // alone: the gateways that can read it judge it.
            match layout::decode::<Session>(&value) {
                Ok(session) => sessions.push((key, session)),
                Err(e) => tracing::warn!(
                    "session record {} left alone: {e}",
                    String::from_utf8_lossy(&key)
                ),
            }
        }
    }
    let users: HashMap<String, u64> = listed(pool, b"name/")
        .await?
        .into_iter()
        .map(|user| (user.name, user.created_ns))
        .collect();
    let roles: HashMap<String, String> = crate::roles::every(pool, None)
        .await?
        .into_iter()
        .map(|role| (role.record(), role.id))
        .collect();
    // The clock of the host that sweeps may run ahead of the gateways'.
    let now_ns = now_ns.saturating_sub(SWEEP_GRACE.as_nanos() as u64);
    let stale: Vec<Vec<u8>> = sessions
        .into_iter()
        .filter(|(_, session)| !session_lives(session, now_ns, &users, &roles))
        .map(|(key, _)| key)
        .collect();
    if !dry_run {
        for keys in stale.chunks(omap::PAGE as usize) {
            match pool.omap_remove(layout::USERS, keys.to_vec()).await {
                Ok(_) | Err(client::Error::NotFound) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(stale.len() as u64)
}

/// Whether `session` may still act at `now_ns`, given the users' creation times and the
/// roles' ids by name: unexpired, and its user and role the ones it names.
fn session_lives(
    session: &Session,
    now_ns: u64,
    users: &HashMap<String, u64>,
    roles: &HashMap<String, String>,
) -> bool {
    let user = users.get(&session.user) == Some(&session.user_created_ns);
    let role = session
        .role
        .as_ref()
        .is_none_or(|taken| roles.get(&taken.name) == Some(&taken.id));
    !session.is_expired(now_ns) && user && role
}

/// The operator's users (not accounts' roots and users), by name.
pub async fn list(pool: &Pool) -> Result<Vec<User>, Error> {
    let every = listed(pool, b"name/").await?;
    Ok(every.into_iter().filter(|u| u.account.is_none()).collect())
}

/// Every user whose record's key starts with `prefix` (`name/…`), by record name.
pub(crate) async fn listed(pool: &Pool, prefix: &[u8]) -> Result<Vec<User>, Error> {
    let mut users = Vec::new();
    let mut pages = Pages::new(pool, layout::USERS, layout::before(prefix));
    while let Some(page) = pages.next().await? {
        for (key, value) in page {
            if !key.starts_with(prefix) {
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
    if user.account.is_some() {
        return Err(Error::Invalid(format!(
            "{name} is an account's: remove it with IAM's DeleteUser, or `coffer account rm`"
        )));
    }
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
    let mut keys = vec![layout::user_key(name)];
    keys.extend(user.keys.iter().map(|k| layout::access_key_key(&k.id)));
    pool.omap_remove(layout::USERS, keys).await?;
    Ok(())
}

/// `policies` (of `holder`, "user NAME" or "role NAME") with policy `name` set to
/// `document` (as `parse` reads it) or, without one, removed; or why not.
pub(crate) fn change_policy(
    policies: &mut Vec<(String, String)>,
    holder: &str,
    name: &str,
    document: Option<&str>,
    parse: fn(&str) -> Result<Policy, String>,
) -> Result<(), Error> {
    match document {
        Some(document) => {
            with_policy(policies, holder, name, document, parse).map_err(Error::IamPolicy)
        }
        None => without_policy(policies, holder, name),
    }
}

/// `policies` (of `holder`) with policy `name` set to `document` as `parse` reads it
/// (replacing one of that name), or why not.
fn with_policy(
    policies: &mut Vec<(String, String)>,
    holder: &str,
    name: &str,
    document: &str,
    parse: fn(&str) -> Result<Policy, String>,
) -> Result<(), PolicyRefusal> {
    if !is_iam_name(name, POLICY_NAME_BYTES_MAX) {
        return Err(PolicyRefusal::Name(name.into()));
    }
    parse(document).map_err(PolicyRefusal::Document)?;
    let mut changed = policies.clone();
    match changed.binary_search_by(|(given, _)| given.as_str().cmp(name)) {
        Ok(at) => changed[at].1 = document.into(),
        Err(at) => changed.insert(at, (name.into(), document.into())),
    }
    let bytes = changed.iter().map(|(_, text)| text.len()).sum();
    if bytes > USER_POLICIES_BYTES_MAX {
        return Err(PolicyRefusal::TooLarge {
            holder: holder.into(),
            bytes,
        });
    }
    *policies = changed;
    Ok(())
}

/// `policies` (of `holder`) without policy `name`, which must be there.
fn without_policy(
    policies: &mut Vec<(String, String)>,
    holder: &str,
    name: &str,
) -> Result<(), Error> {
    let before = policies.len();
    policies.retain(|(given, _)| given != name);
    if policies.len() == before {
        return Err(Error::NotFound(format!("policy {name} of {holder}")));
    }
    Ok(())
}

/// A policy document a signer acts with, borrowed from the records it was read with (a
/// signature compares these with the last it parsed without copying them).
pub struct Document<'a> {
    /// Whose it is: "user", "group" or "role", and the holder's name (for errors).
    pub holder: (&'static str, &'a str),
    /// The policy's name, or a managed policy's ARN.
    pub name: &'a str,
    pub text: &'a str,
}

/// The documents of every policy `user` acts with: its own, those attached to it, and
/// those of `groups` (its groups), own and attached.
pub fn documents<'a>(user: &'a User, groups: &'a [Group]) -> Result<Vec<Document<'a>>, Error> {
    let holder = ("user", user.name.as_str());
    let mut documents: Vec<Document> = own(&user.policies, holder).collect();
    documents.extend(crate::managed::documents(&user.attached, holder)?);
    for group in groups {
        let holder = ("group", group.name.as_str());
        documents.extend(own(&group.policies, holder));
        documents.extend(crate::managed::documents(&group.attached, holder)?);
    }
    Ok(documents)
}

/// `policies`, `holder`'s own.
pub(crate) fn own<'a>(
    policies: &'a [(String, String)],
    holder: (&'static str, &'a str),
) -> impl Iterator<Item = Document<'a>> {
    policies
        .iter()
        .map(move |(name, text)| Document { holder, name, text })
}

/// `documents` (from [`documents`] or [`crate::roles::documents`]), read as `parse` reads
/// them.
pub fn read_documents(
    documents: &[Document],
    parse: crate::policy::Parse,
) -> Result<Vec<Policy>, Error> {
    documents
        .iter()
        .map(|d| {
            parse(d.text).map_err(|e| {
                let (kind, holder) = d.holder;
                Error::Corrupt(format!("policy {} of {kind} {holder}: {e}", d.name))
            })
        })
        .collect()
}

/// Attaches managed policy `arn` to user `user` (`attach`), or detaches it; errors name the
/// user as `shown`.
pub async fn attach(
    pool: &Pool,
    user: &str,
    shown: &str,
    arn: &str,
    attach: bool,
) -> Result<(), Error> {
    let holder = format!("user {shown}");
    update(pool, user, shown, |mut found: User| {
        crate::managed::change(&mut found.attached, &holder, arn, attach)?;
        Ok(found)
    })
    .await
    .map(drop)
}

/// Sets user `user`'s policy `name` to `document`, or removes it without one; errors name
/// the user as `shown` (an account's user by its name, not its record's).
pub async fn set_policy(
    pool: &Pool,
    user: &str,
    shown: &str,
    name: &str,
    document: Option<&str>,
) -> Result<(), Error> {
    let holder = format!("user {shown}");
    update(pool, user, shown, |mut found: User| {
        let parse = Policy::parse_identity;
        change_policy(&mut found.policies, &holder, name, document, parse)?;
        Ok(found)
    })
    .await?;
    Ok(())
}

/// Rewrites user `name`'s record as `change` makes it, under its name and each of its keys,
/// provided no one changed or removed it meanwhile (else it reads it again): the records
/// of keys it no longer has are removed, and a change of name moves it (refused if that
/// name is taken). Errors name the user as `shown`. Returns the record written.
pub(crate) async fn update(
    pool: &Pool,
    name: &str,
    shown: &str,
    change: impl Fn(User) -> Result<User, Error>,
) -> Result<User, Error> {
    let key = layout::user_key(name);
    for _ in 0..UPDATE_TRIES {
        let Some((bytes, found)) = read_record::<User>(pool, key.clone()).await? else {
            return Err(Error::NotFound(format!("user {shown}")));
        };
        let changed = change(found.clone())?;
        let record = layout::encode(&changed);
        let new_key = layout::user_key(&changed.name);
        let mut asserts = vec![ObjectOp::AssertOmap {
            key: key.clone(),
            value: Some(bytes),
        }];
        let mut gone: Vec<Vec<u8>> = found
            .keys
            .iter()
            .filter(|k| !changed.keys.iter().any(|c| c.id == k.id))
            .map(|k| layout::access_key_key(&k.id))
            .collect();
        if new_key != key {
            if read_record::<User>(pool, new_key.clone()).await?.is_some() {
                return Err(Error::Exists(format!("user {}", changed.name)));
            }
            asserts.push(ObjectOp::AssertOmap {
                key: new_key.clone(),
                value: None,
            });
            gone.push(key.clone());
        }
        let mut entries = vec![(new_key, record.clone())];
        entries.extend(
            changed
                .keys
                .iter()
                .map(|k| (layout::access_key_key(&k.id), record.clone())),
        );
        let mut ops = asserts;
        if !gone.is_empty() {
            ops.push(ObjectOp::OmapRemove { keys: gone });
        }
        ops.push(ObjectOp::OmapSet { entries });
        match pool.operate(layout::USERS, ops, Bytes::new()).await {
            Ok(_) => return Ok(changed),
            Err(client::Error::Mismatch(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Busy(format!(
        "user {shown} is being changed by others"
    )))
}

/// Rewrites the record under `key` (`what` it is, for errors) as `change` makes it, there
/// and under the keys `also` names, provided no one changed or removed it meanwhile (else
/// it reads it again).
pub(crate) async fn update_record<R: Record>(
    pool: &Pool,
    key: Vec<u8>,
    what: &str,
    change: impl Fn(R) -> Result<R, Error>,
    also: impl Fn(&R) -> Vec<Vec<u8>>,
) -> Result<(), Error> {
    for _ in 0..UPDATE_TRIES {
        let Some((bytes, found)) = read_record(pool, key.clone()).await? else {
            return Err(Error::NotFound(what.into()));
        };
        let changed = change(found)?;
        let record = layout::encode(&changed);
        let mut entries = vec![(key.clone(), record.clone())];
        entries.extend(also(&changed).into_iter().map(|k| (k, record.clone())));
        let ops = vec![
            ObjectOp::AssertOmap {
                key: key.clone(),
                value: Some(bytes),
            },
            ObjectOp::OmapSet { entries },
        ];
        match pool.operate(layout::USERS, ops, Bytes::new()).await {
            Ok(_) => return Ok(()),
            Err(client::Error::Mismatch(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Busy(format!("{what} is being changed by others")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &str = r#"{"Version": "2012-10-17",
        "Statement": {"Effect": "Allow", "Action": "*", "Resource": "*"}}"#;

    fn set(
        policies: &mut Vec<(String, String)>,
        name: &str,
        document: &str,
    ) -> Result<(), PolicyRefusal> {
        with_policy(policies, "user ann", name, document, Policy::parse_identity)
    }

    #[test]
    fn policies_are_kept_by_name_and_refused_with_the_reason() {
        let mut policies = Vec::new();
        set(&mut policies, "b", ALL).expect("set");
        set(&mut policies, "a", ALL).expect("set");
        set(&mut policies, "b", ALL).expect("replaced");
        let names: Vec<_> = policies.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let long = "P".repeat(POLICY_NAME_BYTES_MAX + 1);
        for bad in ["", "a b", long.as_str()] {
            assert!(matches!(
                set(&mut policies, bad, ALL),
                Err(PolicyRefusal::Name(_))
            ));
        }
        assert!(matches!(
            set(&mut policies, "a", r#"{"Version": "2012-10-17"}"#),
            Err(PolicyRefusal::Document(_))
        ));
        assert!(matches!(
            without_policy(&mut policies, "user ann", "never"),
            Err(Error::NotFound(_))
        ));
        without_policy(&mut policies, "user ann", "a").expect("removed");
        assert_eq!(policies.len(), 1);
        let statement = r#"{"Effect": "Allow", "Action": "*", "Resource": "*"}"#;
        // Two documents of about 10 KiB each: the first fits, the second not beside it.
        let half = format!(
            r#"{{"Version": "2012-10-17", "Statement": [{}]}}"#,
            vec![statement; 200].join(",")
        );
        assert!(half.len() < USER_POLICIES_BYTES_MAX && 2 * half.len() > USER_POLICIES_BYTES_MAX);
        let mut policies = Vec::new();
        set(&mut policies, "a", &half).expect("under the limit");
        assert!(matches!(
            set(&mut policies, "b", &half),
            Err(PolicyRefusal::TooLarge { .. })
        ));
        assert_eq!(
            policies.len(),
            1,
            "a refused policy leaves the others as they were"
        );
    }

    #[test]
    fn a_session_lives_until_it_expires_or_its_user_or_role_is_gone() {
        let mut session = Session {
            user: "ann".into(),
            user_created_ns: 1,
            secret_key: "s".into(),
            token: "t".into(),
            expires_ns: 100,
            role: None,
        };
        let users = HashMap::from([("ann".to_owned(), 1)]);
        let roles = HashMap::from([("r".to_owned(), "AROA1".to_owned())]);
        assert!(session_lives(&session, 99, &users, &roles));
        assert!(!session_lives(&session, 100, &users, &roles), "expired");
        let again = HashMap::from([("ann".to_owned(), 2)]);
        assert!(
            !session_lives(&session, 99, &again, &roles),
            "ann made again"
        );
        assert!(
            !session_lives(&session, 99, &HashMap::new(), &roles),
            "ann gone"
        );
        session.role = Some(RoleTaken {
            name: "r".into(),
            id: "AROA1".into(),
            session_name: "n".into(),
            policy: None,
            tags: Vec::new(),
        });
        assert!(session_lives(&session, 99, &users, &roles));
        let remade = HashMap::from([("r".to_owned(), "AROA2".to_owned())]);
        assert!(
            !session_lives(&session, 99, &users, &remade),
            "r made again"
        );
        assert!(
            !session_lives(&session, 99, &users, &HashMap::new()),
            "r gone"
        );
    }

    #[test]
    fn sessions_last_as_asked_within_their_bounds() {
        assert_eq!(
            session_seconds(None, None).expect("default"),
            TOKEN_SESSION_SECONDS_DEFAULT
        );
        assert!(session_seconds(Some(899), None).is_err());
        assert!(session_seconds(Some(SESSION_SECONDS_MAX + 1), None).is_err());
        let role = Role {
            name: "r".into(),
            path: "/".into(),
            id: "AROA".into(),
            created_ns: 1,
            trust: String::new(),
            description: String::new(),
            max_session_seconds: 7200,
            tags: Vec::new(),
            policies: Vec::new(),
            account: None,
            attached: Vec::new(),
        };
        assert_eq!(session_seconds(None, Some(&role)).expect("default"), 3600);
        assert_eq!(
            session_seconds(Some(7200), Some(&role)).expect("longest"),
            7200
        );
        assert!(session_seconds(Some(7201), Some(&role)).is_err());
    }
}
