//! Errors, shaped per operation.

use crate::frame::FrameError;

/// Setting up a link failed; nothing was served on it.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connecting: {0}")]
    Io(std::io::Error),
    #[error("TLS handshake failed: {0}")]
    Tls(std::io::Error),
    #[error("the handshake did not finish within {0:?}")]
    Timeout(std::time::Duration),
    #[error("refused by the peer: {0}")]
    Refused(String),
    #[error("handshake protocol violation: {0}")]
    Protocol(String),
}

/// A request did not get its reply.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The link is gone; the request may or may not have been carried out.
    #[error("link closed: {0}")]
    Closed(String),
    /// The peer received the request but produced no reply (its handler failed).
    #[error("the peer could not serve the request: {0}")]
    Refused(String),
    #[error("a segment of {bytes} bytes exceeds the limit of {limit}")]
    TooLarge { bytes: usize, limit: u32 },
    #[error("encoding or decoding a message: {0}")]
    Codec(#[from] postcard::Error),
}

/// Why a link stopped reading.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Frame(#[from] FrameError),
    #[error("frame not completed within {0:?}")]
    Timeout(std::time::Duration),
}
