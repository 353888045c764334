//! Links end to end on loopback: both modes, out-of-order replies, large payloads, what a
//! capture of the wire shows, authentication failures, malformed and slow peers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::frame::{Header, Kind, DATA_BYTES_MAX, META_BYTES_MAX};
use crate::link;
use crate::*;

const SERVER: &str = "osd.1";
const MARKER: &[u8] = b"COFFER-MARKER-7f3a9c1e-in-transit";

#[derive(Serialize, Deserialize)]
enum Ask {
    Echo {
        delay_ms: u64,
    },
    /// Echo, the data marked as sealed by its sender both ways.
    EchoSealed,
    /// Echo, the data sealed on the way in, bound by its records (as chunks read back to a
    /// client) on the way out.
    EchoBound,
    Panic,
    OversizedReply,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Answer {
    peer: String,
    len: usize,
}

/// Accepts the entities registered with the certificate they were issued; the registry is
/// what a monitor's auth table will be.
#[derive(Default)]
struct Echo {
    registry: Mutex<HashMap<EntityName, Vec<u8>>>,
}

impl Handler for Echo {
    type Grant = ();

    fn authorize(&self, entity: &EntityName, cert: &CertificateDer<'_>) -> Result<(), String> {
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        match registry.get(entity) {
            None => Err(format!("{entity} is not a known entity")),
            Some(registered) if registered[..] != cert[..] => {
                Err(format!("{entity} presented a key that was revoked"))
            }
            Some(_) => Ok(()),
        }
    }

    async fn handle(&self, peer: Arc<Peer<()>>, request: Request) -> Reply {
        match request.decode::<Ask>() {
            Ok(Ask::Echo { delay_ms }) => {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                let answer = Answer {
                    peer: peer.entity.to_string(),
                    len: request.data.len(),
                };
                Reply::new(&answer, in_pieces(request.data))
            }
            Ok(Ask::EchoSealed) => {
                let answer = Answer {
                    peer: peer.entity.to_string(),
                    len: request.data.len(),
                };
                Reply::with(&answer, in_pieces(request.data), Segment::Open)
            }
            Ok(Ask::EchoBound) => {
                let answer = Answer {
                    peer: peer.entity.to_string(),
                    len: request.data.len(),
                };
                Reply::with(&answer, in_pieces(request.data), Segment::Bound)
            }
            Ok(Ask::Panic) => panic!("a handler bug"),
            Ok(Ask::OversizedReply) => Reply {
                meta: Bytes::from(vec![0u8; META_BYTES_MAX as usize + 1]),
                data: crate::Data::default(),
                segment: Segment::Inside,
            },
            Err(e) => panic!("undecodable request: {e}"),
        }
    }
}

/// `data` as a reply sends it in pieces (an OSD's read served from its cache): the first
/// 64 KiB in 97-byte pieces (more than one vectored write takes, most of them ending inside
/// a GCM block), the rest in one. The receiver must get it whole, in every mode and segment.
fn in_pieces(data: Bytes) -> crate::Data {
    const SMALL: usize = 97;
    let small_end = data.len().min(64 << 10);
    let mut pieces: Vec<Bytes> = (0..small_end)
        .step_by(SMALL)
        .map(|at| data.slice(at..(at + SMALL).min(small_end)))
        .collect();
    pieces.push(data.slice(small_end..));
    pieces.into_iter().collect()
}

struct Fixture {
    ca: ClusterCa,
    echo: Arc<Echo>,
    server: Server,
    limits: Limits,
}

fn test_limits() -> Limits {
    Limits {
        handshake_timeout: Duration::from_secs(2),
        frame_timeout: Duration::from_secs(1),
        in_flight_max: 64,
    }
}

fn name(text: &str) -> EntityName {
    text.parse().expect("valid entity name")
}

async fn fixture(modes: impl Into<ModePolicy>) -> Fixture {
    let ca = ClusterCa::generate("test-cluster").expect("authority");
    let echo = Arc::new(Echo::default());
    let limits = test_limits();
    let identity = ca.issue(&name(SERVER)).expect("issue");
    let endpoint = Endpoint::new(&identity, limits).expect("endpoint");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = endpoint
        .serve(listener, modes, echo.clone())
        .expect("serve");
    Fixture {
        ca,
        echo,
        server,
        limits,
    }
}

impl Fixture {
    fn addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// A client identity, registered with the server unless `register` is false.
    fn client(&self, entity: &str, register: bool) -> Endpoint {
        let identity = self.ca.issue(&name(entity)).expect("issue");
        if register {
            self.register(&identity);
        }
        Endpoint::new(&identity, self.limits).expect("endpoint")
    }

    fn register(&self, identity: &Identity) {
        let mut registry = self.echo.registry.lock().unwrap_or_else(|p| p.into_inner());
        registry.insert(identity.entity().clone(), identity.cert().to_vec());
    }

    async fn connect(&self, client: &Endpoint, mode: Mode) -> Connection {
        client
            .connect(self.addr(), &name(SERVER), &[mode])
            .await
            .expect("connect")
    }
}

async fn echo(conn: &Connection, data: Bytes, delay_ms: u64) -> Result<(Answer, Bytes), CallError> {
    conn.request(&Ask::Echo { delay_ms }, data).await
}

fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_round_trip_in_both_modes_up_to_the_data_limit() {
    let fx = fixture(vec![Mode::Secure, Mode::Crc]).await;
    let client = fx.client("client.admin", true);
    for mode in [Mode::Secure, Mode::Crc] {
        let conn = fx.connect(&client, mode).await;
        assert_eq!(conn.mode(), mode);
        assert_eq!(conn.peer(), &name(SERVER));
        for len in [0, 1, 4096, 4 << 20, DATA_BYTES_MAX as usize] {
            let data = pattern(len, len as u8);
            let (answer, back) = echo(&conn, data.clone(), 0).await.expect("echo");
            assert_eq!(
                answer,
                Answer {
                    peer: "client.admin".into(),
                    len
                }
            );
            assert!(back == data, "{mode}: {len} bytes came back altered");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_complete_out_of_order_on_one_link() {
    let fx = fixture(vec![Mode::Secure]).await;
    let conn = fx
        .connect(&fx.client("client.admin", true), Mode::Secure)
        .await;
    let finished = Arc::new(Mutex::new(Vec::new()));
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..32u64 {
        let conn = conn.clone();
        let finished = finished.clone();
        calls.spawn(async move {
            let data = pattern(1000 + i as usize, i as u8);
            // The first request sent is the slowest to answer.
            let (answer, back) = echo(&conn, data.clone(), 20 * (32 - i))
                .await
                .expect("echo");
            assert_eq!(answer.len, data.len());
            assert!(back == data, "request {i} got another request's data");
            finished.lock().unwrap_or_else(|p| p.into_inner()).push(i);
        });
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    while let Some(joined) = calls.join_next().await {
        joined.expect("call task");
    }
    let order = finished.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(order.len(), 32);
    // The last request (answered after 20 ms) finishes before the first (640 ms): a margin
    // that a busy machine's scheduling does not erase, unlike the order of the whole list.
    let at = |i: u64| order.iter().position(|&done| done == i);
    assert!(
        at(31) < at(0),
        "the last request waited for the first: {order:?}"
    );
}

/// A TCP relay that records every byte in both directions, as a capture of the link would.
async fn recording_proxy(target: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = TcpStream::connect(target).await else {
                return;
            };
            let (in_read, in_write) = inbound.into_split();
            let (out_read, out_write) = outbound.into_split();
            tokio::spawn(relay(in_read, out_write, record.clone()));
            tokio::spawn(relay(out_read, in_write, record.clone()));
        }
    });
    (addr, seen)
}

async fn relay(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    seen: Arc<Mutex<Vec<u8>>>,
) {
    let mut buf = vec![0u8; 64 << 10];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        // Recorded before it is passed on: whatever a peer has received is in the capture.
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(&buf[..n]);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    // The other side may be gone already.
    let _ = to.shutdown().await;
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_shows_the_marker_in_crc_mode_and_never_in_secure_mode() {
    let fx = fixture(vec![Mode::Secure, Mode::Crc]).await;
    let client = fx.client("client.admin", true);
    for mode in [Mode::Crc, Mode::Secure] {
        let (proxy, seen) = recording_proxy(fx.addr()).await;
        let conn = client
            .connect(proxy, &name(SERVER), &[mode])
            .await
            .expect("connect");
        let mut data = pattern(256 << 10, 9).to_vec();
        data[100_000..100_000 + MARKER.len()].copy_from_slice(MARKER);
        let (_, back) = echo(&conn, Bytes::from(data), 0).await.expect("echo");
        assert!(contains(&back, MARKER));
        drop(conn);
        let captured = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert!(
            captured.len() > 2 * (256 << 10),
            "{mode}: capture too short"
        );
        let visible = contains(&captured, MARKER);
        match mode {
            Mode::Crc => assert!(visible, "crc mode: the capture should show the marker"),
            Mode::Secure => assert!(
                !visible,
                "secure mode: the marker crossed the wire in clear"
            ),
        }
        if mode == Mode::Secure {
            // TLS 1.3 encrypts the certificates too, so not even the names cross in clear.
            assert!(
                !contains(&captured, b"client.admin"),
                "secure mode: the client's name leaked"
            );
        }
    }
}

/// A segment its sender marks as sealed (chunks sealed at the edge) crosses a secure link as
/// it is, both ways, while the header and metadata stay encrypted; so does a reply's segment
/// bound by its records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_segment_travels_open_and_the_rest_stays_encrypted() {
    let fx = fixture(vec![Mode::Secure]).await;
    let client = fx.client("client.admin", true);
    for ask in [Ask::EchoSealed, Ask::EchoBound] {
        let (proxy, seen) = recording_proxy(fx.addr()).await;
        let conn = client
            .connect(proxy, &name(SERVER), &[Mode::Secure])
            .await
            .expect("connect");
        let mut data = pattern(64 << 10, 5).to_vec();
        data[1000..1000 + MARKER.len()].copy_from_slice(MARKER);
        let meta = Bytes::from(postcard::to_allocvec(&ask).expect("encode"));
        let reply = conn
            .call_with(meta, Bytes::from(data.clone()), crate::DataSegment::Sealed)
            .await
            .expect("sealed echo");
        let answer: Answer = reply.decode().expect("answer");
        assert_eq!(answer.peer, "client.admin");
        assert_eq!(&reply.data[..], &data[..]);
        drop(conn);
        let captured = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let sightings = captured
            .windows(MARKER.len())
            .filter(|w| *w == MARKER)
            .count();
        assert_eq!(sightings, 2, "the open segment should cross once each way");
        assert!(
            !contains(&captured, b"client.admin"),
            "the reply's metadata crossed in clear"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_without_a_valid_current_key_are_refused_and_the_server_carries_on() {
    let fx = fixture(vec![Mode::Secure, Mode::Crc]).await;
    let server = name(SERVER);

    let stranger_ca = ClusterCa::generate("another-cluster").expect("authority");
    let stranger = Endpoint::new(
        &stranger_ca.issue(&name("client.admin")).expect("issue"),
        fx.limits,
    )
    .expect("endpoint");
    let err = stranger
        .connect(fx.addr(), &server, &[Mode::Secure])
        .await
        .err();
    assert!(
        matches!(err, Some(ConnectError::Tls(_))),
        "foreign authority: {err:?}"
    );

    let unknown = fx.client("client.unknown", false);
    let err = unknown
        .connect(fx.addr(), &server, &[Mode::Secure])
        .await
        .err();
    assert!(
        matches!(&err, Some(ConnectError::Refused(r)) if r.contains("not a known entity")),
        "unregistered: {err:?}"
    );

    let old = fx.client("client.bob", true);
    let _new = fx.client("client.bob", true);
    let err = old.connect(fx.addr(), &server, &[Mode::Crc]).await.err();
    assert!(
        matches!(&err, Some(ConnectError::Refused(r)) if r.contains("revoked")),
        "replaced key: {err:?}"
    );

    let wrong_server = fx.client("client.admin", true);
    let err = wrong_server
        .connect(fx.addr(), &name("osd.2"), &[Mode::Secure])
        .await
        .err();
    assert!(
        matches!(err, Some(ConnectError::Tls(_))),
        "server is not osd.2: {err:?}"
    );

    let good = fx
        .connect(&fx.client("client.admin", true), Mode::Secure)
        .await;
    echo(&good, pattern(10, 1), 0)
        .await
        .expect("the server still serves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_picks_the_mode_by_its_policy() {
    let fx = fixture(vec![Mode::Secure]).await;
    let client = fx.client("client.admin", true);
    let err = client
        .connect(fx.addr(), &name(SERVER), &[Mode::Crc])
        .await
        .err();
    assert!(
        matches!(&err, Some(ConnectError::Refused(r)) if r.contains("no common link mode")),
        "{err:?}"
    );
    let conn = client
        .connect(fx.addr(), &name(SERVER), &[Mode::Crc, Mode::Secure])
        .await
        .expect("connect");
    assert_eq!(conn.mode(), Mode::Secure);
}

/// Ceph's ms_client_mode and ms_cluster_mode: with secure for clients and crc between
/// daemons, a client that offers only crc is refused, while an OSD gets its crc link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_and_daemons_are_held_to_their_own_modes() {
    let fx = fixture(ModePolicy {
        clients: vec![Mode::Secure],
        daemons: vec![Mode::Crc],
    })
    .await;
    let client = fx.client("client.admin", true);
    let err = client
        .connect(fx.addr(), &name(SERVER), &[Mode::Crc])
        .await
        .err();
    assert!(
        matches!(&err, Some(ConnectError::Refused(r)) if r.contains("no common link mode") && r.contains("client")),
        "{err:?}"
    );
    let conn = client
        .connect(fx.addr(), &name(SERVER), &[Mode::Crc, Mode::Secure])
        .await
        .expect("a client offering secure");
    assert_eq!(conn.mode(), Mode::Secure);
    let osd = fx.client("osd.7", true);
    let conn = osd
        .connect(fx.addr(), &name(SERVER), &[Mode::Secure, Mode::Crc])
        .await
        .expect("an OSD offering crc");
    assert_eq!(conn.mode(), Mode::Crc);
    let err = osd
        .connect(fx.addr(), &name(SERVER), &[Mode::Secure])
        .await
        .err();
    assert!(
        matches!(&err, Some(ConnectError::Refused(r)) if r.contains("no common link mode")),
        "{err:?}"
    );
}

#[test]
fn a_keyring_whose_certificate_names_someone_else_is_refused() {
    let ca = ClusterCa::generate("test-cluster").expect("authority");
    let pem = ca.issue(&name("client.alice")).expect("issue").to_pem();
    let loaded = Identity::from_pem(name("client.alice"), &pem).expect("own keyring");
    assert_eq!(loaded.entity(), &name("client.alice"));
    let err = Identity::from_pem(name("client.admin"), &pem).err();
    assert!(matches!(&err, Some(CertError::Keyring(m)) if m.contains("not for client.admin")));
    let err = Identity::from_pem(name("client.alice"), &pem[..pem.len() / 2]).err();
    assert!(err.is_some(), "a truncated keyring loaded");

    let restored =
        ClusterCa::from_pem("test-cluster", &ca.key_pem(), &ca.cert_pem()).expect("restore");
    let later = restored
        .issue(&name("osd.4"))
        .expect("issue from restored authority");
    assert!(Identity::from_pem(name("osd.4"), &later.to_pem()).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_failures_and_oversized_messages_get_errors_not_hangs() {
    let fx = fixture(vec![Mode::Crc]).await;
    let conn = fx
        .connect(&fx.client("client.admin", true), Mode::Crc)
        .await;
    let err = conn
        .request::<_, Answer>(&Ask::Panic, Bytes::new())
        .await
        .err();
    assert!(
        matches!(&err, Some(CallError::Refused(r)) if r.contains("handler failed")),
        "{err:?}"
    );
    let err = conn
        .request::<_, Answer>(&Ask::OversizedReply, Bytes::new())
        .await
        .err();
    assert!(
        matches!(&err, Some(CallError::Refused(r)) if r.contains("frame limits")),
        "{err:?}"
    );
    let too_big = Bytes::from(vec![0u8; DATA_BYTES_MAX as usize + 1]);
    let err = echo(&conn, too_big, 0).await.err();
    assert!(matches!(err, Some(CallError::TooLarge { .. })), "{err:?}");
    echo(&conn, pattern(100, 3), 0)
        .await
        .expect("the link still works");

    drop(fx.server);
    let err = tokio::time::timeout(Duration::from_secs(5), echo(&conn, pattern(1, 1), 0))
        .await
        .expect("a call on a dead link must not hang")
        .err();
    assert!(matches!(err, Some(CallError::Closed(_))), "{err:?}");
    assert!(conn.is_closed());
}

/// Raw crc frame bytes, as a broken or hostile peer might send them.
fn frame_bytes(kind: Kind, meta: &[u8], data: &[u8]) -> Vec<u8> {
    let (meta, data) = (Bytes::copy_from_slice(meta), Bytes::copy_from_slice(data));
    let body = crate::Data::from(data.clone());
    let header = Header::for_body(kind, 1, &meta, &body, Mode::Crc, Segment::Inside);
    [&header.encode()[..], &meta, &data].concat()
}

/// The open segment of a secure frame carrying `payload-sealed-chunk`: its last 20 bytes.
fn open_segment(bytes: &mut [u8]) -> &mut [u8] {
    let at = bytes.len() - 20;
    &mut bytes[at..]
}

/// A secure frame protected with the link's own key, as the next frame of that link.
fn protected_bytes(
    raw: &mut link::Link,
    kind: Kind,
    meta: &[u8],
    data: &[u8],
    segment: Segment,
) -> Vec<u8> {
    let (meta, data) = (
        Bytes::copy_from_slice(meta),
        crate::Data::from(Bytes::copy_from_slice(data)),
    );
    let header = Header::for_body(kind, 1, &meta, &data, Mode::Secure, segment);
    let frame = crate::outbox::Outgoing {
        header,
        meta,
        data,
        check: None,
    };
    let key = raw
        .writer
        .key
        .as_mut()
        .expect("a secure link has a frame key");
    crate::outbox::protect(key, &frame)
}

/// Waits for the server to close the link: end of file or a reset.
async fn closed_by_server(link: &mut link::Link, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    let wait = async {
        loop {
            match link.reader.stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(within, wait).await.is_ok()
}

/// Sends `bytes` on a fresh raw link (after `prepare` made them from it) and checks that the
/// server closes that link, and only that link.
async fn expect_closed(
    fx: &Fixture,
    client: &Endpoint,
    mode: Mode,
    case: &str,
    keep_open: bool,
    prepare: impl FnOnce(&mut link::Link) -> Vec<u8>,
) {
    let mut raw = link::connect(client, fx.addr(), &name(SERVER), &[mode])
        .await
        .expect("connect");
    let bytes = prepare(&mut raw);
    raw.writer.stream.write_all(&bytes).await.expect("write");
    raw.writer.stream.flush().await.expect("flush");
    if !keep_open {
        raw.writer.stream.shutdown().await.expect("shutdown");
    }
    // The frame timeout is 1 s; a stalled frame must be cut within a few seconds.
    assert!(
        closed_by_server(&mut raw, Duration::from_secs(5)).await,
        "{mode}, {case}: the server kept the link open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_truncated_and_stalled_frames_close_only_that_link() {
    let fx = fixture(vec![Mode::Secure, Mode::Crc]).await;
    let client = fx.client("client.admin", true);
    let ask = postcard::to_allocvec(&Ask::Echo { delay_ms: 0 }).expect("encode");
    let good = frame_bytes(Kind::Request, &ask, b"payload");
    let mut bad_magic = good.clone();
    bad_magic[0] ^= 0xff;
    let mut bad_header_crc = good.clone();
    bad_header_crc[30] ^= 1;
    let mut oversized = Header::for_body(
        Kind::Request,
        1,
        &Bytes::new(),
        &crate::Data::default(),
        Mode::Crc,
        Segment::Inside,
    );
    oversized.data_len = DATA_BYTES_MAX + 1;
    let mut bad_body = good.clone();
    let last = bad_body.len() - 1;
    bad_body[last] ^= 1;
    let crc_cases: Vec<(&str, Vec<u8>, bool)> = vec![
        ("bad magic", bad_magic, false),
        ("bad header checksum", bad_header_crc, false),
        ("oversized data segment", oversized.encode().to_vec(), false),
        (
            "a reply sent to a server",
            frame_bytes(Kind::Reply, &ask, b""),
            false,
        ),
        (
            "truncated, then closed",
            good[..good.len() - 3].to_vec(),
            false,
        ),
        (
            "truncated, then stalled",
            good[..good.len() - 3].to_vec(),
            true,
        ),
        ("bad body checksum", bad_body, false),
    ];
    for (case, bytes, keep_open) in crc_cases {
        expect_closed(&fx, &client, Mode::Crc, case, keep_open, |_| bytes).await;
    }

    // Secure frames, each made with the raw link's own key, then broken.
    let secure = Mode::Secure;
    let request = |raw: &mut link::Link, segment: Segment| {
        protected_bytes(raw, Kind::Request, &ask, b"payload-sealed-chunk", segment)
    };
    expect_closed(
        &fx,
        &client,
        secure,
        "a flipped protected byte",
        false,
        |raw| {
            let mut bytes = request(raw, Segment::Inside);
            bytes[12] ^= 1;
            bytes
        },
    )
    .await;
    expect_closed(
        &fx,
        &client,
        secure,
        "an altered open segment",
        false,
        |raw| {
            let mut bytes = request(raw, Segment::Open);
            open_segment(&mut bytes)[0] ^= 1;
            bytes
        },
    )
    .await;
    expect_closed(
        &fx,
        &client,
        secure,
        "a swapped open segment",
        false,
        |raw| {
            let mut bytes = request(raw, Segment::Open);
            open_segment(&mut bytes).copy_from_slice(b"another sealed chunk");
            bytes
        },
    )
    .await;
    expect_closed(&fx, &client, secure, "a replayed frame", false, |raw| {
        let bytes = request(raw, Segment::Open);
        [&bytes[..], &bytes[..]].concat()
    })
    .await;
    expect_closed(
        &fx,
        &client,
        secure,
        "a segment moved to a later frame",
        false,
        |raw| {
            let first = protected_bytes(
                raw,
                Kind::Request,
                &ask,
                b"another-sealed-chunk",
                Segment::Open,
            );
            let moved = open_segment(&mut first.clone()).to_vec();
            let mut second = request(raw, Segment::Open);
            open_segment(&mut second).copy_from_slice(&moved);
            [&first[..], &second[..]].concat()
        },
    )
    .await;
    expect_closed(
        &fx,
        &client,
        secure,
        "lengths changed in the clear",
        false,
        |raw| {
            let mut bytes = request(raw, Segment::Open);
            bytes[0] = bytes[0].wrapping_add(4);
            bytes[4] = bytes[4].wrapping_sub(4);
            bytes
        },
    )
    .await;
    expect_closed(
        &fx,
        &client,
        secure,
        "an oversized open segment",
        false,
        |_| {
            [
                &64u32.to_le_bytes()[..],
                &(DATA_BYTES_MAX + 1).to_le_bytes()[..],
            ]
            .concat()
        },
    )
    .await;
    expect_closed(
        &fx,
        &client,
        secure,
        "a reply sent to a server",
        false,
        |raw| protected_bytes(raw, Kind::Reply, &ask, b"", Segment::Inside),
    )
    .await;
    expect_closed(
        &fx,
        &client,
        secure,
        "a request whose data is bound only by chunk records",
        false,
        |raw| request(raw, Segment::Bound),
    )
    .await;
    for (case, keep_open) in [
        ("truncated, then closed", false),
        ("truncated, then stalled", true),
    ] {
        expect_closed(&fx, &client, secure, case, keep_open, |raw| {
            let bytes = request(raw, Segment::Open);
            bytes[..bytes.len() - 3].to_vec()
        })
        .await;
    }
    for mode in [Mode::Secure, Mode::Crc] {
        let conn = fx.connect(&client, mode).await;
        echo(&conn, pattern(64, 2), 0)
            .await
            .expect("the server still serves");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_too_slow_to_handshake_is_cut_off_on_both_sides() {
    let fx = fixture(vec![Mode::Secure]).await;
    let mut silent = TcpStream::connect(fx.addr()).await.expect("connect");
    let mut buf = [0u8; 16];
    let outcome = tokio::time::timeout(Duration::from_secs(6), silent.read(&mut buf)).await;
    assert!(
        matches!(outcome, Ok(Ok(0)) | Ok(Err(_))),
        "server kept a silent peer: {outcome:?}"
    );

    let mute_server = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let mute_addr = mute_server.local_addr().expect("addr");
    let _held = tokio::spawn(async move { mute_server.accept().await.map(|(s, _)| s) });
    let client = fx.client("client.admin", true);
    let err = client
        .connect(mute_addr, &name(SERVER), &[Mode::Secure])
        .await
        .err();
    assert!(matches!(err, Some(ConnectError::Timeout(_))), "{err:?}");
}

/// A connection over a loopback socket whose other end accepts and never reads nor
/// answers, and the socket's file descriptor on the connection's side.
async fn silent_peer_connection() -> (Connection, TcpStream, std::os::fd::RawFd) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let client = client.expect("connected");
    let fd = std::os::fd::AsRawFd::as_raw_fd(&client);
    let (read_half, write_half) = client.into_split();
    let (meter_in, meter_out) = crate::metrics::link(Mode::Crc);
    let link = link::Link {
        reader: link::FrameReader {
            stream: Box::new(read_half),
            key: None,
            meter: meter_in,
        },
        writer: link::FrameWriter {
            stream: write_half,
            key: None,
            meter: meter_out,
        },
        mode: Mode::Crc,
    };
    let conn = Connection::start(link, name("osd.7"), test_limits());
    (conn, accepted.expect("accepted").0, fd)
}

/// Makes every later write on `fd` fail (EPIPE) while its reads go on.
fn break_writes(fd: std::os::fd::RawFd) {
    // SAFETY: `fd` is the connection's open socket; shutting its write side down changes
    // no memory and leaves the descriptor valid.
    let done = unsafe { libc::shutdown(fd, libc::SHUT_WR) };
    assert_eq!(done, 0, "shutdown: {}", std::io::Error::last_os_error());
}

/// A socket write that fails, whether a lone call wrote it itself or the link's writer
/// task did, fails every call waiting on the connection at once (not when a reply would
/// have come) and every later one, with the write's error as the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_socket_write_fails_every_waiting_call_and_the_later_ones() {
    let within = Duration::from_secs(5);
    let failed_writing = |outcome: Result<Incoming, CallError>| match outcome {
        Err(CallError::Closed(reason)) => assert!(reason.starts_with("writing"), "{reason}"),
        other => panic!("expected the write's failure, got {other:?}"),
    };

    // A lone call: its caller writes the request itself, and that write fails.
    let (conn, _peer, fd) = silent_peer_connection().await;
    break_writes(fd);
    let lone = tokio::time::timeout(within, conn.call(Bytes::from_static(b"one"), Bytes::new()))
        .await
        .expect("the lone call failed instead of waiting");
    failed_writing(lone);
    assert!(conn.is_closed());

    // A call in flight when a queued request's write fails (the writer task writes it, as
    // another call is in flight).
    let (conn, _peer, fd) = silent_peer_connection().await;
    let first = tokio::spawn({
        let conn = conn.clone();
        async move { conn.call(Bytes::from_static(b"first"), Bytes::new()).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!first.is_finished(), "the silent peer answered nothing");
    break_writes(fd);
    let second = tokio::time::timeout(
        within,
        conn.call(Bytes::from_static(b"second"), pattern(100_000, 2)),
    )
    .await
    .expect("the queued call failed instead of waiting");
    failed_writing(second);
    let first = tokio::time::timeout(within, first)
        .await
        .expect("the call in flight failed with the link")
        .expect("its task");
    failed_writing(first);
    let later = tokio::time::timeout(
        within,
        conn.call(Bytes::from_static(b"later"), Bytes::new()),
    )
    .await
    .expect("a later call fails at once");
    failed_writing(later);
}

/// Polls `call` once, as a primary starts its replicas' calls before it applies a write.
fn start(call: &mut std::pin::Pin<Box<impl std::future::Future>>) {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(
        call.as_mut().poll(&mut context).is_pending(),
        "the silent peer answered nothing"
    );
}

/// A lone call's request is written by its caller, so the link's writer task has nothing
/// to do; a request made while another call is in flight waits for that task (which, on
/// this one thread, runs only once the caller lets it) and is written once it has run.
#[tokio::test(flavor = "current_thread")]
async fn the_writer_is_busy_only_while_a_request_waits_for_it() {
    let (conn, _peer, _fd) = silent_peer_connection().await;
    assert!(!conn.writer_busy(), "an idle link");
    let mut lone = Box::pin(conn.call(Bytes::from_static(b"lone"), Bytes::new()));
    start(&mut lone);
    assert!(!conn.writer_busy(), "the lone call wrote its own request");
    let mut queued = Box::pin(conn.call(Bytes::from_static(b"queued"), Bytes::new()));
    start(&mut queued);
    assert!(
        conn.writer_busy(),
        "the second request waits for the writer task"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while conn.writer_busy() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the writer task never wrote the queued request"
        );
        tokio::task::yield_now().await;
    }
}
