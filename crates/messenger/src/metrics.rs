//! The messenger's figures: links open and frames and bytes moved, by link mode; handshakes
//! that failed and links cut by a bad frame, by why.

use std::sync::{Arc, LazyLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::entity::Mode;
use crate::error::{ConnectError, ReadError};
use crate::frame::FrameError;

type Labels = [(&'static str, &'static str); 1];

#[derive(Default)]
struct Metrics {
    links: Family<Labels, Gauge>,
    sent_frames: Family<Labels, Counter>,
    sent_bytes: Family<Labels, Counter>,
    received_frames: Family<Labels, Counter>,
    received_bytes: Family<Labels, Counter>,
    handshake_failures: Family<Labels, Counter>,
    link_errors: Family<Labels, Counter>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::default);

fn mode_labels(mode: Mode) -> Labels {
    [(
        "mode",
        match mode {
            Mode::Secure => "secure",
            Mode::Crc => "crc",
        },
    )]
}

/// The counters of one link, resolved when it is set up; the link counts as open until
/// both its reader and its writer are gone.
pub(crate) struct Meter {
    frames: Counter,
    bytes: Counter,
    _open: Arc<Open>,
}

impl Meter {
    /// One frame of `bytes` (header, metadata and data) moved.
    pub(crate) fn frame(&self, bytes: usize) {
        self.frames.inc();
        self.bytes.inc_by(bytes as u64);
    }
}

struct Open(Gauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The reading and the writing meter of a new link in `mode`.
pub(crate) fn link(mode: Mode) -> (Meter, Meter) {
    let labels = mode_labels(mode);
    let open = METRICS.links.get_or_create_owned(&labels);
    open.inc();
    let open = Arc::new(Open(open));
    let reading = Meter {
        frames: METRICS.received_frames.get_or_create_owned(&labels),
        bytes: METRICS.received_bytes.get_or_create_owned(&labels),
        _open: open.clone(),
    };
    let writing = Meter {
        frames: METRICS.sent_frames.get_or_create_owned(&labels),
        bytes: METRICS.sent_bytes.get_or_create_owned(&labels),
        _open: open,
    };
    (reading, writing)
}

/// A handshake failed (either side).
pub(crate) fn handshake_failed(e: &ConnectError) {
    let reason = match e {
        ConnectError::Io(_) => "io",
        ConnectError::Tls(_) => "tls",
        ConnectError::Timeout(_) => "timeout",
        ConnectError::Refused(_) => "refused",
        ConnectError::Protocol(_) => "protocol",
    };
    METRICS
        .handshake_failures
        .get_or_create(&[("reason", reason)])
        .inc();
}

/// A link stopped reading for `e` (a peer that merely went away is not counted).
pub(crate) fn link_failed(e: &ReadError) {
    let kind = match e {
        ReadError::Io(_) => return,
        ReadError::Timeout(_) => "timeout",
        ReadError::Frame(FrameError::Unauthentic) => "unauthentic",
        ReadError::Frame(FrameError::HeaderCrc | FrameError::BodyCrc { .. }) => "checksum",
        ReadError::Frame(
            FrameError::MetaTooLarge(_) | FrameError::DataTooLarge(_) | FrameError::Lengths,
        ) => "too_large",
        ReadError::Frame(FrameError::Magic(_) | FrameError::Kind(_) | FrameError::Reserved) => {
            "malformed"
        }
    };
    METRICS.link_errors.get_or_create(&[("kind", kind)]).inc();
}

/// Registers the messenger's metrics (`coffer_messenger_*`).
pub fn register(registry: &mut Registry) {
    let registry = registry.sub_registry_with_prefix("messenger");
    registry.register(
        "links",
        "Links open, by mode (secure: every frame encrypted; crc: checksummed)",
        METRICS.links.clone(),
    );
    registry.register(
        "sent_frames",
        "Frames sent, by link mode",
        METRICS.sent_frames.clone(),
    );
    registry.register_with_unit(
        "sent",
        "Bytes of frames sent (header, metadata and data), by link mode",
        Unit::Bytes,
        METRICS.sent_bytes.clone(),
    );
    registry.register(
        "received_frames",
        "Frames received, by link mode",
        METRICS.received_frames.clone(),
    );
    registry.register_with_unit(
        "received",
        "Bytes of frames received (header, metadata and data), by link mode",
        Unit::Bytes,
        METRICS.received_bytes.clone(),
    );
    registry.register(
        "handshake_failures",
        "Links that failed to come up, by reason (refused: not authorised or no common mode)",
        METRICS.handshake_failures.clone(),
    );
    registry.register(
        "link_errors",
        "Links cut because a frame failed a check or came too slowly, by kind",
        METRICS.link_errors.clone(),
    );
}
