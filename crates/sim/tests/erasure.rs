//! Scripted runs of the simulator on an erasure-coded pool (docs/design/erasure.md, §6
//! and §8): writes inside an object, across its units and past its end, read back through
//! the shards, before and after the OSD holding one of its data shards crashes, and after
//! it comes back and its shard is rebuilt; zeros and truncates, which keep every stripe's
//! parity what its data encodes to; and a shard damaged on disk, found by a read, decoded
//! around and rebuilt on its holder.

use std::time::Duration;

use bytes::Bytes;
use coffer_sim::{simulate, Config, World};
use map::cluster::Change;
use messenger::message::{ObjectOp, OpResult, OsdReply, ReqId};

fn reqid(seq: u64) -> ReqId {
    ReqId { client: 9, seq }
}

/// Sends `ops` on object "x" until its primary answers something other than busy (a PG
/// still peering); that answer.
async fn send(
    world: &World,
    seq: u64,
    ops: Vec<ObjectOp>,
    data: &[u8],
) -> Result<(OsdReply, Bytes), String> {
    for _ in 0..100 {
        match world
            .send_ops(reqid(seq), "x", ops.clone(), Bytes::copy_from_slice(data))
            .await
        {
            Ok((OsdReply::Busy(_) | OsdReply::Retry { .. }, _)) | Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Ok(answer) => return Ok(answer),
        }
    }
    Err(format!("request {seq} was never served"))
}

/// Writes `data` at `offset` of "x", and the model with it.
async fn write_at(
    world: &World,
    seq: u64,
    model: &mut Vec<u8>,
    offset: usize,
    data: &[u8],
) -> Result<(), String> {
    let ops = vec![ObjectOp::Write {
        offset: offset as u64,
        len: data.len() as u64,
    }];
    match send(world, seq, ops, data).await? {
        (OsdReply::Written { .. }, _) => {}
        (other, _) => return Err(format!("write {seq} at {offset}: {other:?}")),
    }
    if model.len() < offset + data.len() {
        model.resize(offset + data.len(), 0);
    }
    model[offset..offset + data.len()].copy_from_slice(data);
    Ok(())
}

/// Reads "x" whole, and its size, and compares them with the model.
async fn read_back(world: &World, seq: u64, model: &[u8], when: &str) -> Result<(), String> {
    let ops = vec![
        ObjectOp::Stat,
        ObjectOp::Read {
            offset: 0,
            len: 1 << 20,
        },
    ];
    let (reply, data) = send(world, seq, ops, &[]).await?;
    let OsdReply::Results(results) = reply else {
        return Err(format!("reading x {when}: {reply:?}"));
    };
    match &results[..] {
        [OpResult::Stat { size, .. }, OpResult::Read { len }]
            if *size == model.len() as u64 && *len == model.len() as u64 => {}
        other => {
            return Err(format!(
                "reading x {when}: {other:?}, {} bytes expected",
                model.len()
            ))
        }
    }
    if data[..] != model[..] {
        let at = data.iter().zip(model).position(|(a, b)| a != b);
        return Err(format!(
            "x read {when} differs from what was written, first at {at:?}"
        ));
    }
    Ok(())
}

/// Six OSDs, one PG of a 4+2 pool, no faults.
fn four_plus_two() -> Config {
    Config {
        osds: 6,
        pg_num: 1,
        faults: false,
        erasure: Some((4, 2)),
        ..Config::default()
    }
}

/// Waits for the cluster to settle, then writes "x" whole with `whole`; returns it.
async fn settled_with_x(world: &World, whole: Vec<u8>) -> Result<Vec<u8>, String> {
    world.settle().await?;
    let ops = vec![ObjectOp::WriteFull {
        len: whole.len() as u64,
    }];
    match send(world, 1, ops, &whole).await? {
        (OsdReply::Written { .. }, _) => Ok(whole),
        (other, _) => Err(format!("the whole write: {other:?}")),
    }
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(seed * 2 + 1) ^ (i >> 8) ^ seed) as u8)
        .collect()
}

#[test]
fn writes_inside_an_object_read_back_and_decode_around_a_crashed_data_shard() -> Result<(), String>
{
    around_a_crash(1)
}

/// The primary (shard 0) crashes: the holder of shard 1 leads, and decodes shard 0.
#[test]
fn a_new_primary_decodes_the_shard_of_the_one_that_crashed() -> Result<(), String> {
    around_a_crash(0)
}

/// Writes and reads "x", then crashes the OSD at `position` and writes and reads again.
fn around_a_crash(position: usize) -> Result<(), String> {
    simulate(1, &four_plus_two(), |world| async move {
        let whole = settled_with_x(&world, pattern(1, 40_000)).await?;
        let mut model = whole;
        // 4 KiB units, 16 KiB stripes: inside one unit, across units and a stripe, at the
        // end and past it, and a byte at the start.
        let writes = [
            (4196, 10),
            (4000, 9000),
            (15_000, 3000),
            (39_990, 5000),
            (0, 1),
        ];
        let mut seq = 2;
        for (offset, len) in writes {
            write_at(&world, seq, &mut model, offset, &pattern(seq as u32, len)).await?;
            read_back(&world, seq + 100, &model, &format!("after write {seq}")).await?;
            seq += 1;
        }
        // The OSD holding the data shard at `position` crashes and is marked down: reads
        // decode its units from the other shards, and writes go on without it.
        let lost = world.acting("x")?[position];
        world.crash(lost).await;
        world.change(&Change::OsdDown { id: lost })?;
        world.wait_serving("x").await?;
        let when = format!("with shard {position} lost");
        read_back(&world, 200, &model, &when).await?;
        for (offset, len) in [(4096 + 5, 100), (20_000, 8192), (44_000, 100)] {
            write_at(&world, seq, &mut model, offset, &pattern(seq as u32, len)).await?;
            read_back(
                &world,
                seq + 100,
                &model,
                &format!("after write {seq}, {when}"),
            )
            .await?;
            seq += 1;
        }
        // It comes back, behind: its shard of "x" is rebuilt from the others, and the PG
        // is clean again with every shard alike.
        world.restart(lost)?;
        world.settle().await?;
        world.check_shards(&["x".to_string()]).await?;
        read_back(&world, 300, &model, "once the lost shard was rebuilt").await
    })
}

/// Flips a byte in each block of the data file at `path` that holds anything; how many.
fn flip_used_blocks(path: &std::path::Path) -> Result<usize, String> {
    let mut data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut flipped = 0;
    for block in data.chunks_mut(4096) {
        if block.iter().any(|b| *b != 0) {
            block[100] ^= 0x20;
            flipped += 1;
        }
    }
    std::fs::write(path, data).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(flipped)
}

/// A byte flipped on disk in each block of a data shard: the read finds it by the store's
/// check, decodes the shard from the others and returns the right bytes, and rebuilds the
/// shard on its holder, so every shard then reads and encodes alike.
#[test]
fn a_damaged_shard_is_decoded_around_and_rebuilt_on_its_holder() -> Result<(), String> {
    simulate(1, &four_plus_two(), |world| async move {
        let whole = settled_with_x(&world, pattern(3, 40_000)).await?;
        let holder = world.acting("x")?[1];
        world.crash(holder).await;
        let flipped = flip_used_blocks(&world.store_dir(holder).join("data"))?;
        if flipped != 3 {
            return Err(format!("shard 1 is three blocks; {flipped} were flipped"));
        }
        world.restart(holder)?;
        world.settle().await?;
        read_back(&world, 2, &whole, "with shard 1 damaged").await?;
        world.check_shards(&["x".to_string()]).await?;
        read_back(&world, 3, &whole, "once shard 1 was rebuilt").await
    })
}

/// Sends one op that changes "x" without data, and the model with it.
async fn change(world: &World, seq: u64, model: &mut Vec<u8>, op: ObjectOp) -> Result<(), String> {
    match send(world, seq, vec![op.clone()], &[]).await? {
        (OsdReply::Written { .. }, _) => {}
        (other, _) => return Err(format!("{op:?}: {other:?}")),
    }
    match op {
        ObjectOp::Truncate { size } => model.resize(size as usize, 0),
        ObjectOp::Zero { offset, len } => {
            let (from, to) = (offset as usize, (offset + len) as usize);
            if model.len() < to {
                model.resize(to, 0);
            }
            model[from..to].fill(0);
        }
        other => return Err(format!("{other:?} is not a change this test makes")),
    }
    Ok(())
}

/// Truncates that cut inside a stripe, then grow, and zeros inside and past the end: each
/// reads back, every shard stays what the data encodes to (a cut stripe's rest is zeroed
/// before the shards are cut), and the object decodes without one of its data shards.
#[test]
fn zeros_and_truncates_keep_every_stripe_encoded() -> Result<(), String> {
    simulate(1, &four_plus_two(), |world| async move {
        let whole = settled_with_x(&world, pattern(5, 60_000)).await?;
        let mut model = whole;
        // 16 KiB stripes: a cut inside the second stripe, growth, zeros inside and past
        // the end, a cut at a stripe's end, then to nothing and back.
        let changes = [
            ObjectOp::Truncate { size: 20_100 },
            ObjectOp::Truncate { size: 50_000 },
            ObjectOp::Zero {
                offset: 5_000,
                len: 3_000,
            },
            ObjectOp::Zero {
                offset: 49_000,
                len: 4_000,
            },
            ObjectOp::Truncate { size: 32_768 },
            ObjectOp::Truncate { size: 0 },
            ObjectOp::Truncate { size: 10_000 },
        ];
        let mut seq = 2;
        for op in changes {
            change(&world, seq, &mut model, op.clone()).await?;
            read_back(&world, seq + 100, &model, &format!("after {op:?}")).await?;
            world.check_shards(&["x".to_string()]).await?;
            seq += 1;
        }
        write_at(&world, seq, &mut model, 9_000, &pattern(9, 3_000)).await?;
        let lost = world.acting("x")?[1];
        world.crash(lost).await;
        world.change(&Change::OsdDown { id: lost })?;
        world.wait_serving("x").await?;
        read_back(&world, 300, &model, "without shard 1").await
    })
}
