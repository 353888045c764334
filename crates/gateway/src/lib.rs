//! Coffer's S3 gateway: the S3 API (through the s3s crate, which parses requests and checks
//! SigV4 signatures) on one pool of a cluster, served over HTTPS by default.
//!
//! Users, buckets, bucket indexes and object data are all objects of that pool (see
//! [`layout`]), or the data of another ([`pools`]), so the gateway keeps no state of its own
//! and several gateways can serve one pool.
//!
//! Must never depend on: `osd`, `store` (checked by scripts/check-deps.py).

pub mod access_log;
pub mod accounts;
pub mod acl;
pub mod buckets;
pub mod checksum;
mod chunked;
pub mod cors;
pub mod data;

#[cfg(any(test, fuzzing))]
pub mod fuzz;
pub mod groups;
mod iam;
pub mod kmip;
pub mod kms;
pub mod layout;
pub mod lifecycle;
pub mod lock;
pub mod maintenance;
pub mod managed;
pub mod metrics;
pub mod multipart;
pub mod oidc;
mod omap;
pub mod policy;
pub mod pools;
mod readers;
pub mod roles;
mod s3;
pub mod serve;
mod sigv4;
pub mod sse;
pub mod tls;
pub mod users;
pub mod vault;
pub mod versions;
pub mod web_identity;

pub use pools::Pools;
pub use s3::{region_name, Gateway, PART_MIN_BYTES_DEFAULT, REGION_DEFAULT};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0} does not exist")]
    NotFound(String),
    /// The thing exists; for a bucket, this carries its owner.
    #[error("{0} exists")]
    Exists(String),
    #[error("bucket {0} is not empty")]
    NotEmpty(String),
    /// A conflicting operation is in progress; the client may try again.
    #[error("{0}; try again")]
    Busy(String),
    /// The object a request needs is not there (If-Match on a write).
    #[error("no object: {0}")]
    NoObject(String),
    /// The version a request names is not there.
    #[error("no version: {0}")]
    NoVersion(String),
    /// A condition of the request (If-Match, If-None-Match) does not hold.
    #[error("{0}")]
    Precondition(String),
    #[error("invalid: {0}")]
    Invalid(String),
    /// Object lock holds the version a request would remove or weaken.
    #[error("locked: {0}")]
    Locked(String),
    /// The bucket's state does not allow the request (suspending versioning under object
    /// lock, or object lock without versioning).
    #[error("{0}")]
    BucketState(String),
    #[error("request body: {0}")]
    Body(String),
    #[error("damaged record: {0}")]
    Corrupt(String),
    #[error("{0}")]
    Internal(String),
    #[error("cluster: {0}")]
    Cluster(#[from] client::Error),
    /// A user's or a role's policy refused, for a reason IAM names.
    #[error("{0}")]
    IamPolicy(users::PolicyRefusal),
    /// The thing is in use and cannot be removed yet (a role that has policies).
    #[error("{0}")]
    Conflict(String),
    /// A limit on how many there may be (a user's access keys).
    #[error("{0}")]
    Limit(String),
}
