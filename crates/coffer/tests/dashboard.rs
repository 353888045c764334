//! The web dashboard in a real browser: headless Chromium driven over WebDriver
//! (chromedriver) against a `coffer up` cluster. It logs in, renders every page with the
//! cluster's live state, carries out each action an operator takes there (confirmed first)
//! and finds its effect with the CLI, and is refused without a login and as a read-only
//! user. A screenshot of each page goes to `CARGO_TARGET_TMPDIR/dashboard` (and to
//! `COFFER_SCREENSHOTS`, when set: `docs/dashboard` holds the README's).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use common::{free_port, LocalCluster};
use serde_json::{json, Value};

/// How long a page may take to show what the test waits for.
const PAGE_WAIT: Duration = Duration::from_secs(30);

/// A WebDriver session on chromedriver, in headless Chromium.
struct Browser {
    driver: Child,
    addr: String,
    session: String,
}

/// One HTTP/1.1 exchange with chromedriver; the reply's JSON `value`.
fn webdriver(addr: &str, method: &str, path: &str, body: Option<Value>) -> Value {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("chromedriver: {e}"));
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("request sent");
    // chromedriver keeps the connection open after its answer, whatever the request says:
    // read the head, then as many bytes as its Content-Length.
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).expect("answer's head");
        answer.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Content-Length in {head}"));
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).expect("answer's body");
    let parsed: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&body)));
    parsed["value"].clone()
}

impl Browser {
    fn start() -> Browser {
        let addr = format!("127.0.0.1:{}", free_port());
        let port = addr.rsplit_once(':').expect("port").1.to_string();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (scripts/setup.sh installs chromium-driver)");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "acceptInsecureCerts": true,
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1000"],
            },
        }}});
        let session = webdriver(&addr, "POST", "/session", Some(capabilities));
        let session = session["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {session}"))
            .to_string();
        Browser {
            driver,
            addr,
            session,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        webdriver(&self.addr, method, &path, body)
    }

    fn go(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    fn source(&self) -> String {
        self.call("GET", "/source", None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn url(&self) -> String {
        self.call("GET", "/url", None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn find(&self, xpath: &str) -> String {
        let deadline = Instant::now() + PAGE_WAIT;
        loop {
            let found = self.call(
                "POST",
                "/element",
                Some(json!({"using": "xpath", "value": xpath})),
            );
            if let Some(id) = found
                .as_object()
                .and_then(|o| o.values().next())
                .and_then(Value::as_str)
            {
                return id.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no {xpath} on {}:\n{}",
                self.url(),
                self.source()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn click(&self, xpath: &str) {
        let element = self.find(xpath);
        self.call(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        );
    }

    fn fill(&self, xpath: &str, text: &str) {
        let element = self.find(xpath);
        self.call(
            "POST",
            &format!("/element/{element}/clear"),
            Some(json!({})),
        );
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        );
    }

    /// Waits until the page's source holds `text`; returns the source.
    fn shows(&self, text: &str) -> String {
        let deadline = Instant::now() + PAGE_WAIT;
        loop {
            let source = self.source();
            if source.contains(text) {
                return source;
            }
            assert!(
                Instant::now() < deadline,
                "{} never showed {text:?}:\n{source}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn screenshot(&self, name: &str) {
        let png = self.call("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("a screenshot"))
            .expect("base64");
        let mut dirs = vec![PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard")];
        dirs.extend(std::env::var_os("COFFER_SCREENSHOTS").map(PathBuf::from));
        for dir in dirs {
            std::fs::create_dir_all(&dir).expect("screenshot directory");
            std::fs::write(dir.join(format!("{name}.png")), &png).expect("screenshot");
        }
    }

    /// Submits the form of `action` (one whose hidden field `key` is `value`, if given),
    /// checks the confirmation says `asks`, confirms, and returns the outcome page.
    fn act(&self, action: &str, key: Option<(&str, &str)>, asks: &str) -> String {
        let form = match key {
            Some((name, value)) => format!(
                "//form[@data-action='{action}'][input[@name='{name}' and @value='{value}']]"
            ),
            None => format!("//form[@data-action='{action}']"),
        };
        self.click(&format!("{form}//button"));
        let asked = self.shows("id=\"confirm-what\"");
        assert!(asked.contains(asks), "confirmation of {action}:\n{asked}");
        self.click("//button[@id='confirm']");
        self.shows("id=\"outcome\"")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = webdriver(
            &self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// An HTTPS request with curl, trusting the dashboard's authority: the status code.
fn curl(ca: &PathBuf, args: &[&str]) -> String {
    let output = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
        .arg(ca)
        .args(args)
        .output()
        .expect("curl");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn status_count(cluster: &LocalCluster, path: &[&str]) -> u64 {
    let mut value = cluster.status();
    for key in path {
        value = value[*key].clone();
    }
    value
        .as_u64()
        .or_else(|| value.as_array().map(|a| a.len() as u64))
        .unwrap_or_else(|| panic!("{path:?} in status: {value}"))
}

#[test]
fn an_operator_sees_every_page_and_acts_from_a_browser() {
    let listen = format!("127.0.0.1:{}", free_port());
    let extra = ["--fs", "fs", "--dashboard", &listen, "--image-size", "64M"];
    let cluster = LocalCluster::start(3, &extra);
    let dir = cluster.dir.path().join("dashboard");
    let ca = dir.join("ca.pem");
    cluster.wait_listening(&listen);
    cluster.wait_s3();
    let base = format!(
        "https://localhost:{}",
        listen.rsplit_once(':').expect("port").1
    );
    let admin_password = std::fs::read_to_string(dir.join("admin-password"))
        .expect("coffer up wrote the admin's password");
    let added = cluster.ok(&["dashboard", "user", "add", "viewer", "--read-only"]);
    let viewer_password = added
        .lines()
        .find_map(|l| l.strip_prefix("password: "))
        .expect("a password")
        .to_string();

    // Without a login: pages send to the login page, actions are refused.
    assert_eq!(curl(&ca, &[&format!("{base}/osds")]), "303");
    let refused = curl(
        &ca,
        &[
            "-d",
            "action=osd-out&osd=1&confirm=yes",
            &format!("{base}/action"),
        ],
    );
    assert_eq!(refused, "401");

    // curl checked the certificate against the cluster's authority; the browser is told to
    // accept it rather than have ca.pem imported into its store.
    let browser = Browser::start();
    browser.go(&format!("{base}/pools"));
    assert!(browser.url().ends_with("/login"), "{}", browser.url());
    browser.fill("//input[@id='user']", "admin");
    browser.fill("//input[@id='password']", "wrong");
    browser.click("//button[@id='login']");
    browser.shows("wrong user or password");
    browser.screenshot("login");
    browser.fill("//input[@id='user']", "admin");
    browser.fill("//input[@id='password']", admin_password.trim());
    browser.click("//button[@id='login']");
    browser.shows("id=\"verdict\"");

    // A load of object writes while the pages are looked at, so that the charts and the
    // latencies have something to show: the health page's charts show writes within two
    // of the dashboard's scrapes.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (stop, conf) = (stop.clone(), cluster.conf.clone());
        let file = cluster.dir.path().join("load");
        std::fs::write(&file, vec![0x6cu8; 256 << 10]).expect("load file");
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("load-{i}");
                let status = Command::new(common::COFFER)
                    .arg("--conf")
                    .arg(&conf)
                    .args(["obj", "put", "data", &name])
                    .arg(&file)
                    .stdout(Stdio::null())
                    .status()
                    .expect("coffer obj put");
                assert!(status.success(), "coffer obj put {name}");
                i += 1;
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        browser.go(&format!("{base}/"));
        let page = browser.shows("Operations");
        if !page.contains("write 0/s") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the charts never showed the writes:\n{page}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let pages = [
        (
            "health",
            "/",
            vec!["HEALTH_", "3 OSDs: 3 up, 3 in", "Throughput"],
        ),
        ("osds", "/osds", vec!["osd.0", "osd.1", "osd.2", "Mark out"]),
        (
            "pools",
            "/pools",
            vec![">data<", ">s3<", ">fs.data<", "active+clean"],
        ),
        ("pgs", "/pgs", vec!["active+clean", "objects left to copy"]),
        ("images", "/images", vec![">disk<", "64.0 MiB"]),
        ("s3", "/s3", vec!["id=\"s3-users\"", "id=\"s3-buckets\""]),
        ("kms", "/kms", vec!["coffer/s3", "pool."]),
        ("fs", "/fs", vec![">fs<", "mds.a at"]),
    ];
    for (name, path, expected) in &pages {
        browser.go(&format!("{base}{path}"));
        for text in expected {
            browser.shows(text);
        }
        browser.screenshot(name);
    }

    stop.store(true, Ordering::Relaxed);
    load.join().expect("the load ran");

    // Each action, confirmed, then seen by the CLI.
    let pools = status_count(&cluster, &["pools"]);
    browser.go(&format!("{base}/pools"));
    browser.fill("//input[@id='pool-create-name']", "web");
    browser.fill("//input[@id='pool-create-pg_num']", "8");
    let outcome = browser.act(
        "pool-create",
        None,
        "Create pool web with 8 placement groups",
    );
    assert!(outcome.contains("pool web created"), "{outcome}");
    assert_eq!(status_count(&cluster, &["pools"]), pools + 1);

    browser.go(&format!("{base}/osds"));
    let outcome = browser.act("osd-out", Some(("osd", "2")), "Mark osd.2 out");
    assert!(outcome.contains("osd.2 marked out"), "{outcome}");
    assert_eq!(status_count(&cluster, &["osds", "in"]), 2);
    browser.go(&format!("{base}/osds"));
    browser.act("osd-in", Some(("osd", "2")), "Mark osd.2 in");
    assert_eq!(status_count(&cluster, &["osds", "in"]), 3);

    browser.go(&format!("{base}/s3"));
    browser.fill("//input[@id='user-create-name']", "webuser");
    let outcome = browser.act("user-create", None, "Create S3 user webuser");
    assert!(outcome.contains("access key: CK"), "{outcome}");
    let secret = outcome
        .split("secret key: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the secret key, once")
        .to_string();
    let users = cluster.ok(&["user", "ls", "--json"]);
    assert!(users.contains("\"webuser\""), "{users}");
    browser.go(&format!("{base}/s3"));
    let listed = browser.shows("webuser");
    assert!(
        !listed.contains(&secret),
        "the secret key is shown once only"
    );

    browser.go(&format!("{base}/fs"));
    browser.fill("//input[@id='fs-create-name']", "webfs");
    let outcome = browser.act("fs-create", None, "Create file system webfs");
    assert!(outcome.contains("file system webfs created"), "{outcome}");
    let filesystems = cluster.ok(&["fs", "ls", "--json"]);
    assert!(filesystems.contains("\"webfs\""), "{filesystems}");
    browser.go(&format!("{base}/fs"));
    browser.click("//select[@id='fs-authorize-fs']/option[text()='webfs']");
    browser.fill("//input[@id='fs-authorize-entity']", "alice");
    let outcome = browser.act(
        "fs-authorize",
        None,
        "Give client.alice a key that mounts file system webfs",
    );
    assert!(
        outcome.contains("BEGIN"),
        "a keyring, shown once: {outcome}"
    );
    let entities = cluster.ok(&["auth", "ls"]);
    let alice = entities.lines().find(|l| l.starts_with("client.alice"));
    assert!(alice.is_some_and(|l| l.contains("webfs")), "{entities}");

    browser.go(&format!("{base}/kms"));
    let outcome = browser.act(
        "kms-rotate",
        Some(("name", "coffer/s3")),
        "Rotate KMS key coffer/s3",
    );
    assert!(outcome.contains("KMS key coffer/s3 rotated"), "{outcome}");
    let keys: Value =
        serde_json::from_str(&cluster.ok(&["kms", "key", "ls", "--json"])).expect("keys");
    let versions = keys
        .as_array()
        .expect("a list")
        .iter()
        .find(|k| k["name"] == "coffer/s3")
        .map(|k| k["versions"].clone());
    assert_eq!(versions, Some(json!(2)));

    // A read-only user sees, and is refused when it asks for a change anyway.
    browser.click("//button[@id='logout']");
    browser.shows("id=\"login\"");
    browser.fill("//input[@id='user']", "viewer");
    browser.fill("//input[@id='password']", &viewer_password);
    browser.click("//button[@id='login']");
    browser.shows("viewer (read-only)");
    browser.go(&format!("{base}/osds"));
    let page = browser.shows("osd.2");
    assert!(
        !page.contains("data-action"),
        "no action forms for a read-only user"
    );
    let cookie = browser.call("GET", "/cookie/coffer_session", None)["value"]
        .as_str()
        .expect("the session cookie")
        .to_string();
    let token = page
        .split("name=\"form_token\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the session's form token")
        .to_string();
    let asked = format!("form_token={token}&action=osd-out&osd=1&confirm=yes");
    let cookie = format!("coffer_session={cookie}");
    let refused = curl(
        &ca,
        &["-b", &cookie, "-d", &asked, &format!("{base}/action")],
    );
    assert_eq!(refused, "403");
    assert_eq!(status_count(&cluster, &["osds", "in"]), 3);
}
