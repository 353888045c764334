//! IAM roles, kept in the gateway's pool beside the users: a role's trust policy says who
//! may take it on (STS's AssumeRole), and its own policies what its sessions may do. The
//! sessions themselves are kept as users' are ([`crate::users::create_session`]).

use client::Pool;

use crate::layout::{self, Role};
use crate::omap::Pages;
use crate::policy::Policy;
use crate::users::{self, PolicyRefusal};
use crate::Error;

/// A role session's life when none is asked (STS's), and the range of a role's longest.
pub const ROLE_SESSION_SECONDS_DEFAULT: u64 = 3600;
pub const MAX_SESSION_SECONDS_MIN: u64 = 3600;
pub const MAX_SESSION_SECONDS_MAX: u64 = 43_200;
/// IAM's limits on a role's name, path, description and tags.
const NAME_BYTES_MAX: usize = 64;
const PATH_BYTES_MAX: usize = 512;
const DESCRIPTION_CHARS_MAX: usize = 1000;
const TAGS_MAX: usize = 50;
const TAG_KEY_CHARS_MAX: usize = 128;
const TAG_VALUE_CHARS_MAX: usize = 256;

/// What CreateRole asks for.
pub struct NewRole<'a> {
    /// The account the role is to be of; none for the operator's users' roles.
    pub account: Option<&'a str>,
    pub name: &'a str,
    /// `None`: `/`.
    pub path: Option<&'a str>,
    pub trust: &'a str,
    pub description: &'a str,
    /// `None`: an hour.
    pub max_session_seconds: Option<u64>,
    pub tags: Vec<(String, String)>,
}

/// Refuses an IAM path (of a role or a user) other than `/` or printable characters
/// between two `/`.
pub(crate) fn check_path(path: &str) -> Result<(), Error> {
    let pathed = path.starts_with('/')
        && path.ends_with('/')
        && path.len() <= PATH_BYTES_MAX
        && path.bytes().all(|b| (0x21..=0x7e).contains(&b));
    if pathed {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "path {path:?}: '/', or printable characters between two '/', at most \
             {PATH_BYTES_MAX}"
        )))
    }
}

/// The role `asked` describes, with id `id`, made at `now_ns`, or why it cannot be.
pub fn role(asked: NewRole, id: String, now_ns: u64) -> Result<Role, Error> {
    let invalid = |why: String| Err(Error::Invalid(why));
    let name = asked.name;
    users::check_iam_name("role", name, NAME_BYTES_MAX)?;
    let path = asked.path.unwrap_or("/");
    check_path(path)?;
    if asked.description.chars().count() > DESCRIPTION_CHARS_MAX {
        return invalid(format!(
            "the description is longer than {DESCRIPTION_CHARS_MAX} characters"
        ));
    }
    let max_session_seconds = asked.max_session_seconds.unwrap_or(MAX_SESSION_SECONDS_MIN);
    check_max_session(max_session_seconds)?;
    check_tags(&asked.tags)?;
    Policy::parse_trust(asked.trust)
        .map_err(|why| Error::IamPolicy(PolicyRefusal::Document(why)))?;
    Ok(Role {
        name: name.into(),
        path: path.into(),
        id,
        created_ns: now_ns,
        trust: asked.trust.into(),
        description: asked.description.into(),
        max_session_seconds,
        tags: asked.tags,
        policies: Vec::new(),
        account: asked.account.map(str::to_owned),
        attached: Vec::new(),
    })
}

/// Refuses a longest session out of IAM's range.
fn check_max_session(seconds: u64) -> Result<(), Error> {
    if (MAX_SESSION_SECONDS_MIN..=MAX_SESSION_SECONDS_MAX).contains(&seconds) {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "MaxSessionDuration {seconds}: from {MAX_SESSION_SECONDS_MIN} to \
             {MAX_SESSION_SECONDS_MAX}"
        )))
    }
}

/// The ARN of role `name` under `path` (`/` or `/a/b/`) of `account` (none: the operator's
/// users').
pub fn arn_in(account: Option<&str>, path: &str, name: &str) -> String {
    format!("arn:aws:iam::{}:role{path}{name}", account.unwrap_or(""))
}

/// The ARN of `role`.
pub fn arn(role: &Role) -> String {
    arn_in(role.account.as_deref(), &role.path, &role.name)
}

/// The ARN of a session named `session` of `role` (STS's assumed-role ARN).
pub fn session_arn(role: &Role, session: &str) -> String {
    let account = role.account.as_deref().unwrap_or("");
    format!(
        "arn:aws:sts::{account}:assumed-role/{}/{session}",
        role.name
    )
}

/// Refuses a role's tags out of IAM's limits, or a key given twice (in any case: IAM's
/// tag keys are not case-sensitive).
pub fn check_tags(tags: &[(String, String)]) -> Result<(), Error> {
    check_each_tag(tags)?;
    for (at, (key, _)) in tags.iter().enumerate() {
        if tags[..at]
            .iter()
            .any(|(earlier, _)| earlier.eq_ignore_ascii_case(key))
        {
            return Err(Error::Invalid(format!("tag {key:?} is given twice")));
        }
    }
    Ok(())
}

/// Refuses session tags (AssumeRole's `Tags`, a web identity token's) out of STS's
/// limits: as a role's tags, with no key under AWS's own `aws:` and only STS's characters
/// (letters, digits, spaces and `_.:/=+-@`: a tag's value, read into a policy by a
/// variable, cannot bring a wildcard in), but a key may be given with several values
/// (Ceph's gateway's multi-valued tags), each counting as a tag, though never under two
/// spellings of one key (`team` and `Team` would read as one key of both values).
/// AssumeRole's, given by a caller, are held to [`check_tags`] too.
pub fn check_session_tags(tags: &[(String, String)]) -> Result<(), Error> {
    check_each_tag(tags)?;
    let allowed = |text: &str| {
        text.chars()
            .all(|c| c.is_alphanumeric() || c.is_whitespace() || "_.:/=+-@".contains(c))
    };
    for (at, (key, value)) in tags.iter().enumerate() {
        let respelled = tags[..at]
            .iter()
            .any(|(earlier, _)| earlier != key && earlier.eq_ignore_ascii_case(key));
        if respelled {
            return Err(Error::Invalid(format!(
                "tag {key:?} is given under two spellings"
            )));
        }
        if key.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("aws:")) {
            return Err(Error::Invalid(format!(
                "tag {key:?}: keys under \"aws:\" are AWS's own"
            )));
        }
        if !allowed(key) || !allowed(value) {
            return Err(Error::Invalid(format!(
                "tag {key:?}: keys and values of letters, digits, spaces and _.:/=+-@ only"
            )));
        }
    }
    Ok(())
}

/// Refuses more than IAM's number of tags, or a tag whose key or value is out of its
/// limits.
fn check_each_tag(tags: &[(String, String)]) -> Result<(), Error> {
    if tags.len() > TAGS_MAX {
        return Err(Error::Invalid(format!(
            "{} tags, more than {TAGS_MAX}",
            tags.len()
        )));
    }
    for (key, value) in tags {
        let keyed = !key.is_empty() && key.chars().count() <= TAG_KEY_CHARS_MAX;
        if !keyed || value.chars().count() > TAG_VALUE_CHARS_MAX {
            return Err(Error::Invalid(format!(
                "tag {key:?}: a key of 1 to {TAG_KEY_CHARS_MAX} characters and a value of at \
                 most {TAG_VALUE_CHARS_MAX}"
            )));
        }
    }
    Ok(())
}

/// The tags a `role`'s session's requests carry (`aws:PrincipalTag/KEY`): the
/// `session`'s, and the role's own under the keys the session's do not give, as in AWS.
pub fn principal_tags(role: &Role, session: &[(String, String)]) -> Vec<(String, String)> {
    let given = |key: &str| session.iter().any(|(k, _)| k.eq_ignore_ascii_case(key));
    let own = role.tags.iter().filter(|(key, _)| !given(key));
    session.iter().chain(own).cloned().collect()
}

/// Creates the role `asked` describes, unless one of its name exists.
pub async fn create(pool: &Pool, asked: NewRole<'_>) -> Result<Role, Error> {
    let id = format!("AROA{}", users::random_text(17, users::ACCESS_KEY_ALPHABET));
    let role = role(asked, id, layout::now_ns())?;
    let key = layout::role_key(&role.record());
    match users::create_record(pool, key, layout::encode(&role)).await? {
        true => Ok(role),
        false => Err(Error::Exists(format!("role {}", role.name))),
    }
}

/// Role `name` of `account` (none: of the operator's users), in any case for an account's.
pub async fn get(pool: &Pool, account: Option<&str>, name: &str) -> Result<Option<Role>, Error> {
    let key = layout::role_key(&layout::role_record(account, name));
    Ok(users::read_record::<Role>(pool, key)
        .await?
        .map(|(_, role)| role)
        .filter(|role| role.account.as_deref() == account))
}

/// Every role of `account` (none: of the operator's users) whose path starts with
/// `prefix`, by record name.
pub async fn list(pool: &Pool, account: Option<&str>, prefix: &str) -> Result<Vec<Role>, Error> {
    let every = every(pool, account.map(|a| format!("{a}$")).as_deref()).await?;
    Ok(every
        .into_iter()
        .filter(|role| role.account.as_deref() == account && role.path.starts_with(prefix))
        .collect())
}

/// Every role whose record name starts with `start` (none: every role), by record name.
pub async fn every(pool: &Pool, start: Option<&str>) -> Result<Vec<Role>, Error> {
    let prefix = format!("role/{}", start.unwrap_or("")).into_bytes();
    let mut roles = Vec::new();
    let mut pages = Pages::new(pool, layout::USERS, layout::before(&prefix));
    while let Some(page) = pages.next().await? {
        for (key, value) in page {
            if !key.starts_with(&prefix) {
                return Ok(roles);
            }
            roles.push(layout::decode(&value).map_err(Error::Corrupt)?);
        }
    }
    Ok(roles)
}

/// Removes role `judged` (the role a caller was judged on: not one of the same name made
/// since); refused while it has policies (IAM's DeleteConflict). Its sessions end with it.
pub async fn remove(pool: &Pool, judged: &Role) -> Result<(), Error> {
    let name = &judged.name;
    let key = layout::role_key(&judged.record());
    let found = users::read_record::<Role>(pool, key.clone()).await?;
    let Some((bytes, role)) = found.filter(|(_, role)| role.id == judged.id) else {
        return Err(Error::NotFound(format!("role {name}")));
    };
    if !role.policies.is_empty() || !role.attached.is_empty() {
        return Err(Error::Conflict(format!(
            "role {name} has policies; remove them first"
        )));
    }
    users::remove_as_read(pool, key.clone(), bytes, vec![key], &format!("role {name}")).await
}

/// Sets role `judged`'s policy `name` to `document`, or removes it without one.
pub async fn set_policy(
    pool: &Pool,
    judged: &Role,
    name: &str,
    document: Option<&str>,
) -> Result<(), Error> {
    let holder = format!("role {}", judged.name);
    update(pool, judged, |mut found| {
        let parse = Policy::parse_role;
        users::change_policy(&mut found.policies, &holder, name, document, parse)?;
        Ok(found)
    })
    .await
}

/// Sets role `judged`'s description and longest session, where given (IAM's UpdateRole).
pub async fn update_role(
    pool: &Pool,
    judged: &Role,
    description: Option<&str>,
    max_session_seconds: Option<u64>,
) -> Result<(), Error> {
    if description.is_some_and(|d| d.chars().count() > DESCRIPTION_CHARS_MAX) {
        return Err(Error::Invalid(format!(
            "the description is longer than {DESCRIPTION_CHARS_MAX} characters"
        )));
    }
    if let Some(seconds) = max_session_seconds {
        check_max_session(seconds)?;
    }
    update(pool, judged, |mut found| {
        if let Some(description) = description {
            found.description = description.into();
        }
        if let Some(seconds) = max_session_seconds {
            found.max_session_seconds = seconds;
        }
        Ok(found)
    })
    .await
}

/// Sets role `judged`'s trust policy to `document`.
pub async fn put_trust(pool: &Pool, judged: &Role, document: &str) -> Result<(), Error> {
    Policy::parse_trust(document).map_err(|why| Error::IamPolicy(PolicyRefusal::Document(why)))?;
    update(pool, judged, |mut found| {
        found.trust = document.into();
        Ok(found)
    })
    .await
}

/// Changes role `judged`, unless a role of the same name replaced it since it was read (the
/// caller was judged on its path).
async fn update(
    pool: &Pool,
    judged: &Role,
    change: impl Fn(Role) -> Result<Role, Error>,
) -> Result<(), Error> {
    let what = format!("role {}", judged.name);
    let same = |found: Role| match found.id == judged.id {
        true => change(found),
        false => Err(Error::NotFound(what.clone())),
    };
    let key = layout::role_key(&judged.record());
    users::update_record(pool, key, &what, same, |_| Vec::new()).await
}

/// The documents of `role`'s policies, own and attached.
pub fn documents(role: &Role) -> Result<Vec<users::Document<'_>>, Error> {
    let holder = ("role", role.name.as_str());
    let mut documents: Vec<users::Document> = users::own(&role.policies, holder).collect();
    documents.extend(crate::managed::documents(&role.attached, holder)?);
    Ok(documents)
}

/// Attaches managed policy `arn` to role `judged` (`attach`), or detaches it.
pub async fn attach(pool: &Pool, judged: &Role, arn: &str, attach: bool) -> Result<(), Error> {
    let holder = format!("role {}", judged.name);
    update(pool, judged, |mut found| {
        crate::managed::change(&mut found.attached, &holder, arn, attach)?;
        Ok(found)
    })
    .await
}

/// `role`'s trust policy, read.
pub fn trust_of(role: &Role) -> Result<Policy, Error> {
    Policy::parse_trust(&role.trust)
        .map_err(|e| Error::Corrupt(format!("trust policy of role {}: {e}", role.name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRUST: &str = r#"{"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Principal": {"AWS": ["arn:aws:iam:::user/ann"]}, "Action": ["sts:AssumeRole"]}]}"#;

    fn asked(name: &str) -> NewRole<'_> {
        NewRole {
            account: None,
            name,
            path: None,
            trust: TRUST,
            description: "",
            max_session_seconds: None,
            tags: Vec::new(),
        }
    }

    #[test]
    fn a_role_is_made_with_iams_defaults_and_refused_with_the_reason() {
        let made = role(asked("reader"), "AROA1".into(), 5).expect("made");
        assert_eq!((made.path.as_str(), made.max_session_seconds), ("/", 3600));
        for bad in ["", "a b", &"r".repeat(65)] {
            assert!(matches!(
                role(asked(bad), "A".into(), 5),
                Err(Error::Invalid(_))
            ));
        }
        for path in ["a/", "/a", "/a b/"] {
            let pathed = NewRole {
                account: None,
                path: Some(path),
                ..asked("r")
            };
            assert!(
                matches!(role(pathed, "A".into(), 5), Err(Error::Invalid(_))),
                "{path}"
            );
        }
        let long = NewRole {
            account: None,
            max_session_seconds: Some(43_201),
            ..asked("r")
        };
        assert!(matches!(role(long, "A".into(), 5), Err(Error::Invalid(_))));
        let twice = NewRole {
            account: None,
            tags: vec![("k".into(), "1".into()), ("k".into(), "2".into())],
            ..asked("r")
        };
        assert!(matches!(role(twice, "A".into(), 5), Err(Error::Invalid(_))));
        let nobody = NewRole {
            account: None,
            trust: r#"{"Version": "2012-10-17", "Statement": {"Effect": "Allow",
                "Action": "sts:AssumeRole"}}"#,
            ..asked("r")
        };
        assert!(matches!(
            role(nobody, "A".into(), 5),
            Err(Error::IamPolicy(PolicyRefusal::Document(_)))
        ));
    }
}
