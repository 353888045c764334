//! Progress of long work (scrub, KMS rewrap, `gw gc`, the benches) on standard error: a bar
//! with what is done, what remains and about how long it takes, when standard error is a
//! terminal (indicatif); else a plain line at each tenth of the way, for logs. Results go
//! to standard output as they come, above the bar.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How often the bar redraws on its own (its elapsed time moves while a step runs).
const TICK: Duration = Duration::from_millis(500);
/// Plain lines a piece of work prints at most, besides its results: one per tenth.
const PLAIN_LINES: u64 = 10;

pub struct Progress {
    bar: indicatif::ProgressBar,
    what: String,
    unit: &'static str,
    /// Plain lines, when standard error is not a terminal.
    plain: bool,
    /// Tenths of the way already told in plain lines.
    told: AtomicU64,
}

impl Progress {
    /// `total` steps of `what`, counted in `unit` (`PGs`, `buckets`, `cells`).
    pub fn new(what: &str, total: u64, unit: &'static str) -> Progress {
        let plain = !std::io::stderr().is_terminal();
        let bar = if plain {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new(total)
        };
        bar.set_length(total);
        let template = format!(
            "[{{elapsed_precise}}] {what} {{bar:30}} {{pos}}/{{len}} {unit}, about {{eta}} left {{msg}}"
        );
        if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
            bar.set_style(style);
        }
        if !plain {
            bar.enable_steady_tick(TICK);
        }
        Progress {
            bar,
            what: what.to_string(),
            unit,
            plain,
            told: AtomicU64::new(0),
        }
    }

    /// What the current step is, beside the bar.
    pub fn set_message(&self, message: &str) {
        self.bar.set_message(message.to_string());
    }

    /// `steps` more done.
    pub fn inc(&self, steps: u64) {
        self.bar.inc(steps);
        self.tell();
    }

    /// `done` of `total` steps done, for work that learns its total as it goes.
    pub fn reached(&self, done: u64, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(done);
        self.tell();
    }

    fn tell(&self) {
        let total = self.bar.length().unwrap_or(0).max(1);
        let done = self.bar.position().min(total);
        let tenths = done * PLAIN_LINES / total;
        if self.plain && tenths > self.told.fetch_max(tenths, Ordering::Relaxed) && done < total {
            eprintln!(
                "{}: {done} of {total} {} done ({} %)",
                self.what,
                self.unit,
                done * 100 / total
            );
        }
    }

    /// Prints a line of results on standard output, above the bar.
    pub fn println(&self, line: &str) {
        self.bar.suspend(|| println!("{line}"));
    }

    /// Prints a line on standard error, above the bar.
    pub fn eprintln(&self, line: &str) {
        self.bar.suspend(|| eprintln!("{line}"));
    }

    /// Takes the bar away; what remains on the terminal is the results.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
