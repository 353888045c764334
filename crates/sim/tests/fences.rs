//! Scripted runs of the simulator that put a message where a race needs it, one per fence
//! the OSD keeps (docs/design/pg-core.md, F3).

use std::time::Duration;

use coffer_sim::world::boot;
use coffer_sim::{simulate, Config};
use map::cluster::Change;
use messenger::message::{OsdRequest, PeerOp, ReqId};

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

/// F3: a recovery pushes an object to its target, and the push is slow; meanwhile a new
/// interval starts another recovery, which copies the object, joins the target to the
/// clean replicas, and a newer write reaches it. The first recovery's push, landing last,
/// must not put the older copy back.
#[test]
fn a_superseded_recoverys_late_push_does_not_overwrite_a_newer_write() -> Result<(), String> {
    let config = Config {
        osds: 3,
        pg_num: 1,
        faults: false,
        ..Config::default()
    };
    simulate(1, &config, |world| async move {
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
        for _ in 0..1000 {
            if world.net().holds_pending() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if world.net().holds_pending() > 0 {
            return Err("recovery never pushed to the target".into());
        }
        // A new interval: another recovery of the target, which joins it, and a write.
        world.change(&Change::OsdDown { id: other })?;
        world.write(reqid(3), "x", b"three".to_vec()).await?;
        // The held push lands; then everything comes back and must agree.
        tokio::time::sleep(Duration::from_secs(20)).await;
        world.change(&boot(other))?;
        world.settle().await
    })
}
