//! Object lock (S3's write-once retention): a version's retention, until a date in
//! governance or compliance mode, and its legal hold; a bucket's default retention; and the
//! rules that decide whether a version may go or its retention change. Pure code:
//! `versions::plan` asks these rules about every version a change would remove or amend, so
//! every path that removes a version (DeleteObject, DeleteObjects, a suspended bucket's
//! replaced null version) is held by them.

use serde::{Deserialize, Serialize};

use crate::Error;

const DAY_NS: u64 = 86_400 * 1_000_000_000;
/// The days of a year of default retention (Ceph's gateway counts 365, as S3 does).
const YEAR_DAYS: u64 = 365;
/// The longest default retention S3 allows.
pub const DAYS_MAX: u32 = 36_500;
pub const YEARS_MAX: u32 = 100;

/// How a retention holds its version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// Until its date, only a request that asks to bypass governance retention removes the
    /// version or weakens the retention.
    Governance,
    /// Until its date, no one removes the version, shortens the date or changes the mode.
    Compliance,
}

impl Mode {
    /// The mode S3 names `text` (exactly, in capitals).
    pub fn parse(text: &str) -> Option<Mode> {
        match text {
            "GOVERNANCE" => Some(Mode::Governance),
            "COMPLIANCE" => Some(Mode::Compliance),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Governance => "GOVERNANCE",
            Mode::Compliance => "COMPLIANCE",
        }
    }
}

/// A version's retention: held in `mode` until `until_ns` (nanoseconds since 1970).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    pub mode: Mode,
    pub until_ns: u64,
}

impl Retention {
    fn runs(&self, now_ns: u64) -> bool {
        self.until_ns > now_ns
    }
}

/// The lock of one object version: none by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    pub retention: Option<Retention>,
    /// The legal hold, once one was set (on or off).
    pub legal_hold: Option<bool>,
}

impl Lock {
    pub fn is_none(&self) -> bool {
        *self == Lock::default()
    }

    /// Refuses (`Locked`) removing the version (`what`) at `now_ns` while a legal hold is on
    /// or its retention runs; a governance retention gives way to `bypass`.
    pub fn check_removal(&self, what: &str, now_ns: u64, bypass: bool) -> Result<(), Error> {
        if self.legal_hold == Some(true) {
            return Err(Error::Locked(format!("{what} is under a legal hold")));
        }
        match self.retention {
            Some(retention)
                if retention.runs(now_ns) && !(retention.mode == Mode::Governance && bypass) =>
            {
                Err(Error::Locked(format!(
                    "{what} is retained in {} mode until {}",
                    retention.mode.as_str(),
                    date(retention.until_ns)
                )))
            }
            _ => Ok(()),
        }
    }

    /// Refuses (`Locked`) replacing the retention of the version (`what`) by `new` at
    /// `now_ns` where that weakens a running one: only a later or equal date in the same
    /// mode is allowed, except that `bypass` lifts a governance retention.
    pub fn check_retention(
        &self,
        what: &str,
        new: Option<Retention>,
        now_ns: u64,
        bypass: bool,
    ) -> Result<(), Error> {
        let Some(old) = self.retention.filter(|r| r.runs(now_ns)) else {
            return Ok(());
        };
        if old.mode == Mode::Governance && bypass {
            return Ok(());
        }
        match new {
            Some(new) if new.mode == old.mode && new.until_ns >= old.until_ns => Ok(()),
            _ => Err(Error::Locked(format!(
                "{what} is retained in {} mode until {}: its retention may only be lengthened{}",
                old.mode.as_str(),
                date(old.until_ns),
                match old.mode {
                    Mode::Governance => " without bypassing governance retention",
                    Mode::Compliance => "",
                }
            ))),
        }
    }
}

/// A default retention's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Period {
    Days(u32),
    Years(u32),
}

impl Period {
    fn ns(self) -> u64 {
        let days = match self {
            Period::Days(days) => u64::from(days),
            Period::Years(years) => u64::from(years) * YEAR_DAYS,
        };
        days * DAY_NS
    }
}

/// The retention a bucket gives new objects that ask for none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultRetention {
    pub mode: Mode,
    pub period: Period,
}

/// A bucket's object lock, in its index object's lock attribute: present once object lock is
/// enabled, which is for good (and keeps the bucket's versioning enabled).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketLock {
    pub default: Option<DefaultRetention>,
}

impl crate::layout::Record for BucketLock {}

impl BucketLock {
    /// The lock of an object written at `now_ns` that asked for `asked`: its own retention,
    /// else the bucket's default one.
    pub fn for_new(&self, asked: Lock, now_ns: u64) -> Lock {
        Lock {
            retention: asked.retention.or_else(|| {
                self.default.map(|d| Retention {
                    mode: d.mode,
                    until_ns: now_ns.saturating_add(d.period.ns()),
                })
            }),
            legal_hold: asked.legal_hold,
        }
    }
}

/// `ns` as an RFC 3339 date, for messages.
fn date(ns: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns))
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{ns} ns after 1970"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000 * DAY_NS;

    fn retained(mode: Mode, until_ns: u64) -> Lock {
        Lock {
            retention: Some(Retention { mode, until_ns }),
            legal_hold: None,
        }
    }

    #[test]
    fn a_running_retention_holds_and_only_governance_gives_way_to_bypass() {
        let later = NOW + DAY_NS;
        let governance = retained(Mode::Governance, later);
        let compliance = retained(Mode::Compliance, later);
        assert!(governance.check_removal("v", NOW, false).is_err());
        assert!(governance.check_removal("v", NOW, true).is_ok());
        assert!(compliance.check_removal("v", NOW, true).is_err());
        // Once the date has passed, nothing holds.
        assert!(compliance.check_removal("v", later, false).is_ok());
        assert!(Lock::default().check_removal("v", NOW, false).is_ok());
        let held = Lock {
            retention: None,
            legal_hold: Some(true),
        };
        assert!(held.check_removal("v", NOW, true).is_err());
        let released = Lock {
            legal_hold: Some(false),
            ..held
        };
        assert!(released.check_removal("v", NOW, false).is_ok());
    }

    #[test]
    fn a_running_retention_is_only_lengthened_in_its_mode() {
        let until = NOW + 10 * DAY_NS;
        let as_is = |mode, until_ns| Some(Retention { mode, until_ns });
        for mode in [Mode::Governance, Mode::Compliance] {
            let lock = retained(mode, until);
            assert!(lock
                .check_retention("v", as_is(mode, until), NOW, false)
                .is_ok());
            assert!(lock
                .check_retention("v", as_is(mode, until + 1), NOW, false)
                .is_ok());
            assert!(lock
                .check_retention("v", as_is(mode, until - 1), NOW, false)
                .is_err());
            assert!(lock.check_retention("v", None, NOW, false).is_err());
            // An expired retention is replaced freely.
            assert!(lock.check_retention("v", None, until, false).is_ok());
        }
        let governance = retained(Mode::Governance, until);
        assert!(governance
            .check_retention("v", as_is(Mode::Compliance, until), NOW, false)
            .is_err());
        assert!(governance
            .check_retention("v", as_is(Mode::Compliance, until), NOW, true)
            .is_ok());
        assert!(governance.check_retention("v", None, NOW, true).is_ok());
        let compliance = retained(Mode::Compliance, until);
        for new in [as_is(Mode::Governance, until + 1), None] {
            assert!(compliance.check_retention("v", new, NOW, true).is_err());
        }
    }

    #[test]
    fn the_default_retention_applies_only_where_none_is_asked() {
        let bucket = BucketLock {
            default: Some(DefaultRetention {
                mode: Mode::Compliance,
                period: Period::Years(1),
            }),
        };
        let given = bucket.for_new(Lock::default(), NOW);
        assert_eq!(
            given.retention,
            Some(Retention {
                mode: Mode::Compliance,
                until_ns: NOW + 365 * DAY_NS
            })
        );
        let asked = retained(Mode::Governance, NOW + 1);
        assert_eq!(bucket.for_new(asked, NOW), asked);
        assert!(BucketLock::default()
            .for_new(Lock::default(), NOW)
            .is_none());
        assert_eq!(Mode::parse("governance"), None);
        assert_eq!(
            Mode::parse(Mode::Compliance.as_str()),
            Some(Mode::Compliance)
        );
    }
}
