//! Cross-origin resource sharing: from which web pages (origins) browsers may use a bucket.
//! Pure code: a bucket's rules ([`Cors`], checked as S3 checks them by [`Rule::check`]) and
//! the two answers the gateway asks of them: a preflight request's ([`preflight`]) and the
//! headers an ordinary request's response gains ([`allowing`]).
//!
//! A rule allows origins (each with at most one `*`, matching any run of characters),
//! methods and request headers (again with at most one `*`, matched without regard to
//! case). The first rule that allows a request's origin, method and headers answers it.

use serde::{Deserialize, Serialize};

/// The most rules one bucket has (S3's limit).
pub const RULES_MAX: usize = 100;
/// The methods a rule may allow (S3's).
pub const METHODS: [&str; 5] = ["GET", "PUT", "HEAD", "POST", "DELETE"];
/// The longest rule id S3 allows.
pub const ID_CHARS_MAX: usize = 255;

/// A bucket's CORS configuration, in its index object's cors attribute.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cors {
    pub rules: Vec<Rule>,
}

impl crate::layout::Record for Cors {}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub id: Option<String>,
    /// Origins allowed, as patterns with at most one `*`.
    pub origins: Vec<String>,
    /// Methods allowed, of [`METHODS`].
    pub methods: Vec<String>,
    /// Request headers a preflight may name, as patterns with at most one `*`.
    pub headers: Vec<String>,
    /// Response headers the browser lets the page read.
    pub expose: Vec<String>,
    /// How long a browser may keep a preflight's answer, in seconds.
    pub max_age: Option<u32>,
}

/// Why a preflight request is refused: S3 answers the first with 400, the others with 403.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The request lacks the header named.
    Unasked(&'static str),
    /// The bucket has no CORS configuration.
    Off,
    /// No rule allows the request.
    Denied,
}

/// Whether `text` matches `pattern`, whose one `*` (if any) matches any run of characters.
fn matches(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            text.len() >= head.len() + tail.len() && text.starts_with(head) && text.ends_with(tail)
        }
    }
}

impl Rule {
    /// The rule as S3 takes it: origins and methods given, methods S3's, at most one `*` in
    /// an origin or a header.
    pub fn check(&self) -> Result<(), String> {
        if let Some(id) = &self.id {
            if id.chars().count() > ID_CHARS_MAX {
                return Err(format!(
                    "a CORS rule id is at most {ID_CHARS_MAX} characters"
                ));
            }
        }
        if self.origins.is_empty() || self.methods.is_empty() {
            return Err("a CORS rule allows at least one origin and one method".into());
        }
        if let Some(method) = self.methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
            return Err(format!(
                "a CORS rule allows the methods {}, not {method:?}",
                METHODS.join(", ")
            ));
        }
        let wild = |pattern: &&String| pattern.matches('*').count() > 1;
        if let Some(origin) = self.origins.iter().find(wild) {
            return Err(format!(
                "allowed origin {origin:?} has more than one wildcard"
            ));
        }
        if let Some(header) = self.headers.iter().find(wild) {
            return Err(format!(
                "allowed header {header:?} has more than one wildcard"
            ));
        }
        Ok(())
    }

    /// The pattern of this rule that allows `origin`.
    fn origin(&self, origin: &str) -> Option<&str> {
        self.origins
            .iter()
            .map(String::as_str)
            .find(|pattern| matches(pattern, origin))
    }

    fn allows(&self, method: &str, headers: &[String]) -> bool {
        self.methods.iter().any(|m| m == method)
            && headers.iter().all(|header| {
                let header = header.to_ascii_lowercase();
                self.headers
                    .iter()
                    .any(|pattern| matches(&pattern.to_ascii_lowercase(), &header))
            })
    }

    /// The headers that answer `origin`, allowed by `pattern`.
    fn answer(&self, pattern: &str, origin: &str) -> Vec<(&'static str, String)> {
        let mut headers = Vec::new();
        if pattern == "*" {
            headers.push(("access-control-allow-origin", "*".to_string()));
        } else {
            headers.push(("access-control-allow-origin", origin.to_string()));
            headers.push(("access-control-allow-credentials", "true".to_string()));
        }
        headers.push(("access-control-allow-methods", self.methods.join(", ")));
        if !self.expose.is_empty() {
            headers.push(("access-control-expose-headers", self.expose.join(", ")));
        }
        if let Some(age) = self.max_age {
            headers.push(("access-control-max-age", age.to_string()));
        }
        headers
    }
}

/// What makes a response depend on the request's origin, for caches.
const VARY: (&str, &str) = (
    "vary",
    "Origin, Access-Control-Request-Headers, Access-Control-Request-Method",
);

impl Cors {
    /// The first rule that allows `origin` to use `method` with request `headers`, and
    /// the origin pattern that allows it.
    fn rule(&self, origin: &str, method: &str, headers: &[String]) -> Option<(&Rule, &str)> {
        self.rules.iter().find_map(|rule| {
            let pattern = rule.origin(origin)?;
            rule.allows(method, headers).then_some((rule, pattern))
        })
    }
}

/// The names in an `Access-Control-Request-Headers` header.
fn header_names(given: Option<&str>) -> Vec<String> {
    given
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .collect()
}

/// The answer to a preflight (`OPTIONS`) request from `origin` asking to use `method` with
/// request headers `headers` (the header's text), on a bucket with `cors`: the headers of
/// its 200, or why it is refused.
pub fn preflight(
    cors: Option<&Cors>,
    origin: Option<&str>,
    method: Option<&str>,
    headers: Option<&str>,
) -> Result<Vec<(&'static str, String)>, Refused> {
    let origin = origin.ok_or(Refused::Unasked("Origin"))?;
    let method = method.ok_or(Refused::Unasked("Access-Control-Request-Method"))?;
    let cors = cors.ok_or(Refused::Off)?;
    let names = header_names(headers);
    let (rule, pattern) = cors.rule(origin, method, &names).ok_or(Refused::Denied)?;
    let mut answer = rule.answer(pattern, origin);
    if !names.is_empty() {
        answer.push(("access-control-allow-headers", names.join(", ")));
    }
    answer.push((VARY.0, VARY.1.to_string()));
    Ok(answer)
}

/// The headers a response gains for a request from `origin` using `method` (the method it
/// says it will use in `Access-Control-Request-Method`, else its own), on a bucket with
/// `cors`: none where no rule allows it, besides `Vary`.
pub fn allowing(cors: &Cors, origin: &str, method: &str) -> Vec<(&'static str, String)> {
    let mut headers = cors
        .rule(origin, method, &[])
        .map(|(rule, pattern)| rule.answer(pattern, origin))
        .unwrap_or_default();
    headers.push((VARY.0, VARY.1.to_string()));
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> Rule {
        let strings = |given: &[&str]| given.iter().map(|s| s.to_string()).collect();
        Rule {
            origins: strings(origins),
            methods: strings(methods),
            headers: strings(headers),
            ..Rule::default()
        }
    }

    fn origin_of(headers: &[(&'static str, String)]) -> Option<String> {
        headers
            .iter()
            .find(|(name, _)| *name == "access-control-allow-origin")
            .map(|(_, value)| value.clone())
    }

    #[test]
    fn origins_match_with_one_wildcard() {
        assert!(matches("*suffix", "foo.suffix"));
        assert!(!matches("*suffix", "foo.suffix.get"));
        assert!(matches("start*end", "startend"));
        assert!(matches("start*end", "start12end"));
        assert!(!matches("start*end", "0start12end"));
        assert!(!matches("abab*abab", "ababab"));
        assert!(matches("prefix*", "prefix"));
        assert!(!matches("prefix*", "bla.prefix"));
        assert!(matches("*", ""));
        assert!(matches("https://a.example", "https://a.example"));
        assert!(!matches("https://a.example", "https://b.example"));
    }

    #[test]
    fn preflights_are_answered_by_the_first_rule_that_allows_them() {
        let cors = Cors {
            rules: vec![
                rule(&["*.get"], &["GET"], &[]),
                rule(&["*.put"], &["PUT", "POST"], &["x-amz-*", "content-type"]),
                rule(&["*"], &["HEAD"], &[]),
            ],
        };
        let asked = |origin, method, headers| preflight(Some(&cors), origin, method, headers);
        let got = asked(Some("a.get"), Some("GET"), None).expect("a.get may GET");
        assert_eq!(origin_of(&got).as_deref(), Some("a.get"));
        assert!(got.contains(&("access-control-allow-methods", "GET".into())));
        assert!(got.contains(&("access-control-allow-credentials", "true".into())));
        assert_eq!(
            asked(Some("a.get"), Some("PUT"), None),
            Err(Refused::Denied)
        );
        let put = asked(
            Some("a.put"),
            Some("PUT"),
            Some("X-Amz-Meta-A, Content-Type"),
        )
        .expect("a.put may PUT with those headers");
        assert!(put.contains(&("access-control-allow-methods", "PUT, POST".into())));
        assert!(put.contains(&(
            "access-control-allow-headers",
            "X-Amz-Meta-A, Content-Type".into()
        )));
        assert_eq!(
            asked(Some("a.put"), Some("PUT"), Some("authorization")),
            Err(Refused::Denied)
        );
        let head = asked(Some("anyone"), Some("HEAD"), None).expect("anyone may HEAD");
        assert_eq!(origin_of(&head).as_deref(), Some("*"));
        assert!(!head
            .iter()
            .any(|(n, _)| *n == "access-control-allow-credentials"));
        assert_eq!(
            asked(None, Some("GET"), None),
            Err(Refused::Unasked("Origin"))
        );
        assert_eq!(
            asked(Some("a.get"), None, None),
            Err(Refused::Unasked("Access-Control-Request-Method"))
        );
        assert_eq!(
            preflight(None, Some("a.get"), Some("GET"), None),
            Err(Refused::Off)
        );
    }

    #[test]
    fn ordinary_requests_gain_headers_only_where_a_rule_allows() {
        let mut allowed = rule(&["https://app.example"], &["GET"], &[]);
        allowed.expose = vec!["ETag".into(), "x-amz-meta-a".into()];
        allowed.max_age = Some(600);
        let cors = Cors {
            rules: vec![allowed],
        };
        let got = allowing(&cors, "https://app.example", "GET");
        assert_eq!(origin_of(&got).as_deref(), Some("https://app.example"));
        assert!(got.contains(&("access-control-expose-headers", "ETag, x-amz-meta-a".into())));
        assert!(got.contains(&("access-control-max-age", "600".into())));
        let other = allowing(&cors, "https://evil.example", "GET");
        assert_eq!(other, vec![(VARY.0, VARY.1.to_string())]);
        assert_eq!(
            origin_of(&allowing(&cors, "https://app.example", "PUT")),
            None
        );
    }

    #[test]
    fn rules_are_checked_as_s3_checks_them() {
        assert!(
            rule(&["*"], &["GET", "PUT", "HEAD", "POST", "DELETE"], &["*"])
                .check()
                .is_ok()
        );
        assert!(rule(&["*"], &["PATCH"], &[]).check().is_err());
        assert!(rule(&["*"], &["get"], &[]).check().is_err());
        assert!(rule(&["*.*"], &["GET"], &[]).check().is_err());
        assert!(rule(&["*"], &["GET"], &["x-*-*"]).check().is_err());
        assert!(rule(&[], &["GET"], &[]).check().is_err());
        assert!(rule(&["*"], &[], &[]).check().is_err());
        let mut long = rule(&["*"], &["GET"], &[]);
        long.id = Some("r".repeat(ID_CHARS_MAX + 1));
        assert!(long.check().is_err());
    }
}
