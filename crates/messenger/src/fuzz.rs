//! Entry points for the fuzz targets in `fuzz/` and for the tests that replay what they
//! find (docs/fuzzing.md); compiled for tests and the fuzzer only. Each takes bytes as a
//! hostile peer would send them to a link and reads them as the link does. None may panic,
//! hang, or allocate past the limits the frame header enforces, whatever the bytes; each
//! returns how many frames or messages it accepted, which the tests check on inputs that
//! must pass.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::frame::{Header, Kind, Segment};
use crate::link::{self, FrameReader};
use crate::outbox::Outgoing;
use crate::protect::{FrameKey, BOUND_BIT, PREFIX_BYTES, TAG_BYTES};
use crate::{EntityName, Mode};

/// The secret both ends of the fuzzed secure link hold: the target plays the peer that
/// has the keys, so its frames pass authentication and reach the parsing behind it.
const SECRET: [u8; 32] = [0x5a; 32];
/// Long enough for any frame held in memory; the frame timeout is not under test.
const TIMEOUT: Duration = Duration::from_secs(60);

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime")
        .block_on(future)
}

async fn read_all(mut reader: FrameReader) -> usize {
    let mut frames = 0;
    while let Ok(Some(_)) = link::read_frame(&mut reader, TIMEOUT).await {
        frames += 1;
    }
    frames
}

/// Reads `bytes` as frames arriving on a crc-mode link, until they end or one is refused.
pub fn crc_frames(bytes: &[u8]) -> usize {
    let reader = FrameReader {
        stream: Box::new(std::io::Cursor::new(bytes.to_vec())),
        key: None,
        meter: crate::metrics::link(Mode::Crc).0,
    };
    block_on(read_all(reader))
}

/// Reads one frame of a secure link made from `bytes`: the first four are the clear
/// prefix's open-segment word (its length and bound bit, as the peer claims them), the next
/// two how many of the following bytes form the protected part, which the target seals
/// with the link's key as a peer holding it would; the rest follows as the open segment.
pub fn secure_frame(bytes: &[u8]) -> usize {
    let Some((word, rest)) = bytes.split_first_chunk::<4>() else {
        return 0;
    };
    let Some((len, rest)) = rest.split_first_chunk::<2>() else {
        return 0;
    };
    let len = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    let (protected, open) = rest.split_at(len);
    let mut sealed = protected.to_vec();
    let tag = FrameKey::new(SECRET).sealing().seal(&mut sealed);
    let mut wire = Vec::with_capacity(PREFIX_BYTES + len + TAG_BYTES + open.len());
    wire.extend_from_slice(&(len as u32).to_le_bytes());
    wire.extend_from_slice(word);
    wire.extend_from_slice(&sealed);
    wire.extend_from_slice(&tag);
    wire.extend_from_slice(open);
    let reader = FrameReader {
        stream: Box::new(std::io::Cursor::new(wire)),
        key: Some(FrameKey::new(SECRET)),
        meter: crate::metrics::link(Mode::Secure).0,
    };
    block_on(read_all(reader))
}

/// Reads `bytes` as the hello a connecting peer sends, then as the answer a server sends;
/// returns how many of the two parsed.
pub fn hello(bytes: &[u8]) -> usize {
    block_on(async {
        let as_hello = link::read_hello(&mut std::io::Cursor::new(bytes)).await;
        let as_answer = link::read_answer(&mut std::io::Cursor::new(bytes)).await;
        usize::from(as_hello.is_ok()) + usize::from(as_answer.is_ok())
    })
}

/// Reads `bytes` as a message of type `T`, as a frame's metadata is read. A message that
/// decodes must encode again, and that encoding must be its own: decoded and encoded once
/// more, the bytes are the same. Returns whether the bytes read as a `T`.
pub fn reads<T: Serialize + DeserializeOwned>(bytes: &[u8]) -> bool {
    let Ok(message) = postcard::from_bytes::<T>(bytes) else {
        return false;
    };
    let encoded = postcard::to_allocvec(&message).expect("a decoded message encodes");
    let again: T = postcard::from_bytes(&encoded).expect("an encoded message decodes");
    let encoded_again = postcard::to_allocvec(&again).expect("a decoded message encodes");
    assert_eq!(
        encoded, encoded_again,
        "a message's encoding is not its own"
    );
    true
}

/// Messages as peers send them, for the `messages` target: a monitor's request, and an
/// OSD's reply carrying chunk seal records (the wire's hand-written encoding).
pub fn message_seeds() -> Vec<Vec<u8>> {
    use crate::message::{ChunkSeal, MonRequest, OpResult, OsdReply};
    let seal = ChunkSeal {
        key_id: 3,
        nonce: [1; 12],
        tag: [2; 16],
    };
    let chunks = OsdReply::Results(vec![OpResult::Chunks {
        size: 3 << 16,
        seals: vec![Some(seal), None, Some(seal)],
    }]);
    vec![
        postcard::to_allocvec(&MonRequest::GetMap { newer_than: None }).expect("encodes"),
        postcard::to_allocvec(&chunks).expect("encodes"),
    ]
}

/// Frames as senders write them, for [`crc_frames`]: two in a row, and one whose data
/// segment is long enough to be received aligned.
pub fn crc_seeds() -> Vec<Vec<u8>> {
    let short = crc_frame(b"meta", b"data");
    vec![
        [short.clone(), short].concat(),
        crc_frame(b"m", &vec![9; link::ALIGNED_SEGMENT_BYTES_MIN + 5]),
    ]
}

/// One frame of each segment kind, for [`secure_frame`].
pub fn secure_seeds() -> Vec<Vec<u8>> {
    [Segment::Inside, Segment::Open, Segment::Bound]
        .into_iter()
        .map(|segment| secure_frame_input(b"meta", &[7; 100], segment))
        .collect()
}

/// A hello and a welcome, for [`hello`].
pub fn hello_seeds() -> Vec<Vec<u8>> {
    let framed = |body: Vec<u8>| [(body.len() as u32).to_le_bytes().to_vec(), body].concat();
    let hello = link::Hello {
        version: link::PROTOCOL_VERSION,
        entity: EntityName::osd(3),
        modes: vec![Mode::Secure, Mode::Crc],
    };
    let welcome = link::Answer::Welcome {
        entity: EntityName::osd(4),
        mode: Mode::Secure,
    };
    vec![
        framed(postcard::to_allocvec(&hello).expect("a hello encodes")),
        framed(postcard::to_allocvec(&welcome).expect("an answer encodes")),
    ]
}

fn secure_frame_input(meta: &[u8], data: &[u8], segment: Segment) -> Vec<u8> {
    let (meta, data) = (
        bytes::Bytes::copy_from_slice(meta),
        crate::Data::from(bytes::Bytes::copy_from_slice(data)),
    );
    let header = Header::for_body(Kind::Request, 1, &meta, &data, Mode::Secure, segment);
    let frame = Outgoing {
        header,
        meta,
        data,
        check: None,
    };
    let wire = crate::outbox::protect(&mut FrameKey::new(SECRET), &frame);
    let protected_len = u32::from_le_bytes([wire[0], wire[1], wire[2], wire[3]]) as usize;
    let word = u32::from_le_bytes([wire[4], wire[5], wire[6], wire[7]]);
    let mut plain = wire[PREFIX_BYTES..PREFIX_BYTES + protected_len + TAG_BYTES].to_vec();
    FrameKey::new(SECRET)
        .opening()
        .open(&mut plain)
        .expect("a frame this key sealed opens");
    plain.truncate(protected_len);
    let open = &wire[PREFIX_BYTES + protected_len + TAG_BYTES..];
    assert_eq!(open.len(), (word & !BOUND_BIT) as usize);
    let mut input = word.to_le_bytes().to_vec();
    input.extend_from_slice(&(protected_len as u16).to_le_bytes());
    input.extend_from_slice(&plain);
    input.extend_from_slice(open);
    input
}

fn crc_frame(meta: &[u8], data: &[u8]) -> Vec<u8> {
    let (meta, data) = (
        bytes::Bytes::copy_from_slice(meta),
        bytes::Bytes::copy_from_slice(data),
    );
    let body = crate::Data::from(data.clone());
    let header = Header::for_body(Kind::Reply, 1, &meta, &body, Mode::Crc, Segment::Inside);
    [&header.encode()[..], &meta, &data].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_sender_writes_is_read() {
        let crc = crc_seeds();
        assert_eq!(crc_frames(&crc[0]), 2);
        assert_eq!(crc_frames(&crc[0][..crc[0].len() - 1]), 1);
        assert_eq!(crc_frames(&crc[1]), 1);
        let kinds = [Segment::Inside, Segment::Open, Segment::Bound];
        for (input, segment) in secure_seeds().into_iter().zip(kinds) {
            assert_eq!(secure_frame(&input), 1, "{segment:?}");
            // The last byte is data: inside the protected part, or open and unchecked
            // where bound, so only an open segment's check catches the flip.
            let mut flipped = input.clone();
            *flipped.last_mut().expect("bytes") ^= 1;
            let expected = usize::from(segment != Segment::Open);
            assert_eq!(secure_frame(&flipped), expected, "{segment:?} flipped");
        }
        let seeds = message_seeds();
        assert!(reads::<crate::message::MonRequest>(&seeds[0]));
        assert!(reads::<crate::message::OsdReply>(&seeds[1]));
        assert!(!reads::<crate::message::OsdReply>(
            &seeds[1][..seeds[1].len() - 1]
        ));
        for seed in hello_seeds() {
            assert!(hello(&seed) >= 1, "{seed:?}");
            assert_eq!(hello(&seed[..seed.len() - 1]), 0);
        }
    }
}
