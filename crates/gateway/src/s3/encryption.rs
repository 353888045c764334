//! What the S3 requests ask of server-side encryption, and the data keys that serve it: a
//! fresh one per new segment (from the KMS, or wrapped by the customer's key), and the
//! unwrapped ones of an object's segments for reading, through the cache.

use std::sync::Arc;

use base64::Engine;
use futures::{StreamExt, TryStreamExt};
use keys::{KeyEncryptionKey, SecretKey, WrappedKey};
use md5::Digest;
use s3s::dto::ServerSideEncryption;
use s3s::S3Result;

use super::error::Refusal;
use crate::buckets;
use crate::data::Sealing;
use crate::kms::Kms;
use crate::layout::{ObjectEntry, SealedKey, Segment, Sse};
use crate::sse::{self, KeyCache};

/// What a customer key wraps a data key under.
const CUSTOMER_CONTEXT: &[u8] = b"coffer-sse-c";

/// A customer's key from SSE-C headers, and its MD5 as the client sent it (base64).
pub struct CustomerKey {
    key: KeyEncryptionKey,
    pub md5_base64: String,
}

/// The SSE-C key a request gives in its three customer headers (`customer_key!(input)`),
/// or in the three of its copy source (`customer_key!(input, copy_source)`).
macro_rules! customer_key {
    ($input:expr) => {
        $crate::s3::encryption::customer_key_of(
            &$input.sse_customer_algorithm,
            &$input.sse_customer_key,
            &$input.sse_customer_key_md5,
        )
    };
    ($input:expr, copy_source) => {
        $crate::s3::encryption::customer_key_of(
            &$input.copy_source_sse_customer_algorithm,
            &$input.copy_source_sse_customer_key,
            &$input.copy_source_sse_customer_key_md5,
        )
    };
}
pub(super) use customer_key;

/// What a write (PutObject, CopyObject, CreateMultipartUpload) asks of encryption: its
/// SSE-C key, and the encryption the new object gets (its headers', else the bucket's
/// default), as `(customer, sse)`; returns from the verb if either is refused.
macro_rules! write_encryption {
    ($bucket:expr, $input:expr) => {{
        let customer = $crate::s3::encryption::customer_key!($input)?;
        let sse = $crate::s3::encryption::for_write(
            $bucket,
            &$input.server_side_encryption,
            &$input.ssekms_key_id,
            customer.as_ref(),
        )?;
        (customer, sse)
    }};
}
pub(super) use write_encryption;

/// The SSE-C key of a request: `None` without the headers; refused when they are
/// inconsistent (S3's checks: AES256, 32 bytes, a matching MD5).
pub fn customer_key_of(
    algorithm: &Option<String>,
    key: &Option<String>,
    key_md5: &Option<String>,
) -> S3Result<Option<CustomerKey>> {
    let (Some(algorithm), Some(key), Some(key_md5)) = (algorithm, key, key_md5) else {
        if algorithm.is_some() || key.is_some() || key_md5.is_some() {
            return Err(Refusal::Invalid(
                "SSE-C needs the algorithm, the key and its MD5 headers together".into(),
            )
            .into());
        }
        return Ok(None);
    };
    if algorithm != ServerSideEncryption::AES256 {
        return Err(Refusal::EncryptionAlgorithm("SSE-C supports AES256 only").into());
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut bytes = b64
        .decode(key)
        .map_err(|_| Refusal::Invalid("the SSE-C key is not base64".into()))?;
    let array: Result<[u8; 32], _> = bytes.as_slice().try_into();
    let digest = md5::Md5::digest(&bytes);
    zeroize::Zeroize::zeroize(&mut bytes);
    let array = array.map_err(|_| Refusal::Invalid("the SSE-C key is not 256 bits".into()))?;
    let md5_base64 = b64.encode(digest);
    if *key_md5 != md5_base64 {
        return Err(Refusal::Invalid("the SSE-C key's MD5 does not match the key".into()).into());
    }
    Ok(Some(CustomerKey {
        key: KeyEncryptionKey::from_bytes(array),
        md5_base64,
    }))
}

/// The encryption of a new object in `bucket`: what the request's headers ask, else the
/// bucket's default, else none.
pub fn for_write(
    bucket: &buckets::Bucket,
    asked: &Option<ServerSideEncryption>,
    kms_key: &Option<String>,
    customer: Option<&CustomerKey>,
) -> S3Result<Option<Sse>> {
    let asks_kms = asked
        .as_ref()
        .is_some_and(|a| a.as_str() == ServerSideEncryption::AWS_KMS);
    if kms_key.is_some() && !asks_kms {
        return Err(Refusal::Invalid(
            "a KMS key id needs x-amz-server-side-encryption: aws:kms".into(),
        )
        .into());
    }
    if let Some(customer) = customer {
        if asked.is_some() {
            return Err(Refusal::Invalid(
                "ask for SSE-C or for x-amz-server-side-encryption, not both".into(),
            )
            .into());
        }
        let salt: [u8; 16] = rand::random();
        return Ok(Some(Sse::Customer {
            salt,
            check: sse::customer_check(&salt, &customer.key),
        }));
    }
    match asked {
        Some(sse) => Ok(Some(requested(sse, kms_key)?)),
        None => Ok(bucket.encryption.clone()),
    }
}

/// The encryption an `x-amz-server-side-encryption` value (and KMS key id) asks for.
pub fn requested(sse: &ServerSideEncryption, kms_key: &Option<String>) -> S3Result<Sse> {
    match sse.as_str() {
        ServerSideEncryption::AES256 => Ok(Sse::S3),
        ServerSideEncryption::AWS_KMS => Ok(Sse::Kms {
            key: kms_key.clone().unwrap_or_else(|| sse::MANAGED_KEY.into()),
        }),
        other => Err(Refusal::Invalid(format!(
            "server-side encryption {other} is not served; use AES256 or aws:kms"
        ))
        .into()),
    }
}

/// The SSE-C key given for an object must be its own, and one must be given if it has one.
pub fn check_customer(sse: &Option<Sse>, given: Option<&CustomerKey>) -> S3Result<()> {
    match (sse, given) {
        (Some(Sse::Customer { salt, check }), Some(given)) => {
            if sse::customer_check(salt, &given.key) == *check {
                Ok(())
            } else {
                Err(Refusal::WrongCustomerKey.into())
            }
        }
        (Some(Sse::Customer { .. }), None) => Err(Refusal::BadRequest(
            "the object is stored with SSE-C: give its key to read it",
        )
        .into()),
        (_, Some(_)) => Err(Refusal::BadRequest(
            "the object is not stored with SSE-C; send no customer key",
        )
        .into()),
        (_, None) => Ok(()),
    }
}

/// Refuses a KMS key that does not exist, before anything is written under it.
pub async fn check_kms_key(kms: &dyn Kms, key: &str) -> S3Result<()> {
    let keys = kms.keys().await?;
    if keys.iter().any(|k| k == key) {
        Ok(())
    } else {
        Err(Refusal::NoKmsKey(key.into()).into())
    }
}

/// A fresh data key for a new segment of an object encrypted as `sse`.
pub async fn new_sealing(
    kms: &dyn Kms,
    sse: &Sse,
    customer: Option<&CustomerKey>,
) -> S3Result<Sealing> {
    let kms_key = match sse {
        Sse::S3 => sse::MANAGED_KEY,
        Sse::Kms { key } => key.as_str(),
        Sse::Customer { .. } => {
            let customer = customer.ok_or(Refusal::BadRequest(
                "the upload is SSE-C: give its key with each part",
            ))?;
            let data_key = SecretKey::<32>::generate();
            let wrapped = keys::wrap(&customer.key, &data_key, CUSTOMER_CONTEXT);
            return Ok(Sealing {
                data_key,
                stored: SealedKey::Customer {
                    wrapped: wrapped.as_bytes().to_vec(),
                },
            });
        }
    };
    let generated = kms.generate(kms_key).await?;
    Ok(Sealing {
        data_key: generated.plaintext,
        stored: SealedKey::Kms {
            key: kms_key.into(),
            version: generated.version,
            wrapped: generated.wrapped,
        },
    })
}

/// How many data keys a read has the KMS unwrap at once.
const UNWRAPS_IN_FLIGHT: usize = 16;

/// The data keys of `entry`'s segments, in order: unwrapped for those that bytes `range`
/// of its content lie in (from the cache, the KMS, several at once, or the customer's
/// key), none for the others and for plain segments. A part of an object of thousands
/// waits for its own key alone; an empty range asks for every key, so that an empty
/// object whose KMS key is removed is refused as the others are.
pub async fn segment_keys(
    kms: &dyn Kms,
    cache: &KeyCache,
    entry: &ObjectEntry,
    customer: Option<&CustomerKey>,
    range: std::ops::Range<u64>,
) -> S3Result<Vec<Option<Arc<SecretKey<32>>>>> {
    let mut unwraps = Vec::with_capacity(entry.segments.len());
    let mut start = 0;
    for segment in &entry.segments {
        let (from, to) = (start, start + segment.size);
        start = to;
        let read = range.is_empty() || (from < range.end && range.start < to);
        unwraps.push(async move {
            match read {
                true => segment_key(kms, cache, segment, customer).await,
                false => Ok(None),
            }
        });
    }
    futures::stream::iter(unwraps)
        .buffered(UNWRAPS_IN_FLIGHT)
        .try_collect()
        .await
}

/// The data key of `segment`, unwrapped; none for a plain one.
async fn segment_key(
    kms: &dyn Kms,
    cache: &KeyCache,
    segment: &Segment,
    customer: Option<&CustomerKey>,
) -> S3Result<Option<Arc<SecretKey<32>>>> {
    Ok(match &segment.sealed {
        None => None,
        Some(SealedKey::Kms {
            key,
            version,
            wrapped,
        }) => match cache.get(wrapped) {
            Some(found) => Some(found),
            None => {
                let opened = Arc::new(kms.decrypt(key, *version, wrapped).await?);
                cache.put(wrapped, key, opened.clone());
                Some(opened)
            }
        },
        Some(SealedKey::Customer { wrapped }) => {
            let customer = customer.ok_or(Refusal::BadRequest(
                "the object is stored with SSE-C: give its key",
            ))?;
            let wrapped = WrappedKey::from_bytes(wrapped.clone());
            let opened = keys::unwrap(&customer.key, &wrapped, CUSTOMER_CONTEXT)
                .map_err(|_| Refusal::WrongCustomerKey)?;
            Some(Arc::new(opened))
        }
    })
}

/// What a customer key's ETags are keyed with, apart from its other uses.
const CUSTOMER_ETAG_CONTEXT: &[u8] = b"coffer-sse-c-etag\0";

/// The ETag bytes of new content: its MD5, except under SSE-C and SSE-KMS, whose ETags
/// must not reveal a digest of the content (S3's rule). Under SSE-C it is an HMAC of the MD5
/// under the customer's key, so the same content sent again with the same key (a part
/// re-sent) keeps its ETag, and no one without the key learns anything from it; under
/// SSE-KMS, the MD5 of the instance.
pub fn etag_bytes(
    sse: &Option<Sse>,
    md5: [u8; 16],
    instance: &str,
    customer: Option<&CustomerKey>,
) -> [u8; 16] {
    match (sse, customer) {
        (Some(Sse::Customer { .. }), Some(customer)) => {
            let key =
                aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, customer.key.expose());
            let mut ctx = aws_lc_rs::hmac::Context::with_key(&key);
            ctx.update(CUSTOMER_ETAG_CONTEXT);
            ctx.update(&md5);
            let mut out = [0u8; 16];
            out.copy_from_slice(&ctx.sign().as_ref()[..16]);
            out
        }
        (Some(Sse::Customer { .. } | Sse::Kms { .. }), _) => {
            md5::Md5::digest(instance.as_bytes()).into()
        }
        _ => md5,
    }
}

/// The response headers that describe an object's encryption: the algorithm, the KMS key,
/// and for SSE-C the algorithm and the key's MD5.
pub struct Described {
    pub sse: Option<ServerSideEncryption>,
    pub kms_key: Option<String>,
    pub customer_algorithm: Option<String>,
    pub customer_key_md5: Option<String>,
}

pub fn describe(sse: &Option<Sse>, customer: Option<&CustomerKey>) -> Described {
    let mut out = Described {
        sse: None,
        kms_key: None,
        customer_algorithm: None,
        customer_key_md5: None,
    };
    match sse {
        Some(Sse::S3) => {
            out.sse = Some(ServerSideEncryption::from_static(
                ServerSideEncryption::AES256,
            ))
        }
        Some(Sse::Kms { key }) => {
            out.sse = Some(ServerSideEncryption::from_static(
                ServerSideEncryption::AWS_KMS,
            ));
            out.kms_key = Some(key.clone());
        }
        Some(Sse::Customer { .. }) => {
            out.customer_algorithm = Some(ServerSideEncryption::AES256.into());
            out.customer_key_md5 = customer.map(|c| c.md5_base64.clone());
        }
        None => {}
    }
    out
}
