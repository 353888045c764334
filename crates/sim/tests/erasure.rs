//! Scripted runs of the simulator on an erasure-coded pool (docs/design/erasure.md, §6
//! and §8): writes inside an object, across its units and past its end, read back through
//! the shards, before and after the OSD holding one of its data shards crashes, and after
//! it comes back and its shard is rebuilt.

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
    let config = Config {
        osds: 6,
        pg_num: 1,
        faults: false,
        erasure: Some((4, 2)),
        ..Config::default()
    };
    simulate(1, &config, |world| async move {
        world.settle().await?;
        let whole = pattern(1, 40_000);
        let ops = vec![ObjectOp::WriteFull {
            len: whole.len() as u64,
        }];
        match send(&world, 1, ops, &whole).await? {
            (OsdReply::Written { .. }, _) => {}
            (other, _) => return Err(format!("the whole write: {other:?}")),
        }
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
