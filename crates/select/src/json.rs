//! JSON documents read from bytes as they arrive, one after another (S3's `DOCUMENT`) or one
//! per line (`LINES`, which is the same reading). A small scanner finds where each top-level
//! value ends, so every byte is scanned once and each document is parsed once, whole.

use crate::eval::Row;
use crate::{Error, RECORD_BYTES_MAX};

pub(crate) struct Documents {
    buf: Vec<u8>,
    /// Bytes of `buf` the scanner has read.
    scanned: usize,
    /// Where the value being read starts in `buf`.
    start: Option<usize>,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The value being read is a bare number or word.
    scalar: bool,
}

impl Documents {
    pub(crate) fn new() -> Documents {
        Documents {
            buf: Vec::new(),
            scanned: 0,
            start: None,
            depth: 0,
            in_string: false,
            escaped: false,
            scalar: false,
        }
    }

    pub(crate) fn feed(&mut self, bytes: &[u8], rows: &mut Vec<Row>) -> Result<(), Error> {
        self.buf.extend_from_slice(bytes);
        let mut consumed = 0;
        while self.scanned < self.buf.len() {
            let i = self.scanned;
            let b = self.buf[i];
            self.scanned += 1;
            let ended = if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                (!self.in_string && self.depth == 0).then_some(i + 1)
            } else {
                match b {
                    b'"' => {
                        self.start.get_or_insert(i);
                        self.in_string = true;
                        None
                    }
                    b'{' | b'[' => {
                        self.start.get_or_insert(i);
                        self.depth += 1;
                        None
                    }
                    b'}' | b']' => {
                        if self.depth == 0 {
                            return Err(Error::Input(format!(
                                "the JSON input closes a {} it never opened",
                                b as char
                            )));
                        }
                        self.depth -= 1;
                        (self.depth == 0).then_some(i + 1)
                    }
                    b' ' | b'\t' | b'\r' | b'\n' => (self.scalar && self.depth == 0).then_some(i),
                    _ => {
                        if self.start.is_none() {
                            self.start = Some(i);
                            self.scalar = true;
                        }
                        None
                    }
                }
            };
            if let (Some(end), Some(start)) = (ended, self.start) {
                rows.push(document(&self.buf[start..end])?);
                self.start = None;
                self.scalar = false;
                consumed = end;
            }
        }
        let held = self.buf.len() - self.start.unwrap_or(self.buf.len());
        if held > RECORD_BYTES_MAX {
            return Err(Error::RecordTooLarge);
        }
        let keep_from = self.start.unwrap_or(self.buf.len()).max(consumed);
        self.buf.drain(..keep_from);
        self.scanned -= keep_from;
        if let Some(start) = &mut self.start {
            *start -= keep_from;
        }
        Ok(())
    }

    pub(crate) fn finish(&mut self, rows: &mut Vec<Row>) -> Result<(), Error> {
        match self.start {
            Some(start) if self.scalar && !self.in_string => {
                rows.push(document(&self.buf[start..])?);
                self.start = None;
                Ok(())
            }
            Some(_) => Err(Error::Input("the JSON input ends inside a document".into())),
            None => Ok(()),
        }
    }
}

fn document(bytes: &[u8]) -> Result<Row, Error> {
    serde_json::from_slice(bytes)
        .map(Row::Json)
        .map_err(|e| Error::Input(format!("the input is not JSON: {e}")))
}
