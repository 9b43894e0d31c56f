//! The real docker CLI, pointed at a socket, with a deadline so a hang fails the test instead
//! of stalling the suite.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct CliOutput {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl CliOutput {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    pub fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// Every docker CLI on this machine (Debian's and a newer one may both be installed); tests
/// that are about what the CLI sends run with each. None is a failure, not an empty list: a
/// loop over no CLI would assert nothing.
pub fn clis() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("docker");
        if candidate.is_file() {
            let real = std::fs::canonicalize(&candidate).unwrap_or(candidate.clone());
            if !found
                .iter()
                .any(|f| std::fs::canonicalize(f).ok().as_ref() == Some(&real))
            {
                found.push(candidate);
            }
        }
    }
    assert!(
        !found.is_empty(),
        "no docker CLI on PATH (apt-get install docker.io, as .ci/run does)"
    );
    found
}

/// The first docker CLI on PATH.
pub fn default_cli() -> PathBuf {
    clis().swap_remove(0)
}

pub fn docker(sock: &Path, args: &[&str]) -> CliOutput {
    docker_with(&default_cli(), sock, args, None, Duration::from_secs(120))
}

pub fn docker_stdin(sock: &Path, args: &[&str], stdin: &[u8]) -> CliOutput {
    docker_with(
        &default_cli(),
        sock,
        args,
        Some(stdin),
        Duration::from_secs(120),
    )
}

/// Runs `cli args…` against `sock`; kills it at `deadline` (then `code` is `None`).
pub fn docker_with(
    cli: &Path,
    sock: &Path,
    args: &[&str],
    stdin: Option<&[u8]>,
    deadline: Duration,
) -> CliOutput {
    let config = tempfile::tempdir().expect("temp dir for DOCKER_CONFIG");
    let mut child = Command::new(cli)
        .args(args)
        .env("DOCKER_HOST", format!("unix://{}", sock.display()))
        .env("DOCKER_CONFIG", config.path())
        .env_remove("DOCKER_CONTEXT")
        .env_remove("DOCKER_API_VERSION")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("docker CLI starts");
    let writer = stdin.map(|data| {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&data);
        })
    });
    let mut stdout = child.stdout.take().expect("stdout pipe");
    let mut stderr = child.stderr.take().expect("stderr pipe");
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut v);
        v
    });
    let start = Instant::now();
    let code = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.code(),
            Ok(None) if start.elapsed() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    if let Some(w) = writer {
        let _ = w.join();
    }
    CliOutput {
        code,
        stdout: out_t.join().unwrap_or_default(),
        stderr: String::from_utf8_lossy(&err_t.join().unwrap_or_default()).into_owned(),
    }
}

/// A docker CLI command left running (`logs -f`, `events`), its stdout piped; its throwaway
/// `DOCKER_CONFIG` lives as long as it does. Killed when dropped.
#[derive(Debug)]
pub struct Running {
    pub child: std::process::Child,
    _config: tempfile::TempDir,
}

impl Running {
    /// Its stdout, line by line, read on a thread (so a test can wait with a deadline).
    pub fn lines(&mut self) -> std::sync::mpsc::Receiver<String> {
        use std::io::BufRead;
        let stdout = self.child.stdout.take().expect("stdout is piped once");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        rx
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the default docker CLI against `sock` and leaves it running.
pub fn spawn_docker(sock: &Path, args: &[&str]) -> Running {
    let config = tempfile::tempdir().expect("temp dir for DOCKER_CONFIG");
    let child = Command::new(default_cli())
        .args(args)
        .env("DOCKER_HOST", format!("unix://{}", sock.display()))
        .env("DOCKER_CONFIG", config.path())
        .env_remove("DOCKER_CONTEXT")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("docker CLI starts");
    Running {
        child,
        _config: config,
    }
}
