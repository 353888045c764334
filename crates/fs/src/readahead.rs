//! Readahead per open file: what a read should fetch, and what to fetch ahead of it.
//!
//! The public study in MISSION.md shows one readahead size for every file trading one
//! workload for the other: 8 MiB made sequential reads fast and random 4 KiB reads 25 times
//! slower than none. `Auto` (the default) follows each open file's own pattern, as the Linux
//! page cache does: a read that continues the previous one (or starts the file) makes the
//! stream sequential and grows its window, doubling from [`WINDOW_INITIAL_BYTES`] up to
//! [`WINDOW_MAX_BYTES`]; the next window is fetched once the reader is within half a window
//! of the end of what was fetched, so fetching overlaps reading. Any other read resets the
//! stream and fetches exactly what it asks for. `Fixed` widens every read to its size (the
//! fixed knob of other systems, kept for the comparison); `Off` fetches exactly what is read.
//! Pure: no IO, no clock. docs/design/fs.md has the argument.

use std::ops::Range;

/// The first window of a stream found sequential.
pub const WINDOW_INITIAL_BYTES: u64 = 256 << 10;
/// The largest window `Auto` grows to: four data objects ahead.
pub const WINDOW_MAX_BYTES: u64 = 16 << 20;
/// How far a read may land from where the previous one ended, or beyond what was fetched
/// ahead, and still continue the stream: the kernel sends a sequential reader's requests
/// concurrently, so they may arrive slightly out of order.
pub const REORDER_BYTES_MAX: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readahead {
    /// Follow each file's access pattern (the default).
    Auto,
    /// Fetch exactly what is read.
    Off,
    /// Fetch at least this many bytes from every read's offset.
    Fixed(u64),
}

/// What one read fetches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// What to fetch to answer the read (the read itself, or more under `Fixed`).
    pub fetch: Range<u64>,
    /// What to fetch ahead, in the background.
    pub ahead: Option<Range<u64>>,
}

/// One open file's readahead state.
#[derive(Clone, Debug)]
pub struct Stream {
    policy: Readahead,
    /// Where the previous read ended.
    next: u64,
    /// The current window; 0 while the stream is not sequential.
    window: u64,
    /// The end of what was fetched ahead.
    ahead_end: u64,
}

impl Stream {
    pub fn new(policy: Readahead) -> Stream {
        Stream {
            policy,
            next: 0,
            window: 0,
            ahead_end: 0,
        }
    }

    pub fn window(&self) -> u64 {
        self.window
    }

    /// A read of `len` bytes at `offset` in a file of `size` bytes.
    pub fn on_read(&mut self, offset: u64, len: u64, size: u64) -> Plan {
        let end = offset.saturating_add(len).min(size).max(offset);
        let plan = match self.policy {
            Readahead::Off => Plan {
                fetch: offset..end,
                ahead: None,
            },
            Readahead::Fixed(bytes) => Plan {
                fetch: offset..offset.saturating_add(bytes).min(size).max(end),
                ahead: None,
            },
            Readahead::Auto => {
                let ahead = self.auto(offset, end, size);
                Plan {
                    fetch: offset..end,
                    ahead,
                }
            }
        };
        self.next = self.next.max(end);
        if self.window == 0 {
            self.next = end;
        }
        plan
    }

    fn auto(&mut self, offset: u64, end: u64, size: u64) -> Option<Range<u64>> {
        let continues = if self.window == 0 {
            offset == self.next
        } else {
            let low = self.next.saturating_sub(REORDER_BYTES_MAX);
            let high = self.ahead_end.max(self.next) + REORDER_BYTES_MAX;
            (low..=high).contains(&offset)
        };
        if !continues {
            self.window = 0;
            self.ahead_end = 0;
            return None;
        }
        self.window = match self.window {
            0 => WINDOW_INITIAL_BYTES,
            window => (window * 2).min(WINDOW_MAX_BYTES),
        };
        if self.ahead_end >= end + self.window / 2 {
            return None;
        }
        let start = self.ahead_end.max(end);
        let stop = end.saturating_add(self.window).min(size);
        if start >= stop {
            return None;
        }
        self.ahead_end = stop;
        debug_assert!(self.window <= WINDOW_MAX_BYTES);
        Some(start..stop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// Reading a file from start to end in 1 MiB reads: fetching starts with the first read,
    /// the window grows to its limit, what is fetched ahead is never read twice and always
    /// stays ahead of the reader.
    #[test]
    fn sequential_reads_fetch_ahead_in_growing_windows() {
        let mut stream = Stream::new(Readahead::Auto);
        let mut fetched_to = 0;
        let mut windows = Vec::new();
        for i in 0..1024u64 {
            let offset = i << 20;
            let plan = stream.on_read(offset, 1 << 20, GIB);
            assert_eq!(plan.fetch, offset..offset + (1 << 20));
            if let Some(ahead) = plan.ahead {
                assert_eq!(
                    ahead.start,
                    fetched_to.max(offset + (1 << 20)),
                    "no gap, no overlap"
                );
                fetched_to = ahead.end;
                windows.push(ahead.end - ahead.start);
            }
            if offset + (1 << 20) < GIB {
                assert!(fetched_to > offset + (1 << 20), "read {i} outran readahead");
            }
        }
        assert_eq!(
            fetched_to, GIB,
            "fetched to the end of the file, not past it"
        );
        assert_eq!(stream.window(), WINDOW_MAX_BYTES);
        assert!(windows.iter().all(|w| *w <= WINDOW_MAX_BYTES));
    }

    /// Random 4 KiB reads over a large file never fetch a byte they did not ask for.
    #[test]
    fn random_reads_fetch_nothing_ahead() {
        let mut stream = Stream::new(Readahead::Auto);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let offset = (state % (GIB / 4096)) * 4096;
            let plan = stream.on_read(offset, 4096, GIB);
            assert_eq!(plan.fetch, offset..offset + 4096);
            assert_eq!(plan.ahead, None, "random read at {offset} fetched ahead");
        }
    }

    /// The kernel's concurrent requests of one sequential reader arrive out of order; they
    /// must not reset the stream.
    #[test]
    fn reads_slightly_out_of_order_stay_sequential() {
        let mut stream = Stream::new(Readahead::Auto);
        let chunk = 128 << 10;
        for offset in [
            0,
            chunk,
            3 * chunk,
            2 * chunk,
            4 * chunk,
            6 * chunk,
            5 * chunk,
        ] {
            stream.on_read(offset, chunk, GIB);
        }
        assert!(stream.window() > WINDOW_INITIAL_BYTES);
        stream.on_read(GIB / 2, chunk, GIB);
        assert_eq!(stream.window(), 0, "a jump far away ends the stream");
    }

    #[test]
    fn off_and_fixed_fetch_what_they_say() {
        let mut off = Stream::new(Readahead::Off);
        assert_eq!(
            off.on_read(0, 4096, GIB),
            Plan {
                fetch: 0..4096,
                ahead: None
            }
        );
        assert_eq!(off.on_read(4096, 4096, GIB).ahead, None);
        let mut fixed = Stream::new(Readahead::Fixed(8 << 20));
        assert_eq!(
            fixed.on_read(1 << 20, 4096, GIB).fetch,
            (1 << 20)..(9 << 20)
        );
        assert_eq!(
            fixed.on_read(GIB - 4096, 4096, GIB).fetch,
            (GIB - 4096)..GIB
        );
        assert_eq!(
            fixed.on_read(0, 16 << 20, GIB).fetch,
            0..(16 << 20),
            "a larger read wins"
        );
    }
}
