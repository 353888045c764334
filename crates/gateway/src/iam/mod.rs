//! The IAM query API, as far as users' policies go (PutUserPolicy, GetUserPolicy,
//! ListUserPolicies and DeleteUserPolicy; AttachUserPolicy, DetachUserPolicy and
//! ListAttachedUserPolicies for managed policies), an account's users ([`members`]), groups
//! ([`groups`]) and roles ([`roles`]), and STS's GetCallerIdentity, GetSessionToken and
//! AssumeRole, as aws-cli, boto3 and the SDKs send them: a form-encoded POST to `/`, signed
//! with SigV4 for the service `iam` or `sts`; and STS's AssumeRoleWithWebIdentity, which is
//! posted unsigned (`roles::assume_with_web_identity`). s3s checks signatures for S3 alone, so this
//! module checks these itself (`crate::sigv4`) and answers in IAM's and STS's XML, with
//! their error codes chosen in [`IamRefusal`].
//!
//! A caller may use a verb on user U when their policies (their own and their groups')
//! allow `iam:VERB` on `arn:aws:iam:::user/U` (on role R: `arn:aws:iam:::role/PATH/R`); the
//! operator attaches the first such policy with `coffer user policy put`.

mod groups;
mod members;
mod oidc;
mod roles;

use std::collections::BTreeMap;

use client::Pool;
use hyper::{HeaderMap, StatusCode};
use s3s::HttpResponse;

use crate::layout::{AccessKey, Group, Role, RoleTaken, Session, User};
use crate::policy::{self, Action, Asked, Policy, Verdict};
use crate::serve::{escape, Peer};
use crate::sigv4::{Authorization, SigError, Signed};
use crate::users::Holder;
use crate::{users, web_identity, Error};

/// The largest request body taken: a policy of 20 KiB, form-encoded, and the rest.
const BODY_BYTES_MAX: usize = 128 * 1024;
/// IAM's and STS's XML namespaces.
const IAM_NAMESPACE: &str = "https://iam.amazonaws.com/doc/2010-05-08/";
const STS_NAMESPACE: &str = "https://sts.amazonaws.com/doc/2011-06-15/";

/// The services answered here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Service {
    Iam,
    Sts,
}

impl Service {
    fn namespace(self) -> &'static str {
        match self {
            Service::Iam => IAM_NAMESPACE,
            Service::Sts => STS_NAMESPACE,
        }
    }
}

/// The service that `headers` carry a SigV4 signature for, if it is IAM or STS; STS for an
/// unsigned form posted to `/` (AssumeRoleWithWebIdentity's).
pub(crate) fn service(method: &hyper::Method, path: &str, headers: &HeaderMap) -> Option<Service> {
    let Some(authorization) = headers.get(hyper::header::AUTHORIZATION) else {
        // STS's AssumeRoleWithWebIdentity is sent unsigned: a form posted to `/`, which
        // is no S3 request (S3's browser uploads post multipart forms to a bucket).
        let form = headers
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.to_ascii_lowercase()
                    .starts_with("application/x-www-form-urlencoded")
            });
        return (*method == hyper::Method::POST && path == "/" && form).then_some(Service::Sts);
    };
    match Authorization::parse(authorization.to_str().ok()?)
        .ok()?
        .service
    {
        "iam" => Some(Service::Iam),
        "sts" => Some(Service::Sts),
        _ => None,
    }
}

/// Why an IAM request is refused: the one place IAM's codes are chosen.
#[derive(Debug)]
enum IamRefusal {
    Incomplete(String),
    UnknownKey,
    Signature(String),
    /// Another change to the user was under way each time (IAM's ConcurrentModification).
    Busy(String),
    /// IAM's EntityAlreadyExists.
    Exists(String),
    /// IAM's DeleteConflict: a role that still has policies.
    Conflict(String),
    /// A session's request without its token.
    Token(String),
    /// A session's request after it expired.
    Expired,
    Denied {
        who: String,
        action: &'static str,
    },
    /// A web identity token refused (STS's InvalidIdentityToken, ExpiredTokenException
    /// or IDPCommunicationError).
    WebIdentity(web_identity::Refusal),
    UnknownAction(String),
    Missing(&'static str),
    Invalid(String),
    Document(String),
    TooLarge(String),
    NoSuchEntity(String),
    Internal(String),
}

impl IamRefusal {
    fn parts(&self) -> (StatusCode, &'static str, String) {
        use IamRefusal::*;
        match self {
            Incomplete(why) => (StatusCode::BAD_REQUEST, "IncompleteSignature", why.clone()),
            Busy(why) => (StatusCode::CONFLICT, "ConcurrentModification", why.clone()),
            Exists(what) => (
                StatusCode::CONFLICT,
                "EntityAlreadyExists",
                format!("{what} exists"),
            ),
            Conflict(why) => (StatusCode::CONFLICT, "DeleteConflict", why.clone()),
            Token(why) => (StatusCode::FORBIDDEN, "InvalidClientTokenId", why.clone()),
            Expired => (
                StatusCode::BAD_REQUEST,
                "ExpiredToken",
                "The security token included in the request is expired".into(),
            ),
            UnknownKey => (
                StatusCode::FORBIDDEN,
                "InvalidClientTokenId",
                "The security token included in the request is invalid.".into(),
            ),
            Signature(why) => (StatusCode::FORBIDDEN, "SignatureDoesNotMatch", why.clone()),
            Denied { who, action } => (
                StatusCode::FORBIDDEN,
                "AccessDenied",
                format!("{who} is not allowed {action}"),
            ),
            WebIdentity(refused) => {
                let code = match refused {
                    web_identity::Refusal::Invalid(_) | web_identity::Refusal::UnknownKey(_) => {
                        "InvalidIdentityToken"
                    }
                    web_identity::Refusal::Expired(_) => "ExpiredTokenException",
                    web_identity::Refusal::Unreachable(_) => "IDPCommunicationError",
                };
                (StatusCode::BAD_REQUEST, code, refused.to_string())
            }
            UnknownAction(action) => (
                StatusCode::BAD_REQUEST,
                "InvalidAction",
                format!("Could not find operation {action:?} for version 2010-05-08"),
            ),
            Missing(name) => (
                StatusCode::BAD_REQUEST,
                "ValidationError",
                format!("the request has no {name}"),
            ),
            Invalid(why) => (StatusCode::BAD_REQUEST, "ValidationError", why.clone()),
            Document(why) => (
                StatusCode::BAD_REQUEST,
                "MalformedPolicyDocument",
                why.clone(),
            ),
            TooLarge(why) => (StatusCode::CONFLICT, "LimitExceeded", why.clone()),
            NoSuchEntity(what) => (
                StatusCode::NOT_FOUND,
                "NoSuchEntity",
                format!("{what} does not exist"),
            ),
            Internal(why) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "ServiceFailure",
                why.clone(),
            ),
        }
    }
}

impl From<web_identity::Refusal> for IamRefusal {
    fn from(e: web_identity::Refusal) -> IamRefusal {
        IamRefusal::WebIdentity(e)
    }
}

impl From<SigError> for IamRefusal {
    fn from(e: SigError) -> IamRefusal {
        match e {
            SigError::Incomplete(why) => IamRefusal::Incomplete(why),
            SigError::Mismatch(why) => IamRefusal::Signature(why),
        }
    }
}

impl From<Error> for IamRefusal {
    fn from(e: Error) -> IamRefusal {
        match e {
            Error::NotFound(what) => IamRefusal::NoSuchEntity(what),
            Error::Busy(why) => IamRefusal::Busy(why),
            Error::Exists(what) => IamRefusal::Exists(what),
            Error::Conflict(why) => IamRefusal::Conflict(why),
            Error::Limit(why) => IamRefusal::TooLarge(why),
            Error::Invalid(why) => IamRefusal::Invalid(why),
            Error::IamPolicy(name @ users::PolicyRefusal::Name(_)) => {
                IamRefusal::Invalid(name.to_string())
            }
            Error::IamPolicy(users::PolicyRefusal::Document(why)) => IamRefusal::Document(why),
            Error::IamPolicy(too_large) => IamRefusal::TooLarge(too_large.to_string()),
            e => {
                tracing::warn!("IAM: {e}");
                IamRefusal::Internal(e.to_string())
            }
        }
    }
}

/// The answer to the request `request` for `service`, which [`service`] picked out; `id`
/// is its request id.
pub(crate) async fn answer(
    pool: &Pool,
    service: Service,
    request: hyper::Request<hyper::body::Incoming>,
    id: &str,
) -> HttpResponse {
    let (parts, body) = request.into_parts();
    let mut body = s3s::Body::from(body);
    let outcome = match body.store_all_limited(BODY_BYTES_MAX).await {
        Ok(body) => act(pool, service, &parts, &body).await,
        Err(e) => Err(IamRefusal::Invalid(format!("the request body: {e}"))),
    };
    let namespace = service.namespace();
    let (status, xml) = match outcome {
        Ok(answered) => (StatusCode::OK, answered.xml(namespace, id)),
        Err(refused) => {
            let (status, code, message) = refused.parts();
            tracing::debug!(request_id = id, code, message, ?service, "IAM or STS error");
            (status, error_xml(namespace, status, code, &message, id))
        }
    };
    let mut response = HttpResponse::new(s3s::Body::from(xml));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::http::HeaderValue::from_static("text/xml"),
    );
    response
}

/// What a verb answers, before it is written out.
enum Answered {
    /// A verb with no result (Put, Delete).
    Done(&'static str),
    /// A verb whose result is empty (UpdateRole's: SDKs look for it).
    Nothing(&'static str),
    /// GetUserPolicy's or GetRolePolicy's.
    Policy {
        of: Holding,
        holder: String,
        name: String,
        document: String,
    },
    /// ListUserPolicies', ListGroupPolicies' or ListRolePolicies'.
    Names(Holding, Vec<String>),
    /// ListAttachedUserPolicies', ListAttachedGroupPolicies' or ListAttachedRolePolicies':
    /// the managed policies' ARNs.
    Attached(Holding, Vec<String>),
    /// GetCallerIdentity's: the ARN a key acts as, its id, and its account's id.
    Caller {
        arn: String,
        id: String,
        account: Option<String>,
    },
    /// GetSessionToken's: the new session and its access key.
    Session {
        access_key: String,
        session: Session,
    },
    /// CreateRole's or GetRole's.
    Role(&'static str, Role),
    Roles(Vec<Role>),
    /// AssumeRole's: the new session of `role` and its access key.
    Assumed {
        access_key: String,
        session: Session,
        role: Role,
    },
    /// CreateUser's or GetUser's.
    User(&'static str, User),
    /// ListUsers' page, and the marker of the next when there is one.
    Users(Vec<User>, Option<String>),
    /// CreateGroup's or UpdateGroup's group, or GetGroup's with its users.
    Group(&'static str, Group, Option<Vec<User>>),
    /// ListGroups' page (with the marker of the next when there is one), or
    /// ListGroupsForUser's.
    Groups(&'static str, Vec<Group>, Option<String>),
    /// CreateAccessKey's: the new key of the user named.
    Key(String, AccessKey),
    /// ListAccessKeys': the keys of the user named.
    Keys(String, Vec<AccessKey>),
    /// GetAccountSummary's counts and limits, by IAM's names.
    Summary(Vec<(&'static str, usize)>),
    /// A verb's result, its elements written by the verb's module.
    Result(&'static str, String),
}

/// Whose policies a policy verb is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holding {
    User,
    Group,
    Role,
}

impl Holding {
    fn word(self) -> &'static str {
        match self {
            Holding::User => "User",
            Holding::Group => "Group",
            Holding::Role => "Role",
        }
    }
}

/// A list's `IsTruncated`, and its `Marker` for the next page when there is one.
fn truncated_xml(marker: &Option<String>) -> String {
    match marker {
        Some(marker) => format!(
            "<IsTruncated>true</IsTruncated><Marker>{}</Marker>",
            escape(marker)
        ),
        None => "<IsTruncated>false</IsTruncated>".into(),
    }
}

/// `ns` nanoseconds since the epoch, as IAM and STS write times (ISO 8601, UTC).
fn iso_time(ns: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp((ns / 1_000_000_000) as i64)
        .ok()
        .and_then(|at| {
            at.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// A session's credentials, as GetSessionToken and AssumeRole answer them.
fn credentials_xml(access_key: &str, session: &Session) -> String {
    format!(
        "<Credentials><AccessKeyId>{access_key}</AccessKeyId><SecretAccessKey>{}\
         </SecretAccessKey><SessionToken>{}</SessionToken><Expiration>{}</Expiration>\
         </Credentials>",
        session.secret_key,
        session.token,
        iso_time(session.expires_ns)
    )
}

impl Answered {
    fn xml(&self, namespace: &str, id: &str) -> String {
        let (verb, result) = match self {
            Answered::Caller { arn, id, account } => (
                "GetCallerIdentity".to_owned(),
                format!(
                    "<GetCallerIdentityResult><Arn>{}</Arn><UserId>{}</UserId>{}\
                     </GetCallerIdentityResult>",
                    escape(arn),
                    escape(id),
                    account
                        .as_ref()
                        .map(|a| format!("<Account>{}</Account>", escape(a)))
                        .unwrap_or_default()
                ),
            ),
            Answered::User(verb, user) => (
                (*verb).to_owned(),
                format!(
                    "<{verb}Result><User>{}</User></{verb}Result>",
                    members::user_xml(user)
                ),
            ),
            Answered::Users(users, marker) => {
                let members: String = users
                    .iter()
                    .map(|user| format!("<member>{}</member>", members::user_xml(user)))
                    .collect();
                let more = truncated_xml(marker);
                (
                    "ListUsers".to_owned(),
                    format!("<ListUsersResult><Users>{members}</Users>{more}</ListUsersResult>"),
                )
            }
            Answered::Group(verb, group, users) => {
                let users = users
                    .as_ref()
                    .map(|users| {
                        let members: String = users
                            .iter()
                            .map(|user| format!("<member>{}</member>", members::user_xml(user)))
                            .collect();
                        format!("<Users>{members}</Users><IsTruncated>false</IsTruncated>")
                    })
                    .unwrap_or_default();
                (
                    (*verb).to_owned(),
                    format!(
                        "<{verb}Result><Group>{}</Group>{users}</{verb}Result>",
                        groups::group_xml(group)
                    ),
                )
            }
            Answered::Groups(verb, found, marker) => {
                let members: String = found
                    .iter()
                    .map(|group| format!("<member>{}</member>", groups::group_xml(group)))
                    .collect();
                let more = truncated_xml(marker);
                (
                    (*verb).to_owned(),
                    format!("<{verb}Result><Groups>{members}</Groups>{more}</{verb}Result>"),
                )
            }
            Answered::Attached(of, arns) => {
                let members: String = arns
                    .iter()
                    .map(|arn| {
                        let name = crate::managed::find(arn).map_or("", |(name, _)| name);
                        format!(
                            "<member><PolicyName>{}</PolicyName><PolicyArn>{}</PolicyArn>\
                             </member>",
                            escape(name),
                            escape(arn)
                        )
                    })
                    .collect();
                let verb = format!("ListAttached{}Policies", of.word());
                let result = format!(
                    "<{verb}Result><AttachedPolicies>{members}</AttachedPolicies>\
                     <IsTruncated>false</IsTruncated></{verb}Result>"
                );
                (verb, result)
            }
            Answered::Key(user, key) => (
                "CreateAccessKey".to_owned(),
                format!(
                    "<CreateAccessKeyResult><AccessKey>{}<SecretAccessKey>{}</SecretAccessKey>\
                     </AccessKey></CreateAccessKeyResult>",
                    members::key_xml(user, key),
                    escape(&key.secret)
                ),
            ),
            Answered::Keys(user, keys) => {
                let members: String = keys
                    .iter()
                    .map(|key| format!("<member>{}</member>", members::key_xml(user, key)))
                    .collect();
                (
                    "ListAccessKeys".to_owned(),
                    format!(
                        "<ListAccessKeysResult><AccessKeyMetadata>{members}</AccessKeyMetadata>\
                         <IsTruncated>false</IsTruncated></ListAccessKeysResult>"
                    ),
                )
            }
            Answered::Summary(entries) => {
                let entries: String = entries
                    .iter()
                    .map(|(key, value)| {
                        format!("<entry><key>{key}</key><value>{value}</value></entry>")
                    })
                    .collect();
                (
                    "GetAccountSummary".to_owned(),
                    format!(
                        "<GetAccountSummaryResult><SummaryMap>{entries}</SummaryMap>\
                         </GetAccountSummaryResult>"
                    ),
                )
            }
            Answered::Session {
                access_key,
                session,
            } => (
                "GetSessionToken".to_owned(),
                format!(
                    "<GetSessionTokenResult>{}</GetSessionTokenResult>",
                    credentials_xml(access_key, session)
                ),
            ),
            Answered::Done(verb) => ((*verb).to_owned(), String::new()),
            Answered::Result(verb, inner) => (
                (*verb).to_owned(),
                format!("<{verb}Result>{inner}</{verb}Result>"),
            ),
            Answered::Nothing(verb) => ((*verb).to_owned(), format!("<{verb}Result/>")),
            Answered::Policy {
                of,
                holder,
                name,
                document,
            } => {
                let word = of.word();
                let inner = format!(
                    "<{word}Name>{}</{word}Name><PolicyName>{}</PolicyName>\
                     <PolicyDocument>{}</PolicyDocument>",
                    escape(holder),
                    escape(name),
                    url_encoded(document)
                );
                let verb = format!("Get{word}Policy");
                let result = format!("<{verb}Result>{inner}</{verb}Result>");
                (verb, result)
            }
            Answered::Names(of, names) => {
                let members: String = names
                    .iter()
                    .map(|n| format!("<member>{}</member>", escape(n)))
                    .collect();
                let verb = format!("List{}Policies", of.word());
                let result = format!(
                    "<{verb}Result><PolicyNames>{members}</PolicyNames>\
                     <IsTruncated>false</IsTruncated></{verb}Result>"
                );
                (verb, result)
            }
            Answered::Role(verb, role) => (
                (*verb).to_owned(),
                format!(
                    "<{verb}Result><Role>{}</Role></{verb}Result>",
                    roles::role_xml(role)
                ),
            ),
            Answered::Roles(found) => {
                let members: String = found
                    .iter()
                    .map(|role| format!("<member>{}</member>", roles::role_xml(role)))
                    .collect();
                (
                    "ListRoles".to_owned(),
                    format!(
                        "<ListRolesResult><Roles>{members}</Roles>\
                         <IsTruncated>false</IsTruncated></ListRolesResult>"
                    ),
                )
            }
            Answered::Assumed {
                access_key,
                session,
                role,
            } => (
                "AssumeRole".to_owned(),
                format!(
                    "<AssumeRoleResult>{}{}<PackedPolicySize>0</PackedPolicySize>\
                     </AssumeRoleResult>",
                    credentials_xml(access_key, session),
                    roles::assumed_xml(role, session)
                ),
            ),
        };
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<{verb}Response xmlns=\"{namespace}\">\
             {result}<ResponseMetadata><RequestId>{id}</RequestId></ResponseMetadata>\
             </{verb}Response>"
        )
    }
}

/// A policy document as IAM answers it: URL-encoded, spaces as `%20` (botocore decodes it).
fn url_encoded(document: &str) -> String {
    let encoded: String = form_urlencoded::byte_serialize(document.as_bytes()).collect();
    encoded.replace('+', "%20")
}

/// IAM's and STS's error body: the fault is the sender's, or the gateway's (`Receiver`) for
/// a 5xx.
fn error_xml(namespace: &str, status: StatusCode, code: &str, message: &str, id: &str) -> String {
    let fault = if status.is_server_error() {
        "Receiver"
    } else {
        "Sender"
    };
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ErrorResponse xmlns=\"{namespace}\">\
         <Error><Type>{fault}</Type><Code>{code}</Code><Message>{}</Message></Error>\
         <RequestId>{id}</RequestId></ErrorResponse>",
        escape(message)
    )
}

/// The verbs served on a user's policies.
#[derive(Clone, Copy)]
enum Verb {
    Put,
    Get,
    List,
    Delete,
    Attach,
    Detach,
    ListAttached,
}

/// The signer of an IAM or STS request, with the policies it acts with: a user's own and
/// its groups', or a role's for a role's session.
pub(super) struct Caller {
    /// The user who signed, or whose session signed.
    user: User,
    /// For a role's session: the role, and the session.
    role: Option<Assumed>,
    policies: Vec<Policy>,
    /// A role's session's own policy, which bounds the role's.
    session_policy: Option<Policy>,
}

/// A role's session, as its IAM requests are judged.
struct Assumed {
    role: Role,
    /// The session's ARN (`arn:aws:sts::ID:assumed-role/ROLE/SESSION`).
    arn: String,
    /// `ROLEID:SESSION` (`aws:userid`).
    id: String,
}

/// A policy of the signer that cannot be read (a managed policy no longer served) is the
/// gateway's failure, not the request's.
fn unreadable(e: Error) -> IamRefusal {
    tracing::error!("{e}");
    IamRefusal::Internal("a policy of the signer cannot be read".into())
}

impl Caller {
    /// `user`, with its policies read.
    async fn read(pool: &Pool, user: User) -> Result<Caller, IamRefusal> {
        let groups = crate::groups::of_user(pool, &user).await?;
        let policies = users::documents(&user, &groups)
            .and_then(|documents| users::read_documents(&documents, Policy::parse_identity))
            .map_err(unreadable)?;
        Ok(Caller {
            user,
            role: None,
            policies,
            session_policy: None,
        })
    }

    /// A session of `role` taken on by `user` as `taken` says, with the role's policies.
    fn of_role(user: User, role: Role, taken: &RoleTaken) -> Result<Caller, IamRefusal> {
        let policies = crate::roles::documents(&role)
            .and_then(|documents| users::read_documents(&documents, Policy::parse_role))
            .map_err(unreadable)?;
        let session_policy = taken
            .policy
            .as_deref()
            .map(|text| {
                Policy::parse_identity(text)
                    .map_err(|e| unreadable(Error::Corrupt(format!("a session's policy: {e}"))))
            })
            .transpose()?;
        let assumed = Assumed {
            arn: crate::roles::session_arn(&role, &taken.session_name),
            id: format!("{}:{}", role.id, taken.session_name),
            role,
        };
        Ok(Caller {
            user,
            role: Some(assumed),
            policies,
            session_policy,
        })
    }

    /// The account the caller acts in (its id): a role's session's role's, else the
    /// user's; none for the operator's users and their roles' sessions.
    fn account(&self) -> Option<&str> {
        match &self.role {
            Some(assumed) => assumed.role.account.as_deref(),
            None => self.user.account.as_ref().map(|a| a.account.as_str()),
        }
    }

    /// The user who signed, unless a role's session did (the verbs that act on the caller
    /// act on them).
    fn signing_user(&self) -> Option<&User> {
        self.role.is_none().then_some(&self.user)
    }

    /// Whether the caller is an account's root, who may do anything in its account.
    fn is_root(&self) -> bool {
        self.signing_user()
            .and_then(|user| user.account.as_ref())
            .is_some_and(|member| member.root)
    }

    /// The ARN the caller acts as: the user's, or the role's session's.
    fn arn(&self) -> String {
        match &self.role {
            Some(assumed) => assumed.arn.clone(),
            None => crate::accounts::arn(&self.user),
        }
    }
}

/// Checks the request's signature and whether its signer may do what it asks, then does it.
async fn act(
    pool: &Pool,
    service: Service,
    parts: &hyper::http::request::Parts,
    body: &[u8],
) -> Result<Answered, IamRefusal> {
    let mut params = Params::new();
    let query = parts.uri.query().unwrap_or("").as_bytes();
    for (name, value) in form_urlencoded::parse(query).chain(form_urlencoded::parse(body)) {
        params.insert(name.into_owned(), value.into_owned());
    }
    let param = |name: &'static str| param(&params, name);
    let verb = param("Action")?;
    let from = parts
        .extensions
        .get::<Peer>()
        .map(|peer| (peer.secure, peer.address.ip()));
    if service == Service::Sts && verb == "AssumeRoleWithWebIdentity" {
        return roles::assume_with_web_identity(pool, &params, from).await;
    }
    let holder = signed_by(pool, parts, body, time::OffsetDateTime::now_utc()).await?;
    if service == Service::Sts {
        return sts(pool, &holder, verb, &params, from).await;
    }
    // As in AWS, a role's session reaches IAM with the role's policies, a user's session
    // (GetSessionToken's, with no MFA) does not.
    let signer = match holder {
        Holder::User { user, .. } => Caller::read(pool, user).await?,
        Holder::Session {
            user,
            role: Some(role),
            session: Session {
                role: Some(taken), ..
            },
        } => Caller::of_role(user, *role, &taken)?,
        Holder::Session { user, .. } => {
            return Err(IamRefusal::Denied {
                who: crate::accounts::arn(&user),
                action: "IAM's API with a user's session's keys",
            })
        }
    };
    if members::VERBS.contains(&verb) {
        return members::act(pool, &signer, verb, &params, from).await;
    }
    if groups::VERBS.contains(&verb) {
        return groups::act(pool, &signer, verb, &params, from).await;
    }
    if roles::VERBS.contains(&verb) {
        return roles::act(pool, &signer, verb, &params, from).await;
    }
    if oidc::VERBS.contains(&verb) {
        return oidc::act(pool, &signer, verb, &params, from).await;
    }
    let (verb, action) = match verb {
        "PutUserPolicy" => (Verb::Put, Action::PutUserPolicy),
        "GetUserPolicy" => (Verb::Get, Action::GetUserPolicy),
        "ListUserPolicies" => (Verb::List, Action::ListUserPolicies),
        "DeleteUserPolicy" => (Verb::Delete, Action::DeleteUserPolicy),
        "AttachUserPolicy" => (Verb::Attach, Action::AttachUserPolicy),
        "DetachUserPolicy" => (Verb::Detach, Action::DetachUserPolicy),
        "ListAttachedUserPolicies" => (Verb::ListAttached, Action::ListAttachedUserPolicies),
        other => return Err(IamRefusal::UnknownAction(other.into())),
    };
    let user = param("UserName")?;
    // An account's root or user acts on its account's users; the operator's users on
    // theirs. The caller is judged before learning whether the user exists.
    let (record, resource) = match signer.account() {
        Some(account) => {
            let found = crate::accounts::member(pool, account, user).await?;
            let resource = match &found {
                Some(found) => crate::accounts::arn(found),
                None => crate::accounts::member_arn(account, "/", user),
            };
            (crate::layout::member_name(account, user), resource)
        }
        None => (user.to_owned(), policy::user_resource(user)),
    };
    may(&signer, action, &resource, from)?;
    // An operator's user reaches the operator's users alone, whatever name it gives.
    let found = users::get(pool, &record).await?;
    let reached = found.filter(|found| found.account.is_some() == signer.account().is_some());
    let Some(target) = reached else {
        return Err(IamRefusal::NoSuchEntity(format!("user {user}")));
    };
    let record = record.as_str();
    let no_user = |e: Error| match e {
        Error::NotFound(_) => Error::NotFound(format!("user {user}")),
        e => e,
    };
    Ok(match verb {
        Verb::Put => {
            let document = param("PolicyDocument")?;
            users::set_policy(pool, record, user, param("PolicyName")?, Some(document))
                .await
                .map_err(no_user)?;
            Answered::Done("PutUserPolicy")
        }
        Verb::Delete => {
            users::set_policy(pool, record, user, param("PolicyName")?, None).await?;
            Answered::Done("DeleteUserPolicy")
        }
        Verb::Get => {
            let name = param("PolicyName")?;
            let document = target
                .policy(name)
                .ok_or_else(|| IamRefusal::NoSuchEntity(format!("policy {name} of user {user}")))?
                .to_owned();
            Answered::Policy {
                of: Holding::User,
                holder: user.into(),
                name: name.into(),
                document,
            }
        }
        Verb::List => Answered::Names(
            Holding::User,
            target.policies.into_iter().map(|(name, _)| name).collect(),
        ),
        Verb::Attach | Verb::Detach => {
            let attach = matches!(verb, Verb::Attach);
            users::attach(pool, record, user, param("PolicyArn")?, attach).await?;
            Answered::Done(if attach {
                "AttachUserPolicy"
            } else {
                "DetachUserPolicy"
            })
        }
        Verb::ListAttached => Answered::Attached(Holding::User, target.attached),
    })
}

/// The page of `found` (in the order of `key`) after `Marker`, at most `MaxItems` (IAM's
/// default 100, at most 1,000), with the marker of the next page when there is one.
fn page<T>(
    found: Vec<T>,
    key: impl Fn(&T) -> String,
    params: &Params,
) -> Result<(Vec<T>, Option<String>), IamRefusal> {
    const LIST_MAX: usize = 1000;
    const LIST_DEFAULT: usize = 100;
    let most = match params.get("MaxItems") {
        None => LIST_DEFAULT,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=LIST_MAX).contains(&n) => n,
            _ => {
                return Err(IamRefusal::Invalid(format!(
                    "MaxItems {text:?}: from 1 to {LIST_MAX}"
                )))
            }
        },
    };
    let after = params.get("Marker");
    let mut page: Vec<T> = found
        .into_iter()
        .filter(|item| after.is_none_or(|marker| key(item).as_str() > marker.as_str()))
        .take(most + 1)
        .collect();
    let more = page.len() > most;
    page.truncate(most);
    let marker = more.then(|| page.last().map(&key)).flatten();
    Ok((page, marker))
}

/// A request's parameters, by name.
type Params = BTreeMap<String, String>;

/// Where a request came from: over TLS or not, and from which address.
type Origin = Option<(bool, std::net::IpAddr)>;

/// The refusal of `verb`, which acts in an account, to a user in none (the operator's).
fn outside_accounts(verb: &str) -> IamRefusal {
    IamRefusal::Invalid(format!(
        "{verb} acts in an account: an account's root or user may use it (the operator makes \
         accounts with `coffer account create`)"
    ))
}

/// Parameter `name` of `params`, which the verb needs.
fn param<'a>(params: &'a Params, name: &'static str) -> Result<&'a str, IamRefusal> {
    params
        .get(name)
        .map(String::as_str)
        .ok_or(IamRefusal::Missing(name))
}

/// Parameter `name` of `params` as a number of seconds, if given.
fn seconds(params: &Params, name: &'static str) -> Result<Option<u64>, IamRefusal> {
    params
        .get(name)
        .map(|text| {
            text.parse()
                .map_err(|_| IamRefusal::Invalid(format!("{name} {text:?} is not a number")))
        })
        .transpose()
}

/// STS's verbs: GetCallerIdentity for any signer, GetSessionToken for a user (not a
/// session) whose own policies do not deny it, AssumeRole ([`roles::assume`]).
async fn sts(
    pool: &Pool,
    holder: &Holder,
    verb: &str,
    params: &Params,
    from: Origin,
) -> Result<Answered, IamRefusal> {
    let user = holder.user();
    match verb {
        "GetCallerIdentity" => Ok(match (holder.role(), holder.session()) {
            (Some(role), Some(session)) => roles::caller(role, session),
            _ => Answered::Caller {
                arn: crate::accounts::arn(user),
                id: user
                    .account
                    .as_ref()
                    .map_or(&user.name, |member| &member.id)
                    .clone(),
                account: user.account.as_ref().map(|member| member.account.clone()),
            },
        }),
        "AssumeRole" => roles::assume(pool, holder, params, from).await,
        "GetSessionToken" => {
            if holder.session().is_some() {
                return Err(IamRefusal::Denied {
                    who: crate::accounts::arn(user),
                    action: "GetSessionToken with a session's keys",
                });
            }
            let action = Action::GetSessionToken;
            let caller = Caller::read(pool, user.clone()).await?;
            if verdict(&caller, action, "*", from)? == Verdict::Denied {
                return Err(IamRefusal::Denied {
                    who: crate::accounts::arn(user),
                    action: action.name(),
                });
            }
            let seconds = users::session_seconds(seconds(params, "DurationSeconds")?, None)?;
            let now = crate::layout::now_ns();
            let (access_key, session) =
                users::create_session(pool, user, None, seconds, now).await?;
            Ok(Answered::Session {
                access_key,
                session,
            })
        }
        other => Err(IamRefusal::UnknownAction(other.into())),
    }
}

/// What `caller`'s policies say of `action` on `resource`.
fn verdict(
    caller: &Caller,
    action: Action,
    resource: &str,
    from: Origin,
) -> Result<Verdict, IamRefusal> {
    let now = time::OffsetDateTime::now_utc();
    Ok(match &caller.role {
        Some(assumed) => {
            // As S3 judges the session: no user name, the session's id, `AssumedRole`.
            let mut context = policy::common_context(now, from, None);
            context.insert("aws:userid".into(), vec![assumed.id.clone()]);
            context.insert("aws:principaltype".into(), vec!["AssumedRole".into()]);
            context.insert("sts:authentication".into(), vec!["true".into()]);
            let asked = Asked {
                principal: Some(&assumed.arn),
                action,
                resource,
                context: &context,
                account: None,
                role: None,
            };
            policy::judge_role(&caller.policies, caller.session_policy.as_ref(), &asked)
        }
        None => {
            let signer = &caller.user;
            let shown = crate::accounts::shown(signer);
            let context = policy::common_context(now, from, Some(shown));
            let asked = Asked {
                principal: Some(&signer.name),
                action,
                resource,
                context: &context,
                account: None,
                role: None,
            };
            policy::judge_all(&caller.policies, &asked)
        }
    })
}

/// Refuses `action` on `resource` unless the signer's policies allow it; an account's root
/// may do anything (the resources of the verbs it reaches are its account's).
fn may(signer: &Caller, action: Action, resource: &str, from: Origin) -> Result<(), IamRefusal> {
    if signer.is_root() {
        return Ok(());
    }
    match verdict(signer, action, resource, from)? {
        Verdict::Allowed => Ok(()),
        Verdict::Denied | Verdict::Silent => Err(IamRefusal::Denied {
            who: signer.arn(),
            action: action.name(),
        }),
    }
}

/// Who holds the key whose SigV4 signature `parts` and `body` carry, checked at `now`;
/// a session's request must carry its token, before the session expires.
async fn signed_by(
    pool: &Pool,
    parts: &hyper::http::request::Parts,
    body: &[u8],
    now: time::OffsetDateTime,
) -> Result<Holder, IamRefusal> {
    let signed = Signed {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query().unwrap_or(""),
        headers: &parts.headers,
        body,
    };
    let (authorization, stamp) = signed.read(now)?;
    let holder = users::holder(pool, authorization.access_key)
        .await?
        .ok_or(IamRefusal::UnknownKey)?;
    signed.check(&authorization, stamp, holder.secret_key())?;
    if let Some(session) = holder.session() {
        let token = parts
            .headers
            .get("x-amz-security-token")
            .map(|v| v.as_bytes());
        let matches = token.is_some_and(|token| {
            aws_lc_rs::constant_time::verify_slices_are_equal(token, session.token.as_bytes())
                .is_ok()
        });
        if !matches {
            return Err(IamRefusal::Token(
                "the request does not carry its session's token".into(),
            ));
        }
        if session.is_expired(u64::try_from(now.unix_timestamp_nanos()).unwrap_or(u64::MAX)) {
            return Err(IamRefusal::Expired);
        }
    }
    Ok(holder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_iam_s_xml_with_the_document_url_encoded() {
        let got = Answered::Policy {
            of: Holding::User,
            holder: "bob".into(),
            name: "all".into(),
            document: r#"{"a": "b&c"}"#.into(),
        }
        .xml(IAM_NAMESPACE, "ID");
        assert!(
            got.contains(
                "<GetUserPolicyResult><UserName>bob</UserName><PolicyName>all</PolicyName>\
                 <PolicyDocument>%7B%22a%22%3A%20%22b%26c%22%7D</PolicyDocument>"
            ),
            "{got}"
        );
        assert!(got.ends_with(
            "<ResponseMetadata><RequestId>ID</RequestId></ResponseMetadata></GetUserPolicyResponse>"
        ));
        let (status, code, _) = IamRefusal::from(Error::NotFound("user x".into())).parts();
        assert_eq!((status, code), (StatusCode::NOT_FOUND, "NoSuchEntity"));
        let error = error_xml(IAM_NAMESPACE, status, code, "user x does not exist", "ID");
        assert!(
            error.contains("<Type>Sender</Type><Code>NoSuchEntity</Code>"),
            "{error}"
        );
        let (status, code, _) = IamRefusal::from(Error::Invalid("DurationSeconds".into())).parts();
        assert_eq!((status, code), (StatusCode::BAD_REQUEST, "ValidationError"));
        let (status, code, _) = IamRefusal::from(Error::Busy("user x".into())).parts();
        assert_eq!(
            (status, code),
            (StatusCode::CONFLICT, "ConcurrentModification")
        );
        let caller = Answered::Caller {
            arn: policy::user_resource("ann"),
            id: "ann".into(),
            account: None,
        }
        .xml(STS_NAMESPACE, "ID");
        assert!(caller.contains(
            "<GetCallerIdentityResult><Arn>arn:aws:iam:::user/ann</Arn><UserId>ann</UserId>"
        ));
        let session = Answered::Session {
            access_key: "CSKEY".into(),
            session: Session {
                user: "ann".into(),
                user_created_ns: 1,
                secret_key: "SECRET".into(),
                token: "TOKEN".into(),
                expires_ns: 1_796_040_000_000_000_000,
                role: None,
            },
        }
        .xml(STS_NAMESPACE, "ID");
        assert!(
            session.contains(
                "<Credentials><AccessKeyId>CSKEY</AccessKeyId><SecretAccessKey>SECRET\
             </SecretAccessKey><SessionToken>TOKEN</SessionToken><Expiration>\
             2026-11-30T12:00:00Z</Expiration></Credentials>"
            ),
            "{session}"
        );
        let failed = IamRefusal::Internal("x".into()).parts();
        assert!(
            error_xml(STS_NAMESPACE, failed.0, failed.1, &failed.2, "ID")
                .contains("<Type>Receiver</Type>")
        );
    }
}
