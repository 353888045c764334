//! Scripted runs of the simulator that put a message where a race needs it, one per fence
//! the OSD keeps (docs/design/pg-core.md, F3 and F4).

use std::time::Duration;

use bytes::Bytes;
use coffer_sim::world::boot;
use coffer_sim::{simulate, Config, World};
use map::cluster::Change;
use messenger::message::{OsdReply, OsdRequest, PeerOp, ReqId};

fn is_push(request: &OsdRequest) -> bool {
    matches!(
        request,
        OsdRequest::Peer {
            op: PeerOp::Push { .. },
            ..
        }
    )
}

fn reqid(seq: u64) -> ReqId {
    ReqId { client: 9, seq }
}

/// One PG, on each of three OSDs, and no random faults: the script makes its own.
fn one_pg_on_three_osds() -> Config {
    Config {
        osds: 3,
        pg_num: 1,
        faults: false,
        ..Config::default()
    }
}

/// Waits (10 s of virtual time at most) until the script's held message has been sent;
/// `never` says what did not happen otherwise.
async fn held(world: &World, never: &str) -> Result<(), String> {
    for _ in 0..1000 {
        if world.net().holds_pending() == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(never.into())
}

/// F3: a recovery pushes an object to its target, and the push is slow; meanwhile a new
/// interval starts another recovery, which copies the object, joins the target to the
/// clean replicas, and a newer write reaches it. The first recovery's push, landing last,
/// must not put the older copy back.
#[test]
fn a_superseded_recoverys_late_push_does_not_overwrite_a_newer_write() -> Result<(), String> {
    simulate(1, &one_pg_on_three_osds(), |world| async move {
        world.settle().await?;
        let [primary, other, target] = world.acting("x")?[..] else {
            return Err("a PG of three OSDs was expected".into());
        };
        world.write(reqid(1), "x", b"one".to_vec()).await?;
        world.crash(target).await;
        world.change(&Change::OsdDown { id: target })?;
        world.write(reqid(2), "x", b"two".to_vec()).await?;
        // The target comes back: recovery copies "two" to it, and that push is held.
        world
            .net()
            .hold_next(primary, target, is_push, Duration::from_secs(15));
        world.restart(target)?;
        held(&world, "recovery never pushed to the target").await?;
        // A new interval: another recovery of the target, which joins it, and a write.
        world.change(&Change::OsdDown { id: other })?;
        world.write(reqid(3), "x", b"three".to_vec()).await?;
        // The held push lands, and is refused; then everything comes back and must agree.
        tokio::time::sleep(Duration::from_secs(20)).await;
        match &world.net().held_outcomes()[..] {
            [Ok(OsdReply::Failed(why))] if why.contains("superseded") => {}
            outcomes => return Err(format!("the late push was answered {outcomes:?}")),
        }
        world.change(&boot(other))?;
        world.settle().await
    })
}

fn is_a_later_piece_pulled(request: &OsdRequest) -> bool {
    matches!(
        request,
        OsdRequest::Peer {
            op: PeerOp::Pull { at, .. },
            ..
        } if at.offset > 0
    )
}

/// F4: a primary back from a crash catches up from the only OSD with the newest log, and
/// that OSD fails halfway through an object of two pieces. The object the primary began to
/// copy is then ahead of its log, and the remaining replica's log is as old as the
/// primary's: the PG must not serve with that replica counted clean before the primary's
/// objects are made a clean copy's again.
#[test]
fn an_interrupted_catch_up_is_finished_before_the_pg_serves() -> Result<(), String> {
    simulate(1, &one_pg_on_three_osds(), |world| async move {
        world.settle().await?;
        let [primary, source, other] = world.acting("x")?[..] else {
            return Err("a PG of three OSDs was expected".into());
        };
        world.write(reqid(1), "w", b"w".to_vec()).await?;
        // Only `source` takes a write of x, of two copy pieces: the others are down.
        world.crash(primary).await;
        world.change(&Change::OsdDown { id: primary })?;
        world.wait_serving("x").await?;
        world.crash(other).await;
        let big = Bytes::from(vec![7; 9 << 20]);
        match world.send_write(reqid(2), "x", big).await? {
            OsdReply::Busy(_) => {}
            reply => {
                return Err(format!(
                    "a write on one OSD of three was answered {reply:?}"
                ))
            }
        }
        world.crash(source).await;
        // The primary comes back first and leads again; it catches up from `source`, whose
        // second piece is held while `source` fails for good.
        world.net().hold_next(
            primary,
            source,
            is_a_later_piece_pulled,
            Duration::from_secs(5),
        );
        world.restart(primary)?;
        world.restart(source)?;
        world.restart(other)?;
        held(&world, "the primary never pulled the second piece").await?;
        world.crash(source).await;
        world.change(&Change::OsdDown { id: source })?;
        world.wait_serving("x").await?;
        match &world.net().held_outcomes()[..] {
            [Err(_)] => {}
            outcomes => return Err(format!("the held pull was answered {outcomes:?}")),
        }
        world.check_replicas().await
    })
}
