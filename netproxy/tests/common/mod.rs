//! Shared by the tests that run the `netproxy` binary: free loopback ports, and a running
//! netproxy whose JSON log lines can be waited for. Not every test file uses every helper.
#![allow(dead_code)]

// The suite's one bounded wait for a program (this package cannot depend on the tests crate).
#[path = "../../../tests/src/bounded.rs"]
pub mod bounded;
pub mod dns;
pub mod logs;
pub mod ns;
pub mod peer;
pub mod scripted;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

/// The next log line containing `what` (earlier lines are consumed).
pub fn wait_for(lines: &mpsc::Receiver<String>, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(l) = lines.recv_timeout(Duration::from_millis(200)) {
            if l.contains(what) {
                return l;
            }
        }
    }
    panic!("no log line with {what:?}");
}

/// The `netproxy` binary on a free loopback port, trusting 127.0.0.1; killed when dropped.
#[derive(Debug)]
pub struct Netproxy {
    pub port: u16,
    pub lines: mpsc::Receiver<String>,
    child: Child,
}

impl Netproxy {
    /// Started with `args` added, once it says it is listening.
    pub fn start<S: AsRef<OsStr>>(args: &[S]) -> Self {
        Self::start_env(args, &[])
    }

    /// Started with `args` added and `env` set.
    pub fn start_env<S: AsRef<OsStr>>(args: &[S], env: &[(&str, &str)]) -> Self {
        Self::start_under(&[], args, env)
    }

    /// Started as an argument of `wrapper` (e.g. `prlimit --nofile=…`), `args` added and
    /// `env` set.
    pub fn start_under<S: AsRef<OsStr>>(
        wrapper: &[&str],
        args: &[S],
        env: &[(&str, &str)],
    ) -> Self {
        let port = free_port();
        let bin = env!("CARGO_BIN_EXE_netproxy");
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = cmd
            .envs(env.iter().copied())
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--allow-cidr",
                "127.0.0.1/32",
            ])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .expect("netproxy starts");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        wait_for(&lines, "netproxy listening");
        Self { port, lines, child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `GET url` through this proxy; the whole answer.
    pub fn get(&self, url: &str) -> String {
        http_get(self.port, url)
    }

    /// The next `tunnel closed` log line, parsed.
    pub fn tunnel_closed(&self) -> serde_json::Value {
        let line = wait_for(&self.lines, "tunnel closed");
        serde_json::from_str(&line).expect("a JSON log line")
    }
}

impl Drop for Netproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET url` through the proxy on 127.0.0.1:`proxy`, `Connection: close`; the whole answer.
pub fn http_get(proxy: u16, url: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", proxy)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}
