//! `lifecycle serve` shutdown (issue 16): SIGTERM stops accepting, releases every lease, then
//! destroys (or, with `--on-shutdown keep-warm`, leaves running) what the process owns; a
//! teardown that fails is reported and kept, never logged away.

use lifecycle::serve::background;
use serde_json::Value;
use sockproxy_tests::bounded::{OutputWithin, SHORT};
use sockproxy_tests::lc::fault_relay::FaultRelay;
use sockproxy_tests::lc::LcStack;
use sockproxy_tests::serve::{config, Served};
use sockproxy_tests::serve_process::ServeProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_keep_warm_stops_accepting_and_leaves_sandboxes_running() {
    let stack = LcStack::new(false);
    let dir = tempfile::tempdir().expect("dir");
    let mut serve = ServeProcess::start(
        stack.proxy.socket(),
        &stack.prefix,
        stack.state.path(),
        dir.path().join("serve.sock"),
        &["--ready-timeout", "0", "--sandbox-cmd", "sleep 600"],
        &["--on-shutdown", "keep-warm", "--socket-mode", "0600"],
    );
    let mode = std::fs::metadata(&serve.sock)
        .expect("socket")
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    let (status, held) = serve.acquire("user-1", "held").await;
    assert_eq!(status, 200, "{held}");
    let (_, warm) = serve.acquire("user-1", "warm").await;
    serve.release(&warm).await;
    let out = serve.terminate();
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        printed.lines().filter(|l| l.contains("\"kept\"")).count(),
        2,
        "{printed}"
    );
    assert!(
        !serve.sock.exists(),
        "the socket is gone: nothing is accepted"
    );
    for a in [&held, &warm] {
        let cid = a["generation"].as_str().unwrap_or_default();
        assert!(stack.exists(&format!("/containers/{cid}/json")), "{a}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_failing_teardown_keeps_it_reports_it_on_stderr_and_exits_3() {
    let stack = LcStack::new(false);
    // The process reaches the proxy through a relay that can refuse one engine step.
    let relay = FaultRelay::start(stack.proxy.socket());
    let dir = tempfile::tempdir().expect("dir");
    let mut serve = ServeProcess::start(
        relay.socket(),
        &stack.prefix,
        stack.state.path(),
        dir.path().join("serve.sock"),
        &["--ready-timeout", "0", "--sandbox-cmd", "sleep 600"],
        &[],
    );
    let (status, ok) = serve.acquire("user-1", "ok").await;
    assert_eq!(status, 200, "{ok}");
    let (status, stuck) = serve.acquire("user-1", "stuck").await;
    assert_eq!(status, 200, "{stuck}");
    let (id, cid) = (
        stuck["sandbox_id"].as_str().unwrap_or_default(),
        stuck["generation"].as_str().unwrap_or_default(),
    );
    relay.fail_once("POST", &format!("/containers/{cid}/stop"));
    let out = serve.terminate();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = |a: &Value| {
        printed
            .lines()
            .find(|l| l.contains(a["sandbox_id"].as_str().unwrap_or("?")))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(line(&ok).contains("\"destroyed\""), "{printed}");
    assert!(line(&stuck).contains("\"failed: "), "{printed}");
    let stderr = serve.stderr();
    let report =
        format!("lifecycle serve: sandbox {id} (generation {cid}) was not torn down at shutdown");
    assert!(
        stderr.lines().any(|l| l.starts_with(&report)),
        "one line names it on stderr:\n{stderr}"
    );
    let gone = |a: &Value| {
        !stack.exists(&format!(
            "/containers/{}/json",
            a["generation"].as_str().unwrap_or("")
        ))
    };
    assert!(gone(&ok));
    assert!(!gone(&stuck), "kept, not forgotten");
    assert!(
        stack.ledger().fences(id, cid).expect("ledger"),
        "quarantined"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_reports_a_failed_teardown_and_keeps_it() {
    let s = Served::start_with(config(0, 0), true).await;
    let ok = s.acquired("user-1", "ok", "run").await;
    let stuck = s.acquired("user-1", "stuck", "run").await;
    let relay = s.relay.as_ref().expect("relayed");
    let stuck_cid = stuck["generation"].as_str().unwrap_or_default().to_owned();
    relay.fail_once("POST", &format!("/containers/{stuck_cid}/stop"));
    let lines = background::shutdown(&s.provider, false).await;
    let result = |a: &Value| {
        lines
            .iter()
            .find(|l| Some(l.sandbox_id.as_str()) == a["sandbox_id"].as_str())
            .map(|l| l.result.clone())
            .unwrap_or_default()
    };
    assert_eq!(result(&ok), "destroyed");
    assert!(result(&stuck).starts_with("failed:"), "{lines:?}");
    assert!(!s.exists(&ok["generation"]));
    assert!(s.exists(&stuck["generation"]), "kept, not forgotten");
    let listed = s.listed(&stuck["sandbox_id"]).await;
    assert_eq!(
        listed["holders"],
        serde_json::json!([]),
        "its lease was released"
    );
    assert_eq!(
        listed["destroy_pending"], true,
        "kept fenced for a retry: {listed}"
    );
    let id = stuck["sandbox_id"].as_str().unwrap_or_default();
    assert!(
        s.stack.ledger().fences(id, &stuck_cid).expect("read"),
        "quarantined"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_an_acquire_under_way_finish_and_tears_down_what_it_made() {
    let s = Served::start_with(config(0, 0), true).await;
    let (gate, client) = s.acquire_held("POST", "/start", "late");
    gate.arrived().await;
    let provider = s.provider.clone();
    let shutdown = tokio::spawn(async move { background::shutdown(&provider, false).await });
    gate.release();
    let (status, acquired) = client.await.expect("client");
    assert_eq!(status, 200, "the acquire under way completed: {acquired}");
    let lines = shutdown.await.expect("shutdown");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0].result, "destroyed");
    assert!(!s.exists(&acquired["generation"]), "nothing left running");
}

/// A second `lifecycle serve` on a socket another one answers on refuses to start (one line,
/// exit 1: a failure at run time, issue 40) and the first keeps serving; a stale socket file
/// (nothing listening) is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_never_takes_a_live_socket_but_replaces_a_stale_one() {
    let e = sockproxy_tests::engine::Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let stack = sockproxy_tests::stack::StackProxy::start(&e.socket, "deer-flow-", false);
    let dir = tempfile::tempdir().expect("dir");
    let sock = dir.path().join("serve.sock");
    let first = sockproxy_tests::serve_process::ServeProcess::start(
        stack.socket(),
        "deer-flow-",
        dir.path(),
        sock.clone(),
        &[],
        &[],
    );
    let out = sockproxy_tests::lc::lifecycle_base(stack.socket(), "deer-flow-", "open", dir.path())
        .args(["serve", "--listen"])
        .arg(&sock)
        .output_within(SHORT)
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("another process is serving on this socket; refusing to take it"),
        "{stderr}"
    );
    let r = sockproxy_tests::raw::get(&sock, "/healthz").expect("the first still answers");
    assert_eq!(r.status, 200);
    drop(first);
    // A stale socket file (its server gone, the file left): replaced.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).expect("bind"));
    let second = sockproxy_tests::serve_process::ServeProcess::start(
        stack.socket(),
        "deer-flow-",
        dir.path(),
        stale.clone(),
        &[],
        &[],
    );
    assert_eq!(
        sockproxy_tests::raw::get(&stale, "/healthz")
            .expect("answers")
            .status,
        200
    );
    drop(second);
}
