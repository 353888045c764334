//! The NBD export under failures: an OSD killed with -9 during a write load through NBD loses
//! nothing that was flushed; malformed, truncated and out-of-range requests get the NBD error
//! a client expects or a clean disconnect, and neither crash the server nor corrupt the image.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use block::image::Access;
use block::{Extent, Image};
use common::{all_clean, serial, LocalCluster};

const MIB: u64 = 1 << 20;

/// The byte qemu-io's `write -P` fills block `n` with.
fn fill(n: u64) -> u8 {
    (n % 251 + 1) as u8
}

#[test]
fn flushed_writes_survive_an_osd_killed_during_the_load() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &[]);
    cluster.wait_nbd();
    let uri = cluster.nbd_uri();
    let blocks = 320u64;
    // One qemu-io session: 1 MiB writes, each with its own fill byte, then a flush. It
    // succeeds only if every write and the flush were acknowledged.
    let mut args = vec!["-f".to_string(), "raw".to_string()];
    for n in 0..blocks {
        args.push("-c".into());
        args.push(format!("write -P {} {} 1M", fill(n), n * MIB));
    }
    args.extend(["-c".into(), "flush".into(), uri.clone()]);
    let mut load = Command::new("qemu-io")
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("qemu-io");
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        load.try_wait().expect("qemu-io status").is_none(),
        "the load must still be running when the OSD is killed"
    );
    cluster.kill(1, libc::SIGKILL);
    let output = load.wait_with_output().expect("qemu-io finishes");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && !stdout.contains("failed"),
        "every write and the flush must succeed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    cluster.restart_osd(1);
    cluster.wait_for("every PG clean again", Duration::from_secs(90), all_clean);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let admin = cluster.admin().await;
        let pool = admin.pool("data").await.expect("pool");
        let disk = Image::open(&pool, "disk", Access::ReadOnly)
            .await
            .expect("open");
        for n in 0..blocks {
            let extents = disk.read(n * MIB, MIB).await.expect("read");
            let all = extents.iter().all(|e| match e {
                Extent::Data(bytes) => bytes.iter().all(|b| *b == fill(n)),
                Extent::Zeros(_) => false,
            });
            assert!(all, "block {n} does not hold what was flushed");
        }
    });
}

/// A minimal NBD client for malformed traffic: fixed newstyle, `GO` to the default export,
/// simple replies.
struct RawClient {
    stream: TcpStream,
    size: u64,
}

impl RawClient {
    fn connect(addr: &str) -> RawClient {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut greeting = [0u8; 18];
        stream.read_exact(&mut greeting).expect("greeting");
        assert_eq!(&greeting[..8], b"NBDMAGIC");
        assert_eq!(&greeting[8..16], b"IHAVEOPT");
        stream.write_all(&3u32.to_be_bytes()).expect("client flags");
        let mut go = Vec::new();
        go.extend_from_slice(b"IHAVEOPT");
        go.extend_from_slice(&7u32.to_be_bytes());
        go.extend_from_slice(&6u32.to_be_bytes());
        go.extend_from_slice(&0u32.to_be_bytes());
        go.extend_from_slice(&0u16.to_be_bytes());
        stream.write_all(&go).expect("GO");
        let mut size = 0;
        loop {
            let mut header = [0u8; 20];
            stream.read_exact(&mut header).expect("option reply");
            let kind = u32::from_be_bytes(header[12..16].try_into().expect("4"));
            let len = u32::from_be_bytes(header[16..20].try_into().expect("4")) as usize;
            let mut data = vec![0u8; len];
            stream.read_exact(&mut data).expect("option data");
            match kind {
                1 => break,
                3 if data[..2] == [0, 0] => {
                    size = u64::from_be_bytes(data[2..10].try_into().expect("8"));
                }
                3 => {}
                other => panic!("GO refused: reply type {other:#x}"),
            }
        }
        RawClient { stream, size }
    }

    fn send(&mut self, kind: u16, flags: u16, cookie: u64, offset: u64, len: u32, payload: &[u8]) {
        let mut request = Vec::with_capacity(28 + payload.len());
        request.extend_from_slice(&0x2560_9513u32.to_be_bytes());
        request.extend_from_slice(&flags.to_be_bytes());
        request.extend_from_slice(&kind.to_be_bytes());
        request.extend_from_slice(&cookie.to_be_bytes());
        request.extend_from_slice(&offset.to_be_bytes());
        request.extend_from_slice(&len.to_be_bytes());
        request.extend_from_slice(payload);
        self.stream.write_all(&request).expect("send");
    }

    /// The next simple reply: (cookie, error).
    fn reply(&mut self) -> (u64, u32) {
        let mut header = [0u8; 16];
        self.stream.read_exact(&mut header).expect("reply");
        assert_eq!(
            header[..4],
            0x6744_6698u32.to_be_bytes(),
            "simple reply magic"
        );
        let error = u32::from_be_bytes(header[4..8].try_into().expect("4"));
        let cookie = u64::from_be_bytes(header[8..16].try_into().expect("8"));
        (cookie, error)
    }

    /// The server closes the connection (reading gives end of file, not a reply).
    fn expect_closed(&mut self) {
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("the server should have closed the connection: {other:?}"),
        }
    }
}

const READ: u16 = 0;
const WRITE: u16 = 1;
const DISC: u16 = 2;
const FLUSH: u16 = 3;
const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;

#[test]
fn malformed_and_truncated_requests_get_errors_or_a_clean_disconnect() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &[]);
    cluster.wait_nbd();
    let addr = cluster.conf().nbd.expect("nbd").listen;

    // Negotiation: a client without fixed newstyle, and one sending an oversized option, are
    // disconnected; an unknown export is an error the client can go on from.
    for bad in [0u32.to_be_bytes().to_vec(), {
        let mut v = 1u32.to_be_bytes().to_vec();
        v.extend_from_slice(b"IHAVEOPT");
        v.extend_from_slice(&7u32.to_be_bytes());
        v.extend_from_slice(&(1u32 << 30).to_be_bytes());
        v
    }] {
        let mut stream = TcpStream::connect(&addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut greeting = [0u8; 18];
        stream.read_exact(&mut greeting).expect("greeting");
        stream.write_all(&bad).expect("send");
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        assert!(rest.is_empty(), "no reply, just a disconnect: {rest:?}");
    }

    let mut client = RawClient::connect(&addr);
    let size = client.size;
    assert_eq!(size, 4 << 30);
    client.send(WRITE, 0, 1, 4096, 8, b"ABCDEFGH");
    assert_eq!(client.reply(), (1, 0));
    // Out of range: a read past the end is invalid; a write past the end is out of space,
    // and its payload is consumed so the connection goes on.
    client.send(READ, 0, 2, size - 4, 8, &[]);
    assert_eq!(client.reply(), (2, EINVAL));
    client.send(WRITE, 0, 3, size - 4, 8, b"PASTEND!");
    assert_eq!(client.reply(), (3, ENOSPC));
    client.send(READ, 0, 4, u64::MAX - 2, 8, &[]);
    assert_eq!(client.reply(), (4, EINVAL), "an offset that overflows");
    client.send(99, 0, 5, 0, 0, &[]);
    assert_eq!(client.reply(), (5, EINVAL), "an unknown command");
    client.send(READ, 0, 6, 0, 0, &[]);
    assert_eq!(client.reply(), (6, EINVAL), "a zero-length read");
    client.send(FLUSH, 0, 7, 0, 0, &[]);
    assert_eq!(client.reply(), (7, 0));
    client.send(READ, 0, 8, 4096, 8, &[]);
    assert_eq!(client.reply(), (8, 0));
    let mut data = [0u8; 8];
    client.stream.read_exact(&mut data).expect("read data");
    assert_eq!(&data, b"ABCDEFGH");

    // A bad magic cannot be followed: the server disconnects.
    client.stream.write_all(&[0xffu8; 28]).expect("garbage");
    client.expect_closed();

    // A write larger than the payload limit: disconnect.
    let mut client = RawClient::connect(&addr);
    client.send(WRITE, 0, 9, 0, u32::MAX, &[]);
    client.expect_closed();

    // A client that leaves in the middle of a write's payload: the write is dropped whole.
    let mut client = RawClient::connect(&addr);
    client.send(WRITE, 0, 10, 1 << 20, 4096, &[0x5a; 1000]);
    drop(client);

    // DISC after a write: the write is answered first, then the server closes.
    let mut client = RawClient::connect(&addr);
    client.send(WRITE, 0, 11, 8192, 4, b"WXYZ");
    client.send(DISC, 0, 12, 0, 0, &[]);
    assert_eq!(client.reply(), (11, 0));
    client.expect_closed();

    // The server still serves, and the image holds exactly what was acknowledged.
    let mut client = RawClient::connect(&addr);
    for (cookie, offset, expected) in [
        (13u64, 4096u64, b"ABCDEFGH".to_vec()),
        (14, 8192, b"WXYZ".to_vec()),
        (15, 1 << 20, vec![0u8; 4096]),
        (16, size - 8, vec![0u8; 8]),
    ] {
        client.send(READ, 0, cookie, offset, expected.len() as u32, &[]);
        assert_eq!(client.reply(), (cookie, 0));
        let mut got = vec![0u8; expected.len()];
        client.stream.read_exact(&mut got).expect("data");
        assert_eq!(got, expected, "at offset {offset}");
    }
    let info = Command::new("nbdinfo")
        .arg(cluster.nbd_uri())
        .output()
        .expect("nbdinfo");
    assert!(info.status.success(), "the server must still serve");
}
