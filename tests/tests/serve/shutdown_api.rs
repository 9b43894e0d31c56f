//! Issue 48, point 2, at shutdown: deer-flow's sandboxes (made through the provisioner API) are
//! never destroyed by a provider's shutdown, whatever `--on-shutdown` says, and the next
//! provider adopts them as deer-flow's; `/v1/` sandboxes keep `--on-shutdown`'s meaning, torn
//! down at most `--shutdown-parallel` at once; at start a sandbox whose claim is this
//! provider's own is adopted at once, one another provider owns is left to it.

use std::time::Duration;

use serde_json::{json, Value};
use sockproxy_tests::engine::Engine;
use sockproxy_tests::raw;
use sockproxy_tests::serve::{config, Served};

use crate::crash_steps::{create, Site, ID};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_never_destroys_deer_flows_sandboxes_and_the_next_provider_adopts_them() {
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let site = Site::new(&e, "open");
    // The default --on-shutdown: destroy.
    let mut first = site.provider_with(site.proxy.socket(), "first.sock", &[]);
    let sock = first.sock.clone();
    let made = tokio::task::spawn_blocking(move || create(&sock))
        .await
        .expect("thread")
        .expect("answer");
    assert_eq!(made.status, 200, "{}", made.text());
    let url = made.json()["sandbox_url"].clone();
    let (status, leased) = first.acquire("user-1", "v1-thread").await;
    assert_eq!(status, 200, "{leased}");
    let out = first.terminate();
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = |id: &str| -> Value {
        printed
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["sandbox_id"] == id)
            .unwrap_or(Value::Null)
    };
    assert_eq!(line(ID)["result"], "kept", "deer-flow's is kept: {printed}");
    let v1 = leased["sandbox_id"].as_str().unwrap_or_default();
    assert_eq!(
        line(v1)["result"],
        "destroyed",
        "/v1/'s is destroyed: {printed}"
    );
    let running = |name: &str| {
        raw::get(&e.socket, &format!("/containers/{name}/json"))
            .is_ok_and(|r| r.status == 200 && r.json()["State"]["Running"] == json!(true))
    };
    assert!(running(&format!("{}sandbox-{ID}", site.prefix)));
    assert!(!running(&format!("{}sandbox-{v1}", site.prefix)));
    // The next provider adopts it at start (its first reconciliation) as deer-flow's: tracked,
    // never leased through /v1/, answered again to deer-flow at the same URL.
    let second = site.provider_with(site.proxy.socket(), "second.sock", &[]);
    let mut adopted = false;
    for _ in 0..200 {
        if second.ids().await.iter().any(|(id, _)| id == ID) {
            adopted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(adopted, "adopted at start: {}", second.stderr());
    let (status, text) = second.acquire("user-1", "thread-1").await;
    assert_eq!(status, 409, "{text}");
    let sock = second.sock.clone();
    let again = tokio::task::spawn_blocking(move || create(&sock))
        .await
        .expect("thread")
        .expect("answer");
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.json()["sandbox_url"], url);
}

/// A shutdown tears `/v1/` sandboxes down at most `--shutdown-parallel` at once: with a bound of
/// 2 and four sandboxes, the engine sees two stops while those two are held, and all four are
/// destroyed once they go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_runs_at_most_its_bound_of_teardowns_at_once() {
    let mut cfg = config(0, 0);
    cfg.shutdown_parallel = 2;
    let s = Served::start_with(cfg, true).await;
    let relay = s.relay.as_ref().expect("relayed");
    for thread in ["a", "b", "c", "d"] {
        let a = s.acquired("user-1", thread, "run").await;
        assert_eq!(s.release(&a["lease"]).await.0, 200);
    }
    let gates: Vec<_> = (0..4).map(|_| relay.hold_once("POST", "/stop")).collect();
    let provider = s.provider.clone();
    let shutdown =
        tokio::spawn(async move { lifecycle::serve::background::shutdown(&provider, false).await });
    gates[0].arrived().await;
    gates[1].arrived().await;
    // Two are held at the engine; the others wait for a slot and send nothing meanwhile.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stops = || {
        relay
            .requests()
            .iter()
            .filter(|l| l.starts_with("POST") && l.contains("/stop"))
            .count()
    };
    assert_eq!(stops(), 2, "{:?}", relay.requests());
    for g in &gates {
        g.release();
    }
    let lines = shutdown.await.expect("shutdown");
    assert_eq!(lines.len(), 4);
    assert!(lines.iter().all(|l| l.result == "destroyed"), "{lines:?}");
    assert_eq!(stops(), 4);
}

/// At start a provider adopts at once a running sandbox whose claim is its own (its
/// `--owner-id`'s, from before a restart), and leaves one another provider owns to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_adopts_what_it_owns_at_once_and_leaves_what_another_owns() {
    let Some(redis) = sockproxy_tests::redis_server::RedisServer::start(
        "reconciliation_adopts_what_it_owns_at_once_and_leaves_what_another_owns",
    ) else {
        return;
    };
    let ttl = Duration::from_secs(60);
    let s = Served::start_owned(config(0, 0), false, redis.ownership("me", ttl)).await;
    let labels = |id: &str, thread: &str| {
        json!({"deerflow.role": "sandbox", "deerflow.network_mode": "open",
               "deerflow.sandbox_id": id, "deerflow.stack": s.stack.prefix,
               "lifecycle.origin": "provisioner",
               "lifecycle.scope": lifecycle::naming::scope_digest("user-1", thread)})
    };
    let mine = s.stack.id("mine");
    let theirs = s.stack.id("theirs");
    s.stack
        .make(&s.stack.names(&mine).sandbox, labels(&mine, "mine"));
    s.stack
        .make(&s.stack.names(&theirs).sandbox, labels(&theirs, "theirs"));
    // Claims as a previous run of this provider, and a peer, left them.
    let earlier_me = redis.ownership("me", ttl);
    let peer = redis.ownership("peer", ttl);
    assert!(earlier_me.claim(&mine).await.is_ok());
    assert!(peer.claim(&theirs).await.is_ok());
    lifecycle::serve::background::reconcile(&s.provider).await;
    assert_ne!(
        s.listed(&json!(mine)).await,
        Value::Null,
        "its own, at once"
    );
    assert_eq!(
        s.listed(&json!(theirs)).await,
        Value::Null,
        "the peer's is left"
    );
    assert_eq!(
        peer.value(&theirs).await.ok(),
        Some(Some("own:peer".into()))
    );
}
