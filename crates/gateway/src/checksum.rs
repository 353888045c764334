//! Object checksums as S3 keeps them beside the MD5: CRC32, CRC32C, CRC64NVME, SHA-1 or
//! SHA-256 of the content, which current SDKs send with every upload (in a header, or in a
//! trailer after an aws-chunked body) and check on every download. Pure code: the digests
//! come from s3s's hashers (crc-fast, sha1, sha2), the CRCs of parts are joined by
//! crc-fast; the gateway computes one as the body passes and compares.
//!
//! A multipart object's checksum is either of its whole content (`FullObject`, the CRCs
//! only: the parts' CRCs joined), or `Composite`: the digest of its parts' digests, shown
//! with `-COUNT` as a multipart ETag is.

use base64::Engine;
use s3s::crypto::Checksum as _;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Algorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

pub const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::Crc32,
    Algorithm::Crc32c,
    Algorithm::Crc64Nvme,
    Algorithm::Sha1,
    Algorithm::Sha256,
];

impl Algorithm {
    /// The name S3 gives it (`x-amz-checksum-algorithm`, `ChecksumAlgorithm`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "CRC32",
            Algorithm::Crc32c => "CRC32C",
            Algorithm::Crc64Nvme => "CRC64NVME",
            Algorithm::Sha1 => "SHA1",
            Algorithm::Sha256 => "SHA256",
        }
    }

    /// The algorithm S3 names `name` (in any case).
    pub fn named(name: &str) -> Result<Algorithm, String> {
        ALGORITHMS
            .into_iter()
            .find(|algorithm| algorithm.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                format!(
                    "{name:?} is not a checksum algorithm: {}",
                    ALGORITHMS.map(Algorithm::name).join(", ")
                )
            })
    }

    /// The header that carries its value, in a request, a trailer or a response.
    pub fn header(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "x-amz-checksum-crc32",
            Algorithm::Crc32c => "x-amz-checksum-crc32c",
            Algorithm::Crc64Nvme => "x-amz-checksum-crc64nvme",
            Algorithm::Sha1 => "x-amz-checksum-sha1",
            Algorithm::Sha256 => "x-amz-checksum-sha256",
        }
    }

    fn digest_bytes(self) -> usize {
        match self {
            Algorithm::Crc32 | Algorithm::Crc32c => 4,
            Algorithm::Crc64Nvme => 8,
            Algorithm::Sha1 => 20,
            Algorithm::Sha256 => 32,
        }
    }

    fn crc(self) -> Option<crc_fast::CrcAlgorithm> {
        match self {
            Algorithm::Crc32 => Some(crc_fast::CrcAlgorithm::Crc32IsoHdlc),
            Algorithm::Crc32c => Some(crc_fast::CrcAlgorithm::Crc32Iscsi),
            Algorithm::Crc64Nvme => Some(crc_fast::CrcAlgorithm::Crc64Nvme),
            Algorithm::Sha1 | Algorithm::Sha256 => None,
        }
    }

    /// The kind of a multipart object's checksum when its upload names none: S3's.
    pub fn default_kind(self) -> Kind {
        match self {
            Algorithm::Crc64Nvme => Kind::FullObject,
            _ => Kind::Composite,
        }
    }

    /// The digest of `text` given for this algorithm (base64 of the right length).
    pub fn decode(self, text: &str) -> Option<Vec<u8>> {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .ok()
            .filter(|digest| digest.len() == self.digest_bytes())
    }
}

/// What a multipart object's checksum covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    FullObject,
    Composite,
}

impl Kind {
    /// The name S3 gives it (`x-amz-checksum-type`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::FullObject => "FULL_OBJECT",
            Kind::Composite => "COMPOSITE",
        }
    }

    pub fn named(name: &str) -> Result<Kind, String> {
        [Kind::FullObject, Kind::Composite]
            .into_iter()
            .find(|kind| kind.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| format!("{name:?} is not a checksum type: FULL_OBJECT or COMPOSITE"))
    }

    /// Whether `algorithm` can have this kind: a full-object checksum of parts needs a CRC,
    /// which parts' CRCs join into; CRC64NVME is only ever full-object (as in S3).
    pub fn check(self, algorithm: Algorithm) -> Result<(), String> {
        match (self, algorithm) {
            (Kind::FullObject, Algorithm::Sha1 | Algorithm::Sha256)
            | (Kind::Composite, Algorithm::Crc64Nvme) => Err(format!(
                "a {} checksum of a multipart object cannot be {}",
                algorithm.name(),
                self.name()
            )),
            _ => Ok(()),
        }
    }
}

/// An object's checksum, kept in its index entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checksum {
    pub algorithm: Algorithm,
    pub kind: Kind,
    pub digest: Vec<u8>,
    /// The digests of a multipart object's parts, in order; none for a single PUT.
    pub parts: Vec<Vec<u8>>,
}

pub fn encode(digest: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(digest)
}

impl Checksum {
    /// A single PUT's checksum.
    pub fn whole(algorithm: Algorithm, digest: Vec<u8>) -> Checksum {
        Checksum {
            algorithm,
            kind: Kind::FullObject,
            digest,
            parts: Vec::new(),
        }
    }

    /// The checksum of a multipart object whose parts have `parts` (digest and size each,
    /// in order).
    pub fn of_parts(algorithm: Algorithm, kind: Kind, parts: &[(Vec<u8>, u64)]) -> Checksum {
        let digest = match (kind, algorithm.crc()) {
            (Kind::FullObject, Some(crc)) => {
                let joined = parts.iter().fold(None, |joined, (digest, size)| {
                    let value = crc_value(digest);
                    Some(match joined {
                        None => value,
                        Some(before) => crc_fast::checksum_combine(crc, before, value, *size),
                    })
                });
                let bytes = joined.unwrap_or_default().to_be_bytes();
                bytes[8 - algorithm.digest_bytes()..].to_vec()
            }
            _ => {
                let mut hasher = Hasher::new(algorithm);
                for (digest, _) in parts {
                    hasher.update(digest);
                }
                hasher.finish()
            }
        };
        Checksum {
            algorithm,
            kind,
            digest,
            parts: parts.iter().map(|(digest, _)| digest.clone()).collect(),
        }
    }

    /// The value S3 shows: base64, with `-COUNT` after a composite one.
    pub fn shown(&self) -> String {
        self.shown_of(self.parts.len())
    }

    /// The value S3 shows of this checksum of `parts` parts.
    pub fn shown_of(&self, parts: usize) -> String {
        match self.kind {
            Kind::Composite if parts > 0 => format!("{}-{parts}", encode(&self.digest)),
            _ => encode(&self.digest),
        }
    }

    /// Whether `given` (a client's value, with or without `-COUNT`) is this checksum.
    pub fn is(&self, given: &str) -> bool {
        given == self.shown() || (given.split_once('-').is_none() && given == encode(&self.digest))
    }
}

/// A CRC digest (big-endian, as S3 shows it) as a number.
fn crc_value(digest: &[u8]) -> u64 {
    digest
        .iter()
        .fold(0, |value, byte| value << 8 | u64::from(*byte))
}

/// A checksum being computed as content passes.
pub enum Hasher {
    Crc32(s3s::crypto::Crc32),
    Crc32c(s3s::crypto::Crc32c),
    Crc64Nvme(s3s::crypto::Crc64Nvme),
    Sha1(s3s::crypto::Sha1),
    Sha256(s3s::crypto::Sha256),
}

impl Hasher {
    pub fn new(algorithm: Algorithm) -> Hasher {
        match algorithm {
            Algorithm::Crc32 => Hasher::Crc32(s3s::crypto::Crc32::new()),
            Algorithm::Crc32c => Hasher::Crc32c(s3s::crypto::Crc32c::new()),
            Algorithm::Crc64Nvme => Hasher::Crc64Nvme(s3s::crypto::Crc64Nvme::new()),
            Algorithm::Sha1 => Hasher::Sha1(s3s::crypto::Sha1::new()),
            Algorithm::Sha256 => Hasher::Sha256(s3s::crypto::Sha256::new()),
        }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Crc32(h) => h.update(bytes),
            Hasher::Crc32c(h) => h.update(bytes),
            Hasher::Crc64Nvme(h) => h.update(bytes),
            Hasher::Sha1(h) => h.update(bytes),
            Hasher::Sha256(h) => h.update(bytes),
        }
    }

    pub fn finish(self) -> Vec<u8> {
        match self {
            Hasher::Crc32(h) => h.finalize().to_vec(),
            Hasher::Crc32c(h) => h.finalize().to_vec(),
            Hasher::Crc64Nvme(h) => h.finalize().to_vec(),
            Hasher::Sha1(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
        }
    }
}

/// What a write asks to be checked: the algorithm, and the value the client gave in a
/// header, if it did (a trailer's comes after the body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    pub algorithm: Algorithm,
    pub given: Option<String>,
    /// Whether the value is to come in a trailer.
    pub trailed: bool,
}

/// What a write's headers ask: `x-amz-checksum-ALGORITHM` values (at most one),
/// `x-amz-sdk-checksum-algorithm` (`sdk`) and `x-amz-trailer` (`trailer`, a checksum
/// header to come after the body); `None` where they ask nothing.
pub fn asked(
    values: &[(Algorithm, Option<&str>)],
    sdk: Option<&str>,
    trailer: Option<&str>,
) -> Result<Option<Asked>, String> {
    let mut given = values
        .iter()
        .filter_map(|(algorithm, value)| value.map(|value| (*algorithm, value)));
    let first = given.next();
    if given.next().is_some() {
        return Err("a write gives at most one x-amz-checksum-* header".into());
    }
    let trailed = trailer
        .map(|name| {
            ALGORITHMS
                .into_iter()
                .find(|algorithm| algorithm.header().eq_ignore_ascii_case(name.trim()))
                .ok_or_else(|| format!("x-amz-trailer {name:?} names no checksum"))
        })
        .transpose()?;
    let sdk = sdk.map(Algorithm::named).transpose()?;
    let algorithm = match (first, trailed, sdk) {
        (Some((algorithm, _)), _, _)
        | (None, Some(algorithm), _)
        | (None, None, Some(algorithm)) => algorithm,
        (None, None, None) => return Ok(None),
    };
    if [trailed, sdk]
        .iter()
        .flatten()
        .any(|other| *other != algorithm)
    {
        return Err(format!(
            "the write names checksums of two algorithms ({} and another)",
            algorithm.name()
        ));
    }
    Ok(Some(Asked {
        algorithm,
        given: first.map(|(_, value)| value.to_string()),
        trailed: trailed.is_some(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(algorithm: Algorithm, bytes: &[u8]) -> Vec<u8> {
        let mut hasher = Hasher::new(algorithm);
        hasher.update(bytes);
        hasher.finish()
    }

    #[test]
    fn digests_are_s3s() {
        // The values S3's documentation and Ceph's s3-tests give for 1 KiB of 'A'.
        let body = vec![b'A'; 1024];
        assert_eq!(
            encode(&of(Algorithm::Sha256, &body)),
            "arcu6553sHVAiX4MjW0j7I7vD4w6R+Gz9Ok0Q9lTa+0="
        );
        assert_eq!(encode(&of(Algorithm::Crc64Nvme, &body)), "Qeh8oXvGiSo=");
        assert_eq!(encode(&of(Algorithm::Crc32, b"")), "AAAAAA==");
    }

    #[test]
    fn parts_join_into_full_object_crcs_and_composites() {
        let parts: Vec<Vec<u8>> = vec![vec![b'A'; 5000], vec![b'B'; 3000], vec![b'C'; 17]];
        let whole = parts.concat();
        for algorithm in [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64Nvme] {
            let digests: Vec<(Vec<u8>, u64)> = parts
                .iter()
                .map(|part| (of(algorithm, part), part.len() as u64))
                .collect();
            let joined = Checksum::of_parts(algorithm, Kind::FullObject, &digests);
            assert_eq!(joined.digest, of(algorithm, &whole), "{algorithm:?}");
            assert_eq!(joined.shown(), encode(&of(algorithm, &whole)));
        }
        let digests: Vec<(Vec<u8>, u64)> = parts
            .iter()
            .map(|part| (of(Algorithm::Sha256, part), part.len() as u64))
            .collect();
        let composite = Checksum::of_parts(Algorithm::Sha256, Kind::Composite, &digests);
        let concatenated: Vec<u8> = digests.iter().flat_map(|(d, _)| d.clone()).collect();
        assert_eq!(composite.digest, of(Algorithm::Sha256, &concatenated));
        assert!(composite.shown().ends_with("-3"));
        assert!(composite.is(&composite.shown()));
        assert!(composite.is(&encode(&composite.digest)));
        assert!(!composite.is("bad"));
    }

    #[test]
    fn multipart_checksums_are_those_ceph_s3_tests_expect() {
        // Three parts of 5 MiB of 'A', 'B' and 'C'.
        let parts: Vec<Vec<u8>> = [b'A', b'B', b'C'].map(|b| vec![b; 5 << 20]).to_vec();
        for (algorithm, kind, want) in [
            (Algorithm::Crc32, Kind::FullObject, "WgDhBQ=="),
            (Algorithm::Crc32c, Kind::FullObject, "xU+Krw=="),
            (Algorithm::Crc64Nvme, Kind::FullObject, "i+6LR0y3eFo="),
            (
                Algorithm::Sha1,
                Kind::Composite,
                "sizjvY4eud3MrcHdZM3cQ/ol39o=-3",
            ),
            (
                Algorithm::Sha256,
                Kind::Composite,
                "uWBwpe1dxI4Vw8Gf0X9ynOdw/SS6VBzfWm9giiv1sf4=-3",
            ),
        ] {
            let digests: Vec<(Vec<u8>, u64)> = parts
                .iter()
                .map(|part| (of(algorithm, part), part.len() as u64))
                .collect();
            assert_eq!(Checksum::of_parts(algorithm, kind, &digests).shown(), want);
        }
        assert_eq!(encode(&of(Algorithm::Crc32, &parts[0])), "JRTCyQ==");
    }

    #[test]
    fn writes_ask_one_algorithm() {
        let crc = [
            (Algorithm::Crc32, Some("AAAAAA==")),
            (Algorithm::Sha1, None),
        ];
        assert_eq!(
            asked(&crc, Some("crc32"), None),
            Ok(Some(Asked {
                algorithm: Algorithm::Crc32,
                given: Some("AAAAAA==".into()),
                trailed: false,
            }))
        );
        assert_eq!(
            asked(&[], None, Some("x-amz-checksum-crc64nvme")),
            Ok(Some(Asked {
                algorithm: Algorithm::Crc64Nvme,
                given: None,
                trailed: true,
            }))
        );
        assert_eq!(asked(&[], None, None), Ok(None));
        assert!(asked(&crc, Some("SHA256"), None).is_err());
        assert!(asked(&[], None, Some("x-amz-meta-a")).is_err());
        assert!(asked(&[], Some("MD5"), None).is_err());
        let two = [
            (Algorithm::Crc32, Some("AAAAAA==")),
            (Algorithm::Sha1, Some("x")),
        ];
        assert!(asked(&two, None, None).is_err());
        assert_eq!(Algorithm::Crc32.decode("AAAAAA=="), Some(vec![0; 4]));
        assert_eq!(Algorithm::Sha256.decode("AAAAAA=="), None);
        assert!(Kind::FullObject.check(Algorithm::Sha256).is_err());
        assert!(Kind::Composite.check(Algorithm::Crc64Nvme).is_err());
        assert!(Kind::Composite.check(Algorithm::Crc32c).is_ok());
    }
}
