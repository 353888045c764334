//! `select`: S3 Select's SQL over an object's CSV or JSON records. A [`Select`] is fed the
//! object's bytes as they arrive and writes the answer's records as it goes, so an object of
//! any size is read in one pass with a record's worth of memory (at most
//! [`RECORD_BYTES_MAX`]).
//!
//! Pure and synchronous: no IO, no clock but the one a query's `UTCNOW()` is given, no
//! randomness. It must never depend on tokio, on any IO crate, or on any other Coffer crate;
//! the gateway's SelectObjectContent feeds it
//! ([design/gateway.md](../../../docs/design/gateway.md), "S3 Select").
//!
//! # What a query may say
//!
//! `SELECT projection FROM S3Object[path] [alias] [WHERE condition] [LIMIT n]`, the
//! projection `*`, expressions with `AS` names, or aggregates (`COUNT`, `SUM`, `MIN`,
//! `MAX`, `AVG`), which then answer one record for all. Where AWS and Ceph's gateway read
//! SQL differently, both readings are taken where they cannot clash: a double-quoted name
//! is the field of that name when the record has one and text otherwise (Ceph writes text
//! that way); a projection's `AS` names may be used by later columns and by `WHERE` (Ceph);
//! `FROM S3Object[*].a` goes through an array at `a` record by record, and `_1.b` in JSON is
//! `b` of the record (Ceph). Output is S3's: a NULL is an empty CSV field, JSON records are
//! objects.

mod csv;
mod eval;
#[cfg(any(test, fuzzing))]
pub mod fuzz;
mod json;
mod output;
pub mod sql;
mod time;
mod value;

pub use output::{CsvOutput, Output};
pub use value::Value;

use std::collections::VecDeque;

use eval::{Plan, Row};

/// The largest record read or written, a JSON document included, as S3 Select's own limit;
/// each CSV field counts [`FIELD_BYTES`] more, for what holding it costs.
pub const RECORD_BYTES_MAX: usize = 1024 * 1024;
/// What a CSV field costs beyond its bytes, against [`RECORD_BYTES_MAX`].
pub const FIELD_BYTES: usize = 32;
/// How much answer a call gives before it returns, so that the caller sends it on.
pub const FLUSH_BYTES: usize = 256 * 1024;
/// How much work a call does before it returns (after its record in hand), in steps of
/// expressions evaluated, so that the caller can see whether its client is still there
/// (tens of milliseconds).
const DRAIN_STEPS: u64 = 1 << 26;
/// The longest error message, so that an error shows a value without carrying all of it.
const MESSAGE_BYTES_MAX: usize = 1024;

/// Why a query could not run, by S3 Select's error codes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The query is not SQL this reads.
    Parse(String),
    /// A record made an expression fail (a field that is not a number, a bad cast).
    Eval(String),
    /// A name is neither a column nor an alias, or is both.
    Schema(String),
    /// The request's serialization options cannot be used.
    Options(String),
    /// The input is not CSV or JSON as the request says.
    Input(String),
    /// A record is larger than [`RECORD_BYTES_MAX`].
    RecordTooLarge,
}

impl Error {
    /// The code S3 Select gives this error.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Parse(_) => "ParseUnexpectedToken",
            Error::Eval(_) => "EvaluatorInvalidArguments",
            Error::Schema(_) => "ProcessingTimeError",
            Error::Options(_) => "InvalidRequestParameter",
            Error::Input(_) => "InvalidTextEncoding",
            Error::RecordTooLarge => "OverMaxRecordSize",
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let message = match self {
            Error::Parse(m) => format!("the query cannot be read: {m}"),
            Error::Eval(m) | Error::Schema(m) | Error::Options(m) | Error::Input(m) => m.clone(),
            Error::RecordTooLarge => format!(
                "a record is larger than {} MiB",
                RECORD_BYTES_MAX / (1024 * 1024)
            ),
        };
        f.write_str(value::cut(&message, MESSAGE_BYTES_MAX))
    }
}

impl std::error::Error for Error {}

/// Whether a CSV input's first record names its columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// Every record is data.
    None,
    /// The first record is skipped.
    Ignore,
    /// The first record names the columns, which the query may use.
    Use,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvInput {
    pub field: u8,
    /// One byte, or `\r\n`.
    pub record: Vec<u8>,
    pub quote: u8,
    pub escape: Option<u8>,
    /// Lines starting with it are skipped.
    pub comment: Option<u8>,
    pub header: Header,
    /// A record delimiter inside quotes is part of the field (S3's
    /// `AllowQuotedRecordDelimiter`); else it ends the record, quotes or not.
    pub quoted_records: bool,
}

impl Default for CsvInput {
    fn default() -> Self {
        CsvInput {
            field: b',',
            record: b"\n".to_vec(),
            quote: b'"',
            escape: Some(b'"'),
            comment: None,
            header: Header::None,
            quoted_records: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Csv(CsvInput),
    /// JSON documents, one after another or one per line (S3's `DOCUMENT` and `LINES`,
    /// read alike).
    Json,
}

/// What a query has read and written so far, as S3 Select's Progress and Stats events give it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub scanned: u64,
    pub returned: u64,
}

/// A query running over one object.
pub struct Select {
    plan: Plan,
    reader: Reader,
    output: Output,
    counts: Counts,
    /// Records written, for LIMIT.
    written: u64,
    /// Records read and not yet answered.
    pending: VecDeque<Row>,
    /// The input has ended.
    ended: bool,
}

enum Reader {
    Csv(csv::Records),
    Json(json::Documents),
}

impl Select {
    /// Reads `query` for records of `input`, answered as `output`; `now` is `UTCNOW()`.
    pub fn new(
        query: &str,
        input: Input,
        output: Output,
        now: ::time::OffsetDateTime,
    ) -> Result<Select, Error> {
        let parsed = sql::parse(query)?;
        output.check()?;
        let (reader, delimiter) = match input {
            Input::Csv(csv) => {
                let delimiter = char::from(csv.field);
                (Reader::Csv(csv::Records::new(csv)?), delimiter)
            }
            Input::Json => (Reader::Json(json::Documents::new()), ','),
        };
        Ok(Select {
            plan: Plan::new(parsed, now, delimiter)?,
            reader,
            output,
            counts: Counts::default(),
            written: 0,
            pending: VecDeque::new(),
            ended: false,
        })
    }

    /// Whether the answer is complete before the input ends (LIMIT reached): the caller may
    /// stop reading.
    pub fn done(&self) -> bool {
        !self.plan.aggregates() && self.plan.limit().is_some_and(|limit| self.written >= limit)
    }

    /// Whether records read are still to be answered: [`Select::drain`] them (after taking
    /// the answer so far) before feeding more.
    pub fn pending(&self) -> bool {
        !self.pending.is_empty() && !self.done()
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Reads `bytes`, the object's next, and appends the answer's records they complete to
    /// `out`, up to [`FLUSH_BYTES`] of it; the rest waits ([`Select::pending`]).
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        assert!(
            !self.pending() && !self.ended,
            "a query is fed only once what it read is answered, and before it is finished"
        );
        self.counts.scanned += bytes.len() as u64;
        let mut rows = Vec::new();
        match &mut self.reader {
            Reader::Csv(records) => records.feed(bytes, &mut rows)?,
            Reader::Json(documents) => documents.feed(bytes, &mut rows)?,
        }
        self.queue(rows);
        self.drain(out)
    }

    /// Answers records read, until none is left, `out` holds [`FLUSH_BYTES`] or the work
    /// done passes [`DRAIN_STEPS`]; what is left waits ([`Select::pending`]).
    pub fn drain(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        let before = out.len();
        let budget = self.plan.spent() + DRAIN_STEPS;
        while out.len() < FLUSH_BYTES && self.plan.spent() < budget && !self.done() {
            let Some(row) = self.pending.pop_front() else {
                break;
            };
            if let Some(columns) = self.plan.row(&row)? {
                self.output.record(&columns, out);
                self.written += 1;
            }
        }
        self.counts.returned += (out.len() - before) as u64;
        Ok(())
    }

    /// Ends the input: the last record without its delimiter, then, once every record is
    /// answered, the aggregates' record. True when the answer is complete; until then the
    /// caller takes the answer so far and calls again.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<bool, Error> {
        // A LIMIT met may leave a record half read: it is not wanted.
        if !self.ended && !self.done() {
            let mut rows = Vec::new();
            match &mut self.reader {
                Reader::Csv(records) => records.finish(&mut rows)?,
                Reader::Json(documents) => documents.finish(&mut rows)?,
            }
            self.queue(rows);
        }
        self.ended = true;
        self.drain(out)?;
        if self.pending() {
            return Ok(false);
        }
        if self.plan.aggregates() {
            let before = out.len();
            let columns = self.plan.aggregated()?;
            self.output.record(&columns, out);
            self.counts.returned += (out.len() - before) as u64;
        }
        self.pending.clear();
        Ok(true)
    }

    /// Records read, as the `FROM` path makes them.
    fn queue(&mut self, rows: Vec<Row>) {
        for row in rows {
            if let Some(rows) = self.plan.from(row) {
                self.pending.extend(rows);
            }
        }
    }
}

#[cfg(test)]
mod tests;
