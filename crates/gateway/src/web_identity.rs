//! Web identities: the JSON Web Token an OpenID Connect provider signed, as STS's
//! AssumeRoleWithWebIdentity takes it, checked against the provider record an account
//! (or the operator's users) made ([`crate::oidc`]).
//!
//! A token is read ([`Token::read`]), its claims checked against the provider
//! ([`Token::check`]), and its signature verified ([`Token::verify`]) with the public key
//! of a certificate the provider publishes beside its key (`x5c`) whose SHA-1 thumbprint
//! the provider record lists, as Ceph's gateway checks it. The key in the certificate
//! verifies, never the bare `n`/`e` beside it, so keys served over plain HTTP are still
//! only those the thumbprints name. Fetching the provider's keys ([`keys`], kept for a
//! while) is the one piece of IO here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use aws_lc_rs::signature::VerificationAlgorithm;
use base64::Engine;
use serde_json::Value;

use crate::layout::OidcProvider;

/// The claim a provider passes session tags in, as AWS names it.
pub const TAGS_CLAIM: &str = "https://aws.amazon.com/tags";
/// STS's longest WebIdentityToken.
pub const TOKEN_CHARS_MAX: usize = 20_000;
/// How far a token's `nbf` may lie ahead of this gateway's clock.
const CLOCK_SKEW_S: i64 = 60;
/// The most bytes of a provider's discovery document or key set read.
const DOCUMENT_BYTES_MAX: usize = 1 << 20;
/// How long a provider has to answer each request.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a provider's keys are kept once fetched, and a failure to fetch them.
const KEYS_KEPT: Duration = Duration::from_secs(300);
const FAILURE_KEPT: Duration = Duration::from_secs(30);
/// How old kept keys must be before a token naming a key they lack fetches them again.
const REFETCH_AFTER: Duration = Duration::from_secs(30);

/// Why a web identity is refused: each maps to one of STS's codes in `crate::iam`.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// STS's InvalidIdentityToken: malformed, signed by no key the provider is trusted
    /// for, or for another issuer or audience.
    #[error("{0}")]
    Invalid(String),
    /// STS's ExpiredTokenException.
    #[error("the web identity token expired at {0} (seconds since the epoch)")]
    Expired(i64),
    /// STS's InvalidIdentityToken too: the provider's key set has no key the token's `kid`
    /// names (its keys may have rotated since they were fetched).
    #[error("the provider publishes no key named {0:?}")]
    UnknownKey(Option<String>),
    /// STS's IDPCommunicationError: the provider's keys could not be fetched.
    #[error("{0}")]
    Unreachable(String),
}

fn invalid(why: impl Into<String>) -> Refusal {
    Refusal::Invalid(why.into())
}

/// The claims of a token that STS reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Claims {
    /// `iss`: the provider's URL.
    pub iss: String,
    /// `sub`: who the provider vouches for.
    pub sub: String,
    /// `aud`, one value or several.
    pub aud: Vec<String>,
    /// `azp`, or Keycloak's `client_id`/`clientId`: the OAuth client the token was made
    /// for.
    pub azp: Option<String>,
    /// `exp`, in seconds since the epoch.
    pub exp: i64,
    /// `nbf`, in seconds since the epoch.
    pub nbf: Option<i64>,
    /// The session tags the provider passes ([`TAGS_CLAIM`]), a key with several values
    /// once per value.
    pub tags: Vec<(String, String)>,
}

/// A signed token, read but not yet trusted.
#[derive(Debug)]
pub struct Token {
    /// The header's `alg`.
    alg: String,
    /// The header's `kid`, naming the key that signed.
    kid: Option<String>,
    /// What the signature covers: the header and the payload as sent.
    signed: String,
    signature: Vec<u8>,
    pub claims: Claims,
}

impl Token {
    /// Reads a compact JWS (`header.payload.signature`, each base64url): refused if it is
    /// not one, or lacks `iss`, `sub` or `exp`.
    pub fn read(text: &str) -> Result<Token, Refusal> {
        if text.len() > TOKEN_CHARS_MAX {
            return Err(invalid(format!(
                "the web identity token has {} characters, more than {TOKEN_CHARS_MAX}",
                text.len()
            )));
        }
        let mut parts = text.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid(
                "the web identity token is not a signed JWT (three base64url parts)",
            ));
        };
        let header = json_part(header, "header")?;
        let payload = json_part(payload, "payload")?;
        let signature = base64url(signature, "signature")?;
        let alg = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("the web identity token's header names no alg"))?;
        if header.contains_key("crit") {
            return Err(invalid(
                "the web identity token's header names critical extensions (crit), which \
                 are not understood here",
            ));
        }
        let kid = header.get("kid").and_then(Value::as_str).map(String::from);
        let text_claim = |name: &str| payload.get(name).and_then(Value::as_str).map(String::from);
        let required = |name: &str| {
            text_claim(name)
                .filter(|value| !value.is_empty())
                .ok_or_else(|| invalid(format!("the web identity token has no {name} claim")))
        };
        let number = |name: &str| payload.get(name).and_then(Value::as_f64).map(|n| n as i64);
        let aud = match payload.get("aud") {
            Some(Value::String(one)) => vec![one.clone()],
            Some(Value::Array(many)) => many
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            _ => Vec::new(),
        };
        let claims = Claims {
            iss: required("iss")?,
            sub: required("sub")?,
            aud,
            azp: text_claim("azp")
                .or_else(|| text_claim("client_id"))
                .or_else(|| text_claim("clientId")),
            exp: number("exp").ok_or_else(|| invalid("the web identity token has no exp claim"))?,
            nbf: number("nbf"),
            tags: session_tags(payload.get(TAGS_CLAIM))?,
        };
        let signed_len = text.len() - text.rsplit('.').next().map_or(0, str::len) - 1;
        Ok(Token {
            alg: alg.into(),
            kid,
            signed: text[..signed_len].into(),
            signature,
            claims,
        })
    }

    /// Refuses a token that `provider` did not issue, that is out of its time at `now_s`
    /// (seconds since the epoch), or, when the provider lists client ids, that names none
    /// of them as its audience or authorized party. With no client ids listed, any
    /// audience passes here and the role's trust policy decides (as Ceph's gateway does).
    /// The audience STS answers: the client id named, else the first `aud` (or `azp`).
    pub fn check(&self, provider: &OidcProvider, now_s: i64) -> Result<String, Refusal> {
        let claims = &self.claims;
        if claims.iss != provider.url {
            return Err(invalid(format!(
                "the web identity token was issued by {:?}, not {:?}",
                claims.iss, provider.url
            )));
        }
        if claims.exp <= now_s {
            return Err(Refusal::Expired(claims.exp));
        }
        if claims.nbf.is_some_and(|nbf| nbf > now_s + CLOCK_SKEW_S) {
            return Err(invalid("the web identity token is not valid yet (nbf)"));
        }
        let mut named = claims.aud.iter().chain(claims.azp.iter());
        if provider.client_ids.is_empty() {
            return Ok(named.next().cloned().unwrap_or_default());
        }
        named
            .find(|id| provider.client_ids.contains(id))
            .cloned()
            .ok_or_else(|| {
                invalid(format!(
                    "the web identity token's audience {:?} is none of the provider's client \
                     ids",
                    claims.aud
                ))
            })
    }

    /// Verifies the signature with a key of `keys` (a JWK set) whose certificate's
    /// thumbprint is one of `thumbprints`; the key the header's `kid` names, or any when
    /// it names none.
    pub fn verify(&self, keys: &Value, thumbprints: &[String]) -> Result<(), Refusal> {
        let algorithm = algorithm(&self.alg)?;
        let keys = keys
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid("the provider's key set has no keys"))?;
        let mut why = None;
        for key in keys {
            let kid = key.get("kid").and_then(Value::as_str);
            if self.kid.is_some() && kid != self.kid.as_deref() {
                continue;
            }
            // A key published for encryption, or for another algorithm, never verifies.
            let usage = key.get("use").and_then(Value::as_str);
            let alg = key.get("alg").and_then(Value::as_str);
            if usage.is_some_and(|u| u != "sig") || alg.is_some_and(|a| a != self.alg) {
                why = Some(format!(
                    "the provider's key is for {}, not for {} signatures",
                    usage
                        .filter(|u| *u != "sig")
                        .unwrap_or_else(|| alg.unwrap_or("")),
                    self.alg
                ));
                continue;
            }
            let Some(der) = key
                .get("x5c")
                .and_then(Value::as_array)
                .and_then(|chain| chain.first())
                .and_then(Value::as_str)
            else {
                why = Some(
                    "the provider's key carries no certificate (x5c) to match the thumbprints"
                        .to_owned(),
                );
                continue;
            };
            let Ok(der) = base64::engine::general_purpose::STANDARD.decode(der) else {
                why = Some("the provider's key certificate is not base64".into());
                continue;
            };
            let thumbprint = thumbprint(&der);
            if !thumbprints
                .iter()
                .any(|listed| listed.eq_ignore_ascii_case(&thumbprint))
            {
                why = Some(format!(
                    "the provider's key certificate has thumbprint {thumbprint}, which the \
                     provider record does not list"
                ));
                continue;
            }
            // Keycloak's realm certificates are X.509 version 1, which rustls-webpki
            // refuses: the key is read from the certificate here, and aws-lc-rs verifies.
            let key = match x509_parser::parse_x509_certificate(&der) {
                Ok((_, cert)) => cert.public_key().subject_public_key.data.to_vec(),
                Err(e) => {
                    why = Some(format!("the provider's key certificate: {e}"));
                    continue;
                }
            };
            let key = aws_lc_rs::signature::UnparsedPublicKey::new(algorithm, key);
            match key.verify(self.signed.as_bytes(), &self.signature) {
                Ok(()) => return Ok(()),
                Err(_) => why = Some("the web identity token's signature does not verify".into()),
            }
        }
        Err(why.map_or_else(|| Refusal::UnknownKey(self.kid.clone()), Refusal::Invalid))
    }
}

/// The session tags of a token's tags claim: `{"principal_tags": {KEY: [VALUE, …]}}` as
/// AWS reads it (a value may be one string), a list of such objects (as Keycloak sends a
/// multivalued attribute), or either as a JSON text. Its `transitive_tag_keys` matter to
/// role chaining alone, which is not served.
fn session_tags(claim: Option<&Value>) -> Result<Vec<(String, String)>, Refusal> {
    let malformed = || {
        invalid(format!(
            "the web identity token's {TAGS_CLAIM} claim is not {{\"principal_tags\": \
             {{KEY: [VALUE, …]}}}}"
        ))
    };
    let parsed;
    let claim = match claim {
        None => return Ok(Vec::new()),
        Some(Value::String(text)) => {
            parsed = serde_json::from_str::<Value>(text).map_err(|_| malformed())?;
            &parsed
        }
        Some(claim) => claim,
    };
    let objects = match claim {
        Value::Array(items) => items.iter().collect(),
        one => vec![one],
    };
    let mut tags = Vec::new();
    for object in objects {
        let object = object.as_object().ok_or_else(malformed)?;
        let Some(principal) = object.get("principal_tags") else {
            continue;
        };
        for (key, values) in principal.as_object().ok_or_else(malformed)? {
            let values = match values {
                Value::Array(many) => many.iter().collect(),
                one => vec![one],
            };
            for value in values {
                let value = value.as_str().ok_or_else(malformed)?;
                tags.push((key.clone(), value.to_owned()));
            }
        }
    }
    crate::roles::check_session_tags(&tags)
        .map_err(|e| invalid(format!("the web identity token's session tags: {e}")))?;
    Ok(tags)
}

/// The SHA-1 thumbprint of a DER certificate, in lower-case hex.
pub fn thumbprint(der: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, der);
    crate::layout::hex(digest.as_ref())
}

fn base64url(part: &str, what: &str) -> Result<Vec<u8>, Refusal> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .map_err(|_| invalid(format!("the web identity token's {what} is not base64url")))
}

fn json_part(part: &str, what: &str) -> Result<serde_json::Map<String, Value>, Refusal> {
    match serde_json::from_slice(&base64url(part, what)?) {
        Ok(Value::Object(object)) => Ok(object),
        _ => Err(invalid(format!(
            "the web identity token's {what} is not a JSON object"
        ))),
    }
}

/// The verifier for a JWS `alg` (ECDSA's signatures are `r || s`, as JWS writes them);
/// the unsigned `none` and the shared-secret HMACs are refused (a provider's public keys
/// cannot check them).
fn algorithm(alg: &str) -> Result<&'static dyn VerificationAlgorithm, Refusal> {
    use aws_lc_rs::signature as algs;
    Ok(match alg {
        "RS256" => &algs::RSA_PKCS1_2048_8192_SHA256,
        "RS384" => &algs::RSA_PKCS1_2048_8192_SHA384,
        "RS512" => &algs::RSA_PKCS1_2048_8192_SHA512,
        "PS256" => &algs::RSA_PSS_2048_8192_SHA256,
        "PS384" => &algs::RSA_PSS_2048_8192_SHA384,
        "PS512" => &algs::RSA_PSS_2048_8192_SHA512,
        "ES256" => &algs::ECDSA_P256_SHA256_FIXED,
        "ES384" => &algs::ECDSA_P384_SHA384_FIXED,
        other => {
            return Err(invalid(format!(
                "the web identity token is signed with {other:?}: RS256, RS384, RS512, \
                 PS256, PS384, PS512, ES256 and ES384 are served"
            )))
        }
    })
}

/// What was last fetched of a provider's keys, and when.
struct Fetched {
    /// When `keys` were fetched.
    at: Instant,
    /// When they were last asked for again: a failed refresh keeps good keys.
    tried: Instant,
    keys: Result<Arc<Value>, String>,
}

impl Fetched {
    /// Whether these serve without fetching again: good keys for [`KEYS_KEPT`] (unless
    /// `refresh` asks again and the last try is [`REFETCH_AFTER`] old), a failure for
    /// [`FAILURE_KEPT`].
    fn fresh(&self, refresh: bool) -> bool {
        match &self.keys {
            Ok(_) => {
                self.at.elapsed() < KEYS_KEPT && !(refresh && self.tried.elapsed() >= REFETCH_AFTER)
            }
            Err(_) => self.at.elapsed() < FAILURE_KEPT,
        }
    }
}

/// One provider's kept keys, and the lock its one fetch at a time holds.
#[derive(Default)]
struct Kept {
    fetching: tokio::sync::Mutex<()>,
    last: Mutex<Option<Fetched>>,
}

impl Kept {
    /// The kept keys, if they serve (see [`Fetched::fresh`]).
    fn fresh(&self, refresh: bool) -> Option<Result<Arc<Value>, String>> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref()
            .filter(|fetched| fetched.fresh(refresh))
            .map(|fetched| fetched.keys.clone())
    }
}

/// The provider at `issuer`'s JWK set, as its discovery document
/// (`ISSUER/.well-known/openid-configuration`) names it (`jwks_uri`). Kept for
/// [`KEYS_KEPT`] once fetched, and a failure for [`FAILURE_KEPT`], and fetched by one
/// request at a time (the others wait for its keys), so that unsigned requests cannot make
/// the gateway fetch more than that; `refresh` asks for them again (a token naming a key
/// the kept set lacks, after a rotation) once the last try is [`REFETCH_AFTER`] old, and a
/// refresh that fails keeps the good keys. What went wrong is logged; the caller is told
/// only that the keys could not be fetched.
pub async fn keys(issuer: &str, refresh: bool) -> Result<Arc<Value>, Refusal> {
    static KEPT: OnceLock<Mutex<HashMap<String, Arc<Kept>>>> = OnceLock::new();
    let kept = {
        let mut all = KEPT
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        all.entry(issuer.to_owned()).or_default().clone()
    };
    let unreachable = |_| {
        Refusal::Unreachable(format!(
            "the keys of the provider at {issuer} could not be fetched"
        ))
    };
    if let Some(keys) = kept.fresh(refresh) {
        return keys.map_err(unreachable);
    }
    // The fetch runs on a task of its own: a request that goes away while it waits neither
    // lets the next one fetch again nor loses what comes back.
    let fetch = tokio::spawn(fetch_once(kept, issuer.to_owned(), refresh));
    match fetch.await {
        Ok(keys) => keys.map_err(unreachable),
        Err(e) => Err(unreachable(e.to_string())),
    }
}

/// Fetches the keys of the provider at `issuer` into `kept`, one fetch at a time: unless
/// another has brought them while this one waited. A refresh that fails keeps good keys.
async fn fetch_once(kept: Arc<Kept>, issuer: String, refresh: bool) -> Result<Arc<Value>, String> {
    let _fetching = kept.fetching.lock().await;
    if let Some(keys) = kept.fresh(refresh) {
        return keys;
    }
    let keys = fetch_keys(&issuer).await.map(Arc::new);
    if let Err(why) = &keys {
        tracing::warn!(issuer, "web identity: {why}");
    }
    let now = Instant::now();
    let mut last = kept.last.lock().unwrap_or_else(|p| p.into_inner());
    let keys = match (keys, last.take()) {
        (Err(_), Some(good)) if good.keys.is_ok() && good.at.elapsed() < KEYS_KEPT => {
            Fetched { tried: now, ..good }
        }
        (keys, _) => Fetched {
            at: now,
            tried: now,
            keys,
        },
    };
    let answer = keys.keys.clone();
    *last = Some(keys);
    answer
}

async fn fetch_keys(issuer: &str) -> Result<Value, String> {
    let discovery = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let document = fetch_json(&discovery).await?;
    let jwks = document
        .get("jwks_uri")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{discovery} names no jwks_uri"))?;
    fetch_json(jwks).await
}

/// One JSON document by GET, of at most [`DOCUMENT_BYTES_MAX`] bytes.
async fn fetch_json(url: &str) -> Result<Value, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    let failed = |why: String| format!("{url}: {why}");
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(failed("not an http(s) URL".into()));
    }
    let client = CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .timeout(FETCH_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| format!("no HTTP client: {e}"))
        })
        .as_ref()
        .map_err(|e| failed(e.clone()))?;
    let mut response = client
        .get(url)
        .send()
        .await
        .map_err(|e| failed(e.to_string()))?;
    if !response.status().is_success() {
        return Err(failed(format!("answered {}", response.status())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
        if body.len() + chunk.len() > DOCUMENT_BYTES_MAX {
            return Err(failed(format!(
                "the document is over {DOCUMENT_BYTES_MAX} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| failed(format!("not JSON: {e}")))
}

/// A token of `claims` signed with ES256 under key id `k1` by a key made here, and the
/// self-signed certificate of that key (DER): for the tests and the fuzz target's seeds.
#[cfg(any(test, fuzzing))]
pub(crate) fn es256_sample(claims: &Value) -> (String, Vec<u8>) {
    use aws_lc_rs::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
    let rng = aws_lc_rs::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
    let key =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref()).expect("key");
    let certificate = sample_certificate(pkcs8.as_ref(), &rcgen::PKCS_ECDSA_P256_SHA256);
    let token = sample_token("ES256", claims, |message| {
        key.sign(&rng, message).expect("sign").as_ref().to_vec()
    });
    (token, certificate)
}

/// A token of `claims` whose header names `alg` and key id `k1`, signed by `sign`.
#[cfg(any(test, fuzzing))]
fn sample_token(alg: &str, claims: &Value, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = serde_json::json!({"alg": alg, "kid": "k1", "typ": "JWT"});
    let signed = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let signature = sign(signed.as_bytes());
    format!("{signed}.{}", b64(&signature))
}

/// A self-signed certificate (DER) of the PKCS#8 key `pkcs8`.
#[cfg(any(test, fuzzing))]
fn sample_certificate(pkcs8: &[u8], alg: &'static rcgen::SignatureAlgorithm) -> Vec<u8> {
    let key =
        rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8.to_vec().into(), alg).expect("key");
    let params = rcgen::CertificateParams::new(vec!["idp.test".into()]).expect("params");
    params.self_signed(&key).expect("cert").der().to_vec()
}

/// A JWK set of one signing key, `k1`, with the certificate `der`, beside a key for
/// encryption.
#[cfg(any(test, fuzzing))]
pub(crate) fn sample_keys(der: &[u8]) -> Value {
    let der = base64::engine::general_purpose::STANDARD.encode(der);
    serde_json::json!({"keys": [
        {"kid": "other", "kty": "RSA", "use": "enc"},
        {"kid": "k1", "use": "sig", "x5c": [der]},
    ]})
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::encoding::AsDer;
    use aws_lc_rs::signature;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    use super::{sample_certificate as certificate, sample_keys as keys, sample_token as token};

    fn provider(client_ids: &[&str]) -> OidcProvider {
        OidcProvider {
            account: String::new(),
            url: "http://idp.test/realms/r".into(),
            client_ids: client_ids.iter().map(|id| id.to_string()).collect(),
            thumbprints: Vec::new(),
            created_ns: 0,
        }
    }

    #[test]
    fn tokens_verify_only_under_a_listed_certificate_s_key() {
        let claims = serde_json::json!({
            "iss": "http://idp.test/realms/r", "sub": "ann", "aud": ["s3", "web"],
            "azp": "app", "exp": 2_000, "nbf": 900,
        });
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let rsa = signature::RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).expect("rsa");
        let rsa_cert = certificate(rsa.as_der().expect("der").as_ref(), &rcgen::PKCS_RSA_SHA256);
        let rs256 = token("RS256", &claims, |message| {
            let mut out = vec![0; rsa.public_modulus_len()];
            rsa.sign(&signature::RSA_PKCS1_SHA256, &rng, message, &mut out)
                .expect("sign");
            out
        });
        let (es256, ec_cert) = es256_sample(&claims);
        for (text, cert, other) in [(&rs256, &rsa_cert, &ec_cert), (&es256, &ec_cert, &rsa_cert)] {
            let read = Token::read(text).expect("read");
            assert_eq!(read.claims.sub, "ann");
            assert_eq!(read.claims.azp.as_deref(), Some("app"));
            let listed = vec!["0".repeat(40), thumbprint(cert).to_uppercase()];
            read.verify(&keys(cert), &listed).expect("verifies");
            // The right key under a certificate the record does not list.
            let refused = read
                .verify(&keys(cert), &["0".repeat(40)])
                .expect_err("refused");
            assert!(refused.to_string().contains("does not list"), "{refused}");
            // A listed certificate of another key.
            let thumbs = vec![thumbprint(other)];
            let refused = read.verify(&keys(other), &thumbs).expect_err("refused");
            assert!(refused.to_string().contains("does not verify"), "{refused}");
            // The payload changed after signing.
            let (head, rest) = text.split_once('.').expect("parts");
            let signature = rest.rsplit('.').next().expect("signature");
            let forged = serde_json::json!({
                "iss": "http://idp.test/realms/r", "sub": "root", "exp": 2_000,
            });
            let forged = format!("{head}.{}.{signature}", b64(forged.to_string().as_bytes()));
            let forged = Token::read(&forged).expect("read");
            assert!(forged.verify(&keys(cert), &listed).is_err());
            // No certificate beside the key.
            let bare = serde_json::json!({"keys": [{"kid": "k1", "kty": "RSA"}]});
            let refused = read.verify(&bare, &listed).expect_err("refused");
            assert!(refused.to_string().contains("x5c"), "{refused}");
            // The key is for encryption, or for another algorithm.
            let mut misused = keys(cert);
            misused["keys"][1]["use"] = "enc".into();
            let refused = read.verify(&misused, &listed).expect_err("refused");
            assert!(refused.to_string().contains("is for enc"), "{refused}");
            let mut misused = keys(cert);
            misused["keys"][1]["alg"] = "PS512".into();
            let refused = read.verify(&misused, &listed).expect_err("refused");
            assert!(refused.to_string().contains("is for PS512"), "{refused}");
            // The key is not in the set (rotated since): the caller fetches the set again.
            let other_key = serde_json::json!({"keys": [{"kid": "k2", "x5c": ["AA"]}]});
            assert!(matches!(
                read.verify(&other_key, &listed),
                Err(Refusal::UnknownKey(Some(kid))) if kid == "k1"
            ));
        }
        for alg in ["none", "HS256"] {
            let unsigned = token(alg, &claims, |_| b"x".to_vec());
            let refused = Token::read(&unsigned)
                .expect("read")
                .verify(&keys(&rsa_cert), &[thumbprint(&rsa_cert)])
                .expect_err("refused");
            assert!(refused.to_string().contains("are served"), "{refused}");
        }
    }

    #[test]
    fn claims_are_held_to_the_provider_and_the_clock() {
        let read =
            |claims: Value| Token::read(&token("RS256", &claims, |_| vec![1])).expect("read");
        let good = read(serde_json::json!({
            "iss": "http://idp.test/realms/r", "sub": "ann", "aud": "s3",
            "client_id": "app", "exp": 2_000, "nbf": 1_050,
        }));
        let audience = |ids: &[&str]| good.check(&provider(ids), 1_000).expect("checked");
        assert_eq!(audience(&[]), "s3", "any audience without client ids");
        assert_eq!(audience(&["s3"]), "s3");
        assert_eq!(audience(&["web", "app"]), "app", "client_id");
        let refused = good.check(&provider(&["web"]), 1_000).expect_err("refused");
        assert!(refused.to_string().contains("audience"), "{refused}");
        assert!(matches!(
            good.check(&provider(&[]), 2_000),
            Err(Refusal::Expired(2_000))
        ));
        assert!(good.check(&provider(&[]), 900).is_err(), "nbf ahead");
        let mut other = provider(&[]);
        for url in ["https://idp.test/realms/r", "http://idp.test/realms/r/"] {
            other.url = url.into();
            assert!(good.check(&other, 1_000).is_err(), "another issuer: {url}");
        }
        for bad in [
            "a.b".to_owned(),
            "a.b.c.d".to_owned(),
            format!("{}.e30.AA", b64(b"{}")),
            token("RS256", &serde_json::json!({"iss": "i", "exp": 1}), |_| {
                vec![1]
            }),
            token(
                "RS256",
                &serde_json::json!({"iss": "i", "sub": "s"}),
                |_| vec![1],
            ),
            "x".repeat(TOKEN_CHARS_MAX + 1),
        ] {
            assert!(Token::read(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn session_tags_are_read_in_aws_s_shape_and_keycloak_s() {
        let tags = |claim: Value| {
            let claims = serde_json::json!({
                "iss": "http://idp.test/realms/r", "sub": "ann", "exp": 2_000, TAGS_CLAIM: claim,
            });
            Token::read(&token("RS256", &claims, |_| vec![1])).map(|t| {
                let mut tags = t.claims.tags;
                tags.sort();
                tags
            })
        };
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let aws = serde_json::json!({
            "principal_tags": {"team": ["red"], "site": "lyon"}, "transitive_tag_keys": ["team"],
        });
        assert_eq!(
            tags(aws.clone()).expect("read"),
            [pair("site", "lyon"), pair("team", "red")]
        );
        assert_eq!(
            tags(Value::String(aws.to_string())).expect("read"),
            [pair("site", "lyon"), pair("team", "red")],
            "a JSON text"
        );
        let keycloak = serde_json::json!([{"principal_tags": {"Department": ["Eng", "Sales"]}}]);
        assert_eq!(
            tags(keycloak).expect("read"),
            [pair("Department", "Eng"), pair("Department", "Sales")],
            "a multivalued attribute, one tag per value"
        );
        for bad in [
            serde_json::json!(7),
            serde_json::json!({"principal_tags": ["team"]}),
            serde_json::json!({"principal_tags": {"team": [1]}}),
            serde_json::json!({"principal_tags": {"aws:team": "red"}}),
            serde_json::json!({"principal_tags": {"team": "x".repeat(257)}}),
            serde_json::json!({"principal_tags": {"team": "*"}}),
            serde_json::json!({"principal_tags": {"team": "red", "Team": "admin"}}),
            Value::String("{".into()),
        ] {
            assert!(
                matches!(tags(bad.clone()), Err(Refusal::Invalid(_))),
                "{bad} is refused"
            );
        }
        let many: serde_json::Map<String, Value> = (0..51)
            .map(|n| (format!("k{n}"), Value::from("v")))
            .collect();
        let refused = tags(serde_json::json!({"principal_tags": many})).expect_err("refused");
        assert!(refused.to_string().contains("more than 50"), "{refused}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_at_once_fetch_a_provider_s_keys_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let issuer = format!(
            "http://{}/realms/r",
            listener.local_addr().expect("address")
        );
        let asked = Arc::new(AtomicUsize::new(0));
        let counted = asked.clone();
        let jwks = format!("{issuer}/certs");
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let (counted, jwks) = (counted.clone(), jwks.clone());
                tokio::spawn(async move {
                    let mut request = vec![0; 4096];
                    let read = stream.read(&mut request).await.unwrap_or(0);
                    let request = String::from_utf8_lossy(&request[..read]);
                    let body = if request.contains("openid-configuration") {
                        counted.fetch_add(1, Ordering::SeqCst);
                        // Slow enough that the other requests arrive while it is asked.
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        serde_json::json!({ "jwks_uri": jwks }).to_string()
                    } else {
                        serde_json::json!({"keys": []}).to_string()
                    };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        let asks = (0..8).map(|_| {
            let issuer = issuer.clone();
            tokio::spawn(async move { super::keys(&issuer, false).await.map(|k| k.to_string()) })
        });
        for ask in asks.collect::<Vec<_>>() {
            let got = ask.await.expect("task").expect("keys");
            assert_eq!(got, r#"{"keys":[]}"#);
        }
        assert_eq!(
            asked.load(Ordering::SeqCst),
            1,
            "one fetch for eight requests"
        );
    }
}
