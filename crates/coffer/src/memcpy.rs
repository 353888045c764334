//! glibc's memcpy without `rep movsb` on AMD CPUs, chosen once per process at its start.
//!
//! From about 2 KiB up to its non-temporal threshold, glibc 2.36's memcpy copies with `rep movsb`.
//! On the AMD EPYC these machines run on, that instruction is ten times slower (0.31 against
//! 0.03 s/GiB) whenever the destination lies 1 to 15 bytes past the source modulo 64, and
//! rustls copies every TLS record's plaintext to 5 bytes past a fresh buffer's start: the
//! gateway's HTTPS GETs spent a quarter of their CPU in that one copy (docs/benchmarks.md,
//! "rep movsb"). glibc's own vector loop copies at 0.02-0.04 s/GiB at every alignment, so on
//! AMD every Coffer process runs with glibc's `rep movsb` threshold above any copy's size:
//! [`start`] executes the process again with that tunable in `GLIBC_TUNABLES` (glibc reads
//! it only as a program starts), then gives the environment back as it was, so the programs
//! Coffer runs (fio, sysbench) copy as they would anywhere else. A threshold the operator
//! set is kept; elsewhere than on AMD nothing changes.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicBool, Ordering};

/// glibc's tunables, read by the dynamic loader as a program starts.
const TUNABLES: &str = "GLIBC_TUNABLES";
/// The size from which glibc copies with `rep movsb` (up to its non-temporal threshold).
const THRESHOLD: &str = "glibc.cpu.x86_rep_movsb_threshold";
/// 1 TiB: above any copy's size, so that memcpy never takes `rep movsb`.
const NEVER: u64 = 1 << 40;
/// Set on the process executed again: `GLIBC_TUNABLES` as it was before (empty: unset).
const ORIGINAL: &str = "COFFER_GLIBC_TUNABLES_ORIGINAL";

/// What a process does about its memcpy as it starts.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// Runs again with `GLIBC_TUNABLES` set to this, the original kept in [`ORIGINAL`].
    Exec { tunables: String },
    /// Already executed again: puts `GLIBC_TUNABLES` back as it was (None: unset).
    Restore { tunables: Option<OsString> },
    /// Not AMD, or the operator chose the threshold (or set tunables that are not UTF-8,
    /// which this leaves alone).
    Keep,
}

fn plan(amd: bool, tunables: Option<&OsStr>, original: Option<&OsStr>) -> Plan {
    if let Some(original) = original {
        return Plan::Restore {
            tunables: Some(original.to_owned()).filter(|o| !o.is_empty()),
        };
    }
    let Some(tunables) = tunables.map_or(Some(""), OsStr::to_str) else {
        return Plan::Keep;
    };
    let chosen = tunables.split(':').any(|item| {
        item.split_once('=')
            .is_some_and(|(name, _)| name == THRESHOLD)
    });
    if !amd || chosen {
        return Plan::Keep;
    }
    let ours = format!("{THRESHOLD}={NEVER}");
    Plan::Exec {
        tunables: match tunables {
            "" => ours,
            theirs => format!("{theirs}:{ours}"),
        },
    }
}

/// Set once this process was executed again with the threshold.
static TUNED: AtomicBool = AtomicBool::new(false);

/// Whether this process copies without `rep movsb` (bench headers say so).
pub fn tuned() -> bool {
    TUNED.load(Ordering::Relaxed)
}

/// Called first in `main`, before any thread is started: on AMD, executes this program
/// again with glibc's threshold set; in the process executed again, puts the environment
/// back. If the program cannot be executed again, it goes on with glibc's defaults.
pub fn start() {
    let tunables = std::env::var_os(TUNABLES);
    let original = std::env::var_os(ORIGINAL);
    match plan(is_amd(), tunables.as_deref(), original.as_deref()) {
        Plan::Exec { tunables: ours } => {
            let mut args = std::env::args_os();
            let arg0 = args.next().unwrap_or_else(|| OsString::from("coffer"));
            let failed = std::process::Command::new("/proc/self/exe")
                .arg0(arg0)
                .args(args)
                .env(TUNABLES, ours)
                .env(ORIGINAL, tunables.unwrap_or_default())
                .exec();
            eprintln!("coffer: running without glibc's rep movsb tunable ({failed})");
        }
        Plan::Restore { tunables } => {
            TUNED.store(true, Ordering::Relaxed);
            // No thread runs yet: the environment is this thread's alone.
            match tunables {
                Some(value) => std::env::set_var(TUNABLES, value),
                None => std::env::remove_var(TUNABLES),
            }
            std::env::remove_var(ORIGINAL);
        }
        Plan::Keep => {}
    }
}

#[cfg(target_arch = "x86_64")]
fn is_amd() -> bool {
    let leaf = std::arch::x86_64::__cpuid(0);
    let vendor: Vec<u8> = [leaf.ebx, leaf.edx, leaf.ecx]
        .iter()
        .flat_map(|r| r.to_le_bytes())
        .collect();
    vendor == b"AuthenticAMD"
}

#[cfg(not(target_arch = "x86_64"))]
fn is_amd() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    fn os(value: &str) -> Option<&OsStr> {
        Some(OsStr::new(value))
    }

    #[test]
    fn amd_runs_again_with_the_threshold_added_to_what_was_set() {
        let ours = format!("{THRESHOLD}={NEVER}");
        for unset in [None, os("")] {
            assert_eq!(
                plan(true, unset, None),
                Plan::Exec {
                    tunables: ours.clone()
                }
            );
        }
        assert_eq!(
            plan(true, os("glibc.malloc.check=3"), None),
            Plan::Exec {
                tunables: format!("glibc.malloc.check=3:{ours}")
            }
        );
    }

    #[test]
    fn nothing_changes_elsewhere_or_where_the_operator_chose() {
        assert_eq!(plan(false, None, None), Plan::Keep);
        assert_eq!(
            plan(true, os(&format!("a=1:{THRESHOLD}=8192")), None),
            Plan::Keep
        );
        assert_eq!(
            plan(true, Some(OsStr::from_bytes(b"a=\xff")), None),
            Plan::Keep,
            "tunables that are not UTF-8 are not rewritten"
        );
        assert_eq!(
            plan(true, os(&format!("{THRESHOLD}_x=1")), None),
            Plan::Exec {
                tunables: format!("{THRESHOLD}_x=1:{THRESHOLD}={NEVER}")
            }
        );
    }

    #[test]
    fn the_process_run_again_gives_the_environment_back() {
        let ours = format!("{THRESHOLD}={NEVER}");
        assert_eq!(
            plan(true, os(&ours), os("")),
            Plan::Restore { tunables: None }
        );
        assert_eq!(
            plan(true, os(&format!("a=1:{ours}")), os("a=1")),
            Plan::Restore {
                tunables: Some("a=1".into())
            }
        );
    }
}
