//! What S3 requests ask of checksums and what their answers show: the algorithm and value
//! a write gives (in headers, or in a trailer after an aws-chunked body), checked against
//! what the gateway computed as the body passed (`crate::checksum` decides); and the
//! checksum fields of s3s's outputs, set from what an object or part keeps.

use s3s::dto::{ChecksumAlgorithm, ChecksumMode, ChecksumType, CompletedPart};
use s3s::S3Result;

use super::error::Refusal;
use crate::checksum::{self, Algorithm, Asked, Checksum, Kind};
use crate::chunked::Trailers;
use crate::layout::{ObjectEntry, PartRecord};

/// What a PutObject or UploadPart input (with the request's `headers`) asks to check.
macro_rules! asked_checksum {
    ($input:expr, $headers:expr) => {
        super::checksum::asked(
            &[
                (
                    crate::checksum::Algorithm::Crc32,
                    $input.checksum_crc32.as_deref(),
                ),
                (
                    crate::checksum::Algorithm::Crc32c,
                    $input.checksum_crc32c.as_deref(),
                ),
                (
                    crate::checksum::Algorithm::Crc64Nvme,
                    $input.checksum_crc64nvme.as_deref(),
                ),
                (
                    crate::checksum::Algorithm::Sha1,
                    $input.checksum_sha1.as_deref(),
                ),
                (
                    crate::checksum::Algorithm::Sha256,
                    $input.checksum_sha256.as_deref(),
                ),
            ],
            $input.checksum_algorithm.as_ref(),
            $headers,
        )
    };
}
pub(super) use asked_checksum;

/// The checksum a write asks for (see [`checksum::asked`]).
pub(super) fn asked(
    values: &[(Algorithm, Option<&str>)],
    sdk: Option<&ChecksumAlgorithm>,
    headers: &hyper::HeaderMap,
) -> S3Result<Option<Asked>> {
    let trailer = headers
        .get("x-amz-trailer")
        .map(|value| value.to_str().unwrap_or_default());
    checksum::asked(values, sdk.map(ChecksumAlgorithm::as_str), trailer)
        .map_err(|why| Refusal::Checksum(why).into())
}

/// The value a write gave for `asked` (in its header, else in the trailer that followed
/// its body), checked against `computed`: a value that is not `computed`, or is not one at
/// all, is BadDigest; a trailer announced and never sent is refused.
pub(super) fn check_given(
    asked: &Asked,
    trailers: Option<&Trailers>,
    computed: &[u8],
) -> S3Result<()> {
    let name = asked.algorithm.header();
    let given = match &asked.given {
        Some(given) => Some(given.clone()),
        None => trailers.and_then(|trailers| trailers.get(name)),
    };
    match given {
        Some(given) if asked.algorithm.decode(&given).as_deref() == Some(computed) => Ok(()),
        Some(_) => Err(Refusal::ChecksumMismatch(asked.algorithm.name()).into()),
        None if asked.trailed => {
            Err(Refusal::Checksum(format!("the {name} trailer did not come")).into())
        }
        None => Ok(()),
    }
}

/// The checksum type S3 shows for `kind`.
pub(super) fn shown_type(kind: Kind) -> ChecksumType {
    ChecksumType::from_static(match kind {
        Kind::FullObject => ChecksumType::FULL_OBJECT,
        Kind::Composite => ChecksumType::COMPOSITE,
    })
}

pub(super) fn shown_algorithm(algorithm: Algorithm) -> ChecksumAlgorithm {
    ChecksumAlgorithm::from(algorithm.name().to_string())
}

/// The checksum a GET or HEAD shows of `checksum`, and its kind, if the request asks for
/// it (`x-amz-checksum-mode: ENABLED`): all of it for the whole object, a part's for one
/// part (`partNumber`), none for a range (S3 has none to give).
pub(super) fn read(
    entry: &ObjectEntry,
    mode: Option<&ChecksumMode>,
    part: Option<i32>,
    ranged: bool,
) -> Option<((Algorithm, String), Kind)> {
    let (checksum, whole) = entry.shown_checksum()?;
    let wanted = mode.is_some_and(|mode| mode.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED));
    if !wanted || ranged {
        return None;
    }
    let shown = match part {
        Some(number) if !checksum.parts.is_empty() => {
            let digest = checksum
                .parts
                .get(usize::try_from(number).ok()?.checked_sub(1)?)?;
            checksum::encode(digest)
        }
        _ => whole,
    };
    Some(((checksum.algorithm, shown), checksum.kind))
}

/// Sets the checksum fields of an s3s output (`checksum_crc32` … `checksum_sha256`) from
/// an `Option<(Algorithm, String)>`.
macro_rules! set_checksum {
    ($target:expr, $shown:expr) => {
        if let Some((algorithm, value)) = $shown {
            use crate::checksum::Algorithm as A;
            let value = Some(value);
            match algorithm {
                A::Crc32 => $target.checksum_crc32 = value,
                A::Crc32c => $target.checksum_crc32c = value,
                A::Crc64Nvme => $target.checksum_crc64nvme = value,
                A::Sha1 => $target.checksum_sha1 = value,
                A::Sha256 => $target.checksum_sha256 = value,
            }
        }
    };
}
pub(super) use set_checksum;

/// Sets the checksum fields and the `checksum_type` of an s3s output from an object's
/// entry, if it has a checksum.
macro_rules! show_checksum {
    ($target:expr, $entry:expr) => {
        if let Some((checksum, shown)) = $entry.shown_checksum() {
            $target.checksum_type = Some(super::checksum::shown_type(checksum.kind));
            super::checksum::set_checksum!($target, Some((checksum.algorithm, shown)));
        }
    };
}
pub(super) use show_checksum;

/// The checksum a CompleteMultipartUpload gives for the object or one part, of `algorithm`
/// (from its `checksum_*` fields).
macro_rules! given_checksum {
    ($source:expr, $algorithm:expr) => {{
        use crate::checksum::Algorithm as A;
        match $algorithm {
            A::Crc32 => $source.checksum_crc32.as_deref(),
            A::Crc32c => $source.checksum_crc32c.as_deref(),
            A::Crc64Nvme => $source.checksum_crc64nvme.as_deref(),
            A::Sha1 => $source.checksum_sha1.as_deref(),
            A::Sha256 => $source.checksum_sha256.as_deref(),
        }
    }};
}
pub(super) use given_checksum;

/// The checksum a CreateMultipartUpload asks its parts and object to have: an algorithm,
/// and what the object's covers (S3's default for the algorithm unless given).
pub(super) fn for_upload(
    algorithm: Option<&ChecksumAlgorithm>,
    kind: Option<&ChecksumType>,
) -> S3Result<Option<(Algorithm, Kind)>> {
    let Some(algorithm) = algorithm else {
        return match kind {
            Some(_) => Err(Refusal::Checksum(
                "x-amz-checksum-type needs an x-amz-checksum-algorithm".into(),
            )
            .into()),
            None => Ok(None),
        };
    };
    let algorithm = Algorithm::named(algorithm.as_str()).map_err(Refusal::Checksum)?;
    let kind = match kind {
        Some(kind) => Kind::named(kind.as_str()).map_err(Refusal::Checksum)?,
        None => algorithm.default_kind(),
    };
    kind.check(algorithm).map_err(Refusal::Checksum)?;
    Ok(Some((algorithm, kind)))
}

/// The checksum an UploadPart computes: the upload's algorithm (with the value the part
/// gives, if it gives one); the one the part asks for, if the upload has none.
pub(super) fn for_part(
    upload: Option<(Algorithm, Kind)>,
    part: Option<Asked>,
) -> S3Result<Option<Asked>> {
    match (upload, part) {
        (Some((algorithm, _)), Some(part)) if part.algorithm != algorithm => {
            Err(Refusal::Checksum(format!(
                "the upload's parts are checked with {}, not {}",
                algorithm.name(),
                part.algorithm.name()
            ))
            .into())
        }
        (Some((algorithm, _)), None) => Ok(Some(Asked {
            algorithm,
            given: None,
            trailed: false,
        })),
        (_, part) => Ok(part),
    }
}

/// The checksum of the object a CompleteMultipartUpload makes of `chosen` parts (as
/// `asked`, which may name each part's checksum), for an upload with `upload`'s; `given`
/// is the object's checksum the completion gives, if it gives one, and `kind` its type.
pub(super) fn completed(
    upload: Option<(Algorithm, Kind)>,
    asked: &[CompletedPart],
    chosen: &[&PartRecord],
    given: Option<&str>,
    kind: Option<&ChecksumType>,
) -> S3Result<Option<Checksum>> {
    let Some((algorithm, upload_kind)) = upload else {
        return Ok(None);
    };
    if let Some(kind) = kind {
        if !kind.as_str().eq_ignore_ascii_case(upload_kind.name()) {
            return Err(Refusal::Checksum(format!(
                "the upload's checksum type is {}, not {}",
                upload_kind.name(),
                kind.as_str()
            ))
            .into());
        }
    }
    let mut parts = Vec::with_capacity(chosen.len());
    for (asked, stored) in asked.iter().zip(chosen) {
        let refused = || Refusal::PartChecksum {
            number: asked.part_number.unwrap_or_default(),
            algorithm: algorithm.name(),
        };
        // A part uploaded before checksums were kept has none to join.
        let digest = stored.checksum.clone().ok_or_else(refused)?;
        // A part's checksum need not be named again (as Ceph's gateway takes it); one
        // named must be the part's.
        if let Some(given) = given_checksum!(asked, algorithm) {
            if algorithm.decode(given).as_ref() != Some(&digest) {
                return Err(refused().into());
            }
        }
        parts.push((digest, stored.segment.size));
    }
    let checksum = Checksum::of_parts(algorithm, upload_kind, &parts);
    if given.is_some_and(|given| !checksum.is(given)) {
        return Err(Refusal::ChecksumMismatch(algorithm.name()).into());
    }
    Ok(Some(checksum))
}
