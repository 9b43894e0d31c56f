//! The soak's traffic: one blocking worker thread per kind of request, each looping until the
//! soak stops it, counting what was done and what failed. Everything goes to sockproxy's Unix
//! socket or to netproxy on loopback, with IP literals only (nothing is ever resolved).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use sockproxy_tests::raw;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::socket::PREFIX;
use crate::tunnel::{echo, open, Route};

/// Bounds every read and write, so a stuck proxy costs a worker this long, never the run.
const IO_LIMIT: Duration = Duration::from_secs(10);
/// A breath between operations: the soak looks for drift under steady traffic, not for the
/// highest rate, and the machine it runs on is shared with builds.
pub const PAUSE: Duration = Duration::from_millis(5);
/// How long a followed log stream is read before the client walks away.
const FOLLOW_FOR: Duration = Duration::from_millis(300);
const DOWNLOAD: u64 = 256 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    List,
    Lifecycle,
    Exec,
    Logs,
    Refused,
    Tunnel,
    TunnelRefused,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::List,
        Kind::Lifecycle,
        Kind::Exec,
        Kind::Logs,
        Kind::Refused,
        Kind::Tunnel,
        Kind::TunnelRefused,
    ];

    /// The row label in the traffic table (and what the smoke test looks for).
    pub fn label(self) -> &'static str {
        match self {
            Kind::List => "container list",
            Kind::Lifecycle => "create/start/stop/remove",
            Kind::Exec => "exec with stdin (upgrade)",
            Kind::Logs => "logs follow=1, dropped",
            Kind::Refused => "refused (foreign name, denied endpoint)",
            Kind::Tunnel => "CONNECT tunnel",
            Kind::TunnelRefused => "refused CONNECT",
        }
    }

    pub fn proxy(self) -> &'static str {
        match self {
            Kind::Tunnel | Kind::TunnelRefused => "netproxy",
            _ => "sockproxy",
        }
    }

    fn index(self) -> usize {
        Kind::ALL.iter().position(|k| *k == self).unwrap_or(0)
    }
}

/// Operations done and failed per kind, with the last failure's message for the report.
#[derive(Debug, Default)]
pub struct Counts {
    done: [AtomicU64; 7],
    errors: [AtomicU64; 7],
    last_error: Mutex<[Option<String>; 7]>,
}

impl Counts {
    fn record(&self, kind: Kind, r: anyhow::Result<()>) {
        let i = kind.index();
        match r {
            Ok(()) => {
                self.done[i].fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.errors[i].fetch_add(1, Ordering::Relaxed);
                if let Ok(mut last) = self.last_error.lock() {
                    last[i] = Some(format!("{e:#}"));
                }
            }
        }
    }

    pub fn done(&self, kind: Kind) -> u64 {
        self.done[kind.index()].load(Ordering::Relaxed)
    }

    pub fn errors(&self, kind: Kind) -> u64 {
        self.errors[kind.index()].load(Ordering::Relaxed)
    }

    pub fn last_error(&self, kind: Kind) -> Option<String> {
        self.last_error.lock().ok()?[kind.index()].clone()
    }

    pub fn total(&self) -> u64 {
        Kind::ALL.iter().map(|k| self.done(*k)).sum()
    }
}

/// Lets the soak pause all traffic (to read the proxies at rest) and stop it. A worker marks
/// itself busy before checking the pause flag, and the soak sets the flag before waiting for
/// no one to be busy, so no operation can slip in after the wait ends.
#[derive(Debug, Default)]
pub struct Gate {
    paused: AtomicBool,
    stopped: AtomicBool,
    busy: AtomicUsize,
}

impl Gate {
    /// Blocks while paused; false once stopped.
    fn enter(&self) -> bool {
        loop {
            if self.stopped.load(Ordering::SeqCst) {
                return false;
            }
            self.busy.fetch_add(1, Ordering::SeqCst);
            if !self.paused.load(Ordering::SeqCst) {
                return true;
            }
            self.busy.fetch_sub(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn leave(&self) {
        self.busy.fetch_sub(1, Ordering::SeqCst);
    }

    /// Pauses (or with `stop`, ends) the traffic and waits up to `limit` for operations in
    /// flight to finish; whether they all did.
    pub fn quiesce(&self, stop: bool, limit: Duration) -> bool {
        self.paused.store(true, Ordering::SeqCst);
        if stop {
            self.stopped.store(true, Ordering::SeqCst);
        }
        let deadline = Instant::now() + limit;
        while self.busy.load(Ordering::SeqCst) > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }
}

/// What the workers share.
#[derive(Debug)]
pub struct Ctx {
    pub sockproxy: PathBuf,
    pub netproxy: u16,
    pub upstream: u16,
    pub rt: tokio::runtime::Handle,
    pub gate: Gate,
    pub counts: Counts,
    /// Running containers the exec and logs workers use (logs: one writing, one quiet).
    pub exec_target: String,
    pub logs_targets: [String; 2],
}

/// Starts one worker per kind; they run until `ctx.gate` is stopped.
pub fn spawn(ctx: &Arc<Ctx>) -> Vec<std::thread::JoinHandle<()>> {
    Kind::ALL
        .iter()
        .map(|&kind| {
            let ctx = ctx.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while ctx.gate.enter() {
                    let r = step(&ctx, kind, n);
                    ctx.gate.leave();
                    ctx.counts.record(kind, r);
                    n += 1;
                    std::thread::sleep(PAUSE);
                }
            })
        })
        .collect()
}

fn step(ctx: &Ctx, kind: Kind, n: u64) -> anyhow::Result<()> {
    match kind {
        Kind::List => list(ctx),
        Kind::Lifecycle => lifecycle(ctx, n),
        Kind::Exec => exec(ctx, n),
        Kind::Logs => logs(ctx, n),
        Kind::Refused => refused(ctx, n),
        Kind::Tunnel => tunnel(ctx, n),
        Kind::TunnelRefused => tunnel_refused(ctx),
    }
}

/// One request with `Connection: close` (so every operation opens and closes a connection,
/// which is what exposes descriptor leaks); status and body.
pub fn call(
    sock: &std::path::Path,
    method: &str,
    target: &str,
    body: Option<&[u8]>,
) -> anyhow::Result<raw::RawResponse> {
    let mut s = UnixStream::connect(sock).context("connecting to sockproxy")?;
    s.set_read_timeout(Some(IO_LIMIT))?;
    s.set_write_timeout(Some(IO_LIMIT))?;
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n");
    let body = body.unwrap_or_default();
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .with_context(|| format!("{method} {target}"))?;
    raw::parse(&out).with_context(|| format!("{method} {target}"))
}

/// `call`, failing unless the status is `want`.
fn expect(
    ctx: &Ctx,
    want: u16,
    method: &str,
    target: &str,
    body: Option<&[u8]>,
) -> anyhow::Result<raw::RawResponse> {
    let r = call(&ctx.sockproxy, method, target, body)?;
    ensure!(
        r.status == want,
        "{method} {target}: {} {}",
        r.status,
        r.text().trim()
    );
    Ok(r)
}

/// Creates and starts `name` running `cmd`, through sockproxy.
pub fn run_container(sock: &std::path::Path, name: &str, cmd: &[&str]) -> anyhow::Result<()> {
    let body = serde_json::json!({ "Image": "busybox", "Cmd": cmd }).to_string();
    let r = call(
        sock,
        "POST",
        &format!("/containers/create?name={name}"),
        Some(body.as_bytes()),
    )?;
    ensure!(
        r.status == 201,
        "creating {name}: {} {}",
        r.status,
        r.text()
    );
    let r = call(sock, "POST", &format!("/containers/{name}/start"), None)?;
    ensure!(
        r.status == 204,
        "starting {name}: {} {}",
        r.status,
        r.text()
    );
    Ok(())
}

fn list(ctx: &Ctx) -> anyhow::Result<()> {
    let r = expect(ctx, 200, "GET", "/containers/json?all=1", None)?;
    ensure!(r.json().is_array(), "the list is not a JSON array");
    Ok(())
}

fn lifecycle(ctx: &Ctx, n: u64) -> anyhow::Result<()> {
    let name = format!("{PREFIX}sandbox-soak-life-{n}");
    let run = (|| {
        run_container(&ctx.sockproxy, &name, &["sleep", "600"])?;
        expect(ctx, 204, "POST", &format!("/containers/{name}/stop"), None)?;
        expect(ctx, 204, "DELETE", &format!("/containers/{name}"), None)?;
        anyhow::Ok(())
    })();
    if run.is_err() {
        // Best effort, so a failed cycle does not leave a container behind to skew the lists.
        let _ = call(
            &ctx.sockproxy,
            "DELETE",
            &format!("/containers/{name}?force=1"),
            None,
        );
    }
    run
}

fn exec(ctx: &Ctx, n: u64) -> anyhow::Result<()> {
    let body = serde_json::json!({
        "AttachStdin": true, "AttachStdout": true, "AttachStderr": true, "Cmd": ["cat"]
    })
    .to_string();
    let target = format!("/containers/{}/exec", ctx.exec_target);
    let created = expect(ctx, 201, "POST", &target, Some(body.as_bytes()))?;
    let id = created.json()["Id"]
        .as_str()
        .map(str::to_owned)
        .context("exec create answered without an Id")?;
    let req = raw::exec_start_request(&id);
    let mut conn = raw::Conn::open(&ctx.sockproxy, &req).context("exec start")?;
    ensure!(conn.status == 101, "exec start: {}", conn.status);
    let line = format!("soak {n}\n");
    conn.write(line.as_bytes())?;
    let echoed = conn.read_until(IO_LIMIT, |b| raw::demux(b).0.ends_with(line.as_bytes()));
    ensure!(
        raw::demux(&echoed).0 == line.as_bytes(),
        "exec echoed {:?}",
        String::from_utf8_lossy(&echoed)
    );
    // Half-close ends `cat`; the engine then closes the stream, which must reach us.
    conn.close_write()?;
    let rest = conn.read_to_end(IO_LIMIT);
    ensure!(
        raw::demux(&rest).0.is_empty(),
        "exec wrote after stdin closed"
    );
    Ok(())
}

fn logs(ctx: &Ctx, n: u64) -> anyhow::Result<()> {
    let name = &ctx.logs_targets[(n % 2) as usize];
    let req = format!(
        "GET /containers/{name}/logs?follow=1&stdout=1&stderr=1 HTTP/1.1\r\nHost: docker\r\n\r\n"
    );
    let mut conn = raw::Conn::open(&ctx.sockproxy, req.as_bytes()).context("logs")?;
    ensure!(conn.status == 200, "logs of {name}: {}", conn.status);
    let got = conn.read_until(FOLLOW_FOR, |_| false);
    ensure!(!got.is_empty(), "no log output from {name}");
    // Dropping `conn` here, mid-stream, is the point: the proxy must let go of both sides.
    Ok(())
}

fn refused(ctx: &Ctx, n: u64) -> anyhow::Result<()> {
    let foreign = serde_json::json!({ "Image": "busybox", "Cmd": ["true"] }).to_string();
    match n % 4 {
        0 => expect(
            ctx,
            403,
            "POST",
            &format!("/containers/create?name=other-soak-{n}"),
            Some(foreign.as_bytes()),
        ),
        1 => expect(ctx, 403, "POST", "/containers/other-soak/stop", None),
        2 => expect(ctx, 403, "POST", "/containers/prune", None),
        _ => expect(ctx, 403, "GET", "/images/json", None),
    }
    .map(drop)
}

fn tunnel(ctx: &Ctx, n: u64) -> anyhow::Result<()> {
    let (port, up) = (ctx.netproxy, ctx.upstream);
    ctx.rt.block_on(async move {
        let work = async {
            let mut s = open(Route::Connect(port), up).await?;
            if n % 2 == 0 {
                return echo(&mut s).await;
            }
            s.write_all(b"s").await?;
            s.write_all(&DOWNLOAD.to_be_bytes()).await?;
            let mut buf = vec![0u8; 64 * 1024];
            let mut got = 0u64;
            loop {
                let k = s.read(&mut buf).await?;
                if k == 0 {
                    break;
                }
                got += k as u64;
            }
            ensure!(got == DOWNLOAD, "tunnel moved {got} of {DOWNLOAD} bytes");
            Ok(())
        };
        tokio::time::timeout(IO_LIMIT, work)
            .await
            .context("tunnel timed out")?
    })
}

/// A CONNECT to a loopback port netproxy does not allow; it must answer 403 without dialling.
fn tunnel_refused(ctx: &Ctx) -> anyhow::Result<()> {
    let mut s = TcpStream::connect(("127.0.0.1", ctx.netproxy))?;
    s.set_read_timeout(Some(IO_LIMIT))?;
    s.set_write_timeout(Some(IO_LIMIT))?;
    s.write_all(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n")?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b)? == 0 || head.len() > 16 * 1024 {
            bail!("netproxy closed before answering CONNECT");
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head);
    let first = text.lines().next().unwrap_or_default();
    ensure!(
        first.split_whitespace().nth(1) == Some("403"),
        "refused CONNECT answered {first}"
    );
    Ok(())
}
