//! The S3 gateway against the clients people use, each over TLS trusting only the gateway's
//! CA, each as a user made with `coffer user create`: boto3 (the suite in
//! tests/s3/boto3_suite.py: buckets, objects, metadata, ranges, copies, multipart uploads,
//! server-side encryption, listings, presigned URLs, S3 Select, web identities from a
//! Keycloak started here, error codes, and a second user kept out), aws-cli and s3cmd (whole files up and down, in parts as each client cuts them by
//! default, and encrypted by the server as each client asks for it), rclone (a tree synced
//! with checksums, then again copying nothing) and restic (a tree backed up and restored).
//! And the users themselves: one who owns a bucket cannot be removed, and once removed, its
//! keys stop working.
//!
//! The clients come from `scripts/test` (`ensure_s3_tools` in scripts/setup.sh): s3cmd,
//! rclone and restic from Debian, aws-cli and boto3 in the Python venv that COFFER_S3_VENV names,
//! Keycloak where COFFER_KEYCLOAK says (`ensure_keycloak`). Without them these
//! tests fail and say so: a test that passes without running would prove nothing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{serial, LocalCluster};
use rand::RngCore;

const MIB_BYTES: usize = 1 << 20;
/// How long a new user's keys may take to be accepted by the gateway, and a removed user's
/// keys to be refused.
const USER_CHANGE_SEEN_WITHIN: Duration = Duration::from_secs(30);
const RETRY_INTERVAL: Duration = Duration::from_millis(500);
/// The key of the cluster's KMS that SSE-KMS uses in these tests, made with `coffer kms key
/// create` before the clients run.
const KMS_KEY: &str = "suite-key";
/// The response fields of `aws s3api head-object` that describe an object's encryption.
const SSE_FIELDS: [&str; 3] = [
    "ServerSideEncryption",
    "SSEKMSKeyId",
    "SSECustomerAlgorithm",
];

/// The venv `ensure_s3_tools` makes, with aws-cli and boto3 in it.
fn s3_venv() -> PathBuf {
    let Some(venv) = std::env::var_os("COFFER_S3_VENV") else {
        panic!(
            "COFFER_S3_VENV is not set: run the S3 client tests through scripts/test, whose \
             ensure_s3_tools (scripts/setup.sh) installs s3cmd, and aws-cli and boto3 in a venv"
        );
    };
    let venv = PathBuf::from(venv);
    for program in ["bin/python", "bin/aws"] {
        assert!(
            venv.join(program).exists(),
            "{} is missing: run scripts/test (ensure_s3_tools in scripts/setup.sh makes the venv)",
            venv.join(program).display()
        );
    }
    venv
}

/// Keeps a client's child process to what the test gives it: no AWS settings of the machine
/// (credentials, profile, region, CA bundle) and no proxy, as the gateway is on loopback.
fn isolate(command: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        let name_text = name.to_string_lossy().to_ascii_lowercase();
        if name_text.starts_with("aws_") || name_text.ends_with("_proxy") {
            command.env_remove(name);
        }
    }
    command
}

/// Runs a client; panics if it cannot start.
fn run(what: &str, command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e} (scripts/test installs the S3 clients)"))
}

/// The standard output of a client that must have succeeded; both outputs if it did not.
fn succeeded(what: &str, output: Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}

/// A file of `size_bytes` random bytes, which it returns.
fn random_file(path: &Path, size_bytes: usize) -> Vec<u8> {
    let mut data = vec![0u8; size_bytes];
    rand::rng().fill_bytes(&mut data);
    std::fs::write(path, &data).expect("write the file to upload");
    data
}

/// The hex MD5 of a file, by coreutils' md5sum: what a single PUT's ETag quotes.
fn md5_hex(path: &Path) -> String {
    let stdout = succeeded("md5sum", run("md5sum", Command::new("md5sum").arg(path)));
    stdout
        .split_whitespace()
        .next()
        .expect("md5sum prints a digest")
        .to_string()
}

/// The ETag, quotes included, of `data` uploaded in parts of `part_size_bytes` (the last one
/// shorter): the hex MD5 of the parts' binary MD5s one after the other, then "-" and the
/// number of parts, as S3 makes it. The MD5s are md5sum's, over files in `dir`.
fn multipart_etag(dir: &Path, data: &[u8], part_size_bytes: usize) -> String {
    let mut digests = Vec::new();
    let parts = data.chunks(part_size_bytes);
    let count = parts.len();
    for part in parts {
        let path = dir.join("etag-part");
        std::fs::write(&path, part).expect("write a part to digest");
        let hex = md5_hex(&path);
        for at in (0..hex.len()).step_by(2) {
            let byte = u8::from_str_radix(&hex[at..at + 2], 16).expect("md5sum prints hex");
            digests.push(byte);
        }
    }
    let path = dir.join("etag-digests");
    std::fs::write(&path, &digests).expect("write the parts' digests");
    format!("\"{}-{count}\"", md5_hex(&path))
}

/// What `aws s3api head-object` prints for `key` in `bucket`, given the `extra` arguments
/// (an SSE-C key).
fn head_object(aws: &AwsCli, bucket: &str, key: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["s3api", "head-object", "--bucket", bucket, "--key", key];
    args.extend_from_slice(extra);
    let head = aws.ok(&args);
    serde_json::from_str(&head)
        .unwrap_or_else(|e| panic!("aws s3api head-object printed {head:?}: {e}"))
}

/// The encryption fields (SSE_FIELDS) of a `head-object`, `None` where absent.
fn encryption_of(head: &serde_json::Value) -> Vec<(&'static str, Option<String>)> {
    SSE_FIELDS
        .iter()
        .map(|field| (*field, head[*field].as_str().map(str::to_string)))
        .collect()
}

/// The encryption fields (SSE_FIELDS) a `head-object` must show: `given`, the others absent.
fn encryption_expected(given: &[(&str, &str)]) -> Vec<(&'static str, Option<String>)> {
    SSE_FIELDS
        .iter()
        .map(|field| {
            let value = given.iter().find(|(name, _)| name == field);
            (*field, value.map(|(_, value)| value.to_string()))
        })
        .collect()
}

/// The ETag `aws s3api head-object` reports for `key` in `bucket`, with its quotes.
fn head_etag(aws: &AwsCli, bucket: &str, key: &str, size_bytes: usize) -> String {
    let head = head_object(aws, bucket, key, &[]);
    assert_eq!(
        head["ContentLength"].as_u64(),
        Some(size_bytes as u64),
        "{head:#}"
    );
    head["ETag"]
        .as_str()
        .unwrap_or_else(|| panic!("aws s3api head-object printed no ETag: {head:#}"))
        .to_string()
}

/// The gateway `coffer up` started, once it accepts connections.
struct Gateway {
    endpoint: String,
    /// `host:port`, as s3cmd wants it.
    host: String,
    ca: PathBuf,
}

impl Gateway {
    fn of(cluster: &LocalCluster) -> Gateway {
        let endpoint = cluster.s3_endpoint();
        let host = endpoint
            .strip_prefix("https://")
            .unwrap_or_else(|| panic!("the gateway's endpoint is not https: {endpoint}"))
            .trim_end_matches('/')
            .to_string();
        cluster.wait_listening(&host);
        Gateway {
            endpoint,
            host,
            ca: cluster.s3_ca(),
        }
    }
}

/// An S3 user and its credentials, from `coffer user create NAME --json`.
struct User {
    name: String,
    access_key: String,
    secret_key: String,
}

fn create_user(cluster: &LocalCluster, name: &str) -> User {
    let printed = cluster.ok(&["user", "create", name, "--json"]);
    let json: serde_json::Value = serde_json::from_str(&printed)
        .unwrap_or_else(|e| panic!("user create --json printed {printed:?}: {e}"));
    let field = |field_name: &str| {
        json[field_name]
            .as_str()
            .unwrap_or_else(|| panic!("user create --json printed no {field_name}: {json}"))
            .to_string()
    };
    assert_eq!(field("user"), name, "{json}");
    User {
        name: name.to_string(),
        access_key: field("access_key"),
        secret_key: field("secret_key"),
    }
}

/// aws-cli as one user, with configuration files of its own: path-style addressing, and
/// otherwise aws-cli's defaults (files of 8 MiB or more go up in parts of 8 MiB and come down
/// in ranges of 8 MiB).
struct AwsCli {
    program: PathBuf,
    dir: tempfile::TempDir,
    endpoint: String,
    ca: PathBuf,
}

impl AwsCli {
    fn new(venv: &Path, gateway: &Gateway, user: &User) -> AwsCli {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = "[default]\n\
                      region = us-east-1\n\
                      output = json\n\
                      s3 =\n    addressing_style = path\n";
        std::fs::write(dir.path().join("config"), config).expect("write aws config");
        let credentials = format!(
            "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            user.access_key, user.secret_key
        );
        std::fs::write(dir.path().join("credentials"), credentials).expect("write aws credentials");
        AwsCli {
            program: venv.join("bin/aws"),
            dir,
            endpoint: gateway.endpoint.clone(),
            ca: gateway.ca.clone(),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut command = Command::new(&self.program);
        isolate(&mut command)
            .env("AWS_CONFIG_FILE", self.dir.path().join("config"))
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                self.dir.path().join("credentials"),
            )
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .arg("--endpoint-url")
            .arg(&self.endpoint)
            .arg("--ca-bundle")
            .arg(&self.ca)
            .args(args);
        run("aws", &mut command)
    }

    fn ok(&self, args: &[&str]) -> String {
        succeeded(&format!("aws {args:?}"), self.run(args))
    }

    /// Waits until the gateway accepts this user's keys: a new user reaches the gateway
    /// through the monitors, which need not be instant.
    fn wait_accepted(&self) {
        let deadline = Instant::now() + USER_CHANGE_SEEN_WITHIN;
        loop {
            let output = self.run(&["s3", "ls"]);
            if output.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the gateway still refuses a new user's keys after {USER_CHANGE_SEEN_WITHIN:?}:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
            std::thread::sleep(RETRY_INTERVAL);
        }
    }
}

/// s3cmd (Debian's) as one user, with a configuration file of its own: TLS checked against
/// the gateway's CA, path-style addressing (host_bucket without `%(bucket)s`), SigV4.
struct S3cmd {
    dir: tempfile::TempDir,
}

impl S3cmd {
    fn new(gateway: &Gateway, user: &User) -> S3cmd {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = format!(
            "[default]\n\
             access_key = {access}\n\
             secret_key = {secret}\n\
             host_base = {host}\n\
             host_bucket = {host}\n\
             bucket_location = us-east-1\n\
             use_https = True\n\
             ca_certs_file = {ca}\n\
             check_ssl_certificate = True\n\
             check_ssl_hostname = True\n\
             signature_v2 = False\n",
            access = user.access_key,
            secret = user.secret_key,
            host = gateway.host,
            ca = path_str(&gateway.ca),
        );
        std::fs::write(dir.path().join("s3cfg"), config).expect("write s3cmd config");
        S3cmd { dir }
    }

    fn ok(&self, args: &[&str]) -> (String, String) {
        let mut command = Command::new("s3cmd");
        isolate(&mut command)
            .arg("--config")
            .arg(self.dir.path().join("s3cfg"))
            .args(args);
        let output = run("s3cmd", &mut command);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (succeeded(&format!("s3cmd {args:?}"), output), stderr)
    }
}

/// Runs tests/s3/boto3_suite.py with the venv's Python, as `user`, with `other` as the user
/// who must be kept out and `kms_key` as the KMS key of its SSE-KMS checks. Its `ok:` lines
/// are printed whether it passes or not.
fn run_boto3_suite(
    cluster: &LocalCluster,
    venv: &Path,
    gateway: &Gateway,
    user: &User,
    other: &User,
    kms_key: &str,
    keycloak: &common::Keycloak,
) {
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3/boto3_suite.py");
    // Files that do not exist: botocore then reads no configuration but what the suite gives.
    let empty = tempfile::tempdir().expect("tempdir");
    let mut command = Command::new(venv.join("bin/python"));
    isolate(&mut command)
        .arg(&suite)
        .env("AWS_CONFIG_FILE", empty.path().join("config"))
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            empty.path().join("credentials"),
        )
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("S3_ENDPOINT", &gateway.endpoint)
        .env("S3_CA", &gateway.ca)
        .env("S3_ACCESS", &user.access_key)
        .env("S3_SECRET", &user.secret_key)
        .env("S3_OTHER_ACCESS", &other.access_key)
        .env("S3_OTHER_SECRET", &other.secret_key)
        .env("S3_KMS_KEY", kms_key)
        .env("S3_IDP_URL", &keycloak.url)
        .env("S3_IDP_ADMIN_USER", "admin")
        .env("S3_IDP_ADMIN_PASSWORD", &keycloak.admin_password)
        // For `coffer gw lifecycle run`.
        .env("COFFER_BIN", common::COFFER)
        .env("COFFER_CONF", &cluster.conf);
    let output = run("the boto3 suite", &mut command);
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "the boto3 suite ({}) failed ({}):\n{stdout}\n{}",
        suite.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// aws-cli's high-level commands, as a user moves files: a 40 MiB file up in five parts of
/// 8 MiB (aws-cli's default threshold and part size) and back down in ranges, unchanged;
/// listed, inspected with s3api, removed.
fn aws_cli_moves_a_file_up_and_down(aws: &AwsCli, dir: &Path) {
    let bucket = "aws-cli-bucket";
    let size_bytes = 40 * MIB_BYTES;
    let part_size_bytes = 8 * MIB_BYTES;
    let upload = dir.join("aws-up");
    let download = dir.join("aws-down");
    let data = random_file(&upload, size_bytes);
    let object = format!("s3://{bucket}/dir/forty-mib");

    aws.ok(&["s3", "mb", &format!("s3://{bucket}")]);
    aws.ok(&["s3", "cp", "--no-progress", path_str(&upload), &object]);
    let etag = head_etag(aws, bucket, "dir/forty-mib", size_bytes);
    assert!(
        etag.ends_with("-5\""),
        "aws s3 cp of 40 MiB did not upload five parts: ETag {etag}"
    );
    assert_eq!(
        etag,
        multipart_etag(dir, &data, part_size_bytes),
        "the ETag of aws s3 cp's upload is not that of parts of 8 MiB"
    );
    aws.ok(&["s3", "cp", "--no-progress", &object, path_str(&download)]);
    let got = std::fs::read(&download).expect("read the downloaded file");
    assert!(
        got == data,
        "aws s3 cp brought back {} bytes that differ",
        got.len()
    );

    let buckets = aws.ok(&["s3", "ls"]);
    assert!(buckets.contains(bucket), "aws s3 ls: {buckets}");
    let listing = aws.ok(&["s3", "ls", "--recursive", &format!("s3://{bucket}/")]);
    assert!(
        listing.contains("dir/forty-mib") && listing.contains(&size_bytes.to_string()),
        "aws s3 ls s3://{bucket}/: {listing}"
    );
    let uploads = aws.ok(&["s3api", "list-multipart-uploads", "--bucket", bucket]);
    assert!(
        !uploads.contains("UploadId"),
        "uploads left in progress after aws s3 cp: {uploads}"
    );

    aws.ok(&["s3", "rm", &object]);
    let listing = aws.ok(&["s3", "ls", "--recursive", &format!("s3://{bucket}/")]);
    assert!(listing.trim().is_empty(), "left after aws s3 rm: {listing}");
    aws.ok(&["s3", "rb", &format!("s3://{bucket}")]);
    let buckets = aws.ok(&["s3", "ls"]);
    assert!(!buckets.contains(bucket), "aws s3 ls after rb: {buckets}");
}

/// s3cmd, which signs every payload and checks the MD5 of what it sends and fetches: a
/// 20 MiB file up in four parts of 5 MiB, listed, fetched unchanged, removed. `aws`, as the
/// same user, reads the ETag the upload left.
fn s3cmd_moves_a_file_up_and_down(s3cmd: &S3cmd, aws: &AwsCli, dir: &Path) {
    let bucket = "s3cmd-bucket";
    let size_bytes = 20 * MIB_BYTES;
    let part_size_mib = 5;
    let upload = dir.join("s3cmd-up");
    let download = dir.join("s3cmd-down");
    let data = random_file(&upload, size_bytes);
    let object = format!("s3://{bucket}/twenty-mib");

    s3cmd.ok(&["mb", &format!("s3://{bucket}")]);
    s3cmd.ok(&[
        "put",
        &format!("--multipart-chunk-size-mb={part_size_mib}"),
        "--no-progress",
        path_str(&upload),
        &object,
    ]);
    let etag = head_etag(aws, bucket, "twenty-mib", size_bytes);
    assert!(
        etag.ends_with("-4\""),
        "s3cmd put of 20 MiB in parts of 5 MiB did not upload four parts: ETag {etag}"
    );
    assert_eq!(
        etag,
        multipart_etag(dir, &data, part_size_mib * MIB_BYTES),
        "the ETag of s3cmd put's upload is not that of parts of {part_size_mib} MiB"
    );
    let (buckets, _) = s3cmd.ok(&["ls"]);
    assert!(
        buckets.contains(&format!("s3://{bucket}")),
        "s3cmd ls: {buckets}"
    );
    let (listing, _) = s3cmd.ok(&["ls", &format!("s3://{bucket}")]);
    assert!(
        listing.contains(&object) && listing.contains(&size_bytes.to_string()),
        "s3cmd ls s3://{bucket}: {listing}"
    );
    let (uploads, _) = s3cmd.ok(&["multipart", &format!("s3://{bucket}")]);
    assert!(
        !uploads.contains("twenty-mib"),
        "uploads left in progress after s3cmd put: {uploads}"
    );
    let (_, warnings) = s3cmd.ok(&["get", "--no-progress", &object, path_str(&download)]);
    // s3cmd only warns when what it fetched does not match the MD5 it recorded at upload
    // (in x-amz-meta-s3cmd-attrs, as a multipart ETag is not an MD5).
    assert!(!warnings.contains("MD5"), "s3cmd get: {warnings}");
    let got = std::fs::read(&download).expect("read the downloaded file");
    assert!(
        got == data,
        "s3cmd get brought back {} bytes that differ",
        got.len()
    );

    s3cmd.ok(&["del", &object]);
    let (listing, _) = s3cmd.ok(&["ls", &format!("s3://{bucket}")]);
    assert!(listing.trim().is_empty(), "left after s3cmd del: {listing}");
    s3cmd.ok(&["rb", &format!("s3://{bucket}")]);
    let (buckets, _) = s3cmd.ok(&["ls"]);
    assert!(
        !buckets.contains(&format!("s3://{bucket}")),
        "s3cmd ls after rb: {buckets}"
    );
}

/// One way a client asks the server to encrypt what it uploads: the client's arguments for
/// the upload, for the download and for `aws s3api head-object` (an SSE-C key is needed on
/// all three), and the SSE_FIELDS head-object must show (the others absent).
struct AskedEncryption<'a> {
    name: &'a str,
    upload_args: Vec<&'a str>,
    download_args: Vec<&'a str>,
    head_args: Vec<&'a str>,
    shown: Vec<(&'a str, &'a str)>,
}

impl<'a> AskedEncryption<'a> {
    /// SSE-S3 or SSE-KMS, asked with `upload_args`: nothing else is needed to read it back.
    fn by_the_server(name: &'a str, upload_args: &[&'a str], shown: &[(&'a str, &'a str)]) -> Self {
        AskedEncryption {
            name,
            upload_args: upload_args.to_vec(),
            download_args: Vec::new(),
            head_args: Vec::new(),
            shown: shown.to_vec(),
        }
    }

    /// What `s3cmd info` shows on its `SSE:` line: the algorithm.
    fn algorithm(&self) -> Option<&'a str> {
        self.shown
            .iter()
            .find(|(field, _)| *field == "ServerSideEncryption")
            .map(|(_, value)| *value)
    }

    /// Checks what `aws s3api head-object` printed: the encryption asked for.
    fn check_head(&self, what: &str, head: &serde_json::Value) {
        assert_eq!(
            encryption_of(head),
            encryption_expected(&self.shown),
            "{what} {:?}: head-object shows {head:#}",
            self.upload_args
        );
    }
}

/// aws-cli's `--sse AES256`, `--sse aws:kms --sse-kms-key-id KMS_KEY` and `--sse-c AES256
/// --sse-c-key fileb://KEY`, each on a file of 64 KiB + 1 bytes (one PUT) and one of
/// 9 MiB + 5 bytes (two parts, the second not a whole number of 64 KiB chunks): up, reported
/// by `s3api head-object`, and back down unchanged, the SSE-C key given again.
fn aws_cli_has_files_encrypted_by_the_server(aws: &AwsCli, dir: &Path) {
    let bucket = "aws-cli-sse-bucket";
    let key_file = dir.join("aws-sse-c-key");
    random_file(&key_file, 32);
    let key_arg = format!("fileb://{}", path_str(&key_file));
    let customer = vec!["--sse-c", "AES256", "--sse-c-key", key_arg.as_str()];
    let asked = [
        AskedEncryption::by_the_server(
            "sse-s3",
            &["--sse", "AES256"],
            &[("ServerSideEncryption", "AES256")],
        ),
        AskedEncryption::by_the_server(
            "sse-kms",
            &["--sse", "aws:kms", "--sse-kms-key-id", KMS_KEY],
            &[
                ("ServerSideEncryption", "aws:kms"),
                ("SSEKMSKeyId", KMS_KEY),
            ],
        ),
        AskedEncryption {
            name: "sse-c",
            upload_args: customer.clone(),
            download_args: customer,
            head_args: vec![
                "--sse-customer-algorithm",
                "AES256",
                "--sse-customer-key",
                key_arg.as_str(),
            ],
            shown: vec![("SSECustomerAlgorithm", "AES256")],
        },
    ];
    let sizes_bytes = [(64 << 10) + 1, 9 * MIB_BYTES + 5];

    aws.ok(&["s3", "mb", &format!("s3://{bucket}")]);
    for encryption in &asked {
        let name = encryption.name;
        for size_bytes in sizes_bytes {
            let key = format!("{name}/{size_bytes}");
            let object = format!("s3://{bucket}/{key}");
            let upload = dir.join("aws-sse-up");
            let download = dir.join("aws-sse-down");
            let data = random_file(&upload, size_bytes);

            let mut args = vec!["s3", "cp", "--no-progress"];
            args.extend_from_slice(&encryption.upload_args);
            args.extend_from_slice(&[path_str(&upload), object.as_str()]);
            aws.ok(&args);
            let head = head_object(aws, bucket, &key, &encryption.head_args);
            encryption.check_head(&format!("aws s3 cp of {size_bytes} bytes"), &head);
            assert_eq!(
                head["ContentLength"].as_u64(),
                Some(size_bytes as u64),
                "{head:#}"
            );
            let etag = head["ETag"].as_str().unwrap_or_default().to_string();
            let md5 = format!("\"{}\"", md5_hex(&upload));
            if size_bytes > 8 * MIB_BYTES {
                assert!(
                    etag.ends_with("-2\""),
                    "aws s3 cp with {name} of {size_bytes} bytes did not upload two parts: \
                     ETag {etag}"
                );
            } else if name == "sse-s3" {
                assert_eq!(etag, md5, "the ETag of an SSE-S3 PUT is the content's MD5");
            } else {
                assert_ne!(etag, md5, "the ETag of an {name} PUT is the content's MD5");
            }
            if !encryption.head_args.is_empty() {
                let refused = aws.run(&["s3api", "head-object", "--bucket", bucket, "--key", &key]);
                assert!(
                    !refused.status.success(),
                    "head-object of an SSE-C object without its key must be refused"
                );
            }

            let mut args = vec!["s3", "cp", "--no-progress"];
            args.extend_from_slice(&encryption.download_args);
            args.extend_from_slice(&[object.as_str(), path_str(&download)]);
            aws.ok(&args);
            let got = std::fs::read(&download).expect("read the downloaded file");
            assert!(
                got == data,
                "aws s3 cp brought back {} bytes of {key} that differ",
                got.len()
            );
        }
    }
    aws.ok(&["s3", "rm", "--recursive", &format!("s3://{bucket}/")]);
    aws.ok(&["s3", "rb", &format!("s3://{bucket}")]);
}

/// s3cmd's `put --server-side-encryption` (AES256) of 9 MiB + 5 bytes in two parts of 5 MiB,
/// and `put --server-side-encryption-kms-id=KMS_KEY` of it in one PUT: `s3cmd info` and
/// aws-cli's head-object (`aws`, as the same user) report the encryption, and `get` brings
/// the file back unchanged.
fn s3cmd_has_files_encrypted_by_the_server(s3cmd: &S3cmd, aws: &AwsCli, dir: &Path) {
    let bucket = "s3cmd-sse-bucket";
    let size_bytes = 9 * MIB_BYTES + 5;
    let upload = dir.join("s3cmd-sse-up");
    let download = dir.join("s3cmd-sse-down");
    let data = random_file(&upload, size_bytes);
    let kms_arg = format!("--server-side-encryption-kms-id={KMS_KEY}");
    let asked = [
        AskedEncryption::by_the_server(
            "sse-s3",
            &["--server-side-encryption", "--multipart-chunk-size-mb=5"],
            &[("ServerSideEncryption", "AES256")],
        ),
        AskedEncryption::by_the_server(
            "sse-kms",
            &[kms_arg.as_str()],
            &[
                ("ServerSideEncryption", "aws:kms"),
                ("SSEKMSKeyId", KMS_KEY),
            ],
        ),
    ];

    s3cmd.ok(&["mb", &format!("s3://{bucket}")]);
    for encryption in &asked {
        let object = format!("s3://{bucket}/{}", encryption.name);
        let mut args = vec!["put", "--no-progress"];
        args.extend_from_slice(&encryption.upload_args);
        args.extend_from_slice(&[path_str(&upload), object.as_str()]);
        s3cmd.ok(&args);

        let (info, _) = s3cmd.ok(&["info", &object]);
        let reported = info
            .lines()
            .find_map(|line| line.trim().strip_prefix("SSE:"))
            .map(str::trim);
        assert_eq!(
            reported,
            encryption.algorithm(),
            "s3cmd info after put {:?}:\n{info}",
            encryption.upload_args
        );
        let head = head_object(aws, bucket, encryption.name, &[]);
        encryption.check_head("s3cmd put", &head);
        let etag = head["ETag"].as_str().unwrap_or_default();
        let in_parts = encryption
            .upload_args
            .iter()
            .any(|a| a.starts_with("--multipart"));
        assert_eq!(
            etag.ends_with("-2\""),
            in_parts,
            "s3cmd put {:?} of 9 MiB: ETag {etag}",
            encryption.upload_args
        );

        let (_, warnings) = s3cmd.ok(&[
            "get",
            "--force",
            "--no-progress",
            &object,
            path_str(&download),
        ]);
        assert!(!warnings.contains("MD5"), "s3cmd get: {warnings}");
        let got = std::fs::read(&download).expect("read the downloaded file");
        assert!(
            got == data,
            "s3cmd get of {object} brought back {} bytes that differ",
            got.len()
        );
        s3cmd.ok(&["del", &object]);
    }
    s3cmd.ok(&["rb", &format!("s3://{bucket}")]);
}

#[test]
fn boto3_aws_cli_s3cmd_rclone_and_restic_store_and_fetch_through_the_gateway() {
    let _serial = serial();
    let venv = s3_venv();
    // Keycloak takes a while to start: it does so beside the cluster.
    let idp = tempfile::tempdir().expect("tempdir");
    let keycloak = common::Keycloak::start(idp.path());
    let cluster = LocalCluster::start(3, &[]);
    let gateway = Gateway::of(&cluster);
    let alice = create_user(&cluster, "alice");
    let bob = create_user(&cluster, "bob");
    let aws = AwsCli::new(&venv, &gateway, &alice);
    aws.wait_accepted();
    let aws_as_bob = AwsCli::new(&venv, &gateway, &bob);
    aws_as_bob.wait_accepted();

    cluster.ok(&["kms", "key", "create", KMS_KEY]);

    keycloak.wait();
    run_boto3_suite(&cluster, &venv, &gateway, &alice, &bob, KMS_KEY, &keycloak);
    let dir = tempfile::tempdir().expect("tempdir");
    aws_cli_moves_a_file_up_and_down(&aws, dir.path());
    aws_cli_has_files_encrypted_by_the_server(&aws, dir.path());
    let s3cmd = S3cmd::new(&gateway, &bob);
    s3cmd_moves_a_file_up_and_down(&s3cmd, &aws_as_bob, dir.path());
    s3cmd_has_files_encrypted_by_the_server(&s3cmd, &aws_as_bob, dir.path());
    let tree = dir.path().join("tree");
    write_tree(&tree);
    rclone_syncs_a_tree_with_checksums(&gateway, &alice, &tree, dir.path());
    restic_backs_up_and_restores_a_tree(&gateway, &alice, &tree, dir.path());
}

/// A tree of files to back up and sync: nested directories, an empty file, small files and
/// one of 12 MiB (more than one part, with the part sizes the tools are given here).
fn write_tree(tree: &Path) {
    for (at, size_bytes) in [0, 1, 100, 4096, 70_000, 300_000, 12 * MIB_BYTES]
        .into_iter()
        .enumerate()
    {
        let dir = tree
            .join(format!("d{}", at % 3))
            .join(format!("e{}", at % 2));
        std::fs::create_dir_all(&dir).expect("tree dir");
        random_file(&dir.join(format!("f{at}.bin")), size_bytes);
    }
}

/// The relative paths and contents of every file under `root`.
fn tree_contents(root: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut found = std::collections::BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let relative = path.strip_prefix(root).expect("under root").to_path_buf();
                found.insert(relative, std::fs::read(&path).expect("read file"));
            }
        }
    }
    found
}

/// Debian's rclone as `user`, configured by environment only (remote `coffer`), multipart
/// from 5 MiB: `rclone sync --checksum` copies a tree, `rclone check` finds every hash the
/// same, a second sync copies nothing, and a changed and a removed file are all the third
/// one changes.
fn rclone_syncs_a_tree_with_checksums(gateway: &Gateway, user: &User, tree: &Path, dir: &Path) {
    let home = dir.join("rclone-home");
    std::fs::create_dir_all(&home).expect("rclone home");
    let rclone = |what: &str, args: &[&str]| {
        let mut command = Command::new("rclone");
        isolate(&mut command)
            .args(args)
            .args(["--ca-cert", path_str(&gateway.ca)])
            .args(["--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M", "-v"])
            .env("HOME", &home)
            .env("RCLONE_CONFIG", home.join("none.conf"))
            .env("RCLONE_CONFIG_COFFER_TYPE", "s3")
            .env("RCLONE_CONFIG_COFFER_PROVIDER", "Ceph")
            .env("RCLONE_CONFIG_COFFER_ENDPOINT", &gateway.endpoint)
            .env("RCLONE_CONFIG_COFFER_ACCESS_KEY_ID", &user.access_key)
            .env("RCLONE_CONFIG_COFFER_SECRET_ACCESS_KEY", &user.secret_key);
        let output = run(what, &mut command);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        succeeded(what, output);
        stderr
    };
    let copied = |log: &str| log.lines().filter(|l| l.contains(": Copied (")).count();
    let files = tree_contents(tree).len();
    let target = "coffer:rclone-tree/backup";
    rclone("rclone mkdir", &["mkdir", "coffer:rclone-tree"]);
    let first = rclone(
        "rclone sync",
        &["sync", "--checksum", path_str(tree), target],
    );
    assert_eq!(
        copied(&first),
        files,
        "the first sync copies every file:\n{first}"
    );
    let checked = rclone("rclone check", &["check", path_str(tree), target]);
    assert!(
        checked.contains("0 differences found")
            && checked.contains(&format!("{files} matching files")),
        "rclone check:\n{checked}"
    );
    let second = rclone(
        "rclone sync again",
        &["sync", "--checksum", path_str(tree), target],
    );
    assert_eq!(
        copied(&second),
        0,
        "a second sync copies nothing:\n{second}"
    );
    std::fs::write(tree.join("d1/e1/f1.bin"), b"changed").expect("change a file");
    let removed = tree.join("d0/e0/f0.bin");
    let kept = std::fs::read(&removed).expect("read the file to remove");
    std::fs::remove_file(&removed).expect("remove a file");
    let third = rclone(
        "rclone sync a change",
        &["sync", "--checksum", path_str(tree), target],
    );
    assert_eq!(
        copied(&third),
        1,
        "only the changed file is copied:\n{third}"
    );
    assert!(
        third.contains("f0.bin: Deleted"),
        "the removed file is deleted:\n{third}"
    );
    let restored = dir.join("rclone-restored");
    rclone("rclone copy back", &["copy", target, path_str(&restored)]);
    assert!(
        tree_contents(&restored) == tree_contents(tree),
        "the tree rclone copies back differs from the one it synced"
    );
    std::fs::write(&removed, kept).expect("restore the removed file");
    rclone("rclone purge", &["purge", "coffer:rclone-tree"]);
}

/// Debian's restic as `user`: a repository in a bucket, a backup of the tree, `restic check
/// --read-data` reading every pack back, and a restore equal to the tree.
fn restic_backs_up_and_restores_a_tree(gateway: &Gateway, user: &User, tree: &Path, dir: &Path) {
    let home = dir.join("restic-home");
    std::fs::create_dir_all(&home).expect("restic home");
    let repository = format!("s3:{}/restic-repo", gateway.endpoint);
    let restic = |what: &str, args: &[&str]| {
        let mut command = Command::new("restic");
        isolate(&mut command)
            .args(["--repo", &repository, "--cacert", path_str(&gateway.ca)])
            .args(["--cache-dir", path_str(&home.join("cache"))])
            .args(args)
            .env("HOME", &home)
            .env("RESTIC_PASSWORD", "coffer test repository")
            .env("AWS_ACCESS_KEY_ID", &user.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &user.secret_key);
        succeeded(what, run(what, &mut command))
    };
    restic("restic init", &["init"]);
    restic("restic backup", &["backup", path_str(tree)]);
    let checked = restic("restic check --read-data", &["check", "--read-data"]);
    assert!(
        checked.contains("no errors were found"),
        "restic check:\n{checked}"
    );
    let restored = dir.join("restic-restored");
    restic(
        "restic restore",
        &["restore", "latest", "--target", path_str(&restored)],
    );
    // restic restores the tree under its absolute path.
    let relative = tree.strip_prefix("/").expect("an absolute tree");
    assert!(
        tree_contents(&restored.join(relative)) == tree_contents(tree),
        "the tree restic restores differs from the one it backed up"
    );
}

/// The settings `coffer user create` prints for each client, pasted into a shell as they
/// are (in a home of their own, so no configuration file helps), reach the gateway as
/// that user.
fn pasted_settings_reach_the_gateway(cluster: &LocalCluster, venv: &Path) {
    let printed = cluster.ok(&["user", "create", "carol"]);
    let block = |client: &str| -> Vec<String> {
        let lines: Vec<&str> = printed.lines().collect();
        let at = lines
            .iter()
            .position(|l| *l == format!("{client}:"))
            .unwrap_or_else(|| panic!("no {client} settings in:\n{printed}"));
        lines[at + 1..]
            .iter()
            .take_while(|l| l.starts_with("  "))
            .map(|l| l.trim().to_string())
            .collect()
    };
    let home = tempfile::tempdir().expect("home");
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let shell = |what: &str, script: &str| {
        let mut command = Command::new("bash");
        command
            .args(["-c", script])
            .env("HOME", home.path())
            .env("PATH", &path);
        succeeded(what, run(what, &mut command))
    };
    let aws = block("aws-cli");
    shell(
        "pasted aws-cli settings",
        &format!("{}\naws s3 mb s3://pasted-by-carol", aws[0]),
    );
    let listed = shell("pasted aws-cli command", &aws.join("\n"));
    assert!(listed.contains("pasted-by-carol"), "{listed}");
    let listed = shell("pasted s3cmd command", &block("s3cmd").join("\n"));
    assert!(listed.contains("s3://pasted-by-carol"), "{listed}");
    let listed = shell("pasted rclone settings", &block("rclone").join("\n"));
    assert!(listed.contains("pasted-by-carol"), "{listed}");
    let boto3 = block("boto3");
    let script = format!(
        "import boto3\n{}\nprint([b['Name'] for b in s3.list_buckets()['Buckets']])",
        boto3.join("\n")
    );
    let program = home.path().join("boto3-pasted.py");
    std::fs::write(&program, script).expect("write the boto3 program");
    let listed = shell(
        "pasted boto3 settings",
        &format!("python3 {}", program.display()),
    );
    assert_eq!(listed.trim(), "['pasted-by-carol']");
    shell(
        "removing the bucket",
        &format!("{}\naws s3 rb s3://pasted-by-carol", aws[0]),
    );
}

#[test]
fn a_user_who_owns_a_bucket_is_kept_and_a_removed_user_is_refused() {
    let _serial = serial();
    let venv = s3_venv();
    let cluster = LocalCluster::start(3, &[]);
    let gateway = Gateway::of(&cluster);
    let alice = create_user(&cluster, "alice");
    let users = cluster.ok(&["user", "ls"]);
    assert!(users.contains(&alice.name), "user ls: {users}");
    let aws = AwsCli::new(&venv, &gateway, &alice);
    aws.wait_accepted();

    aws.ok(&["s3", "mb", "s3://alice-owns-this"]);
    pasted_settings_reach_the_gateway(&cluster, &venv);
    let refused = cluster.cli(&["user", "rm", "alice"]);
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "user rm of a user who owns a bucket must be refused"
    );
    assert!(
        message.to_lowercase().contains("bucket"),
        "the refusal must say it is about the user's buckets: {message}"
    );
    let users = cluster.ok(&["user", "ls"]);
    assert!(
        users.contains("alice"),
        "user ls after a refused rm: {users}"
    );
    aws.ok(&["s3", "ls"]);

    aws.ok(&["s3", "rb", "s3://alice-owns-this"]);
    cluster.ok(&["user", "rm", "alice"]);
    let users = cluster.ok(&["user", "ls"]);
    assert!(!users.contains("alice"), "user ls after rm: {users}");

    // The removed user's keys: refused as unknown, once the gateway has seen the removal.
    let deadline = Instant::now() + USER_CHANGE_SEEN_WITHIN;
    loop {
        let output = aws.run(&["s3", "ls"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() && stderr.contains("InvalidAccessKeyId") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a removed user's keys are not refused with InvalidAccessKeyId after \
             {USER_CHANGE_SEEN_WITHIN:?} ({}):\n{}\n{stderr}",
            output.status,
            String::from_utf8_lossy(&output.stdout)
        );
        std::thread::sleep(RETRY_INTERVAL);
    }
}
