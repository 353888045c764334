//! CORS: the verbs on a bucket's rules (set, checked as S3 checks them; read; removed), and
//! the HTTP side that s3s does not route: preflight (`OPTIONS`) requests, which browsers send
//! unsigned, and the headers a response gains for a request from a web page.
//! `crate::cors` decides both; `crate::serve` calls [`preflight`] and [`allowing`].

use client::Pool;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::error::Refusal;
use super::{in_bucket, Gateway};
use crate::buckets;
use crate::cors::{self, Cors, Refused, Rule, RULES_MAX};
use crate::policy::Action;
use crate::Error;

/// A rule as PutBucketCors gives it, checked.
fn rule(given: &CORSRule) -> S3Result<Rule> {
    let max_age = given
        .max_age_seconds
        .map(|seconds| {
            u32::try_from(seconds)
                .map_err(|_| Refusal::Invalid("MaxAgeSeconds is not negative".into()))
        })
        .transpose()?;
    let rule = Rule {
        id: given.id.clone().filter(|id| !id.is_empty()),
        origins: given.allowed_origins.clone(),
        methods: given.allowed_methods.clone(),
        headers: given.allowed_headers.clone().unwrap_or_default(),
        expose: given.expose_headers.clone().unwrap_or_default(),
        max_age,
    };
    rule.check().map_err(Refusal::CorsRule)?;
    Ok(rule)
}

/// A rule as GetBucketCors shows it.
fn shown(rule: Rule) -> CORSRule {
    let listed = |list: Vec<String>| (!list.is_empty()).then_some(list);
    CORSRule {
        id: rule.id,
        allowed_origins: rule.origins,
        allowed_methods: rule.methods,
        allowed_headers: listed(rule.headers),
        expose_headers: listed(rule.expose),
        max_age_seconds: rule.max_age.and_then(|age| i32::try_from(age).ok()),
    }
}

pub(super) async fn put_bucket_cors(
    gw: &Gateway,
    req: S3Request<PutBucketCorsInput>,
) -> S3Result<S3Response<PutBucketCorsOutput>> {
    let name = &req.input.bucket;
    gw.allowed(&req, Action::PutBucketCors, name, None).await?;
    let given = &req.input.cors_configuration.cors_rules;
    if given.is_empty() {
        return Err(Refusal::Malformed("a CORS configuration has at least one rule".into()).into());
    }
    if given.len() > RULES_MAX {
        return Err(Refusal::CorsRule(format!(
            "a bucket has at most {RULES_MAX} CORS rules, not {}",
            given.len()
        ))
        .into());
    }
    let rules = given.iter().map(rule).collect::<S3Result<Vec<_>>>()?;
    buckets::set_cors(&gw.pool, name, Some(&Cors { rules }))
        .await
        .map_err(|e| in_bucket(e, name))?;
    Ok(S3Response::new(PutBucketCorsOutput::default()))
}

pub(super) async fn get_bucket_cors(
    gw: &Gateway,
    req: S3Request<GetBucketCorsInput>,
) -> S3Result<S3Response<GetBucketCorsOutput>> {
    let name = &req.input.bucket;
    let bucket = gw.allowed(&req, Action::GetBucketCors, name, None).await?;
    let cors = bucket.cors.ok_or_else(|| Refusal::NoCors(name.clone()))?;
    Ok(S3Response::new(GetBucketCorsOutput {
        cors_rules: Some(cors.rules.into_iter().map(shown).collect()),
    }))
}

pub(super) async fn delete_bucket_cors(
    gw: &Gateway,
    req: S3Request<DeleteBucketCorsInput>,
) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
    let name = &req.input.bucket;
    gw.allowed(&req, Action::PutBucketCors, name, None).await?;
    buckets::set_cors(&gw.pool, name, None)
        .await
        .map_err(|e| in_bucket(e, name))?;
    Ok(S3Response::new(DeleteBucketCorsOutput::default()))
}

/// The bucket a path-style request's `path` names, if any.
fn bucket_in(path: &str) -> Option<&str> {
    let name = path.strip_prefix('/')?.split('/').next()?;
    (!name.is_empty()).then_some(name)
}

/// The CORS rules of `bucket`; none where the bucket does not exist, which a web page
/// cannot tell from a bucket without rules.
async fn rules(pool: &Pool, bucket: &str) -> Result<Option<Cors>, Error> {
    match buckets::info(pool, bucket).await {
        Ok(bucket) => Ok(bucket.cors),
        Err(Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

fn header<'h>(headers: &'h hyper::HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// The headers of the 200 that answers a preflight request to `path` with `headers`, or
/// why it is refused: 400 without an origin or a method, 403 where no rule of the bucket
/// allows them.
pub(crate) async fn preflight(
    pool: &Pool,
    path: &str,
    headers: &hyper::HeaderMap,
) -> S3Result<Vec<(&'static str, String)>> {
    let origin = header(headers, "origin");
    let method = header(headers, "access-control-request-method");
    let asked = header(headers, "access-control-request-headers");
    let bucket = bucket_in(path).ok_or(Refusal::PreflightUnasked("bucket"))?;
    let cors = match (origin, method) {
        (Some(_), Some(_)) => rules(pool, bucket).await?,
        _ => None,
    };
    cors::preflight(cors.as_ref(), origin, method, asked).map_err(|refused| {
        match refused {
            Refused::Unasked(what) => Refusal::PreflightUnasked(what),
            Refused::Off => Refusal::CorsOff(bucket.into()),
            Refused::Denied => Refusal::CorsDenied {
                bucket: bucket.into(),
                origin: origin.unwrap_or_default().into(),
                method: method.unwrap_or_default().into(),
                headers: asked.unwrap_or_default().into(),
            },
        }
        .into()
    })
}

/// What of an ordinary request the CORS headers of its response depend on, taken before
/// the request goes to its verb.
pub(crate) struct Asked {
    bucket: String,
    origin: String,
    /// The method the page says it will use (`Access-Control-Request-Method`), else the
    /// request's own, as Ceph's gateway matches it.
    method: String,
}

impl Asked {
    /// What a request to `path` with `method` and `headers` asks, if it comes from a web
    /// page (has an `Origin`) and names a bucket.
    pub(crate) fn of(
        method: &hyper::Method,
        path: &str,
        headers: &hyper::HeaderMap,
    ) -> Option<Asked> {
        Some(Asked {
            bucket: bucket_in(path)?.into(),
            origin: header(headers, "origin")?.into(),
            method: header(headers, "access-control-request-method")
                .unwrap_or(method.as_str())
                .into(),
        })
    }
}

/// The headers the response to `asked` gains: those of the bucket's first rule that allows
/// its origin and method, if any; none where the rules cannot be read (the response is
/// the verb's all the same, and a browser refuses it to the page).
pub(crate) async fn allowing(pool: &Pool, asked: Asked) -> Vec<(&'static str, String)> {
    match rules(pool, &asked.bucket).await {
        Ok(Some(cors)) => cors::allowing(&cors, &asked.origin, &asked.method),
        Ok(None) => Vec::new(),
        Err(e) => {
            tracing::warn!("reading the CORS rules of bucket {}: {e}", asked.bucket);
            Vec::new()
        }
    }
}
