//! Support for the crash-safety test (`tests/tests/ledger_crash.rs`): a small seeded random
//! source, a process run that may be cut short by SIGKILL, and readers of what lifecycle's
//! state directory holds on disk, file by file, the way a later run would find it.

use crate::bounded::{WaitWithin, SHORT};
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// xorshift64*: reproducible from the seed the test prints.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform enough in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// How a run ended.
#[derive(Debug)]
pub struct Run {
    /// Killed by our SIGKILL (it had not exited yet).
    pub killed: bool,
    pub code: Option<i32>,
    /// Everything it printed before it ended.
    pub stdout: String,
    pub stderr: String,
}

/// Starts `cmd`, waits `delay`, SIGKILLs it if it is still running, and collects its output.
pub fn run_and_kill(mut cmd: Command, delay: Duration) -> Run {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lifecycle starts");
    std::thread::sleep(delay);
    let still_running = matches!(child.try_wait(), Ok(None));
    if still_running {
        let _ = child.kill();
    }
    // Killed above if still running: this returns at once, or names what hangs.
    let out = child.output_within(SHORT).expect("wait");
    Run {
        killed: still_running && out.status.signal() == Some(9),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `cmd` to its end and returns what it printed and how it exited; a run still going after
/// `limit` is killed and the test fails (a program that hangs fails a test, never the suite).
pub fn output_within(mut cmd: Command, limit: Duration) -> std::process::Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the program starts");
    let start = std::time::Instant::now();
    while matches!(child.try_wait(), Ok(None)) {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!(
                "still running after {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("wait")
}

/// What one sandbox directory of the quarantine ledger holds.
#[derive(Debug, Default, Clone)]
pub struct SandboxDir {
    /// Record names (16 hex) and their sizes.
    pub records: BTreeMap<String, u64>,
    /// `.sandbox_id`'s content, if the file is there.
    pub sandbox_id: Option<String>,
    /// Temp files of an interrupted atomic write.
    pub temps: Vec<String>,
    /// Anything else.
    pub other: Vec<String>,
}

fn is_key(name: &str) -> bool {
    name.len() == 16 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Every sandbox directory under a scope's ledger directory, by `k(id)`.
pub fn scan_ledger(dir: &Path) -> BTreeMap<String, SandboxDir> {
    let mut out = BTreeMap::new();
    let Ok(read) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in read {
        let entry = entry.expect("ledger entry");
        let path = entry.path();
        let mut sd = SandboxDir::default();
        for f in std::fs::read_dir(&path).expect("sandbox dir") {
            let f = f.expect("record entry");
            let name = f.file_name().to_string_lossy().into_owned();
            let len = f.metadata().expect("stat").len();
            if is_key(&name) {
                sd.records.insert(name, len);
            } else if name == ".sandbox_id" {
                sd.sandbox_id = Some(std::fs::read_to_string(f.path()).expect("read .sandbox_id"));
            } else if name.starts_with('.') && name.contains(".tmp.") {
                sd.temps.push(name);
            } else {
                sd.other.push(name);
            }
        }
        out.insert(entry.file_name().to_string_lossy().into_owned(), sd);
    }
    out
}

/// Every file under `{state}/ports` and what it holds (`None`: not a port number).
pub fn scan_ports(state: &Path) -> Vec<(PathBuf, Option<u16>)> {
    let mut out = Vec::new();
    let Ok(read) = std::fs::read_dir(state.join("ports")) else {
        return out;
    };
    for entry in read {
        let path = entry.expect("ports entry").path();
        let files: Vec<PathBuf> = if path.is_dir() {
            std::fs::read_dir(&path)
                .expect("ports dir")
                .map(|f| f.expect("port entry").path())
                .collect()
        } else {
            vec![path]
        };
        for f in files {
            let port = std::fs::read_to_string(&f)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            out.push((f, port));
        }
    }
    out.sort();
    out
}
