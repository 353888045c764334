//! The one place that chooses S3's error codes: the verbs say why they refuse a request
//! ([`Refusal`]) or pass on a failure of the gateway, the cluster or the KMS; this module
//! turns each into the code, status and message S3 clients expect.

use s3s::{S3Error, S3ErrorCode};

use crate::kms::KmsError;
use crate::Error;

/// Why a request is refused, in the client's terms; [`Refusal::code`] is its S3 code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("sign the request")]
    Unsigned,
    #[error("the access key id is not known")]
    UnknownAccessKey,
    #[error("the session of this access key has expired")]
    ExpiredToken,
    #[error("the request does not carry its session's token")]
    InvalidToken,
    #[error("{} may not {action} on {resource}", who.as_deref().map_or("an anonymous request".into(), |user| format!("user {user}")))]
    Denied {
        who: Option<String>,
        action: &'static str,
        resource: String,
    },
    #[error("bucket {0} does not exist")]
    NoBucket(String),
    #[error("no object {key} in bucket {bucket}")]
    NoKey { bucket: String, key: String },
    /// The key's newest version is a delete marker (`version`).
    #[error("object {key} is deleted")]
    Deleted { key: String, version: String },
    #[error("object {key} has no version {version}")]
    NoVersion { key: String, version: String },
    #[error("version {version} of {key} is a delete marker")]
    MarkerVersion { key: String, version: String },
    #[error("{0:?} is not a version id")]
    VersionId(String),
    #[error("{0}")]
    Tag(String),
    #[error("bucket {0} has no tags")]
    NoTagSet(String),
    #[error("no upload {0} in progress")]
    NoUpload(String),
    #[error("{0} is not a bucket name: a dot and a dash may not touch")]
    BucketName(String),
    #[error("bucket {0} belongs to another user")]
    BucketTaken(String),
    #[error("location {asked} is not this endpoint's region {region}; ask for {region} or none")]
    Location { asked: String, region: String },
    #[error("bucket {0} holds objects; delete them first")]
    BucketNotEmpty(String),
    #[error("bucket {0} has no default encryption")]
    NoDefaultEncryption(String),
    #[error("object keys are 1 to {0} bytes")]
    KeyLength(usize),
    #[error("{0}")]
    Malformed(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    BadRequest(&'static str),
    #[error("{0}")]
    NotServed(&'static str),
    #[error("{0}")]
    PreconditionFailed(&'static str),
    /// A 304 has no body: its ETag header is what the client compares.
    #[error("Not Modified")]
    NotModified { etag: String },
    #[error("Content-MD5 is not a base64 MD5")]
    ContentMd5,
    #[error("the content does not match its Content-MD5")]
    BadDigest,
    #[error("{0}")]
    IncompleteBody(String),
    #[error("an aws-chunked body needs x-amz-decoded-content-length")]
    DecodedLength,
    #[error("a PUT or part is at most {0} bytes")]
    TooLarge(u64),
    #[error("parts must be listed in ascending order")]
    PartOrder,
    #[error("{0}")]
    Part(String),
    #[error("part {number} is {size} bytes; every part but the last needs {least}")]
    PartTooSmall { number: u32, size: u64, least: u64 },
    #[error("{0}")]
    Range(String),
    #[error("{0}")]
    EncryptionAlgorithm(&'static str),
    #[error("the SSE-C key is not the one the object was stored with")]
    WrongCustomerKey,
    #[error("X-Amz-Expires is {0:?}; a presigned URL lives 0 to 604800 seconds (a week)")]
    PresignedLife(String),
    #[error("the request's date {0:?} is not an HTTP date after 1970")]
    BadDate(String),
    #[error("the request's date is {0} s from the gateway's clock; 900 s is the most allowed")]
    Skewed(i64),
    #[error("KMS: KMS key {0} does not exist")]
    NoKmsKey(String),
    #[error("{0}")]
    RetentionPeriod(String),
    #[error("bucket {0} has no object lock configuration")]
    NoLockConfiguration(String),
    #[error("{0}")]
    NoObjectLock(String),
    #[error("bucket {0} has no lifecycle configuration")]
    NoLifecycle(String),
    #[error("{0}")]
    StorageClass(&'static str),
    #[error("{0}")]
    MalformedPolicy(String),
    #[error("bucket {0} has no policy")]
    NoPolicy(String),
    #[error("bucket {0} has no public access block")]
    NoPublicBlock(String),
    #[error("the bucket's public access block refuses {0}")]
    Blocked(&'static str),
    #[error("the bucket's objects are all its owner's (BucketOwnerEnforced): ACLs are off")]
    AclsOff,
    #[error("no user has the email address {0}")]
    GrantByEmail(String),
    #[error("bucket {0} has no ownership controls")]
    NoOwnershipControls(String),
    #[error("bucket {0} does not belong to the x-amz-expected-bucket-owner")]
    UnexpectedOwner(String),
    #[error("bucket {0}'s requesters pay: send x-amz-request-payer: requester to say you do")]
    RequesterPays(String),
    #[error("bucket {0}'s ACL grants to others than its owner: make it private first")]
    SharedAcl(String),
    #[error("{0}")]
    CorsRule(String),
    #[error("{0}")]
    Checksum(String),
    #[error("the {0} checksum given is not the content's")]
    ChecksumMismatch(&'static str),
    #[error("part {number}: the {algorithm} checksum named is not the part's, or it has none")]
    PartChecksum {
        number: i32,
        algorithm: &'static str,
    },
    #[error("bucket {0} has no CORS configuration")]
    NoCors(String),
    #[error("a preflight request names its {0}")]
    PreflightUnasked(&'static str),
    /// A POST form's policy that cannot be read.
    #[error("{0}")]
    PostPolicy(String),
    /// A POST form its policy does not allow.
    #[error("Invalid according to Policy: {0}")]
    PostDenied(String),
    /// A POST body that is not a form.
    #[error("{0}")]
    PostForm(String),
    #[error("the fields before the file are over {0} bytes")]
    PostFields(usize),
    #[error("POST requires exactly one file upload per request")]
    PostFile,
    #[error("the upload is over the {0} bytes its policy allows")]
    PostTooLarge(u64),
    #[error("the upload is under the {0} bytes its policy asks")]
    PostTooSmall(u64),
    #[error("the signature is not the policy's under that access key")]
    SignatureMismatch,
    /// A logging configuration's target that is not there: NoSuchKey, as Ceph's gateway
    /// answers and s3-tests expects (AWS answers InvalidTargetBucketForLogging).
    #[error("the target bucket for logging, {0}, does not exist")]
    NoLogTarget(String),
    #[error("Logging bucket {target} does not take the access logs of bucket {bucket}: its policy must allow the service principal logging.s3.amazonaws.com to s3:PutObject under the target prefix, for this bucket (aws:SourceArn) and owner (aws:SourceAccount)")]
    LogDenied { target: String, bucket: String },
    /// A query S3 Select cannot run, under S3 Select's own codes.
    #[error("{0}")]
    Select(#[from] select::Error),
    #[error("CORSResponse: CORS is not enabled for bucket {0}")]
    CorsOff(String),
    #[error("CORSResponse: no CORS rule of bucket {bucket} allows origin {origin:?} to {method}{}", if headers.is_empty() { String::new() } else { format!(" with headers {headers}") })]
    CorsDenied {
        bucket: String,
        origin: String,
        method: String,
        headers: String,
    },
}

impl Refusal {
    /// The S3 code that names this refusal to clients.
    fn code(&self) -> S3ErrorCode {
        use S3ErrorCode as C;
        match self {
            Refusal::Unsigned
            | Refusal::Denied { .. }
            | Refusal::Blocked(_)
            | Refusal::UnexpectedOwner(_)
            | Refusal::RequesterPays(_)
            | Refusal::NoKmsKey(_)
            | Refusal::PresignedLife(_)
            | Refusal::BadDate(_)
            | Refusal::LogDenied { .. } => C::AccessDenied,
            Refusal::Skewed(_) => C::RequestTimeTooSkewed,
            Refusal::UnknownAccessKey => C::InvalidAccessKeyId,
            Refusal::ExpiredToken => C::ExpiredToken,
            Refusal::InvalidToken => C::InvalidToken,
            Refusal::NoBucket(_) => C::NoSuchBucket,
            Refusal::NoKey { .. } | Refusal::Deleted { .. } | Refusal::NoLogTarget(_) => {
                C::NoSuchKey
            }
            Refusal::NoVersion { .. } => C::NoSuchVersion,
            Refusal::MarkerVersion { .. } => C::MethodNotAllowed,
            Refusal::VersionId(_) => C::InvalidArgument,
            Refusal::Tag(_) => C::InvalidTag,
            Refusal::NoTagSet(_) => C::NoSuchTagSet,
            Refusal::NoUpload(_) => C::NoSuchUpload,
            Refusal::BucketName(_) => C::InvalidBucketName,
            Refusal::BucketTaken(_) => C::BucketAlreadyExists,
            Refusal::Location { .. } => C::IllegalLocationConstraintException,
            Refusal::BucketNotEmpty(_) => C::BucketNotEmpty,
            Refusal::NoDefaultEncryption(_) => C::ServerSideEncryptionConfigurationNotFoundError,
            Refusal::KeyLength(_) => C::KeyTooLongError,
            Refusal::Malformed(_) => C::MalformedXML,
            Refusal::Invalid(_) => C::InvalidArgument,
            Refusal::BadRequest(_) => C::InvalidRequest,
            Refusal::NotServed(_) => C::NotImplemented,
            Refusal::PreconditionFailed(_) => C::PreconditionFailed,
            Refusal::NotModified { .. } => C::NotModified,
            Refusal::ContentMd5 => C::InvalidDigest,
            Refusal::BadDigest => C::BadDigest,
            Refusal::IncompleteBody(_) => C::IncompleteBody,
            Refusal::DecodedLength => C::MissingContentLength,
            Refusal::TooLarge(_) => C::EntityTooLarge,
            Refusal::PartOrder => C::InvalidPartOrder,
            Refusal::Part(_) => C::InvalidPart,
            Refusal::PartTooSmall { .. } => C::EntityTooSmall,
            Refusal::Range(_) => C::InvalidRange,
            Refusal::EncryptionAlgorithm(_) => C::InvalidEncryptionAlgorithmError,
            // 400, as Ceph's gateway answers and s3-tests expects (AWS answers 403).
            Refusal::WrongCustomerKey => C::InvalidArgument,
            Refusal::RetentionPeriod(_) => C::Custom("InvalidRetentionPeriod".into()),
            Refusal::NoLockConfiguration(_) => C::ObjectLockConfigurationNotFoundError,
            Refusal::NoObjectLock(_) => C::NoSuchObjectLockConfiguration,
            Refusal::NoLifecycle(_) => C::NoSuchLifecycleConfiguration,
            Refusal::StorageClass(_) => C::InvalidStorageClass,
            Refusal::MalformedPolicy(_) => C::MalformedPolicy,
            Refusal::NoPolicy(_) => C::NoSuchBucketPolicy,
            Refusal::NoPublicBlock(_) => C::Custom("NoSuchPublicAccessBlockConfiguration".into()),
            Refusal::AclsOff => C::AccessControlListNotSupported,
            Refusal::SharedAcl(_) => C::Custom("InvalidBucketAclWithObjectOwnership".into()),
            Refusal::GrantByEmail(_) => C::UnresolvableGrantByEmailAddress,
            Refusal::NoOwnershipControls(_) => C::OwnershipControlsNotFoundError,
            Refusal::CorsRule(_) | Refusal::Checksum(_) => C::InvalidRequest,
            Refusal::ChecksumMismatch(_) | Refusal::PartChecksum { .. } => C::BadDigest,
            Refusal::NoCors(_) => C::NoSuchCORSConfiguration,
            Refusal::PreflightUnasked(_) => C::Custom("BadRequest".into()),
            Refusal::PostPolicy(_) => C::InvalidPolicyDocument,
            Refusal::PostDenied(_) => C::AccessDenied,
            Refusal::PostForm(_) => C::MalformedPOSTRequest,
            Refusal::PostFields(_) => C::MaxPostPreDataLengthExceededError,
            Refusal::PostFile => C::IncorrectNumberOfFilesInPostRequest,
            Refusal::PostTooLarge(_) => C::EntityTooLarge,
            Refusal::PostTooSmall(_) => C::EntityTooSmall,
            Refusal::SignatureMismatch => C::SignatureDoesNotMatch,
            Refusal::CorsOff(_) | Refusal::CorsDenied { .. } => C::Custom("AccessForbidden".into()),
            Refusal::Select(e) => C::Custom(e.code().into()),
        }
    }
}

impl Refusal {
    /// The headers that go with the refusal: a 304 has no body, so its ETag header is what
    /// the client compares; a missing object says whether a delete marker hides it.
    fn headers(&self) -> Vec<(&'static str, String)> {
        match self {
            Refusal::NotModified { etag } => vec![("etag", format!("\"{etag}\""))],
            Refusal::NoKey { .. } => vec![("x-amz-delete-marker", "false".into())],
            Refusal::Deleted { version, .. } | Refusal::MarkerVersion { version, .. } => vec![
                ("x-amz-delete-marker", "true".into()),
                ("x-amz-version-id", version.clone()),
            ],
            _ => Vec::new(),
        }
    }
}

impl From<Refusal> for S3Error {
    fn from(refusal: Refusal) -> S3Error {
        let code = refusal.code();
        // S3 codes that s3s does not know are the client's errors too.
        let custom = matches!(code, S3ErrorCode::Custom(_));
        let mut e = S3Error::with_message(code, refusal.to_string());
        if let Refusal::NoPublicBlock(_) = refusal {
            e.set_status_code(hyper::StatusCode::NOT_FOUND);
        } else if let Refusal::CorsOff(_) | Refusal::CorsDenied { .. } = refusal {
            e.set_status_code(hyper::StatusCode::FORBIDDEN);
        } else if custom {
            e.set_status_code(hyper::StatusCode::BAD_REQUEST);
        }
        let headers = refusal.headers();
        if !headers.is_empty() {
            let mut map = hyper::HeaderMap::new();
            for (name, value) in headers {
                if let Ok(value) = hyper::header::HeaderValue::from_str(&value) {
                    map.insert(name, value);
                }
            }
            e.set_headers(map);
        }
        e
    }
}

/// A failure of the gateway or the cluster: clients retry 503s; a full cluster is 507, as
/// Ceph's gateway answers ENOSPC.
impl From<Error> for S3Error {
    fn from(e: Error) -> S3Error {
        match e {
            Error::Cluster(client::Error::Timeout { .. })
            | Error::Cluster(client::Error::Mon(_)) => {
                tracing::warn!("{e}");
                S3Error::with_message(S3ErrorCode::ServiceUnavailable, e.to_string())
            }
            Error::Invalid(message) => S3Error::with_message(S3ErrorCode::InvalidArgument, message),
            Error::Precondition(why) => S3Error::with_message(S3ErrorCode::PreconditionFailed, why),
            Error::NoObject(_) => S3Error::with_message(S3ErrorCode::NoSuchKey, e.to_string()),
            Error::NoVersion(_) => S3Error::with_message(S3ErrorCode::NoSuchVersion, e.to_string()),
            Error::Body(message) => S3Error::with_message(S3ErrorCode::IncompleteBody, message),
            Error::Cluster(client::Error::NoSpace(why)) => {
                let mut full = S3Error::with_message(
                    S3ErrorCode::Custom("InsufficientCapacity".into()),
                    format!("no space: {why}"),
                );
                full.set_status_code(hyper::StatusCode::INSUFFICIENT_STORAGE);
                full
            }
            Error::Busy(_) => S3Error::with_message(S3ErrorCode::OperationAborted, e.to_string()),
            Error::Locked(_) => S3Error::with_message(S3ErrorCode::AccessDenied, e.to_string()),
            Error::BucketState(why) => S3Error::with_message(S3ErrorCode::InvalidBucketState, why),
            Error::Cluster(client::Error::Integrity(_)) => {
                // Every copy is damaged: S3 has no code for it, so a 500 whose message says
                // so (never the bytes).
                tracing::error!("{e}");
                S3Error::with_message(S3ErrorCode::InternalError, e.to_string())
            }
            e => {
                tracing::warn!("{e}");
                S3Error::with_message(S3ErrorCode::InternalError, e.to_string())
            }
        }
    }
}

/// A KMS refusal: a missing or removed key is the client's to fix; the gateway not allowed
/// data keys is the operator's (with the monitors' KMS, its entity needs mon=rw and secure
/// links to the monitors); no answer is a 503, which clients retry.
impl From<KmsError> for S3Error {
    fn from(e: KmsError) -> S3Error {
        let code = match e {
            KmsError::NoSuchKey(_) => S3ErrorCode::AccessDenied,
            KmsError::Denied(_) => {
                tracing::warn!("{e}");
                S3ErrorCode::InternalError
            }
            KmsError::Unavailable(_) => S3ErrorCode::ServiceUnavailable,
            KmsError::Failed(_) => {
                tracing::warn!("{e}");
                S3ErrorCode::InternalError
            }
        };
        S3Error::with_message(code, format!("KMS: {e}"))
    }
}
