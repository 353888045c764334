//! SigV4 as IAM's API is signed with it (crates/gateway/src/iam.rs): the `Authorization`
//! header read, the request's date checked, the canonical request rebuilt and its signature
//! compared in constant time. Pure code; s3s checks S3's own requests.

use aws_lc_rs::{constant_time, digest, hmac};
use hyper::HeaderMap;

use crate::layout::hex;

/// How far a request's date may be from the gateway's clock (SigV4's 15 minutes).
const SKEW_SECONDS_MAX: i64 = 15 * 60;

/// Why a signature is refused.
#[derive(Debug, PartialEq)]
pub(crate) enum SigError {
    /// The signature's parts are missing or unreadable.
    Incomplete(String),
    /// It does not match, is not of its day or is too old.
    Mismatch(String),
}

/// A request as its signature covers it.
pub(crate) struct Signed<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

impl Signed<'_> {
    /// The request's `Authorization` header and its date (`X-Amz-Date`), read and the date
    /// checked against `now`: what needs no secret, so that a bad request is refused before
    /// the signer is looked up.
    pub fn read(&self, now: time::OffsetDateTime) -> Result<(Authorization<'_>, &str), SigError> {
        let header = self
            .headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| SigError::Incomplete("the request has no Authorization".into()))?;
        let authorization = Authorization::parse(header).map_err(SigError::Incomplete)?;
        let stamp = self
            .headers
            .get("x-amz-date")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| SigError::Incomplete("the request has no X-Amz-Date".into()))?;
        check_date(stamp, authorization.date, now)?;
        Ok((authorization, stamp))
    }

    /// Checks that `authorization` is the signature of this request, dated `stamp`, by the
    /// holder of `secret`.
    pub fn check(
        &self,
        authorization: &Authorization,
        stamp: &str,
        secret: &str,
    ) -> Result<(), SigError> {
        let payload = hex(digest::digest(&digest::SHA256, self.body).as_ref());
        if let Some(given) = self.headers.get("x-amz-content-sha256") {
            if given.as_bytes() != payload.as_bytes() {
                return Err(SigError::Mismatch(
                    "x-amz-content-sha256 is not the body's SHA-256".into(),
                ));
            }
        }
        let canonical = self.canonical(&authorization.signed_headers, &payload)?;
        let want = signature(secret, stamp, authorization, &canonical);
        constant_time::verify_slices_are_equal(want.as_bytes(), authorization.signature.as_bytes())
            .map_err(|_| {
                SigError::Mismatch(
                    "The request signature we calculated does not match the signature you \
                     provided."
                        .into(),
                )
            })
    }

    /// SigV4's canonical request; the path is taken as the client encoded it.
    fn canonical(&self, signed: &[&str], payload: &str) -> Result<String, SigError> {
        if !signed.contains(&"host") {
            return Err(SigError::Incomplete(
                "SignedHeaders must include host".into(),
            ));
        }
        let mut pairs: Vec<(String, String)> = form_urlencoded::parse(self.query.as_bytes())
            .map(|(name, value)| (uri_encode(&name), uri_encode(&value)))
            .collect();
        pairs.sort();
        let query: Vec<String> = pairs
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        let mut canonical_headers = String::new();
        for name in signed {
            let values: Vec<String> = self
                .headers
                .get_all(*name)
                .iter()
                .map(|v| {
                    let text = String::from_utf8_lossy(v.as_bytes());
                    text.split_whitespace().collect::<Vec<_>>().join(" ")
                })
                .collect();
            if values.is_empty() {
                return Err(SigError::Incomplete(format!(
                    "signed header {name} is not in the request"
                )));
            }
            canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
        }
        let path = if self.path.is_empty() { "/" } else { self.path };
        Ok(format!(
            "{}\n{path}\n{}\n{canonical_headers}\n{}\n{payload}",
            self.method,
            query.join("&"),
            signed.join(";")
        ))
    }
}

/// Checks that the request's date `stamp` (`20261130T120000Z`) is on the credential's day
/// `day` and within [`SKEW_SECONDS_MAX`] of `now`.
fn check_date(stamp: &str, day: &str, now: time::OffsetDateTime) -> Result<(), SigError> {
    let at = date(stamp)
        .ok_or_else(|| SigError::Incomplete(format!("X-Amz-Date {stamp:?} is not a SigV4 date")))?;
    if stamp.get(..8) != Some(day) {
        return Err(SigError::Mismatch(format!(
            "the credential's date {day:?} is not the request's ({stamp})"
        )));
    }
    if (now - at).whole_seconds().abs() > SKEW_SECONDS_MAX {
        return Err(SigError::Mismatch(format!(
            "Signature expired: {stamp} is more than 15 minutes from the gateway's time"
        )));
    }
    Ok(())
}

/// A SigV4 date, `20261130T120000Z`.
pub(crate) fn date(stamp: &str) -> Option<time::OffsetDateTime> {
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

/// The `Authorization` header of a POST of `body` to `/` on `host` for IAM, dated
/// `stamp`, signing `host` and `x-amz-date`: as clients sign, for the fuzz seeds and the
/// tests.
#[cfg(any(test, fuzzing))]
pub(crate) fn sign(access_key: &str, secret: &str, stamp: &str, host: &str, body: &[u8]) -> String {
    let mut headers = HeaderMap::new();
    for (name, value) in [("host", host), ("x-amz-date", stamp)] {
        if let Ok(value) = hyper::http::HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    }
    let day = stamp.get(..8).unwrap_or("");
    let draft = Authorization {
        access_key,
        date: day,
        region: "us-east-1",
        service: "iam",
        signed_headers: vec!["host", "x-amz-date"],
        signature: "",
    };
    let signed = Signed {
        method: "POST",
        path: "/",
        query: "",
        headers: &headers,
        body,
    };
    let payload = hex(digest::digest(&digest::SHA256, body).as_ref());
    let canonical = signed
        .canonical(&draft.signed_headers, &payload)
        .unwrap_or_default();
    let signature = signature(secret, stamp, &draft, &canonical);
    format!(
        "AWS4-HMAC-SHA256 Credential={access_key}/{day}/us-east-1/iam/aws4_request, \
         SignedHeaders=host;x-amz-date, Signature={signature}"
    )
}

/// A SigV4 `Authorization` header's parts.
#[derive(Debug, PartialEq)]
pub(crate) struct Authorization<'a> {
    pub access_key: &'a str,
    date: &'a str,
    region: &'a str,
    pub service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

impl<'a> Authorization<'a> {
    pub fn parse(header: &'a str) -> Result<Authorization<'a>, String> {
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

/// RFC 3986 encoding as SigV4 wants it: everything but unreserved characters.
pub(crate) fn uri_encode(text: &str) -> String {
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
    let scope = format!(
        "{}/{}/{}/aws4_request",
        authorization.date, authorization.region, authorization.service
    );
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
    );
    let key = signing_key(
        secret,
        authorization.date,
        authorization.region,
        authorization.service,
    );
    hex(hmac::sign(&key, to_sign.as_bytes()).as_ref())
}

/// SigV4's signing key of `secret` for a day (`YYYYMMDD`), a region and a service.
pub(crate) fn signing_key(secret: &str, day: &str, region: &str, service: &str) -> hmac::Key {
    let sign = |key: &[u8], data: &str| {
        hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
    };
    let day = sign(format!("AWS4{secret}").as_bytes(), day);
    let region = sign(day.as_ref(), region);
    let service = sign(region.as_ref(), service);
    let key = sign(service.as_ref(), "aws4_request");
    hmac::Key::new(hmac::HMAC_SHA256, key.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().expect("a header value"));
        }
        map
    }

    /// AWS's SigV4 test suite, `get-vanilla`.
    #[test]
    fn signatures_match_aws_s_test_suite() {
        let header = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/\
                      aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73e\
                      bf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31";
        let map = headers(&[
            ("host", "example.amazonaws.com"),
            ("x-amz-date", "20150830T123600Z"),
            ("authorization", header),
        ]);
        let signed = Signed {
            method: "GET",
            path: "/",
            query: "",
            headers: &map,
            body: b"",
        };
        let now = date("20150830T124000Z").expect("a date");
        let (authorization, stamp) = signed.read(now).expect("read");
        assert_eq!(authorization.service, "service");
        assert_eq!(signed.check(&authorization, stamp, SECRET), Ok(()));
        assert!(matches!(
            signed.check(&authorization, stamp, "another secret"),
            Err(SigError::Mismatch(_))
        ));
        let later = date("20150830T125200Z").expect("a date");
        assert!(matches!(signed.read(later), Err(SigError::Mismatch(_))));
    }

    /// A request signed here, then changed: its body, an unsigned host, its date.
    #[test]
    fn a_changed_request_does_not_match_its_signature() {
        let stamp = "20261130T120000Z";
        let now = date(stamp).expect("a date");
        let body = b"Action=ListUserPolicies&UserName=bob&Version=2010-05-08";
        let header = sign("CK", SECRET, stamp, "127.0.0.1:7480", body);
        let check = |body: &[u8], host: &str, date: &str| {
            let map = headers(&[
                ("host", host),
                ("x-amz-date", date),
                ("authorization", &header),
            ]);
            let signed = Signed {
                method: "POST",
                path: "/",
                query: "",
                headers: &map,
                body,
            };
            let (authorization, stamp) = signed.read(now)?;
            signed.check(&authorization, stamp, SECRET)
        };
        assert_eq!(check(body, "127.0.0.1:7480", stamp), Ok(()));
        let other = b"Action=DeleteUserPolicy&UserName=bob&Version=2010-05-08";
        assert!(matches!(
            check(other, "127.0.0.1:7480", stamp),
            Err(SigError::Mismatch(_))
        ));
        assert!(matches!(
            check(body, "127.0.0.2:7480", stamp),
            Err(SigError::Mismatch(_))
        ));
        assert!(matches!(
            check(body, "127.0.0.1:7480", "20261130T120001Z"),
            Err(SigError::Mismatch(_))
        ));
        let map = headers(&[("x-amz-date", stamp)]);
        let unsigned_host = Signed {
            method: "POST",
            path: "/",
            query: "",
            headers: &map,
            body,
        };
        assert!(matches!(
            unsigned_host.canonical(&["x-amz-date"], ""),
            Err(SigError::Incomplete(_))
        ));
    }

    #[test]
    fn dates_must_be_the_credentials_day_and_near_the_clock() {
        let now = date("20261130T120000Z").expect("a date");
        assert_eq!(now.unix_timestamp(), 1_796_040_000);
        assert!(check_date("20261130T120500Z", "20261130", now).is_ok());
        assert!(matches!(
            check_date("20261130T121600Z", "20261130", now),
            Err(SigError::Mismatch(_))
        ));
        for day in ["20261129", "2026", ""] {
            assert!(matches!(
                check_date("20261130T120000Z", day, now),
                Err(SigError::Mismatch(_))
            ));
        }
        assert!(matches!(
            check_date("2026-11-30", "20261130", now),
            Err(SigError::Incomplete(_))
        ));
        assert!(
            Authorization::parse("AWS4-HMAC-SHA256 Credential=K/20261130/us-east-1/iam").is_err()
        );
        assert!(Authorization::parse("AWS K:sig").is_err());
    }
}
