//! What the multi-host tests and the benchmark's HAProxy part share (docs/multi-host.md):
//! keyed HTTP/1.0 calls to a serve's loopback port that follow no redirect (`call`, `http`),
//! deer-flow's remote-backend calls (`remote`, with `requests`, which follows the serves' 307s
//! as deer-flow does), the shipped `deploy/multi-host/haproxy.cfg` with a run's frontend port
//! and hosts (`haproxy_config`, `haproxy`), and bounded waits.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::provisioner::{script, KEY};

/// One answer: status (0 when nothing answered), `Location` (if any) and body as JSON.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub location: Option<String>,
    pub body: Value,
}

/// One host of a multi-host set: `lifecycle serve` on `cmd` (its global flags already there),
/// listening on 127.0.0.1:`port` with the shared key file and mount root, owning through
/// `redis` as `owner` under `key_prefix` (when given) with claims of `ttl` seconds (adopt grace
/// 2 s, tick 1 s), advertising its own URL, logging at `info` to `log`.
#[derive(Debug)]
pub struct ServeHost<'a> {
    pub port: u16,
    pub key_file: &'a Path,
    pub root: &'a Path,
    pub redis: &'a str,
    pub owner: &'a str,
    pub key_prefix: Option<&'a str>,
    pub ttl: u32,
}

impl ServeHost<'_> {
    /// Starts it, with `extra` serve flags.
    pub fn spawn(&self, cmd: &mut Command, extra: &[&str], log: std::fs::File) -> Child {
        cmd.arg("serve")
            .arg("--listen")
            .arg(format!("tcp://127.0.0.1:{}", self.port))
            .arg("--api-key-file")
            .arg(self.key_file)
            .arg("--mount-root")
            .arg(self.root)
            .args(["--ownership", self.redis, "--owner-id", self.owner])
            .args([
                "--advertise-url",
                &format!("http://127.0.0.1:{}", self.port),
            ])
            .args(["--ownership-ttl", &self.ttl.to_string()])
            .args(["--adopt-grace", "2", "--tick", "1"]);
        if let Some(p) = self.key_prefix {
            cmd.args(["--ownership-key-prefix", p]);
        }
        cmd.args(extra)
            .env("LIFECYCLE_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("lifecycle serve starts")
    }
}

/// One keyed HTTP/1.0 request to 127.0.0.1:`port` with an optional JSON body; no redirect
/// followed.
pub fn call(port: u16, method: &str, path: &str, body: Option<&Value>) -> Reply {
    call_to(&format!("127.0.0.1:{port}"), method, path, body)
}

/// `call` to `addr` (`HOST:PORT`).
pub fn call_to(addr: &str, method: &str, path: &str, body: Option<&Value>) -> Reply {
    use std::io::{Read, Write};
    let none = Reply {
        status: 0,
        location: None,
        body: Value::Null,
    };
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return none;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    let payload = body.map(Value::to_string).unwrap_or_default();
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: t\r\nX-API-Key: {KEY}\r\n");
    if body.is_some() {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            payload.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(&payload);
    if s.write_all(req.as_bytes()).is_err() {
        return none;
    }
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let location = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("location")
            .then(|| value.trim().to_owned())
    });
    Reply {
        status,
        location,
        body: serde_json::from_str(rest).unwrap_or(Value::Null),
    }
}

/// `call` without a body: (status, body).
pub fn http(port: u16, method: &str, path: &str) -> (u16, Value) {
    let r = call(port, method, path, None);
    (r.status, r.body)
}

/// deer-flow's calls (`deerflow_remote.py`) against `port`: what it printed, or why the
/// contract broke.
pub fn remote(port: u16, args: &[&str]) -> Result<String, String> {
    let base = format!("http://127.0.0.1:{port}");
    let out = Command::new("python3")
        .arg(script())
        .args([base.as_str(), KEY])
        .args(args)
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    match out.status.success() {
        true => Ok(text),
        false => Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr))),
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The shipped HAProxy configuration.
pub fn shipped_haproxy_cfg() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/multi-host/haproxy.cfg")
}

/// The shipped HAProxy configuration as is, but for its `bind` line (127.0.0.1:`port`) and
/// its `server` lines (one per host, on loopback, health-checked as shipped).
pub fn haproxy_config(port: u16, hosts: &[(String, u16)]) -> String {
    let text = std::fs::read_to_string(shipped_haproxy_cfg()).expect("shipped haproxy.cfg");
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("bind ") {
            out.push_str(&format!("    bind 127.0.0.1:{port}\n"));
        } else if t.starts_with("server ") {
            if t.starts_with("server host1 ") {
                for (name, p) in hosts {
                    out.push_str(&format!("    server {name} 127.0.0.1:{p} check\n"));
                }
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// HAProxy running `haproxy_config` (its config and log in `dir`), in the foreground.
pub fn haproxy(dir: &Path, port: u16, hosts: &[(String, u16)]) -> Child {
    let cfg = dir.join("haproxy.cfg");
    std::fs::write(&cfg, haproxy_config(port, hosts)).expect("config");
    let log = std::fs::File::create(dir.join("haproxy.log")).expect("log");
    Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&cfg)
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("haproxy starts")
}

/// Whether `haproxy -v` runs.
pub fn haproxy_installed() -> bool {
    Command::new("haproxy")
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A child killed (and reaped) when dropped.
#[derive(Debug)]
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (at most `secs`) until `ok`, or panics naming `what`.
pub fn wait_for(what: &str, secs: u64, ok: impl FnMut() -> bool) {
    assert!(wait_until(secs, ok), "{what}: not within {secs} s");
}

/// Whether `ok` came true within `secs`.
pub fn wait_until(secs: u64, mut ok: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    true
}

/// `s` percent-encoded for a query string.
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Writes the provisioner key to `dir/key`, mode 0600 as the serve requires; its path.
pub fn key_file(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("key");
    std::fs::write(&path, KEY).expect("key");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("mode");
    path
}

/// Whether the test may run what it starts (root, for dockerds of its own; `haproxy` too when
/// `with_haproxy`); else a skip notice and `false`.
pub fn may_run(test: &str, with_haproxy: bool) -> bool {
    if !nix::unistd::geteuid().is_root() {
        crate::skip::skip(
            test,
            "not root (it starts dockerds of its own)",
            "run as root, as CI does",
        );
        return false;
    }
    if with_haproxy && !haproxy_installed() {
        crate::skip::skip(
            test,
            "no haproxy on PATH",
            "apt-get install haproxy, as .ci/run does",
        );
        return false;
    }
    true
}

/// Sandbox ID → (container ID, running) of every container on `engine` whose name begins
/// with `name_prefix`.
pub fn sandboxes_named(
    engine: &Path,
    name_prefix: &str,
) -> std::collections::BTreeMap<String, (String, bool)> {
    let filter = format!("{{\"name\":[\"{name_prefix}\"]}}");
    let target = format!("/containers/json?all=1&filters={}", urlencode(&filter));
    let r = crate::raw::get(engine, &target).expect("list");
    let mut out = std::collections::BTreeMap::new();
    for c in r.json().as_array().cloned().unwrap_or_default() {
        let id = c["Labels"]["deerflow.sandbox_id"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let cid = c["Id"].as_str().unwrap_or("").to_owned();
        out.insert(id, (cid, c["State"] == "running"));
    }
    out
}

/// The IDs of every container on `engine` labelled with sandbox `id`, whichever stack made it.
pub fn labelled(engine: &Path, id: &str) -> Vec<String> {
    let filter = format!("{{\"label\":[\"deerflow.sandbox_id={id}\"]}}");
    let target = format!("/containers/json?all=1&filters={}", urlencode(&filter));
    crate::raw::get(engine, &target)
        .map(|r| {
            r.json()
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|c| c["Id"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        })
        .unwrap_or_default()
}
