//! Access control lists, S3's older way of sharing a bucket or an object: grants of a
//! permission (READ, WRITE, READ_ACP, WRITE_ACP, FULL_CONTROL) to a user or to a group
//! (everyone, every signed-in user). Pure code: a bucket's ACL is in its index object, an
//! object's in its index entry; `crate::policy` consults them where no policy decides.

use serde::{Deserialize, Serialize};

use crate::policy::Action;

/// The group of everyone, signed in or not.
pub const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
/// The group of every signed-in user.
pub const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";
/// The group S3's server access logs write as.
pub const LOG_DELIVERY: &str = "http://acs.amazonaws.com/groups/s3/LogDelivery";
/// The most grants one ACL holds (S3's).
pub const GRANTS_MAX: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Permission {
    Read,
    Write,
    ReadAcp,
    WriteAcp,
    FullControl,
}

impl Permission {
    pub fn parse(text: &str) -> Option<Permission> {
        Some(match text {
            "READ" => Permission::Read,
            "WRITE" => Permission::Write,
            "READ_ACP" => Permission::ReadAcp,
            "WRITE_ACP" => Permission::WriteAcp,
            "FULL_CONTROL" => Permission::FullControl,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "READ",
            Permission::Write => "WRITE",
            Permission::ReadAcp => "READ_ACP",
            Permission::WriteAcp => "WRITE_ACP",
            Permission::FullControl => "FULL_CONTROL",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Grantee {
    User(String),
    AllUsers,
    AuthenticatedUsers,
    LogDelivery,
}

impl Grantee {
    /// A group by its URI.
    pub fn group(uri: &str) -> Option<Grantee> {
        Some(match uri {
            ALL_USERS => Grantee::AllUsers,
            AUTHENTICATED_USERS => Grantee::AuthenticatedUsers,
            LOG_DELIVERY => Grantee::LogDelivery,
            _ => return None,
        })
    }

    /// The URI of a group; `None` for a user.
    pub fn uri(&self) -> Option<&'static str> {
        match self {
            Grantee::User(_) => None,
            Grantee::AllUsers => Some(ALL_USERS),
            Grantee::AuthenticatedUsers => Some(AUTHENTICATED_USERS),
            Grantee::LogDelivery => Some(LOG_DELIVERY),
        }
    }

    /// Whether the grantee opens the bucket or object to people the owner did not name.
    fn public(&self) -> bool {
        matches!(self, Grantee::AllUsers | Grantee::AuthenticatedUsers)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub grantee: Grantee,
    pub permission: Permission,
}

/// The ACL of a bucket (its index object's acl attribute) or of an object version (its
/// index entry): whose it is, and what it grants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acl {
    pub owner: String,
    pub grants: Vec<Grant>,
}

impl crate::layout::Record for Acl {}

/// Who owns the objects written to a bucket, and whether ACLs apply there
/// (S3's object ownership), in the bucket's ownership attribute; absent is `ObjectWriter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ownership {
    /// ACLs are off: the bucket owner owns every object, and only policies share.
    BucketOwnerEnforced,
    /// An object written with `bucket-owner-full-control` becomes the bucket owner's.
    BucketOwnerPreferred,
    /// The writer owns what it writes.
    ObjectWriter,
}

impl crate::layout::Record for Ownership {}

impl Ownership {
    pub fn parse(text: &str) -> Option<Ownership> {
        Some(match text {
            "BucketOwnerEnforced" => Ownership::BucketOwnerEnforced,
            "BucketOwnerPreferred" => Ownership::BucketOwnerPreferred,
            "ObjectWriter" => Ownership::ObjectWriter,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Ownership::BucketOwnerEnforced => "BucketOwnerEnforced",
            Ownership::BucketOwnerPreferred => "BucketOwnerPreferred",
            Ownership::ObjectWriter => "ObjectWriter",
        }
    }

    /// Who owns an object that `writer` (`None`: anonymous) writes with canned ACL
    /// `canned`, in a bucket owned by `bucket_owner`.
    pub fn object_owner<'a>(
        ownership: Option<Ownership>,
        writer: Option<&'a str>,
        canned: Option<&str>,
        bucket_owner: &'a str,
    ) -> &'a str {
        match (ownership, writer) {
            (Some(Ownership::BucketOwnerEnforced), _) | (_, None) => bucket_owner,
            (Some(Ownership::BucketOwnerPreferred), _)
                if canned == Some("bucket-owner-full-control") =>
            {
                bucket_owner
            }
            (_, Some(writer)) => writer,
        }
    }
}

/// What an ACL grant is asked about: the bucket's ACL, or the object's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Bucket,
    Object,
}

/// The permission an ACL must grant for `action`, and whose ACL decides; `None` for the
/// actions that only the owner and policies give.
pub fn needed(action: Action) -> Option<(Scope, Permission)> {
    use Action::*;
    Some(match action {
        ListBucket | ListBucketVersions | ListBucketMultipartUploads => {
            (Scope::Bucket, Permission::Read)
        }
        PutObject
        | DeleteObject
        | DeleteObjectVersion
        | AbortMultipartUpload
        | ListMultipartUploadParts => (Scope::Bucket, Permission::Write),
        GetBucketAcl => (Scope::Bucket, Permission::ReadAcp),
        PutBucketAcl => (Scope::Bucket, Permission::WriteAcp),
        GetObject
        | GetObjectVersion
        | GetObjectAttributes
        | GetObjectVersionAttributes
        | GetObjectTorrent => (Scope::Object, Permission::Read),
        GetObjectAcl | GetObjectVersionAcl => (Scope::Object, Permission::ReadAcp),
        PutObjectAcl | PutObjectVersionAcl => (Scope::Object, Permission::WriteAcp),
        _ => return None,
    })
}

fn grant(grantee: Grantee, permission: Permission) -> Grant {
    Grant {
        grantee,
        permission,
    }
}

impl Acl {
    /// Only the owner, with full control: what a bucket or object has unless given more.
    pub fn private(owner: &str) -> Acl {
        Acl {
            owner: owner.into(),
            grants: vec![grant(Grantee::User(owner.into()), Permission::FullControl)],
        }
    }

    /// Canned ACL `name` of a bucket or object owned by `owner`, in a bucket owned by
    /// `bucket_owner`. Grants to groups come first, as Ceph's gateway lists them.
    pub fn canned(name: &str, owner: &str, bucket_owner: &str) -> Result<Acl, String> {
        use Permission::*;
        let mut acl = Acl::private(owner);
        let to_bucket_owner = |acl: &mut Acl, permission| {
            if bucket_owner != owner {
                acl.grants
                    .push(grant(Grantee::User(bucket_owner.into()), permission));
            }
        };
        let groups = match name {
            "private" | "aws-exec-read" => vec![],
            "public-read" => vec![grant(Grantee::AllUsers, Read)],
            "public-read-write" => vec![
                grant(Grantee::AllUsers, Read),
                grant(Grantee::AllUsers, Write),
            ],
            "authenticated-read" => vec![grant(Grantee::AuthenticatedUsers, Read)],
            "log-delivery-write" => vec![
                grant(Grantee::LogDelivery, Write),
                grant(Grantee::LogDelivery, ReadAcp),
            ],
            "bucket-owner-read" => {
                to_bucket_owner(&mut acl, Read);
                vec![]
            }
            "bucket-owner-full-control" => {
                to_bucket_owner(&mut acl, FullControl);
                vec![]
            }
            other => return Err(format!("unknown canned ACL {other:?}")),
        };
        acl.grants.splice(0..0, groups);
        Ok(acl)
    }

    /// Whether the ACL gives `principal` (`None`: anonymous) `permission`; grants to
    /// everyone and to every signed-in user count only unless `ignore_public`. The owner
    /// may always read and change the ACL itself, as in S3.
    pub fn allows(
        &self,
        principal: Option<&str>,
        permission: Permission,
        ignore_public: bool,
    ) -> bool {
        let owner = principal == Some(self.owner.as_str());
        if owner && matches!(permission, Permission::ReadAcp | Permission::WriteAcp) {
            return true;
        }
        self.grants.iter().any(|g| {
            let to_them = match &g.grantee {
                Grantee::User(user) => principal == Some(user.as_str()),
                _ if ignore_public => false,
                Grantee::AllUsers => true,
                Grantee::AuthenticatedUsers => principal.is_some(),
                Grantee::LogDelivery => false,
            };
            to_them && (g.permission == permission || g.permission == Permission::FullControl)
        })
    }

    /// Whether the ACL grants anything to everyone or to every signed-in user.
    pub fn is_public(&self) -> bool {
        self.grants.iter().any(|g| g.grantee.public())
    }
}

/// A grantee as a request names it, before its user is looked up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Named {
    Id(String),
    Uri(String),
    Email(String),
}

/// The grantees of an `x-amz-grant-*` header: `id="NAME", uri="URI", emailAddress="ADDRESS"`,
/// comma-separated (quotes optional).
pub fn header_grantees(text: &str) -> Result<Vec<Named>, String> {
    text.split(',')
        .map(|item| {
            let (kind, value) = item
                .split_once('=')
                .ok_or_else(|| format!("grant {item:?} is not TYPE=VALUE"))?;
            let value = value.trim().trim_matches('"').to_string();
            match kind.trim() {
                "id" => Ok(Named::Id(value)),
                "uri" => Ok(Named::Uri(value)),
                "emailAddress" => Ok(Named::Email(value)),
                other => Err(format!(
                    "grantee type {other:?} is not id, uri or emailAddress"
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canned_acls_grant_as_s3s() {
        let acl = Acl::canned("public-read-write", "ana", "ana").expect("known");
        let permissions: Vec<_> = acl
            .grants
            .iter()
            .map(|g| (g.grantee.clone(), g.permission))
            .collect();
        assert_eq!(
            permissions,
            vec![
                (Grantee::AllUsers, Permission::Read),
                (Grantee::AllUsers, Permission::Write),
                (Grantee::User("ana".into()), Permission::FullControl),
            ]
        );
        assert!(acl.allows(None, Permission::Write, false));
        assert!(!acl.allows(None, Permission::Write, true));
        assert!(!acl.allows(None, Permission::ReadAcp, false));
        assert!(acl.is_public());
        let read = Acl::canned("authenticated-read", "ana", "ana").expect("known");
        assert!(read.allows(Some("bob"), Permission::Read, false));
        assert!(!read.allows(None, Permission::Read, false));
        assert!(!Acl::canned("private", "ana", "ana")
            .expect("known")
            .is_public());
        // An object another user wrote gives the bucket's owner what was asked.
        let object = Acl::canned("bucket-owner-read", "bob", "ana").expect("known");
        assert!(object.allows(Some("ana"), Permission::Read, false));
        assert!(!object.allows(Some("ana"), Permission::WriteAcp, false));
        assert!(object.allows(Some("bob"), Permission::WriteAcp, false));
        assert_eq!(
            Acl::canned("bucket-owner-read", "ana", "ana"),
            Ok(Acl::private("ana"))
        );
        assert!(Acl::canned("everyone", "ana", "ana").is_err());
    }

    #[test]
    fn the_owner_always_manages_the_acl() {
        let acl = Acl {
            owner: "ana".into(),
            grants: vec![grant(Grantee::User("bob".into()), Permission::Read)],
        };
        assert!(acl.allows(Some("ana"), Permission::WriteAcp, false));
        assert!(!acl.allows(Some("ana"), Permission::Read, false));
        assert!(acl.allows(Some("bob"), Permission::Read, false));
        assert!(!acl.allows(Some("bob"), Permission::Write, false));
        assert_eq!(
            needed(Action::ListBucket),
            Some((Scope::Bucket, Permission::Read))
        );
        assert_eq!(
            needed(Action::GetObjectVersion),
            Some((Scope::Object, Permission::Read))
        );
        assert_eq!(needed(Action::PutBucketPolicy), None);
    }

    #[test]
    fn header_grants_name_users_groups_and_addresses() {
        assert_eq!(
            header_grantees(
                r#"id="ana", uri="http://acs.amazonaws.com/groups/global/AllUsers",emailAddress=b@x"#
            ),
            Ok(vec![
                Named::Id("ana".into()),
                Named::Uri(ALL_USERS.into()),
                Named::Email("b@x".into()),
            ])
        );
        assert!(header_grantees("ana").is_err());
        assert!(header_grantees("name=ana").is_err());
    }
}
