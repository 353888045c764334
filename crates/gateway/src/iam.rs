//! The IAM query API, as far as users' own (inline) policies go: PutUserPolicy,
//! GetUserPolicy, ListUserPolicies and DeleteUserPolicy, as aws-cli, boto3 and the SDKs send
//! them: a form-encoded POST to `/`, signed with SigV4 for the service `iam`. s3s checks
//! signatures for S3 alone, so this module checks these itself (SigV4 from aws-lc-rs's HMAC
//! and SHA-256) and answers in IAM's XML, with IAM's error codes chosen in [`Refusal`].
//!
//! A caller may use a verb on user U when their own policies allow `iam:VERB` on
//! `arn:aws:iam:::user/U`; the operator attaches the first such policy with
//! `coffer user policy put`.

use std::collections::BTreeMap;

use aws_lc_rs::{constant_time, digest, hmac};
use client::Pool;
use hyper::{HeaderMap, StatusCode};
use s3s::HttpResponse;

use crate::layout::{hex, User};
use crate::policy::{self, Action, Asked, Verdict};
use crate::serve::Peer;
use crate::{users, Error};

/// The largest request body taken: a policy of 20 KiB, form-encoded, and the rest.
const BODY_BYTES_MAX: usize = 128 * 1024;
/// How far a request's date may be from the gateway's clock (SigV4's 15 minutes).
const SKEW_SECONDS_MAX: i64 = 15 * 60;
/// IAM's XML namespace.
const NAMESPACE: &str = "https://iam.amazonaws.com/doc/2010-05-08/";

/// Whether `headers` carry a SigV4 signature for the service `iam`.
pub(crate) fn is_iam(headers: &HeaderMap) -> bool {
    headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| Authorization::parse(v).ok())
        .is_some_and(|a| a.service == "iam")
}

/// Why an IAM request is refused: the one place IAM's codes are chosen.
#[derive(Debug)]
enum Refusal {
    Malformed(String),
    UnknownKey,
    Signature(String),
    Denied { who: String, action: &'static str },
    UnknownAction(String),
    Missing(&'static str),
    Invalid(String),
    Document(String),
    TooLarge(String),
    NoSuchEntity(String),
    Internal(String),
}

impl Refusal {
    fn parts(&self) -> (StatusCode, &'static str, String) {
        use Refusal::*;
        match self {
            Malformed(why) => (StatusCode::BAD_REQUEST, "IncompleteSignature", why.clone()),
            UnknownKey => (
                StatusCode::FORBIDDEN,
                "InvalidClientTokenId",
                "The security token included in the request is invalid.".into(),
            ),
            Signature(why) => (StatusCode::FORBIDDEN, "SignatureDoesNotMatch", why.clone()),
            Denied { who, action } => (
                StatusCode::FORBIDDEN,
                "AccessDenied",
                format!("user {who} is not allowed {action}"),
            ),
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

impl From<Error> for Refusal {
    fn from(e: Error) -> Refusal {
        match e {
            Error::NotFound(what) => Refusal::NoSuchEntity(what),
            Error::UserPolicy(users::PolicyRefusal::Name(name)) => {
                Refusal::Invalid(users::PolicyRefusal::Name(name).to_string())
            }
            Error::UserPolicy(users::PolicyRefusal::Document(why)) => Refusal::Document(why),
            Error::UserPolicy(too_large) => Refusal::TooLarge(too_large.to_string()),
            e => {
                tracing::warn!("IAM: {e}");
                Refusal::Internal(e.to_string())
            }
        }
    }
}

/// The answer to the IAM request `request`, which [`is_iam`] picked out; `id` is its
/// request id.
pub(crate) async fn answer(
    pool: &Pool,
    request: hyper::Request<hyper::body::Incoming>,
    id: &str,
) -> HttpResponse {
    let (parts, body) = request.into_parts();
    let mut body = s3s::Body::from(body);
    let outcome = match body.store_all_limited(BODY_BYTES_MAX).await {
        Ok(body) => act(pool, &parts, &body).await,
        Err(e) => Err(Refusal::Invalid(format!("the request body: {e}"))),
    };
    let (status, xml) = match outcome {
        Ok(answered) => (StatusCode::OK, answered.xml(id)),
        Err(refused) => {
            let (status, code, message) = refused.parts();
            tracing::debug!(request_id = id, code, message, "IAM error");
            (status, error_xml(code, &message, id))
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
    Policy {
        user: String,
        name: String,
        document: String,
    },
    Names(Vec<String>),
}

impl Answered {
    fn xml(&self, id: &str) -> String {
        let (verb, result) = match self {
            Answered::Done(verb) => (*verb, String::new()),
            Answered::Policy {
                user,
                name,
                document,
            } => {
                let encoded: String =
                    form_urlencoded::byte_serialize(document.as_bytes()).collect();
                let inner = format!(
                    "<UserName>{}</UserName><PolicyName>{}</PolicyName>\
                     <PolicyDocument>{}</PolicyDocument>",
                    escape(user),
                    escape(name),
                    encoded.replace('+', "%20")
                );
                (
                    "GetUserPolicy",
                    format!("<GetUserPolicyResult>{inner}</GetUserPolicyResult>"),
                )
            }
            Answered::Names(names) => {
                let members: String = names
                    .iter()
                    .map(|n| format!("<member>{}</member>", escape(n)))
                    .collect();
                (
                    "ListUserPolicies",
                    format!(
                        "<ListUserPoliciesResult><PolicyNames>{members}</PolicyNames>\
                         <IsTruncated>false</IsTruncated></ListUserPoliciesResult>"
                    ),
                )
            }
        };
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<{verb}Response xmlns=\"{NAMESPACE}\">\
             {result}<ResponseMetadata><RequestId>{id}</RequestId></ResponseMetadata>\
             </{verb}Response>"
        )
    }
}

fn error_xml(code: &str, message: &str, id: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ErrorResponse xmlns=\"{NAMESPACE}\">\
         <Error><Type>Sender</Type><Code>{code}</Code><Message>{}</Message></Error>\
         <RequestId>{id}</RequestId></ErrorResponse>",
        escape(message)
    )
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Checks the request's signature and whether its signer may do what it asks, then does it.
async fn act(
    pool: &Pool,
    parts: &hyper::http::request::Parts,
    body: &[u8],
) -> Result<Answered, Refusal> {
    let signer = signed_by(pool, parts, body, time::OffsetDateTime::now_utc()).await?;
    let mut params: BTreeMap<String, String> = BTreeMap::new();
    let query = parts.uri.query().unwrap_or("").as_bytes();
    for (name, value) in form_urlencoded::parse(query).chain(form_urlencoded::parse(body)) {
        params.insert(name.into_owned(), value.into_owned());
    }
    let param = |name: &'static str| {
        params
            .get(name)
            .map(String::as_str)
            .ok_or(Refusal::Missing(name))
    };
    let verb = param("Action")?;
    let action = match verb {
        "PutUserPolicy" => Action::PutUserPolicy,
        "GetUserPolicy" => Action::GetUserPolicy,
        "ListUserPolicies" => Action::ListUserPolicies,
        "DeleteUserPolicy" => Action::DeleteUserPolicy,
        other => return Err(Refusal::UnknownAction(other.into())),
    };
    let user = param("UserName")?;
    let from = parts
        .extensions
        .get::<Peer>()
        .map(|peer| (peer.secure, peer.address.ip()));
    may(&signer, action, user, from)?;
    let target = || async {
        users::get(pool, user)
            .await?
            .ok_or_else(|| Error::NotFound(format!("user {user}")))
    };
    Ok(match action {
        Action::PutUserPolicy => {
            users::put_policy(pool, user, param("PolicyName")?, param("PolicyDocument")?).await?;
            Answered::Done("PutUserPolicy")
        }
        Action::DeleteUserPolicy => {
            users::delete_policy(pool, user, param("PolicyName")?).await?;
            Answered::Done("DeleteUserPolicy")
        }
        Action::GetUserPolicy => {
            let name = param("PolicyName")?;
            let found = target().await?;
            let document = found
                .policies
                .into_iter()
                .find(|(given, _)| given == name)
                .map(|(_, document)| document)
                .ok_or_else(|| Refusal::NoSuchEntity(format!("policy {name} of user {user}")))?;
            Answered::Policy {
                user: user.into(),
                name: name.into(),
                document,
            }
        }
        _ => Answered::Names(
            target()
                .await?
                .policies
                .into_iter()
                .map(|(name, _)| name)
                .collect(),
        ),
    })
}

/// Refuses `action` on user `user` unless the signer's own policies allow it.
fn may(
    signer: &User,
    action: Action,
    user: &str,
    from: Option<(bool, std::net::IpAddr)>,
) -> Result<(), Refusal> {
    let mut policies = Vec::with_capacity(signer.policies.len());
    for (name, text) in &signer.policies {
        let parsed = policy::Policy::parse_identity(text).map_err(|e| {
            Refusal::Internal(format!("policy {name} of user {}: {e}", signer.name))
        })?;
        policies.push(parsed);
    }
    let context = policy::common_context(time::OffsetDateTime::now_utc(), from, Some(&signer.name));
    let resource = policy::user_resource(user);
    let asked = Asked {
        principal: Some(&signer.name),
        action,
        resource: &resource,
        context: &context,
    };
    match policy::judge_all(&policies, &asked) {
        Verdict::Allowed => Ok(()),
        Verdict::Denied | Verdict::Silent => Err(Refusal::Denied {
            who: signer.name.clone(),
            action: action.name(),
        }),
    }
}

/// The user whose SigV4 signature `parts` and `body` carry, checked at `now`.
async fn signed_by(
    pool: &Pool,
    parts: &hyper::http::request::Parts,
    body: &[u8],
    now: time::OffsetDateTime,
) -> Result<User, Refusal> {
    let header = parts
        .headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or(Refusal::Missing("Authorization"))?;
    let authorization = Authorization::parse(header).map_err(Refusal::Malformed)?;
    let stamp = parts
        .headers
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .ok_or(Refusal::Missing("X-Amz-Date"))?;
    check_date(stamp, authorization.date, now)?;
    let user = users::by_access_key(pool, authorization.access_key)
        .await?
        .ok_or(Refusal::UnknownKey)?;
    let payload = hex(digest::digest(&digest::SHA256, body).as_ref());
    if let Some(given) = parts.headers.get("x-amz-content-sha256") {
        if given.as_bytes() != payload.as_bytes() {
            return Err(Refusal::Signature(
                "x-amz-content-sha256 is not the body's SHA-256".into(),
            ));
        }
    }
    let canonical = canonical_request(
        parts.method.as_str(),
        parts.uri.path(),
        parts.uri.query().unwrap_or(""),
        &parts.headers,
        &authorization.signed_headers,
        &payload,
    )?;
    let want = signature(&user.secret_key, stamp, &authorization, &canonical);
    constant_time::verify_slices_are_equal(want.as_bytes(), authorization.signature.as_bytes())
        .map_err(|_| {
            Refusal::Signature(
                "The request signature we calculated does not match the signature you \
                 provided."
                    .into(),
            )
        })?;
    Ok(user)
}

/// Checks that the request's date `stamp` (`20261130T120000Z`) is the credential's day and
/// within [`SKEW_SECONDS_MAX`] of `now`.
fn check_date(stamp: &str, day: &str, now: time::OffsetDateTime) -> Result<(), Refusal> {
    let at = sigv4_date(stamp)
        .ok_or_else(|| Refusal::Malformed(format!("X-Amz-Date {stamp:?} is not a SigV4 date")))?;
    if !stamp.starts_with(day) {
        return Err(Refusal::Signature(format!(
            "the credential's date {day} is not the request's ({stamp})"
        )));
    }
    if (now - at).whole_seconds().abs() > SKEW_SECONDS_MAX {
        return Err(Refusal::Signature(format!(
            "Signature expired: {stamp} is more than 15 minutes from the gateway's time"
        )));
    }
    Ok(())
}

/// A SigV4 date, `20261130T120000Z`.
fn sigv4_date(stamp: &str) -> Option<time::OffsetDateTime> {
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        let text = stamp.get(range)?;
        text.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| text.parse().ok())?
    };
    if stamp.len() != 16 || stamp.get(8..9) != Some("T") || stamp.get(15..) != Some("Z") {
        return None;
    }
    let month = time::Month::try_from(u8::try_from(digits(4..6)?).ok()?).ok()?;
    let date =
        time::Date::from_calendar_date(digits(0..4)? as i32, month, digits(6..8)? as u8).ok()?;
    let clock = time::Time::from_hms(
        digits(9..11)? as u8,
        digits(11..13)? as u8,
        digits(13..15)? as u8,
    )
    .ok()?;
    Some(time::PrimitiveDateTime::new(date, clock).assume_utc())
}

/// A SigV4 `Authorization` header's parts.
#[derive(Debug, PartialEq)]
struct Authorization<'a> {
    access_key: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

impl<'a> Authorization<'a> {
    fn parse(header: &'a str) -> Result<Authorization<'a>, String> {
        let rest = header
            .strip_prefix("AWS4-HMAC-SHA256 ")
            .ok_or("the Authorization header is not AWS4-HMAC-SHA256")?;
        let (mut credential, mut signed, mut signature) = (None, None, None);
        for part in rest.split(',') {
            match part.trim().split_once('=') {
                Some(("Credential", value)) => credential = Some(value),
                Some(("SignedHeaders", value)) => signed = Some(value),
                Some(("Signature", value)) => signature = Some(value),
                _ => return Err(format!("Authorization has an unknown part {part:?}")),
            }
        }
        let credential = credential.ok_or("Authorization has no Credential")?;
        let scope: Vec<&str> = credential.split('/').collect();
        let [access_key, date, region, service, "aws4_request"] = scope[..] else {
            return Err(format!(
                "the Credential {credential:?} is not KEY/DATE/REGION/SERVICE/aws4_request"
            ));
        };
        Ok(Authorization {
            access_key,
            date,
            region,
            service,
            signed_headers: signed
                .ok_or("Authorization has no SignedHeaders")?
                .split(';')
                .collect(),
            signature: signature.ok_or("Authorization has no Signature")?,
        })
    }
}

/// SigV4's canonical request; the request's path is taken as the client encoded it.
fn canonical_request(
    method: &str,
    path: &str,
    query: &str,
    headers: &HeaderMap,
    signed: &[&str],
    payload: &str,
) -> Result<String, Refusal> {
    let mut pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .map(|(name, value)| (uri_encode(&name), uri_encode(&value)))
        .collect();
    pairs.sort();
    let query: Vec<String> = pairs
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    let mut canonical_headers = String::new();
    for name in signed {
        let values: Vec<String> = headers
            .get_all(*name)
            .iter()
            .map(|v| {
                let text = String::from_utf8_lossy(v.as_bytes());
                text.split_whitespace().collect::<Vec<_>>().join(" ")
            })
            .collect();
        if values.is_empty() {
            return Err(Refusal::Signature(format!(
                "signed header {name} is not in the request"
            )));
        }
        canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    let path = if path.is_empty() { "/" } else { path };
    Ok(format!(
        "{method}\n{path}\n{}\n{canonical_headers}\n{}\n{payload}",
        query.join("&"),
        signed.join(";")
    ))
}

/// RFC 3986 encoding as SigV4 wants it: everything but unreserved characters.
fn uri_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The signature, in hex, of `canonical` dated `stamp` under `authorization`'s scope.
fn signature(secret: &str, stamp: &str, authorization: &Authorization, canonical: &str) -> String {
    let sign = |key: &[u8], data: &str| {
        hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
    };
    let scope = format!(
        "{}/{}/{}/aws4_request",
        authorization.date, authorization.region, authorization.service
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
    );
    let day = sign(format!("AWS4{secret}").as_bytes(), authorization.date);
    let region = sign(day.as_ref(), authorization.region);
    let service = sign(region.as_ref(), authorization.service);
    let key = sign(service.as_ref(), "aws4_request");
    hex(sign(key.as_ref(), &to_sign).as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's SigV4 test suite, `get-vanilla`.
    #[test]
    fn signatures_match_aws_s_test_suite() {
        let header = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/\
                      aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73e\
                      bf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31";
        let authorization = Authorization::parse(header).expect("parsed");
        assert_eq!(authorization.service, "service");
        let mut headers = HeaderMap::new();
        headers.insert("host", "example.amazonaws.com".parse().expect("value"));
        headers.insert("x-amz-date", "20150830T123600Z".parse().expect("value"));
        let empty = hex(digest::digest(&digest::SHA256, b"").as_ref());
        let canonical = canonical_request(
            "GET",
            "/",
            "",
            &headers,
            &authorization.signed_headers,
            &empty,
        )
        .expect("canonical");
        assert_eq!(
            signature(
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                "20150830T123600Z",
                &authorization,
                &canonical
            ),
            authorization.signature
        );
        let unsigned = canonical_request("GET", "/", "", &headers, &["host", "x-amz-meta"], &empty);
        assert!(matches!(unsigned, Err(Refusal::Signature(_))));
    }

    #[test]
    fn dates_must_be_the_credentials_day_and_near_the_clock() {
        let now = sigv4_date("20261130T120000Z").expect("a date");
        assert_eq!(now.unix_timestamp(), 1_796_040_000);
        assert!(check_date("20261130T120500Z", "20261130", now).is_ok());
        assert!(matches!(
            check_date("20261130T121600Z", "20261130", now),
            Err(Refusal::Signature(_))
        ));
        assert!(matches!(
            check_date("20261130T120000Z", "20261129", now),
            Err(Refusal::Signature(_))
        ));
        assert!(matches!(
            check_date("2026-11-30", "20261130", now),
            Err(Refusal::Malformed(_))
        ));
        assert!(
            Authorization::parse("AWS4-HMAC-SHA256 Credential=K/20261130/us-east-1/iam").is_err()
        );
        assert!(Authorization::parse("AWS K:sig").is_err());
    }

    #[test]
    fn answers_are_iam_s_xml_with_the_document_url_encoded() {
        let got = Answered::Policy {
            user: "bob".into(),
            name: "all".into(),
            document: r#"{"a": "b&c"}"#.into(),
        }
        .xml("ID");
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
        let (status, code, _) = Refusal::from(Error::NotFound("user x".into())).parts();
        assert_eq!((status, code), (StatusCode::NOT_FOUND, "NoSuchEntity"));
        let error = error_xml(code, "user x does not exist", "ID");
        assert!(error.contains("<Code>NoSuchEntity</Code>"), "{error}");
    }
}
