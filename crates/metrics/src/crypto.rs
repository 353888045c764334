//! Bytes sealed and opened with AES-256-GCM (or AES-XTS in an `xts` store), by what sealed
//! them: shared by the store, the clients that seal at the edge, the gateway's SSE and the
//! messenger's secure links, so one process reports one family whichever crates it runs.

use std::fmt::Write;
use std::sync::LazyLock;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};

/// Who sealed or opened the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An OSD's store, in `gcm` mode (docs/design/at-rest-crypto.md).
    StoreGcm,
    /// An OSD's store, in an `xts` mode.
    StoreXts,
    /// A client of an edge-sealed pool: the NBD server, the gateway, a mount, the CLI.
    Edge,
    /// The gateway's server-side encryption (SSE-S3, SSE-KMS, SSE-C).
    Sse,
    /// A secure link's frames (the messenger), beyond what travels already sealed.
    Link,
}

impl Kind {
    /// Every kind, each at the index of its discriminant.
    const ALL: [Kind; 5] = [
        Kind::StoreGcm,
        Kind::StoreXts,
        Kind::Edge,
        Kind::Sse,
        Kind::Link,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::StoreGcm => "store-gcm",
            Kind::StoreXts => "store-xts",
            Kind::Edge => "edge",
            Kind::Sse => "sse",
            Kind::Link => "link",
        }
    }
}

impl EncodeLabelValue for Kind {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        encoder.write_str(self.name())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Labels {
    kind: Kind,
}

struct Counters {
    sealed: Family<Labels, Counter>,
    opened: Family<Labels, Counter>,
    /// `sealed` and `opened` of each kind, resolved once, in `Kind::ALL`'s order.
    each: Vec<(Counter, Counter)>,
}

static COUNTERS: LazyLock<Counters> = LazyLock::new(|| {
    let sealed = Family::<Labels, Counter>::default();
    let opened = Family::<Labels, Counter>::default();
    let each = Kind::ALL
        .iter()
        .map(|&kind| {
            let labels = Labels { kind };
            (
                sealed.get_or_create_owned(&labels),
                opened.get_or_create_owned(&labels),
            )
        })
        .collect();
    Counters {
        sealed,
        opened,
        each,
    }
});

fn pair(kind: Kind) -> &'static (Counter, Counter) {
    &COUNTERS.each[kind as usize]
}

/// Counts `bytes` sealed (encrypted and tagged) by `kind`.
pub fn sealed(kind: Kind, bytes: usize) {
    pair(kind).0.inc_by(bytes as u64);
}

/// Counts `bytes` opened (checked and decrypted) by `kind`.
pub fn opened(kind: Kind, bytes: usize) {
    pair(kind).1.inc_by(bytes as u64);
}

pub(crate) fn register(registry: &mut Registry) {
    registry.register_with_unit(
        "crypto_sealed",
        "Bytes encrypted and authenticated, by what sealed them",
        Unit::Bytes,
        COUNTERS.sealed.clone(),
    );
    registry.register_with_unit(
        "crypto_opened",
        "Bytes checked and decrypted, by what opened them",
        Unit::Bytes,
        COUNTERS.opened.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_counts_under_its_own_label() {
        for (at, kind) in Kind::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, at);
        }
        let before = COUNTERS
            .sealed
            .get_or_create_owned(&Labels { kind: Kind::Sse })
            .get();
        sealed(Kind::Sse, 4096);
        let after = COUNTERS
            .sealed
            .get_or_create_owned(&Labels { kind: Kind::Sse })
            .get();
        assert_eq!(after - before, 4096);
    }
}
