//! A private `redis-server` per test: `--port 0` (no TCP at all; `start_tcp`: loopback only), a
//! Unix socket in a temp dir,
//! no persistence; killed (by its own PID) when dropped. Found as `$REDIS_SERVER`, else
//! `redis-server` on PATH or in /usr/bin. Missing: the test is skipped (`skip::skip`: a printed
//! notice, a failure with `CI=true`; CI installs Debian's `redis-server`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lifecycle::serve::redis_store::RedisStore;
use lifecycle::serve::store::{Ownership, Store};

use crate::skip::skip;

#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    pub dir: tempfile::TempDir,
    /// The TCP port on 127.0.0.1 it also listens on (`start_tcp`), for clients in containers.
    pub port: Option<u16>,
}

fn binary() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("REDIS_SERVER") {
        return Some(PathBuf::from(p));
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("redis-server"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([PathBuf::from("/usr/bin/redis-server")])
        .find(|p| p.is_file())
}

impl RedisServer {
    /// A running server, or `None` after printing why `test` is skipped.
    pub fn start(test: &str) -> Option<Self> {
        Self::start_on(test, None)
    }

    /// `start`, also listening on 127.0.0.1:`port` (a container on the host's network reaches
    /// it there; `--bind 127.0.0.1` only).
    pub fn start_tcp(test: &str, port: u16) -> Option<Self> {
        Self::start_on(test, Some(port))
    }

    fn start_on(test: &str, port: Option<u16>) -> Option<Self> {
        let Some(bin) = binary() else {
            skip(
                test,
                "no redis-server",
                "apt-get install redis-server, as .ci/run does",
            );
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("rd")
            .tempdir_in("/tmp")
            .expect("redis dir");
        let child = Self::spawn(&bin, dir.path(), port);
        let server = Self { child, dir, port };
        server.wait_listening();
        Some(server)
    }

    fn spawn(bin: &Path, dir: &Path, port: Option<u16>) -> Child {
        let sock = dir.join("redis.sock");
        let tcp = port.unwrap_or(0).to_string();
        Command::new(bin)
            .args(["--port", &tcp, "--bind", "127.0.0.1", "--unixsocket"])
            .arg(&sock)
            .args([
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
            ])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server")
    }

    fn wait_listening(&self) {
        let sock = self.socket();
        for _ in 0..500 {
            if std::os::unix::net::UnixStream::connect(&sock).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server did not open {}", sock.display());
    }

    /// Starts a killed server again on the same socket, empty (no persistence): an outage
    /// ended by a restart.
    pub fn restart(&mut self) {
        self.kill();
        let bin = binary().expect("found at start");
        self.child = Self::spawn(&bin, self.dir.path(), self.port);
        self.wait_listening();
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// The URL lifecycle's `--ownership` takes.
    pub fn url(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// An ownership store on this server as owner `me` (namespace `t-`, 1 s call bound).
    pub fn ownership(&self, me: &str, ttl: Duration) -> Ownership {
        Ownership::new(
            Store::Redis(
                RedisStore::new(&self.url(), "t-:".into(), Duration::from_secs(1)).expect("url"),
            ),
            me,
            ttl,
        )
    }

    /// Stops the server (an outage); the socket file goes with it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.socket());
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether `path` is a socket something listens on.
pub fn listening(path: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(path).is_ok()
}
