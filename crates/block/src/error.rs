//! What can go wrong with an image, shaped for the operator who reads it and for the one
//! place (`nbd::errno`) that turns it into an NBD error number.

use crate::lock::LockOwner;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("image {image} does not exist")]
    NoSuchImage { image: String },
    #[error("image {image} already exists")]
    Exists { image: String },
    #[error("invalid: {0}")]
    Invalid(String),
    /// Another writer holds the image's exclusive lock.
    #[error(
        "image {image} is locked by {owner}; a second writer is refused. If that writer is \
         gone, `coffer image lock break {image}` fences it off and frees the image"
    )]
    Locked {
        image: String,
        owner: Box<LockOwner>,
    },
    /// This writer's lock was broken (and the writer fenced off): it may write no more.
    #[error("image {image}: this writer's lock was broken; it may no longer write")]
    LockLost { image: String },
    #[error("image {image} is open read-only")]
    ReadOnly { image: String },
    #[error("bytes {offset}..{end} are past the end of image {image} ({size} bytes)", end = offset.saturating_add(*len))]
    OutOfRange {
        image: String,
        offset: u64,
        len: u64,
        size: u64,
    },
    /// The image's header does not decode, or asks for features this build lacks.
    #[error("image {image}: {why}")]
    Header { image: String, why: String },
    #[error("image {image}: {source}")]
    Cluster {
        image: String,
        #[source]
        source: client::Error,
    },
}

impl Error {
    pub(crate) fn cluster(image: &str) -> impl Fn(client::Error) -> Error + '_ {
        move |source| Error::Cluster {
            image: image.to_string(),
            source,
        }
    }
}
