//! GetObjectTorrent: a BitTorrent metainfo file (BEP 3) for an object: its name, its size
//! and the SHA-1 of each piece of its content, hashed as the gateway reads it, with the
//! object's own URL as the torrent's web seed (BEP 19). There is no tracker: a client
//! fetches the pieces from that URL (which serves them to whoever may read the object) and
//! from the peers it finds on its own. As S3, only objects under 5 GiB and not encrypted
//! with a customer's key (whose key the torrent's readers would not have) have a torrent.

use futures::StreamExt;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::error::Refusal;
use super::object::refuse_encryption_headers;
use super::policy::allowed;
use super::Gateway;
use crate::layout::Sse;
use crate::Error;

/// The largest object with a torrent (S3's limit).
const TORRENT_SIZE_MAX: u64 = 5 << 30;
/// The smallest piece; pieces double from it until an object has at most
/// [`PIECES_WANTED`] of them.
const PIECE_LENGTH_MIN: u64 = 256 << 10;
const PIECES_WANTED: u64 = 2048;
const SHA1_LEN: usize = 20;

/// The piece length of an object of `size` bytes: a power of two from 256 KiB.
fn piece_length(size: u64) -> u64 {
    size.div_ceil(PIECES_WANTED)
        .next_power_of_two()
        .max(PIECE_LENGTH_MIN)
}

/// The SHA-1 of each `length`-byte piece of what is fed to it, in order; the last piece
/// may be shorter.
struct Pieces {
    length: u64,
    piece: aws_lc_rs::digest::Context,
    filled: u64,
    hashes: Vec<u8>,
}

impl Pieces {
    fn new(length: u64) -> Self {
        assert!(length > 0, "a piece holds at least one byte");
        Pieces {
            length,
            piece: Self::context(),
            filled: 0,
            hashes: Vec::new(),
        }
    }

    fn context() -> aws_lc_rs::digest::Context {
        aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY)
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = (self.length - self.filled).min(bytes.len() as u64) as usize;
            self.piece.update(&bytes[..room]);
            self.filled += room as u64;
            bytes = &bytes[room..];
            if self.filled == self.length {
                self.close_piece();
            }
        }
    }

    fn close_piece(&mut self) {
        let piece = std::mem::replace(&mut self.piece, Self::context());
        self.hashes.extend_from_slice(piece.finish().as_ref());
        self.filled = 0;
    }

    /// The pieces' hashes, each 20 bytes.
    fn finish(mut self) -> Vec<u8> {
        if self.filled > 0 {
            self.close_piece();
        }
        self.hashes
    }
}

/// What a torrent describes: one file.
struct Metainfo<'a> {
    /// The file's suggested name.
    name: &'a str,
    size: u64,
    piece_length: u64,
    /// The pieces' SHA-1s, 20 bytes each.
    pieces: &'a [u8],
    /// Where the file can be fetched whole (the web seed).
    url: &'a str,
    /// Seconds since 1970 (the object's last change, so that a version's torrent is always
    /// the same bytes).
    created: u64,
}

/// A bencoded byte string.
fn bytes(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(text.len().to_string().as_bytes());
    out.push(b':');
    out.extend_from_slice(text);
}

/// A bencoded integer.
fn integer(out: &mut Vec<u8>, n: u64) {
    out.push(b'i');
    out.extend_from_slice(n.to_string().as_bytes());
    out.push(b'e');
}

impl Metainfo<'_> {
    /// The metainfo file: a bencoded dictionary, keys in byte order as BEP 3 requires.
    fn encode(&self) -> Vec<u8> {
        assert_eq!(self.pieces.len() % SHA1_LEN, 0, "pieces are whole SHA-1s");
        assert_eq!(
            (self.pieces.len() / SHA1_LEN) as u64,
            self.size.div_ceil(self.piece_length),
            "one hash per piece"
        );
        let mut out = b"d".to_vec();
        bytes(&mut out, b"created by");
        bytes(&mut out, b"Coffer");
        bytes(&mut out, b"creation date");
        integer(&mut out, self.created);
        bytes(&mut out, b"info");
        out.push(b'd');
        bytes(&mut out, b"length");
        integer(&mut out, self.size);
        bytes(&mut out, b"name");
        bytes(&mut out, self.name.as_bytes());
        bytes(&mut out, b"piece length");
        integer(&mut out, self.piece_length);
        bytes(&mut out, b"pieces");
        bytes(&mut out, self.pieces);
        out.push(b'e');
        bytes(&mut out, b"url-list");
        bytes(&mut out, self.url.as_bytes());
        out.push(b'e');
        out
    }
}

/// The name a torrent suggests for `key`: its last part after a `/`, or the key itself
/// when that part is empty.
fn file_name(key: &str) -> &str {
    match key.rsplit('/').next() {
        Some(last) if !last.is_empty() => last,
        _ => key,
    }
}

/// The URL of the object `req` asks the torrent of: the request's own scheme, host and
/// path, without its query.
fn object_url<T>(req: &S3Request<T>) -> String {
    let secure = req
        .extensions
        .get::<crate::serve::Peer>()
        .is_none_or(|peer| peer.secure);
    let scheme = if secure { "https" } else { "http" };
    let host = req
        .headers
        .get(hyper::header::HOST)
        .and_then(|host| host.to_str().ok())
        .or(req.uri.authority().map(|a| a.as_str()))
        .unwrap_or("localhost");
    format!("{scheme}://{host}{}", req.uri.path())
}

pub(super) async fn get_object_torrent(
    gw: &Gateway,
    req: S3Request<GetObjectTorrentInput>,
) -> S3Result<S3Response<GetObjectTorrentOutput>> {
    let bucket = allowed!(gw, req, object GetObjectTorrent);
    refuse_encryption_headers(&req.headers)?;
    let (name, key) = (&req.input.bucket, &req.input.key);
    let version = super::policy::query(&req, "versionId");
    let mut entry = gw
        .readable(&req, &bucket, name, key, version.as_deref(), None)
        .await?;
    let hold = gw.hold(&mut entry).await?;
    if entry.size >= TORRENT_SIZE_MAX {
        return Err(Refusal::BadRequest("only objects under 5 GiB have a torrent").into());
    }
    if matches!(entry.sse, Some(Sse::Customer { .. })) {
        return Err(Refusal::BadRequest(
            "an object encrypted with a customer's key (SSE-C) has no torrent",
        )
        .into());
    }
    let mut content = gw.read(&entry, 0..entry.size, None, hold).await?;
    let piece_length = piece_length(entry.size);
    let mut pieces = Pieces::new(piece_length);
    while let Some(read) = content.next().await {
        let read = read.map_err(|e| {
            tracing::warn!("the torrent of {name}/{key} could not read the object: {e}");
            Error::Internal(format!("the object could not be read: {e}"))
        })?;
        pieces.feed(&read);
    }
    let pieces = pieces.finish();
    let metainfo = Metainfo {
        name: file_name(key),
        size: entry.size,
        piece_length,
        pieces: &pieces,
        url: &object_url(&req),
        created: entry.mtime_ns / 1_000_000_000,
    }
    .encode();
    Ok(S3Response::new(GetObjectTorrentOutput {
        body: Some(StreamingBlob::from(s3s::Body::from(bytes::Bytes::from(
            metainfo,
        )))),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha1(bytes: &[u8]) -> Vec<u8> {
        aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, bytes)
            .as_ref()
            .to_vec()
    }

    #[test]
    fn pieces_are_hashed_alike_however_the_content_arrives() {
        let content: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let want: Vec<u8> = content.chunks(4096).flat_map(sha1).collect();
        for cut in [1, 7, 4096, 5000, 10_000] {
            let mut pieces = Pieces::new(4096);
            for chunk in content.chunks(cut) {
                pieces.feed(chunk);
            }
            assert_eq!(pieces.finish(), want, "fed {cut} bytes at a time");
        }
        assert!(
            Pieces::new(4096).finish().is_empty(),
            "nothing has no pieces"
        );
    }

    #[test]
    fn pieces_grow_from_256_kib_so_that_an_object_has_at_most_2048() {
        assert_eq!(piece_length(0), 256 << 10);
        assert_eq!(piece_length(512 << 20), 256 << 10);
        assert_eq!(piece_length((512 << 20) + 1), 512 << 10);
        assert_eq!(piece_length((5 << 30) - 1), 4 << 20);
        assert!(((5u64 << 30) - 1).div_ceil(piece_length((5 << 30) - 1)) <= PIECES_WANTED);
    }

    #[test]
    fn the_metainfo_is_a_bencoded_dictionary_in_key_order() {
        let pieces = [[1u8; 20], [2u8; 20]].concat();
        let encoded = Metainfo {
            name: "a.bin",
            size: 300 << 10,
            piece_length: 256 << 10,
            pieces: &pieces,
            url: "https://gw:7480/b/dir/a.bin",
            created: 1_700_000_000,
        }
        .encode();
        let mut want = b"d10:created by6:Coffer13:creation datei1700000000e4:infod6:lengthi307200e4:name5:a.bin12:piece lengthi262144e6:pieces40:".to_vec();
        want.extend_from_slice(&pieces);
        want.extend_from_slice(b"e8:url-list27:https://gw:7480/b/dir/a.bine");
        assert_eq!(encoded, want);
    }

    #[test]
    fn a_torrent_names_the_last_part_of_its_key() {
        assert_eq!(file_name("dir/sub/a.bin"), "a.bin");
        assert_eq!(file_name("a.bin"), "a.bin");
        assert_eq!(file_name("dir/"), "dir/");
    }
}
