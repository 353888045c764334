//! Unsigned aws-chunked bodies (`x-amz-content-sha256: STREAMING-UNSIGNED-PAYLOAD-TRAILER`)
//! of anonymous requests. Current SDKs send every upload this way when they compute a
//! checksum, with the checksum in a trailer after the last chunk; s3s decodes such bodies
//! only after it has checked a signature, so an anonymous upload (a bucket a policy or an
//! ACL opens to everyone) reaches the gateway still framed. [`Unchunker`] decodes the
//! framing (pure code: bytes in, data and trailers out) and [`Unchunked`] runs it over a
//! request's body before s3s sees it.
//!
//! The framing: chunks of `HEX-SIZE[;extensions]\r\nDATA\r\n`, a last chunk of size 0, then
//! trailer lines `name:value\r\n` and an empty line.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use futures::Stream;
use hyper::header::{HeaderName, HeaderValue};
use hyper::HeaderMap;

/// The `x-amz-content-sha256` of an unsigned aws-chunked body.
pub(crate) const UNSIGNED_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
/// The longest chunk-size line, extensions included.
const SIZE_LINE_MAX: usize = 4096;
/// The most bytes of trailer lines.
const TRAILERS_MAX: usize = 16 * 1024;

/// Why a framed body cannot be decoded.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Malformed {
    #[error("aws-chunked body: chunk size line {0:?} is not a hexadecimal size")]
    Size(String),
    #[error("aws-chunked body: a chunk is not followed by CRLF")]
    ChunkEnd,
    #[error("aws-chunked body: a line is longer than {0} bytes")]
    LongLine(usize),
    #[error("aws-chunked body: trailer line {0:?} is not name:value")]
    Trailer(String),
    #[error(
        "aws-chunked body: {decoded} bytes decoded, x-amz-decoded-content-length says {declared}"
    )]
    Length { decoded: u64, declared: u64 },
    #[error("aws-chunked body: it ended before its last chunk and trailers")]
    Truncated,
    #[error("aws-chunked body: bytes after its trailers")]
    Trailing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk's data, with this many bytes left.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// Expecting trailer lines, or the empty line that ends them.
    Trailers,
    Done,
}

/// The decoder of one framed body: fed the body's bytes as they come, it gives back the data
/// they carry; at the end, the trailers.
#[derive(Debug)]
pub(crate) struct Unchunker {
    state: State,
    /// Bytes fed but not yet decoded (a partial line).
    pending: BytesMut,
    declared: u64,
    decoded: u64,
    trailers: HeaderMap,
    trailer_bytes: usize,
}

impl Unchunker {
    /// A decoder for a body whose data is `declared` bytes (`x-amz-decoded-content-length`).
    pub(crate) fn new(declared: u64) -> Self {
        Unchunker {
            state: State::Size,
            pending: BytesMut::new(),
            declared,
            decoded: 0,
            trailers: HeaderMap::new(),
            trailer_bytes: 0,
        }
    }

    /// The data bytes not yet given back.
    pub(crate) fn remaining(&self) -> u64 {
        self.declared.saturating_sub(self.decoded)
    }

    /// Decodes `input`, the next bytes of the body, and returns the data in them.
    pub(crate) fn feed(&mut self, input: Bytes) -> Result<Vec<Bytes>, Malformed> {
        self.pending.extend_from_slice(&input);
        let mut data = Vec::new();
        loop {
            match self.state {
                State::Size => {
                    let Some(line) = self.line()? else { break };
                    let size = line.split(';').next().unwrap_or_default().trim();
                    let size =
                        u64::from_str_radix(size, 16).map_err(|_| Malformed::Size(line.clone()))?;
                    self.state = match size {
                        0 => State::Trailers,
                        size => State::Data(size),
                    };
                }
                State::Data(left) => {
                    if self.pending.is_empty() {
                        break;
                    }
                    let take = left.min(self.pending.len() as u64);
                    let chunk = self.pending.split_to(take as usize).freeze();
                    self.decoded += take;
                    if self.decoded > self.declared {
                        return Err(self.length_error());
                    }
                    data.push(chunk);
                    self.state = match left - take {
                        0 => State::DataEnd,
                        left => State::Data(left),
                    };
                }
                State::DataEnd => {
                    if self.pending.len() < 2 {
                        break;
                    }
                    if &self.pending[..2] != b"\r\n" {
                        return Err(Malformed::ChunkEnd);
                    }
                    self.pending.advance(2);
                    self.state = State::Size;
                }
                State::Trailers => {
                    let Some(line) = self.line()? else { break };
                    if line.is_empty() {
                        self.state = State::Done;
                        continue;
                    }
                    self.trailer_bytes += line.len();
                    if self.trailer_bytes > TRAILERS_MAX {
                        return Err(Malformed::LongLine(TRAILERS_MAX));
                    }
                    self.trailer(&line)?;
                }
                State::Done => {
                    if !self.pending.is_empty() {
                        return Err(Malformed::Trailing);
                    }
                    break;
                }
            }
        }
        Ok(data)
    }

    /// The trailers, once the body has ended: an error if it ended early, or its data is not
    /// the length it declared.
    pub(crate) fn finish(self) -> Result<HeaderMap, Malformed> {
        if self.state != State::Done {
            return Err(Malformed::Truncated);
        }
        if self.decoded != self.declared {
            return Err(self.length_error());
        }
        Ok(self.trailers)
    }

    fn length_error(&self) -> Malformed {
        Malformed::Length {
            decoded: self.decoded,
            declared: self.declared,
        }
    }

    /// The next CRLF-ended line fed, without its CRLF; `None` until all of it has come.
    fn line(&mut self) -> Result<Option<String>, Malformed> {
        let Some(end) = self.pending.windows(2).position(|pair| pair == b"\r\n") else {
            if self.pending.len() > SIZE_LINE_MAX {
                return Err(Malformed::LongLine(SIZE_LINE_MAX));
            }
            return Ok(None);
        };
        if end > SIZE_LINE_MAX {
            return Err(Malformed::LongLine(SIZE_LINE_MAX));
        }
        let line = self.pending.split_to(end + 2);
        Ok(Some(String::from_utf8_lossy(&line[..end]).into_owned()))
    }

    fn trailer(&mut self, line: &str) -> Result<(), Malformed> {
        let malformed = || Malformed::Trailer(line.to_string());
        let (name, value) = line.split_once(':').ok_or_else(malformed)?;
        let name = HeaderName::from_bytes(name.trim().to_ascii_lowercase().as_bytes())
            .map_err(|_| malformed())?;
        let value = HeaderValue::from_str(value.trim()).map_err(|_| malformed())?;
        self.trailers.insert(name, value);
        Ok(())
    }
}

/// Where a request's trailers arrive once its body has been read: s3s's handle for the
/// signed aws-chunked bodies it decodes, or ours for the unsigned ones [`Unchunked`] decodes.
#[derive(Clone, Debug)]
pub(crate) enum Trailers {
    Signed(s3s::TrailingHeaders),
    Unsigned(Arc<Mutex<Option<HeaderMap>>>),
}

impl Trailers {
    /// The trailers of a request with s3s's `signed` handle and `extensions`, if its body
    /// may carry any.
    pub(crate) fn of(
        signed: Option<&s3s::TrailingHeaders>,
        extensions: &hyper::http::Extensions,
    ) -> Option<Trailers> {
        match signed {
            Some(signed) => Some(Trailers::Signed(signed.clone())),
            None => extensions.get::<Trailers>().cloned(),
        }
    }

    /// The value of trailer `name`, once the body has been read.
    pub(crate) fn get(&self, name: &str) -> Option<String> {
        let value = |headers: &HeaderMap| {
            headers
                .get(name)
                .map(|value| value.to_str().unwrap_or_default().to_string())
        };
        match self {
            Trailers::Signed(signed) => signed.read(value).flatten(),
            Trailers::Unsigned(ours) => ours.lock().ok()?.as_ref().and_then(value),
        }
    }
}

/// A request body decoded by an [`Unchunker`] as it streams; its trailers land in the
/// handle given at [`Unchunked::new`].
pub(crate) struct Unchunked {
    body: s3s::Body,
    decoder: Option<Unchunker>,
    ready: VecDeque<Bytes>,
    trailers: Arc<Mutex<Option<HeaderMap>>>,
}

impl Unchunked {
    /// `body`, whose data is `declared` bytes, decoded; and the handle of its trailers.
    pub(crate) fn new(body: s3s::Body, declared: u64) -> (Self, Trailers) {
        let trailers = Arc::new(Mutex::new(None));
        let stream = Unchunked {
            body,
            decoder: Some(Unchunker::new(declared)),
            ready: VecDeque::new(),
            trailers: trailers.clone(),
        };
        (stream, Trailers::Unsigned(trailers))
    }
}

type Item = Result<Bytes, s3s::StdError>;

impl Stream for Unchunked {
    type Item = Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        let this = &mut *self;
        loop {
            if let Some(data) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(data)));
            }
            let Some(decoder) = this.decoder.as_mut() else {
                return Poll::Ready(None);
            };
            let fed = match Pin::new(&mut this.body).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(input))) => {
                    decoder.feed(input).map(|data| this.ready.extend(data))
                }
                Poll::Ready(Some(Err(e))) => {
                    this.decoder = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    let finished = this.decoder.take().map(Unchunker::finish);
                    match finished {
                        Some(Ok(trailers)) => {
                            if let Ok(mut slot) = this.trailers.lock() {
                                *slot = Some(trailers);
                            }
                            return Poll::Ready(None);
                        }
                        Some(Err(e)) => Err(e),
                        None => return Poll::Ready(None),
                    }
                }
            };
            if let Err(e) = fed {
                this.decoder = None;
                return Poll::Ready(Some(Err(Box::new(e))));
            }
        }
    }
}

impl s3s::stream::ByteStream for Unchunked {
    fn remaining_length(&self) -> s3s::stream::RemainingLength {
        let queued: usize = self.ready.iter().map(Bytes::len).sum();
        let left = self.decoder.as_ref().map_or(0, Unchunker::remaining);
        s3s::stream::RemainingLength::new_exact(queued + left as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `data` framed in chunks of `size`, with `trailers` lines.
    fn framed(data: &[u8], size: usize, trailers: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in data.chunks(size) {
            out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            out.extend_from_slice(chunk);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n");
        out.extend_from_slice(trailers.as_bytes());
        out.extend_from_slice(b"\r\n");
        out
    }

    /// Decodes `body` fed in pieces of `piece` bytes.
    fn decode(body: &[u8], piece: usize, declared: u64) -> Result<(Vec<u8>, HeaderMap), Malformed> {
        let mut decoder = Unchunker::new(declared);
        let mut data = Vec::new();
        for input in body.chunks(piece) {
            for chunk in decoder.feed(Bytes::copy_from_slice(input))? {
                data.extend_from_slice(&chunk);
            }
        }
        Ok((data, decoder.finish()?))
    }

    #[test]
    fn data_and_trailers_come_out_however_the_body_is_cut() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        let body = framed(&data, 65_536, "x-amz-checksum-crc32:AAAAAA==\r\n");
        for piece in [1, 2, 3, 7, 1000, 65_536, body.len()] {
            let (out, trailers) = decode(&body, piece, data.len() as u64).expect("decodes");
            assert_eq!(out, data, "piece {piece}");
            assert_eq!(trailers["x-amz-checksum-crc32"], "AAAAAA==");
        }
    }

    #[test]
    fn an_empty_body_and_chunk_extensions_decode() {
        let (out, trailers) = decode(b"0\r\n\r\n", 1, 0).expect("decodes");
        assert!(out.is_empty() && trailers.is_empty());
        let body = b"3;chunk-signature=abc\r\nabc\r\n0\r\nX-Amz-Checksum-Sha256: v \r\n\r\n";
        let (out, trailers) = decode(body, 5, 3).expect("decodes");
        assert_eq!(out, b"abc");
        assert_eq!(trailers["x-amz-checksum-sha256"], "v");
    }

    #[test]
    fn malformed_bodies_are_refused() {
        let refused = |body: &[u8], piece, declared| decode(body, piece, declared).err();
        assert_eq!(refused(b"zz\r\n", 4, 0), Some(Malformed::Size("zz".into())));
        assert_eq!(refused(b"3\r\nabcX\r\n", 9, 3), Some(Malformed::ChunkEnd));
        assert_eq!(refused(b"3\r\nabc\r\n", 9, 3), Some(Malformed::Truncated));
        let nocolon = Malformed::Trailer("nocolon".into());
        assert_eq!(refused(b"0\r\nnocolon\r\n\r\n", 16, 0), Some(nocolon));
        assert_eq!(refused(b"0\r\n\r\nmore", 16, 0), Some(Malformed::Trailing));
        let long = vec![b'1'; SIZE_LINE_MAX + 1];
        assert_eq!(
            refused(&long, 64, 0),
            Some(Malformed::LongLine(SIZE_LINE_MAX))
        );
    }

    #[test]
    fn the_data_must_be_the_declared_length() {
        let body = framed(b"abcdef", 4, "");
        for declared in [5, 7] {
            let wrong = Malformed::Length {
                decoded: 6,
                declared,
            };
            assert_eq!(decode(&body, 3, declared).err(), Some(wrong));
        }
    }
}
