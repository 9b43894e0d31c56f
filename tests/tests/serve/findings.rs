//! Issue 35's findings, each as a test that failed before its fix: steps that finish whatever
//! the client does, IDs that cannot merge tenants, a replica cap that holds, leases that are
//! their holder's, destroy by generation, and the API's refusals.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use lifecycle::naming;
use serde_json::{json, Value};
use sockproxy_tests::lc::LcStack;
use sockproxy_tests::serve::{config, Served};
use sockproxy_tests::serve_process::ServeProcess;

/// Sends `method path` with `body` on a fresh connection and returns it unread: dropping it is
/// a client that gives up (an HTTP client's timeout) while the request is being served.
fn send_and_keep(sock: &std::path::Path, method: &str, path: &str, body: &str) -> UnixStream {
    let mut c = UnixStream::connect(sock).expect("connect");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    c.write_all(req.as_bytes()).expect("send");
    c
}

/// A client that sends `method path` and gives up (its HTTP client's timeout) once the step
/// matching `hold` (method, path part) has reached the engine, held there; returns the gate,
/// still held, for the test to release.
async fn client_leaves_at(
    s: &Served,
    hold: (&str, &str),
    method: &str,
    path: &str,
) -> sockproxy_tests::lc::fault_relay::Gate {
    let gate = s.relay.as_ref().expect("relayed").hold_once(hold.0, hold.1);
    let client = send_and_keep(&s.socket(), method, path, "");
    gate.arrived().await;
    drop(client);
    gate
}

/// Polls the listing of `id` until `done` holds (bounded: 30 s of 50 ms polls).
async fn listed_until(s: &Served, id: &Value, done: impl Fn(&Value) -> bool) -> Value {
    let mut listed = Value::Null;
    for _ in 0..600 {
        listed = s.listed(id).await;
        if done(&listed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    listed
}

/// What the engine was asked on the provider's behalf (the proxy's own event subscription,
/// which keeps its name map current, is not a request of the provider's).
fn provider_asked(s: &Served) -> Vec<String> {
    s.stack
        .asked()
        .into_iter()
        .filter(|l| !l.starts_with("GET /events"))
        .collect()
}

fn sandbox_containers(s: &Served) -> usize {
    let prefix = format!("{}sandbox-", s.stack.prefix);
    s.stack
        .fake()
        .container_names()
        .iter()
        .filter(|n| n.trim_start_matches('/').starts_with(&prefix))
        .count()
}

/// Finding 1: a destroy whose client leaves during a slow stop still finishes (container
/// removed, entry forgotten), holds the sandbox's lock until then (an acquire of the thread
/// waits for it instead of meeting a half-done state), and leaves the thread acquirable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destroy_whose_client_leaves_during_a_slow_stop_still_finishes() {
    let s = Served::start_with(config(0, 0), true).await;
    let a = s.acquired("user-1", "t1", "run").await;
    assert_eq!(s.release(&a["lease"]).await.1["result"], "warm");
    let id = a["sandbox_id"].as_str().unwrap_or_default().to_owned();
    // The gateway's HTTP client gives up while the stop is in flight.
    let gate = client_leaves_at(
        &s,
        ("POST", "/stop"),
        "POST",
        &format!("/v1/sandboxes/{id}/destroy"),
    )
    .await;
    // An acquire of the same thread now waits on the destroy's lock.
    let sock = s.socket();
    let waiting = tokio::spawn(async move {
        sockproxy_tests::serve::call(
            &sock,
            "POST",
            "/v1/acquire",
            Some(json!({"user_id": "user-1", "thread_id": "t1", "holder": "next"})),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "the lock is held while the stop is in flight"
    );
    gate.release();
    let (status, next) = waiting.await.expect("acquire task");
    assert_eq!(
        status, 200,
        "the thread is acquirable, not stuck 409: {next}"
    );
    assert_eq!(next["source"], "created");
    assert_ne!(next["generation"], a["generation"]);
    assert!(!s.exists(&a["generation"]), "the old one was removed");
    assert!(
        !s.stack.ledger().is_quarantined(&id).expect("ledger"),
        "and its teardown finished: no record left"
    );
}

/// Finding 1 (its second half): the last release that performs a deferred destroy, its client
/// gone during a slow stop, still removes the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_release_whose_client_leaves_still_performs_the_deferred_destroy() {
    let s = Served::start_with(config(0, 0), true).await;
    let a = s.acquired("user-1", "t2", "run").await;
    let (status, v) = s.destroy(&a["sandbox_id"]).await;
    assert_eq!((status, v["result"].clone()), (200, json!("deferred")));
    let lease = a["lease"].as_str().unwrap_or_default().to_owned();
    let gate = client_leaves_at(
        &s,
        ("POST", "/stop"),
        "POST",
        &format!("/v1/leases/{lease}/release"),
    )
    .await;
    gate.release();
    let listed = listed_until(&s, &a["sandbox_id"], Value::is_null).await;
    assert_eq!(listed, Value::Null, "forgotten once destroyed");
    assert!(
        !s.exists(&a["generation"]),
        "the deferred destroy ran to its end"
    );
    let again = s.acquired("user-1", "t2", "again").await;
    assert_eq!(again["source"], "created");
}

/// Finding 2: a release cut during its health check still settles the sandbox: warm, no
/// holders (reaped, evicted and warmed as any other), not left active with no holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_cut_during_its_health_check_still_warms_the_sandbox() {
    let s = Served::start_with(config(600, 0), true).await;
    let a = s.acquired("user-1", "t3", "run").await;
    let id = a["sandbox_id"].as_str().unwrap_or_default().to_owned();
    let name = s.stack.names(&id).sandbox;
    let lease = a["lease"].as_str().unwrap_or_default().to_owned();
    let gate = client_leaves_at(
        &s,
        ("GET", &format!("{name}/json")),
        "POST",
        &format!("/v1/leases/{lease}/release"),
    )
    .await;
    gate.release();
    let listed = listed_until(&s, &a["sandbox_id"], |l| l["state"] == "warm").await;
    assert_eq!(listed["state"], "warm", "{listed}");
    assert_eq!(listed["holder_count"], 0, "{listed}");
    assert!(s.running(&a["generation"]));
    let again = s.acquired("user-1", "t3", "again").await;
    assert_eq!(again["source"], "warm");
}

/// Finding 3: `:` (and every byte outside deer-flow's `[A-Za-z0-9_-]`) is refused in both IDs
/// with a 400 before any engine call, so ("org1:bob", "t1") and ("org1", "bob:t1"), which hash
/// alike, never share a sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_that_could_merge_tenants_are_refused_before_any_engine_call() {
    let s = Served::start(config(0, 0)).await;
    s.stack.fake().clear_requests();
    for (user, thread, says) in [
        ("org1:bob", "t1", "user ID may contain only"),
        ("org1", "bob:t1", "thread ID may contain only"),
        ("u", "t\n1", "thread ID must not contain a newline"),
        ("u", &"t".repeat(65), "thread ID must be at most 64"),
        (&"u".repeat(129), "t", "user ID must be at most 128"),
    ] {
        let (status, v) = s.acquire(user, thread, "run").await;
        assert_eq!(status, 400, "{user:?} {thread:?}: {v}");
        let error = v["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{user:?} {thread:?}: {error}");
    }
    assert_eq!(provider_asked(&s), Vec::<String>::new(), "no engine call");
    // The longest IDs deer-flow allows are accepted.
    let ok = s.acquired(&"u".repeat(128), &"t".repeat(64), "run").await;
    assert_eq!(ok["source"], "created");
}

/// Finding 5: 16 concurrent new threads under `--max-replicas 2` never make more than 2
/// sandboxes: creates in flight count, and the rest are answered 503 with Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_concurrent_new_threads_never_exceed_the_replica_cap() {
    let s = Served::start(config(0, 2)).await;
    let mut set = tokio::task::JoinSet::new();
    for i in 0..16 {
        let sock = s.socket();
        set.spawn(async move {
            sockproxy_tests::serve::call(
                &sock,
                "POST",
                "/v1/acquire",
                Some(json!({"user_id": "user-1", "thread_id": format!("c{i}"), "holder": "run"})),
            )
            .await
        });
    }
    let mut statuses = Vec::new();
    while let Some(r) = set.join_next().await {
        let (status, v) = r.expect("task");
        assert!(status == 200 || status == 503, "{status} {v}");
        statuses.push(status);
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        2,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 503).count(),
        14,
        "{statuses:?}"
    );
    assert_eq!(sandbox_containers(&s), 2, "the engine holds two sandboxes");
    let (_, all) = s.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(all["sandboxes"].as_array().map(Vec::len), Some(2), "{all}");
}

/// Finding 6: a lease is its holder's. The listing shows holder names and counts, never a
/// token; a token is 256 random bits; another client's guess releases nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_cannot_release_a_lease_it_did_not_get() {
    let s = Served::start(config(600, 0)).await;
    let a = s.acquired("user-1", "t4", "agent").await;
    let lease = a["lease"].as_str().unwrap_or_default().to_owned();
    assert_eq!(lease.len(), 64, "{lease}");
    assert!(lease.bytes().all(|b| b.is_ascii_hexdigit()), "{lease}");
    let other = s.acquired("user-1", "t4", "upload").await;
    assert_ne!(other["lease"], a["lease"]);
    let (_, all) = s.call("GET", "/v1/sandboxes", None).await;
    let text = all.to_string();
    assert!(!text.contains(&lease), "no token in the listing: {text}");
    let entry = s.listed(&a["sandbox_id"]).await;
    assert_eq!(entry["holder_count"], 2, "{entry}");
    let mut names: Vec<String> = entry["holders"]
        .as_array()
        .map(|a| a.iter().map(|h| h["holder"].to_string()).collect())
        .unwrap_or_default();
    names.sort();
    assert_eq!(names, vec!["\"agent\"", "\"upload\""], "{entry}");
    for h in entry["holders"].as_array().into_iter().flatten() {
        assert_eq!(h.as_object().map(|o| o.len()), Some(1), "a name only: {h}");
    }
    // What another client can try: a forged token, or the entry's ID.
    for forged in [
        "0".repeat(64),
        a["sandbox_id"].as_str().unwrap_or_default().to_owned(),
    ] {
        let (status, v) = s
            .call("POST", &format!("/v1/leases/{forged}/release"), None)
            .await;
        assert_eq!(status, 404, "{v}");
    }
    assert_eq!(
        s.listed(&a["sandbox_id"]).await["holder_count"],
        2,
        "both still held"
    );
}

/// Finding 8: an untracked destroy checks what it would tear down: 404 when the engine has
/// nothing of the ID, 409 (container left running) when the container under the name carries no
/// `lifecycle.scope` label (deer-flow's own, say), and only `?force=true` destroys that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untracked_destroy_of_a_foreign_container_is_refused() {
    let s = Served::start(config(0, 0)).await;
    let (status, v) = s.destroy(&json!("ffffffffffffffff")).await;
    assert_eq!(status, 404, "nothing there: {v}");
    let id = naming::sandbox_id("user-1", "foreign").expect("id");
    let name = s.stack.names(&id).sandbox;
    let cid = s.stack.make(
        &name,
        json!({"deerflow.sandbox_id": id, "deerflow.role": "sandbox", "deerflow.network_mode": "open"}),
    );
    let (status, v) = s.destroy(&json!(id)).await;
    assert_eq!(status, 409, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("?force=true"),
        "{v}"
    );
    assert!(s.running(&json!(cid)), "left running");
    let (status, v) = s
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/destroy?force=true"),
            None,
        )
        .await;
    assert_eq!(
        (status, v["result"].clone()),
        (200, json!("destroyed")),
        "{v}"
    );
    assert!(!s.exists(&json!(cid)), "forced: destroyed");
}

/// Finding 10: wrong methods get 405 with `Allow`; a `holder` over 256 bytes and an unknown
/// field in a `/v1/` body get 400 naming what is wrong; nothing reaches the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_methods_long_holders_and_unknown_fields_are_refused() {
    let s = Served::start(config(0, 0)).await;
    s.stack.fake().clear_requests();
    for (method, path, allow) in [
        ("GET", "/v1/acquire", "POST"),
        ("DELETE", "/v1/sandboxes", "GET"),
        ("GET", "/v1/leases/abc/release", "POST"),
        ("PUT", "/v1/sandboxes/ffffffffffffffff/destroy", "POST"),
        ("POST", "/healthz", "GET"),
    ] {
        let r = s.call_raw(method, path, b"").await;
        assert_eq!(r.status, 405, "{method} {path}: {}", r.text());
        assert_eq!(r.header("allow"), Some(allow), "{method} {path}");
    }
    assert_eq!(s.call_raw("GET", "/v2/nothing", b"").await.status, 404);
    let long = json!({"user_id": "u", "thread_id": "t", "holder": "h".repeat(257)});
    let (status, v) = s.call("POST", "/v1/acquire", Some(long)).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("at most 256"),
        "{v}"
    );
    let unknown = json!({"user_id": "u", "thread_id": "t", "holdr": "typo"});
    let (status, v) = s.call("POST", "/v1/acquire", Some(unknown)).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap_or_default().contains("holdr"),
        "{v}"
    );
    assert_eq!(provider_asked(&s), Vec::<String>::new());
    let ok = json!({"user_id": "u", "thread_id": "t", "holder": "h".repeat(256)});
    assert_eq!(s.call("POST", "/v1/acquire", Some(ok)).await.0, 200);
}

/// Finding 4: with the memory store, a provider killed with SIGKILL leaves a sandbox no one
/// tracks; the next provider on the same stack adopts it at start-up (warm, counted) and its
/// idle timer reaps it. Real processes, real clock; the waits are bounded polls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_mode_adopts_a_killed_providers_orphan_and_reaps_it_when_idle() {
    let stack = LcStack::new(false);
    let dir = tempfile::tempdir().expect("dir");
    let global = ["--ready-timeout", "0", "--sandbox-cmd", "sleep 600"];
    let mut a = ServeProcess::start(
        stack.proxy.socket(),
        &stack.prefix,
        stack.state.path(),
        dir.path().join("a.sock"),
        &global,
        &["--tick", "0.2", "--idle-timeout", "600"],
    );
    let (status, got) = a.acquire("user-1", "orphan").await;
    assert_eq!(status, 200, "{got}");
    let id = got["sandbox_id"].as_str().unwrap_or_default().to_owned();
    a.kill9();
    let b = ServeProcess::start(
        stack.proxy.socket(),
        &stack.prefix,
        stack.state.path(),
        dir.path().join("b.sock"),
        &global,
        &["--tick", "0.2", "--idle-timeout", "2"],
    );
    let mut adopted = false;
    for _ in 0..100 {
        if b.ids().await.iter().any(|(i, _)| *i == id) {
            adopted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(adopted, "B adopts A's orphan at start-up");
    let name = stack.names(&id).sandbox;
    let mut reaped = false;
    for _ in 0..200 {
        if !b.ids().await.iter().any(|(i, _)| *i == id)
            && !stack
                .fake()
                .container_names()
                .iter()
                .any(|n| n.trim_start_matches('/') == name)
        {
            reaped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reaped, "B's idle timer reaps it: no container {name} left");
}
