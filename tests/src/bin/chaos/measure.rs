//! What the run measures besides the counts: every well-behaved call's latency (by phase and
//! operation, successes and failures), and the host every two seconds (dockerd's RSS and CPU,
//! containerd shims, each proxy's and provider's RSS, and where the machine's CPU went: the
//! whole machine's busy time, dockerd's, containerd's and its shims', the proxies', the
//! providers' and this program's, whose threads are every stack's well-behaved and hostile
//! clients; each over the interval since the last sample, by `Ticks`). Figures for the report, never
//! judged.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::stacks::Stacks;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Quiet,
    Chaos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Create,
    Discover,
    Ready,
    Http,
    List,
    Delete,
    CliRun,
    CliPs,
    CliInspect,
    CliStop,
    CliRm,
}

impl Op {
    pub const ALL: [Op; 11] = [
        Op::Create,
        Op::Discover,
        Op::Ready,
        Op::Http,
        Op::List,
        Op::Delete,
        Op::CliRun,
        Op::CliPs,
        Op::CliInspect,
        Op::CliStop,
        Op::CliRm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Create => "create (POST /api/sandboxes)",
            Op::Discover => "discover (GET /api/sandboxes/ID)",
            Op::Ready => "the URL answers, polled after the create (as deer-flow does)",
            Op::Http => "HTTP call to the sandbox URL, once it answers",
            Op::List => "list (GET /api/sandboxes)",
            Op::Delete => "delete (DELETE /api/sandboxes/ID)",
            Op::CliRun => "docker run -d --rm -p (CLI, through the proxy)",
            Op::CliPs => "docker ps --filter name= (CLI)",
            Op::CliInspect => "docker inspect -f {{.State.Running}} (CLI)",
            Op::CliStop => "docker stop (CLI)",
            Op::CliRm => "docker rm -f, already gone (CLI)",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Call {
    pub phase: Phase,
    pub op: Op,
    pub stack: usize,
    /// Seconds since the run's start, when the call began.
    pub at: f64,
    pub took: Duration,
    pub ok: bool,
}

/// Every well-behaved call, from every stack's thread, and why each failed HTTP call to a
/// sandbox URL failed.
#[derive(Debug)]
pub struct Log {
    pub start: Instant,
    calls: Mutex<Vec<Call>>,
    http_failures: Mutex<Vec<(f64, usize, String)>>,
}

impl Default for Log {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            calls: Mutex::new(Vec::new()),
            http_failures: Mutex::new(Vec::new()),
        }
    }
}

impl Log {
    /// Why stack `stack`'s HTTP call to a sandbox URL begun at `began` failed.
    pub fn http_failed(&self, stack: usize, began: Instant, why: String) {
        let at = began.duration_since(self.start).as_secs_f64();
        self.http_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((at, stack, why));
    }

    /// (seconds since the start, stack, why) of each failed HTTP call to a sandbox URL.
    pub fn http_failures(&self) -> Vec<(f64, usize, String)> {
        self.http_failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn record(&self, phase: Phase, op: Op, stack: usize, began: Instant, ok: bool) {
        let call = Call {
            phase,
            op,
            stack,
            at: began.duration_since(self.start).as_secs_f64(),
            took: began.elapsed(),
            ok,
        };
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(call);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The host at one instant.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostPoint {
    pub secs: f64,
    pub dockerd_rss_kib: u64,
    /// dockerd's own CPU over the last interval, in percent of one core.
    pub dockerd_cpu_pct: f64,
    pub shims: u64,
    pub proxies_rss_kib: u64,
    pub serves_rss_kib: u64,
    /// The whole machine's CPU that was not idle, over the last interval, in percent of one
    /// core (so up to 100 times the cores).
    pub host_busy_pct: f64,
    pub proxies_cpu_pct: f64,
    pub serves_cpu_pct: f64,
    /// The engine's containerd and its shims, with what the shims ran and reaped (runc).
    pub containerd_cpu_pct: f64,
    /// This program (the well-behaved and the hostile clients, the watcher, the sampler).
    pub harness_cpu_pct: f64,
}

/// CPU time over the intervals between samples, for processes that come and go (a proxy
/// killed and started again is a new process ID).
#[derive(Default)]
struct Ticks {
    last: HashMap<u32, u64>,
}

impl Ticks {
    /// The ticks `pids` used since the last call (a process first seen: all of its own), as
    /// `ticks` counts them.
    fn since(&mut self, pids: &[u32], ticks: fn(u32) -> u64) -> u64 {
        let mut next = HashMap::new();
        let mut used = 0;
        for &pid in pids {
            let now = ticks(pid);
            used += now.saturating_sub(self.last.get(&pid).copied().unwrap_or(0));
            next.insert(pid, now);
        }
        self.last = next;
        used
    }
}

pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<HostPoint>>,
}

impl Sampler {
    pub fn start(pid_file: PathBuf, stacks: Arc<Stacks>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let root = pid_file
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let handle = std::thread::spawn(move || {
            let start = Instant::now();
            let mut out = Vec::new();
            let (mut dockerd, mut proxy_ticks, mut serve_ticks, mut own, mut containerd) = (
                Ticks::default(),
                Ticks::default(),
                Ticks::default(),
                Ticks::default(),
                Ticks::default(),
            );
            let mut machine = crate::procs::machine_ticks();
            let mut machine_at = Instant::now();
            while !flag.load(Ordering::SeqCst) {
                let pid: u32 = std::fs::read_to_string(&pid_file)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0);
                let now = Instant::now();
                let (mut proxies, mut serves) = (0, 0);
                let (mut proxy_pids, mut serve_pids) = (Vec::new(), Vec::new());
                for s in &stacks.all {
                    let (p, v) = s.rss();
                    proxies += p;
                    serves += v;
                    let (p, v) = s.pids();
                    proxy_pids.extend(p);
                    serve_pids.extend(v);
                }
                // Ticks are hundredths of a second of one core.
                let secs = now.duration_since(machine_at).as_secs_f64().max(0.001);
                let m = crate::procs::machine_ticks();
                let busy =
                    m.0.saturating_sub(machine.0)
                        .saturating_sub(m.1.saturating_sub(machine.1));
                (machine, machine_at) = (m, now);
                let engine_procs = crate::orphans::processes_naming(&root);
                let family: Vec<u32> = engine_procs
                    .iter()
                    .filter(|p| p.comm.starts_with("containerd"))
                    .map(|p| p.pid)
                    .collect();
                let (dockerd_used, proxy_used, serve_used, own_used, containerd_used) = (
                    dockerd.since(&[pid], own_ticks),
                    proxy_ticks.since(&proxy_pids, own_ticks),
                    serve_ticks.since(&serve_pids, own_ticks),
                    own.since(&[std::process::id()], own_ticks),
                    containerd.since(&family, ticks_with_reaped),
                );
                // The first sample has no interval before it: its processes' whole lives.
                let first = out.is_empty();
                let pct = |t: u64| if first { 0.0 } else { t as f64 / secs };
                out.push(HostPoint {
                    secs: start.elapsed().as_secs_f64(),
                    dockerd_rss_kib: rss_kib(pid),
                    dockerd_cpu_pct: pct(dockerd_used),
                    shims: engine_procs
                        .iter()
                        .filter(|p| p.comm.starts_with("containerd-shim"))
                        .count() as u64,
                    proxies_rss_kib: proxies,
                    serves_rss_kib: serves,
                    host_busy_pct: pct(busy),
                    proxies_cpu_pct: pct(proxy_used),
                    serves_cpu_pct: pct(serve_used),
                    containerd_cpu_pct: pct(containerd_used),
                    harness_cpu_pct: pct(own_used),
                });
                std::thread::sleep(Duration::from_secs(2));
            }
            out
        });
        Self { stop, handle }
    }

    pub fn stop(self) -> Vec<HostPoint> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap_or_default()
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// utime + stime of `pid` alone (clock ticks, 100 a second), not its children.
fn own_ticks(pid: u32) -> u64 {
    stat_ticks(pid, 2)
}

/// utime + stime of `pid` and of the children it has waited for (cutime + cstime).
fn ticks_with_reaped(pid: u32) -> u64 {
    stat_ticks(pid, 4)
}

/// The sum of the `fields` time fields of `/proc/PID/stat` from utime on (man 5 proc).
fn stat_ticks(pid: u32, fields: usize) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .skip(11)
                .take(fields)
                .filter_map(|t| t.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

/// The `q` quantile (0..=1) of `sorted`, nearest rank.
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted.get(rank - 1).copied()
}
