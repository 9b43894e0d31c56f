//! `lifecycle serve`'s limits on its socket (`--header-timeout`, `--write-timeout`,
//! `--max-connections`), on the program: a client that never finishes its request head, or sends
//! nothing, or idles after an answer, is disconnected while another client is served; one that
//! stalls its body is answered 408 and disconnected; one that pipelines requests and never reads
//! the answers is disconnected and its slot freed; over the cap a client is answered 503 in the
//! API's error shape and a freed slot serves again; bad values (and a bad ownership key prefix)
//! are refused at start-up. In
//! process: a request held at the engine longer than the timeout is still answered.
//! Every wait is bounded and waits for an event; nothing is asserted about time.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use lifecycle::serve::limits::Limits;
use serde_json::json;
use sockproxy_tests::lc::{lifecycle_base, LcStack};
use sockproxy_tests::raw::{self, RawResponse};
use sockproxy_tests::serve::{config, Served};
use sockproxy_tests::serve_process::ServeProcess;
use sockproxy_tests::unique_prefix;

/// Bound on every wait for an event: a close, an answer, an exit.
const BOUND: Duration = Duration::from_secs(10);

fn serve(stack: &LcStack, dir: &Path, limits: &[&str]) -> ServeProcess {
    ServeProcess::start(
        stack.proxy.socket(),
        &stack.prefix,
        stack.state.path(),
        dir.join("serve.sock"),
        &["--ready-timeout", "0"],
        limits,
    )
}

/// Whether the server closes `s` within BOUND with nothing sent: a read sees EOF (or a reset),
/// not its timeout and no answer.
fn closed_by_server(s: &mut UnixStream) -> bool {
    let mut buf = [0u8; 1024];
    s.set_read_timeout(Some(BOUND)).expect("read timeout");
    match s.read(&mut buf) {
        Ok(0) => true,
        // A timed-out connection is closed with nothing said (hyper sends no answer for a
        // header timeout); bytes mean an answer, e.g. the cap's 503, not the timeout.
        Ok(_) => false,
        Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
        // WouldBlock / TimedOut: still open at the bound.
        Err(_) => false,
    }
}

/// Reads one answer with a `Content-Length` off a kept-alive connection.
fn read_answer(s: &mut UnixStream) -> std::io::Result<RawResponse> {
    s.set_read_timeout(Some(BOUND))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = raw::parse(&buf[..end + 4])?;
            let len: usize = head
                .header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return raw::parse(&buf[..end + 4 + len]);
            }
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return raw::parse(&buf);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A connection that got a 200 to `GET /healthz` and is kept alive: it holds one of the
/// server's slots. Retried while the server is full (a slot another connection just gave up
/// is freed a moment after that connection closes).
fn held(sock: &Path) -> UnixStream {
    let deadline = Instant::now() + BOUND;
    loop {
        let mut s = UnixStream::connect(sock).expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: lifecycle\r\n\r\n")
            .expect("write");
        match read_answer(&mut s) {
            Ok(r) if r.status == 200 => return s,
            other => assert!(Instant::now() < deadline, "never served: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `GET /healthz` on a new connection until it answers 200 (within BOUND).
fn served_eventually(sock: &Path) -> RawResponse {
    let deadline = Instant::now() + BOUND;
    loop {
        match raw::get(sock, "/healthz") {
            Ok(r) if r.status == 200 => return r,
            other => assert!(Instant::now() < deadline, "never served: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_half_sent_head_or_an_idle_connection_is_closed_while_another_client_is_served() {
    let stack = LcStack::new(false);
    let dir = tempfile::tempdir().expect("dir");
    let serve = serve(
        &stack,
        dir.path(),
        &["--header-timeout", "1", "--max-connections", "2"],
    );
    let mut slow = UnixStream::connect(&serve.sock).expect("connect");
    slow.write_all(b"POST /v1/acquire HTTP/1.1\r\nHost: lifecycle\r\nContent-Ty")
        .expect("half a head");
    let other = served_eventually(&serve.sock);
    assert_eq!(other.json()["ok"], true, "{}", other.text());
    assert!(
        closed_by_server(&mut slow),
        "a head never finished is cut off"
    );

    // A connection that sends nothing, and one idle after its answer, are closed the same way.
    let mut silent = UnixStream::connect(&serve.sock).expect("connect");
    let mut kept = held(&serve.sock);
    assert!(
        closed_by_server(&mut silent),
        "a silent connection is closed"
    );
    assert!(closed_by_server(&mut kept), "an idle kept-alive one too");
    served_eventually(&serve.sock);
}

#[test]
fn a_body_that_stops_coming_is_answered_408_and_its_connection_closed() {
    let stack = LcStack::new(false);
    let dir = tempfile::tempdir().expect("dir");
    let serve = serve(
        &stack,
        dir.path(),
        &["--header-timeout", "1", "--max-connections", "2"],
    );
    let mut stalled = UnixStream::connect(&serve.sock).expect("connect");
    stalled
        .write_all(
            b"POST /v1/acquire HTTP/1.1\r\nHost: lifecycle\r\nContent-Type: application/json\r\n\
              Content-Length: 100\r\n\r\n{\"user_id\": ",
        )
        .expect("a head and part of its body");
    stalled.set_read_timeout(Some(BOUND)).expect("read timeout");
    let mut out = Vec::new();
    stalled
        .read_to_end(&mut out)
        .expect("answered and closed within the bound");
    let r = raw::parse(&out).expect("an HTTP answer");
    assert_eq!(r.status, 408, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({ "error": "request body not received within --header-timeout" })
    );
    served_eventually(&serve.sock);
}

#[test]
fn over_the_connection_cap_a_client_is_answered_503_and_a_freed_slot_serves_again() {
    let stack = LcStack::new(false);
    let dir = tempfile::tempdir().expect("dir");
    // A long timeout: the connections holding the cap must not be closed by it meanwhile.
    let serve = serve(
        &stack,
        dir.path(),
        &["--header-timeout", "60", "--max-connections", "2"],
    );
    let first = held(&serve.sock);
    let _second = held(&serve.sock);

    let busy = json!({ "error": "too many connections (--max-connections 2); try again" });
    let r = raw::get(&serve.sock, "/healthz").expect("an answer, not a reset");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json(), busy);
    // One that sends nothing is answered the same: the answer does not wait for a request.
    let mut silent = UnixStream::connect(&serve.sock).expect("connect");
    silent.set_read_timeout(Some(BOUND)).expect("read timeout");
    let mut out = Vec::new();
    silent.read_to_end(&mut out).expect("answered and closed");
    let r = raw::parse(&out).expect("an HTTP answer");
    assert_eq!((r.status, r.json()), (503, busy));

    drop(first);
    let r = served_eventually(&serve.sock);
    assert_eq!(r.json()["ok"], true, "{}", r.text());

    // One warn line per refused connection.
    let deadline = Instant::now() + BOUND;
    let refusals = || {
        serve
            .stderr()
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("too many connections"))
            .count()
    };
    while refusals() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(refusals() >= 2, "{}", serve.stderr());
}

/// A client that pipelines requests and never reads the answers: once the server's buffers and
/// the socket's are full of answers, the write stalls, and after `--write-timeout` the connection
/// is closed. With `--max-connections 1` the next client is served only once that slot is free.
#[test]
fn a_client_that_never_reads_its_answers_is_disconnected_and_its_slot_freed() {
    let stack = LcStack::new(false);
    let dir = tempfile::tempdir().expect("dir");
    // A long header timeout: only the write timeout can close the connection within BOUND.
    let serve = serve(
        &stack,
        dir.path(),
        &[
            "--header-timeout",
            "60",
            "--write-timeout",
            "0.5",
            "--max-connections",
            "1",
        ],
    );
    // Served once first, so that it is the connection holding the one slot.
    let greedy = held(&serve.sock);
    // 8 MiB of requests: their answers are far more than the server's write buffer and the
    // socket's hold, so the server stalls on them, stops reading, and the writer blocks until the
    // connection is closed (or its write timeout, the bound, runs out).
    let mut writer = greedy.try_clone().expect("clone");
    writer
        .set_write_timeout(Some(BOUND))
        .expect("write timeout");
    let requests = b"GET /healthz HTTP/1.1\r\nHost: lifecycle\r\n\r\n".repeat(200_000);
    let sent = std::thread::spawn(move || writer.write_all(&requests));

    let r = served_eventually(&serve.sock);
    assert_eq!(r.json()["ok"], true, "{}", r.text());
    let e = sent
        .join()
        .expect("writer thread")
        .expect_err("the server stopped taking requests");
    assert!(
        matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset),
        "the connection was closed, not merely stuck: {e}"
    );
    // The answers it did get are still there to read; after them, the close.
    let mut greedy = greedy;
    greedy.set_read_timeout(Some(BOUND)).expect("read timeout");
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match greedy.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!("still open after its answers: {e}"),
        }
    }

    let deadline = Instant::now() + BOUND;
    let stalls = || {
        serve
            .stderr()
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("--write-timeout"))
            .count()
    };
    while stalls() < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(stalls(), 1, "{}", serve.stderr());
}

/// Clients over the cap that neither send nor close hold their refusal (and a descriptor) for up
/// to a second each: at most 16 are answered at a time, the rest closed unanswered at once, so
/// a client reconnecting in a loop cannot pile them up.
#[test]
fn refusals_over_the_cap_are_bounded_too() {
    let stack = LcStack::new(false);
    let dir = tempfile::tempdir().expect("dir");
    let serve = serve(
        &stack,
        dir.path(),
        &["--header-timeout", "60", "--max-connections", "1"],
    );
    let _held = held(&serve.sock);
    // Connected in a burst, far within the second each refusal may take.
    let mut over: Vec<UnixStream> = (0..40)
        .map(|_| UnixStream::connect(&serve.sock).expect("connect"))
        .collect();
    let (mut answered, mut unanswered) = (0, 0);
    for s in &mut over {
        s.set_read_timeout(Some(BOUND)).expect("read timeout");
        let mut out = Vec::new();
        match s.read_to_end(&mut out) {
            Ok(_) if out.is_empty() => unanswered += 1,
            Ok(_) => {
                let r = raw::parse(&out).expect("an HTTP answer");
                assert_eq!(r.status, 503, "{}", r.text());
                answered += 1;
            }
            Err(e) if e.kind() == ErrorKind::ConnectionReset => unanswered += 1,
            Err(e) => panic!("neither answered nor closed within {BOUND:?}: {e}"),
        }
    }
    assert!((1..=16).contains(&answered), "{answered} answered");
    assert_eq!(answered + unanswered, 40);
}

#[test]
fn bad_limit_and_store_flags_are_refused_at_start_up() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (
            &["--header-timeout", "0"],
            &[],
            "lifecycle serve: --header-timeout: 0: expected seconds from 0.1 to 3600",
        ),
        (
            &["--header-timeout=-1"],
            &[],
            "--header-timeout: -1: expected",
        ),
        (
            &["--header-timeout", "inf"],
            &[],
            "--header-timeout: inf: expected",
        ),
        (
            &["--write-timeout", "0"],
            &[],
            "lifecycle serve: --write-timeout: 0: expected seconds from 0.1 to 3600",
        ),
        (
            &["--write-timeout", "7200"],
            &[],
            "--write-timeout: 7200: expected",
        ),
        (
            &["--max-connections", "0"],
            &[],
            "lifecycle serve: --max-connections: 0: expected at least 1",
        ),
        (
            &[],
            &[("LIFECYCLE_HEADER_TIMEOUT", "0")],
            "--header-timeout: 0: expected",
        ),
        (
            &[],
            &[("LIFECYCLE_WRITE_TIMEOUT", "-1")],
            "--write-timeout: -1: expected",
        ),
        (
            &[],
            &[("LIFECYCLE_MAX_CONNECTIONS", "0")],
            "--max-connections: 0: expected at least 1",
        ),
        (
            &["--header-timeout", "soon"],
            &[],
            "invalid value 'soon' for '--header-timeout",
        ),
        (
            &["--write-timeout", "later"],
            &[],
            "invalid value 'later' for '--write-timeout",
        ),
        (
            &["--max-connections", "many"],
            &[],
            "invalid value 'many' for '--max-connections",
        ),
        (
            &["--ownership-key-prefix", "deerflow:sandbox:owner"],
            &[],
            "lifecycle serve: --ownership-key-prefix: only with a Redis --ownership",
        ),
        (
            &[
                "--ownership",
                "unix:///nonexistent/redis.sock",
                "--ownership-key-prefix",
                ":::",
            ],
            &[],
            "lifecycle serve: --ownership-key-prefix: \":::\" is empty",
        ),
        (
            &["--ownership", "unix:///nonexistent/redis.sock"],
            &[("LIFECYCLE_OWNERSHIP_KEY_PREFIX", "deer flow")],
            "--ownership-key-prefix: \"deer flow\" holds whitespace",
        ),
    ];
    for (flags, env, want) in cases {
        let dir = tempfile::tempdir().expect("dir");
        let sock = dir.path().join("serve.sock");
        let mut child = lifecycle_base(
            &dir.path().join("no-engine.sock"),
            &unique_prefix(),
            "open",
            dir.path(),
        )
        .arg("serve")
        .arg("--listen")
        .arg(&sock)
        .args(*flags)
        .env_remove("LIFECYCLE_HEADER_TIMEOUT")
        .env_remove("LIFECYCLE_WRITE_TIMEOUT")
        .env_remove("LIFECYCLE_MAX_CONNECTIONS")
        .env_remove("LIFECYCLE_OWNERSHIP_KEY_PREFIX")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lifecycle serve");
        let deadline = Instant::now() + BOUND;
        while child.try_wait().expect("wait").is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if child.try_wait().expect("wait").is_none() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{flags:?} {env:?}: still running, not refused");
        }
        let out = child.wait_with_output().expect("exited");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?} {env:?}: {stderr}");
        assert!(stderr.contains(want), "{flags:?} {env:?}: {stderr}");
        assert!(!sock.exists(), "{flags:?} {env:?}: nothing was bound");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_held_at_the_engine_past_the_header_timeout_is_still_answered() {
    let limits = Limits::new(1.0, 10.0, 2).expect("limits");
    let s = Served::start_limited(config(0, 0), limits).await;
    let (gate, client) = s.acquire_held("POST", "/start", "slow");
    gate.arrived().await;
    // The request is being served, no longer read: the header timeout must not apply to it.
    tokio::time::sleep(limits.header_timeout * 3).await;
    gate.release();
    let (status, acquired) = client.await.expect("the client got an answer");
    assert_eq!(status, 200, "{acquired}");
}
