//! The frame: a fixed 32-byte header, a metadata segment (a postcard-encoded message) and a
//! data segment (raw bytes, never re-encoded). Layout in docs/design/messenger.md.

use bytes::Bytes;
use crc_fast::{CrcAlgorithm, Digest};

use crate::data::Data;
use crate::entity::Mode;

pub const HEADER_BYTES: usize = 32;
const MAGIC: u32 = u32::from_le_bytes(*b"CFR1");

/// Largest metadata segment a peer may send; larger frames close the link.
pub const META_BYTES_MAX: u32 = 1 << 20;
/// Largest data segment a peer may send; larger frames close the link.
pub const DATA_BYTES_MAX: u32 = 64 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Request,
    Reply,
    /// The server could not produce a reply (its handler failed); the metadata is the reason.
    Refused,
}

impl Kind {
    fn to_byte(self) -> u8 {
        match self {
            Kind::Request => 1,
            Kind::Reply => 2,
            Kind::Refused => 3,
        }
    }

    fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Kind::Request),
            2 => Some(Kind::Reply),
            3 => Some(Kind::Refused),
            _ => None,
        }
    }
}

/// How a frame's data segment crosses a secure link (docs/design/edge-sealing.md, "Links").
/// In crc mode the body checksum covers the data whatever this says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    /// Encrypted with the header and metadata: plaintext, or anything not sealed upstream.
    Inside,
    /// Already sealed by a client: sent as it is after the protected part, which carries its
    /// segment check (a one-time key and tag), so the link binds it without encrypting it
    /// again.
    Open,
    /// Chunks sealed by a client and going back to a client, whose records (nonce and tag of
    /// each chunk) are in the frame's encrypted metadata: sent as they are and not bound by
    /// the link, because the receiver opens every chunk under those records and so detects
    /// any change. Only replies carry it; a request's data goes to a daemon that cannot open
    /// it.
    Bound,
}

impl Segment {
    fn flags(self) -> u8 {
        match self {
            Segment::Inside => 0,
            Segment::Open => 1,
            Segment::Bound => 3,
        }
    }

    fn from_flags(flags: u8) -> Option<Self> {
        match flags {
            0 => Some(Segment::Inside),
            1 => Some(Segment::Open),
            3 => Some(Segment::Bound),
            _ => None,
        }
    }

    /// Whether the segment is sent as it is, after the protected part (in secure mode).
    pub fn travels_open(self) -> bool {
        self != Segment::Inside
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub tag: u64,
    pub meta_len: u32,
    pub data_len: u32,
    /// CRC32C of the metadata then the data; zero in secure mode, where the frame's AEAD
    /// tag authenticates.
    pub body_crc: u32,
    /// How the data segment crosses a secure link.
    pub segment: Segment,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("bad frame magic {0:#010x}")]
    Magic(u32),
    #[error("unknown frame kind {0}")]
    Kind(u8),
    #[error("reserved frame header bytes are not zero")]
    Reserved,
    #[error("frame failed authentication")]
    Unauthentic,
    #[error("frame lengths disagree with its protected header")]
    Lengths,
    #[error("frame header checksum mismatch")]
    HeaderCrc,
    #[error("frame body checksum mismatch (tag {tag})")]
    BodyCrc { tag: u64 },
    #[error("metadata segment of {0} bytes exceeds the limit of {META_BYTES_MAX}")]
    MetaTooLarge(u32),
    #[error("data segment of {0} bytes exceeds the limit of {DATA_BYTES_MAX}")]
    DataTooLarge(u32),
}

fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// CRC32C of the metadata, then of the data's pieces in order.
pub fn body_crc(meta: &[u8], data: &Data) -> u32 {
    let mut digest = Digest::new(CrcAlgorithm::Crc32Iscsi);
    digest.update(meta);
    for piece in data.pieces() {
        digest.update(piece);
    }
    digest.finalize() as u32
}

impl Header {
    /// A header for `meta` and `data`, with the body checksum that `mode` needs.
    pub fn for_body(
        kind: Kind,
        tag: u64,
        meta: &Bytes,
        data: &Data,
        mode: Mode,
        segment: Segment,
    ) -> Self {
        let meta_len = u32::try_from(meta.len()).unwrap_or(u32::MAX);
        let data_len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        assert!(
            meta_len <= META_BYTES_MAX,
            "metadata segment over the limit: {meta_len}"
        );
        assert!(
            data_len <= DATA_BYTES_MAX,
            "data segment over the limit: {data_len}"
        );
        let body_crc = match mode {
            Mode::Crc => body_crc(meta, data),
            Mode::Secure => 0,
        };
        Header {
            kind,
            tag,
            meta_len,
            data_len,
            body_crc,
            segment,
        }
    }

    /// ```text
    ///  0 magic "CFR1"   4 kind u8   5 flags (bit 0: data open, bit 1: bound by its records)   6..8 reserved (0)   8 tag u64
    /// 16 meta_len u32  20 data_len u32  24 body_crc u32  28 header_crc u32 (CRC32C of 0..28)
    /// ```
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut bytes = [0u8; HEADER_BYTES];
        bytes[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        bytes[4] = self.kind.to_byte();
        bytes[5] = self.segment.flags();
        bytes[8..16].copy_from_slice(&self.tag.to_le_bytes());
        bytes[16..20].copy_from_slice(&self.meta_len.to_le_bytes());
        bytes[20..24].copy_from_slice(&self.data_len.to_le_bytes());
        bytes[24..28].copy_from_slice(&self.body_crc.to_le_bytes());
        let header_crc = crc32c(&bytes[0..28]);
        bytes[28..32].copy_from_slice(&header_crc.to_le_bytes());
        bytes
    }

    /// Checks everything the header alone can prove, including the limits, before a single
    /// body byte is read or allocated.
    pub fn decode(bytes: &[u8; HEADER_BYTES]) -> Result<Self, FrameError> {
        let u32_at = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(FrameError::Magic(magic));
        }
        if crc32c(&bytes[0..28]) != u32_at(28) {
            return Err(FrameError::HeaderCrc);
        }
        let kind = Kind::from_byte(bytes[4]).ok_or(FrameError::Kind(bytes[4]))?;
        let segment = Segment::from_flags(bytes[5]).ok_or(FrameError::Reserved)?;
        if bytes[6..8] != [0, 0] {
            return Err(FrameError::Reserved);
        }
        let mut tag = [0u8; 8];
        tag.copy_from_slice(&bytes[8..16]);
        let header = Header {
            kind,
            tag: u64::from_le_bytes(tag),
            meta_len: u32_at(16),
            data_len: u32_at(20),
            body_crc: u32_at(24),
            segment,
        };
        if header.meta_len > META_BYTES_MAX {
            return Err(FrameError::MetaTooLarge(header.meta_len));
        }
        if header.data_len > DATA_BYTES_MAX {
            return Err(FrameError::DataTooLarge(header.data_len));
        }
        Ok(header)
    }

    /// In crc mode, the body (digested as it was read) must match the checksum its header
    /// carries.
    pub fn check_body(&self, body: BodyDigest) -> Result<(), FrameError> {
        if body.0.finalize() as u32 != self.body_crc {
            return Err(FrameError::BodyCrc { tag: self.tag });
        }
        Ok(())
    }
}

/// The CRC32C of a crc-mode body, taken piece by piece as the body is read, while each
/// piece is still in the CPU's cache.
pub struct BodyDigest(Digest);

impl BodyDigest {
    pub fn new() -> Self {
        BodyDigest(Digest::new(CrcAlgorithm::Crc32Iscsi))
    }

    pub fn update(&mut self, piece: &[u8]) {
        self.0.update(piece);
    }
}

impl Default for BodyDigest {
    fn default() -> Self {
        BodyDigest::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        let meta = Bytes::from_static(b"meta");
        let data = Bytes::from_static(b"data").into();
        Header::for_body(Kind::Reply, 7, &meta, &data, Mode::Crc, Segment::Inside)
    }

    #[test]
    fn header_round_trips() {
        let header = sample();
        assert_eq!(Header::decode(&header.encode()), Ok(header));
        let digest = |pieces: &[&[u8]]| {
            let mut body = BodyDigest::new();
            pieces.iter().for_each(|piece| body.update(piece));
            body
        };
        assert_eq!(header.check_body(digest(&[b"meta", b"data"])), Ok(()));
        assert_eq!(header.check_body(digest(&[b"me", b"tad", b"ata"])), Ok(()));
        assert_eq!(
            header.check_body(digest(&[b"meta", b"dat4"])),
            Err(FrameError::BodyCrc { tag: 7 })
        );
    }

    #[test]
    fn every_segment_kind_round_trips_and_unknown_flags_are_refused() {
        for segment in [Segment::Inside, Segment::Open, Segment::Bound] {
            let header = Header {
                segment,
                ..sample()
            };
            assert_eq!(Header::decode(&header.encode()), Ok(header));
        }
        let mut bound_only = Header {
            segment: Segment::Bound,
            ..sample()
        }
        .encode();
        bound_only[5] = 2;
        let crc = crc32c(&bound_only[0..28]);
        bound_only[28..32].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Header::decode(&bound_only), Err(FrameError::Reserved));
    }

    #[test]
    fn every_flipped_header_bit_is_refused() {
        let bytes = sample().encode();
        for bit in 0..HEADER_BYTES * 8 {
            let mut flipped = bytes;
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(Header::decode(&flipped).is_err(), "bit {bit} flip accepted");
        }
    }

    #[test]
    fn oversized_segments_are_refused_from_the_header() {
        let mut header = sample();
        header.data_len = DATA_BYTES_MAX + 1;
        assert_eq!(
            Header::decode(&header.encode()),
            Err(FrameError::DataTooLarge(DATA_BYTES_MAX + 1))
        );
        header.data_len = 0;
        header.meta_len = META_BYTES_MAX + 1;
        assert_eq!(
            Header::decode(&header.encode()),
            Err(FrameError::MetaTooLarge(META_BYTES_MAX + 1))
        );
    }
}
