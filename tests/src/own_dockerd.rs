//! A dockerd of a test's own, which the test may stop and start again: its own socket, data
//! and exec roots (and so its own containerd) in a temporary directory, and a network
//! namespace of its own (`unshare --net`: a second dockerd beside another in one namespace
//! takes over, or with `--bridge none` deletes, the other's `docker0`); the test image copied
//! in from the real engine (`docker save | docker load`). Nothing another test or process uses
//! is touched; stopped (SIGTERM, bounded) and its directory removed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::engine::TEST_IMAGE;
use crate::raw;
use crate::skip::skip;

#[derive(Debug)]
pub struct OwnDockerd {
    dir: Option<tempfile::TempDir>,
    child: Option<Child>,
}

impl OwnDockerd {
    /// Started and answering, with the test image; `None` after a skip notice where no
    /// `dockerd` can be run. `from` is the real engine the image is copied from.
    pub fn start(test: &str, from: &Path) -> Option<Self> {
        let runs = |p: &str| {
            Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !runs("dockerd") || !runs("unshare") {
            skip(
                test,
                "no dockerd or unshare on PATH",
                "apt-get install docker.io util-linux, as .ci/run does",
            );
            return None;
        }
        // Short: Unix socket paths are limited to 107 bytes.
        let dir = tempfile::Builder::new()
            .prefix("odk")
            .tempdir_in("/tmp")
            .expect("dir");
        let mut d = Self {
            dir: Some(dir),
            child: None,
        };
        d.run();
        let mut save = Command::new("docker")
            .args([
                "-H",
                &format!("unix://{}", from.display()),
                "save",
                TEST_IMAGE,
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("docker save");
        let loaded = Command::new("docker")
            .args([
                "-H",
                &format!("unix://{}", d.socket().display()),
                "load",
                "-q",
            ])
            .stdin(save.stdout.take().expect("piped"))
            .output()
            .expect("docker load");
        assert!(save.wait().is_ok_and(|s| s.success()), "docker save");
        assert!(
            loaded.status.success(),
            "{}",
            String::from_utf8_lossy(&loaded.stderr)
        );
        Some(d)
    }

    fn root(&self) -> &Path {
        self.dir
            .as_ref()
            .map_or(Path::new("/nonexistent"), |d| d.path())
    }

    pub fn socket(&self) -> PathBuf {
        self.root().join("d.sock")
    }

    /// Starts dockerd and waits (60 s at most) until it answers.
    fn run(&mut self) {
        let r = self.root().to_owned();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(r.join("dockerd.log"))
            .expect("log");
        let child = Command::new("unshare")
            .args(["--net", "--", "dockerd", "--host"])
            .arg(format!("unix://{}", self.socket().display()))
            .arg("--data-root")
            .arg(r.join("data"))
            .arg("--exec-root")
            .arg(r.join("exec"))
            .arg("--pidfile")
            .arg(r.join("d.pid"))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("dockerd starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !raw::get(&self.socket(), "/_ping").is_ok_and(|a| a.status == 200) {
            assert!(
                Instant::now() < deadline,
                "dockerd did not answer: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops dockerd (SIGTERM, as systemd does; 60 s at most) and starts it again: its
    /// containers with a restart policy come back.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }

    /// Starts a stopped dockerd again (60 s at most until it answers).
    pub fn start_again(&mut self) {
        self.run();
    }

    /// Stops dockerd (SIGTERM, as systemd does; 60 s at most, then SIGKILL).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(0));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its network namespace (`/proc/PID/ns/net`), for `nsenter --net=…`.
    pub fn netns(&self) -> Option<PathBuf> {
        self.child
            .as_ref()
            .map(|c| PathBuf::from(format!("/proc/{}/ns/net", c.id())))
    }

    /// Brings its namespace's loopback up (`unshare --net` leaves it down), so ports
    /// published on 127.0.0.1 there can be bound.
    pub fn loopback_up(&self) {
        let ns = self.netns().expect("running");
        let out = Command::new("nsenter")
            .arg(format!("--net={}", ns.display()))
            .args(["ip", "link", "set", "lo", "up"])
            .output()
            .expect("nsenter runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root().join("dockerd.log")).unwrap_or_default()
    }
}

impl Drop for OwnDockerd {
    fn drop(&mut self) {
        self.stop();
        let Some(dir) = self.dir.take() else {
            return;
        };
        // A mount dockerd left under its roots would be walked into by the removal.
        unmount_under(dir.path());
        drop(dir);
    }
}

/// Detaches every mount under `root`, deepest first: a mount a dockerd left under its roots
/// would be walked into by the directory's removal.
pub fn unmount_under(root: &Path) {
    let root = root.display().to_string();
    let left: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_owned))
        .filter(|p| p.starts_with(&root))
        .collect();
    for p in left.iter().rev() {
        let _ = rustix::mount::unmount(p.as_str(), rustix::mount::UnmountFlags::DETACH);
    }
}
