//! The run's engine's processes as the host sees them (`/proc`), and its orphaned containerd
//! shims: a shim (its command line names the engine's directory) whose container (`-id`) the
//! engine answers 404 for, still running after 10 s of grace.
//!
//! Why they appear: with `--live-restore`, a container whose start is under way when the
//! harness sends dockerd SIGTERM gets its task (shim and process) from containerd, but dockerd
//! never records it as running; the restarted dockerd finds it stopped ("Removing stale
//! sandbox" for it in dockerd's log), leaves containerd's live task alone (live-restore), and
//! when the container is removed later, its task and shim are not. That is the engine's
//! (Debian's dockerd 20.10), made to happen by the harness's own fault: `judge` excuses an
//! orphan whose shim started before the restart ended and counts any other. Either way the
//! orphan and its container's processes are killed, so the run leaves nothing running.

use std::path::Path;
use std::time::{Duration, Instant};

use sockproxy_tests::raw;

/// A process on the host, as `/proc` shows it.
#[derive(Debug, Clone)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
    pub cmdline: String,
    /// When it started, in seconds since boot.
    pub started_s: f64,
}

impl Process {
    /// The value after `flag` on its command line (a shim's `-id`).
    pub fn arg(&self, flag: &str) -> Option<&str> {
        let mut words = self.cmdline.split(' ');
        words.find(|w| *w == flag)?;
        words.next()
    }
}

/// Seconds since boot now (`/proc/uptime`).
pub fn uptime_s() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|u| u.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// A process's start, in seconds since boot (`/proc/PID/stat` field 22, 100 ticks a second).
fn started_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19)?.parse::<u64>().ok())
        .map_or(0.0, |t| t as f64 / 100.0)
}

/// Every process whose command line names `root` (the run's engine directory: its dockerd,
/// containerd and their shims), this process excepted.
pub fn processes_naming(root: &str) -> Vec<Process> {
    if root.is_empty() {
        return Vec::new();
    }
    let me = std::process::id();
    let under = format!("{root}/");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if pid == me || !cmdline.contains(&under) {
                return None;
            }
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            Some(Process {
                pid,
                comm: comm.trim().to_owned(),
                cmdline: cmdline.trim().to_owned(),
                started_s: started_s(pid),
            })
        })
        .collect()
}

/// The engine's orphaned shims, after up to 10 s of grace (a shim exits a moment after its
/// task is deleted).
pub fn shims(engine: &Path, root: &str) -> Vec<Process> {
    let orphans = || -> Vec<Process> {
        processes_naming(root)
            .into_iter()
            .filter(|p| p.comm.starts_with("containerd-shim"))
            .filter(|p| {
                p.arg("-id").is_none_or(|id| {
                    raw::get(engine, &format!("/containers/{id}/json"))
                        .is_ok_and(|r| r.status == 404)
                })
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut left = orphans();
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        left = orphans();
    }
    left
}

/// (counted, excused): an orphan whose shim started before the harness's dockerd restart
/// ended (`restarted_at`, seconds since boot) is the engine's reaction to that fault; any
/// other is a leak.
pub fn judge(orphans: Vec<Process>, restarted_at: Option<f64>) -> (Vec<Process>, Vec<Process>) {
    orphans
        .into_iter()
        .partition(|p| restarted_at.is_none_or(|end| p.started_s > end))
}

/// SIGKILL of every process in the shim's container's cgroup, then of the shim.
pub fn kill_with_its_container(shim: &Process) {
    let id = shim.arg("-id").unwrap_or_default();
    let mut pids: Vec<u32> = Vec::new();
    if id.len() >= 12 {
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for e in dir.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
                    continue;
                };
                let cg = std::fs::read_to_string(e.path().join("cgroup")).unwrap_or_default();
                if cg.contains(id) {
                    pids.push(pid);
                }
            }
        }
    }
    pids.push(shim.pid);
    for pid in pids {
        if let Ok(pid) = i32::try_from(pid) {
            if pid > 1 {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::SIGKILL,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shim(pid: u32, started_s: f64) -> Process {
        Process {
            pid,
            comm: "containerd-shim".into(),
            cmdline: format!("/usr/bin/containerd-shim-runc-v2 -namespace moby -id {pid:064x}"),
            started_s,
        }
    }

    #[test]
    fn an_orphan_from_before_the_restart_is_excused_any_other_counted() {
        let (counted, excused) = judge(vec![shim(1, 100.0), shim(2, 200.0)], Some(150.0));
        assert_eq!(counted.iter().map(|p| p.pid).collect::<Vec<_>>(), [2]);
        assert_eq!(excused.iter().map(|p| p.pid).collect::<Vec<_>>(), [1]);
        let (counted, excused) = judge(vec![shim(1, 100.0)], None);
        assert_eq!((counted.len(), excused.len()), (1, 0));
    }

    #[test]
    fn a_shims_id_is_read_from_its_command_line() {
        assert_eq!(
            shim(10, 0.0).arg("-id"),
            Some(format!("{:064x}", 10).as_str())
        );
        assert_eq!(shim(10, 0.0).arg("-address"), None);
    }

    #[test]
    fn this_process_has_a_start_time_before_now() {
        let s = started_s(std::process::id());
        assert!(s > 0.0 && s <= uptime_s() + 1.0, "{s}");
    }
}
