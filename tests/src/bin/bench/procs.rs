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

/// The directory holding `sockproxy`, `netproxy`, `fake-dockerd` and `lifecycle-cli`. Without `explicit`, they
/// are built first with the profile the bench itself was built with, so the figures are never
/// those of a stale binary.
pub fn bin_dir(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = explicit {
        return Ok(dir);
    }
    // The directory the bench itself was built into, found the way the tests find it.
    let dir = sockproxy_tests::bins::dir();
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
        "--bin",
        "lifecycle-cli",
    ]);
    let status = cmd
        .status()
        .context("running cargo build for the benchmarked binaries")?;
    if !status.success() {
        bail!("cargo build of sockproxy, netproxy, fake-dockerd and lifecycle-cli failed");
    }
    Ok(dir)
}

/// Every program running now, so an interrupted run can stop them all (`stop_all`).
static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// What an interrupted run must undo besides its programs (containers on the real engine).
type Cleanup = Box<dyn Fn() + Send>;
static CLEANUPS: Mutex<Vec<Cleanup>> = Mutex::new(Vec::new());

/// Runs `undo` if the run is interrupted (`stop_all`), after its programs are killed.
pub fn on_interrupt(undo: impl Fn() + Send + 'static) {
    if let Ok(mut c) = CLEANUPS.lock() {
        c.push(Box::new(undo));
    }
}

/// Kills every program this run started and still runs, then runs the `on_interrupt`
/// clean-ups; for SIGINT and SIGTERM.
pub fn stop_all() {
    let pids = RUNNING.lock().map(|v| v.clone()).unwrap_or_default();
    for pid in pids {
        if let Ok(pid) = i32::try_from(pid) {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
        }
    }
    if let Ok(cleanups) = CLEANUPS.lock() {
        for undo in cleanups.iter() {
            undo();
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

    /// The program's process ID (for the chaos program's CPU figures, which include this file).
    #[allow(dead_code)]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits (`limit` at most, SIGKILL after) until it exits; whether it exited
    /// by itself. (For the chaos program's teardown, which includes this file.)
    #[allow(dead_code)]
    pub fn terminate(&mut self, limit: Duration) -> bool {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGTERM);
        }
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// CPU time used so far by the program: all its threads, including those that have ended
    /// (tinyproxy serves each connection on a thread of its own), and its running children.
    pub fn cpu(&self) -> Duration {
        Duration::from_nanos(cpu_nanos(self.child.id(), 0))
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

/// One look at a running program, for the soak: open file descriptors, resident memory, threads.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub fds: u64,
    pub rss_kib: u64,
    pub threads: u64,
}

impl Proc {
    /// Counts `/proc/PID/fd` and reads `VmRSS` and `Threads` from `/proc/PID/status`; zeros if
    /// the program is gone (the soak reports that as a collapse rather than failing mid-run).
    pub fn sample(&self) -> Sample {
        let pid = self.child.id();
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        Sample {
            fds,
            rss_kib: field("VmRSS:"),
            threads: field("Threads:"),
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

/// CPU time used so far by this process's own threads (the load generator), without its
/// children (the proxies and the fake engine it started).
pub fn own_cpu() -> Duration {
    Duration::from_nanos(cpu_nanos(std::process::id(), CHILD_DEPTH))
}

/// CPU time used so far by process `pid` and its running children.
pub fn cpu_of(pid: u32) -> Duration {
    Duration::from_nanos(cpu_nanos(pid, 0))
}

/// The process listening on Unix socket `sock` (its peer credentials), or `None`.
pub async fn listener_pid(sock: &Path) -> Option<u32> {
    let stream = tokio::net::UnixStream::connect(sock).await.ok()?;
    let pid = stream.peer_cred().ok()?.pid()?;
    u32::try_from(pid).ok()
}

/// How many levels of children `cpu_nanos` adds.
const CHILD_DEPTH: u32 = 3;

/// CPU nanoseconds of `pid` and, a few levels down, its children. Live threads are summed from
/// `/proc/PID/task/TID/schedstat` (nanoseconds); `/proc/PID/stat` also counts ended threads but
/// only in clock ticks (10 ms), so the larger of the two is taken.
fn cpu_nanos(pid: u32, depth: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    let mut live = 0;
    let mut children = 0;
    for task in tasks.flatten() {
        let read = |name: &str| std::fs::read_to_string(task.path().join(name)).unwrap_or_default();
        live += read("schedstat")
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        if depth < CHILD_DEPTH {
            children += read("children")
                .split_whitespace()
                .filter_map(|c| c.parse().ok())
                .map(|c| cpu_nanos(c, depth + 1))
                .sum::<u64>();
        }
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are the 14th and 15th.
    let ticks: u64 = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|t| t.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    live.max(ticks * 10_000_000) + children
}

#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub rss_kib: u64,
    pub peak_kib: u64,
}

/// The machine's CPU time so far, all cores, in clock ticks: (everything, idle and I/O wait),
/// from the first line of `/proc/stat`.
pub fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    (ticks.iter().sum(), idle)
}

/// The percentage of the machine's CPU time that was idle between two `machine_ticks`.
pub fn idle_pct(before: (u64, u64), after: (u64, u64)) -> f64 {
    let total = after.0.saturating_sub(before.0);
    let idle = after.1.saturating_sub(before.1);
    if total == 0 {
        0.0
    } else {
        100.0 * idle as f64 / total as f64
    }
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
