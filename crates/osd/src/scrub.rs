//! Scrub, run by a PG's primary when an operator asks (`coffer pool scrub`), and for one
//! object when a read finds the primary's copy damaged (read repair): a page of
//! names per request, then a batch of objects at a time under the PG's lock (so no write is
//! half applied while copies are compared), every OSD holding the PG digests its copy of
//! each object, and the primary compares them. A copy is bad when it differs from the
//! majority of the readable copies, or when its store cannot read it (a failed integrity
//! check). With `repair`, recovery's copy replaces each bad copy with the majority's,
//! unless a copy holds a newer version than the majority (scrub does not roll back writes).
//!
//! In an edge-sealed pool the digests are over chunks and records as stored, so replicas are
//! compared without the pool's key; a chunk altered identically on every copy is not a
//! disagreement, and only the client's tag check can find it. A client whose check fails on
//! the primary's copy asks for read repair: where copies differ, the primary's then counts
//! as unreadable, so a pool of two copies is repaired from the other.
//!
//! In an erasure-coded pool the shards differ by design: [`shards`] compares them with
//! what the code gives instead.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use map::placement::{OsdId, PgId};
use map::{ObjectHash, ObjectName};
use messenger::message::{Claim, CopyDigest, OsdReply, PeerOp, ScrubFinding, ScrubPage};
use tokio::sync::MutexGuard;
use tokio::task::JoinSet;

use crate::erasure::Shards;
use crate::objects;
use crate::pg::{Core, Pg};
use crate::recovery::Side;
use crate::OsdState;

mod shards;

/// Names per page (one request).
const PAGE_OBJECTS: u32 = 256;
/// Objects compared at once under the PG's lock; the PG's writes wait meanwhile.
const BATCH_OBJECTS: usize = 32;

/// Scrubs the page of `id` after `after`. The caller checked that this OSD is the primary.
pub async fn page(
    inner: &Arc<OsdState>,
    id: PgId,
    after: Option<ObjectName>,
    repair: bool,
) -> Result<ScrubPage, OsdReply> {
    let pg = inner.pg(id);
    let osds = compared(inner, &*lock_clean(&pg).await?);
    let (names, next) = names(inner, id, &osds, after)
        .await
        .map_err(|e| busy(id, e))?;
    let mut done = ScrubPage {
        osds,
        objects: 0,
        bytes: 0,
        findings: Vec::new(),
        next,
    };
    let repair = if repair { Repair::Yes } else { Repair::No };
    for batch in names.chunks(BATCH_OBJECTS) {
        match scrub_batch(inner, &pg, batch, repair, &mut done).await {
            Ok(()) => done.objects += batch.len() as u64,
            // What is done stands, repairs included: the page ends before this batch.
            Err(_) if done.objects > 0 => {
                done.next = Some(names[done.objects as usize - 1].clone());
                return Ok(done);
            }
            Err(refusal) => return Err(refusal),
        }
    }
    Ok(done)
}

/// Read repair of one object, for a read that found the primary's copy damaged: its store
/// failed an integrity check (then the primary's own digest says so), or a client could not
/// open its chunks (`primary_failed`: the primary's copy counts as unreadable, if the copies
/// differ at all). Bad copies are replaced by the majority's, as `scrub --repair` does.
/// Returns the finding (none when every copy is alike).
pub async fn repair_object(
    inner: &Arc<OsdState>,
    id: PgId,
    name: ObjectName,
    primary_failed: bool,
) -> Result<Option<ScrubFinding>, OsdReply> {
    let pg = inner.pg(id);
    let osds = compared(inner, &*lock_clean(&pg).await?);
    let mut page = ScrubPage {
        osds,
        objects: 0,
        bytes: 0,
        findings: Vec::new(),
        next: None,
    };
    let repair = Repair::Read { primary_failed };
    scrub_batch(inner, &pg, &[name], repair, &mut page).await?;
    let finding = page.findings.pop();
    if finding.as_ref().is_some_and(|f| f.repaired) {
        inner.read_repairs.fetch_add(1, Ordering::Relaxed);
        crate::metrics::read_repaired();
    }
    Ok(finding)
}

/// What a batch does with the copies that differ.
#[derive(Clone, Copy)]
enum Repair {
    /// Reports them.
    No,
    /// Replaces them with the majority's (`scrub --repair`).
    Yes,
    /// Replaces them, after a read found the primary's copy damaged ([`repair_object`]).
    Read { primary_failed: bool },
}

/// A peer that cannot answer now (down, or its map names another primary) makes the
/// scrub wait for the next map and ask again, as a client's op would.
fn busy(id: PgId, why: String) -> OsdReply {
    OsdReply::Busy(format!("scrub of pg {}.{}: {why}", id.pool, id.number))
}

/// Compares the copies of `names` under the PG's lock, repairs them if asked, and adds
/// what it found to `page`. Fails before changing anything, or not at all.
async fn scrub_batch(
    inner: &Arc<OsdState>,
    pg: &Pg,
    names: &[ObjectName],
    repair: Repair,
    page: &mut ScrubPage,
) -> Result<(), OsdReply> {
    let id = pg.id;
    let mut core = lock_clean(pg).await?;
    let osds = &page.osds;
    if compared(inner, &core) != *osds {
        return Err(busy(id, "its clean OSDs changed; ask again".into()));
    }
    if let Some(profile) = inner.pool_erasure(id.pool) {
        if core.interval.erasure != Some(profile) {
            return Err(busy(
                id,
                "it was peered before its pool's code was known".into(),
            ));
        }
        let holders = core.interval.shard_holders(inner.id);
        let shards = Shards::new(inner, id, profile, holders).reading_devices();
        for name in names {
            let (found, read) = shards::object(&shards, name).await;
            page.bytes += read;
            let Some(mut found) = found else {
                continue;
            };
            warn_finding(id, &found.finding, repair, "shards");
            if !matches!(repair, Repair::No) {
                let claim = Claim {
                    interval: core.interval.epoch,
                    token: core.draw_token(),
                };
                shards::repair(inner, &shards, &mut found, claim).await;
            }
            page.findings.push(found.finding);
        }
        return Ok(());
    }
    let (copies, read) = digests(inner, id, osds, names)
        .await
        .map_err(|e| busy(id, e))?;
    page.bytes += read;
    let failed_check = CopyDigest::Unreadable("its chunks failed a client's tag check".into());
    for (i, name) in names.iter().enumerate() {
        let mut held: Vec<(OsdId, &CopyDigest)> = osds
            .iter()
            .zip(&copies)
            .map(|(osd, c)| (*osd, &c[i]))
            .collect();
        if let Repair::Read {
            primary_failed: true,
        } = repair
        {
            if held.iter().any(|(_, c)| *c != held[0].1) {
                held[0].1 = &failed_check;
            }
        }
        let Some(mut finding) = compare(name, &held) else {
            continue;
        };
        warn_finding(id, &finding, repair, "copies");
        if !matches!(repair, Repair::No) {
            // A claim of its own, newer than any recovery's the targets have seen.
            let claim = Claim {
                interval: core.interval.epoch,
                token: core.draw_token(),
            };
            repair_copies(inner, id, claim, &held, &mut finding, repair).await;
        }
        page.findings.push(finding);
    }
    drop(core);
    Ok(())
}

/// Logs what a scrub found: `held` says of what (copies or shards).
fn warn_finding(id: PgId, finding: &ScrubFinding, repair: Repair, held: &str) {
    tracing::warn!(
        pg = %format!("{}.{}", id.pool, id.number),
        object = %finding.object,
        what = %finding.what,
        "{}: {held} disagree",
        repair.doing()
    );
}

/// Waits for the PG to serve, and locks it: no write is half applied while it is held.
/// Refused while a replica is recovering (its copy differs by design).
async fn lock_clean(pg: &Pg) -> Result<MutexGuard<'_, Core>, OsdReply> {
    let id = pg.id;
    pg.wait_active().await.map_err(OsdReply::Busy)?;
    let core = pg.core.lock().await;
    if !pg.serving.borrow().is_active() {
        return Err(OsdReply::Busy(format!(
            "pg {}.{} stopped serving; ask again",
            id.pool, id.number
        )));
    }
    if !core.interval.recovering.is_empty() {
        return Err(OsdReply::Busy(format!(
            "pg {}.{} is recovering; it is scrubbed once its copies are complete",
            id.pool, id.number
        )));
    }
    Ok(core)
}

/// The OSDs whose copies are compared: this one (the primary) and the clean replicas.
fn compared(inner: &OsdState, core: &Core) -> Vec<OsdId> {
    std::iter::once(inner.id)
        .chain(core.interval.clean.iter().copied())
        .collect()
}

/// The names of the page: every name any OSD holds after `after`, up to the first name past
/// which some OSD has more to list, in the listings' (hash, name) order. Returns them and
/// where the next page starts.
async fn names(
    inner: &Arc<OsdState>,
    id: PgId,
    osds: &[OsdId],
    after: Option<ObjectName>,
) -> Result<(Vec<ObjectName>, Option<ObjectName>), String> {
    let mut names = BTreeSet::new();
    let mut bound: Option<(ObjectHash, ObjectName)> = None;
    for osd in osds {
        let side = inner.side(*osd);
        let (page, more) = inner
            .list_page(side, id, after.clone(), PAGE_OBJECTS)
            .await?;
        if more {
            if let Some((last, _)) = page.last() {
                let last = (last.hash(), last.clone());
                if bound.as_ref().is_none_or(|b| last < *b) {
                    bound = Some(last);
                }
            }
        }
        names.extend(page.into_iter().map(|(name, _)| (name.hash(), name)));
    }
    let names = names
        .into_iter()
        .filter(|name| bound.as_ref().is_none_or(|b| name <= b))
        .map(|(_, name)| name)
        .collect();
    Ok((names, bound.map(|(_, name)| name)))
}

/// Each OSD's digests of `names` (one vector per OSD, in `osds` order), and the data bytes
/// this OSD read.
async fn digests(
    inner: &Arc<OsdState>,
    id: PgId,
    osds: &[OsdId],
    names: &[ObjectName],
) -> Result<(Vec<Vec<CopyDigest>>, u64), String> {
    let mut remote = JoinSet::new();
    for (at, osd) in osds.iter().enumerate().skip(1) {
        let (inner, osd, names) = (inner.clone(), *osd, names.to_vec());
        remote.spawn(async move {
            let op = PeerOp::Digest { names };
            let answer = match inner.peer_op(osd, id, op, Bytes::new()).await {
                Ok((OsdReply::Digests(digests), _)) => Ok(digests),
                Ok((other, _)) => Err(format!("osd.{}: digest: unexpected {other:?}", osd.0)),
                Err(e) => Err(e),
            };
            (at, answer)
        });
    }
    let (local, bytes) = inner.digest_local(id, names.to_vec()).await?;
    let mut all = vec![Vec::new(); osds.len()];
    all[0] = local;
    while let Some(joined) = remote.join_next().await {
        let (at, answer) = joined.map_err(|e| format!("digest task: {e}"))?;
        let digests = answer?;
        if digests.len() != names.len() {
            return Err(format!(
                "osd.{} answered {} digests for {} objects",
                osds[at].0,
                digests.len(),
                names.len()
            ));
        }
        all[at] = digests;
    }
    Ok((all, bytes))
}

impl OsdState {
    /// This OSD's digests of `names` in `pg`, and the data bytes read for them.
    pub async fn digest_local(
        &self,
        pg: PgId,
        names: Vec<ObjectName>,
    ) -> Result<(Vec<CopyDigest>, u64), String> {
        let edge = self.pool_is_edge(pg.pool);
        self.blocking(move |store| {
            let mut bytes = 0;
            let digests = names
                .iter()
                .map(|name| {
                    let (digest, read) =
                        objects::digest(store, &objects::object_ref(pg, name), edge);
                    bytes += read;
                    digest
                })
                .collect();
            (digests, bytes)
        })
        .await
    }

    pub(crate) fn side(&self, osd: OsdId) -> Side {
        if osd == self.id {
            Side::Local
        } else {
            Side::Remote(osd)
        }
    }
}

/// The copy most OSDs hold, among those their stores could read: a strict majority of the
/// readable copies (so one readable copy is the authority when the others are unreadable).
fn majority<'a>(held: &[(OsdId, &'a CopyDigest)]) -> Option<&'a CopyDigest> {
    let readable: Vec<&CopyDigest> = held
        .iter()
        .map(|(_, c)| *c)
        .filter(|c| !matches!(c, CopyDigest::Unreadable(_)))
        .collect();
    readable
        .iter()
        .find(|c| 2 * readable.iter().filter(|d| d == c).count() > readable.len())
        .copied()
}

/// The copy that repair may copy over the others: the majority's, unless a readable copy
/// holds a newer version (the majority may have lost a write; scrub does not roll it back).
fn authority<'a>(held: &[(OsdId, &'a CopyDigest)]) -> Option<&'a CopyDigest> {
    let good = majority(held)?;
    let newest = held
        .iter()
        .filter_map(|(_, c)| match c {
            CopyDigest::Present(d) => Some(d.version),
            _ => None,
        })
        .max();
    match good {
        CopyDigest::Present(g) if newest.is_some_and(|v| v > g.version) => None,
        CopyDigest::Absent if newest.is_some() => None,
        _ => Some(good),
    }
}

impl Repair {
    /// What the log calls it.
    fn doing(self) -> &'static str {
        match self {
            Repair::No | Repair::Yes => "scrub",
            Repair::Read { .. } => "read repair",
        }
    }
}

/// `None` when every copy of `name` is alike; otherwise what differs, and where.
fn compare(name: &ObjectName, held: &[(OsdId, &CopyDigest)]) -> Option<ScrubFinding> {
    if held
        .iter()
        .all(|(_, c)| *c == held[0].1 && !matches!(c, CopyDigest::Unreadable(_)))
    {
        return None;
    }
    let good = majority(held);
    let bad: Vec<(OsdId, &CopyDigest)> = held
        .iter()
        .filter(|(_, c)| good != Some(*c))
        .copied()
        .collect();
    let mut what: Vec<String> = bad
        .iter()
        .map(|(osd, c)| format!("osd.{}: {}", osd.0, difference(c, good)))
        .collect();
    let repairable = authority(held).is_some();
    if good.is_none() {
        what.push("no majority among the readable copies: not repairable by scrub".into());
    } else if !repairable {
        what.push("a copy holds a newer version than the majority: not repairable by scrub".into());
    }
    Some(ScrubFinding {
        object: name.clone(),
        osds: bad.iter().map(|(osd, _)| *osd).collect(),
        what: what.join("; "),
        repairable,
        repaired: false,
    })
}

/// How `copy` differs from the majority's `good` copy (`None`: there is no majority), in
/// words.
fn difference(copy: &CopyDigest, good: Option<&CopyDigest>) -> String {
    match (copy, good) {
        (CopyDigest::Unreadable(why), _) => format!("unreadable ({why})"),
        (CopyDigest::Absent, _) => "missing".into(),
        (CopyDigest::Present(_), Some(CopyDigest::Absent)) => {
            "present where the others have none".into()
        }
        (CopyDigest::Present(c), Some(CopyDigest::Present(g))) => {
            let mut parts = Vec::new();
            if c.version != g.version {
                parts.push(format!(
                    "version {}.{} (others {}.{})",
                    c.version.epoch, c.version.seq, g.version.epoch, g.version.seq
                ));
            }
            if c.size != g.size {
                parts.push(format!("size {} (others {})", c.size, g.size));
            }
            if c.meta != g.meta {
                parts.push("attributes or omap differ".into());
            }
            if c.data != g.data {
                parts.push("data differs".into());
            }
            parts.join(", ")
        }
        (CopyDigest::Present(c), _) => format!(
            "version {}.{}, size {}, data digest {:08x}",
            c.version.epoch,
            c.version.seq,
            c.size,
            c.data >> 96
        ),
    }
}

/// Replaces each bad copy of `finding` with a copy from an OSD holding the majority's.
async fn repair_copies(
    inner: &Arc<OsdState>,
    id: PgId,
    claim: Claim,
    held: &[(OsdId, &CopyDigest)],
    finding: &mut ScrubFinding,
    repair: Repair,
) {
    let Some(good) = authority(held) else {
        return;
    };
    // The local copy first, when it is good: no pull over the network.
    let Some(source) = held.iter().find(|(_, c)| *c == good).map(|(osd, _)| *osd) else {
        return;
    };
    for osd in &finding.osds {
        let to = match inner.side(*osd) {
            Side::Remote(osd) => Side::Target(osd, claim),
            local => local,
        };
        let copied = inner
            .copy_object(id, &finding.object, inner.side(source), to)
            .await;
        if let Err(e) = copied {
            finding
                .what
                .push_str(&format!("; repairing osd.{} failed: {e}", osd.0));
            return;
        }
    }
    finding.repaired = true;
    tracing::info!(
        pg = %format!("{}.{}", id.pool, id.number),
        object = %finding.object,
        from = source.0,
        "{}: repaired from the majority's copy",
        repair.doing()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use messenger::message::{ObjectDigest, Version};

    fn copy_at(seq: u64, data: u128) -> CopyDigest {
        CopyDigest::Present(ObjectDigest {
            version: Version { epoch: 3, seq },
            size: 4096,
            meta: 1,
            data,
        })
    }

    fn copy(data: u128) -> CopyDigest {
        copy_at(7, data)
    }

    fn finding(copies: &[CopyDigest]) -> Option<ScrubFinding> {
        let held: Vec<(OsdId, &CopyDigest)> = copies
            .iter()
            .enumerate()
            .map(|(i, c)| (OsdId(i as u32), c))
            .collect();
        compare(&ObjectName::new("o").expect("name"), &held)
    }

    #[test]
    fn alike_copies_are_consistent() {
        assert_eq!(finding(&[copy(9), copy(9), copy(9)]), None);
        assert_eq!(
            finding(&[CopyDigest::Absent, CopyDigest::Absent]),
            None,
            "removed everywhere"
        );
    }

    #[test]
    fn the_copy_that_differs_from_the_majority_is_named() {
        let found = finding(&[copy(9), copy(8), copy(9)]).expect("a finding");
        assert_eq!(found.osds, vec![OsdId(1)]);
        assert_eq!(found.what, "osd.1: data differs");
        assert!(found.repairable);
        let found = finding(&[copy(9), copy(9), CopyDigest::Absent]).expect("a finding");
        assert_eq!(found.what, "osd.2: missing");
        let found = finding(&[CopyDigest::Absent, copy(9), CopyDigest::Absent]).expect("a finding");
        assert!(found
            .what
            .starts_with("osd.1: present where the others have none; a copy holds a newer"));
    }

    #[test]
    fn a_majority_older_than_a_copy_is_not_copied_over_it() {
        let found = finding(&[copy_at(8, 9), copy(9), copy(9)]).expect("a finding");
        assert_eq!(found.osds, vec![OsdId(0)]);
        assert!(found.what.starts_with("osd.0: version 3.8 (others 3.7)"));
        assert!(found.what.contains("newer version than the majority"));
        assert!(!found.repairable, "scrub does not roll back a write");
        let newer_than_absent = finding(&[copy(9), CopyDigest::Absent, CopyDigest::Absent]);
        assert!(!newer_than_absent.expect("a finding").repairable);
        let older = finding(&[copy_at(6, 9), copy(9), copy(9)]).expect("a finding");
        assert!(older.repairable);
    }

    #[test]
    fn an_unreadable_copy_is_bad_even_when_it_is_alone_against_one() {
        let unreadable = CopyDigest::Unreadable("integrity".into());
        let found = finding(&[unreadable.clone(), copy(9)]).expect("a finding");
        assert_eq!(found.osds, vec![OsdId(0)]);
        assert!(found.what.starts_with("osd.0: unreadable (integrity)"));
        let all = finding(&[unreadable.clone(), unreadable]).expect("a finding");
        assert_eq!(all.osds, vec![OsdId(0), OsdId(1)]);
        assert!(all.what.contains("no majority"));
    }

    #[test]
    fn two_copies_that_differ_have_no_majority() {
        let found = finding(&[copy(9), copy(8)]).expect("a finding");
        assert_eq!(found.osds, vec![OsdId(0), OsdId(1)]);
        assert!(!found.repairable);
        assert!(
            found
                .what
                .starts_with("osd.0: version 3.7, size 4096, data digest 00000000; osd.1:"),
            "each copy is described: {}",
            found.what
        );
        assert!(found.what.contains("no majority"), "{}", found.what);
        let held = [(OsdId(0), &copy(9)), (OsdId(1), &copy(8))];
        assert_eq!(majority(&held), None);
    }
}
