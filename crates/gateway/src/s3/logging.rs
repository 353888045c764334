//! Server access logging: the verbs on a bucket's logging configuration (set, checked as
//! Ceph's gateway checks it; read), the notes a request's log line is made from, and the
//! delivery of batches of lines to their target buckets. `crate::access_log` decides what
//! the lines, keys and batches are; `crate::serve` hands each answered request to
//! [`Gateway::log`].

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::error::Refusal;
use super::{http_date, in_bucket, new_entry, Gateway};
use crate::access_log::{self, Batch, Batches, Entry, KeyFormat, Logging, Source};
use crate::layout::{self, ContentHeaders};
use crate::policy::{self, Action};
use crate::serve::xml_texts;
use crate::{buckets, data, Error};

/// How often, at most, the gateway looks for batches no request has delivered.
const SWEEP_MAX: Duration = Duration::from_secs(10);

/// What a request's log line needs that only routing and the verbs learn (a request
/// extension): its bucket and key (`crate::metrics::NoteVerb`, `crate::s3::post`), and from
/// the check of what it may do ([`Gateway::note_checked`]) its bucket's logging and owner,
/// the user it was judged as, and whether only an ACL grant let it in; and whether the
/// delivery of its bucket's due batch was tried ([`Gateway::deliver_due`]).
#[derive(Clone, Default)]
pub(crate) struct Noted(Arc<Mutex<Note>>);

#[derive(Default)]
struct Note {
    bucket: Option<String>,
    key: Option<String>,
    /// Whether the request's bucket was checked (once is enough).
    checked: bool,
    /// The bucket's logging and owner, if it is logged.
    logged: Option<(Logging, String)>,
    requester: Option<String>,
    acl_required: bool,
    /// Whether the due batch was looked for (once is enough).
    delivered: bool,
    /// The target that refused the bucket's logs then: every check of the request after
    /// that is refused too (each key of a multi-object delete).
    refused: Option<String>,
}

impl Noted {
    fn lock(&self) -> MutexGuard<'_, Note> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes the bucket and key the request was routed to.
    pub(crate) fn routed(&self, bucket: &str, key: Option<&str>) {
        let mut note = self.lock();
        note.bucket = Some(bucket.to_owned());
        note.key = key.map(str::to_owned);
    }
}

/// What of a request its log line tells, taken before it is answered.
pub(crate) struct Asked {
    at: time::OffsetDateTime,
    method: String,
    /// Its path and query.
    target: String,
    query: String,
    version: &'static str,
    received: Option<u64>,
    user_agent: Option<String>,
    referrer: Option<String>,
    host: Option<String>,
    auth: access_log::Auth,
    peer: Option<crate::serve::Peer>,
}

impl Asked {
    pub(crate) fn of<B>(request: &hyper::Request<B>) -> Asked {
        let headers = request.headers();
        let header = |name: hyper::header::HeaderName| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| access_log::clip(v.to_owned()))
        };
        let uri = request.uri();
        let query = uri.query().unwrap_or("").to_owned();
        Asked {
            at: time::OffsetDateTime::now_utc(),
            method: request.method().as_str().to_owned(),
            target: access_log::clip(
                uri.path_and_query()
                    .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned()),
            ),
            version: match request.version() {
                hyper::Version::HTTP_10 => "HTTP/1.0",
                hyper::Version::HTTP_2 => "HTTP/2.0",
                _ => "HTTP/1.1",
            },
            received: headers
                .get("x-amz-decoded-content-length")
                .or_else(|| headers.get(hyper::header::CONTENT_LENGTH))
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok()),
            user_agent: header(hyper::header::USER_AGENT),
            referrer: header(hyper::header::REFERER),
            host: header(hyper::header::HOST),
            auth: access_log::auth(
                headers
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok()),
                &query,
            ),
            query,
            peer: request.extensions().get::<crate::serve::Peer>().copied(),
        }
    }
}

impl Gateway {
    /// Notes, for `req` to bucket `name` (its record `bucket`), judged as `requester`, what
    /// its log line needs.
    pub(super) fn note_checked<T>(
        &self,
        req: &S3Request<T>,
        name: &str,
        bucket: &buckets::Bucket,
        requester: Option<&str>,
    ) {
        let Some(noted) = req.extensions.get::<Noted>() else {
            return;
        };
        let mut note = noted.lock();
        if note.checked || note.bucket.as_deref() != Some(name) {
            return;
        }
        note.checked = true;
        note.requester = requester.map(str::to_owned);
        note.logged = bucket
            .logging
            .clone()
            .map(|logging| (logging, bucket.info.owner.clone()));
    }

    /// For `req`, allowed on bucket `name`: if the bucket is logged and its batch is due,
    /// delivers that first. A target that refuses this bucket's logs refuses the request,
    /// which does nothing then (as in Ceph's gateway), and every later check of it.
    pub(super) async fn deliver_due<T>(&self, req: &S3Request<T>, name: &str) -> S3Result<()> {
        let Some(noted) = req.extensions.get::<Noted>() else {
            return Ok(());
        };
        let (logging, source) = {
            let mut note = noted.lock();
            if note.bucket.as_deref() != Some(name) {
                return Ok(());
            }
            if let Some(target) = &note.refused {
                return Err(Refusal::LogDenied {
                    target: target.clone(),
                    bucket: name.to_owned(),
                }
                .into());
            }
            let Some((logging, owner)) = note.logged.clone().filter(|_| !note.delivered) else {
                return Ok(());
            };
            note.delivered = true;
            let source = Source {
                bucket: name.to_owned(),
                owner,
            };
            (logging, source)
        };
        let stem = access_log::stem(&logging, &source, &self.region);
        let due =
            self.logs_lock()
                .take_due(&logging.target, &logging.prefix, &stem, layout::now_ns());
        if let Some(batch) = due {
            if self.deliver(batch).await.contains(&source) {
                noted.lock().refused = Some(logging.target.clone());
                return Err(Refusal::LogDenied {
                    target: logging.target,
                    bucket: source.bucket,
                }
                .into());
            }
        }
        Ok(())
    }

    /// Notes that only an ACL grant let `req` do what it asks of bucket `name`.
    pub(super) fn note_acl_required<T>(&self, req: &S3Request<T>, name: &str) {
        if let Some(noted) = req.extensions.get::<Noted>() {
            let mut note = noted.lock();
            if note.bucket.as_deref() == Some(name) {
                note.acl_required = true;
            }
        }
    }

    /// Adds the log lines of the request `asked`, answered by `response` with request id
    /// `id` after `took`, if its bucket is logged: one line, or one per key a multi-object
    /// delete names.
    pub(crate) fn log(
        &self,
        noted: &Noted,
        asked: Asked,
        response: &s3s::HttpResponse,
        id: &str,
        took: Duration,
    ) {
        let note = noted.lock();
        let (Some((logging, owner)), Some(bucket)) = (&note.logged, &note.bucket) else {
            return;
        };
        let status = response.status();
        let headers = response.headers();
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let body = response.body().bytes();
        let length = header("content-length")
            .and_then(|v| v.parse().ok())
            .or_else(|| body.as_ref().map(|b| b.len() as u64));
        let sent = match asked.method.as_str() {
            "HEAD" => 0,
            _ => length.unwrap_or(0),
        };
        let error_code = body
            .as_deref()
            .filter(|_| status.is_client_error() || status.is_server_error())
            .and_then(|body| xml_texts(body, "Code").into_iter().next());
        let operation = access_log::operation(&asked.method, &asked.query, note.key.is_some());
        // A ranged read's Content-Range ends with the object's size.
        let whole = header("content-range")
            .and_then(|range| range.rsplit_once('/').and_then(|(_, n)| n.parse().ok()));
        let object_size = match asked.method.as_str() {
            _ if note.key.is_none() || !status.is_success() => None,
            "GET" | "HEAD" => whole.or(length),
            "PUT" => asked.received,
            _ => None,
        };
        let version_id = header("x-amz-version-id")
            .or_else(|| {
                form_urlencoded::parse(asked.query.as_bytes())
                    .find(|(name, _)| name == "versionId")
                    .map(|(_, value)| value.into_owned())
            })
            .map(access_log::clip);
        let keys = match operation.ends_with(".DELETE_MULTI_OBJECT") {
            true => body
                .as_deref()
                .map(|body| xml_texts(body, "Key"))
                .filter(|keys| !keys.is_empty())
                .map_or(vec![None], |keys| keys.into_iter().map(Some).collect()),
            false => vec![note.key.clone()],
        };
        let source = Source {
            bucket: bucket.clone(),
            owner: owner.clone(),
        };
        let stem = access_log::stem(logging, &source, &self.region);
        let tls = asked.peer.and_then(|peer| peer.tls);
        let lines: Vec<String> = keys
            .into_iter()
            .map(|key| {
                Entry {
                    owner: owner.clone(),
                    bucket: bucket.clone(),
                    at: asked.at,
                    remote_ip: asked
                        .peer
                        .map(|p| p.address.ip().to_canonical().to_string()),
                    requester: note.requester.clone(),
                    request_id: id.to_owned(),
                    operation: operation.clone(),
                    key,
                    request_line: format!("{} {} {}", asked.method, asked.target, asked.version),
                    status: status.as_u16(),
                    error_code: error_code.clone(),
                    bytes_sent: sent,
                    object_size,
                    total_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                    referrer: asked.referrer.clone(),
                    user_agent: asked.user_agent.clone(),
                    version_id: version_id.clone(),
                    auth: asked.auth,
                    cipher_suite: tls.map(|t| t.suite),
                    host: asked.host.clone(),
                    tls_version: tls.map(|t| t.version),
                    acl_required: note.acl_required,
                }
                .line()
            })
            .collect();
        let logging = logging.clone();
        drop(note);
        let now_ns = layout::now_ns();
        let mut logs = self.logs_lock();
        for line in lines {
            logs.add(&logging, source.clone(), stem.clone(), line, now_ns);
        }
    }

    fn logs_lock(&self) -> MutexGuard<'_, Batches> {
        self.logs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Delivers `batch` to its target bucket as one object, with the lines of the buckets
    /// the target's policy lets in; returns the buckets it refuses, whose lines are
    /// dropped. Lines for a target that is gone are dropped too; a target that cannot be
    /// read now gets them at the next delivery.
    async fn deliver(&self, batch: Batch) -> BTreeSet<Source> {
        let sources: BTreeSet<Source> = batch.sources().into_iter().cloned().collect();
        let names = |sources: &BTreeSet<Source>| {
            let names: Vec<&str> = sources.iter().map(|s| s.bucket.as_str()).collect();
            names.join(", ")
        };
        if batch.dropped > 0 {
            tracing::warn!(
                "{} access log lines for bucket {} were dropped: requests came faster than \
                 the gateway delivers them",
                batch.dropped,
                batch.target
            );
        }
        let target = match buckets::info(&self.pool, &batch.target).await {
            Ok(target) => target,
            Err(Error::NotFound(_)) => {
                tracing::warn!(
                    "access logs of {} not delivered: their target bucket {} is gone",
                    names(&sources),
                    batch.target
                );
                return BTreeSet::new();
            }
            Err(e) => {
                tracing::warn!(
                    "access logs for bucket {} kept for the next delivery: {e}",
                    batch.target
                );
                self.logs_lock().put_back(batch);
                return BTreeSet::new();
            }
        };
        let refused: BTreeSet<Source> = sources
            .into_iter()
            .filter(|s| {
                !access_log::may_deliver(target.policy.as_ref(), &batch.target, &batch.prefix, s)
            })
            .collect();
        if !refused.is_empty() {
            tracing::warn!(
                "bucket {}'s policy refuses the access logs of {}: their lines are dropped",
                batch.target,
                names(&refused)
            );
        }
        let body = batch.body(|s| !refused.contains(s));
        if body.is_empty() {
            return refused;
        }
        let key = batch.key(time::OffsetDateTime::now_utc(), rand::random());
        if let Err(e) = self.write_log(&target, &batch.target, &key, body).await {
            tracing::warn!(
                "delivering access log {key} to bucket {}: {e}",
                batch.target
            );
        }
        refused
    }

    /// Writes `body` as object `key` of bucket `name` (its record `target`), as its owner's,
    /// with the bucket's default retention if it has one.
    async fn write_log(
        &self,
        target: &buckets::Bucket,
        name: &str,
        key: &str,
        body: String,
    ) -> S3Result<()> {
        let content = futures::stream::iter([Ok::<_, Error>(Bytes::from(body))]);
        let written = data::write(&self.data, content, None, None).await?;
        let mut entry = new_entry(
            &written,
            Some("text/plain".into()),
            Vec::new(),
            ContentHeaders::default(),
            Default::default(),
            None,
            None,
        );
        entry.lock = super::lock::for_new(target, Default::default(), entry.mtime_ns);
        self.commit(target, name, key, None, &entry, |_| Ok(()))
            .await?;
        Ok(())
    }

    /// Sets how long lines wait before a request to their bucket delivers them (`roll`),
    /// and from now on delivers the batches that have waited twice that (a minute at least)
    /// with no request.
    pub fn deliver_logs_on_schedule(&self, roll: Duration) {
        let roll_ns = roll.as_nanos().clamp(1, u128::from(u64::MAX)) as u64;
        self.logs_lock().set_roll_ns(roll_ns);
        let every = roll.clamp(Duration::from_secs(1), SWEEP_MAX);
        let gateway = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let idle = gateway.logs_lock().take_idle(layout::now_ns());
                for batch in idle {
                    gateway.deliver(batch).await;
                }
            }
        });
    }

    /// Delivers every batch now (the gateway is stopping).
    pub async fn deliver_all_logs(&self) {
        let all = self.logs_lock().take_all();
        for batch in all {
            self.deliver(batch).await;
        }
    }
}

/// The key format PutBucketLogging gives: simple unless partitioned.
fn key_format(given: Option<&TargetObjectKeyFormat>) -> S3Result<KeyFormat> {
    let Some(given) = given else {
        return Ok(KeyFormat::Simple);
    };
    match (&given.simple_prefix, &given.partitioned_prefix) {
        (Some(_), Some(_)) => Err(Refusal::Malformed(
            "TargetObjectKeyFormat has SimplePrefix or PartitionedPrefix, not both".into(),
        )
        .into()),
        (_, None) => Ok(KeyFormat::Simple),
        (None, Some(partitioned)) => {
            let source = partitioned.partition_date_source.as_ref();
            match source.map(PartitionDateSource::as_str) {
                None | Some(PartitionDateSource::DELIVERY_TIME) => {
                    Ok(KeyFormat::Partitioned { event_time: false })
                }
                Some(PartitionDateSource::EVENT_TIME) => {
                    Ok(KeyFormat::Partitioned { event_time: true })
                }
                Some(other) => Err(Refusal::Malformed(format!(
                    "PartitionDateSource {other:?} is neither EventTime nor DeliveryTime"
                ))
                .into()),
            }
        }
    }
}

/// A key format as GetBucketLogging shows it.
fn shown_format(format: KeyFormat) -> TargetObjectKeyFormat {
    match format {
        KeyFormat::Simple => TargetObjectKeyFormat {
            simple_prefix: Some(SimplePrefix {}),
            partitioned_prefix: None,
        },
        KeyFormat::Partitioned { event_time } => {
            let source = match event_time {
                true => PartitionDateSource::EVENT_TIME,
                false => PartitionDateSource::DELIVERY_TIME,
            };
            TargetObjectKeyFormat {
                simple_prefix: None,
                partitioned_prefix: Some(PartitionedPrefix {
                    partition_date_source: Some(PartitionDateSource::from(source.to_owned())),
                }),
            }
        }
    }
}

/// Sets or removes a bucket's logging. Only its owner may, whatever its policy says; the
/// target must exist, be another bucket, not be logged itself, have no default encryption
/// (Ceph's rules), and its policy must let the log service put this bucket's logs under
/// the prefix. Target grants are taken and not kept (as in Ceph's gateway): who reads the
/// logs is the target bucket's policy and ACLs' to say.
pub(super) async fn put_bucket_logging(
    gw: &Gateway,
    req: S3Request<PutBucketLoggingInput>,
) -> S3Result<S3Response<PutBucketLoggingOutput>> {
    let name = &req.input.bucket;
    let bucket = gw
        .allowed(&req, Action::PutBucketLogging, name, None)
        .await?;
    let caller = gw.user(&req).await?;
    if caller != bucket.info.owner {
        return Err(Refusal::Denied {
            who: Some(caller),
            action: Action::PutBucketLogging.name(),
            resource: policy::resource(name, None),
        }
        .into());
    }
    let Some(enabled) = &req.input.bucket_logging_status.logging_enabled else {
        buckets::set_logging(&gw.pool, name, None)
            .await
            .map_err(|e| in_bucket(e, name))?;
        return Ok(S3Response::new(PutBucketLoggingOutput::default()));
    };
    let format = key_format(enabled.target_object_key_format.as_ref())?;
    let target_name = enabled.target_bucket.as_str();
    if target_name == name {
        return Err(Refusal::Invalid(format!(
            "bucket {name} cannot keep its own access logs: each delivery would be logged"
        ))
        .into());
    }
    let target = match buckets::info(&gw.pool, target_name).await {
        Ok(target) => target,
        Err(Error::NotFound(_)) => return Err(Refusal::NoLogTarget(target_name.into()).into()),
        Err(e) => return Err(in_bucket(e, target_name)),
    };
    if target.requester_pays {
        return Err(Refusal::Invalid(format!(
            "bucket {target_name}'s requesters pay, so it cannot take access logs"
        ))
        .into());
    }
    if target.logging.is_some() {
        return Err(Refusal::Invalid(format!(
            "bucket {target_name} is logged itself, so it cannot take access logs"
        ))
        .into());
    }
    if target.encryption.is_some() {
        return Err(Refusal::Invalid(format!(
            "bucket {target_name} has a default encryption, which log objects do not take \
             (they are sealed at rest like every object)"
        ))
        .into());
    }
    let source = Source {
        bucket: name.clone(),
        owner: bucket.info.owner.clone(),
    };
    let prefix = enabled.target_prefix.clone();
    if !access_log::may_deliver(target.policy.as_ref(), target_name, &prefix, &source) {
        return Err(Refusal::LogDenied {
            target: target_name.into(),
            bucket: name.clone(),
        }
        .into());
    }
    let mut logging = Logging {
        target: target_name.into(),
        prefix,
        format,
        set_ns: layout::now_ns(),
    };
    if let Some(kept) = bucket.logging.filter(|old| old.same_as(&logging)) {
        logging.set_ns = kept.set_ns;
    }
    buckets::set_logging(&gw.pool, name, Some(&logging))
        .await
        .map_err(|e| in_bucket(e, name))?;
    Ok(S3Response::new(PutBucketLoggingOutput::default()))
}

/// A bucket's logging, with when it was set as Last-Modified; an empty status when it is
/// not logged.
pub(super) async fn get_bucket_logging(
    gw: &Gateway,
    req: S3Request<GetBucketLoggingInput>,
) -> S3Result<S3Response<GetBucketLoggingOutput>> {
    let name = &req.input.bucket;
    let bucket = gw
        .allowed(&req, Action::GetBucketLogging, name, None)
        .await?;
    let Some(logging) = bucket.logging else {
        return Ok(S3Response::new(GetBucketLoggingOutput::default()));
    };
    let mut response = S3Response::new(GetBucketLoggingOutput {
        logging_enabled: Some(LoggingEnabled {
            target_bucket: logging.target,
            target_grants: None,
            target_object_key_format: Some(shown_format(logging.format)),
            target_prefix: logging.prefix,
        }),
    });
    if let Some(value) = http_date(logging.set_ns).and_then(|d| d.parse().ok()) {
        response.headers.insert(hyper::header::LAST_MODIFIED, value);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_delete_answer_names_its_keys() {
        let body = b"<DeleteResult><Deleted><Key>a&amp;b</Key></Deleted>\
                     <Error><Key>c&lt;d</Key><Code>AccessDenied</Code></Error></DeleteResult>";
        assert_eq!(xml_texts(body, "Key"), ["a&b", "c<d"]);
        assert_eq!(xml_texts(body, "Code"), ["AccessDenied"]);
        assert!(xml_texts(b"\xff", "Key").is_empty());
    }

    #[test]
    fn key_formats_are_read_and_shown_back() {
        let partitioned = |source: &str| TargetObjectKeyFormat {
            simple_prefix: None,
            partitioned_prefix: Some(PartitionedPrefix {
                partition_date_source: Some(PartitionDateSource::from(source.to_owned())),
            }),
        };
        assert_eq!(key_format(None).ok(), Some(KeyFormat::Simple));
        for format in [
            KeyFormat::Simple,
            KeyFormat::Partitioned { event_time: true },
            KeyFormat::Partitioned { event_time: false },
        ] {
            assert_eq!(key_format(Some(&shown_format(format))).ok(), Some(format));
        }
        assert!(key_format(Some(&partitioned("kaboom"))).is_err());
        let both = TargetObjectKeyFormat {
            simple_prefix: Some(SimplePrefix {}),
            ..partitioned("EventTime")
        };
        assert!(key_format(Some(&both)).is_err());
    }
}
