//! SelectObjectContent (S3 Select): SQL over one object's CSV or JSON records, answered as
//! an event stream. The query runs in `coffer-select`; this verb reads the object as
//! GetObject does (its policy action, SSE-C key and data keys included), feeds it through
//! the query a slice at a time on the blocking pool (a query's work per slice is bounded
//! by the answer it may hold, not by the runtime's patience), and streams Records events as
//! the answer grows, Progress events when asked, Cont events while a long scan finds
//! nothing, then Stats and End. A query that cannot be read is refused before anything is
//! streamed; a record that makes it fail later, or a failure of the gateway itself, ends
//! the stream with an error event, so that no answer ever looks complete when it is not.

use bytes::Bytes;
use futures::StreamExt;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};
use select::{CsvInput, CsvOutput, Header, Input, Output, Select};
use tokio::sync::mpsc;

use super::encryption::customer_key;
use super::error::Refusal;
use super::object::refuse_encryption_headers;
use super::policy::allowed;
use super::{encryption, Gateway};
use crate::data;

/// How much of the object the query reads before the task yields to others.
const SLICE_BYTES: usize = 256 * 1024;
/// How often, in bytes read, a Progress event goes out when the request asks for them.
const PROGRESS_BYTES: u64 = 8 * 1024 * 1024;
/// Events held for a client that reads the answer slowly.
const EVENTS_QUEUED: usize = 4;
/// The longest a client waits without an event: then a Cont event tells it the scan goes
/// on (clients give up on a silent connection after a minute or so).
const QUIET_MAX: std::time::Duration = std::time::Duration::from_secs(10);

pub(super) async fn select_object_content(
    gw: &Gateway,
    req: S3Request<SelectObjectContentInput>,
) -> S3Result<S3Response<SelectObjectContentOutput>> {
    let bucket = allowed!(gw, req, object GetObject);
    refuse_encryption_headers(&req.headers)?;
    let (name, key) = (&req.input.bucket, &req.input.key);
    let mut entry = gw.readable(&req, &bucket, name, key, None, None).await?;
    // At once, as GetObject: what the object's content is must not be collected under it.
    let hold = gw.hold(&mut entry).await?;
    let input = req.input;
    let asked = &input.request;
    if asked.expression_type.as_str() != ExpressionType::SQL {
        return Err(Refusal::Invalid(format!(
            "ExpressionType {} is not SQL",
            asked.expression_type.as_str()
        ))
        .into());
    }
    if asked.scan_range.is_some() {
        return Err(Refusal::NotServed("S3 Select over a ScanRange").into());
    }
    let expression = asked.expression.clone();
    let input_format = input_of(&asked.input_serialization)?;
    let output_format = output_of(&asked.output_serialization)?;
    // Reading a query of 256 KiB with its aliases written out is work for the blocking pool.
    let query = tokio::task::spawn_blocking(move || {
        Select::new(
            &expression,
            input_format,
            output_format,
            time::OffsetDateTime::now_utc(),
        )
    })
    .await
    .map_err(|e| {
        tracing::error!("S3 Select failed: {e}");
        failed_in_gateway()
    })?
    .map_err(Refusal::from)?;
    let progress = asked
        .request_progress
        .as_ref()
        .and_then(|p| p.enabled)
        .unwrap_or(false);
    let customer = customer_key!(input)?;
    encryption::check_customer(&entry.sse, customer.as_ref())?;
    let body = gw
        .read(&entry, 0..entry.size, customer.as_ref(), hold)
        .await?;
    let (send, receive) = mpsc::channel(EVENTS_QUEUED);
    let running = tokio::spawn(run(query, body, entry.size, progress, send.clone()));
    // Should the run fail (a panic in a query), the stream still ends with an error.
    tokio::spawn(async move {
        if let Err(e) = running.await {
            tracing::error!("S3 Select failed: {e}");
            let _ = send.send(Err(failed_in_gateway())).await;
        }
    });
    let events = futures::stream::unfold(receive, |mut receive| async move {
        receive.recv().await.map(|event| (event, receive))
    });
    Ok(S3Response::new(SelectObjectContentOutput {
        payload: Some(SelectObjectContentEventStream::new(events)),
    }))
}

type Event = S3Result<SelectObjectContentEvent>;

/// What the client is told when the query broke in the gateway (a panic): never a
/// complete-looking answer.
fn failed_in_gateway() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::InternalError,
        "the query failed in the gateway".to_owned(),
    )
}

/// The query and the answer it has not sent yet, handed to the blocking pool and back.
struct Work {
    query: Select,
    out: Vec<u8>,
}

/// Why an answer ended before its End event.
enum Stop {
    /// The client went away: nothing more to send.
    Gone,
    /// An error to send the client as the stream's last event.
    Failed(S3Error),
}

impl From<select::Error> for Stop {
    fn from(e: select::Error) -> Stop {
        Stop::Failed(Refusal::from(e).into())
    }
}

impl Work {
    /// Runs `step` on the blocking pool, so that the query's work never holds a runtime
    /// thread; the answer it made is kept even when it fails. Only a panic loses it.
    async fn step(
        mut self,
        step: impl FnOnce(&mut Select, &mut Vec<u8>) -> Result<bool, select::Error> + Send + 'static,
    ) -> Result<(Work, Result<bool, select::Error>), Stop> {
        tokio::task::spawn_blocking(move || {
            let done = step(&mut self.query, &mut self.out);
            (self, done)
        })
        .await
        .map_err(|e| {
            tracing::error!("S3 Select failed: {e}");
            Stop::Failed(failed_in_gateway())
        })
    }
}

/// Feeds the object through the query and sends the answer's events; stops when the client
/// goes away or the query's LIMIT is met.
async fn run(
    query: Select,
    body: data::Reader,
    size: u64,
    progress: bool,
    send: mpsc::Sender<Event>,
) {
    let mut events = Events {
        send,
        progress,
        reported: 0,
        last: tokio::time::Instant::now(),
    };
    let work = Work {
        query,
        out: Vec::new(),
    };
    if let Err(Stop::Failed(e)) = answer(work, body, size, &mut events).await {
        let _ = events.send.send(Err(e)).await;
    }
}

/// What goes to the client, and when it last got something.
struct Events {
    send: mpsc::Sender<Event>,
    progress: bool,
    /// Bytes scanned at the last Progress event.
    reported: u64,
    last: tokio::time::Instant,
}

/// The answer to the query over the object's `size` bytes in `body`, sent as events.
async fn answer(
    mut work: Work,
    mut body: data::Reader,
    size: u64,
    events: &mut Events,
) -> Result<(), Stop> {
    'read: while let Some(piece) = body.next().await {
        let piece = piece.map_err(|e| {
            tracing::warn!("S3 Select could not read the object: {e}");
            let message = format!("the object could not be read: {e}");
            Stop::Failed(S3Error::with_message(S3ErrorCode::InternalError, message))
        })?;
        let mut at = 0;
        while at < piece.len() {
            let slice = piece.slice(at..(at + SLICE_BYTES).min(piece.len()));
            at += slice.len();
            let (fed, result) = work
                .step(move |q, out| q.feed(&slice, out).map(|()| true))
                .await?;
            work = fed;
            events.records(&mut work.out).await?;
            result?;
            while work.query.pending() {
                let (drained, result) = work.step(|q, out| q.drain(out).map(|()| true)).await?;
                work = drained;
                events.records(&mut work.out).await?;
                result?;
                events.alive(&work.query).await?;
            }
            if work.query.done() {
                break 'read;
            }
            events.alive(&work.query).await?;
        }
    }
    let scanned = work.query.counts().scanned;
    if !work.query.done() && scanned != size {
        tracing::warn!("S3 Select read {scanned} bytes of an object of {size}");
        let message = format!("the object could not be read: {scanned} bytes of {size}");
        return Err(Stop::Failed(S3Error::with_message(
            S3ErrorCode::InternalError,
            message,
        )));
    }
    loop {
        let (finished, done) = work.step(|q, out| q.finish(out)).await?;
        work = finished;
        events.records(&mut work.out).await?;
        if done? {
            break;
        }
        events.alive(&work.query).await?;
    }
    if events.progress {
        events.sent(progress_event(&work.query)).await?;
    }
    // No compressed input is read: what was processed is what was scanned.
    let counts = work.query.counts();
    let stats = SelectObjectContentEvent::Stats(StatsEvent {
        details: Some(Stats {
            bytes_processed: Some(counts.scanned as i64),
            bytes_returned: Some(counts.returned as i64),
            bytes_scanned: Some(counts.scanned as i64),
        }),
    });
    events.sent(stats).await?;
    events
        .sent(SelectObjectContentEvent::End(EndEvent {}))
        .await
}

impl Events {
    /// Sends what the answer holds as one Records event.
    async fn records(&mut self, out: &mut Vec<u8>) -> Result<(), Stop> {
        if out.is_empty() {
            return Ok(());
        }
        let payload = Bytes::from(std::mem::take(out));
        self.sent(SelectObjectContentEvent::Records(RecordsEvent {
            payload: Some(payload),
        }))
        .await
    }

    /// After each slice: a Progress event when one is due, a Cont event when the client has
    /// heard nothing for a while; a client gone stops the scan here, not at the object's end.
    async fn alive(&mut self, query: &Select) -> Result<(), Stop> {
        if self.send.is_closed() {
            return Err(Stop::Gone);
        }
        let scanned = query.counts().scanned;
        if self.progress && scanned >= self.reported + PROGRESS_BYTES {
            self.reported = scanned;
            self.sent(progress_event(query)).await?;
        }
        if self.last.elapsed() >= QUIET_MAX {
            self.sent(SelectObjectContentEvent::Cont(ContinuationEvent {}))
                .await?;
        }
        Ok(())
    }

    async fn sent(&mut self, event: SelectObjectContentEvent) -> Result<(), Stop> {
        self.last = tokio::time::Instant::now();
        self.send.send(Ok(event)).await.map_err(|_| Stop::Gone)
    }
}

fn progress_event(query: &Select) -> SelectObjectContentEvent {
    let counts = query.counts();
    SelectObjectContentEvent::Progress(ProgressEvent {
        details: Some(Progress {
            bytes_processed: Some(counts.scanned as i64),
            bytes_returned: Some(counts.returned as i64),
            bytes_scanned: Some(counts.scanned as i64),
        }),
    })
}

/// The query's input, as the request describes it.
fn input_of(asked: &InputSerialization) -> S3Result<Input> {
    if let Some(compression) = &asked.compression_type {
        if compression.as_str() != CompressionType::NONE {
            return Err(Refusal::NotServed("S3 Select over compressed objects").into());
        }
    }
    if asked.parquet.is_some() {
        return Err(Refusal::NotServed("S3 Select over Parquet objects").into());
    }
    if asked.json.is_some() {
        return Ok(Input::Json);
    }
    let Some(csv) = &asked.csv else {
        return Err(Refusal::Invalid("InputSerialization names no format".into()).into());
    };
    let defaults = CsvInput::default();
    let header = match csv.file_header_info.as_ref().map(|h| h.as_str()) {
        None | Some(FileHeaderInfo::NONE) => Header::None,
        Some(FileHeaderInfo::IGNORE) => Header::Ignore,
        Some(FileHeaderInfo::USE) => Header::Use,
        Some(other) => {
            return Err(Refusal::Invalid(format!(
                "FileHeaderInfo {other} is not NONE, IGNORE or USE"
            ))
            .into())
        }
    };
    Ok(Input::Csv(CsvInput {
        field: byte(csv.field_delimiter.as_deref(), "FieldDelimiter")?.unwrap_or(defaults.field),
        record: match csv.record_delimiter.as_deref() {
            None | Some("") => defaults.record,
            Some(text) => text.as_bytes().to_vec(),
        },
        quote: byte(csv.quote_character.as_deref(), "QuoteCharacter")?.unwrap_or(defaults.quote),
        escape: byte(
            csv.quote_escape_character.as_deref(),
            "QuoteEscapeCharacter",
        )?
        .or(defaults.escape),
        comment: byte(csv.comments.as_deref(), "Comments")?,
        header,
        quoted_records: csv.allow_quoted_record_delimiter.unwrap_or(false),
    }))
}

/// One ASCII character of a CSV option, if given.
fn byte(text: Option<&str>, what: &str) -> S3Result<Option<u8>> {
    match text.map(str::as_bytes) {
        None | Some([]) => Ok(None),
        Some([b]) if b.is_ascii() => Ok(Some(*b)),
        Some(_) => Err(Refusal::Invalid(format!("{what} is one ASCII character")).into()),
    }
}

/// The answer's format, as the request asks it.
fn output_of(asked: &OutputSerialization) -> S3Result<Output> {
    if let Some(json) = &asked.json {
        return Ok(Output::Json {
            record: json
                .record_delimiter
                .clone()
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| "\n".into()),
        });
    }
    let Some(csv) = &asked.csv else {
        return Err(Refusal::Invalid("OutputSerialization names no format".into()).into());
    };
    let defaults = CsvOutput::default();
    let one = |text: &Option<String>, default: char| {
        text.as_deref()
            .and_then(|t| t.chars().next())
            .unwrap_or(default)
    };
    let always = match csv.quote_fields.as_ref().map(|q| q.as_str()) {
        None | Some(QuoteFields::ASNEEDED) => false,
        Some(QuoteFields::ALWAYS) => true,
        Some(other) => {
            return Err(
                Refusal::Invalid(format!("QuoteFields {other} is not ALWAYS or ASNEEDED")).into(),
            )
        }
    };
    Ok(Output::Csv(CsvOutput {
        field: csv
            .field_delimiter
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or(defaults.field),
        record: csv
            .record_delimiter
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or(defaults.record),
        quote: one(&csv.quote_character, defaults.quote),
        escape: one(&csv.quote_escape_character, defaults.escape),
        always,
    }))
}
