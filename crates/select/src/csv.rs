//! CSV records read from bytes as they arrive. A quote opens a quoted run anywhere in a
//! field (`a="b,c"` is the field `a=b,c`), a doubled quote inside one is a quote, and the
//! escape character makes the next character plain inside quotes or out (Ceph's reading,
//! which covers RFC 4180's). A record delimiter inside quotes ends the record unless the
//! request allows quoted record delimiters (S3's default), so a stray quote costs one
//! record, not the rest of the object. A record delimiter at the very end makes no empty
//! record, and empty lines are skipped.

use std::sync::Arc;

use crate::eval::{Names, Row};
use crate::{CsvInput, Error, Header, FIELD_BYTES, RECORD_BYTES_MAX};

pub(crate) struct Records {
    options: CsvInput,
    /// The record's last byte when the delimiter is `\r\n`: a `\r` before it is dropped.
    terminator: u8,
    crlf: bool,
    state: State,
    field: Vec<u8>,
    fields: Vec<String>,
    /// Bytes of the record so far.
    size: usize,
    /// Whether the record so far is a comment line.
    comment: bool,
    /// The record's first byte has been seen.
    started: bool,
    header_seen: bool,
    names: Option<Arc<Names>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Plain,
    Quoted,
    /// After a quote inside a quoted run: a second quote is a quote, else the run ends.
    QuoteInQuoted,
    /// After the escape character.
    Escaped {
        quoted: bool,
    },
}

impl Records {
    pub(crate) fn new(options: CsvInput) -> Result<Records, Error> {
        let (terminator, crlf) = match options.record.as_slice() {
            [b] => (*b, false),
            b"\r\n" => (b'\n', true),
            other => {
                return Err(Error::Options(format!(
                    "a record delimiter is one character or \\r\\n, not {:?}",
                    String::from_utf8_lossy(other)
                )))
            }
        };
        let specials = [Some(options.field), Some(terminator), Some(options.quote)];
        if options.field == terminator
            || options.field == options.quote
            || terminator == options.quote
        {
            return Err(Error::Options(
                "the field delimiter, record delimiter and quote character must differ".into(),
            ));
        }
        if options
            .escape
            .is_some_and(|e| e == options.field || e == terminator)
        {
            return Err(Error::Options(
                "the escape character must differ from the delimiters".into(),
            ));
        }
        if options.comment.is_some() && specials.contains(&options.comment) {
            return Err(Error::Options(
                "the comment character must differ from the delimiters and the quote".into(),
            ));
        }
        Ok(Records {
            options,
            terminator,
            crlf,
            state: State::Plain,
            field: Vec::new(),
            fields: Vec::new(),
            size: 0,
            comment: false,
            started: false,
            header_seen: false,
            names: None,
        })
    }

    pub(crate) fn feed(&mut self, bytes: &[u8], rows: &mut Vec<Row>) -> Result<(), Error> {
        for &b in bytes {
            self.size += 1;
            if self.size > RECORD_BYTES_MAX {
                return Err(Error::RecordTooLarge);
            }
            if !self.started {
                self.started = true;
                self.comment = self.options.comment == Some(b);
            }
            if self.comment {
                if b == self.terminator {
                    self.reset();
                }
                continue;
            }
            let escape = self.options.escape;
            // A doubled quote inside quotes wins over an escape that is the quote itself.
            self.state = match self.state {
                State::Escaped { quoted: true } | State::Quoted
                    if b == self.terminator && !self.options.quoted_records =>
                {
                    if self.crlf && self.field.last() == Some(&b'\r') {
                        self.field.pop();
                    }
                    self.end_record(rows)?;
                    State::Plain
                }
                State::Escaped { quoted } => {
                    self.field.push(b);
                    if quoted {
                        State::Quoted
                    } else {
                        State::Plain
                    }
                }
                State::QuoteInQuoted if b == self.options.quote => {
                    self.field.push(b);
                    State::Quoted
                }
                State::Quoted if b == self.options.quote => State::QuoteInQuoted,
                State::Quoted if Some(b) == escape => State::Escaped { quoted: true },
                State::Quoted => {
                    self.field.push(b);
                    State::Quoted
                }
                State::Plain | State::QuoteInQuoted => {
                    if b == self.options.quote {
                        State::Quoted
                    } else if Some(b) == escape {
                        State::Escaped { quoted: false }
                    } else if b == self.options.field {
                        self.end_field()?;
                        State::Plain
                    } else if b == self.terminator {
                        if self.crlf && self.field.last() == Some(&b'\r') {
                            self.field.pop();
                        }
                        self.end_record(rows)?;
                        State::Plain
                    } else {
                        self.field.push(b);
                        State::Plain
                    }
                }
            };
        }
        Ok(())
    }

    /// The last record, when the input does not end with a delimiter.
    pub(crate) fn finish(&mut self, rows: &mut Vec<Row>) -> Result<(), Error> {
        match self.state {
            State::Quoted | State::Escaped { .. } if !self.comment => {
                Err(Error::Input("the input ends inside a quoted field".into()))
            }
            _ if self.started && !self.comment => self.end_record(rows),
            _ => Ok(()),
        }
    }

    fn end_field(&mut self) -> Result<(), Error> {
        self.size += FIELD_BYTES;
        if self.size > RECORD_BYTES_MAX {
            return Err(Error::RecordTooLarge);
        }
        let bytes = std::mem::take(&mut self.field);
        self.fields.push(match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        });
        Ok(())
    }

    fn reset(&mut self) {
        self.size = 0;
        self.started = false;
        self.comment = false;
        self.state = State::Plain;
    }

    fn end_record(&mut self, rows: &mut Vec<Row>) -> Result<(), Error> {
        self.end_field()?;
        let fields = std::mem::take(&mut self.fields);
        let empty = fields.len() == 1 && fields[0].is_empty();
        self.reset();
        if empty {
            return Ok(());
        }
        if !self.header_seen && self.options.header != Header::None {
            self.header_seen = true;
            if self.options.header == Header::Use {
                self.names = Some(Arc::new(Names::new(fields)));
            }
            return Ok(());
        }
        rows.push(Row::Csv {
            fields,
            names: self.names.clone(),
        });
        Ok(())
    }
}
