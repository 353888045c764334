//! Lifecycle: a bucket's rules, and what they expire — current objects some days after they
//! were made (or from a date), noncurrent versions some days after a newer one replaced
//! them (keeping the newest few if asked), delete markers left with no version behind them,
//! and multipart uploads left incomplete. Pure code: `maintenance::lifecycle` walks the
//! buckets and commits what these rules decide, through `buckets::apply`, so object lock
//! holds there as on every delete path.

use serde::{Deserialize, Serialize};

use crate::layout::ObjectEntry;

/// A day, as lifecycle rules count them.
pub const DAY_NS: u64 = 86_400 * 1_000_000_000;
/// The longest rule id S3 allows.
pub const ID_CHARS_MAX: usize = 255;

/// A bucket's lifecycle configuration, in its index object's lifecycle attribute.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lifecycle {
    pub rules: Vec<Rule>,
}

impl crate::layout::Record for Lifecycle {}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub id: String,
    pub enabled: bool,
    pub filter: Filter,
    /// Expiration of current objects.
    pub expiration: Option<Expiration>,
    /// Removes a delete marker that is its key's only version.
    pub expired_marker: bool,
    pub noncurrent: Option<Noncurrent>,
    /// Aborts multipart uploads this many days after they began.
    pub abort_upload_days: Option<u32>,
}

/// Which objects a rule applies to: all of these must hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Filter {
    pub prefix: String,
    /// Whether the prefix was given as the rule's own (S3's older form) rather than in a
    /// filter, so that it is given back the same way.
    pub rule_prefix: bool,
    pub tags: Vec<(String, String)>,
    pub size_greater_than: Option<u64>,
    pub size_less_than: Option<u64>,
}

impl Filter {
    /// Whether an object (or, for `None`, a delete marker, which has no tags nor size) of
    /// `key` is one the rule applies to.
    fn matches(&self, key: &str, entry: Option<&ObjectEntry>) -> bool {
        if !key.starts_with(&self.prefix) {
            return false;
        }
        let Some(entry) = entry else {
            return self.tags.is_empty()
                && self.size_greater_than.is_none()
                && self.size_less_than.is_none();
        };
        self.tags.iter().all(|tag| entry.tags.contains(tag))
            && self
                .size_greater_than
                .is_none_or(|least| entry.size > least)
            && self.size_less_than.is_none_or(|most| entry.size < most)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Expiration {
    Days(u32),
    /// Midnight UTC of a day, in nanoseconds since 1970.
    Date(u64),
}

/// Expiration of noncurrent versions.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Noncurrent {
    /// Days after the version stopped being current.
    pub days: u32,
    /// How many of the newest noncurrent versions are kept whatever their age.
    pub keep: Option<u32>,
}

/// `days` days after `from_ns`, rounded up to the next day's start, as S3 counts (`day_ns`
/// is a day, shorter only in tests).
fn days_after(from_ns: u64, days: u32, day_ns: u64) -> u64 {
    let at = from_ns.saturating_add(u64::from(days).saturating_mul(day_ns));
    at.div_ceil(day_ns).saturating_mul(day_ns)
}

impl Lifecycle {
    fn enabled(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter().filter(|rule| rule.enabled)
    }

    /// When the current object `entry` of `key` expires, and by which rule: the earliest of
    /// the rules that expire it.
    pub fn expiry(&self, key: &str, entry: &ObjectEntry, day_ns: u64) -> Option<(u64, &Rule)> {
        self.enabled()
            .filter(|rule| rule.filter.matches(key, Some(entry)))
            .filter_map(|rule| {
                let at = match rule.expiration? {
                    Expiration::Days(days) => days_after(entry.mtime_ns, days, day_ns),
                    Expiration::Date(at) => at,
                };
                Some((at, rule))
            })
            .min_by_key(|(at, _)| *at)
    }

    /// Whether a noncurrent version `entry` of `key`, noncurrent since `since_ns`, with
    /// `newer` noncurrent versions newer than it, has expired at `now_ns`.
    pub fn noncurrent_expired(
        &self,
        key: &str,
        entry: &ObjectEntry,
        since_ns: u64,
        newer: usize,
        now_ns: u64,
        day_ns: u64,
    ) -> bool {
        self.enabled()
            .filter(|rule| rule.filter.matches(key, Some(entry)))
            .filter_map(|rule| rule.noncurrent)
            .any(|rule| {
                let kept = rule.keep.is_some_and(|keep| newer < keep as usize);
                !kept && days_after(since_ns, rule.days, day_ns) <= now_ns
            })
    }

    /// Whether a delete marker of `key` made at `mtime_ns`, which is its key's only
    /// version, goes at `now_ns`: by `ExpiredObjectDeleteMarker` at once, or by an
    /// expiration once it is as old as an object would be (as S3's).
    pub fn marker_expired(&self, key: &str, mtime_ns: u64, now_ns: u64, day_ns: u64) -> bool {
        self.enabled()
            .filter(|rule| rule.filter.matches(key, None))
            .any(|rule| {
                rule.expired_marker
                    || match rule.expiration {
                        Some(Expiration::Days(days)) => {
                            days_after(mtime_ns, days, day_ns) <= now_ns
                        }
                        Some(Expiration::Date(at)) => at <= now_ns,
                        None => false,
                    }
            })
    }

    /// Whether a multipart upload of `key` begun at `initiated_ns` is aborted at `now_ns`.
    pub fn upload_expired(&self, key: &str, initiated_ns: u64, now_ns: u64, day_ns: u64) -> bool {
        self.enabled()
            .filter(|rule| key.starts_with(&rule.filter.prefix))
            .filter_map(|rule| rule.abort_upload_days)
            .any(|days| days_after(initiated_ns, days, day_ns) <= now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::ContentHeaders;

    const DAY: u64 = 10;

    fn rule(id: &str, prefix: &str) -> Rule {
        Rule {
            id: id.into(),
            enabled: true,
            filter: Filter {
                prefix: prefix.into(),
                ..Filter::default()
            },
            expiration: None,
            expired_marker: false,
            noncurrent: None,
            abort_upload_days: None,
        }
    }

    fn object(mtime_ns: u64, size: u64, tags: &[(&str, &str)]) -> ObjectEntry {
        ObjectEntry {
            size,
            etag: String::new(),
            mtime_ns,
            content_type: None,
            metadata: Vec::new(),
            segments: Vec::new(),
            sse: None,
            headers: ContentHeaders::default(),
            upload_id: None,
            version: None,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            lock: Default::default(),
            acl: None,
            checksum: None,
            listed: None,
        }
    }

    #[test]
    fn current_objects_expire_days_after_they_were_made_at_a_day_start() {
        let mut soon = rule("soon", "logs/");
        soon.expiration = Some(Expiration::Days(1));
        let mut later = rule("later", "");
        later.expiration = Some(Expiration::Days(5));
        let mut off = rule("off", "");
        off.expiration = Some(Expiration::Days(1));
        off.enabled = false;
        let lifecycle = Lifecycle {
            rules: vec![later, soon, off],
        };
        let made = object(13, 1, &[]);
        // Made at 13: one day on is 23, rounded up to the next day's start, 30.
        let (at, by) = lifecycle.expiry("logs/a", &made, DAY).expect("expires");
        assert_eq!((at, by.id.as_str()), (30, "soon"));
        let (at, by) = lifecycle.expiry("data/a", &made, DAY).expect("expires");
        assert_eq!((at, by.id.as_str()), (70, "later"));
        let dated = Lifecycle {
            rules: vec![Rule {
                expiration: Some(Expiration::Date(100)),
                ..rule("dated", "")
            }],
        };
        assert_eq!(dated.expiry("k", &made, DAY).map(|(at, _)| at), Some(100));
        assert!(Lifecycle { rules: Vec::new() }
            .expiry("k", &made, DAY)
            .is_none());
    }

    #[test]
    fn filters_match_prefix_tags_and_size_and_markers_only_by_prefix() {
        let filter = Filter {
            prefix: "a/".into(),
            tags: vec![("t".into(), "1".into())],
            size_greater_than: Some(10),
            size_less_than: Some(20),
            ..Filter::default()
        };
        assert!(filter.matches("a/x", Some(&object(0, 15, &[("t", "1"), ("u", "2")]))));
        assert!(!filter.matches("b/x", Some(&object(0, 15, &[("t", "1")]))));
        assert!(!filter.matches("a/x", Some(&object(0, 15, &[("t", "2")]))));
        assert!(!filter.matches("a/x", Some(&object(0, 10, &[("t", "1")]))));
        assert!(!filter.matches("a/x", Some(&object(0, 20, &[("t", "1")]))));
        assert!(!filter.matches("a/x", None), "a marker has no tags");
        let mut markers = rule("m", "a/");
        markers.expired_marker = true;
        let lifecycle = Lifecycle {
            rules: vec![markers],
        };
        assert!(lifecycle.marker_expired("a/x", 0, 0, DAY));
        assert!(!lifecycle.marker_expired("b/x", 0, 0, DAY));
        // An expiration in days takes a lone marker once it is that old.
        let aging = Lifecycle {
            rules: vec![Rule {
                expiration: Some(Expiration::Days(2)),
                ..rule("days", "")
            }],
        };
        assert!(!aging.marker_expired("k", 5, 29, DAY));
        assert!(aging.marker_expired("k", 5, 30, DAY));
    }

    #[test]
    fn noncurrent_versions_expire_after_they_were_replaced_keeping_the_newest() {
        let mut noncurrent = rule("n", "");
        noncurrent.noncurrent = Some(Noncurrent {
            days: 2,
            keep: Some(1),
        });
        noncurrent.abort_upload_days = Some(1);
        let lifecycle = Lifecycle {
            rules: vec![noncurrent],
        };
        let old = object(0, 1, &[]);
        // Replaced at 5: expires at 30 (25 rounded up), unless it is the newest noncurrent.
        assert!(!lifecycle.noncurrent_expired("k", &old, 5, 1, 29, DAY));
        assert!(lifecycle.noncurrent_expired("k", &old, 5, 1, 30, DAY));
        assert!(!lifecycle.noncurrent_expired("k", &old, 5, 0, 1000, DAY));
        assert!(!lifecycle.upload_expired("k", 5, 19, DAY));
        assert!(lifecycle.upload_expired("k", 5, 20, DAY));
    }
}
