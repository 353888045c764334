//! Object versions: what each change of an object key writes in its bucket's index, decided
//! from what the change read there. `buckets::apply` reads, asks [`plan`], and commits the
//! plan on the condition that what it read is unchanged.
//!
//! In a bucket never versioned, a key's index entry is its object, as before versions
//! existed. Once versioning has been enabled, every version of a key is a [`Version`] under
//! [`layout::version_key`], newest first, summed up by the key's [`Head`]; the key's own
//! entry is a copy of the newest version when that is an object, and absent when it is a
//! delete marker. An object written before versioning was enabled is its key's "null"
//! version and stays where it is until the key next changes, which moves it among the
//! versions (a key never has both).

use crate::layout::{self, Head, ObjectEntry, Order, Version, VersionTag};
use crate::lock::Retention;
use crate::Error;

/// A bucket's versioning state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Versioning {
    /// Never enabled: a write replaces the object.
    Unversioned,
    /// A write adds a version.
    Enabled,
    /// A write replaces the "null" version and keeps the others.
    Suspended,
}

impl Versioning {
    /// The state its attribute value (`None`: no attribute) stands for.
    pub fn from_attr(value: Option<&[u8]>) -> Result<Versioning, Error> {
        match value {
            None => Ok(Versioning::Unversioned),
            Some(b"Enabled") => Ok(Versioning::Enabled),
            Some(b"Suspended") => Ok(Versioning::Suspended),
            Some(other) => Err(Error::Corrupt(format!(
                "versioning state {:?}",
                String::from_utf8_lossy(other)
            ))),
        }
    }

    /// The attribute value that stands for this state.
    pub fn attr(self) -> Option<Vec<u8>> {
        match self {
            Versioning::Unversioned => None,
            Versioning::Enabled => Some(b"Enabled".to_vec()),
            Versioning::Suspended => Some(b"Suspended".to_vec()),
        }
    }
}

/// A version id as S3 clients see it: "null", or 32 hex digits (the version's order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionId {
    Null,
    Order(Order),
}

impl VersionId {
    /// The id a client gave; `None` if it is neither "null" nor one this gateway makes.
    pub fn parse(text: &str) -> Option<VersionId> {
        if text == "null" {
            return Some(VersionId::Null);
        }
        if text.len() != 32 {
            return None;
        }
        let mut order = [0; 16];
        for (at, byte) in order.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * at..2 * at + 2)?, 16).ok()?;
        }
        Some(VersionId::Order(order))
    }
}

impl std::fmt::Display for VersionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VersionId::Null => f.write_str("null"),
            VersionId::Order(order) => f.write_str(&layout::hex(order)),
        }
    }
}

impl From<VersionTag> for VersionId {
    fn from(tag: VersionTag) -> VersionId {
        if tag.null {
            VersionId::Null
        } else {
            VersionId::Order(tag.order)
        }
    }
}

/// The id S3 gives an entry: its version's, or "null" for one written unversioned.
pub fn id_of(entry: &ObjectEntry) -> VersionId {
    entry.version.map_or(VersionId::Null, VersionId::from)
}

/// The id of a key's newest version.
pub fn newest_id(head: &Head) -> VersionId {
    if head.null == Some(head.newest) {
        VersionId::Null
    } else {
        VersionId::Order(head.newest)
    }
}

/// A change of one object key.
// Made once per request: boxing the entry would save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Change {
    /// A new object (PUT, copy, multipart completion).
    Put(ObjectEntry),
    /// DeleteObject without a version: removes the object, or adds a delete marker.
    Delete,
    /// DeleteObject of one version; `bypass` lifts its governance retention. With
    /// `noncurrent` (lifecycle's expiration of noncurrent versions), only while it is not
    /// its key's newest version: `Precondition` otherwise.
    DeleteVersion {
        id: VersionId,
        bypass: bool,
        noncurrent: bool,
    },
    /// Changes one version in place (`None`: the current one).
    Amend {
        version: Option<VersionId>,
        amend: Amend,
    },
}

/// What [`Change::Amend`] changes of a version.
#[derive(Clone, Debug)]
pub enum Amend {
    Tags(Vec<(String, String)>),
    /// Replaces the retention; refused where that weakens a running one
    /// ([`crate::lock::Lock::check_retention`]).
    Retention {
        retention: Option<Retention>,
        bypass: bool,
    },
    LegalHold(bool),
    /// Replaces the version's ACL.
    Acl(crate::acl::Acl),
}

/// What a change read of its key: the key's own entry, its head, and, when the change
/// removes a version ([`touched`]), that version and the one after it (the next newest).
#[derive(Debug, Default)]
pub struct Found {
    pub current: Option<ObjectEntry>,
    pub head: Option<Head>,
    pub target: Option<Version>,
    pub next: Option<(Order, Version)>,
}

/// The version that `change` removes, which must be read (with the one after it) before
/// the change is planned.
pub fn touched(versioning: Versioning, change: &Change, head: Option<&Head>) -> Option<Order> {
    match (versioning, change) {
        (
            _,
            Change::DeleteVersion {
                id: VersionId::Order(order),
                ..
            },
        )
        | (
            _,
            Change::Amend {
                version: Some(VersionId::Order(order)),
                ..
            },
        ) => Some(*order),
        (
            _,
            Change::DeleteVersion {
                id: VersionId::Null,
                ..
            },
        )
        | (
            _,
            Change::Amend {
                version: Some(VersionId::Null),
                ..
            },
        )
        | (Versioning::Suspended, Change::Put(_) | Change::Delete) => head?.null,
        (_, Change::Amend { version: None, .. }) => Some(head?.newest),
        _ => None,
    }
}

/// What a change writes, and what it leaves behind.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub set: Vec<(Vec<u8>, Vec<u8>)>,
    pub remove: Vec<Vec<u8>>,
    /// Objects whose content is no longer named once the plan is committed.
    pub freed: Vec<ObjectEntry>,
    /// The version the change made or removed, if versions are kept.
    pub version: Option<VersionId>,
    /// Whether that version is a delete marker.
    pub delete_marker: bool,
}

impl Plan {
    fn set_entry(&mut self, key: &str, entry: &ObjectEntry) {
        self.set
            .push((key.as_bytes().to_vec(), layout::encode(entry)));
    }

    /// Removes the key's own entry, if it has one (`present`).
    fn remove_entry(&mut self, key: &str, present: bool) {
        if present {
            self.remove.push(key.as_bytes().to_vec());
        }
    }
}

/// The order of a version made at `now_ns` (with `random` bits to tell apart versions of
/// one nanosecond), newer than `newest`: a clock behind the one that wrote `newest` still
/// makes the newest version.
fn fresh_order(now_ns: u64, random: u64, newest: Option<Order>) -> Result<Order, Error> {
    let mut order = (u128::from(u64::MAX - now_ns) << 64) | u128::from(random);
    if let Some(newest) = newest.map(u128::from_be_bytes) {
        if order >= newest {
            order = newest
                .checked_sub(1)
                .ok_or_else(|| Error::Internal("no version order is left before 0".into()))?;
        }
    }
    Ok(order.to_be_bytes())
}

/// The order of an object written before versioning was enabled, when it moves among its
/// key's versions: older than any version made since.
fn unversioned_order(entry: &ObjectEntry) -> Order {
    (u128::from(u64::MAX - entry.mtime_ns) << 64).to_be_bytes()
}

/// What `change` of `key` writes in a bucket whose versioning is `versioning`, given what
/// it read (`found`), at `now_ns`. A change that would remove a version that object lock
/// holds is refused (`Locked`), whatever the change: no plan frees locked content.
pub fn plan(
    key: &str,
    versioning: Versioning,
    found: Found,
    change: Change,
    now_ns: u64,
    random: u64,
) -> Result<Plan, Error> {
    let bypass = matches!(change, Change::DeleteVersion { bypass: true, .. });
    let plan = planned(key, versioning, found, change, now_ns, random)?;
    for freed in &plan.freed {
        let what = match freed.version {
            Some(tag) => format!("version {} of {key}", VersionId::from(tag)),
            None => format!("object {key}"),
        };
        freed.lock.check_removal(&what, now_ns, bypass)?;
    }
    Ok(plan)
}

fn planned(
    key: &str,
    versioning: Versioning,
    found: Found,
    change: Change,
    now_ns: u64,
    random: u64,
) -> Result<Plan, Error> {
    let mut plan = Plan::default();
    let present = found.current.is_some();
    // An object written before versions: its key's null version, and its only one.
    let unversioned = found.current.as_ref().filter(|c| c.version.is_none());
    if unversioned.is_some() && found.head.is_some() {
        return Err(Error::Corrupt(format!(
            "object {key} is both unversioned and versioned"
        )));
    }
    if let Change::Amend { version, amend } = change {
        return amended(key, found, version, amend, now_ns);
    }
    if versioning == Versioning::Unversioned {
        match change {
            Change::Put(entry) => plan.set_entry(key, &entry),
            Change::Delete
            | Change::DeleteVersion {
                id: VersionId::Null,
                ..
            } => plan.remove_entry(key, present),
            // No version but the null one exists here.
            Change::DeleteVersion {
                id: VersionId::Order(_),
                ..
            }
            | Change::Amend { .. } => return Ok(plan),
        }
        plan.freed.extend(found.current);
        return Ok(plan);
    }
    match change {
        Change::Put(_) | Change::Delete => {
            let suspended = versioning == Versioning::Suspended;
            let mut head = found.head.clone();
            let newest = head
                .as_ref()
                .map(|h| h.newest)
                .or(unversioned.map(unversioned_order));
            let tag = VersionTag {
                order: fresh_order(now_ns, random, newest)?,
                null: suspended,
            };
            let delete_marker = matches!(change, Change::Delete);
            let version = match change {
                Change::Put(mut entry) => {
                    entry.version = Some(tag);
                    plan.set_entry(key, &entry);
                    Version::Object(entry)
                }
                _ => {
                    plan.remove_entry(key, present);
                    Version::Marker {
                        mtime_ns: now_ns,
                        tag,
                    }
                }
            };
            plan.set.push((
                layout::version_key(key, &tag.order),
                layout::encode(&version),
            ));
            let mut null = head.as_ref().and_then(|h| h.null);
            if let Some(old) = unversioned {
                if suspended {
                    // Replaced by the new null version.
                    plan.freed.push(old.clone());
                } else {
                    let order = unversioned_order(old);
                    let mut moved = old.clone();
                    moved.version = Some(VersionTag { order, null: true });
                    plan.set.push((
                        layout::version_key(key, &order),
                        layout::encode(&Version::Object(moved)),
                    ));
                    null = Some(order);
                }
            }
            if suspended {
                if let Some(old) = null {
                    plan.remove.push(layout::version_key(key, &old));
                    if let Some(Version::Object(entry)) = found.target {
                        plan.freed.push(entry);
                    }
                }
                null = Some(tag.order);
            }
            let changes = head.take().map_or(0, |h| h.changes + 1);
            let head = Head {
                changes,
                newest: tag.order,
                null,
            };
            plan.set
                .push((layout::head_key(key), layout::encode(&head)));
            plan.version = Some(tag.into());
            plan.delete_marker = delete_marker;
        }
        Change::Amend { .. } => {}
        Change::DeleteVersion { id, noncurrent, .. } => {
            plan.version = Some(id);
            if let (VersionId::Null, Some(old)) = (id, unversioned) {
                plan.remove_entry(key, present);
                plan.freed.push(old.clone());
                return Ok(plan);
            }
            let (Some(mut head), Some(target)) = (found.head.clone(), found.target) else {
                // No such version: deleting it again is not an error.
                return Ok(plan);
            };
            let Some(order) = target.tag().map(|t| t.order) else {
                return Err(Error::Corrupt(format!("a version of {key} has no tag")));
            };
            plan.remove.push(layout::version_key(key, &order));
            if head.null == Some(order) {
                head.null = None;
            }
            let newest_goes = head.newest == order;
            if newest_goes && noncurrent {
                return Err(Error::Precondition(format!(
                    "version {id} of {key} is its newest again"
                )));
            }
            plan.delete_marker = matches!(target, Version::Marker { .. });
            if let Version::Object(entry) = target {
                plan.freed.push(entry);
            }
            match (newest_goes, found.next) {
                (false, _) => {}
                (true, Some((next, version))) => {
                    head.newest = next;
                    match version {
                        Version::Object(entry) => plan.set_entry(key, &entry),
                        Version::Marker { .. } => plan.remove_entry(key, present),
                    }
                }
                (true, None) => {
                    // The key's last version: the key goes.
                    plan.remove_entry(key, present);
                    plan.remove.push(layout::head_key(key));
                    return Ok(plan);
                }
            }
            head.changes += 1;
            plan.set
                .push((layout::head_key(key), layout::encode(&head)));
        }
    }
    Ok(plan)
}

/// What amending `version` of `key` (its current one for `None`) writes: the version, and
/// the key's entry too when that is a copy of it. A missing object is `NoObject`, a missing
/// version (or a delete marker) `NoVersion`; a retention that object lock does not let
/// change is `Locked`.
fn amended(
    key: &str,
    found: Found,
    version: Option<VersionId>,
    amend: Amend,
    now_ns: u64,
) -> Result<Plan, Error> {
    let mut plan = Plan {
        version,
        ..Plan::default()
    };
    let amend = |entry: &mut ObjectEntry| -> Result<(), Error> {
        match &amend {
            Amend::Tags(tags) => entry.tags = tags.clone(),
            Amend::Retention { retention, bypass } => {
                let what = match version {
                    Some(id) => format!("version {id} of {key}"),
                    None => format!("object {key}"),
                };
                entry
                    .lock
                    .check_retention(&what, *retention, now_ns, *bypass)?;
                entry.lock.retention = *retention;
            }
            Amend::LegalHold(on) => entry.lock.legal_hold = Some(*on),
            Amend::Acl(acl) => entry.acl = Some(acl.clone()),
        }
        Ok(())
    };
    let unversioned = found.current.as_ref().filter(|c| c.version.is_none());
    if let (Some(entry), None | Some(VersionId::Null)) = (unversioned, version) {
        let mut entry = entry.clone();
        amend(&mut entry)?;
        plan.set_entry(key, &entry);
        return Ok(plan);
    }
    let (Some(mut head), Some(target)) = (found.head, found.target) else {
        return Err(match version {
            None => Error::NoObject(format!("{key} has no object")),
            Some(id) => Error::NoVersion(format!("{key} has no version {id}")),
        });
    };
    let Version::Object(mut entry) = target else {
        return Err(match version {
            None => Error::NoObject(format!("{key} is deleted")),
            Some(id) => Error::NoVersion(format!("version {id} of {key} is a delete marker")),
        });
    };
    let Some(tag) = entry.version else {
        return Err(Error::Corrupt(format!("a version of {key} has no tag")));
    };
    amend(&mut entry)?;
    plan.version = Some(tag.into());
    if head.newest == tag.order {
        plan.set_entry(key, &entry);
    }
    plan.set.push((
        layout::version_key(key, &tag.order),
        layout::encode(&Version::Object(entry)),
    ));
    head.changes += 1;
    plan.set
        .push((layout::head_key(key), layout::encode(&head)));
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{ContentHeaders, Segment, STRIPE_BYTES};
    use crate::lock::Lock;

    fn object(instance: &str, mtime_ns: u64) -> ObjectEntry {
        ObjectEntry {
            size: 1,
            etag: instance.into(),
            mtime_ns,
            content_type: None,
            metadata: Vec::new(),
            segments: vec![Segment {
                instance: instance.into(),
                size: 1,
                stripe_bytes: STRIPE_BYTES,
                sealed: None,
            }],
            sse: None,
            headers: ContentHeaders::default(),
            upload_id: None,
            version: None,
            tags: Vec::new(),
            lock: Lock::default(),
            acl: None,
            checksum: None,
            listed: None,
        }
    }

    /// An index of one bucket, as a sorted map, changed only through [`plan`].
    #[derive(Default)]
    struct Index {
        map: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
        now: u64,
        freed: Vec<String>,
    }

    impl Index {
        fn found(&self, key: &str, versioning: Versioning, change: &Change) -> Found {
            let current = self
                .map
                .get(key.as_bytes())
                .map(|v| layout::decode(v).expect("an entry"));
            let head: Option<Head> = self
                .map
                .get(&layout::head_key(key))
                .map(|v| layout::decode(v).expect("a head"));
            let mut found = Found {
                current,
                head: head.clone(),
                ..Found::default()
            };
            if let Some(order) = touched(versioning, change, head.as_ref()) {
                let at = layout::version_key(key, &order);
                found.target = self
                    .map
                    .get(&at)
                    .map(|v| layout::decode(v).expect("a version"));
                found.next = self.map.range(at.clone()..).nth(1).and_then(|(k, v)| {
                    match layout::parse_index_key(k) {
                        layout::IndexKey::Version(of, order) if of == key.as_bytes() => {
                            Some((order, layout::decode(v).expect("a version")))
                        }
                        _ => None,
                    }
                });
            }
            found
        }

        fn apply(&mut self, key: &str, versioning: Versioning, change: Change) -> Plan {
            self.attempt(key, versioning, change).expect("a plan")
        }

        /// [`Index::apply`], for a change that may be refused: a refused one changes
        /// nothing.
        fn attempt(
            &mut self,
            key: &str,
            versioning: Versioning,
            change: Change,
        ) -> Result<Plan, Error> {
            self.now += 1000;
            let found = self.found(key, versioning, &change);
            let plan = plan(key, versioning, found, change, self.now, 7)?;
            for (k, v) in &plan.set {
                self.map.insert(k.clone(), v.clone());
            }
            for k in &plan.remove {
                assert!(self.map.remove(k).is_some(), "removes only what exists");
            }
            self.freed
                .extend(plan.freed.iter().map(|e| e.segments[0].instance.clone()));
            self.check(key);
            Ok(plan)
        }

        fn put(&mut self, key: &str, versioning: Versioning, instance: &str) -> Plan {
            let entry = object(instance, self.now + 1000);
            self.apply(key, versioning, Change::Put(entry))
        }

        /// The versions of `key`, newest first: instance or "marker", and whether null.
        fn versions(&self, key: &str) -> Vec<(String, bool)> {
            let mut out = Vec::new();
            for (k, v) in &self.map {
                match layout::parse_index_key(k) {
                    layout::IndexKey::Version(of, _) if of == key.as_bytes() => {
                        let version: Version = layout::decode(v).expect("a version");
                        let null = version.tag().expect("a tag").null;
                        out.push(match version {
                            Version::Object(e) => (e.segments[0].instance.clone(), null),
                            Version::Marker { .. } => ("marker".into(), null),
                        });
                    }
                    layout::IndexKey::Object(of) if of == key.as_bytes() => {
                        let entry: ObjectEntry = layout::decode(v).expect("an entry");
                        if entry.version.is_none() {
                            out.push((entry.segments[0].instance.clone(), true));
                        }
                    }
                    _ => {}
                }
            }
            out
        }

        fn current(&self, key: &str) -> Option<String> {
            self.map.get(key.as_bytes()).map(|v| {
                let entry: ObjectEntry = layout::decode(v).expect("an entry");
                entry.segments[0].instance.clone()
            })
        }

        /// The invariants: the key's entry is its newest version's object (or absent under a
        /// marker), the head names the newest and the null version, at most one is null.
        fn check(&self, key: &str) {
            let head: Option<Head> = self
                .map
                .get(&layout::head_key(key))
                .map(|v| layout::decode(v).expect("a head"));
            let versions: Vec<(Order, Version)> = self
                .map
                .iter()
                .filter_map(|(k, v)| match layout::parse_index_key(k) {
                    layout::IndexKey::Version(of, order) if of == key.as_bytes() => {
                        Some((order, layout::decode(v).expect("a version")))
                    }
                    _ => None,
                })
                .collect();
            let Some(head) = head else {
                assert!(versions.is_empty(), "versions without a head");
                return;
            };
            let (newest, version) = versions.first().expect("a head names a version");
            assert_eq!(head.newest, *newest);
            let nulls: Vec<Order> = versions
                .iter()
                .filter(|(_, v)| v.tag().expect("a tag").null)
                .map(|(o, _)| *o)
                .collect();
            assert_eq!(head.null, nulls.first().copied());
            assert!(nulls.len() <= 1);
            match version {
                Version::Object(entry) => {
                    assert_eq!(self.current(key), Some(entry.segments[0].instance.clone()))
                }
                Version::Marker { .. } => assert_eq!(self.current(key), None),
            }
        }
    }

    use Versioning::{Enabled, Suspended, Unversioned};

    #[test]
    fn an_unversioned_bucket_replaces_and_removes() {
        let mut index = Index::default();
        let made = index.put("k", Unversioned, "a");
        assert_eq!(made.version, None);
        index.put("k", Unversioned, "b");
        assert_eq!(index.freed, vec!["a"]);
        assert_eq!(index.versions("k"), vec![("b".into(), true)]);
        index.apply("k", Unversioned, Change::Delete);
        assert!(index.map.is_empty());
        assert_eq!(index.freed, vec!["a", "b"]);
        // Deleting what is not there changes nothing.
        let nothing = index.apply("k", Unversioned, Change::Delete);
        assert_eq!(nothing, Plan::default());
    }

    #[test]
    fn enabled_keeps_every_version_and_markers_hide_the_key() {
        let mut index = Index::default();
        index.put("k", Unversioned, "old");
        let first = index.put("k", Enabled, "a");
        let second = index.put("k", Enabled, "b");
        assert!(index.freed.is_empty());
        assert_eq!(
            index.versions("k"),
            vec![
                ("b".into(), false),
                ("a".into(), false),
                ("old".into(), true)
            ]
        );
        let marker = index.apply("k", Enabled, Change::Delete);
        assert!(marker.delete_marker);
        assert_eq!(index.current("k"), None);
        // Removing the marker brings the newest object back.
        let Some(VersionId::Order(marker_order)) = marker.version else {
            panic!("a marker has an order")
        };
        let removed = index.apply(
            "k",
            Enabled,
            Change::DeleteVersion {
                id: VersionId::Order(marker_order),
                bypass: false,
                noncurrent: false,
            },
        );
        assert!(removed.delete_marker);
        assert_eq!(index.current("k"), Some("b".into()));
        // Removing the current version makes the one before it current; others stay.
        index.apply(
            "k",
            Enabled,
            Change::DeleteVersion {
                id: second.version.expect("an id"),
                bypass: false,
                noncurrent: false,
            },
        );
        assert_eq!(index.current("k"), Some("a".into()));
        index.apply(
            "k",
            Enabled,
            Change::DeleteVersion {
                id: VersionId::Null,
                bypass: false,
                noncurrent: false,
            },
        );
        assert_eq!(index.versions("k"), vec![("a".into(), false)]);
        assert_eq!(index.freed, vec!["b", "old"]);
        index.apply(
            "k",
            Enabled,
            Change::DeleteVersion {
                id: first.version.expect("an id"),
                bypass: false,
                noncurrent: false,
            },
        );
        assert!(
            index.map.is_empty(),
            "the last version takes the head with it"
        );
    }

    #[test]
    fn suspended_replaces_the_null_version_only() {
        let mut index = Index::default();
        index.put("k", Enabled, "a");
        index.put("k", Suspended, "n1");
        index.put("k", Suspended, "n2");
        assert_eq!(index.freed, vec!["n1"]);
        assert_eq!(
            index.versions("k"),
            vec![("n2".into(), true), ("a".into(), false)]
        );
        // A delete under suspension replaces the null version with a null marker.
        let marker = index.apply("k", Suspended, Change::Delete);
        assert_eq!(marker.version, Some(VersionId::Null));
        assert_eq!(
            index.versions("k"),
            vec![("marker".into(), true), ("a".into(), false)]
        );
        assert_eq!(index.current("k"), None);
        index.put("k", Enabled, "b");
        assert_eq!(
            index.versions("k"),
            vec![
                ("b".into(), false),
                ("marker".into(), true),
                ("a".into(), false)
            ]
        );
        // An unversioned object is replaced by a suspended write, not kept.
        index.put("u", Unversioned, "u0");
        index.put("u", Suspended, "u1");
        assert_eq!(index.versions("u"), vec![("u1".into(), true)]);
        assert_eq!(index.freed, vec!["n1", "n2", "u0"]);
    }

    fn tags_of(index: &Index, key: &str, version: Option<VersionId>) -> Vec<(String, String)> {
        let found = index.found(
            key,
            Enabled,
            &Change::Amend {
                version,
                amend: Amend::Tags(Vec::new()),
            },
        );
        match (version, found.target) {
            (_, Some(Version::Object(entry))) => entry.tags,
            _ => found.current.expect("an object").tags,
        }
    }

    #[test]
    fn tags_change_one_version_and_the_current_copy_with_it() {
        let mut index = Index::default();
        index.put("u", Unversioned, "u0");
        let tags = vec![("a".to_string(), "1".to_string())];
        let retag = |version| Change::Amend {
            version,
            amend: Amend::Tags(tags.clone()),
        };
        index.apply("u", Unversioned, retag(None));
        assert_eq!(tags_of(&index, "u", None), tags);

        let old = index.put("k", Enabled, "a").version;
        index.put("k", Enabled, "b");
        index.apply("k", Enabled, retag(old));
        assert_eq!(tags_of(&index, "k", old), tags);
        assert!(
            tags_of(&index, "k", None).is_empty(),
            "the current version keeps none"
        );
        index.apply("k", Enabled, retag(None));
        let current: ObjectEntry =
            layout::decode(index.map.get("k".as_bytes()).expect("an entry")).expect("decodes");
        assert_eq!(
            current.tags, tags,
            "the copy of the current version follows"
        );

        index.apply("k", Enabled, Change::Delete);
        let found = index.found("k", Enabled, &retag(None));
        assert!(matches!(
            plan("k", Enabled, found, retag(None), 1, 1),
            Err(Error::NoObject(_))
        ));
        let found = index.found("k", Enabled, &retag(Some(VersionId::Order([3; 16]))));
        assert!(matches!(
            plan(
                "k",
                Enabled,
                found,
                retag(Some(VersionId::Order([3; 16]))),
                1,
                1
            ),
            Err(Error::NoVersion(_))
        ));
    }

    #[test]
    fn a_version_older_than_the_clock_still_comes_first() {
        let mut index = Index {
            now: 5_000_000,
            ..Index::default()
        };
        index.put("k", Enabled, "late");
        index.now = 1_000; // the clock went back
        index.put("k", Enabled, "early");
        assert_eq!(index.current("k"), Some("early".into()));
        assert_eq!(
            index.versions("k"),
            vec![("early".into(), false), ("late".into(), false)]
        );
    }

    #[test]
    fn missing_versions_are_not_errors_and_ids_parse_back() {
        let mut index = Index::default();
        index.put("k", Enabled, "a");
        let gone = VersionId::Order([9; 16]);
        let plan = index.apply(
            "k",
            Enabled,
            Change::DeleteVersion {
                id: gone,
                bypass: false,
                noncurrent: false,
            },
        );
        assert!(plan.set.is_empty() && plan.remove.is_empty());
        assert_eq!(plan.version, Some(gone));
        for id in [VersionId::Null, VersionId::Order([0xab; 16])] {
            assert_eq!(VersionId::parse(&id.to_string()), Some(id));
        }
        assert_eq!(VersionId::parse("nul"), None);
        assert_eq!(VersionId::parse(&"g".repeat(32)), None);
        assert_eq!(VersionId::parse(&"a".repeat(31)), None);
        for state in [Unversioned, Enabled, Suspended] {
            let attr = state.attr();
            assert_eq!(Versioning::from_attr(attr.as_deref()).ok(), Some(state));
        }
        assert!(Versioning::from_attr(Some(b"On")).is_err());
    }

    #[test]
    fn no_change_removes_a_version_that_object_lock_holds() {
        use crate::lock::Mode;
        let mut index = Index::default();
        let first = index.put("k", Enabled, "a").version.expect("an id");
        let delete = |id, bypass| Change::DeleteVersion {
            id,
            bypass,
            noncurrent: false,
        };
        let retain = |mode, until_ns, bypass| Change::Amend {
            version: Some(first),
            amend: Amend::Retention {
                retention: Some(Retention { mode, until_ns }),
                bypass,
            },
        };
        let far = 1_000_000;
        index.apply("k", Enabled, retain(Mode::Governance, far, false));
        let refused = index.attempt("k", Enabled, delete(first, false));
        assert!(matches!(refused, Err(Error::Locked(_))), "{refused:?}");
        // Shortening needs the bypass; a marker on top removes nothing and is allowed.
        assert!(index
            .attempt("k", Enabled, retain(Mode::Governance, far - 1, false))
            .is_err());
        let marker = index.apply("k", Enabled, Change::Delete);
        assert!(marker.delete_marker);
        assert_eq!(index.current("k"), None);
        // Compliance: not even the bypass removes it or shortens its date.
        index.apply("k", Enabled, retain(Mode::Compliance, far, true));
        assert!(index.attempt("k", Enabled, delete(first, true)).is_err());
        assert!(index
            .attempt("k", Enabled, retain(Mode::Governance, far + 1, true))
            .is_err());
        // A legal hold holds whatever the retention; once its date is past and the hold
        // is off, the version goes.
        let hold = |on| Change::Amend {
            version: Some(first),
            amend: Amend::LegalHold(on),
        };
        index.now = far;
        index.apply("k", Enabled, hold(true));
        assert!(index.attempt("k", Enabled, delete(first, true)).is_err());
        index.apply("k", Enabled, hold(false));
        index.apply("k", Enabled, delete(first, false));
        assert_eq!(index.versions("k"), vec![("marker".into(), false)]);
        assert_eq!(index.freed, vec!["a"]);

        // A suspended bucket's write that would replace a held null version is refused.
        index.put("n", Suspended, "n0");
        index.apply(
            "n",
            Suspended,
            Change::Amend {
                version: None,
                amend: Amend::LegalHold(true),
            },
        );
        assert!(index
            .attempt("n", Suspended, Change::Put(object("n1", 1)))
            .is_err());
        assert_eq!(index.versions("n"), vec![("n0".into(), true)]);
    }

    #[test]
    fn a_noncurrent_expiry_leaves_a_version_that_became_the_newest() {
        let mut index = Index::default();
        let first = index.put("k", Enabled, "a").version.expect("an id");
        let expire = Change::DeleteVersion {
            id: first,
            bypass: false,
            noncurrent: true,
        };
        let refused = index.attempt("k", Enabled, expire.clone());
        assert!(
            matches!(refused, Err(Error::Precondition(_))),
            "{refused:?}"
        );
        index.put("k", Enabled, "b");
        index.apply("k", Enabled, expire);
        assert_eq!(index.versions("k"), vec![("b".into(), false)]);
    }
}
