//! FUSE mounts of a test cluster's file system: `coffer mount --foreground` as a child of
//! the test, unmounted (and waited for) when dropped, so no mount outlives its test.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{LocalCluster, COFFER};

/// How long a mount may take to come up.
const MOUNT_WAIT: Duration = Duration::from_secs(60);

pub struct FsMount {
    dir: tempfile::TempDir,
    child: Child,
    log: PathBuf,
}

impl FsMount {
    /// Mounts file system `fs` as client.admin with `extra` arguments of `coffer mount`.
    pub fn new(cluster: &LocalCluster, fs: &str, extra: &[&str]) -> FsMount {
        FsMount::start(cluster, fs, &[], extra).unwrap_or_else(|e| panic!("mounting {fs}: {e}"))
    }

    /// Mounts file system `fs` as `entity` with its keyring; the mount's error if it fails.
    pub fn as_entity(
        cluster: &LocalCluster,
        fs: &str,
        entity: &str,
        keyring: &Path,
        extra: &[&str],
    ) -> Result<FsMount, String> {
        let keyring = keyring.to_str().expect("UTF-8 path");
        FsMount::start(
            cluster,
            fs,
            &["--name", entity, "--keyring", keyring],
            extra,
        )
    }

    fn start(
        cluster: &LocalCluster,
        fs: &str,
        who: &[&str],
        extra: &[&str],
    ) -> Result<FsMount, String> {
        let dir = tempfile::tempdir().expect("mountpoint");
        let log = cluster.dir.path().join(format!(
            "mount-{}.log",
            dir.path()
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("x")
        ));
        let log_file = std::fs::File::create(&log).expect("mount log");
        let mut child = Command::new(COFFER)
            .arg("--conf")
            .arg(&cluster.conf)
            .args(who)
            .args(["mount", fs])
            .arg(dir.path())
            .arg("--foreground")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .expect("start coffer mount");
        let stdout = child.stdout.take().expect("mount's stdout");
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = send.send(line);
        });
        match receive.recv_timeout(MOUNT_WAIT) {
            Ok(line) if line.starts_with("coffer: mounted") => Ok(FsMount { dir, child, log }),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                Err(std::fs::read_to_string(&log).unwrap_or_default())
            }
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The mount's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Unmounts and waits for the mount to flush and exit; returns whether it exited
    /// cleanly.
    pub fn unmount(mut self) -> bool {
        self.stop()
    }

    fn stop(&mut self) -> bool {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return false;
                }
            }
        }
    }
}

impl Drop for FsMount {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}
