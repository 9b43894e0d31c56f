//! The run's own dockerd: started here, in this process's network namespace (never the host's:
//! two dockerds in one namespace fight over iptables and the default bridge), with its own
//! socket, data and exec roots under a short temporary directory, an address pool cut in /24s so
//! every stack's networks fit, and `--live-restore`, so its one restart in the run leaves the
//! containers running, as an operator's engine would. Stopped and its directory removed (after
//! its mounts are detached) when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use sockproxy_tests::raw;

/// Fails unless this process runs in a network namespace of its own: not PID 1's where that
/// can be read, and (always) one holding no interface but `lo`, as a fresh one does.
pub fn refuse_host_namespace() -> anyhow::Result<()> {
    let how = "chaos starts and restarts a dockerd of its own: run it in a fresh network \
               namespace (.ci/chaos.sh does: ip netns add X; nsenter --net=/run/netns/X chaos …)";
    let own = std::fs::read_link("/proc/self/ns/net").context("own network namespace")?;
    if std::fs::read_link("/proc/1/ns/net").is_ok_and(|host| host == own) {
        bail!("{how}");
    }
    // /proc/self/net follows this process's namespace (/sys/class/net, its mounter's).
    let others: Vec<String> = std::fs::read_to_string("/proc/self/net/dev")
        .context("/proc/self/net/dev")?
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next().map(|n| n.trim().to_owned()))
        .filter(|n| n != "lo")
        .collect();
    if !others.is_empty() {
        bail!("{how}; this one holds {others:?}");
    }
    Ok(())
}

#[derive(Debug)]
pub struct Dockerd {
    dir: Option<tempfile::TempDir>,
    child: Option<Child>,
    pool: String,
    /// When its last restart ended (seconds since boot).
    restarted_at: Option<f64>,
}

impl Dockerd {
    pub fn start(pool: &str) -> anyhow::Result<Self> {
        // Short: Unix socket paths are limited to 107 bytes.
        let dir = tempfile::Builder::new()
            .prefix("chaos")
            .tempdir_in("/tmp")
            .context("dockerd dir")?;
        let mut d = Self {
            dir: Some(dir),
            child: None,
            pool: pool.to_owned(),
            restarted_at: None,
        };
        d.run()?;
        Ok(d)
    }

    fn root(&self) -> &Path {
        self.dir
            .as_ref()
            .map_or(Path::new("/nonexistent"), |d| d.path())
    }

    pub fn socket(&self) -> PathBuf {
        self.root().join("d.sock")
    }

    /// The directory every one of its paths is under (its processes' command lines name it).
    pub fn root_dir(&self) -> String {
        self.root().display().to_string()
    }

    /// Where dockerd writes its process ID (read afresh after the restart).
    pub fn pid_file(&self) -> PathBuf {
        self.root().join("d.pid")
    }

    fn run(&mut self) -> anyhow::Result<()> {
        let r = self.root().to_owned();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(r.join("dockerd.log"))?;
        let child = Command::new("dockerd")
            .arg("--host")
            .arg(format!("unix://{}", self.socket().display()))
            .arg("--data-root")
            .arg(r.join("data"))
            .arg("--exec-root")
            .arg(r.join("exec"))
            .arg("--pidfile")
            .arg(self.pid_file())
            .arg("--default-address-pool")
            .arg(format!("base={},size=24", self.pool))
            .arg("--live-restore")
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("dockerd starts (is docker.io installed?)")?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !raw::get(&self.socket(), "/_ping").is_ok_and(|a| a.status == 200) {
            if Instant::now() > deadline {
                bail!("dockerd did not answer within 60 s: {}", self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// SIGTERM (60 s, then SIGKILL) and start again.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        let r = self.run();
        self.restarted_at = Some(crate::orphans::uptime_s());
        r
    }

    /// When the last restart ended, in seconds since boot (`None`: never restarted).
    pub fn restarted_at(&self) -> Option<f64> {
        self.restarted_at
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGTERM);
        }
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

    /// A copy of dockerd's log (every incarnation's) at `to`.
    pub fn save_log(&self, to: &Path) {
        let _ = std::fs::copy(self.root().join("dockerd.log"), to);
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.root().join("dockerd.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    /// Removes every container, stops dockerd (and so its containerd), and names every process
    /// of this engine still running 15 s later (a containerd or shim left behind): each a leak,
    /// then killed, so the run leaves nothing on the host.
    pub fn shut_down(&mut self) -> Vec<String> {
        self.remove_all();
        self.stop();
        let root = self.root_dir();
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut left = crate::orphans::processes_naming(&root);
        while !left.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            left = crate::orphans::processes_naming(&root);
        }
        left.iter()
            .map(|p| {
                if let Ok(pid) = i32::try_from(p.pid) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::SIGKILL,
                    );
                }
                format!(
                    "process {} ({}) left running after dockerd stopped: {}",
                    p.pid, p.comm, p.cmdline
                )
            })
            .collect()
    }

    fn remove_all(&self) {
        let sock = self.socket();
        if let Ok(r) = raw::get(&sock, "/containers/json?all=1") {
            for c in r.json().as_array().into_iter().flatten() {
                if let Some(id) = c["Id"].as_str() {
                    let _ =
                        raw::request(&sock, "DELETE", &format!("/containers/{id}?force=1"), None);
                }
            }
        }
    }
}

impl Drop for Dockerd {
    /// Every container goes first (live-restore would keep them, and their shims, running past
    /// dockerd), then dockerd, its containerd, the mounts under its roots and the directory.
    fn drop(&mut self) {
        self.remove_all();
        self.stop();
        let Some(dir) = self.dir.take() else {
            return;
        };
        sockproxy_tests::own_dockerd::unmount_under(dir.path());
        drop(dir);
    }
}
