//! POST Object: an upload by an HTML form (`multipart/form-data` posted to a bucket's URL),
//! as web pages send them. The gateway reads the form itself, so that it is judged as S3
//! judges it: the policy's expiration an ISO 8601 time in UTC, every field of the form
//! named by a condition of its policy (but the signature's own and `x-ignore-` ones), a
//! condition not met or a field not named refused 403 before anything is written,
//! `${filename}` in the key the file's name, the `tagging` field S3's XML, and the answer
//! a redirection, a 201 with the object's place, or a 204, as the form asks. The upload is
//! then a PutObject of its signer (or an anonymous one), decided as any other.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use aws_lc_rs::{constant_time, hmac};
use base64::Engine;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use s3s::auth::{Credentials, S3Auth};
use s3s::dto::{
    PutObjectInput, PutObjectOutput, StreamingBlob, Tagging, Timestamp, TimestampFormat,
};
use s3s::{S3Request, S3Result};

use super::error::Refusal;
use super::Gateway;
use crate::serve::escape;

/// What the fields before the file may weigh together, names and values (S3 allows 20 KB;
/// policies with many conditions, and their signatures, fit well under this).
const FIELDS_BYTES_MAX: usize = 64 << 10;

/// How many fields may come before the file.
const FIELDS_MAX: usize = 1000;

/// What the body may carry before the file begins: the fields with their parts' headers
/// and framing, and what the reader takes ahead. A part's headers are buffered whole by
/// the reader, so this bounds them too.
const PRELUDE_BYTES_MAX: u64 = 1 << 20;

/// The condition keys a form's upload is judged with besides its fields (`s3:authType` is
/// `POST`): how it was signed, `s3:signatureversion`, if it was.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Posted {
    pub signature: Option<&'static str>,
}

/// The bucket `request` posts a form to: a POST of `multipart/form-data` to a bucket's own
/// path, without a query; `None` for every other request.
pub(crate) fn form_bucket<B>(request: &hyper::Request<B>) -> Option<String> {
    if request.method() != hyper::Method::POST
        || request.uri().query().is_some_and(|query| !query.is_empty())
    {
        return None;
    }
    let content_type = request.headers().get(hyper::header::CONTENT_TYPE)?;
    let is_form = content_type
        .to_str()
        .ok()?
        .trim_start()
        .get(..19)
        .is_some_and(|kind| kind.eq_ignore_ascii_case("multipart/form-data"));
    let path = request.uri().path().strip_prefix('/')?;
    let bucket = path.strip_suffix('/').unwrap_or(path);
    (is_form && !bucket.is_empty() && !bucket.contains('/')).then(|| bucket.to_owned())
}

/// The gateway's answer to the form `request` posts to `bucket`.
pub(crate) async fn answer(
    gw: &Gateway,
    bucket: String,
    request: hyper::Request<hyper::body::Incoming>,
) -> S3Result<s3s::HttpResponse> {
    let (parts, body) = request.into_parts();
    let content_type = parts
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let boundary = multer::parse_boundary(content_type)
        .map_err(|e| Refusal::PostForm(format!("the form's Content-Type: {e}")))?;
    let (mut form, file) = read_form(s3s::Body::from(body), boundary).await?;
    form.name_file();
    let credential = Credential::of(&form)?;
    let posted = Posted {
        signature: credential.as_ref().map(Credential::version),
    };
    let (credentials, length) = match (credential, form.get("policy")) {
        (None, None) => (None, None),
        (Some(_), None) => {
            return Err(Refusal::Invalid("a signed form carries its policy".into()).into())
        }
        (None, Some(_)) => return Err(Refusal::Invalid(UNSIGNED_POLICY.into()).into()),
        (Some(credential), Some(encoded)) => {
            let policy = Policy::parse(encoded)?;
            let secret = gw.get_secret_key(credential.access_key()).await?;
            if !credential.signs(secret.expose(), encoded) {
                return Err(Refusal::SignatureMismatch.into());
            }
            policy.judge(&form, &bucket, time::OffsetDateTime::now_utc())?;
            let credentials = Credentials {
                access_key: credential.access_key().to_owned(),
                secret_key: secret,
            };
            (Some(credentials), policy.length())
        }
    };
    if let Some(named) = form.get("bucket").filter(|named| *named != bucket) {
        return Err(Refusal::PostDenied(format!(
            "the form names bucket {named}, not the URL's {bucket}"
        ))
        .into());
    }
    let (least, most) = length.unwrap_or((0, super::PUT_BYTES_MAX));
    let cut = Arc::new(Mutex::new(None));
    let body = Measured {
        file,
        seen: 0,
        least,
        most: most.min(super::PUT_BYTES_MAX),
        cut: cut.clone(),
    };
    // The policy judged the tagging field as given; the upload takes it as a header says it.
    let tagging = form.get("tagging").map(tags_query).transpose()?;
    let input = form.input(bucket, StreamingBlob::wrap(body), tagging.clone())?;
    let (bucket, key) = (input.bucket.clone(), input.key.clone());
    if let Some(slot) = parts.extensions.get::<crate::metrics::VerbSlot>() {
        slot.note("PostObject");
    }
    if let Some(noted) = parts.extensions.get::<super::logging::Noted>() {
        noted.routed(&bucket, Some(&key));
    }
    let headers = form.headers(&parts.headers, tagging);
    let secure = parts
        .extensions
        .get::<crate::serve::Peer>()
        .is_none_or(|peer| peer.secure);
    let mut extensions = parts.extensions;
    extensions.insert(posted);
    let req = S3Request {
        input,
        method: parts.method,
        uri: parts.uri,
        headers,
        extensions,
        credentials,
        region: None,
        service: None,
        trailing_headers: None,
    };
    let output = match super::object::put_object(gw, req).await {
        Ok(response) => response.output,
        Err(e) => {
            let cut = cut.lock().unwrap_or_else(|e| e.into_inner()).take();
            return Err(cut.map_or(e, Into::into));
        }
    };
    let host = parts
        .headers
        .get(hyper::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let scheme = if secure { "https" } else { "http" };
    Ok(form.answer(&bucket, &key, &output, &format!("{scheme}://{host}")))
}

const UNSIGNED_POLICY: &str = "a form with a policy is signed: AWSAccessKeyId and signature, \
     or SigV4's x-amz-credential, x-amz-algorithm, x-amz-date and x-amz-signature";

/// Reads the fields of the form in `body` up to its file: the fields, and the file's part,
/// whose stream is the object's content. Fields after the file are not read, as in S3.
async fn read_form(
    body: s3s::Body,
    boundary: String,
) -> Result<(Form, multer::Field<'static>), Refusal> {
    let malformed = |e: multer::Error| match &e {
        multer::Error::StreamReadFailed(cause) if cause.is::<Overweight>() => {
            Refusal::PostFields(FIELDS_BYTES_MAX)
        }
        _ => Refusal::PostForm(format!("the form: {e}")),
    };
    let file_begun = Arc::new(AtomicBool::new(false));
    let body = Prelude {
        body,
        read: 0,
        file_begun: file_begun.clone(),
        ended: false,
    };
    let mut multipart = multer::Multipart::new(body, boundary);
    let mut form = Form::default();
    let mut weight = 0;
    loop {
        let Some(mut field) = multipart.next_field().await.map_err(malformed)? else {
            return Err(Refusal::PostFile);
        };
        let name = field.name().unwrap_or_default().to_ascii_lowercase();
        if name == "file" {
            file_begun.store(true, Ordering::Relaxed);
            form.file_name = field.file_name().map(str::to_owned);
            return Ok((form, field));
        }
        weight += name.len();
        let mut value = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(malformed)? {
            weight += chunk.len();
            if weight > FIELDS_BYTES_MAX {
                return Err(Refusal::PostFields(FIELDS_BYTES_MAX));
            }
            value.extend_from_slice(&chunk);
        }
        let value = String::from_utf8(value)
            .map_err(|_| Refusal::PostForm(format!("form field {name} is not UTF-8")))?;
        if form.get(&name).is_some() {
            return Err(Refusal::Invalid(format!(
                "form field {name} is given twice"
            )));
        }
        if form.fields.len() == FIELDS_MAX {
            return Err(Refusal::PostFields(FIELDS_BYTES_MAX));
        }
        form.fields.push((name, value));
    }
}

/// A form's body, failing with `Overweight` once it has passed `PRELUDE_BYTES_MAX` bytes
/// before the file begins (`file_begun`); the file is measured by `Measured`.
///
/// A form refused before its body is all read (fields too long, a file too large) would
/// leave the client still sending when the connection closes, and the client would lose
/// the answer to the reset (the refusal's code never reaches it). So a body dropped unread
/// is read on, and thrown away, for at most [`LINGER_BYTES`] and [`LINGER`], as web
/// servers linger, while the answer goes out.
struct Prelude {
    body: s3s::Body,
    read: u64,
    file_begun: Arc<AtomicBool>,
    ended: bool,
}

/// How much of a refused form's body is read on, and for how long, before its connection
/// is closed.
const LINGER_BYTES: u64 = 8 << 20;
const LINGER: std::time::Duration = std::time::Duration::from_secs(5);

impl Drop for Prelude {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut body = std::mem::replace(&mut self.body, s3s::Body::empty());
        runtime.spawn(async move {
            let drain = async {
                let mut read = 0u64;
                while let Some(Ok(chunk)) = body.next().await {
                    read += chunk.len() as u64;
                    if read > LINGER_BYTES {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(LINGER, drain).await;
        });
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the form passes {PRELUDE_BYTES_MAX} bytes before its file")]
struct Overweight;

impl Stream for Prelude {
    type Item = Result<Bytes, s3s::StdError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let chunk = ready!(Pin::new(&mut self.body).poll_next(cx));
        self.ended = chunk.is_none();
        if let Some(Ok(bytes)) = &chunk {
            self.read += bytes.len() as u64;
            if self.read > PRELUDE_BYTES_MAX && !self.file_begun.load(Ordering::Relaxed) {
                return Poll::Ready(Some(Err(Box::new(Overweight))));
            }
        }
        Poll::Ready(chunk)
    }
}

/// A form's fields before its file, by lower-case name, and the file's name.
#[derive(Debug, Default)]
struct Form {
    fields: Vec<(String, String)>,
    file_name: Option<String>,
}

impl Form {
    /// The value of field `name` (lower case).
    fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    }

    /// `${filename}` in the key becomes the file's name, before the policy judges the key.
    fn name_file(&mut self) {
        let file_name = self.file_name.clone().unwrap_or_default();
        if let Some((_, key)) = self.fields.iter_mut().find(|(name, _)| name == "key") {
            *key = key.replace("${filename}", &file_name);
        }
    }

    /// The PutObject the form asks for, of `body` into `bucket`.
    fn input(
        &self,
        bucket: String,
        body: StreamingBlob,
        tagging: Option<String>,
    ) -> S3Result<PutObjectInput> {
        let text = |name: &str| self.get(name).map(str::to_owned);
        let Some(key) = text("key") else {
            return Err(
                Refusal::Invalid("Bucket POST must contain a field named 'key'".into()).into(),
            );
        };
        let date = |name: &str, format: TimestampFormat| {
            self.get(name)
                .map(|value| {
                    Timestamp::parse(format, value)
                        .map_err(|_| Refusal::Invalid(format!("form field {name} is not a date")))
                })
                .transpose()
        };
        let metadata: s3s::dto::Metadata = self
            .fields
            .iter()
            .filter_map(|(name, value)| {
                let name = name.strip_prefix("x-amz-meta-")?;
                Some((name.to_owned(), value.clone()))
            })
            .collect();
        let bucket_key = self
            .get("x-amz-server-side-encryption-bucket-key-enabled")
            .map(|value| value.eq_ignore_ascii_case("true"));
        Ok(PutObjectInput {
            bucket,
            key,
            body: Some(body),
            acl: text("acl").map(Into::into),
            cache_control: text("cache-control"),
            content_disposition: text("content-disposition"),
            content_encoding: text("content-encoding"),
            content_language: text("content-language"),
            content_type: text("content-type"),
            expires: date("expires", TimestampFormat::HttpDate)?,
            metadata: (!metadata.is_empty()).then_some(metadata),
            server_side_encryption: text("x-amz-server-side-encryption").map(Into::into),
            ssekms_key_id: text("x-amz-server-side-encryption-aws-kms-key-id"),
            ssekms_encryption_context: text("x-amz-server-side-encryption-context"),
            sse_customer_algorithm: text("x-amz-server-side-encryption-customer-algorithm"),
            sse_customer_key: text("x-amz-server-side-encryption-customer-key"),
            sse_customer_key_md5: text("x-amz-server-side-encryption-customer-key-md5"),
            bucket_key_enabled: bucket_key,
            storage_class: text("x-amz-storage-class").map(Into::into),
            tagging,
            website_redirect_location: text("x-amz-website-redirect-location"),
            object_lock_mode: text("x-amz-object-lock-mode").map(Into::into),
            object_lock_retain_until_date: date(
                "x-amz-object-lock-retain-until-date",
                TimestampFormat::DateTime,
            )?,
            object_lock_legal_hold_status: text("x-amz-object-lock-legal-hold").map(Into::into),
            checksum_algorithm: text("x-amz-checksum-algorithm").map(Into::into),
            checksum_crc32: text("x-amz-checksum-crc32"),
            checksum_crc32c: text("x-amz-checksum-crc32c"),
            checksum_crc64nvme: text("x-amz-checksum-crc64nvme"),
            checksum_sha1: text("x-amz-checksum-sha1"),
            checksum_sha256: text("x-amz-checksum-sha256"),
            ..Default::default()
        })
    }

    /// The headers of the form's PutObject, as the verb and the policies' conditions read
    /// them besides its input: the request's own (`Referer`, `User-Agent`, …) but those of
    /// its body and signature and any `x-amz-` one, then the fields of the object and the
    /// `x-amz-` ones but the signature's (a session's token among them), `acl` as
    /// `x-amz-acl` and the tags (`tagging`, as a header says them) as `x-amz-tagging`.
    fn headers(&self, request: &hyper::HeaderMap, tagging: Option<String>) -> hyper::HeaderMap {
        use hyper::header::{HeaderName, HeaderValue};
        let signature = [
            "x-amz-signature",
            "x-amz-credential",
            "x-amz-algorithm",
            "x-amz-date",
        ];
        let object = [
            "cache-control",
            "content-disposition",
            "content-encoding",
            "content-language",
            "content-type",
            "expires",
        ];
        let body = [
            "authorization",
            "content-length",
            "content-md5",
            "transfer-encoding",
            "expect",
        ];
        let mut headers: hyper::HeaderMap = request
            .iter()
            .filter(|(name, _)| {
                let name = name.as_str();
                !name.starts_with("x-amz-") && !object.contains(&name) && !body.contains(&name)
            })
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        let fields = self.fields.iter().filter_map(|(name, value)| {
            let amz = name.starts_with("x-amz-") && !signature.contains(&name.as_str());
            (amz || object.contains(&name.as_str())).then(|| (name.clone(), value.clone()))
        });
        let acl = self
            .get("acl")
            .map(|acl| ("x-amz-acl".into(), acl.to_owned()));
        let tags = tagging.map(|query| ("x-amz-tagging".to_owned(), query));
        for (name, value) in fields.chain(acl).chain(tags) {
            let name = HeaderName::from_bytes(name.as_bytes());
            if let (Ok(name), Ok(value)) = (name, HeaderValue::from_str(&value)) {
                headers.insert(name, value);
            }
        }
        headers
    }

    /// The answer to the form that wrote `key` into `bucket` (`output`) on the gateway at
    /// `origin` (`https://HOST`), as it asks: a redirection (303) to its
    /// `success_action_redirect` with the object's bucket, key and ETag; a 201 with S3's
    /// `PostResponse`; a 200; or, by default, a 204.
    fn answer(
        &self,
        bucket: &str,
        key: &str,
        output: &PutObjectOutput,
        origin: &str,
    ) -> s3s::HttpResponse {
        let etag = output
            .e_tag
            .as_ref()
            .map(|etag| format!("\"{}\"", etag.value()));
        let etag = etag.unwrap_or_default();
        // A redirection S3 cannot make (not http or https, not a header's characters) is
        // not asked, and the status decides.
        let location = self
            .get("success_action_redirect")
            .or_else(|| self.get("redirect"))
            .filter(|url| url.starts_with("https://") || url.starts_with("http://"))
            .and_then(|url| {
                let query = form_urlencoded::Serializer::new(String::new())
                    .append_pair("bucket", bucket)
                    .append_pair("key", key)
                    .append_pair("etag", &etag)
                    .finish();
                let joint = if url.contains('?') { '&' } else { '?' };
                hyper::header::HeaderValue::from_str(&format!("{url}{joint}{query}")).ok()
            });
        let mut response = match (location, self.get("success_action_status")) {
            (Some(location), _) => {
                let mut response = status(hyper::StatusCode::SEE_OTHER, s3s::Body::empty());
                response
                    .headers_mut()
                    .insert(hyper::header::LOCATION, location);
                response
            }
            (None, Some("201")) => {
                let url = format!("{origin}/{bucket}/{}", super::list::url_encode(key));
                let body = format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<PostResponse><Location>{}</Location>\
                     <Bucket>{}</Bucket><Key>{}</Key><ETag>{}</ETag></PostResponse>",
                    escape(&url),
                    escape(bucket),
                    escape(key),
                    escape(&etag)
                );
                let mut response = status(hyper::StatusCode::CREATED, s3s::Body::from(body));
                response.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("application/xml"),
                );
                response
            }
            (None, Some("200")) => status(hyper::StatusCode::OK, s3s::Body::empty()),
            (None, _) => status(hyper::StatusCode::NO_CONTENT, s3s::Body::empty()),
        };
        let headers = [
            ("etag", Some(etag)),
            ("x-amz-version-id", output.version_id.clone()),
        ];
        for (name, value) in headers {
            if let Some(value) = value.and_then(|v| hyper::header::HeaderValue::from_str(&v).ok()) {
                response.headers_mut().insert(name, value);
            }
        }
        response
    }
}

fn status(code: hyper::StatusCode, body: s3s::Body) -> s3s::HttpResponse {
    let mut response = s3s::HttpResponse::new(body);
    *response.status_mut() = code;
    response
}

/// The `tagging` field (S3's `<Tagging>` XML) as an `x-amz-tagging` header says it.
fn tags_query(xml: &str) -> S3Result<String> {
    let malformed = || Refusal::Malformed("the tagging field is not S3's Tagging XML".into());
    let mut reader = s3s::xml::Deserializer::new(xml.as_bytes());
    let tagging: Tagging =
        s3s::xml::Deserialize::deserialize(&mut reader).map_err(|_| malformed())?;
    reader.expect_eof().map_err(|_| malformed())?;
    let mut query = form_urlencoded::Serializer::new(String::new());
    for tag in tagging.tag_set {
        query.append_pair(
            tag.key.as_deref().unwrap_or_default(),
            tag.value.as_deref().unwrap_or_default(),
        );
    }
    Ok(query.finish())
}

/// Who signed a form, and how: SigV2 (`AWSAccessKeyId` and `signature`, HMAC-SHA1 of the
/// policy in base64) or SigV4 (`x-amz-credential` and `x-amz-signature`, HMAC-SHA256 of the
/// policy in base64 under the credential's signing key).
#[derive(Debug, PartialEq)]
enum Credential {
    V2 {
        access_key: String,
        signature: String,
    },
    V4 {
        access_key: String,
        day: String,
        region: String,
        service: String,
        signature: String,
    },
}

impl Credential {
    /// The credential `form` is signed with, `None` if it is not signed.
    fn of(form: &Form) -> Result<Option<Credential>, Refusal> {
        let needs = |name: &str| {
            form.get(name).map(str::to_owned).ok_or_else(|| {
                Refusal::Invalid(format!("Bucket POST must contain a field named '{name}'"))
            })
        };
        if let Some(algorithm) = form.get("x-amz-algorithm") {
            if algorithm != "AWS4-HMAC-SHA256" {
                return Err(Refusal::Invalid(format!(
                    "x-amz-algorithm {algorithm:?} is not AWS4-HMAC-SHA256"
                )));
            }
            let credential = needs("x-amz-credential")?;
            needs("x-amz-date")?;
            let signature = needs("x-amz-signature")?;
            let parts: Vec<&str> = credential.split('/').collect();
            let [access_key, day, region, service, "aws4_request"] = parts[..] else {
                return Err(Refusal::Invalid(format!(
                    "x-amz-credential {credential:?} is not KEY/DAY/REGION/SERVICE/aws4_request"
                )));
            };
            return Ok(Some(Credential::V4 {
                access_key: access_key.to_owned(),
                day: day.to_owned(),
                region: region.to_owned(),
                service: service.to_owned(),
                signature,
            }));
        }
        match form.get("awsaccesskeyid") {
            Some(access_key) => Ok(Some(Credential::V2 {
                access_key: access_key.to_owned(),
                signature: needs("signature")?,
            })),
            None if form.get("signature").is_some() || form.get("x-amz-signature").is_some() => {
                Err(Refusal::Invalid(UNSIGNED_POLICY.into()))
            }
            None => Ok(None),
        }
    }

    /// The signature's version as the policies' `s3:signatureversion` names it.
    fn version(&self) -> &'static str {
        match self {
            Credential::V2 { .. } => "AWS",
            Credential::V4 { .. } => "AWS4-HMAC-SHA256",
        }
    }

    fn access_key(&self) -> &str {
        match self {
            Credential::V2 { access_key, .. } | Credential::V4 { access_key, .. } => access_key,
        }
    }

    /// Whether this signature is the one of `policy` (as the form carries it, in base64)
    /// by `secret`, compared in constant time.
    fn signs(&self, secret: &str, policy: &str) -> bool {
        let (expected, given) = match self {
            Credential::V2 { signature, .. } => {
                let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes());
                let tag = hmac::sign(&key, policy.as_bytes());
                let expected = base64::engine::general_purpose::STANDARD.encode(tag.as_ref());
                (expected, signature.clone())
            }
            Credential::V4 {
                day,
                region,
                service,
                signature,
                ..
            } => {
                let key = crate::sigv4::signing_key(secret, day, region, service);
                let expected = crate::layout::hex(hmac::sign(&key, policy.as_bytes()).as_ref());
                (expected, signature.to_ascii_lowercase())
            }
        };
        constant_time::verify_slices_are_equal(expected.as_bytes(), given.as_bytes()).is_ok()
    }
}

/// A condition of a POST policy; field names are lower case, without their `$`.
#[derive(Debug, PartialEq)]
enum Condition {
    Eq { field: String, value: String },
    StartsWith { field: String, prefix: String },
    Length { least: u64, most: u64 },
}

impl Condition {
    fn parse(condition: &serde_json::Value) -> Option<Condition> {
        let name = |field: &str| {
            field
                .strip_prefix('$')
                .unwrap_or(field)
                .to_ascii_lowercase()
        };
        if let Some(object) = condition.as_object() {
            let mut entries = object.iter();
            let (field, value) = entries.next()?;
            return match entries.next() {
                None => Some(Condition::Eq {
                    field: name(field),
                    value: value.as_str()?.to_owned(),
                }),
                Some(_) => None,
            };
        }
        let [operator, first, second] = condition.as_array()?.as_slice() else {
            return None;
        };
        match operator.as_str()?.to_ascii_lowercase().as_str() {
            "eq" => Some(Condition::Eq {
                field: name(first.as_str()?),
                value: second.as_str()?.to_owned(),
            }),
            "starts-with" => Some(Condition::StartsWith {
                field: name(first.as_str()?),
                prefix: second.as_str()?.to_owned(),
            }),
            "content-length-range" => {
                let bound =
                    |v: &serde_json::Value| v.as_u64().or_else(|| v.as_str()?.trim().parse().ok());
                let (least, most) = (bound(first)?, bound(second)?);
                (least <= most).then_some(Condition::Length { least, most })
            }
            _ => None,
        }
    }

    /// The field this condition names, if it names one.
    fn field(&self) -> Option<&str> {
        match self {
            Condition::Eq { field, .. } | Condition::StartsWith { field, .. } => Some(field),
            Condition::Length { .. } => None,
        }
    }

    /// Whether `value` meets this condition. A Content-Type starting with a prefix starts
    /// with it in each of its comma-separated types, as S3 reads it.
    fn holds(&self, value: &str) -> bool {
        match self {
            Condition::Eq { value: wanted, .. } => value == wanted,
            Condition::StartsWith { field, prefix } if field == "content-type" => value
                .split(',')
                .all(|kind| kind.trim_start().starts_with(prefix.as_str())),
            Condition::StartsWith { prefix, .. } => value.starts_with(prefix.as_str()),
            Condition::Length { .. } => true,
        }
    }
}

/// A form's policy: until when it may be used, and what it allows.
#[derive(Debug)]
struct Policy {
    expiration: time::OffsetDateTime,
    conditions: Vec<Condition>,
}

impl Policy {
    /// The policy a form carries (JSON, in base64).
    fn parse(encoded: &str) -> Result<Policy, Refusal> {
        let bad = |why: &str| Refusal::PostPolicy(format!("the form's policy {why}"));
        let json = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| bad("is not base64"))?;
        let document: serde_json::Value =
            serde_json::from_slice(&json).map_err(|_| bad("is not JSON"))?;
        let expiration = document
            .get("expiration")
            .and_then(|v| v.as_str())
            .ok_or_else(|| bad("has no expiration"))?;
        let expiration = expiration
            .strip_suffix('Z')
            .and_then(|_| {
                time::OffsetDateTime::parse(
                    expiration,
                    &time::format_description::well_known::Rfc3339,
                )
                .ok()
            })
            .ok_or_else(|| bad("expires at no ISO 8601 time in UTC (2026-12-01T12:00:00.000Z)"))?;
        let conditions = document
            .get("conditions")
            .and_then(|v| v.as_array())
            .ok_or_else(|| bad("has no list of conditions"))?;
        let conditions = conditions
            .iter()
            .map(|c| {
                Condition::parse(c)
                    .ok_or_else(|| bad(&format!("has a condition S3 does not read: {c}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Policy {
            expiration,
            conditions,
        })
    }

    /// Refuses `form` (posted to `bucket`) at `now` unless this policy allows it: not
    /// expired, every condition met (a field the form lacks is empty), every field of the
    /// form named by a condition but the signature's, the file and `x-ignore-` ones, and
    /// checksums, which can only refuse an upload.
    fn judge(&self, form: &Form, bucket: &str, now: time::OffsetDateTime) -> Result<(), Refusal> {
        if now >= self.expiration {
            return Err(Refusal::PostDenied("Policy expired.".into()));
        }
        for condition in &self.conditions {
            let Some(field) = condition.field() else {
                continue;
            };
            let value = match field {
                "bucket" => bucket,
                field => form.get(field).unwrap_or_default(),
            };
            if !condition.holds(value) {
                return Err(Refusal::PostDenied(format!(
                    "Policy Condition failed: {condition:?} for field {field}, given {value:?}"
                )));
            }
        }
        let exempt = |name: &str| {
            matches!(
                name,
                "policy" | "signature" | "awsaccesskeyid" | "x-amz-signature" | "file"
            ) || name.starts_with("x-ignore-")
                || name.starts_with("x-amz-checksum-")
        };
        let extra = form
            .fields
            .iter()
            .map(|(name, _)| name.as_str())
            .find(|name| {
                !exempt(name) && !self.conditions.iter().any(|c| c.field() == Some(*name))
            });
        match extra {
            Some(name) => Err(Refusal::PostDenied(format!("Extra input fields: {name}"))),
            None => Ok(()),
        }
    }

    /// The least and most bytes the file may have, if the policy says (every range it
    /// gives holds).
    fn length(&self) -> Option<(u64, u64)> {
        self.conditions
            .iter()
            .filter_map(|c| match c {
                Condition::Length { least, most } => Some((*least, *most)),
                _ => None,
            })
            .reduce(|(least, most), (other_least, other_most)| {
                (least.max(other_least), most.min(other_most))
            })
    }
}

/// The file's content as it streams to the store, cut with `cut` set when it passes `most`
/// bytes or ends under `least`: the write then fails and nothing is kept.
struct Measured {
    file: multer::Field<'static>,
    seen: u64,
    least: u64,
    most: u64,
    cut: Arc<Mutex<Option<Refusal>>>,
}

/// Why the file was cut, for the store's writer (the client gets `Measured::cut`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Cut(String);

impl Measured {
    fn cut(&mut self, refusal: Refusal) -> Poll<Option<Result<Bytes, Cut>>> {
        let why = Cut(refusal.to_string());
        *self.cut.lock().unwrap_or_else(|e| e.into_inner()) = Some(refusal);
        Poll::Ready(Some(Err(why)))
    }
}

impl Stream for Measured {
    type Item = Result<Bytes, Cut>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match Pin::new(&mut self.file).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                self.seen += chunk.len() as u64;
                if self.seen > self.most {
                    let most = self.most;
                    return self.cut(Refusal::PostTooLarge(most));
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.cut(Refusal::PostForm(format!("the form's file: {e}")))
            }
            Poll::Ready(None) if self.seen < self.least => {
                let least = self.least;
                self.cut(Refusal::PostTooSmall(least))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy until 2030 that names the bucket `photos` and keys under `user/`.
    const POLICY: &str = "eyJleHBpcmF0aW9uIjoiMjAzMC0wMS0wMVQwMDowMDowMC4wMDBaIiwiY29uZGl0aW9ucyI6W3siYnVja2V0IjoicGhvdG9zIn0sWyJzdGFydHMtd2l0aCIsIiRrZXkiLCJ1c2VyLyJdXX0=";
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    fn form(fields: &[(&str, &str)]) -> Form {
        Form {
            fields: fields
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
            ..Form::default()
        }
    }

    fn encoded(json: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(json)
    }

    fn policy(conditions: &str) -> Policy {
        let json =
            format!(r#"{{"expiration":"2030-01-01T00:00:00.000Z","conditions":{conditions}}}"#);
        Policy::parse(&encoded(&json)).expect("a valid policy")
    }

    fn now() -> time::OffsetDateTime {
        time::macros::datetime!(2026-12-01 12:00 UTC)
    }

    fn post(uri: &str, content_type: &str) -> hyper::Request<()> {
        hyper::Request::post(uri)
            .header(hyper::header::CONTENT_TYPE, content_type)
            .body(())
            .expect("a request")
    }

    #[test]
    fn only_a_form_posted_to_a_bucket_is_a_form_upload() {
        let form_type = "multipart/form-data; boundary=xyz";
        assert_eq!(
            form_bucket(&post("/photos", form_type)).as_deref(),
            Some("photos")
        );
        assert_eq!(
            form_bucket(&post("/photos/", form_type)).as_deref(),
            Some("photos")
        );
        assert_eq!(form_bucket(&post("/photos/cat.jpg", form_type)), None);
        assert_eq!(form_bucket(&post("/photos?delete", form_type)), None);
        assert_eq!(form_bucket(&post("/", form_type)), None);
        assert_eq!(form_bucket(&post("/photos", "application/xml")), None);
        let get = hyper::Request::get("/photos")
            .header(hyper::header::CONTENT_TYPE, form_type)
            .body(())
            .expect("a request");
        assert_eq!(form_bucket(&get), None);
    }

    #[test]
    fn a_policy_reads_s3s_conditions_and_refuses_what_s3_refuses() {
        let read = policy(
            r#"[{"bucket":"photos"},["eq","$acl","private"],["starts-with","$Key","user/"],["content-length-range","10",1024]]"#,
        );
        assert_eq!(
            read.expiration,
            time::macros::datetime!(2030-01-01 00:00 UTC)
        );
        assert_eq!(
            read.conditions,
            vec![
                Condition::Eq {
                    field: "bucket".into(),
                    value: "photos".into()
                },
                Condition::Eq {
                    field: "acl".into(),
                    value: "private".into()
                },
                Condition::StartsWith {
                    field: "key".into(),
                    prefix: "user/".into()
                },
                Condition::Length {
                    least: 10,
                    most: 1024
                },
            ]
        );
        assert_eq!(read.length(), Some((10, 1024)));
        let refused = [
            "not base64!".to_owned(),
            encoded("not json"),
            encoded(r#"{"conditions":[]}"#),
            encoded(r#"{"expiration":"Tue, 01 Dec 2030 00:00:00 GMT","conditions":[]}"#),
            encoded(r#"{"expiration":"2030-01-01T00:00:00+01:00","conditions":[]}"#),
            encoded(r#"{"expiration":"2030-01-01T00:00:00.000Z"}"#),
            encoded(
                r#"{"expiration":"2030-01-01T00:00:00.000Z","conditions":[["ends-with","$key","x"]]}"#,
            ),
            encoded(
                r#"{"expiration":"2030-01-01T00:00:00.000Z","conditions":[["content-length-range",9,1]]}"#,
            ),
            encoded(
                r#"{"expiration":"2030-01-01T00:00:00.000Z","conditions":[{"a":"1","b":"2"}]}"#,
            ),
        ];
        for document in refused {
            assert!(
                matches!(Policy::parse(&document), Err(Refusal::PostPolicy(_))),
                "{document} was read"
            );
        }
    }

    #[test]
    fn a_policy_allows_only_the_forms_it_names() {
        let read = policy(
            r#"[{"bucket":"photos"},["starts-with","$key","user/"],["starts-with","$Content-Type","image/"]]"#,
        );
        let allowed = form(&[
            ("key", "user/cat.jpg"),
            ("content-type", "image/jpeg, image/png"),
            ("policy", POLICY),
            ("awsaccesskeyid", "AK"),
            ("signature", "sig"),
            ("x-ignore-tracking", "1"),
            ("x-amz-checksum-sha256", "abc="),
        ]);
        assert!(read.judge(&allowed, "photos", now()).is_ok());
        let denied = |form: &Form, bucket: &str, at: time::OffsetDateTime| {
            matches!(read.judge(form, bucket, at), Err(Refusal::PostDenied(_)))
        };
        assert!(denied(&allowed, "other", now()), "another bucket");
        assert!(denied(
            &allowed,
            "photos",
            time::macros::datetime!(2030-01-01 00:00 UTC)
        ));
        let outside = form(&[("key", "admin/cat.jpg"), ("content-type", "image/jpeg")]);
        assert!(
            denied(&outside, "photos", now()),
            "a key outside the prefix"
        );
        let one_not_image = form(&[("key", "user/a"), ("content-type", "image/jpeg, text/html")]);
        assert!(
            denied(&one_not_image, "photos", now()),
            "every type is an image"
        );
        let extra = form(&[
            ("key", "user/a"),
            ("content-type", "image/png"),
            ("acl", "public-read"),
        ]);
        assert!(
            denied(&extra, "photos", now()),
            "a field no condition names"
        );
        let lacking = form(&[("content-type", "image/png")]);
        assert!(denied(&lacking, "photos", now()), "a missing key is empty");
    }

    #[test]
    fn a_form_is_signed_by_sigv2_sigv4_or_not_at_all() {
        assert_eq!(
            Credential::of(&form(&[("key", "a")])).expect("unsigned"),
            None
        );
        let v2 = Credential::of(&form(&[("awsaccesskeyid", "AK"), ("signature", "s")]));
        assert_eq!(
            v2.expect("v2"),
            Some(Credential::V2 {
                access_key: "AK".into(),
                signature: "s".into()
            })
        );
        let v4 = form(&[
            ("x-amz-algorithm", "AWS4-HMAC-SHA256"),
            ("x-amz-credential", "AK/20261201/us-east-1/s3/aws4_request"),
            ("x-amz-date", "20261201T000000Z"),
            ("x-amz-signature", "abc"),
        ]);
        assert_eq!(
            Credential::of(&v4).expect("v4"),
            Some(Credential::V4 {
                access_key: "AK".into(),
                day: "20261201".into(),
                region: "us-east-1".into(),
                service: "s3".into(),
                signature: "abc".into(),
            })
        );
        let refused = [
            form(&[("awsaccesskeyid", "AK")]),
            form(&[("signature", "s")]),
            form(&[
                ("x-amz-algorithm", "AWS4-HMAC-SHA1"),
                ("x-amz-credential", "c"),
            ]),
            form(&[
                ("x-amz-algorithm", "AWS4-HMAC-SHA256"),
                ("x-amz-credential", "AK/20261201/us-east-1/s3"),
                ("x-amz-date", "20261201T000000Z"),
                ("x-amz-signature", "abc"),
            ]),
        ];
        for form in refused {
            assert!(Credential::of(&form).is_err(), "{form:?} was read");
        }
    }

    /// The signatures an independent HMAC (Python's `hmac`) gives for `POLICY` and `SECRET`.
    #[test]
    fn signatures_are_checked_against_known_answers() {
        let v2 = |signature: &str| Credential::V2 {
            access_key: "AK".into(),
            signature: signature.into(),
        };
        assert!(v2("My9dy3x0TZEOeH91K666BkgKUik=").signs(SECRET, POLICY));
        assert!(!v2("My9dy3x0TZEOeH91K666BkgKUik=").signs("another secret", POLICY));
        assert!(!v2("My9dy3x0TZEOeH91K666BkgKUik=").signs(SECRET, &encoded("{}")));
        let v4 = |signature: &str, day: &str| Credential::V4 {
            access_key: "AK".into(),
            day: day.into(),
            region: "us-east-1".into(),
            service: "s3".into(),
            signature: signature.into(),
        };
        let known = "5802ff06f33f756bd08d6f2957e1ed3356b87cc2c18e0250c84769dc9fc34ff1";
        assert!(v4(known, "20261201").signs(SECRET, POLICY));
        assert!(v4(&known.to_ascii_uppercase(), "20261201").signs(SECRET, POLICY));
        assert!(!v4(known, "20261202").signs(SECRET, POLICY));
    }

    /// A form's body, boundary `XyZ`: its fields, then its file if any.
    fn body(fields: &[(String, String)], file: Option<&str>) -> s3s::Body {
        let mut text = String::new();
        for (name, value) in fields {
            text += &format!(
                "--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            );
        }
        if let Some(file) = file {
            text += &format!("--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\n{file}\r\n");
        }
        text += "--XyZ--\r\n";
        s3s::Body::from(text)
    }

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[tokio::test]
    async fn a_form_is_read_up_to_its_file_within_bounds() {
        let given = fields(&[("Key", "up/${filename}"), ("acl", "private")]);
        let (form, mut file) = read_form(body(&given, Some("hello")), "XyZ".into())
            .await
            .expect("a form");
        assert_eq!(
            form.fields,
            fields(&[("key", "up/${filename}"), ("acl", "private")])
        );
        assert_eq!(form.file_name.as_deref(), Some("a.txt"));
        assert_eq!(
            file.chunk().await.expect("the file").as_deref(),
            Some(&b"hello"[..])
        );

        let refusal = |fields: Vec<(String, String)>, file: Option<&'static str>| async move {
            read_form(body(&fields, file), "XyZ".into()).await.err()
        };
        let twice = fields(&[("key", "a"), ("KEY", "b")]);
        assert!(matches!(
            refusal(twice, Some("x")).await,
            Some(Refusal::Invalid(_))
        ));
        assert!(matches!(
            refusal(fields(&[("key", "a")]), None).await,
            Some(Refusal::PostFile)
        ));
        let heavy = vec![("key".to_owned(), "k".repeat(FIELDS_BYTES_MAX))];
        assert!(matches!(
            refusal(heavy, Some("x")).await,
            Some(Refusal::PostFields(_))
        ));
        let many = (0..=FIELDS_MAX)
            .map(|n| (format!("x-ignore-{n}"), String::new()))
            .collect();
        assert!(matches!(
            refusal(many, Some("x")).await,
            Some(Refusal::PostFields(_))
        ));
        // A part's headers are not a field's weight, but the body before the file bounds them.
        let name = "n".repeat(PRELUDE_BYTES_MAX as usize);
        let long_header = vec![(format!("x\"; padding=\"{name}"), String::new())];
        assert!(matches!(
            refusal(long_header, Some("x")).await,
            Some(Refusal::PostFields(_))
        ));
    }

    #[test]
    fn the_file_names_the_key_and_tags_become_a_query() {
        let mut named = form(&[("key", "up/${filename}")]);
        named.file_name = Some("cat.jpg".into());
        named.name_file();
        assert_eq!(named.get("key"), Some("up/cat.jpg"));
        let xml = "<Tagging><TagSet><Tag><Key>a</Key><Value>1</Value></Tag>\
                   <Tag><Key>b</Key><Value>two words</Value></Tag></TagSet></Tagging>";
        assert_eq!(tags_query(xml).expect("tags"), "a=1&b=two+words");
        assert!(tags_query("<Tagging><TagSet>").is_err());
        assert!(tags_query("a=1").is_err());
    }
}
