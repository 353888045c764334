//! Where the gateway keeps its state in its pool, and the records it keeps there.
//!
//! - `gw.users`: an omap with each user twice, under `name/NAME` and under `key/ACCESS_KEY`
//!   (one read finds a user by either), written in one atomic request.
//! - `gw.buckets`: an omap of every bucket's name and owner, for ListBuckets.
//! - `gw.index.BUCKET`: the bucket itself. Its `bucket` attribute says who owns it; it is
//!   created exclusively, which is what makes a bucket name taken. Its omap is the bucket's
//!   index: object key to [`ObjectEntry`], and after every object key (under a first byte
//!   of 0xff, which no UTF-8 key has) the bucket's multipart uploads in progress
//!   ([`upload_key`]), so that an upload is started and a bucket deleted in order on one
//!   object.
//! - `gw.data.INSTANCE.N`: stripe N of one upload of an object (or of one part of a
//!   multipart upload). Each upload writes a fresh instance, so an overwrite never touches the
//!   data a reader may be streaming; the index entry names the instances, and an object
//!   becomes visible only when that entry commits.
//! - `gw.upload.ID`: one multipart upload: its omap holds its parts by number.
//!
//! In a bucket whose versioning was ever enabled, the index also holds every version of
//! every object, under a first byte of 0xfe (after every object key, before the uploads):
//! per object key a [`Head`] ([`head_key`]), then its versions newest first
//! ([`version_key`]). The object key itself keeps a copy of the current version, so that
//! GET and ListObjects read as in any bucket; see `crate::versions`.

use serde::{Deserialize, Serialize};

use crate::acl::Acl;
use crate::checksum::{self, Checksum};
use crate::lock::Lock;

pub const USERS: &str = "gw.users";
pub const BUCKETS: &str = "gw.buckets";
/// The attribute of a bucket's index object that holds its [`BucketInfo`].
pub const BUCKET_ATTR: &str = "bucket";
/// The attribute of a bucket's index object that holds its default encryption ([`Sse`]).
pub const ENCRYPTION_ATTR: &str = "encryption";
/// The attribute of a bucket's index object that holds its versioning state
/// (`crate::versions::Versioning`); absent in a bucket never versioned.
pub const VERSIONING_ATTR: &str = "versioning";
/// The attribute of a bucket's index object that holds its tags ([`Tags`]).
pub const TAGS_ATTR: &str = "tags";
/// The attribute of a bucket's index object that holds its object lock
/// (`crate::lock::BucketLock`); absent where object lock was never enabled.
pub const LOCK_ATTR: &str = "lock";
/// The attribute of a bucket's index object that holds its lifecycle rules
/// (`crate::lifecycle::Lifecycle`).
pub const LIFECYCLE_ATTR: &str = "lifecycle";
/// The attribute of a bucket's index object that holds its policy
/// (`crate::policy::Policy`, kept as the text given).
pub const POLICY_ATTR: &str = "policy";
/// The attribute of a bucket's index object that marks its policy as binding its owner
/// ([`crate::buckets::BindsOwner`]); absent for a policy put without
/// ConfirmRemoveSelfBucketAccess.
pub const POLICY_BINDS_OWNER_ATTR: &str = "policy-binds-owner";
/// The attribute of a bucket's index object that holds its public access block
/// (`crate::policy::PublicBlock`).
pub const PUBLIC_BLOCK_ATTR: &str = "public-block";
/// The attribute of a bucket's index object that holds its ACL (`crate::acl::Acl`);
/// absent is its owner's alone.
pub const ACL_ATTR: &str = "acl";
/// The attribute of a bucket's index object that holds its object ownership
/// (`crate::acl::Ownership`).
pub const OWNERSHIP_ATTR: &str = "ownership";
/// The attribute of a bucket's index object that holds its CORS rules
/// (`crate::cors::Cors`).
pub const CORS_ATTR: &str = "cors";
/// Where a bucket's access logs go ([`crate::access_log::Logging`]).
pub const LOGGING_ATTR: &str = "logging";
/// Set on a bucket whose requesters pay ([`crate::buckets::RequesterPays`]); absent, its
/// owner does.
pub const REQUEST_PAYMENT_ATTR: &str = "request-payment";
/// The attribute set on a bucket's index object while the bucket is being deleted: index
/// updates require it absent.
pub const DELETING_ATTR: &str = "deleting";
/// Bytes per data object of a new upload.
pub const STRIPE_BYTES: u64 = 4 << 20;
/// The longest object key S3 allows, in bytes.
pub const KEY_BYTES_MAX: usize = 1024;

pub fn index_object(bucket: &str) -> String {
    format!("gw.index.{bucket}")
}

pub fn stripe_object(instance: &str, stripe: u64) -> String {
    format!("gw.data.{instance}.{stripe}")
}

pub fn upload_object(upload_id: &str) -> String {
    format!("gw.upload.{upload_id}")
}

/// The first byte of the index keys of uploads in progress (never the first byte of UTF-8).
pub const UPLOADS: u8 = 0xff;
/// The first byte of the index keys of object versions (never the first byte of UTF-8).
pub const VERSIONS: u8 = 0xfe;

/// Where a version sorts among the versions of its key: smaller is newer. The first 8 bytes
/// are `u64::MAX` less the version's time in nanoseconds, big-endian; the rest random.
pub type Order = [u8; 16];

/// The index key of an object key's [`Head`]: before every version of the key. Keys hold no
/// NUL (`check_key`), so the versions of a key sort in key order, as ListObjectVersions
/// lists them.
pub fn head_key(key: &str) -> Vec<u8> {
    let mut out = vec![VERSIONS];
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&[0, 0]);
    out
}

/// The index key of one version of an object key. It ends in 1, a head key in 0, so the
/// two never parse as each other.
pub fn version_key(key: &str, order: &Order) -> Vec<u8> {
    let mut out = vec![VERSIONS];
    out.extend_from_slice(key.as_bytes());
    out.push(0);
    out.extend_from_slice(order);
    out.push(1);
    out
}

/// What an index key names.
#[derive(Debug, PartialEq)]
pub enum IndexKey<'a> {
    /// An object key: its current version ([`ObjectEntry`]).
    Object(&'a [u8]),
    /// The versions of an object key, summed up ([`Head`]).
    Head(&'a [u8]),
    /// One version of an object key ([`Version`]).
    Version(&'a [u8], Order),
    /// An upload in progress ([`UploadRecord`]).
    Upload,
    /// Nothing this gateway writes.
    Unknown,
}

pub fn parse_index_key(bytes: &[u8]) -> IndexKey<'_> {
    match bytes.split_first() {
        Some((&UPLOADS, _)) => IndexKey::Upload,
        Some((&VERSIONS, rest)) => match rest.split_last() {
            Some((0, named)) => match named.split_last() {
                Some((0, key)) => IndexKey::Head(key),
                _ => IndexKey::Unknown,
            },
            Some((1, named)) if named.len() > 16 && named[named.len() - 17] == 0 => {
                let (key, order) = named.split_at(named.len() - 16);
                match <Order>::try_from(order) {
                    Ok(order) => IndexKey::Version(&key[..key.len() - 1], order),
                    Err(_) => IndexKey::Unknown,
                }
            }
            _ => IndexKey::Unknown,
        },
        _ => IndexKey::Object(bytes),
    }
}

/// The index key of an upload in progress: after every object key, by object key then id.
pub fn upload_key(key: &str, upload_id: &str) -> Vec<u8> {
    let mut out = vec![UPLOADS];
    out.extend_from_slice(key.as_bytes());
    out.push(0);
    out.extend_from_slice(upload_id.as_bytes());
    out
}

/// The object key and upload id of an index key made by [`upload_key`]; `None` for any
/// other key.
pub fn parse_upload_key(entry_key: &[u8]) -> Option<(String, String)> {
    if entry_key.first() != Some(&UPLOADS) {
        return None;
    }
    let split = entry_key.iter().rposition(|b| *b == 0)?;
    Some((
        String::from_utf8_lossy(&entry_key[1..split]).into_owned(),
        String::from_utf8_lossy(&entry_key[split + 1..]).into_owned(),
    ))
}

/// The key of part `number` in its upload's omap: big-endian, so parts list in order.
pub fn part_key(number: u32) -> Vec<u8> {
    number.to_be_bytes().to_vec()
}

pub fn user_key(name: &str) -> Vec<u8> {
    format!("name/{name}").into_bytes()
}

pub fn access_key_key(access_key: &str) -> Vec<u8> {
    format!("key/{access_key}").into_bytes()
}

/// The key of a session's record (temporary credentials, STS's GetSessionToken).
pub fn session_key(access_key: &str) -> Vec<u8> {
    format!("session/{access_key}").into_bytes()
}

/// The key of a role's record (IAM's roles).
pub fn role_key(name: &str) -> Vec<u8> {
    format!("role/{name}").into_bytes()
}

/// The key of a group's record, by its id (IAM's GroupId): users name their groups by id,
/// so that a group renamed keeps its users.
pub fn group_key(id: &str) -> Vec<u8> {
    format!("group/{id}").into_bytes()
}

/// The key that holds the id of group `name` of `account`: names are unique in an account
/// whatever their case ([`member_name`]).
pub fn group_name_key(account: &str, name: &str) -> Vec<u8> {
    format!("groupname/{}", member_name(account, name)).into_bytes()
}

/// The key of OpenID Connect provider `name` (its URL without the scheme) of `account`.
pub fn oidc_key(account: &str, name: &str) -> Vec<u8> {
    format!("oidc/{account}${name}").into_bytes()
}

/// A record the gateway stores: a first byte naming its format, then postcard. A record
/// whose fields change takes the next format, and reads the ones before in [`Record::earlier`].
pub trait Record: Serialize + for<'de> Deserialize<'de> {
    const FORMAT: u8 = 1;

    /// The record from its bytes (after the first) in an earlier `format`.
    fn earlier(format: u8, _bytes: &[u8]) -> Result<Self, String> {
        Err(format!("record format {format} is not known here"))
    }
}

pub fn encode<T: Record>(value: &T) -> Vec<u8> {
    let mut out = vec![T::FORMAT];
    // Serializing these plain structs into a Vec cannot fail.
    out.extend(postcard::to_allocvec(value).unwrap_or_default());
    out
}

pub fn decode<T: Record>(bytes: &[u8]) -> Result<T, String> {
    match bytes.split_first() {
        Some((&format, rest)) if format == T::FORMAT => {
            postcard::from_bytes(rest).map_err(|e| e.to_string())
        }
        Some((&format, rest)) => T::earlier(format, rest),
        None => Err("empty record".into()),
    }
}

/// Format 2 added policies; format 3 several keys and accounts; format 4 managed policies
/// and groups.
impl Record for User {
    const FORMAT: u8 = 4;

    fn earlier(format: u8, bytes: &[u8]) -> Result<Self, String> {
        match format {
            1 => Ok(UserV3::from(UserV2::from(read::<UserV1>(bytes)?)).into()),
            2 => Ok(UserV3::from(read::<UserV2>(bytes)?).into()),
            3 => Ok(read::<UserV3>(bytes)?.into()),
            _ => Err(format!("user format {format} is not known here")),
        }
    }
}
impl Record for BucketInfo {}
/// Format 2 added the role a session acts as; format 3 its session tags.
impl Record for Session {
    const FORMAT: u8 = 3;

    fn earlier(format: u8, bytes: &[u8]) -> Result<Self, String> {
        match format {
            1 => Ok(read::<SessionV1>(bytes)?.into()),
            2 => Ok(read::<SessionV2>(bytes)?.into()),
            _ => Err(format!("session format {format} is not known here")),
        }
    }
}
/// Format 2 added the role's account; format 3 its managed policies.
impl Record for Role {
    const FORMAT: u8 = 3;

    fn earlier(format: u8, bytes: &[u8]) -> Result<Self, String> {
        match format {
            1 => Ok(RoleV2::from(read::<RoleV1>(bytes)?).into()),
            2 => Ok(read::<RoleV2>(bytes)?.into()),
            _ => Err(format!("role format {format} is not known here")),
        }
    }
}
impl Record for Group {}
impl Record for Sse {}
impl Record for Head {}
impl Record for Tags {}

/// A bucket's tags, by key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tags(pub Vec<(String, String)>);
/// A version as an earlier format stored it, with the entry of that format (read once per
/// record: boxing saves nothing).
#[allow(clippy::large_enum_variant)]
#[derive(Deserialize)]
enum EarlierVersion<Entry> {
    Object(Entry),
    Marker { mtime_ns: u64, tag: VersionTag },
}

impl<Entry: Into<ObjectEntry>> From<EarlierVersion<Entry>> for Version {
    fn from(earlier: EarlierVersion<Entry>) -> Version {
        match earlier {
            EarlierVersion::Object(entry) => Version::Object(entry.into()),
            EarlierVersion::Marker { mtime_ns, tag } => Version::Marker { mtime_ns, tag },
        }
    }
}

/// Formats: its object entry is of format 3 in format 1, of format 4 (the lock) in format
/// 2, of format 5 (the ACL) in format 3, of format 6 (the checksum) in format 4, of format
/// 7 (the segments out of line) in format 5.
impl Record for Version {
    const FORMAT: u8 = 5;

    fn earlier(format: u8, bytes: &[u8]) -> Result<Self, String> {
        match format {
            1 => Ok(read::<EarlierVersion<EntryV3>>(bytes)?.into()),
            2 => Ok(read::<EarlierVersion<EntryV4>>(bytes)?.into()),
            3 => Ok(read::<EarlierVersion<EntryV5>>(bytes)?.into()),
            4 => Ok(read::<EarlierVersion<EntryV6>>(bytes)?.into()),
            _ => Err(format!("version format {format} is not known here")),
        }
    }
}

/// A user: one of the operator's (`coffer user create`), an account's root (`coffer
/// account create`) or a user an account made through IAM's API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct User {
    /// The record's name: the operator's user's own, an account's id for its root, and
    /// `ACCOUNT$name` (the name in lower case) for an account's user (see
    /// [`member_name`]).
    pub name: String,
    /// The user's access keys, oldest first: at most [`crate::users::KEYS_MAX`].
    pub keys: Vec<AccessKey>,
    pub created_ns: u64,
    /// The user's own (inline) policies, by name, in name order: each document as it was
    /// given (`crate::policy::Policy::parse_identity` reads it).
    pub policies: Vec<(String, String)>,
    /// The account the user is of, for an account's root or user.
    pub account: Option<InAccount>,
    /// The managed policies attached to the user (IAM's AttachUserPolicy), by ARN, in the
    /// order attached ([`crate::managed`]).
    pub attached: Vec<String>,
    /// The ids of the groups the user is in (an account's user), in the order joined.
    pub groups: Vec<String>,
}

/// A user as format 3 stored it, before managed policies and groups.
#[derive(Deserialize)]
struct UserV3 {
    name: String,
    keys: Vec<AccessKey>,
    created_ns: u64,
    policies: Vec<(String, String)>,
    account: Option<InAccount>,
}

impl From<UserV3> for User {
    fn from(third: UserV3) -> User {
        User {
            name: third.name,
            keys: third.keys,
            created_ns: third.created_ns,
            policies: third.policies,
            account: third.account,
            attached: Vec::new(),
            groups: Vec::new(),
        }
    }
}

/// An access key of a user, with the secret it signs with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AccessKey {
    pub id: String,
    pub secret: String,
    pub created_ns: u64,
    /// An inactive key (IAM's UpdateAccessKey) signs nothing until made active again.
    pub active: bool,
}

/// What an account's root or user is in its account.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InAccount {
    /// The account's id (`RGW` and 17 digits, as Ceph's gateway makes them).
    pub account: String,
    /// The root's account's name, or the user's name as given (IAM's UserName).
    pub name: String,
    /// IAM's Path of a user (`/`, `/a/b/`); `/` for the root.
    pub path: String,
    /// IAM's UserId (`AIDA…`); the account's id for the root.
    pub id: String,
    /// The account's root, which may do anything in its account.
    pub root: bool,
    /// The account's email address (the root's; empty for a user).
    pub email: String,
}

/// The document of policy `name` among `policies` (by name), if there is one.
fn named<'a>(policies: &'a [(String, String)], name: &str) -> Option<&'a str> {
    policies
        .iter()
        .find(|(given, _)| given == name)
        .map(|(_, document)| document.as_str())
}

/// The record name of an account's user `name`: names are unique in their account whatever
/// their case, as in IAM.
pub fn member_name(account: &str, name: &str) -> String {
    format!("{account}${}", name.to_lowercase())
}

impl User {
    /// The active key `id` of the user, if they have it.
    pub fn active_key(&self, id: &str) -> Option<&AccessKey> {
        self.keys.iter().find(|key| key.id == id && key.active)
    }

    /// The user's first key: the one `coffer user create` and `coffer account create` made.
    pub fn first_key(&self) -> Option<&AccessKey> {
        self.keys.first()
    }

    /// The document of the user's own policy `name`, if the user has one by that name.
    pub fn policy(&self, name: &str) -> Option<&str> {
        named(&self.policies, name)
    }
}

/// Temporary credentials of a user (STS's GetSessionToken): they act as the user, with the
/// user's policies as they are at each request, until `expires_ns`, and only with `token`.
/// A session of a role (STS's AssumeRole) acts with the role's policies instead, and owns
/// what it makes for the user who took the role on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub user: String,
    /// When the user was created: a session of a removed user names no user made since
    /// under the same name.
    pub user_created_ns: u64,
    pub secret_key: String,
    pub token: String,
    pub expires_ns: u64,
    pub role: Option<RoleTaken>,
}

/// The role a session acts as.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoleTaken {
    pub name: String,
    /// The role's id: a session of a removed role names no role made since under its name.
    pub id: String,
    /// The name the caller gave the session (STS's RoleSessionName).
    pub session_name: String,
    /// The session's own policy (AssumeRole's `Policy`), which bounds the role's.
    pub policy: Option<String>,
    /// The session's tags (AssumeRole's `Tags`, a web identity token's), in the order
    /// given; a key may come with several values.
    pub tags: Vec<(String, String)>,
}

/// A session as format 2 stored it: its role without tags.
#[derive(Deserialize)]
struct SessionV2 {
    user: String,
    user_created_ns: u64,
    secret_key: String,
    token: String,
    expires_ns: u64,
    role: Option<RoleTakenV2>,
}

#[derive(Deserialize)]
struct RoleTakenV2 {
    name: String,
    id: String,
    session_name: String,
    policy: Option<String>,
}

impl From<SessionV2> for Session {
    fn from(second: SessionV2) -> Session {
        Session {
            user: second.user,
            user_created_ns: second.user_created_ns,
            secret_key: second.secret_key,
            token: second.token,
            expires_ns: second.expires_ns,
            role: second.role.map(|role| RoleTaken {
                name: role.name,
                id: role.id,
                session_name: role.session_name,
                policy: role.policy,
                tags: Vec::new(),
            }),
        }
    }
}

/// A session as format 1 stored it, before roles.
#[derive(Deserialize)]
struct SessionV1 {
    user: String,
    user_created_ns: u64,
    secret_key: String,
    token: String,
    expires_ns: u64,
}

impl From<SessionV1> for Session {
    fn from(first: SessionV1) -> Session {
        Session {
            user: first.user,
            user_created_ns: first.user_created_ns,
            secret_key: first.secret_key,
            token: first.token,
            expires_ns: first.expires_ns,
            role: None,
        }
    }
}

/// An IAM role: who may take it on (its trust policy, IAM's AssumeRolePolicyDocument) and
/// what its sessions may do (its own policies, by name, in name order).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Role {
    pub name: String,
    /// `/`, or `/a/b/`: part of the role's ARN.
    pub path: String,
    /// IAM's RoleId (`AROA…`).
    pub id: String,
    pub created_ns: u64,
    pub trust: String,
    pub description: String,
    /// The longest session AssumeRole gives.
    pub max_session_seconds: u64,
    /// The role's tags, in the order given.
    pub tags: Vec<(String, String)>,
    pub policies: Vec<(String, String)>,
    /// The account the role is of (its id); none for the operator's users' roles.
    pub account: Option<String>,
    /// The managed policies attached to the role, by ARN, in the order attached.
    pub attached: Vec<String>,
}

/// A role as format 2 stored it, before managed policies.
#[derive(Deserialize)]
struct RoleV2 {
    name: String,
    path: String,
    id: String,
    created_ns: u64,
    trust: String,
    description: String,
    max_session_seconds: u64,
    tags: Vec<(String, String)>,
    policies: Vec<(String, String)>,
    account: Option<String>,
}

impl From<RoleV2> for Role {
    fn from(second: RoleV2) -> Role {
        Role {
            name: second.name,
            path: second.path,
            id: second.id,
            created_ns: second.created_ns,
            trust: second.trust,
            description: second.description,
            max_session_seconds: second.max_session_seconds,
            tags: second.tags,
            policies: second.policies,
            account: second.account,
            attached: Vec::new(),
        }
    }
}

/// An OpenID Connect identity provider an account trusts (IAM's OpenIDConnectProvider).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OidcProvider {
    /// The account's id.
    pub account: String,
    /// As given, scheme included (`https://issuer.example.com/realm`).
    pub url: String,
    /// The audiences (OAuth client ids) its tokens may name, in the order added.
    pub client_ids: Vec<String>,
    /// SHA-1 thumbprints, in hex, of the certificates its keys are served under.
    pub thumbprints: Vec<String>,
    pub created_ns: u64,
}

impl Record for OidcProvider {}

/// An IAM group of an account: its users act with its policies besides their own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// The name as given (IAM's GroupName); unique in the account whatever its case.
    pub name: String,
    /// `/`, or `/a/b/`: part of the group's ARN.
    pub path: String,
    /// IAM's GroupId (`AGPA…`), which names the group in its users' records.
    pub id: String,
    /// The account's id.
    pub account: String,
    pub created_ns: u64,
    /// The group's own (inline) policies, by name, in name order.
    pub policies: Vec<(String, String)>,
    /// The managed policies attached to the group, by ARN, in the order attached.
    pub attached: Vec<String>,
}

/// A role as format 1 stored it, before accounts.
#[derive(Deserialize)]
struct RoleV1 {
    name: String,
    path: String,
    id: String,
    created_ns: u64,
    trust: String,
    description: String,
    max_session_seconds: u64,
    tags: Vec<(String, String)>,
    policies: Vec<(String, String)>,
}

impl From<RoleV1> for RoleV2 {
    fn from(first: RoleV1) -> RoleV2 {
        RoleV2 {
            name: first.name,
            path: first.path,
            id: first.id,
            created_ns: first.created_ns,
            trust: first.trust,
            description: first.description,
            max_session_seconds: first.max_session_seconds,
            tags: first.tags,
            policies: first.policies,
            account: None,
        }
    }
}

/// The record name of role `name` of `account` (none: the operator's users'): an account's
/// roles are named as its users are ([`member_name`]).
pub fn role_record(account: Option<&str>, name: &str) -> String {
    match account {
        Some(account) => member_name(account, name),
        None => name.into(),
    }
}

impl Role {
    /// The role's record name ([`role_record`]).
    pub fn record(&self) -> String {
        role_record(self.account.as_deref(), &self.name)
    }

    /// The document of the role's own policy `name`, if it has one by that name.
    pub fn policy(&self, name: &str) -> Option<&str> {
        named(&self.policies, name)
    }
}

impl Group {
    /// The document of the group's own policy `name`, if it has one by that name.
    pub fn policy(&self, name: &str) -> Option<&str> {
        named(&self.policies, name)
    }
}

impl Session {
    /// Whether the session is over at `now_ns`: it lasts until `expires_ns`, excluded.
    pub fn is_expired(&self, now_ns: u64) -> bool {
        now_ns >= self.expires_ns
    }
}

/// A user as format 1 stored it, before policies.
#[derive(Deserialize)]
struct UserV1 {
    name: String,
    access_key: String,
    secret_key: String,
    created_ns: u64,
}

/// A user as format 2 stored it, before several keys and accounts.
#[derive(Deserialize)]
struct UserV2 {
    name: String,
    access_key: String,
    secret_key: String,
    created_ns: u64,
    policies: Vec<(String, String)>,
}

impl From<UserV1> for UserV2 {
    fn from(first: UserV1) -> UserV2 {
        UserV2 {
            name: first.name,
            access_key: first.access_key,
            secret_key: first.secret_key,
            created_ns: first.created_ns,
            policies: Vec::new(),
        }
    }
}

impl From<UserV2> for UserV3 {
    fn from(second: UserV2) -> UserV3 {
        UserV3 {
            name: second.name,
            keys: vec![AccessKey {
                id: second.access_key,
                secret: second.secret_key,
                created_ns: second.created_ns,
                active: true,
            }],
            created_ns: second.created_ns,
            policies: second.policies,
            account: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BucketInfo {
    pub owner: String,
    pub created_ns: u64,
}

/// One object of a bucket, as its index entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ObjectEntry {
    pub size: u64,
    /// The ETag without its quotes: the hex MD5 of the content for a single PUT, the MD5 of
    /// the parts' MD5s and their count for a multipart upload (as S3's).
    pub etag: String,
    pub mtime_ns: u64,
    pub content_type: Option<String>,
    /// User metadata (`x-amz-meta-*`), names without the prefix.
    pub metadata: Vec<(String, String)>,
    /// The content, in order: one segment for a PUT, one per part for a multipart upload.
    pub segments: Vec<Segment>,
    /// How the content is encrypted by the gateway, if it is.
    pub sse: Option<Sse>,
    pub headers: ContentHeaders,
    /// The multipart upload this entry completed, to answer a completion asked again.
    pub upload_id: Option<String>,
    /// Which version of its key this is; none for an object written while its bucket was
    /// never versioned (S3's "null" version).
    pub version: Option<VersionTag>,
    /// The object's tags, by key.
    pub tags: Vec<(String, String)>,
    /// The version's retention and legal hold.
    pub lock: Lock,
    /// The version's ACL; none for one written before ACLs were kept, which is its bucket
    /// owner's alone.
    pub acl: Option<Acl>,
    /// The checksum the writer asked for (CRC32, SHA-256, ...), beside the MD5.
    pub checksum: Option<Checksum>,
    /// Where the segments are kept when they are too many for the entry (a multipart
    /// upload of thousands of parts): `segments` is then empty as stored, and filled by
    /// `crate::data::with_segments` where the content is read or freed.
    pub listed: Option<Listed>,
}

impl ObjectEntry {
    /// The object's checksum and the value S3 shows of it ([`Checksum::shown`]), counting
    /// the parts of one whose digests its list of segments keeps.
    pub fn shown_checksum(&self) -> Option<(&Checksum, String)> {
        let checksum = self.checksum.as_ref()?;
        let parts = match &self.listed {
            Some(listed) if checksum.parts.is_empty() => listed.count as usize,
            _ => checksum.parts.len(),
        };
        Some((checksum, checksum.shown_of(parts)))
    }

    /// The bytes of a [`SegmentList`] of the entry's segments and its parts' digests, if
    /// they are too many to keep in the entry ([`SEGMENTS_INLINE_BYTES_MAX`]).
    pub fn segment_list(&self) -> Option<Vec<u8>> {
        let part_digests = self
            .checksum
            .as_ref()
            .map(|c| c.parts.clone())
            .unwrap_or_default();
        assert!(
            part_digests.is_empty() || part_digests.len() == self.segments.len(),
            "a multipart object's checksum has a digest for each part, and each part a segment"
        );
        let list = encode(&SegmentList {
            segments: self.segments.clone(),
            part_digests,
        });
        (list.len() > SEGMENTS_INLINE_BYTES_MAX).then_some(list)
    }

    /// Leaves the entry naming `listed`, which keeps its segments and parts' digests
    /// ([`ObjectEntry::segment_list`]) in its stead.
    pub fn keep_listed(&mut self, listed: Listed) {
        assert_eq!(listed.count as usize, self.segments.len());
        self.segments.clear();
        if let Some(checksum) = &mut self.checksum {
            checksum.parts.clear();
        }
        self.listed = Some(listed);
    }

    /// Fills in the segments, and the parts' digests, of an entry that keeps them out of
    /// line, from `bytes` read of its list; refuses bytes that are not the list it names.
    pub fn fill_listed(&mut self, bytes: &[u8]) -> Result<(), String> {
        let listed = self
            .listed
            .as_ref()
            .expect("the entry keeps its segments in a list");
        if bytes.len() as u64 != listed.bytes {
            return Err(format!(
                "{} bytes, the entry says {}",
                bytes.len(),
                listed.bytes
            ));
        }
        let list: SegmentList = decode(bytes)?;
        if list.segments.len() != listed.count as usize {
            return Err(format!(
                "{} segments, the entry says {}",
                list.segments.len(),
                listed.count
            ));
        }
        if !list.part_digests.is_empty() {
            let digests = list.part_digests.len();
            match &mut self.checksum {
                Some(checksum) if checksum.parts.is_empty() && digests == list.segments.len() => {
                    checksum.parts = list.part_digests;
                }
                _ => {
                    return Err(format!(
                        "{digests} parts' digests for {} segments, of an entry whose checksum \
                         does not keep them there",
                        list.segments.len()
                    ))
                }
            }
        }
        self.segments = list.segments;
        Ok(())
    }
}

/// An object's segments kept out of its index entry, which must fit one request to the
/// cluster with others beside it: as a [`SegmentList`] in stripe 0 of a data instance of
/// their own, which is named and freed as a segment's instance is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Listed {
    pub instance: String,
    /// How many segments, and the bytes of the list: to read it whole and check it.
    pub count: u32,
    pub bytes: u64,
}

impl Listed {
    /// The list's own content, as a plain segment of one stripe, to hold and free as one.
    pub fn segment(&self) -> Segment {
        Segment {
            instance: self.instance.clone(),
            size: self.bytes,
            stripe_bytes: self.bytes.max(1),
            sealed: None,
        }
    }
}

/// The segments of an object whose entry lists them out of line ([`Listed`]), with the
/// digests of its parts' checksums, as many (none if its parts have none): at 32 bytes a
/// part, they would otherwise fill the entry as the segments would.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentList {
    pub segments: Vec<Segment>,
    pub part_digests: Vec<Vec<u8>>,
}

/// Format 2 added the parts' digests, which a list of format 1 leaves in its entry.
impl Record for SegmentList {
    const FORMAT: u8 = 2;

    fn earlier(format: u8, bytes: &[u8]) -> Result<Self, String> {
        match format {
            1 => Ok(SegmentList {
                segments: read(bytes)?,
                part_digests: Vec::new(),
            }),
            _ => Err(format!("segment list format {format} is not known here")),
        }
    }
}

/// The most bytes an entry's segments take in the entry itself; more go to a
/// [`SegmentList`]. About 500 parts sealed by a KMS key, 1,500 plain: an index entry stays
/// a small fraction of a request's 1 MiB of metadata, twice over in a versioned bucket
/// (the key's copy and the version's).
pub const SEGMENTS_INLINE_BYTES_MAX: usize = 64 << 10;

/// Format 2 added the content headers and the upload id, format 3 the version and tags,
/// format 4 the lock, format 5 the ACL, format 6 the checksum, format 7 the segments kept
/// out of line.
impl Record for ObjectEntry {
    const FORMAT: u8 = 7;

    fn earlier(format: u8, bytes: &[u8]) -> Result<Self, String> {
        let fifth = match format {
            1 => EntryV4::from(EntryV3::from(EntryV2::from(read::<EntryV1>(bytes)?))).into(),
            2 => EntryV4::from(EntryV3::from(read::<EntryV2>(bytes)?)).into(),
            3 => EntryV4::from(read::<EntryV3>(bytes)?).into(),
            4 => read::<EntryV4>(bytes)?.into(),
            5 => read::<EntryV5>(bytes)?,
            6 => return Ok(read::<EntryV6>(bytes)?.into()),
            _ => return Err(format!("object entry format {format} is not known here")),
        };
        Ok(fifth.into())
    }
}

fn read<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
    postcard::from_bytes(bytes).map_err(|e| e.to_string())
}

/// An object entry as format 1 stored it.
#[derive(Deserialize)]
struct EntryV1 {
    size: u64,
    etag: String,
    mtime_ns: u64,
    content_type: Option<String>,
    metadata: Vec<(String, String)>,
    segments: Vec<Segment>,
    sse: Option<Sse>,
}

/// An object entry as format 2 stored it: format 1's, then these.
#[derive(Deserialize)]
struct EntryV2 {
    first: EntryV1,
    headers: ContentHeaders,
    upload_id: Option<String>,
}

/// An object entry as format 3 stored it (and format 1 of [`Version`] inside it): format
/// 2's, then these.
#[derive(Deserialize)]
struct EntryV3 {
    second: EntryV2,
    version: Option<VersionTag>,
    tags: Vec<(String, String)>,
}

impl From<EntryV1> for EntryV2 {
    fn from(first: EntryV1) -> EntryV2 {
        EntryV2 {
            first,
            headers: ContentHeaders::default(),
            upload_id: None,
        }
    }
}

impl From<EntryV2> for EntryV3 {
    fn from(second: EntryV2) -> EntryV3 {
        EntryV3 {
            second,
            version: None,
            tags: Vec::new(),
        }
    }
}

/// An object entry as format 4 stored it (and format 2 of [`Version`] inside it): format
/// 3's, then the lock.
#[derive(Deserialize)]
struct EntryV4 {
    third: EntryV3,
    lock: Lock,
}

/// An object entry as format 5 stored it (and format 3 of [`Version`] inside it): format
/// 4's, then the ACL.
#[derive(Deserialize)]
struct EntryV5 {
    fourth: EntryV4,
    acl: Option<Acl>,
}

/// An object entry as format 6 stored it (and format 4 of [`Version`] inside it): format
/// 5's, then the checksum.
#[derive(Deserialize)]
struct EntryV6 {
    fifth: EntryV5,
    checksum: Option<Checksum>,
}

impl From<EntryV6> for ObjectEntry {
    fn from(sixth: EntryV6) -> ObjectEntry {
        ObjectEntry {
            checksum: sixth.checksum,
            ..sixth.fifth.into()
        }
    }
}

impl From<EntryV3> for ObjectEntry {
    fn from(third: EntryV3) -> ObjectEntry {
        EntryV4::from(third).into()
    }
}

impl From<EntryV4> for ObjectEntry {
    fn from(fourth: EntryV4) -> ObjectEntry {
        EntryV5::from(fourth).into()
    }
}

impl From<EntryV4> for EntryV5 {
    fn from(fourth: EntryV4) -> EntryV5 {
        EntryV5 { fourth, acl: None }
    }
}

impl From<EntryV3> for EntryV4 {
    fn from(third: EntryV3) -> EntryV4 {
        EntryV4 {
            third,
            lock: Lock::default(),
        }
    }
}

impl From<EntryV5> for ObjectEntry {
    fn from(fifth: EntryV5) -> ObjectEntry {
        let fourth = fifth.fourth;
        let third = fourth.third;
        let EntryV2 {
            first,
            headers,
            upload_id,
        } = third.second;
        ObjectEntry {
            size: first.size,
            etag: first.etag,
            mtime_ns: first.mtime_ns,
            content_type: first.content_type,
            metadata: first.metadata,
            segments: first.segments,
            sse: first.sse,
            headers,
            upload_id,
            version: third.version,
            tags: third.tags,
            lock: fourth.lock,
            acl: fifth.acl,
            checksum: None,
            listed: None,
        }
    }
}

/// One version of an object key, and whether S3 names it "null" (written while the bucket's
/// versioning was suspended, or before it was first enabled).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct VersionTag {
    pub order: Order,
    pub null: bool,
}

/// One version of an object key, in the bucket's index.
// Nearly every version is an object: boxing it would add an allocation and save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Version {
    Object(ObjectEntry),
    /// A delete marker: the key reads as deleted while this is its newest version.
    Marker {
        mtime_ns: u64,
        tag: VersionTag,
    },
}

impl Version {
    pub fn tag(&self) -> Option<VersionTag> {
        match self {
            Version::Object(entry) => entry.version,
            Version::Marker { tag, .. } => Some(*tag),
        }
    }

    pub fn mtime_ns(&self) -> u64 {
        match self {
            Version::Object(entry) => entry.mtime_ns,
            Version::Marker { mtime_ns, .. } => *mtime_ns,
        }
    }
}

/// The versions of one object key, summed up. Every change of the key's versions rewrites
/// it (`changes` counts them), so a change that read it commits only if none came between.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Head {
    pub changes: u64,
    /// The newest version: the current one.
    pub newest: Order,
    /// The version S3 names "null", if there is one.
    pub null: Option<Order>,
}

/// The representation headers an object was written with, returned on GET and HEAD as
/// given (S3 keeps them as it keeps Content-Type).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContentHeaders {
    pub cache_control: Option<String>,
    pub content_disposition: Option<String>,
    pub content_encoding: Option<String>,
    pub content_language: Option<String>,
    /// Seconds since the epoch: HTTP dates carry no finer time.
    pub expires: Option<i64>,
}

/// Server-side encryption of an object (the segments hold each data key).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Sse {
    /// SSE-S3: data keys from the gateway's own KMS key.
    S3,
    /// SSE-KMS: data keys from the named KMS key.
    Kms { key: String },
    /// SSE-C: data keys wrapped by the customer's key, which is never stored; `check` is
    /// SHA-256 of a domain, `salt` and the key, to tell a wrong key apart.
    Customer { salt: [u8; 16], check: [u8; 32] },
}

/// Content written as one instance of stripes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    pub instance: String,
    /// Bytes of content (before sealing).
    pub size: u64,
    /// Bytes stored per stripe. For sealed content it also tells the layout apart:
    /// `sse::SEALED_STRIPE_BYTES` for 64 KiB chunks with inline tags, `STRIPE_BYTES` for
    /// 4 KiB chunks with their tags in the chunk records (`sealed_in_records`).
    pub stripe_bytes: u64,
    /// The data key the content is sealed with, wrapped; none for plain content.
    pub sealed: Option<SealedKey>,
}

/// A segment's data key, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SealedKey {
    /// Wrapped by `version` of KMS key `key`.
    Kms {
        key: String,
        version: u32,
        wrapped: Vec<u8>,
    },
    /// Wrapped by the customer's key (SSE-C).
    Customer { wrapped: Vec<u8> },
}

impl Segment {
    /// Bytes stored: the content, plus a tag per chunk if sealed.
    pub fn stored_bytes(&self) -> u64 {
        match self.sealed {
            Some(_) if !self.sealed_in_records() => crate::sse::sealed_len(self.size),
            _ => self.size,
        }
    }

    /// Whether the content is sealed in 4 KiB chunks whose tags are the stripes' chunk
    /// records (written to a pool sealed at the edge) rather than inline.
    pub fn sealed_in_records(&self) -> bool {
        self.sealed.is_some() && self.stripe_bytes == STRIPE_BYTES
    }

    pub fn stripes(&self) -> u64 {
        self.stored_bytes().div_ceil(self.stripe_bytes)
    }
}

/// A multipart upload in progress, in its bucket's uploads omap.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UploadRecord {
    pub initiator: String,
    pub initiated_ns: u64,
    pub content_type: Option<String>,
    pub metadata: Vec<(String, String)>,
    pub sse: Option<Sse>,
    pub headers: ContentHeaders,
    /// The tags the object gets, by key.
    pub tags: Vec<(String, String)>,
    /// The lock the upload asked for (the bucket's default retention is added when it
    /// completes).
    pub lock: Lock,
    /// The ACL the object gets.
    pub acl: Option<Acl>,
    /// The checksum its parts are given, and what the object's covers.
    pub checksum: Option<(checksum::Algorithm, checksum::Kind)>,
}

/// Format 2 added the content headers, format 3 the tags, format 4 the lock, format 5 the
/// ACL, format 6 the checksum.
impl Record for UploadRecord {
    const FORMAT: u8 = 6;

    fn earlier(format: u8, bytes: &[u8]) -> Result<Self, String> {
        /// An upload as format 1 stored it.
        #[derive(Deserialize)]
        struct First {
            initiator: String,
            initiated_ns: u64,
            content_type: Option<String>,
            metadata: Vec<(String, String)>,
            sse: Option<Sse>,
        }
        /// An upload as format 2 stored it: format 1's, then the headers.
        #[derive(Deserialize)]
        struct Second {
            first: First,
            headers: ContentHeaders,
        }
        /// An upload as format 3 stored it: format 2's, then the tags.
        #[derive(Deserialize)]
        struct Third {
            second: Second,
            tags: Vec<(String, String)>,
        }
        /// An upload as format 4 stored it: format 3's, then the lock.
        #[derive(Deserialize)]
        struct Fourth {
            third: Third,
            lock: Lock,
        }
        /// An upload as format 5 stored it: format 4's, then the ACL.
        #[derive(Deserialize)]
        struct Fifth {
            fourth: Fourth,
            acl: Option<Acl>,
        }
        let (first, headers, tags, lock, acl) = match format {
            1 => (
                read::<First>(bytes)?,
                ContentHeaders::default(),
                Vec::new(),
                Lock::default(),
                None,
            ),
            2 => {
                let second: Second = read(bytes)?;
                (
                    second.first,
                    second.headers,
                    Vec::new(),
                    Lock::default(),
                    None,
                )
            }
            3 => {
                let third: Third = read(bytes)?;
                (
                    third.second.first,
                    third.second.headers,
                    third.tags,
                    Lock::default(),
                    None,
                )
            }
            4 => {
                let Fourth { third, lock } = read(bytes)?;
                (
                    third.second.first,
                    third.second.headers,
                    third.tags,
                    lock,
                    None,
                )
            }
            5 => {
                let Fifth { fourth, acl } = read(bytes)?;
                let third = fourth.third;
                let (first, headers) = (third.second.first, third.second.headers);
                (first, headers, third.tags, fourth.lock, acl)
            }
            _ => return Err(format!("upload record format {format} is not known here")),
        };
        Ok(UploadRecord {
            initiator: first.initiator,
            initiated_ns: first.initiated_ns,
            content_type: first.content_type,
            metadata: first.metadata,
            sse: first.sse,
            headers,
            tags,
            lock,
            acl,
            checksum: None,
        })
    }
}

/// One part of a multipart upload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartRecord {
    pub segment: Segment,
    /// The part's ETag, as bytes (its content's MD5 unless encrypted with SSE-C or
    /// SSE-KMS, whose ETags reveal nothing of the content).
    pub md5: [u8; 16],
    pub mtime_ns: u64,
    /// The digest of the upload's checksum algorithm, if it has one.
    pub checksum: Option<Vec<u8>>,
}

/// Format 2 added the checksum.
impl Record for PartRecord {
    const FORMAT: u8 = 2;

    fn earlier(format: u8, bytes: &[u8]) -> Result<Self, String> {
        /// A part as format 1 stored it.
        #[derive(Deserialize)]
        struct First {
            segment: Segment,
            md5: [u8; 16],
            mtime_ns: u64,
        }
        match format {
            1 => {
                let First {
                    segment,
                    md5,
                    mtime_ns,
                } = read(bytes)?;
                Ok(PartRecord {
                    segment,
                    md5,
                    mtime_ns,
                    checksum: None,
                })
            }
            _ => Err(format!("part record format {format} is not known here")),
        }
    }
}

/// A fresh upload instance name: 128 random bits in hex.
pub fn new_instance() -> String {
    let bits: u128 = rand::random();
    format!("{bits:032x}")
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The exclusive lower bound of omap keys that start with `prefix`: every key at or after
/// `prefix` is greater than it. (Keys are at most [`KEY_BYTES_MAX`] bytes, so `0xff` bytes
/// past that length sort after every key that shares the leading bytes.)
pub fn before(prefix: &[u8]) -> Option<Vec<u8>> {
    let (&last, head) = prefix.split_last()?;
    let mut bound = head.to_vec();
    if last > 0 {
        bound.push(last - 1);
        bound.extend(std::iter::repeat_n(0xff, KEY_BYTES_MAX + 1));
    }
    Some(bound)
}

/// The exclusive lower bound that skips every key starting with `prefix`.
pub fn past(prefix: &[u8]) -> Vec<u8> {
    let mut bound = prefix.to_vec();
    bound.extend(std::iter::repeat_n(0xff, KEY_BYTES_MAX + 1));
    bound
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_lasts_until_its_expiry_and_reads_back() {
        let session = Session {
            user: "ann".into(),
            user_created_ns: 3,
            secret_key: "s".into(),
            token: "t".into(),
            expires_ns: 1_000,
            role: Some(RoleTaken {
                name: "r".into(),
                id: "AROA1".into(),
                session_name: "n".into(),
                policy: Some("{}".into()),
                tags: vec![
                    ("team".into(), "red".into()),
                    ("team".into(), "blue".into()),
                ],
            }),
        };
        assert!(!session.is_expired(999));
        assert!(session.is_expired(1_000));
        assert_eq!(decode::<Session>(&encode(&session)), Ok(session));
    }

    #[test]
    fn a_session_of_the_first_format_reads_as_its_user_s() {
        #[derive(Serialize)]
        struct First<'a>(&'a str, u64, &'a str, &'a str, u64);
        let mut bytes = vec![1];
        bytes.extend(postcard::to_allocvec(&First("ann", 3, "s", "t", 9)).expect("encoded"));
        let session: Session = decode(&bytes).expect("decoded");
        assert_eq!(
            (session.user.as_str(), session.expires_ns, session.role),
            ("ann", 9, None)
        );
    }

    #[test]
    fn a_role_s_session_of_the_second_format_reads_without_tags() {
        #[derive(Serialize)]
        struct Taken<'a>(&'a str, &'a str, &'a str, Option<&'a str>);
        #[derive(Serialize)]
        struct Second<'a>(&'a str, u64, &'a str, &'a str, u64, Option<Taken<'a>>);
        let taken = Taken("r", "AROA1", "n", None);
        let mut bytes = vec![2];
        let second = Second("ann", 3, "s", "t", 9, Some(taken));
        bytes.extend(postcard::to_allocvec(&second).expect("encoded"));
        let session: Session = decode(&bytes).expect("decoded");
        let role = session.role.expect("a role");
        assert_eq!((role.session_name.as_str(), role.tags), ("n", Vec::new()));
    }

    #[test]
    fn users_of_earlier_formats_read_with_their_one_key() {
        #[derive(Serialize)]
        struct First<'a>(&'a str, &'a str, &'a str, u64);
        let mut bytes = vec![1];
        bytes.extend(postcard::to_allocvec(&First("ann", "CKA", "secret", 5)).expect("encoded"));
        let user: User = decode(&bytes).expect("decoded");
        let want = User {
            name: "ann".into(),
            keys: vec![AccessKey {
                id: "CKA".into(),
                secret: "secret".into(),
                created_ns: 5,
                active: true,
            }],
            created_ns: 5,
            policies: Vec::new(),
            account: None,
            attached: Vec::new(),
            groups: Vec::new(),
        };
        assert_eq!(user, want);
        #[derive(Serialize)]
        struct Second<'a>(&'a str, &'a str, &'a str, u64, Vec<(&'a str, &'a str)>);
        let mut bytes = vec![2];
        let second = Second("ann", "CKA", "secret", 5, vec![("all", "{}")]);
        bytes.extend(postcard::to_allocvec(&second).expect("encoded"));
        let with_one = User {
            policies: vec![("all".into(), "{}".into())],
            ..want
        };
        assert_eq!(decode::<User>(&bytes), Ok(with_one.clone()));
        #[derive(Serialize)]
        struct Third<'a>(
            &'a str,
            Vec<AccessKey>,
            u64,
            Vec<(&'a str, &'a str)>,
            Option<InAccount>,
        );
        let third = Third("ann", with_one.keys.clone(), 5, vec![("all", "{}")], None);
        let mut bytes = vec![3];
        bytes.extend(postcard::to_allocvec(&third).expect("encoded"));
        assert_eq!(decode::<User>(&bytes), Ok(with_one.clone()));
        let grouped = User {
            attached: vec!["arn:aws:iam::aws:policy/AmazonS3FullAccess".into()],
            groups: vec!["AGPA1".into()],
            ..with_one
        };
        assert_eq!(decode::<User>(&encode(&grouped)), Ok(grouped));
    }

    #[test]
    fn a_role_of_the_first_format_reads_as_the_operator_s() {
        #[derive(Serialize)]
        struct First<'a>(
            &'a str,
            &'a str,
            &'a str,
            u64,
            &'a str,
            &'a str,
            u64,
            Vec<(&'a str, &'a str)>,
            Vec<(&'a str, &'a str)>,
        );
        let first = First(
            "r",
            "/",
            "AROA",
            1,
            "{}",
            "d",
            3600,
            vec![],
            vec![("p", "{}")],
        );
        let mut bytes = vec![1];
        bytes.extend(postcard::to_allocvec(&first).expect("encoded"));
        let role: Role = decode(&bytes).expect("decoded");
        assert_eq!((role.record(), role.account), ("r".to_owned(), None));
        assert!(role.attached.is_empty());
        let theirs = Role {
            account: Some("RGW00000000000000001".into()),
            name: "Mover".into(),
            attached: vec!["arn:aws:iam::aws:policy/IAMReadOnlyAccess".into()],
            ..role
        };
        assert_eq!(theirs.record(), "RGW00000000000000001$mover");
        assert_eq!(decode::<Role>(&encode(&theirs)), Ok(theirs));
    }

    #[test]
    fn records_round_trip_and_unknown_formats_are_refused() {
        let entry = ObjectEntry {
            size: 5,
            etag: "ab".into(),
            mtime_ns: 7,
            content_type: Some("text/plain".into()),
            metadata: vec![("k".into(), "v".into())],
            segments: vec![Segment {
                instance: new_instance(),
                size: 5,
                stripe_bytes: STRIPE_BYTES,
                sealed: None,
            }],
            sse: None,
            headers: ContentHeaders {
                cache_control: Some("no-cache".into()),
                expires: Some(1_800_000_000),
                ..Default::default()
            },
            upload_id: Some("0123".into()),
            version: Some(VersionTag {
                order: [7; 16],
                null: false,
            }),
            tags: vec![("team".into(), "storage".into())],
            lock: Lock {
                retention: Some(crate::lock::Retention {
                    mode: crate::lock::Mode::Compliance,
                    until_ns: 9,
                }),
                legal_hold: Some(true),
            },
            acl: Some(crate::acl::Acl::canned("public-read", "bo", "ana").expect("canned")),
            checksum: Some(Checksum::whole(
                checksum::Algorithm::Crc32,
                vec![1, 2, 3, 4],
            )),
            listed: None,
        };
        let bytes = encode(&entry);
        assert_eq!(bytes[0], 7);
        assert_eq!(decode::<ObjectEntry>(&bytes), Ok(entry.clone()));
        let mut other = bytes.clone();
        other[0] = 9;
        assert!(decode::<ObjectEntry>(&other).is_err());
        assert!(decode::<ObjectEntry>(&[]).is_err());

        // An entry written before the content headers (format 1) reads without them.
        let mut first = vec![1];
        first.extend(
            postcard::to_allocvec(&(
                entry.size,
                &entry.etag,
                entry.mtime_ns,
                &entry.content_type,
                &entry.metadata,
                &entry.segments,
                &entry.sse,
            ))
            .expect("serializes"),
        );
        let read = decode::<ObjectEntry>(&first).expect("format 1 reads");
        assert_eq!(read.headers, ContentHeaders::default());
        assert_eq!(read.upload_id, None);
        assert_eq!(read.version, None);
        assert_eq!(read.segments, entry.segments);
        assert_eq!(read.metadata, entry.metadata);

        // And one written before versions (format 2) reads with its headers, unversioned.
        let mut second = vec![2];
        second.extend_from_slice(&first[1..]);
        second.extend(
            postcard::to_allocvec(&(&entry.headers, &entry.upload_id)).expect("serializes"),
        );
        let read = decode::<ObjectEntry>(&second).expect("format 2 reads");
        assert_eq!(read.headers, entry.headers);
        assert_eq!(read.upload_id, entry.upload_id);
        assert_eq!(read.version, None);
        assert!(read.tags.is_empty());

        // And one written before object lock (format 3) reads with its version and tags,
        // unlocked.
        let mut third = vec![3];
        third.extend_from_slice(&second[1..]);
        third.extend(postcard::to_allocvec(&(&entry.version, &entry.tags)).expect("serializes"));
        let read = decode::<ObjectEntry>(&third).expect("format 3 reads");
        assert_eq!(read.version, entry.version);
        assert_eq!(read.tags, entry.tags);
        assert!(read.lock.is_none());

        // Versions of format 1 hold such an entry (variant 0), or a marker (variant 1).
        let mut version = vec![1, 0];
        version.extend_from_slice(&third[1..]);
        assert_eq!(decode::<Version>(&version), Ok(Version::Object(read)));
        let tag = entry.version.expect("a tag");
        let mut marker = vec![1, 1];
        marker.extend(postcard::to_allocvec(&(7u64, tag)).expect("serializes"));
        assert_eq!(
            decode::<Version>(&marker),
            Ok(Version::Marker { mtime_ns: 7, tag })
        );
        let current = Version::Object(entry.clone());
        assert_eq!(decode::<Version>(&encode(&current)), Ok(current));

        // An entry written before ACLs (format 4) reads with its lock, and no ACL; so does
        // a version of format 2 holding one.
        let mut fourth = vec![4];
        fourth.extend_from_slice(&third[1..]);
        fourth.extend(postcard::to_allocvec(&entry.lock).expect("serializes"));
        let read = decode::<ObjectEntry>(&fourth).expect("format 4 reads");
        assert_eq!(
            read,
            ObjectEntry {
                acl: None,
                checksum: None,
                ..entry.clone()
            }
        );
        let mut version = vec![2, 0];
        version.extend_from_slice(&fourth[1..]);
        assert_eq!(decode::<Version>(&version), Ok(Version::Object(read)));

        // An entry written before checksums (format 5) reads with its ACL, and no checksum;
        // so does a version of format 3 holding one.
        let mut fifth = vec![5];
        fifth.extend_from_slice(&fourth[1..]);
        fifth.extend(postcard::to_allocvec(&entry.acl).expect("serializes"));
        let read = decode::<ObjectEntry>(&fifth).expect("format 5 reads");
        assert_eq!(
            read,
            ObjectEntry {
                checksum: None,
                ..entry.clone()
            }
        );
        let mut version = vec![3, 0];
        version.extend_from_slice(&fifth[1..]);
        assert_eq!(decode::<Version>(&version), Ok(Version::Object(read)));

        // An entry written before segments out of line (format 6) reads with its checksum,
        // its segments in it; so does a version of format 4 holding one.
        let mut sixth = vec![6];
        sixth.extend_from_slice(&fifth[1..]);
        sixth.extend(postcard::to_allocvec(&entry.checksum).expect("serializes"));
        assert_eq!(decode::<ObjectEntry>(&sixth), Ok(entry.clone()));
        let mut version = vec![4, 0];
        version.extend_from_slice(&sixth[1..]);
        assert_eq!(
            decode::<Version>(&version),
            Ok(Version::Object(entry.clone()))
        );
        let listed = ObjectEntry {
            segments: Vec::new(),
            listed: Some(Listed {
                instance: new_instance(),
                count: 10_000,
                bytes: 1 << 20,
            }),
            ..entry.clone()
        };
        assert_eq!(decode::<ObjectEntry>(&encode(&listed)), Ok(listed.clone()));
        let listed = Version::Object(listed);
        assert_eq!(decode::<Version>(&encode(&listed)), Ok(listed));

        // A part written before checksums (format 1) reads with none.
        let part = PartRecord {
            segment: entry.segments[0].clone(),
            md5: [3; 16],
            mtime_ns: 11,
            checksum: None,
        };
        let mut first_part = vec![1];
        first_part.extend(
            postcard::to_allocvec(&(&part.segment, part.md5, part.mtime_ns)).expect("serializes"),
        );
        assert_eq!(decode::<PartRecord>(&first_part), Ok(part.clone()));
        let checked = PartRecord {
            checksum: Some(vec![9; 4]),
            ..part
        };
        assert_eq!(decode::<PartRecord>(&encode(&checked)), Ok(checked));

        // An upload record of format 2 reads with its headers and no tags.
        let upload = UploadRecord {
            initiator: "ana".into(),
            initiated_ns: 5,
            content_type: None,
            metadata: Vec::new(),
            sse: None,
            headers: entry.headers.clone(),
            tags: Vec::new(),
            lock: Lock::default(),
            acl: None,
            checksum: None,
        };
        let mut second = vec![2];
        second.extend(
            postcard::to_allocvec(&(
                &upload.initiator,
                upload.initiated_ns,
                &upload.content_type,
                &upload.metadata,
                &upload.sse,
                &upload.headers,
            ))
            .expect("serializes"),
        );
        assert_eq!(decode::<UploadRecord>(&second), Ok(upload.clone()));
        // And one of format 3 with its tags, unlocked.
        let tags = vec![("a".to_string(), "1".to_string())];
        let mut third = second.clone();
        third[0] = 3;
        third.extend(postcard::to_allocvec(&tags).expect("serializes"));
        assert_eq!(
            decode::<UploadRecord>(&third),
            Ok(UploadRecord {
                tags: tags.clone(),
                ..upload.clone()
            })
        );
        // And one of format 4 with its lock, and no ACL.
        let mut fourth = third.clone();
        fourth[0] = 4;
        fourth.extend(postcard::to_allocvec(&entry.lock).expect("serializes"));
        assert_eq!(
            decode::<UploadRecord>(&fourth),
            Ok(UploadRecord {
                tags: tags.clone(),
                lock: entry.lock,
                ..upload.clone()
            })
        );
        // And one of format 5 with its ACL, and no checksum.
        let mut fifth = fourth.clone();
        fifth[0] = 5;
        fifth.extend(postcard::to_allocvec(&entry.acl).expect("serializes"));
        let read = UploadRecord {
            tags,
            lock: entry.lock,
            acl: entry.acl.clone(),
            ..upload
        };
        assert_eq!(decode::<UploadRecord>(&fifth), Ok(read.clone()));
        let checked = UploadRecord {
            checksum: Some((checksum::Algorithm::Sha256, checksum::Kind::Composite)),
            ..read
        };
        assert_eq!(decode::<UploadRecord>(&encode(&checked)), Ok(checked));
    }

    /// An entry of `parts` multipart parts, each with a SHA-256 digest.
    fn multipart_entry(parts: usize) -> ObjectEntry {
        let segments: Vec<Segment> = (0..parts)
            .map(|_| Segment {
                instance: new_instance(),
                size: 5 << 20,
                stripe_bytes: STRIPE_BYTES,
                sealed: None,
            })
            .collect();
        let digests: Vec<(Vec<u8>, u64)> =
            (0..parts).map(|n| (vec![n as u8; 32], 5 << 20)).collect();
        ObjectEntry {
            size: segments.iter().map(|s| s.size).sum(),
            etag: format!("ab-{parts}"),
            mtime_ns: 7,
            content_type: None,
            metadata: Vec::new(),
            segments,
            sse: None,
            headers: ContentHeaders::default(),
            upload_id: Some("0123".into()),
            version: None,
            tags: Vec::new(),
            lock: Lock::default(),
            acl: None,
            checksum: Some(Checksum::of_parts(
                checksum::Algorithm::Sha256,
                checksum::Kind::Composite,
                &digests,
            )),
            listed: None,
        }
    }

    #[test]
    fn an_entry_of_many_parts_keeps_them_in_a_list_that_must_be_its_own() {
        let few = multipart_entry(3);
        assert_eq!(few.segment_list(), None, "three parts stay in the entry");

        let whole = multipart_entry(2_000);
        let shown = whole.shown_checksum().map(|(_, shown)| shown);
        assert!(shown.as_deref().is_some_and(|s| s.ends_with("-2000")));
        let list = whole.segment_list().expect("2,000 parts go to a list");
        let listed = Listed {
            instance: new_instance(),
            count: 2_000,
            bytes: list.len() as u64,
        };
        let mut stored = whole.clone();
        stored.keep_listed(listed.clone());
        assert!(stored.segments.is_empty());
        assert!(stored.checksum.as_ref().is_some_and(|c| c.parts.is_empty()));
        assert!(
            encode(&stored).len() < 1_000,
            "the digests left the entry too"
        );
        assert_eq!(stored.shown_checksum().map(|(_, s)| s), shown);
        let mut read = stored.clone();
        assert_eq!(read.fill_listed(&list), Ok(()));
        assert_eq!(
            read,
            ObjectEntry {
                listed: Some(listed.clone()),
                ..whole.clone()
            }
        );

        // Bytes that are not the list the entry names are refused, and fill in nothing.
        let refused = |bytes: &[u8], entry: &ObjectEntry| {
            let mut entry = entry.clone();
            let why = entry.fill_listed(bytes).expect_err("refused");
            assert!(entry.segments.is_empty(), "{why}: nothing filled in");
            why
        };
        assert!(refused(&list[..list.len() - 1], &stored).contains("bytes, the entry says"));
        let mut flipped = list.clone();
        flipped[0] ^= 0xff;
        refused(&flipped, &stored);
        let mut fewer = stored.clone();
        fewer.listed.as_mut().expect("listed").count = 1_999;
        assert!(refused(&list, &fewer).contains("2000 segments, the entry says 1999"));
        let mut unchecked = stored.clone();
        unchecked.checksum = None;
        assert!(refused(&list, &unchecked).contains("digests"));

        // A list of the first format holds segments only; the digests stayed in line.
        let mut first = vec![1];
        first.extend(postcard::to_allocvec(&whole.segments).expect("serializes"));
        let mut inline = whole.clone();
        inline.segments.clear();
        inline.listed = Some(Listed {
            bytes: first.len() as u64,
            ..listed
        });
        let mut read = inline.clone();
        assert_eq!(read.fill_listed(&first), Ok(()));
        assert_eq!(read.segments, whole.segments);
        assert_eq!(read.checksum, whole.checksum);
    }

    #[test]
    fn index_keys_parse_back_and_versions_sort_by_key_then_age() {
        let newer = [0x10; 16];
        let mut older = [0x10; 16];
        older[15] = 0x11;
        let head = head_key("a/b");
        let version = version_key("a/b", &newer);
        assert_eq!(parse_index_key(&head), IndexKey::Head(b"a/b"));
        assert_eq!(parse_index_key(&version), IndexKey::Version(b"a/b", newer));
        assert_eq!(parse_index_key(b"a/b"), IndexKey::Object(b"a/b"));
        assert_eq!(parse_index_key(&upload_key("a", "1")), IndexKey::Upload);
        // An order that ends in zeros still parses as a version.
        let zeros = version_key("k", &[0; 16]);
        assert_eq!(parse_index_key(&zeros), IndexKey::Version(b"k", [0; 16]));
        let mut sorted = vec![
            version_key("a/b", &older),
            version_key("a", &older),
            version,
            head_key("a"),
            head,
            version_key("a/", &newer),
        ];
        sorted.sort();
        assert_eq!(
            sorted,
            vec![
                head_key("a"),
                version_key("a", &older),
                version_key("a/", &newer),
                head_key("a/b"),
                version_key("a/b", &newer),
                version_key("a/b", &older),
            ]
        );
        assert!(head_key("zzz") < upload_key("a", "1"));
        // After every object key, the largest character's included.
        assert!("\u{10ffff}".as_bytes() < &head_key("")[..]);
    }

    #[test]
    fn bounds_bracket_the_keys_of_a_prefix() {
        let keys: Vec<&[u8]> = vec![b"a", b"ab", b"abb\xff\xff", b"abc", b"abc/d", b"abd", b"b"];
        let lower = before(b"abc").expect("a bound");
        let from: Vec<&[u8]> = keys.iter().copied().filter(|k| *k > &lower[..]).collect();
        assert_eq!(from, vec![&b"abc"[..], b"abc/d", b"abd", b"b"]);
        let upper = past(b"abc");
        let after: Vec<&[u8]> = keys.iter().copied().filter(|k| *k > &upper[..]).collect();
        assert_eq!(after, vec![&b"abd"[..], b"b"]);
        assert_eq!(before(b""), None);
    }

    #[test]
    fn upload_keys_parse_back() {
        let key = upload_key("dir/a\u{0}b", "0123");
        assert_eq!(
            parse_upload_key(&key),
            Some(("dir/a\u{0}b".into(), "0123".into()))
        );
        assert_eq!(parse_upload_key(b"plain-object"), None);
    }
}
