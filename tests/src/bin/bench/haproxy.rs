//! Part 6 (`--parts haproxy`, not run by default): what HAProxy in front of the provisioners
//! adds per deer-flow call (issue 53, docs/multi-host.md). One `lifecycle serve` (memory
//! store, TCP with a key) over sockproxy and the fake engine, and HAProxy running
//! `deploy/multi-host/haproxy.cfg` as shipped (logging included) with only its `bind` and
//! `server` lines rewritten for the run, that serve its one server. Each call opens a new
//! connection, as deer-flow's module-level `requests` calls do; direct and through HAProxy
//! take turns each round, and the table gives p50 and p99 over every call of the row.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sockproxy_tests::multihost::haproxy_config;

use crate::procs::{free_port, installed, tcp_answers, Proc};
use crate::socket::{start_fake, start_sockproxy, PREFIX};
use crate::Args;

const KEY: &str = "bench-key-0123456789abcdef";
const START_LIMIT: Duration = Duration::from_secs(30);

/// The calls measured: (row label, method, path, the status it must answer).
const CALLS: [(&str, &str, &str, u16); 4] = [
    (
        "`GET /health` (the engine's cached ping)",
        "GET",
        "/health",
        200,
    ),
    ("`GET /api/capabilities`", "GET", "/api/capabilities", 200),
    (
        "`GET /api/sandboxes/{id}` (absent: one inspect)",
        "GET",
        "/api/sandboxes/0123456789abcdef",
        404,
    ),
    (
        "`GET /api/sandboxes` (the engine's list)",
        "GET",
        "/api/sandboxes",
        200,
    ),
];

/// One call on a new connection to 127.0.0.1:`port`: its status, after reading the whole answer.
fn once(port: u16, method: &str, path: &str) -> anyhow::Result<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: provisioner\r\nX-API-Key: {KEY}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes())?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no status line")
}

/// `calls` timed calls; fails on an answer other than `want`.
fn timed(
    port: u16,
    method: &str,
    path: &str,
    want: u16,
    calls: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(calls);
    for _ in 0..calls {
        let began = Instant::now();
        let status = once(port, method, path)?;
        out.push(began.elapsed());
        if status != want {
            bail!("{method} {path} on port {port} answered {status}, not {want}");
        }
    }
    Ok(out)
}

/// The `q` quantile (0..=1) of `samples`, in milliseconds.
fn quantile_ms(samples: &mut [Duration], q: f64) -> f64 {
    samples.sort();
    let Some(last) = samples.len().checked_sub(1) else {
        return 0.0;
    };
    let i = ((last as f64) * q).round() as usize;
    samples[i.min(last)].as_secs_f64() * 1000.0
}

fn cell(ms: f64) -> String {
    match ms {
        m if m < 1.0 => format!("{m:.3} ms"),
        m if m < 10.0 => format!("{m:.2} ms"),
        m => format!("{m:.1} ms"),
    }
}

pub fn haproxy(args: &Args, bins: &Path, dir: &Path) -> anyhow::Result<()> {
    println!("## 6. HAProxy in front of one provisioner (issue 53)\n");
    let Some(haproxy) = installed("haproxy") else {
        println!("Skipped: haproxy is not installed.\n");
        return Ok(());
    };
    let engine = start_fake(bins, dir, "ha")?;
    let proxy = start_sockproxy(bins, dir, &engine.socket, "ha", &[])?;
    let key_file = dir.join("ha-key");
    std::fs::write(&key_file, KEY)?;
    std::fs::set_permissions(
        &key_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )?;
    let state = dir.join("ha-state");
    std::fs::create_dir_all(&state)?;
    let port = free_port()?;
    let mut cmd = Command::new(bins.join("lifecycle-cli"));
    cmd.arg("--docker-host")
        .arg(format!("unix://{}", proxy.socket.display()))
        .args(["--prefix", PREFIX, "--mode", "open", "--state-dir"])
        .arg(&state)
        .arg("serve")
        .arg("--listen")
        .arg(format!("tcp://127.0.0.1:{port}"))
        .arg("--api-key-file")
        .arg(&key_file)
        .env_remove("DOCKER_HOST");
    let mut serve = Proc::spawn("lifecycle serve", cmd, dir.join("ha-serve.log"))?;
    serve.wait(START_LIMIT, || {
        once(port, "GET", "/health").is_ok_and(|s| s == 200)
    })?;
    let front = free_port()?;
    let cfg = dir.join("ha-haproxy.cfg");
    std::fs::write(&cfg, haproxy_config(front, &[("host1".into(), port)]))?;
    let mut cmd = Command::new(&haproxy);
    cmd.arg("-db").arg("-f").arg(&cfg);
    let mut front_proc = Proc::spawn("haproxy", cmd, dir.join("ha-haproxy.log"))?;
    front_proc.wait(START_LIMIT, || {
        tcp_answers(front) && once(front, "GET", "/health").is_ok_and(|s| s == 200)
    })?;

    let calls = args.haproxy_calls;
    println!(
        "One `lifecycle serve` (this build's, memory store, TCP with a key) over sockproxy and the fake engine; HAProxy running `deploy/multi-host/haproxy.cfg` as shipped (its `bind` and `server` lines rewritten, logging per request to a file) with that serve as its one server. A new connection per call, as deer-flow's `requests` makes them; {calls} calls per route and round, {} rounds, direct and through HAProxy taking turns; p50 and p99 over every call of the row.\n",
        args.rounds
    );
    println!("| call | direct p50 | direct p99 | through HAProxy p50 | through HAProxy p99 | added at p50 |");
    println!("|---|---|---|---|---|---|");
    for (label, method, path, want) in CALLS {
        let (mut direct, mut through) = (Vec::new(), Vec::new());
        for round in 0..args.rounds {
            // Which route goes first alternates, so neither always runs on a warmer machine.
            let order = match round % 2 {
                0 => [(port, true), (front, false)],
                _ => [(front, false), (port, true)],
            };
            for (p, is_direct) in order {
                let got = timed(p, method, path, want, calls)?;
                match is_direct {
                    true => direct.extend(got),
                    false => through.extend(got),
                }
            }
        }
        let (d50, d99) = (
            quantile_ms(&mut direct, 0.5),
            quantile_ms(&mut direct, 0.99),
        );
        let (t50, t99) = (
            quantile_ms(&mut through, 0.5),
            quantile_ms(&mut through, 0.99),
        );
        println!(
            "| {label} | {} | {} | {} | {} | {} |",
            cell(d50),
            cell(d99),
            cell(t50),
            cell(t99),
            cell(t50 - d50)
        );
    }
    println!();
    drop(front_proc);
    drop(serve);
    drop(proxy);
    drop(engine);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_the_nearest_rank() {
        let mut s: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(quantile_ms(&mut s, 0.5), 51.0);
        assert_eq!(quantile_ms(&mut s, 0.99), 99.0);
        assert_eq!(quantile_ms(&mut [], 0.5), 0.0);
    }
}
