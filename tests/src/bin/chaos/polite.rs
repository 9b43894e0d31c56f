//! Well-behaved traffic: in each stack, deer-flow's remote-backend sequence against the
//! provisioner API, in a loop until the phase ends: create, discover (GET by ID), an HTTP call
//! to the sandbox URL (`http://localhost:PORT` in both modes: open mode publishes the sandbox's
//! own port, restricted mode its netproxy sidecar's relay to it), list, delete; then
//! deer-flow's local-backend docker CLI sequence (`polite_cli`). Each call is timed and logged
//! with its outcome; a failed create ends that round's API part.
//! Also the held sandbox the lost check asks about (`held_status`).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sockproxy_tests::provisioner::try_call;

use crate::measure::{Log, Op, Phase};
use crate::stacks::{Stack, Stacks, KEY};

/// Bound on each API call (a create waits for the sandbox to answer, up to 30 s).
const CALL_LIMIT: Duration = Duration::from_secs(60);

/// Runs every stack's loop on a thread of its own until `end`; `cli` is the docker CLI.
pub fn run_all(stacks: &Arc<Stacks>, log: &Arc<Log>, cli: &Path, phase: Phase, end: Instant) {
    let handles: Vec<_> = (0..stacks.all.len())
        .map(|k| {
            let (stacks, log, cli) = (stacks.clone(), log.clone(), cli.to_owned());
            std::thread::spawn(move || {
                let s = &stacks.all[k];
                let mut round = 0u64;
                while Instant::now() < end {
                    round += 1;
                    one_round(s, &log, phase, round);
                    if Instant::now() < end {
                        crate::polite_cli::round(&cli, s, &log, phase, round);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
}

/// The sandbox ID of stack `k`'s round `round` in `phase` (16 hex digits, as deer-flow's).
fn sandbox_id(k: usize, phase: Phase, round: u64) -> String {
    let p = match phase {
        Phase::Quiet => 0xa,
        Phase::Chaos => 0xc,
    };
    format!("{p:x}{k:03x}{round:012x}")
}

pub fn api(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> std::io::Result<(u16, String)> {
    try_call(
        addr,
        method,
        path,
        &[("X-API-Key", KEY)],
        body.map(|b| b.to_string().into_bytes()),
        CALL_LIMIT,
    )
}

fn one_round(s: &Stack, log: &Log, phase: Phase, round: u64) {
    let id = sandbox_id(s.k, phase, round);
    let body = json!({"sandbox_id": id, "user_id": format!("user-{}", s.k),
                      "thread_id": format!("thread-{round}")});
    let t = Instant::now();
    let made = api(s.addr, "POST", "/api/sandboxes", Some(&body));
    let url = match &made {
        Ok((200 | 201, text)) => serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|v| v["sandbox_url"].as_str().map(str::to_owned)),
        _ => None,
    };
    log.record(phase, Op::Create, s.k, t, url.is_some());
    if url.is_none() {
        // Clean up whatever half a create left, then pause: the provider may be restarting.
        let _ = api(s.addr, "DELETE", &format!("/api/sandboxes/{id}"), None);
        std::thread::sleep(Duration::from_millis(500));
        return;
    }
    let t = Instant::now();
    let found = api(s.addr, "GET", &format!("/api/sandboxes/{id}"), None);
    log.record(phase, Op::Discover, s.k, t, matches!(found, Ok((200, _))));
    // deer-flow polls a new sandbox's URL for up to 30 s before it uses it: the create answers
    // once the container runs, not once its server listens.
    let t = Instant::now();
    let ready = url
        .as_deref()
        .map_or(Err("no URL".into()), |u| poll_ready(u, READY_LIMIT));
    log.record(phase, Op::Ready, s.k, t, ready.is_ok());
    let t = Instant::now();
    let answer = match ready {
        Ok(()) => url.as_deref().map_or(Err("no URL".into()), url_answer),
        Err(e) => Err(format!("not ready in {} s: {e}", READY_LIMIT.as_secs())),
    };
    log.record(phase, Op::Http, s.k, t, answer.is_ok());
    if let Err(why) = answer {
        let url = url.as_deref().unwrap_or("");
        let seen = failure_context(s, &id, url);
        log.http_failed(s.k, t, format!("{why} ({url}); {seen}"));
    }
    let t = Instant::now();
    let listed = api(s.addr, "GET", "/api/sandboxes", None);
    log.record(phase, Op::List, s.k, t, matches!(listed, Ok((200, _))));
    let t = Instant::now();
    let gone = api(s.addr, "DELETE", &format!("/api/sandboxes/{id}"), None);
    log.record(
        phase,
        Op::Delete,
        s.k,
        t,
        matches!(gone, Ok((200 | 202 | 204 | 404, _))),
    );
}

/// How long deer-flow's remote backend waits for a new sandbox's URL.
const READY_LIMIT: Duration = Duration::from_secs(30);

/// `url_answer` every 100 ms until it answers (`Ok`) or `limit` passes (the last failure).
fn poll_ready(url: &str, limit: Duration) -> Result<(), String> {
    let until = Instant::now() + limit;
    loop {
        match url_answer(url) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= until => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// What the host shows right after a failed call to a sandbox URL, so a report names the
/// cause: the same call again after 200 ms, the sandbox container as the engine holds it
/// (status, start time, restarts, its published port and address) and what listens on the port.
fn failure_context(s: &Stack, id: &str, url: &str) -> String {
    std::thread::sleep(Duration::from_millis(200));
    let again = match url_answer(url) {
        Ok(()) => "answers 0.2 s later".to_owned(),
        Err(e) => format!("0.2 s later: {e}"),
    };
    let name = format!("{}sandbox-{id}", s.prefix);
    let held = match sockproxy_tests::raw::get(s.engine(), &format!("/containers/{name}/json")) {
        Ok(r) if r.status == 200 => {
            let v = r.json();
            let ip: Vec<&str> = v["NetworkSettings"]["Networks"]
                .as_object()
                .map(|n| n.values().filter_map(|e| e["IPAddress"].as_str()).collect())
                .unwrap_or_default();
            format!(
                "engine: {} since {}, restarts {}, ports {}, address {}",
                v["State"]["Status"].as_str().unwrap_or("?"),
                v["State"]["StartedAt"].as_str().unwrap_or("?"),
                v["RestartCount"],
                v["NetworkSettings"]["Ports"],
                ip.join(" ")
            )
        }
        Ok(r) => format!("engine: {name} answers {}", r.status),
        Err(e) => format!("engine: {e}"),
    };
    let port = url.rsplit(':').next().unwrap_or("").trim_end_matches('/');
    let listeners = std::process::Command::new("ss")
        .args(["-Hltnp", &format!("sport = :{port}")])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|e| format!("ss: {e}"));
    format!("{again}; {held}; listening: [{listeners}]")
}

/// One `GET /` to a sandbox URL (`http://localhost:PORT`): whether an HTTP answer came.
pub fn url_answers(url: &str) -> bool {
    url_answer(url).is_ok()
}

/// One `GET /` to a sandbox URL: `Ok` when an answer begins `HTTP/1.`, else what happened
/// instead (the connect, the write or the read failing, or what the answer began with).
pub fn url_answer(url: &str) -> Result<(), String> {
    use std::io::{Read, Write};
    let Some(port) = url
        .strip_prefix("http://localhost:")
        .and_then(|p| p.trim_end_matches('/').parse::<u16>().ok())
    else {
        return Err("not a loopback URL".into());
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut t = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect: {e}"))?;
    let _ = t.set_read_timeout(Some(Duration::from_secs(10)));
    t.write_all(b"GET / HTTP/1.0\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    // The status line may come in more than one read.
    let mut buf = [0u8; 12];
    let mut n = 0;
    while n < 7 {
        match t.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Err(format!("read after {n} bytes: {e}")),
        }
    }
    if buf[..n].starts_with(b"HTTP/1.") {
        Ok(())
    } else {
        Err(format!(
            "closed after {n} bytes: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ))
    }
}

/// The held sandbox's ID in stack `k` (made at the start, kept for the run).
pub fn held_id(k: usize) -> String {
    format!("e{k:03x}{:012x}", 0)
}

/// Creates stack `s`'s held sandbox; its URL.
pub fn make_held(s: &Stack) -> anyhow::Result<String> {
    let id = held_id(s.k);
    let body = json!({"sandbox_id": id, "user_id": format!("user-{}", s.k),
                      "thread_id": "held"});
    let (status, text) = api(s.addr, "POST", "/api/sandboxes", Some(&body))?;
    if !(200..300).contains(&status) {
        anyhow::bail!("held sandbox of stack {}: {status} {text}", s.k);
    }
    Ok(text)
}

/// What the lost check sees for the held sandbox of `s`: `Ok(true)` Running and its URL
/// answering (in restricted mode through the sidecar's relay), `Ok(false)` 404, `Err(what)`
/// anything else: lost.
pub fn held_status(s: &Stack) -> Result<bool, String> {
    let id = held_id(s.k);
    match api(s.addr, "GET", &format!("/api/sandboxes/{id}"), None) {
        Ok((404, _)) => Ok(false),
        Ok((200, text)) => {
            let v: Value = serde_json::from_str(&text).unwrap_or_default();
            let running = v["status"] == "Running";
            let answers = v["sandbox_url"].as_str().is_some_and(url_answers);
            if running && answers {
                Ok(true)
            } else {
                Err(format!("200 {text} (URL answers: {answers})"))
            }
        }
        Ok((status, text)) => Err(format!("{status} {text}")),
        Err(e) => Err(format!("no answer: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// A loopback listener that answers one connection with `reply` (after reading the
    /// request), sent in pieces of `piece` bytes; the URL to reach it.
    fn server(reply: &'static [u8], piece: usize) -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            if let Ok((mut c, _)) = l.accept() {
                let mut req = [0u8; 64];
                let _ = c.read(&mut req);
                for chunk in reply.chunks(piece.max(1)) {
                    let _ = c.write_all(chunk);
                    let _ = c.flush();
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        format!("http://localhost:{port}")
    }

    /// An answer is an answer however the status line arrives; a connection closed before
    /// one, or a port nobody holds, is a failure that says which it was.
    #[test]
    fn url_answer_says_why_a_call_failed() {
        assert_eq!(
            url_answer(&server(b"HTTP/1.0 404 Not Found\r\n\r\n", 64)),
            Ok(())
        );
        assert_eq!(url_answer(&server(b"HTTP/1.0 200 OK\r\n\r\n", 3)), Ok(()));
        assert_eq!(
            url_answer(&server(b"", 1)),
            Err("closed after 0 bytes: \"\"".into())
        );
        assert_eq!(
            url_answer(&server(b"SSH-2", 64)),
            Err("closed after 5 bytes: \"SSH-2\"".into())
        );
        let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = free.local_addr().expect("addr").port();
        drop(free);
        let refused = url_answer(&format!("http://localhost:{port}"));
        assert!(
            refused.as_ref().is_err_and(|e| e.starts_with("connect: ")),
            "{refused:?}"
        );
        assert_eq!(
            url_answer("http://10.0.0.1:80"),
            Err("not a loopback URL".into())
        );
    }

    /// The engine's port proxy in front of a sandbox whose server does not listen yet: it
    /// accepts each connection and, with nothing to forward to, closes it unread (a reset).
    /// After `late` it answers HTTP, as the sandbox does once its server listens.
    fn late_server(late: Duration) -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let from = Instant::now() + late;
        std::thread::spawn(move || {
            for c in l.incoming().take(100) {
                let Ok(mut c) = c else { continue };
                if Instant::now() < from {
                    // Unread request bytes make the close a reset, as the port proxy's is.
                    std::thread::sleep(Duration::from_millis(20));
                    drop(c);
                    continue;
                }
                let mut req = [0u8; 64];
                let _ = c.read(&mut req);
                let _ = c.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
            }
        });
        format!("http://localhost:{port}")
    }

    /// A call made as soon as the create answers fails the way the reports showed ("read after
    /// 0 bytes": a reset); polling as deer-flow does gets the answer once the server listens,
    /// and gives up at its limit when none comes.
    #[test]
    fn poll_ready_waits_out_a_sandbox_that_is_not_listening_yet() {
        let url = late_server(Duration::from_millis(600));
        let first = url_answer(&url);
        assert!(
            first
                .as_ref()
                .is_err_and(|e| e.starts_with("read after 0 bytes")
                    || e.starts_with("closed after 0 bytes")),
            "{first:?}"
        );
        assert_eq!(poll_ready(&url, Duration::from_secs(10)), Ok(()));

        let never = late_server(Duration::from_secs(3600));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(poll_ready(&never, Duration::from_millis(500)));
        });
        // A bound on the wait, not a figure: a poll that never gave up would hang the suite.
        let gave_up = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("poll_ready returns at its limit");
        assert!(gave_up.is_err(), "{gave_up:?}");
    }
}
