//! The dashboard's users and their sessions. Users live in `DIR/dashboard/users.json`
//! (private to its owner), each with a role and a password kept as a PBKDF2-HMAC-SHA256
//! hash under a salt of its own; `coffer dashboard user` adds and removes them, and the
//! dashboard reads the file at each login, so a change needs no restart. A login gives a
//! session: a random token in a cookie (HttpOnly, Secure, SameSite=Strict) and a token of
//! its own that every form sends back, for eight hours.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_lc_rs::pbkdf2;
use serde::{Deserialize, Serialize};

/// The users file, in the dashboard's directory.
pub const USERS_FILE: &str = "users.json";
/// Where `coffer up` writes the password of the first user, `admin`.
pub const ADMIN_PASSWORD_FILE: &str = "admin-password";
/// The first user `coffer up` makes.
pub const ADMIN: &str = "admin";
/// PBKDF2 rounds per password check (OWASP's figure for HMAC-SHA256).
const PBKDF2_ROUNDS: u32 = 600_000;
const SALT_BYTES: usize = 16;
const HASH_BYTES: usize = 32;
/// How long a session lasts after its login.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(8 * 3600);
/// Sessions held at once; past it, the oldest goes.
const SESSIONS_MAX: usize = 1024;
/// Characters of a generated password: 20 of these 32 carry 100 bits.
const PASSWORD_ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyz23456789";
const PASSWORD_CHARS: usize = 20;

/// What a user may do: see everything, or also change the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Admin,
    ReadOnly,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::ReadOnly => "read-only",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct User {
    name: String,
    role: Role,
    salt: String,
    hash: String,
}

#[derive(Default, Serialize, Deserialize)]
struct UsersFile {
    users: Vec<User>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn rounds() -> NonZeroU32 {
    NonZeroU32::new(PBKDF2_ROUNDS).unwrap_or(NonZeroU32::MIN)
}

/// A fresh password, for a person to copy.
pub fn generate_password() -> String {
    (0..PASSWORD_CHARS)
        .map(|_| {
            let at = rand::random_range(0..PASSWORD_ALPHABET.len());
            char::from(PASSWORD_ALPHABET[at])
        })
        .collect()
}

fn check_name(name: &str) -> Result<(), String> {
    let fits = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b));
    if fits {
        Ok(())
    } else {
        Err(format!(
            "{name:?}: a user name is 1 to 64 letters, digits and - _ . @"
        ))
    }
}

/// The users of the dashboard whose directory is `dir`.
#[derive(Clone)]
pub struct Users {
    path: PathBuf,
}

impl Users {
    pub fn at(dir: &Path) -> Users {
        Users {
            path: dir.join(USERS_FILE),
        }
    }

    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    fn load(&self) -> Result<UsersFile, String> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => {
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", self.path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(UsersFile::default()),
            Err(e) => Err(format!("{}: {e}", self.path.display())),
        }
    }

    fn save(&self, file: &UsersFile) -> Result<(), String> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(file).map_err(|e| e.to_string())?;
        crate::up::write_private(&self.path, &text)
    }

    /// Adds user `name` with `role` and `password`.
    pub fn add(&self, name: &str, role: Role, password: &str) -> Result<(), String> {
        check_name(name)?;
        let mut file = self.load()?;
        if file.users.iter().any(|u| u.name == name) {
            return Err(format!("dashboard user {name} exists (remove it first)"));
        }
        let salt: [u8; SALT_BYTES] = rand::random();
        let mut hash = [0u8; HASH_BYTES];
        pbkdf2::derive(
            pbkdf2::PBKDF2_HMAC_SHA256,
            rounds(),
            &salt,
            password.as_bytes(),
            &mut hash,
        );
        file.users.push(User {
            name: name.into(),
            role,
            salt: hex(&salt),
            hash: hex(&hash),
        });
        self.save(&file)
    }

    pub fn remove(&self, name: &str) -> Result<(), String> {
        let mut file = self.load()?;
        let before = file.users.len();
        file.users.retain(|u| u.name != name);
        if file.users.len() == before {
            return Err(format!("there is no dashboard user {name}"));
        }
        self.save(&file)
    }

    /// Every user's name and role.
    pub fn list(&self) -> Result<Vec<(String, Role)>, String> {
        Ok(self
            .load()?
            .users
            .into_iter()
            .map(|u| (u.name, u.role))
            .collect())
    }

    /// The role of `name` if `password` is its password.
    pub fn check(&self, name: &str, password: &str) -> Result<Option<Role>, String> {
        let file = self.load()?;
        let Some(user) = file.users.iter().find(|u| u.name == name) else {
            return Ok(None);
        };
        let (Some(salt), Some(hash)) = (unhex(&user.salt), unhex(&user.hash)) else {
            return Err(format!("{}: user {name} is damaged", self.path.display()));
        };
        let verified = pbkdf2::verify(
            pbkdf2::PBKDF2_HMAC_SHA256,
            rounds(),
            &salt,
            password.as_bytes(),
            &hash,
        );
        Ok(verified.is_ok().then_some(user.role))
    }
}

/// A logged-in user.
#[derive(Clone, Debug)]
pub struct Session {
    pub user: String,
    pub role: Role,
    /// Sent back by every form of this session.
    pub form_token: String,
    started: Instant,
}

/// The sessions of a running dashboard, by cookie token.
#[derive(Default)]
pub struct Sessions {
    held: Mutex<HashMap<String, Session>>,
}

fn token() -> String {
    hex(&rand::random::<[u8; 32]>())
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new session for `user`; returns its cookie token.
    pub fn open(&self, user: &str, role: Role) -> String {
        let mut held = self.lock();
        let now = Instant::now();
        held.retain(|_, s| now.duration_since(s.started) < SESSION_LIFETIME);
        if held.len() >= SESSIONS_MAX {
            if let Some(oldest) = held
                .iter()
                .min_by_key(|(_, s)| s.started)
                .map(|(t, _)| t.clone())
            {
                held.remove(&oldest);
            }
        }
        let cookie = token();
        held.insert(
            cookie.clone(),
            Session {
                user: user.into(),
                role,
                form_token: token(),
                started: now,
            },
        );
        cookie
    }

    /// The session of cookie token `cookie`, while it lasts.
    pub fn get(&self, cookie: &str) -> Option<Session> {
        let held = self.lock();
        held.get(cookie)
            .filter(|s| s.started.elapsed() < SESSION_LIFETIME)
            .cloned()
    }

    pub fn close(&self, cookie: &str) {
        self.lock().remove(cookie);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_logs_in_with_its_password_only() {
        let dir = tempfile::tempdir().expect("a directory");
        let users = Users::at(dir.path());
        users.add("ops", Role::ReadOnly, "right").expect("added");
        assert_eq!(users.check("ops", "right"), Ok(Some(Role::ReadOnly)));
        assert_eq!(users.check("ops", "wrong"), Ok(None));
        assert_eq!(users.check("nobody", "right"), Ok(None));
        assert!(users.add("ops", Role::Admin, "again").is_err());
        assert!(users.add("a b", Role::Admin, "x").is_err());
        users.remove("ops").expect("removed");
        assert_eq!(users.check("ops", "right"), Ok(None));
        let text = std::fs::read_to_string(dir.path().join(USERS_FILE)).expect("file");
        assert!(!text.contains("right"), "no password in the clear: {text}");
    }

    #[test]
    fn sessions_are_found_by_their_cookie_until_closed() {
        let sessions = Sessions::default();
        let cookie = sessions.open("ops", Role::Admin);
        let session = sessions.get(&cookie).expect("open");
        assert_eq!(session.user, "ops");
        assert_ne!(session.form_token, cookie);
        assert!(sessions.get("other").is_none());
        sessions.close(&cookie);
        assert!(sessions.get(&cookie).is_none());
        assert_eq!(generate_password().len(), PASSWORD_CHARS);
    }
}
