//! The NBD server's figures: requests by command with their bytes, latency (from the
//! request's arrival to its reply being queued) and failures, and clients connected.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::nbd::wire::{CMD_READ, CMD_WRITE};

type Labels = [(&'static str, &'static str); 1];

/// Every command's name, as the protocol document spells them (lower case), by its number;
/// `other` last, for numbers the protocol does not define.
const COMMANDS: [&str; 9] = [
    "read",
    "write",
    "disc",
    "flush",
    "trim",
    "cache",
    "write_zeroes",
    "block_status",
    "other",
];

/// One command's figures, resolved once.
struct Command {
    requests: Counter,
    bytes: Counter,
    duration: Histogram,
    errors: Counter,
}

struct Metrics {
    requests: Family<Labels, Counter>,
    bytes: Family<Labels, Counter>,
    duration: Family<Labels, Histogram>,
    errors: Family<Labels, Counter>,
    clients: Gauge,
    /// By command number, as in [`COMMANDS`].
    commands: Vec<Command>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let requests = Family::default();
    let bytes = Family::default();
    let duration = Family::<Labels, Histogram>::new_with_constructor(metrics::latency_histogram);
    let errors = Family::default();
    let commands = COMMANDS
        .iter()
        .map(|name| {
            let labels = [("kind", *name)];
            Command {
                requests: requests.get_or_create_owned(&labels),
                bytes: bytes.get_or_create_owned(&labels),
                duration: duration.get_or_create_owned(&labels),
                errors: errors.get_or_create_owned(&labels),
            }
        })
        .collect();
    Metrics {
        requests,
        bytes,
        duration,
        errors,
        clients: Gauge::default(),
        commands,
    }
});

fn command(kind: u16) -> &'static Command {
    let other = COMMANDS.len() - 1;
    &METRICS.commands[usize::from(kind).min(other)]
}

/// A request of command `kind` for `len` bytes was answered after `took`.
pub(crate) fn request(kind: u16, len: u32, took: Duration) {
    let command = command(kind);
    command.requests.inc();
    if matches!(kind, CMD_READ | CMD_WRITE) {
        command.bytes.inc_by(u64::from(len));
    }
    command.duration.observe(took.as_secs_f64());
}

/// A request of command `kind` was answered with an error.
pub(crate) fn failed(kind: u16) {
    command(kind).errors.inc();
}

/// A client is connected until this is dropped.
pub(crate) struct Client(());

impl Client {
    pub(crate) fn connected() -> Client {
        METRICS.clients.inc();
        Client(())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        METRICS.clients.dec();
    }
}

/// Registers the NBD server's metrics (`coffer_nbd_*`).
pub fn register(registry: &mut Registry) {
    let nbd = registry.sub_registry_with_prefix("nbd");
    nbd.register(
        "requests",
        "NBD requests answered, by command",
        METRICS.requests.clone(),
    );
    nbd.register_with_unit(
        "request",
        "Bytes read and written by NBD requests, by command",
        Unit::Bytes,
        METRICS.bytes.clone(),
    );
    nbd.register_with_unit(
        "request_duration",
        "Time from an NBD request's arrival to its reply, by command",
        Unit::Seconds,
        METRICS.duration.clone(),
    );
    nbd.register(
        "errors",
        "NBD requests answered with an error, by command",
        METRICS.errors.clone(),
    );
    nbd.register(
        "clients",
        "Clients in transmission (negotiated and connected)",
        METRICS.clients.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nbd::wire::{
        CMD_BLOCK_STATUS, CMD_CACHE, CMD_DISC, CMD_FLUSH, CMD_TRIM, CMD_WRITE_ZEROES,
    };

    #[test]
    fn each_command_is_named_at_its_number() {
        let numbered = [
            (CMD_READ, "read"),
            (CMD_WRITE, "write"),
            (CMD_DISC, "disc"),
            (CMD_FLUSH, "flush"),
            (CMD_TRIM, "trim"),
            (CMD_CACHE, "cache"),
            (CMD_WRITE_ZEROES, "write_zeroes"),
            (CMD_BLOCK_STATUS, "block_status"),
        ];
        for (number, name) in numbered {
            assert_eq!(COMMANDS[usize::from(number)], name);
        }
        assert!(std::ptr::eq(command(99), command(1000)));
    }
}
