//! Behaviours of deer-flow's provider tests (seed `004_…`) that `lifecycle serve` has, each as a
//! test named after the seed's, through the HTTP API against the fake engine behind sockproxy.
//! Those about failed teardowns and quarantine records are in `seed_teardown`; the helpers
//! here serve both.

use std::time::{Duration, Instant};

use lifecycle::naming;
use lifecycle::serve::background::{self, reconcile};
use lifecycle::serve::claims::Claim;
use lifecycle::serve::store::{Memory, Ownership, Store};
use serde_json::{json, Value};
use sockproxy_tests::fake::{Fault, FaultRule};
use sockproxy_tests::raw;
use sockproxy_tests::redis_server::RedisServer;
use sockproxy_tests::serve::{config, Served};
use tokio::sync::watch;

/// Creates the engine was asked for.
pub(crate) fn creates(s: &Served) -> usize {
    s.stack
        .fake()
        .request_lines()
        .iter()
        .filter(|l| l.starts_with("POST /containers/create"))
        .count()
}

/// Stops the engine was asked for, of container `cid`.
pub(crate) fn stops_of(s: &Served, cid: &str) -> usize {
    s.stack
        .fake()
        .request_lines()
        .iter()
        .filter(|l| l.starts_with(&format!("POST /containers/{cid}/stop")))
        .count()
}

/// An answer's `error`, or "" when it has none.
pub(crate) fn error_of(v: &Value) -> String {
    v["error"].as_str().unwrap_or_default().to_owned()
}

pub(crate) fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// The engine answers the next stop of container `cid` 500, without stopping it.
pub(crate) fn fail_stop_once(s: &Served, cid: &str) {
    s.stack.fake().inject(FaultRule {
        times: Some(1),
        ..FaultRule::new(
            Some("POST"),
            &format!("/containers/{cid}/stop"),
            Fault::Status500,
        )
    });
}

/// Makes the next quarantine-record write of sandbox `id` fail: a directory stands where the
/// ledger's temp file for `.sandbox_id` would be opened (`Ledger::mark` writes that first).
pub(crate) fn block_record_write(s: &Served, id: &str) {
    let tmp = s
        .stack
        .ledger()
        .dir()
        .join(naming::k(id))
        .join(format!("..sandbox_id.tmp.{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("a directory in the temp file's place");
}

/// Removes container `cid` from the engine behind the provider's back (an operator's
/// `docker rm -f`).
pub(crate) fn remove_behind_its_back(s: &Served, cid: &str) {
    let r = raw::request(
        &s.stack.engine.socket,
        "DELETE",
        &format!("/containers/{cid}?force=true"),
        None,
    )
    .expect("answer");
    assert_eq!(r.status, 204, "{}", r.text());
}

/// The labels lifecycle gives the sandbox of (`user`, `thread`) in open mode.
pub(crate) fn sandbox_labels(s: &Served, user: &str, thread: &str) -> Value {
    let id = naming::sandbox_id(user, thread).expect("id");
    json!({
        naming::LABEL_SANDBOX_ID: id,
        naming::LABEL_SCOPE: naming::scope_digest(user, thread),
        naming::LABEL_ROLE: "sandbox",
        naming::LABEL_NETWORK_MODE: "open",
        naming::LABEL_STACK: s.stack.prefix,
    })
}

/// The value of the counter line `series` (name and labels) in `/metrics`, 0 when absent.
pub(crate) async fn counter(s: &Served, series: &str) -> u64 {
    let (status, text) = s.metrics().await;
    assert_eq!(status, 200);
    text.as_str()
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// A relayed provider with a sandbox A warm and idle past the timeout of 1 s, a sandbox B warm
/// and fresh, and A's next stop held at the relay: a background pass reaps A and waits there.
async fn warm_pair_with_a_held_reap(
) -> (Served, Value, Value, sockproxy_tests::lc::fault_relay::Gate) {
    let s = Served::start_with(config(1, 0), true).await;
    let a = s.acquired("user-1", "expired", "run").await;
    assert_eq!(s.release(&a["lease"]).await.1["result"], "warm");
    s.clock.advance(Duration::from_secs(2));
    let b = s.acquired("user-1", "fresh", "run").await;
    assert_eq!(s.release(&b["lease"]).await.1["result"], "warm");
    let gate = s.relay.as_ref().expect("relayed").hold_once(
        "POST",
        &format!("/containers/{}/stop", str_of(&a["generation"])),
    );
    (s, a, b, gate)
}

/// Mirrors `test_acquire_async_uses_async_readiness_polling`: a create's readiness wait does
/// not hold up the provider, which answers health and listing requests while it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_async_uses_async_readiness_polling() {
    let own = Ownership::new(
        Store::Memory(Memory::default()),
        "me",
        Duration::from_secs(600),
    );
    let ready = Duration::from_secs(3);
    let s = Served::start_probing(config(0, 0), own, ready).await;
    let (gate, acquire) = s.acquire_held("POST", "/start", "slow");
    gate.arrived().await;
    let waiting_since = Instant::now();
    gate.release();
    // Nothing listens at the sandbox's URL: the acquire now polls for up to `ready`.
    // No wall-clock bound: that both answers arrive while the acquire is still unfinished
    // (checked right below) is what shows the wait did not hold the runtime.
    for path in ["/healthz", "/v1/sandboxes"] {
        let (status, v) = s.call("GET", path, None).await;
        assert_eq!(status, 200, "{path}: {v}");
    }
    assert!(
        !acquire.is_finished(),
        "the answers above came while the acquire was still waiting"
    );
    let (status, v) = acquire.await.expect("acquire");
    assert!(
        waiting_since.elapsed() >= ready - Duration::from_millis(200),
        "the acquire did wait for readiness"
    );
    assert_eq!(status, 502, "{v}");
    assert!(error_of(&v).contains("failed to become ready"), "{v}");
    let id = naming::sandbox_id("user-1", "slow").expect("id");
    assert!(
        !s.stack
            .exists(&format!("/containers/{}/json", s.stack.names(&id).sandbox)),
        "the unready container was removed"
    );
    assert_eq!(creates(&s), 1);
    assert_eq!(s.listed(&json!(id)).await, Value::Null, "nothing tracked");
}

/// Mirrors `test_shutdown_keeps_aio_warm_entries_owned_when_idle_checker_stop_times_out`: the
/// background task ends only once its reaper pass has, and shutdown runs after it, keeping the
/// warm entries that remain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_keeps_aio_warm_entries_owned_when_idle_checker_stop_times_out() {
    let (s, a, b, gate) = warm_pair_with_a_held_reap().await;
    let (stop, rx) = watch::channel(false);
    let bg = tokio::spawn(background::run(
        s.provider.clone(),
        Duration::from_millis(100),
        rx,
    ));
    gate.arrived().await;
    stop.send(true).expect("stop");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !bg.is_finished(),
        "the background does not end while its reaper pass is held"
    );
    assert_eq!(s.listed(&a["sandbox_id"]).await["state"], "destroying");
    assert_eq!(s.listed(&b["sandbox_id"]).await["state"], "warm");
    gate.release();
    tokio::time::timeout(Duration::from_secs(30), bg)
        .await
        .expect("the background ends once the pass is done")
        .expect("background task");
    assert!(!s.exists(&a["generation"]), "the held reap finished");
    assert_eq!(s.listed(&a["sandbox_id"]).await, Value::Null);
    let lines = background::shutdown(&s.provider, true).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0].sandbox_id, str_of(&b["sandbox_id"]));
    assert_eq!(lines[0].result, "kept");
    assert!(s.running(&b["generation"]), "kept warm: still running");
    assert_eq!(
        s.provider.own.value(&str_of(&b["sandbox_id"])).await.ok(),
        Some(None),
        "its claim handed back"
    );
}

/// Mirrors `test_shutdown_keeps_aio_warm_entries_owned_when_lease_renewal_stop_times_out`: the
/// heartbeat keeps renewing while the background is stopping, ends with it, and only then
/// does shutdown keep the warm entry; a later shutdown can still tear it down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_keeps_aio_warm_entries_owned_when_lease_renewal_stop_times_out() {
    let (s, a, b, gate) = warm_pair_with_a_held_reap().await;
    let renewed = "lifecycle_lease_renewals_total{result=\"renewed\"}";
    let (stop, rx) = watch::channel(false);
    let bg = tokio::spawn(background::run(
        s.provider.clone(),
        Duration::from_millis(50),
        rx,
    ));
    gate.arrived().await;
    let before = counter(&s, renewed).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let during = counter(&s, renewed).await;
    assert!(
        during > before,
        "renewals go on while the reaper pass is held: {before} then {during}"
    );
    stop.send(true).expect("stop");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!bg.is_finished(), "the background waits for its pass");
    assert_eq!(s.listed(&b["sandbox_id"]).await["state"], "warm");
    gate.release();
    tokio::time::timeout(Duration::from_secs(30), bg)
        .await
        .expect("the background ends, heartbeat included")
        .expect("background task");
    let ended = counter(&s, renewed).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        counter(&s, renewed).await,
        ended,
        "no renewal after the background ended"
    );
    assert!(!s.exists(&a["generation"]));
    let lines = background::shutdown(&s.provider, true).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        (lines[0].sandbox_id.as_str(), lines[0].result.as_str()),
        (b["sandbox_id"].as_str().unwrap_or_default(), "kept")
    );
    assert!(s.running(&b["generation"]));
    assert_eq!(s.listed(&b["sandbox_id"]).await["state"], "warm");
    // Kept, so a later shutdown still has it to tear down.
    let lines = background::shutdown(&s.provider, false).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0].result, "destroyed");
    assert!(!s.exists(&b["generation"]));
}

/// Mirrors `test_create_sandbox_skips_destroy_when_unready_sandbox_owned_by_peer`: a create
/// that times out on readiness after a peer took the claim leaves the container alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_sandbox_skips_destroy_when_unready_sandbox_owned_by_peer() {
    let Some(redis) =
        RedisServer::start("create_sandbox_skips_destroy_when_unready_sandbox_owned_by_peer")
    else {
        return;
    };
    let ttl = Duration::from_millis(600);
    let s = Served::start_probing(
        config(0, 0),
        redis.ownership("me", ttl),
        Duration::from_millis(300),
    )
    .await;
    let peer = redis.ownership("peer", Duration::from_secs(60));
    let id = naming::sandbox_id("user-1", "peer").expect("id");
    let (gate, acquire) = s.acquire_held("POST", "/start", "peer");
    gate.arrived().await;
    // No heartbeat runs: the create's claim lapses while its start is held, and a peer takes it.
    let mut taken = false;
    for _ in 0..200 {
        if peer.claim(&id).await.ok() == Some(Claim::Ours) {
            taken = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(taken, "the peer takes the lapsed claim");
    gate.release();
    let (status, v) = acquire.await.expect("acquire");
    assert_eq!(status, 502, "{v}");
    assert!(error_of(&v).contains("rollback failed"), "{v}");
    let relayed = s.relay.as_ref().expect("relayed").requests();
    assert!(
        !relayed
            .iter()
            .any(|l| l.contains("/stop") || l.starts_with("DELETE")),
        "nothing was stopped or removed: {relayed:?}"
    );
    let listed = s.listed(&json!(id)).await;
    let cid = str_of(&listed["container_id"]);
    assert!(!cid.is_empty(), "{listed}");
    assert!(
        s.running(&json!(cid)),
        "the peer's container is left running"
    );
    assert!(
        s.stack.ledger().fences(&id, &cid).expect("ledger"),
        "and fenced"
    );
    assert_eq!(listed["destroy_pending"], true, "{listed}");
    assert_eq!(
        peer.value(&id).await.ok(),
        Some(Some("own:peer".into())),
        "the peer's claim stands"
    );
}

/// Mirrors `test_host_thread_dir_rejects_invalid_thread_id`: IDs that could not name a thread
/// are refused before anything reaches the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_thread_dir_rejects_invalid_thread_id() {
    let s = Served::start(config(0, 0)).await;
    // The proxy's own event subscription is up before the log is cleared.
    s.stack.proxy.wait_names_live();
    s.stack.fake().clear_requests();
    let long_thread = "t".repeat(65);
    let long_user = "u".repeat(129);
    for (user, thread) in [
        ("user-1", "../escape"),
        ("user-1", "a:b"),
        ("user-1", "a b"),
        ("user-1", long_thread.as_str()),
        ("user:1", "thread-1"),
        (long_user.as_str(), "thread-1"),
    ] {
        let (status, v) = s.acquire(user, thread, "run").await;
        assert_eq!(status, 400, "{user:?} {thread:?}: {v}");
        assert!(!error_of(&v).is_empty(), "{v}");
    }
    assert_eq!(
        s.stack.fake().request_lines(),
        Vec::<String>::new(),
        "no request reached the engine"
    );
    let (status, v) = s.call("GET", "/v1/sandboxes", None).await;
    assert_eq!((status, v["sandboxes"].clone()), (200, json!([])));
    // The limits are exact: one character less is a thread.
    let ok = s.acquired(&"u".repeat(128), &"t".repeat(64), "run").await;
    assert_eq!(ok["source"], "created");
    assert_eq!(creates(&s), 1);
}

/// Mirrors `test_acquire_async_cancellation_cancels_queued_reclaim_before_it_runs`, adapted:
/// here a client that leaves mid-reclaim does not cancel the reclaim. The design deliberately
/// lets it finish (its engine steps run in a task the client cannot cut off, so no step is
/// left half done and the sandbox's lock is always let go) and then releases the lease it got,
/// so the sandbox goes back to the warm pool instead of staying held by no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_async_cancellation_cancels_queued_reclaim_before_it_runs() {
    use std::io::Write;
    let s = Served::start_with(config(0, 0), true).await;
    let a = s.acquired("user-1", "leaving", "run").await;
    assert_eq!(s.release(&a["lease"]).await.1["result"], "warm");
    let name = s.stack.names(&str_of(&a["sandbox_id"])).sandbox;
    let gate = s
        .relay
        .as_ref()
        .expect("relayed")
        .hold_once("GET", &format!("{name}/json"));
    let sock = s.socket();
    let client = std::thread::spawn(move || {
        let mut c = std::os::unix::net::UnixStream::connect(&sock).expect("connect");
        let body =
            json!({ "user_id": "user-1", "thread_id": "leaving", "holder": "gone" }).to_string();
        let req = format!(
            "POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        c.write_all(req.as_bytes()).expect("send");
        c
    });
    gate.arrived().await;
    drop(client.join().expect("client"));
    // The server learns that its client left only when it reads the connection's end: wait
    // for that (the acquire counted as abandoned) before the reclaim may finish, or the answer
    // can be written into a socket whose reader is gone, with nobody left to release the lease.
    let mut noticed = false;
    for _ in 0..600 {
        if counter(&s, "lifecycle_acquires_abandoned_total").await == 1 {
            noticed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(noticed, "the server saw its client leave");
    gate.release();
    let reclaimed = "lifecycle_acquire_seconds_count{source=\"warm\"}";
    let mut listed = Value::Null;
    let mut done = false;
    for _ in 0..600 {
        listed = s.listed(&a["sandbox_id"]).await;
        // The reclaim commits (active) before it is counted; warm after that is its release.
        if counter(&s, reclaimed).await == 1 && listed["state"] == "warm" {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        done,
        "the reclaim finished and its lease was released: {listed}"
    );
    assert_eq!(listed["holders"], json!([]), "{listed}");
    assert_eq!(listed["container_id"], a["generation"]);
    assert!(s.running(&a["generation"]));
    let again = s.acquired("user-1", "leaving", "retry").await;
    assert_eq!(
        (again["source"].clone(), again["generation"].clone()),
        (json!("warm"), a["generation"].clone()),
        "the lock was let go and the sandbox is whole"
    );
    assert_eq!(creates(&s), 1);
}

/// Mirrors `test_absent_teardown_completion_precedes_quarantine_retirement_under_fences`: a
/// quarantine record of an absent sandbox is retired only once its absent teardown completes;
/// until then nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_teardown_completion_precedes_quarantine_retirement_under_fences() {
    let s = Served::start(config(0, 0)).await;
    let id = naming::sandbox_id("user-1", "absent").expect("id");
    let names = s.stack.names(&id);
    s.stack
        .ledger()
        .mark(&id, lifecycle::ledger::UNKNOWN_GENERATION)
        .expect("mark");
    let sidecar = s.stack.make(&names.sidecar, json!({}));
    s.stack.fake().clear_requests();
    let (status, v) = s.acquire("user-1", "absent", "run").await;
    assert_eq!(status, 502, "{v}");
    assert!(error_of(&v).contains("quarantine record kept"), "{v}");
    assert_eq!(
        creates(&s),
        0,
        "nothing created before the teardown completes"
    );
    assert!(
        s.stack.ledger().is_quarantined(&id).expect("ledger"),
        "the record is kept"
    );
    assert!(s.running(&json!(sidecar)), "the proxy refused the cleanup");
    let lines = s.stack.fake().request_lines();
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with("POST") || l.starts_with("DELETE")),
        "the engine was asked to change nothing: {lines:?}"
    );
    assert_eq!(s.listed(&json!(id)).await, Value::Null);
    remove_behind_its_back(&s, &sidecar);
    let a = s.acquired("user-1", "absent", "run").await;
    assert_eq!(a["source"], "created");
    assert_eq!(creates(&s), 1);
    assert!(
        !s.stack.ledger().is_quarantined(&id).expect("ledger"),
        "the record is retired"
    );
}

/// Mirrors `test_cleanup_idle_sandboxes_keeps_active_cleanup_and_delegates_warm_expiry`,
/// adapted: the idle timer reaps warm sandboxes only. Held ones are deliberately never reaped
/// on it (a held lease lapses only with --lease-timeout), however long they sit idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_idle_sandboxes_keeps_active_cleanup_and_delegates_warm_expiry() {
    let s = Served::start(config(60, 0)).await;
    let active = s.acquired("user-1", "active-old", "run").await;
    let warm = s.acquired("user-1", "warm-old", "run").await;
    assert_eq!(s.release(&warm["lease"]).await.1["result"], "warm");
    s.clock.advance(Duration::from_secs(10_000));
    assert_eq!(
        s.provider.reap().await,
        vec![str_of(&warm["sandbox_id"])],
        "only the warm one"
    );
    assert!(!s.exists(&warm["generation"]));
    assert_eq!(s.listed(&warm["sandbox_id"]).await, Value::Null);
    assert!(s.running(&active["generation"]), "the held one survives");
    let listed = s.listed(&active["sandbox_id"]).await;
    assert_eq!(listed["state"], "active", "{listed}");
    assert_eq!(listed["holders"], json!([{ "holder": "run" }]));
    assert_eq!(stops_of(&s, &str_of(&active["generation"])), 0);
}

/// Mirrors `test_reconcile_adopts_unready_container_when_no_teardown_is_in_flight`: with no
/// teardown under way, a running sandbox nobody tracks is adopted into the warm pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_adopts_unready_container_when_no_teardown_is_in_flight() {
    let s = Served::start(config(0, 0)).await;
    let id = naming::sandbox_id("user-1", "adoptable").expect("id");
    let cid = s.stack.make(
        &s.stack.names(&id).sandbox,
        sandbox_labels(&s, "user-1", "adoptable"),
    );
    s.stack.fake().clear_requests();
    assert_eq!(s.listed(&json!(id)).await, Value::Null);
    reconcile(&s.provider).await;
    let listed = s.listed(&json!(id)).await;
    assert_eq!(
        (listed["state"].clone(), listed["container_id"].clone()),
        (json!("warm"), json!(cid)),
        "{listed}"
    );
    let a = s.acquired("user-1", "adoptable", "run").await;
    assert_eq!(
        (a["source"].clone(), a["generation"].clone()),
        (json!("warm"), json!(cid))
    );
    assert_eq!(creates(&s), 0);
}
