//! The programs a benchmark run starts: where our binaries are (built on demand, in the bench's
//! own profile), starting a child with its output in a log file, waiting until it answers,
//! reading its memory from `/proc`, and killing it when the run is done.

use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The directory holding `sockproxy`, `netproxy` and `fake-dockerd`. Without `explicit`, they
/// are built first with the profile the bench itself was built with, so the figures are never
/// those of a stale binary.
pub fn bin_dir(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = explicit {
        return Ok(dir);
    }
    let exe = std::env::current_exe().context("where the bench runs from")?;
    let dir = exe.parent().context("bench has no directory")?.to_owned();
    let profile = dir
        .file_name()
        .and_then(|n| n.to_str())
        .context("bench directory name")?
        .to_owned();
    let target = dir.parent().context("bench is not in a target directory")?;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--quiet")
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    cmd.args(["-p", "sockproxy", "-p", "netproxy", "-p", "sockproxy-tests"]);
    cmd.args([
        "--bin",
        "sockproxy",
        "--bin",
        "netproxy",
        "--bin",
        "fake-dockerd",
    ]);
    let status = cmd
        .status()
        .context("running cargo build for the benchmarked binaries")?;
    if !status.success() {
        bail!("cargo build of sockproxy, netproxy and fake-dockerd failed");
    }
    Ok(dir)
}

/// Every program running now, so an interrupted run can stop them all (`stop_all`).
static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Kills every program this run started and still runs; for SIGINT and SIGTERM.
pub fn stop_all() {
    let pids = RUNNING.lock().map(|v| v.clone()).unwrap_or_default();
    for pid in pids {
        if let Ok(pid) = i32::try_from(pid) {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
        }
    }
}

/// A started program; killed when dropped.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Proc {
    /// Starts `cmd` with stdout and stderr in `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> anyhow::Result<Self> {
        let out = std::fs::File::create(&log).with_context(|| format!("{}", log.display()))?;
        let err = out.try_clone()?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        if let Ok(mut running) = RUNNING.lock() {
            running.push(child.id());
        }
        Ok(Self {
            name: name.to_owned(),
            child,
            log,
        })
    }

    /// Waits until `ready` holds, failing early with the log's tail if the program exits.
    pub fn wait(&mut self, limit: Duration, ready: impl Fn() -> bool) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if ready() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("{} exited ({status}): {}", self.name, self.log_tail());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!(
            "{} did not answer within {limit:?}: {}",
            self.name,
            self.log_tail()
        )
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// CPU time used so far by all of the program's threads, from each thread's
    /// `/proc/PID/task/TID/schedstat` (nanoseconds, unlike the 10 ms ticks of `stat`).
    pub fn cpu(&self) -> Duration {
        let tasks = format!("/proc/{}/task", self.child.id());
        let Ok(entries) = std::fs::read_dir(tasks) else {
            return Duration::ZERO;
        };
        let nanos: u64 = entries
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
            .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .sum();
        Duration::from_nanos(nanos)
    }

    /// Resident memory now and at its peak, in KiB, from `/proc/PID/status`.
    pub fn memory(&self) -> Memory {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        Memory {
            rss_kib: field("VmRSS:"),
            peak_kib: field("VmHWM:"),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Ok(mut running) = RUNNING.lock() {
            running.retain(|p| *p != self.child.id());
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub rss_kib: u64,
    pub peak_kib: u64,
}

pub fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

pub fn unix_answers(path: &Path) -> bool {
    UnixStream::connect(path).is_ok()
}

pub fn tcp_answers(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// A loopback port free at the time of asking.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `program`'s path on PATH, if installed.
pub fn installed(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// The first line `program --version`-like `args` print, for the table header.
pub fn version(program: &Path, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            let text = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_owned()
        })
        .unwrap_or_default()
}
