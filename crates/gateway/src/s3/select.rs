//! SelectObjectContent (S3 Select): SQL over one object's CSV or JSON records, answered as
//! an event stream. The query runs in `coffer-select`; this verb reads the object as
//! GetObject does (its policy action, SSE-C key and data keys included), feeds it through
//! the query a slice at a time on a task of its own, and streams Records events as the
//! answer grows, Progress events when asked, then Stats and End. A query that cannot be
//! read is refused before anything is streamed; a record that makes it fail later ends the
//! stream with an error event carrying S3 Select's code.

use bytes::Bytes;
use futures::StreamExt;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};
use select::{CsvInput, CsvOutput, Header, Input, Output, Select};
use tokio::sync::mpsc;

use super::encryption::customer_key;
use super::error::Refusal;
use super::policy::allowed;
use super::{encryption, Gateway};
use crate::data;

/// How much of the answer is sent in one Records event.
const RECORDS_BYTES: usize = 256 * 1024;
/// How much of the object the query reads before the task yields to others.
const SLICE_BYTES: usize = 256 * 1024;
/// How often, in bytes read, a Progress event goes out when the request asks for them.
const PROGRESS_BYTES: u64 = 8 * 1024 * 1024;
/// Events held for a client that reads the answer slowly.
const EVENTS_QUEUED: usize = 4;

pub(super) async fn select_object_content(
    gw: &Gateway,
    req: S3Request<SelectObjectContentInput>,
) -> S3Result<S3Response<SelectObjectContentOutput>> {
    let bucket = allowed!(gw, req, object GetObject);
    let (name, key) = (&req.input.bucket, &req.input.key);
    let entry = gw.readable(&req, &bucket, name, key, None).await?;
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
    let query = Select::new(
        &asked.expression,
        input_of(&asked.input_serialization)?,
        output_of(&asked.output_serialization)?,
        time::OffsetDateTime::now_utc(),
    )
    .map_err(Refusal::from)?;
    let progress = asked
        .request_progress
        .as_ref()
        .and_then(|p| p.enabled)
        .unwrap_or(false);
    let customer = customer_key!(input)?;
    encryption::check_customer(&entry.sse, customer.as_ref())?;
    let hold = gw.readers.hold(&entry);
    let keys = gw.keys(&entry, customer.as_ref()).await?;
    let body = data::read(&gw.data, &entry, 0..entry.size, keys, hold);
    let (send, receive) = mpsc::channel(EVENTS_QUEUED);
    tokio::spawn(run(query, body, progress, send));
    let events = futures::stream::unfold(receive, |mut receive| async move {
        receive.recv().await.map(|event| (event, receive))
    });
    Ok(S3Response::new(SelectObjectContentOutput {
        payload: Some(SelectObjectContentEventStream::new(events)),
    }))
}

type Event = S3Result<SelectObjectContentEvent>;

/// Feeds the object through the query and sends the answer's events; stops when the client
/// goes away or the query's LIMIT is met.
async fn run(mut query: Select, mut body: data::Reader, progress: bool, send: mpsc::Sender<Event>) {
    let mut out = Vec::new();
    let mut reported = 0u64;
    let failed = 'read: {
        while let Some(piece) = body.next().await {
            let piece = match piece {
                Ok(piece) => piece,
                Err(e) => {
                    tracing::warn!("S3 Select could not read the object: {e}");
                    let message = format!("the object could not be read: {e}");
                    break 'read Some(S3Error::with_message(S3ErrorCode::InternalError, message));
                }
            };
            for slice in piece.chunks(SLICE_BYTES) {
                if let Err(e) = query.feed(slice, &mut out) {
                    break 'read Some(Refusal::from(e).into());
                }
                if out.len() >= RECORDS_BYTES && !records(&send, &mut out).await {
                    return;
                }
                if query.done() {
                    break 'read None;
                }
                tokio::task::yield_now().await;
            }
            let scanned = query.counts().scanned;
            if progress && scanned >= reported + PROGRESS_BYTES {
                reported = scanned;
                if !sent(&send, progress_event(&query)).await {
                    return;
                }
            }
        }
        query
            .finish(&mut out)
            .err()
            .map(|e| Refusal::from(e).into())
    };
    if !records(&send, &mut out).await {
        return;
    }
    if let Some(e) = failed {
        let _ = send.send(Err(e)).await;
        return;
    }
    if progress && !sent(&send, progress_event(&query)).await {
        return;
    }
    let counts = query.counts();
    let stats = SelectObjectContentEvent::Stats(StatsEvent {
        details: Some(Stats {
            bytes_processed: Some(counts.processed as i64),
            bytes_returned: Some(counts.returned as i64),
            bytes_scanned: Some(counts.scanned as i64),
        }),
    });
    if sent(&send, stats).await {
        let _ = send
            .send(Ok(SelectObjectContentEvent::End(EndEvent {})))
            .await;
    }
}

fn progress_event(query: &Select) -> SelectObjectContentEvent {
    let counts = query.counts();
    SelectObjectContentEvent::Progress(ProgressEvent {
        details: Some(Progress {
            bytes_processed: Some(counts.processed as i64),
            bytes_returned: Some(counts.returned as i64),
            bytes_scanned: Some(counts.scanned as i64),
        }),
    })
}

/// Sends what the answer holds as one Records event; false when the client is gone.
async fn records(send: &mpsc::Sender<Event>, out: &mut Vec<u8>) -> bool {
    if out.is_empty() {
        return true;
    }
    let payload = Bytes::from(std::mem::take(out));
    sent(
        send,
        SelectObjectContentEvent::Records(RecordsEvent {
            payload: Some(payload),
        }),
    )
    .await
}

async fn sent(send: &mpsc::Sender<Event>, event: SelectObjectContentEvent) -> bool {
    send.send(Ok(event)).await.is_ok()
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
