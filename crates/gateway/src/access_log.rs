//! Server access logs: a bucket's logging configuration (PutBucketLogging), one line per
//! request in S3's log format, the key of each log object, whether a target bucket's policy
//! lets the logs of a bucket in, and the batches a gateway holds until it delivers them.
//! Decided here without IO; `crate::s3::logging` reads the requests and writes the objects.
//!
//! A batch gathers the lines bound for one target bucket and key stem (its prefix, and for
//! partitioned keys the source's account, region and bucket). It is delivered as one
//! object when a request to one of its buckets finds it older than the roll time or larger
//! than [`BATCH_BYTES_MAX`], when the gateway's sweep finds it idle for twice the roll
//! time (a minute at least), and when the gateway stops. Lines wait in the gateway's memory: a gateway killed
//! with SIGKILL loses the lines it held, as S3 itself delivers logs on a best-effort basis.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::policy::{self, Action, Asked, Context, Policy, Verdict};

/// The service principal a target bucket's policy allows to put logs (S3's).
pub const LOG_SERVICE: &str = "logging.s3.amazonaws.com";
/// A batch this large is delivered at the next request to one of its buckets, whatever its
/// age: it bounds the memory a busy bucket's logs take between deliveries.
pub const BATCH_BYTES_MAX: usize = 8 << 20;
/// A batch holds no more than this: lines past it (requests faster than deliveries) are
/// counted and dropped, so that no burst of requests takes the gateway's memory.
pub const BATCH_BYTES_HELD_MAX: usize = 8 * BATCH_BYTES_MAX;
/// The longest text a line takes from a request (its request line, user agent, referrer,
/// host, version id); longer ones are cut.
pub const TEXT_BYTES_MAX: usize = 1024;
/// The roll time of a gateway that is not told one (Ceph's default).
pub const ROLL_SECONDS_DEFAULT: u64 = 300;
/// The least time a batch waits for a request before the sweep delivers it: the sweep is
/// for buckets gone quiet, and a short roll time (to test) should not cut a bucket's logs
/// into objects of a line or two.
pub const IDLE_NS_MIN: u64 = 60 * 1_000_000_000;

/// How a log object's key is made under the target prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyFormat {
    /// `[prefix]YYYY-MM-DD-hh-mm-ss-UNIQUE`, the time the object is delivered.
    Simple,
    /// `[prefix]account/region/bucket/YYYY/MM/DD/YYYY-MM-DD-hh-mm-ss-UNIQUE`: the date
    /// directories from the first line's time (`event_time`) or the delivery's.
    Partitioned { event_time: bool },
}

/// A bucket's logging configuration, in its index object's logging attribute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Logging {
    /// The bucket the logs go to.
    pub target: String,
    /// The start of every log object's key.
    pub prefix: String,
    pub format: KeyFormat,
    /// When it was set, in ns since the epoch (GetBucketLogging's Last-Modified): setting
    /// the same configuration again keeps it.
    pub set_ns: u64,
}

impl crate::layout::Record for Logging {}

impl Logging {
    /// Whether `other` logs to the same place the same way (its time aside).
    pub fn same_as(&self, other: &Logging) -> bool {
        (&self.target, &self.prefix, self.format) == (&other.target, &other.prefix, other.format)
    }
}

/// A logged bucket and its owner, whom a target's policy names as `aws:SourceArn` and
/// `aws:SourceAccount`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source {
    pub bucket: String,
    pub owner: String,
}

/// Whether `policy`, a target bucket's (named `target`), lets [`LOG_SERVICE`] put the logs
/// of `source` under `prefix`: a statement must name the service (a policy that lets anyone
/// in does not), and its conditions see the source's ARN and account, as in S3.
pub fn may_deliver(policy: Option<&Policy>, target: &str, prefix: &str, source: &Source) -> bool {
    let Some(policy) = policy else {
        return false;
    };
    let mut context = Context::new();
    context.insert(
        "aws:sourcearn".into(),
        vec![policy::resource(&source.bucket, None)],
    );
    context.insert("aws:sourceaccount".into(), vec![source.owner.clone()]);
    let principal = format!("Service:{LOG_SERVICE}");
    let resource = policy::resource(target, Some(prefix));
    let asked = Asked {
        principal: Some(&principal),
        action: Action::PutObject,
        resource: &resource,
        context: &context,
        account: None,
        role: None,
    };
    policy.judge_named(&asked) == Verdict::Allowed
}

/// How a request was authenticated, as its log line says it: `AuthType` and `SigVersion`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Auth {
    pub kind: Option<&'static str>,
    pub version: Option<&'static str>,
}

/// How a request with `authorization` (its header) and `query` was signed.
pub fn auth(authorization: Option<&str>, query: &str) -> Auth {
    let names: Vec<&str> = query_names(query).collect();
    let has = |name: &str| names.contains(&name);
    let (kind, version) = if has("X-Amz-Signature") {
        (Some("QueryString"), Some("SigV4"))
    } else if has("Signature") && has("AWSAccessKeyId") {
        (Some("QueryString"), Some("SigV2"))
    } else {
        match authorization {
            Some(a) if a.starts_with("AWS4-") => (Some("AuthHeader"), Some("SigV4")),
            Some(a) if a.starts_with("AWS ") => (Some("AuthHeader"), Some("SigV2")),
            _ => (None, None),
        }
    };
    Auth { kind, version }
}

/// The names of a query's parameters.
fn query_names(query: &str) -> impl Iterator<Item = &str> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| pair.split_once('=').map_or(pair, |(name, _)| name))
}

/// The subresources that name an operation's object in S3's logs, with that name; the
/// first one a query has wins.
const SUBRESOURCES: &[(&str, &str)] = &[
    ("acl", "ACL"),
    ("tagging", "TAGGING"),
    ("retention", "RETENTION"),
    ("legal-hold", "LEGAL_HOLD"),
    ("attributes", "OBJECT_ATTRIBUTES"),
    ("versioning", "VERSIONING"),
    ("versions", "BUCKETVERSIONS"),
    ("lifecycle", "LIFECYCLE"),
    ("policy", "BUCKETPOLICY"),
    ("policyStatus", "BUCKETPOLICYSTATUS"),
    ("cors", "CORS"),
    ("logging", "LOGGING_STATUS"),
    ("encryption", "ENCRYPTION"),
    ("object-lock", "OBJECT_LOCK_CONFIGURATION"),
    ("location", "LOCATION"),
    ("publicAccessBlock", "PUBLIC_ACCESS_BLOCK"),
    ("ownershipControls", "OWNERSHIP_CONTROLS"),
    ("requestPayment", "REQUEST_PAYMENT"),
];

/// The operation of a request, as S3's logs name it (`REST.PUT.OBJECT`): its method and
/// what it acts on, from its query's subresource and whether it names an object. A copy is
/// a PUT of its new object, as in Ceph's logs.
pub fn operation(method: &str, query: &str, object: bool) -> String {
    let names: Vec<&str> = query_names(query).collect();
    let has = |name: &str| names.contains(&name);
    let what = if has("uploads") || has("uploadId") {
        if method == "PUT" && has("partNumber") {
            "PART"
        } else {
            "UPLOAD"
        }
    } else if method == "POST" && has("delete") {
        "DELETE_MULTI_OBJECT"
    } else if let Some((_, what)) = SUBRESOURCES.iter().find(|(name, _)| has(name)) {
        match *what {
            "TAGGING" if object => "OBJECT_TAGGING",
            what => what,
        }
    } else if object {
        "OBJECT"
    } else {
        "BUCKET"
    };
    format!("REST.{method}.{what}")
}

/// One request, as its log line tells it.
#[derive(Clone, Debug)]
pub struct Entry {
    pub owner: String,
    pub bucket: String,
    pub at: time::OffsetDateTime,
    pub remote_ip: Option<String>,
    /// The user it was judged as, `None` for an anonymous request.
    pub requester: Option<String>,
    pub request_id: String,
    pub operation: String,
    pub key: Option<String>,
    /// `GET /bucket/key?query HTTP/1.1`.
    pub request_line: String,
    pub status: u16,
    pub error_code: Option<String>,
    pub bytes_sent: u64,
    pub object_size: Option<u64>,
    pub total_ms: u64,
    pub referrer: Option<String>,
    pub user_agent: Option<String>,
    pub version_id: Option<String>,
    pub auth: Auth,
    pub cipher_suite: Option<&'static str>,
    pub host: Option<String>,
    pub tls_version: Option<&'static str>,
    /// Whether only an ACL grant let it in.
    pub acl_required: bool,
}

impl Entry {
    /// The line S3 writes for it: 26 fields separated by spaces, `-` for an empty one, the
    /// time in brackets, the request line, referrer and user agent in quotes; the key URL
    /// encoded; no field holds a space, quote, bracket, control character or anything not
    /// ASCII of its own.
    pub fn line(&self) -> String {
        let dash = |text: Option<&str>| bare(text.unwrap_or(""));
        let number = |n: Option<u64>| n.map_or("-".to_owned(), |n| n.to_string());
        let key = self
            .key
            .as_deref()
            .map(|key| crate::sigv4::uri_encode(key).replace("%2F", "/"));
        let fields = [
            bare(&self.owner),
            bare(&self.bucket),
            format!("[{}]", log_time(self.at)),
            dash(self.remote_ip.as_deref()),
            dash(self.requester.as_deref()),
            bare(&self.request_id),
            bare(&self.operation),
            dash(key.as_deref()),
            quoted(&self.request_line),
            self.status.to_string(),
            dash(self.error_code.as_deref()),
            number(Some(self.bytes_sent).filter(|&n| n > 0)),
            number(self.object_size),
            self.total_ms.to_string(),
            self.total_ms.to_string(),
            quoted(self.referrer.as_deref().unwrap_or("-")),
            quoted(self.user_agent.as_deref().unwrap_or("-")),
            dash(self.version_id.as_deref()),
            "-".into(),
            dash(self.auth.version),
            dash(self.cipher_suite),
            dash(self.auth.kind),
            dash(self.host.as_deref()),
            dash(self.tls_version),
            "-".into(),
            (if self.acl_required { "Yes" } else { "-" }).into(),
        ];
        fields.join(" ")
    }
}

/// `[06/Feb/2019:00:00:38 +0000]`'s inside.
fn log_time(at: time::OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    let format = time::macros::format_description!(
        "[day]/[month repr:short]/[year]:[hour]:[minute]:[second] +0000"
    );
    at.format(&format).unwrap_or_else(|_| "-".into())
}

/// `text` as one field: `-` if empty; spaces, quotes, brackets, control characters and
/// anything not ASCII (Unicode has line and word separators of its own) percent-encoded.
fn bare(text: &str) -> String {
    if text.is_empty() {
        return "-".into();
    }
    escaped(text, true)
}

/// `text` in quotes, its quotes, brackets, backslashes, control characters and anything
/// not ASCII percent-encoded.
fn quoted(text: &str) -> String {
    format!("\"{}\"", escaped(text, false))
}

fn escaped(text: &str, spaces: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let special = matches!(c, '"' | '[' | ']' | '\\') || !c.is_ascii() || c.is_control();
        if special || (spaces && c == ' ') {
            let mut bytes = [0; 4];
            for b in c.encode_utf8(&mut bytes).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` cut to [`TEXT_BYTES_MAX`] bytes at most, on a character's bound.
pub fn clip(mut text: String) -> String {
    if text.len() > TEXT_BYTES_MAX {
        let mut end = TEXT_BYTES_MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// The stem of the keys of the log objects of `source` under `logging`: the prefix, and
/// for partitioned keys the source's account, `region` and bucket.
pub fn stem(logging: &Logging, source: &Source, region: &str) -> String {
    match logging.format {
        KeyFormat::Simple => logging.prefix.clone(),
        KeyFormat::Partitioned { .. } => format!(
            "{}{}/{region}/{}/",
            logging.prefix, source.owner, source.bucket
        ),
    }
}

/// The lines bound for one target bucket and key stem.
#[derive(Clone, Debug)]
pub struct Batch {
    pub target: String,
    /// The configured prefix, which the target's policy is asked about.
    pub prefix: String,
    pub stem: String,
    pub format: KeyFormat,
    /// When its first line was added (ns since the epoch).
    pub started_ns: u64,
    /// Each line, with the bucket it logs.
    pub lines: Vec<(Source, String)>,
    /// The bytes of its lines, with their newlines.
    pub bytes: usize,
    /// Lines dropped because it held [`BATCH_BYTES_HELD_MAX`].
    pub dropped: u64,
}

impl Batch {
    /// The buckets it logs.
    pub fn sources(&self) -> BTreeSet<&Source> {
        self.lines.iter().map(|(source, _)| source).collect()
    }

    /// The log object's content: the lines of the sources `allowed` keeps, one per line.
    pub fn body(&self, allowed: impl Fn(&Source) -> bool) -> String {
        let mut body = String::with_capacity(self.bytes);
        for (source, line) in &self.lines {
            if allowed(source) {
                body.push_str(line);
                body.push('\n');
            }
        }
        body
    }

    /// Its object's key when delivered at `now`, made unique by `unique`.
    pub fn key(&self, now: time::OffsetDateTime, unique: u64) -> String {
        let now = now.to_offset(time::UtcOffset::UTC);
        let stamp =
            time::macros::format_description!("[year]-[month]-[day]-[hour]-[minute]-[second]");
        let name = format!("{}-{unique:016X}", now.format(&stamp).unwrap_or_default());
        match self.format {
            KeyFormat::Simple => format!("{}{name}", self.stem),
            KeyFormat::Partitioned { event_time } => {
                let dated = match event_time {
                    true => {
                        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.started_ns))
                            .unwrap_or(now)
                    }
                    false => now,
                };
                let day = time::macros::format_description!("[year]/[month]/[day]/");
                let day = dated.format(&day).unwrap_or_default();
                format!("{}{day}{name}", self.stem)
            }
        }
    }
}

/// Where a batch goes: its target bucket, prefix and key stem.
type Slot = (String, String, String);

/// The batches a gateway holds, by target bucket, prefix and key stem, and its roll time.
#[derive(Debug)]
pub struct Batches {
    open: BTreeMap<Slot, Batch>,
    roll_ns: u64,
}

impl Default for Batches {
    fn default() -> Batches {
        Batches::new(ROLL_SECONDS_DEFAULT * 1_000_000_000)
    }
}

impl Batches {
    pub fn new(roll_ns: u64) -> Batches {
        assert!(
            roll_ns > 0,
            "a roll time of zero would deliver every line alone"
        );
        Batches {
            open: BTreeMap::new(),
            roll_ns,
        }
    }

    /// Sets how old a batch is when it is due.
    pub fn set_roll_ns(&mut self, roll_ns: u64) {
        assert!(
            roll_ns > 0,
            "a roll time of zero would deliver every line alone"
        );
        self.roll_ns = roll_ns;
    }

    /// Adds `line`, which logs `source` under `logging` with key stem `stem`, at `now_ns`;
    /// drops it if its batch holds [`BATCH_BYTES_HELD_MAX`] already.
    pub fn add(
        &mut self,
        logging: &Logging,
        source: Source,
        stem: String,
        line: String,
        now_ns: u64,
    ) {
        let slot = (logging.target.clone(), logging.prefix.clone(), stem.clone());
        let batch = self.open.entry(slot).or_insert_with(|| Batch {
            target: logging.target.clone(),
            prefix: logging.prefix.clone(),
            stem,
            format: logging.format,
            started_ns: now_ns,
            lines: Vec::new(),
            bytes: 0,
            dropped: 0,
        });
        if batch.bytes + line.len() + 1 > BATCH_BYTES_HELD_MAX {
            batch.dropped += 1;
            return;
        }
        batch.bytes += line.len() + 1;
        batch.lines.push((source, line));
    }

    /// Puts back a batch whose delivery failed, before the lines added since.
    pub fn put_back(&mut self, mut batch: Batch) {
        let slot = (
            batch.target.clone(),
            batch.prefix.clone(),
            batch.stem.clone(),
        );
        if let Some(newer) = self.open.remove(&slot) {
            batch.lines.extend(newer.lines);
            batch.bytes += newer.bytes;
            batch.dropped += newer.dropped;
        }
        self.open.insert(slot, batch);
    }

    /// The batch bound for `target` under `prefix` and `stem`, taken out for delivery if it
    /// is due at `now_ns`: as old as the roll time, or [`BATCH_BYTES_MAX`] large.
    pub fn take_due(
        &mut self,
        target: &str,
        prefix: &str,
        stem: &str,
        now_ns: u64,
    ) -> Option<Batch> {
        let slot = (target.to_owned(), prefix.to_owned(), stem.to_owned());
        let batch = self.open.get(&slot)?;
        let old = now_ns.saturating_sub(batch.started_ns) >= self.roll_ns;
        if old || batch.bytes >= BATCH_BYTES_MAX {
            return self.open.remove(&slot);
        }
        None
    }

    /// The batches that have waited twice the roll time (a minute at least) at `now_ns`
    /// with no request to deliver them, taken out.
    pub fn take_idle(&mut self, now_ns: u64) -> Vec<Batch> {
        let idle_ns = self.roll_ns.saturating_mul(2).max(IDLE_NS_MIN);
        let slots: Vec<Slot> = self
            .open
            .iter()
            .filter(|(_, b)| now_ns.saturating_sub(b.started_ns) >= idle_ns)
            .map(|(slot, _)| slot.clone())
            .collect();
        slots
            .into_iter()
            .filter_map(|slot| self.open.remove(&slot))
            .collect()
    }

    /// Every batch, taken out (the gateway is stopping).
    pub fn take_all(&mut self) -> Vec<Batch> {
        std::mem::take(&mut self.open).into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND_NS: u64 = 1_000_000_000;

    fn logging(format: KeyFormat) -> Logging {
        Logging {
            target: "logs".into(),
            prefix: "log/".into(),
            format,
            set_ns: 0,
        }
    }

    fn source(bucket: &str, owner: &str) -> Source {
        Source {
            bucket: bucket.into(),
            owner: owner.into(),
        }
    }

    fn entry() -> Entry {
        Entry {
            owner: "alice".into(),
            bucket: "photos".into(),
            at: time::macros::datetime!(2026-12-02 04:05:06 UTC),
            remote_ip: Some("127.0.0.1".into()),
            requester: Some("bob".into()),
            request_id: "0123456789ABCDEF".into(),
            operation: "REST.GET.OBJECT".into(),
            key: Some("dir/a b\"c".into()),
            request_line: "GET /photos/dir/a%20b%22c?x=\"1\" HTTP/1.1".into(),
            status: 200,
            error_code: None,
            bytes_sent: 42,
            object_size: Some(42),
            total_ms: 3,
            referrer: None,
            user_agent: Some("Boto3/1.0 [x] \"quoted\"".into()),
            version_id: None,
            auth: auth(Some("AWS4-HMAC-SHA256 Credential=x"), ""),
            cipher_suite: Some("TLS_AES_256_GCM_SHA384"),
            host: Some("127.0.0.1:7480".into()),
            tls_version: Some("TLSv1.3"),
            acl_required: true,
        }
    }

    /// The fields of a line as a reader splits it: brackets and quotes group words.
    fn fields(line: &str) -> Vec<String> {
        let mut fields = Vec::new();
        let mut rest = line;
        while !rest.is_empty() {
            let (field, tail) = match rest.chars().next() {
                Some(open @ ('"' | '[')) => {
                    let close = if open == '"' { '"' } else { ']' };
                    let end = rest[1..].find(close).expect("closed") + 1;
                    (&rest[1..end], &rest[end + 1..])
                }
                _ => rest.split_once(' ').map_or((rest, ""), |(f, t)| (f, t)),
            };
            fields.push(field.to_owned());
            rest = tail.trim_start_matches(' ');
        }
        fields
    }

    #[test]
    fn a_line_has_s3s_26_fields_whatever_its_texts_hold() {
        let line = entry().line();
        let got = fields(&line);
        assert_eq!(got.len(), 26, "{line}");
        assert_eq!(got[0], "alice");
        assert_eq!(got[2], "02/Dec/2026:04:05:06 +0000");
        assert_eq!(got[4], "bob");
        assert_eq!(got[6], "REST.GET.OBJECT");
        assert_eq!(got[7], "dir/a%20b%22c");
        assert_eq!(got[8], "GET /photos/dir/a%20b%22c?x=%221%22 HTTP/1.1");
        assert_eq!(got[10], "-");
        assert_eq!(got[15], "-");
        assert_eq!(got[16], "Boto3/1.0 %5Bx%5D %22quoted%22");
        assert_eq!(got[19], "SigV4");
        assert_eq!(got[21], "AuthHeader");
        assert_eq!(got[25], "Yes");
        let anonymous = Entry {
            requester: None,
            key: None,
            auth: auth(None, ""),
            bytes_sent: 0,
            acl_required: false,
            ..entry()
        };
        let got = fields(&anonymous.line());
        assert_eq!(got.len(), 26);
        assert_eq!((&*got[4], &*got[7], &*got[11]), ("-", "-", "-"));
        assert_eq!((&*got[19], &*got[21], &*got[25]), ("-", "-", "-"));
    }

    #[test]
    fn texts_are_cut_and_unicode_separators_encoded() {
        let long = "é".repeat(TEXT_BYTES_MAX);
        let cut = clip(long);
        assert!(cut.len() <= TEXT_BYTES_MAX && cut.len() > TEXT_BYTES_MAX - 2);
        assert_eq!(clip("short".into()), "short");
        let odd = Entry {
            user_agent: Some("a\u{2028}b\u{a0}c\nd".into()),
            version_id: Some("v\u{2029}w".into()),
            ..entry()
        };
        let line = odd.line();
        assert!(line.is_ascii(), "{line}");
        let got = fields(&line);
        assert_eq!(got.len(), 26, "{line}");
        assert_eq!(got[16], "a%E2%80%A8b%C2%A0c%0Ad");
        assert_eq!(got[17], "v%E2%80%A9w");
    }

    #[test]
    fn a_full_batch_drops_lines_and_a_failed_delivery_goes_back_first() {
        let mut batches = Batches::default();
        let logging = logging(KeyFormat::Simple);
        let a = source("a", "alice");
        let line = "x".repeat(BATCH_BYTES_MAX - 1);
        for _ in 0..9 {
            batches.add(&logging, a.clone(), "log/".into(), line.clone(), 0);
        }
        let full = batches.take_all().pop().expect("a batch");
        assert_eq!((full.lines.len(), full.dropped), (8, 1));
        assert!(full.bytes <= BATCH_BYTES_HELD_MAX);

        batches.add(&logging, a.clone(), "log/".into(), "old".into(), 0);
        let failed = batches
            .take_due("logs", "log/", "log/", u64::MAX)
            .expect("due");
        batches.add(&logging, a.clone(), "log/".into(), "new".into(), 5);
        batches.put_back(failed);
        let back = batches.take_all().pop().expect("one batch");
        assert_eq!(
            (back.body(|_| true), back.started_ns),
            ("old\nnew\n".to_owned(), 0)
        );
        let other = Logging {
            prefix: "log/alice/us-east-1/a/".into(),
            ..logging.clone()
        };
        let partitioned = Logging {
            format: KeyFormat::Partitioned { event_time: false },
            ..logging.clone()
        };
        let stem = stem(&partitioned, &a, "us-east-1");
        batches.add(&other, a.clone(), stem.clone(), "simple".into(), 0);
        batches.add(&partitioned, a, stem, "partitioned".into(), 0);
        assert_eq!(
            batches.take_all().len(),
            2,
            "a prefix keeps its batch apart"
        );
    }

    #[test]
    fn requests_are_named_as_s3s_logs_name_them() {
        let cases = [
            ("PUT", "", true, "REST.PUT.OBJECT"),
            ("GET", "", true, "REST.GET.OBJECT"),
            ("HEAD", "", true, "REST.HEAD.OBJECT"),
            ("DELETE", "versionId=x", true, "REST.DELETE.OBJECT"),
            ("GET", "list-type=2", false, "REST.GET.BUCKET"),
            ("POST", "delete", false, "REST.POST.DELETE_MULTI_OBJECT"),
            ("POST", "uploads", true, "REST.POST.UPLOAD"),
            ("POST", "uploadId=u", true, "REST.POST.UPLOAD"),
            ("PUT", "partNumber=1&uploadId=u", true, "REST.PUT.PART"),
            ("DELETE", "uploadId=u", true, "REST.DELETE.UPLOAD"),
            ("PUT", "tagging", true, "REST.PUT.OBJECT_TAGGING"),
            ("PUT", "tagging", false, "REST.PUT.TAGGING"),
            ("PUT", "acl", true, "REST.PUT.ACL"),
            ("PUT", "legal-hold", true, "REST.PUT.LEGAL_HOLD"),
            ("GET", "versioning", false, "REST.GET.VERSIONING"),
            ("GET", "versions&prefix=a", false, "REST.GET.BUCKETVERSIONS"),
        ];
        for (method, query, object, want) in cases {
            assert_eq!(operation(method, query, object), want, "{method} ?{query}");
        }
    }

    #[test]
    fn signatures_are_told_apart() {
        let v4q = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=ab";
        assert_eq!(auth(None, v4q).kind, Some("QueryString"));
        assert_eq!(auth(None, v4q).version, Some("SigV4"));
        let v2q = "AWSAccessKeyId=k&Expires=1&Signature=s";
        assert_eq!(auth(None, v2q).version, Some("SigV2"));
        assert_eq!(auth(Some("AWS k:s"), "").version, Some("SigV2"));
        assert_eq!(auth(None, "").kind, None);
    }

    #[test]
    fn keys_are_simple_or_partitioned_by_delivery_or_event_time() {
        let at = time::macros::datetime!(2026-12-02 23:59:58 UTC);
        let first = time::macros::datetime!(2026-12-01 10:00:00 UTC);
        let started_ns = first.unix_timestamp_nanos() as u64;
        let src = source("photos", "alice");
        let mut batches = Batches::default();
        for format in [
            KeyFormat::Simple,
            KeyFormat::Partitioned { event_time: false },
            KeyFormat::Partitioned { event_time: true },
        ] {
            let logging = logging(format);
            let stem = stem(&logging, &src, "us-east-1");
            batches.add(&logging, src.clone(), stem.clone(), "l".into(), started_ns);
            let batch = batches.take_all().pop().expect("one batch");
            assert_eq!(batch.stem, stem);
            let want = match format {
                KeyFormat::Simple => "log/2026-12-02-23-59-58-00000000000000FF",
                KeyFormat::Partitioned { event_time: false } => {
                    "log/alice/us-east-1/photos/2026/12/02/2026-12-02-23-59-58-00000000000000FF"
                }
                KeyFormat::Partitioned { event_time: true } => {
                    "log/alice/us-east-1/photos/2026/12/01/2026-12-02-23-59-58-00000000000000FF"
                }
            };
            assert_eq!(batch.key(at, 0xFF), want);
        }
    }

    #[test]
    fn a_batch_is_due_when_old_or_large_and_idle_at_twice_the_roll_time_or_a_minute() {
        let mut batches = Batches::new(5 * SECOND_NS);
        let logging = logging(KeyFormat::Simple);
        let (a, b) = (source("a", "alice"), source("b", "bob"));
        let t0 = 1_000 * SECOND_NS;
        batches.add(&logging, a.clone(), "log/".into(), "one".into(), t0);
        batches.add(
            &logging,
            b.clone(),
            "log/".into(),
            "two".into(),
            t0 + SECOND_NS,
        );
        assert!(batches
            .take_due("logs", "log/", "log/", t0 + 4 * SECOND_NS)
            .is_none());
        assert!(batches
            .take_due("other", "log/", "log/", t0 + 9 * SECOND_NS)
            .is_none());
        let due = batches
            .take_due("logs", "log/", "log/", t0 + 5 * SECOND_NS)
            .expect("due at the roll time");
        assert_eq!(due.sources().len(), 2);
        assert_eq!(due.body(|s| *s == b), "two\n");
        assert_eq!(due.body(|_| true), "one\ntwo\n");
        assert!(batches
            .take_due("logs", "log/", "log/", t0 + 60 * SECOND_NS)
            .is_none());

        let big = "x".repeat(BATCH_BYTES_MAX);
        batches.add(&logging, a.clone(), "log/".into(), big, t0);
        assert!(
            batches.take_due("logs", "log/", "log/", t0).is_some(),
            "due when large"
        );

        batches.add(&logging, a.clone(), "log/".into(), "three".into(), t0);
        assert!(batches.take_idle(t0 + 59 * SECOND_NS).is_empty());
        assert_eq!(
            batches.take_idle(t0 + 60 * SECOND_NS).len(),
            1,
            "idle for a minute"
        );
        batches.set_roll_ns(100 * SECOND_NS);
        batches.add(&logging, a, "log/".into(), "four".into(), t0);
        assert!(batches.take_idle(t0 + 199 * SECOND_NS).is_empty());
        assert_eq!(
            batches.take_idle(t0 + 200 * SECOND_NS).len(),
            1,
            "idle for two rolls"
        );
        assert!(batches.take_all().is_empty());
    }

    #[test]
    fn only_a_statement_naming_the_log_service_lets_logs_in() {
        let statement = |principal: &str, condition: &str| {
            format!(
                r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow",
                "Principal":{principal},"Action":"s3:PutObject",
                "Resource":"arn:aws:s3:::logs/log/*"{condition}}}]}}"#
            )
        };
        let conditions = r#","Condition":{"ArnLike":{"aws:SourceArn":"arn:aws:s3:::photo*"},
            "StringEquals":{"aws:SourceAccount":"alice"}}"#;
        let photos = source("photos", "alice");
        let service = r#"{"Service":"logging.s3.amazonaws.com"}"#;
        let allowed = Policy::parse(&statement(service, conditions)).expect("policy");
        assert!(may_deliver(Some(&allowed), "logs", "log/", &photos));
        assert!(!may_deliver(Some(&allowed), "logs", "other/", &photos));
        assert!(!may_deliver(
            Some(&allowed),
            "logs",
            "log/",
            &source("photos", "bob")
        ));
        assert!(!may_deliver(
            Some(&allowed),
            "logs",
            "log/",
            &source("films", "alice")
        ));
        let anyone = Policy::parse(&statement(r#"{"AWS":"*"}"#, conditions)).expect("policy");
        assert!(!may_deliver(Some(&anyone), "logs", "log/", &photos));
        let other = r#"{"Service":"logging.s3.amazonaws.comkaboom"}"#;
        let other = Policy::parse(&statement(other, conditions)).expect("policy");
        assert!(!may_deliver(Some(&other), "logs", "log/", &photos));
        assert!(!may_deliver(None, "logs", "log/", &photos));
    }
}
