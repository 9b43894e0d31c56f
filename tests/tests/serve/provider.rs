//! `lifecycle serve` (issue 16), the seed's provider behaviours through the HTTP API, against the
//! fake engine behind the real sockproxy: leases and deferred destroy, the warm pool (reclaim,
//! idle expiry on a stepped clock, the replica cap, dead and quarantined entries), the identity
//! check, one sandbox for concurrent acquires of a thread, a client leaving mid-acquire, and a
//! warm sandbox whose server stopped answering HTTP (probed on a loopback port the test owns).

use std::io::Write;
use std::time::Duration;

use lifecycle::naming;
use lifecycle::serve::store::{Memory, Ownership, Store};
use serde_json::{json, Value};
use sockproxy_tests::serve::{config, Served};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DAY: Duration = Duration::from_secs(86_400);

fn creates(s: &Served) -> usize {
    s.stack
        .fake()
        .request_lines()
        .iter()
        .filter(|l| l.contains("/containers/create"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_defers_destroy_until_the_last_holder_releases() {
    let s = Served::start(config(0, 0)).await;
    let run = s.acquired("user-1", "thread-1", "agent-run").await;
    let upload = s.acquired("user-1", "thread-1", "upload").await;
    assert_eq!(run["source"], "created");
    assert_eq!(upload["source"], "cached");
    assert_eq!(run["sandbox_id"], upload["sandbox_id"]);
    assert_ne!(run["lease"], upload["lease"]);
    let (status, v) = s.destroy(&run["sandbox_id"]).await;
    assert_eq!((status, v["result"].clone()), (200, json!("deferred")));
    assert!(s.running(&run["generation"]), "never destroyed while held");
    let (status, v) = s.acquire("user-1", "thread-1", "late").await;
    assert_eq!(
        status, 409,
        "a sandbox being destroyed is not handed out: {v}"
    );
    assert_eq!(s.release(&upload["lease"]).await.1["result"], "held");
    assert!(s.running(&run["generation"]), "one holder remains");
    assert_eq!(
        s.listed(&run["sandbox_id"]).await["holders"][0]["holder"],
        "agent-run"
    );
    assert_eq!(s.release(&run["lease"]).await.1["result"], "destroyed");
    assert!(
        !s.exists(&run["generation"]),
        "the last release destroyed it"
    );
    assert_eq!(s.listed(&run["sandbox_id"]).await, serde_json::Value::Null);
    assert_eq!(
        s.release(&run["lease"]).await.0,
        404,
        "a lease releases once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_reclaim_hands_the_same_running_container_back_to_its_thread() {
    let s = Served::start(config(600, 0)).await;
    let first = s.acquired("user-1", "thread-1", "run").await;
    assert_eq!(s.release(&first["lease"]).await.1["result"], "warm");
    assert!(
        s.running(&first["generation"]),
        "a warm sandbox keeps running"
    );
    let listed = s.listed(&first["sandbox_id"]).await;
    assert_eq!(listed["state"], "warm");
    assert_eq!(listed["holders"], json!([]));
    let again = s.acquired("user-1", "thread-1", "run-2").await;
    assert_eq!(again["source"], "warm");
    assert_eq!(again["generation"], first["generation"]);
    assert_eq!(again["url"], first["url"]);
    assert_eq!(creates(&s), 1, "reclaimed, not created again");
    assert_eq!(s.listed(&first["sandbox_id"]).await["state"], "active");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_expiry_follows_the_monotonic_clock_and_ignores_wall_clock_steps() {
    let s = Served::start(config(60, 0)).await;
    let old = s.acquired("user-1", "old", "run").await;
    s.release(&old["lease"]).await;
    s.clock.advance(Duration::from_secs(50));
    let fresh = s.acquired("user-1", "fresh", "run").await;
    s.release(&fresh["lease"]).await;
    // A wall clock stepped a day forward must not reap fresh entries...
    s.clock.step_wall(DAY, false);
    assert!(s.provider.reap().await.is_empty());
    // ...nor one stepped back keep expired ones.
    s.clock.step_wall(2 * DAY, true);
    s.clock.advance(Duration::from_secs(11));
    assert_eq!(
        s.provider.reap().await,
        vec![old["sandbox_id"].as_str().unwrap_or_default().to_owned()]
    );
    assert!(!s.exists(&old["generation"]), "expired: destroyed");
    assert!(s.running(&fresh["generation"]), "idle 11s of 60: kept");
    assert_eq!(s.listed(&fresh["sandbox_id"]).await["idle_seconds"], 11.0);
    s.clock.advance(Duration::from_secs(49));
    assert_eq!(s.provider.reap().await.len(), 1);
    assert!(!s.exists(&fresh["generation"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_cap_destroys_the_oldest_warm_sandbox_before_a_create() {
    let s = Served::start(config(0, 2)).await;
    let oldest = s.acquired("user-1", "t1", "run").await;
    s.release(&oldest["lease"]).await;
    s.clock.advance(Duration::from_secs(1));
    let newest = s.acquired("user-1", "t2", "run").await;
    s.release(&newest["lease"]).await;
    let third = s.acquired("user-1", "t3", "run").await;
    assert_eq!(third["source"], "created");
    assert!(
        !s.exists(&oldest["generation"]),
        "oldest warm destroyed first"
    );
    assert!(s.running(&newest["generation"]));
    // At the cap with nothing warm, an active sandbox is never evicted, and the cap holds: the
    // create is refused with 503 and Retry-After, and nothing is created.
    let held = s.acquired("user-1", "t2", "run").await;
    assert_eq!(held["source"], "warm");
    let body = json!({ "user_id": "user-1", "thread_id": "t4", "holder": "run" }).to_string();
    let r = s.call_raw("POST", "/v1/acquire", body.as_bytes()).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
    assert!(r.text().contains("--max-replicas 2"), "{}", r.text());
    assert_eq!(creates(&s), 3, "nothing created past the cap");
    assert!(s.running(&newest["generation"]) && s.running(&third["generation"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_warm_or_cached_sandbox_is_dropped_and_a_fresh_one_created() {
    let s = Served::start(config(0, 0)).await;
    let warm = s.acquired("user-1", "warm", "run").await;
    s.release(&warm["lease"]).await;
    s.kill_behind_its_back(&warm["generation"]);
    let fresh = s.acquired("user-1", "warm", "run").await;
    assert_eq!(fresh["source"], "created");
    assert_ne!(fresh["generation"], warm["generation"]);
    assert!(!s.exists(&warm["generation"]), "the dead one was removed");
    let cached = s.acquired("user-1", "cached", "run").await;
    s.kill_behind_its_back(&cached["generation"]);
    let replaced = s.acquired("user-1", "cached", "upload").await;
    assert_eq!(replaced["source"], "created");
    assert_ne!(replaced["generation"], cached["generation"]);
    assert_eq!(
        s.listed(&cached["sandbox_id"]).await["holders"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantined_sandbox_is_destroyed_on_release_never_warmed() {
    let s = Served::start(config(0, 0)).await;
    let a = s.acquired("user-1", "dirty", "run").await;
    let (id, generation) = (
        a["sandbox_id"].as_str().unwrap_or_default(),
        a["generation"].as_str().unwrap_or_default(),
    );
    s.stack.ledger().mark(id, generation).expect("mark");
    assert_eq!(s.release(&a["lease"]).await.1["result"], "destroyed");
    assert!(!s.exists(&a["generation"]));
    assert_eq!(s.listed(&a["sandbox_id"]).await, serde_json::Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_mismatch_is_refused_and_the_other_tenants_sandbox_untouched() {
    let s = Served::start(config(0, 0)).await;
    for (thread, labels) in [
        (
            "collide",
            json!({ "deerflow.role": "sandbox", "deerflow.network_mode": "open",
            "lifecycle.scope": naming::scope_digest("user-2", "someone-else") }),
        ),
        (
            "unlabelled",
            json!({ "deerflow.role": "sandbox", "deerflow.network_mode": "open" }),
        ),
    ] {
        let id = naming::sandbox_id("user-1", thread).expect("id");
        let cid = s.stack.make(&s.stack.names(&id).sandbox, labels);
        let (status, v) = s.acquire("user-1", thread, "run").await;
        assert_eq!(status, 409, "{thread}: {v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap_or_default()
                .contains("another (user, thread)"),
            "{v}"
        );
        assert!(
            s.running(&json!(cid)),
            "{thread}: the other tenant's container still runs"
        );
        assert_eq!(
            s.listed(&json!(id)).await,
            serde_json::Value::Null,
            "{thread}: not tracked"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acquires_of_one_thread_give_one_sandbox() {
    let s = Served::start(config(0, 0)).await;
    let all = futures_join(&s, 8).await;
    let ids: std::collections::BTreeSet<_> =
        all.iter().map(|v| v["generation"].to_string()).collect();
    let leases: std::collections::BTreeSet<_> =
        all.iter().map(|v| v["lease"].to_string()).collect();
    assert_eq!(ids.len(), 1, "{all:?}");
    assert_eq!(leases.len(), 8);
    assert_eq!(all.iter().filter(|v| v["source"] == "created").count(), 1);
    assert_eq!(creates(&s), 1);
}

async fn futures_join(s: &Served, n: usize) -> Vec<serde_json::Value> {
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let sock = s.socket();
        set.spawn(async move {
            let body =
                json!({ "user_id": "user-1", "thread_id": "same", "holder": format!("h{i}") });
            sockproxy_tests::serve::call(&sock, "POST", "/v1/acquire", Some(body)).await
        });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        let (status, v) = r.expect("task");
        assert_eq!(status, 200, "{v}");
        out.push(v);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_leaving_mid_acquire_leaves_no_half_sandbox_and_no_held_lock() {
    let s = Served::start_with(config(0, 0), true).await;
    let relay = s.relay.as_ref().expect("relayed");
    let gate = relay.hold_once("POST", "/start");
    let sock = s.socket();
    let client = std::thread::spawn(move || {
        let mut c = std::os::unix::net::UnixStream::connect(&sock).expect("connect");
        let body = json!({ "user_id": "user-1", "thread_id": "gone", "holder": "run" }).to_string();
        let req = format!(
            "POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        c.write_all(req.as_bytes()).expect("send");
        c
    });
    gate.arrived().await;
    drop(client.join().expect("client")); // the gateway gives up while the start is in flight
    gate.release();
    let id = json!(naming::sandbox_id("user-1", "gone").expect("id"));
    let mut listed = serde_json::Value::Null;
    for _ in 0..600 {
        listed = s.listed(&id).await;
        if listed["state"] == "warm" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        listed["state"], "warm",
        "the finished sandbox was released, not left held: {listed}"
    );
    assert!(s.running(&listed["container_id"]), "started completely");
    let again = s.acquired("user-1", "gone", "retry").await;
    assert_eq!(
        again["source"], "warm",
        "the lock was released and the sandbox is whole"
    );
    assert_eq!(creates(&s), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_metrics_and_errors() {
    let s = Served::start(config(0, 0)).await;
    assert_eq!(s.call("GET", "/healthz", None).await.0, 200);
    let a = s.acquired("user-1", "m", "run").await;
    s.release(&a["lease"]).await;
    s.destroy(&a["sandbox_id"]).await;
    let (status, text) = s.metrics().await;
    assert_eq!(status, 200);
    let text = text.as_str().unwrap_or_default().to_owned();
    for line in [
        "lifecycle_acquire_seconds_count{source=\"created\"} 1",
        "lifecycle_destroys_total{result=\"destroyed\"} 1",
        "lifecycle_pool_sandboxes{state=\"warm\"} 0",
        "lifecycle_quarantine_records 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    assert_eq!(
        s.call("POST", "/v1/acquire", Some(json!({"user_id": "u"})))
            .await
            .0,
        400
    );
    assert_eq!(s.acquire("", "t", "h").await.0, 400);
    assert_eq!(s.call("POST", "/v1/leases/nope/release", None).await.0, 404);
    assert_eq!(
        s.call("POST", "/v1/sandboxes/not-an-id/destroy", None)
            .await
            .0,
        400
    );
    assert_eq!(s.call("GET", "/v2/what", None).await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_mode_sandbox_is_warmed_reclaimed_and_destroyed_with_its_sidecar() {
    let s = Served::start_restricted(config(0, 0)).await;
    let a = s.acquired("user-1", "restricted", "run").await;
    let id = a["sandbox_id"].as_str().unwrap_or_default().to_owned();
    let names = s.stack.names(&id);
    for made in [
        format!("/containers/{}/json", names.sidecar),
        format!("/networks/{}", names.network),
        format!("/networks/{}", names.egress),
    ] {
        assert!(s.stack.exists(&made), "{made}");
    }
    assert_eq!(s.release(&a["lease"]).await.1["result"], "warm");
    let again = s.acquired("user-1", "restricted", "run").await;
    assert_eq!(again["source"], "warm");
    assert_eq!(again["url"], a["url"]);
    s.release(&again["lease"]).await;
    assert_eq!(s.destroy(&a["sandbox_id"]).await.1["result"], "destroyed");
    assert!(!s.exists(&a["generation"]));
    assert!(
        !s.stack
            .exists(&format!("/containers/{}/json", names.sidecar)),
        "sidecar gone"
    );
    assert!(
        !s.stack.exists(&format!("/networks/{}", names.network)),
        "network gone"
    );
}

/// Acquires (user-1, `thread`) on a probing provider whose acquire must create: its start is
/// held until the test answers HTTP on the port lifecycle published for it (nothing else
/// listens there: the fake engine binds nothing), so the create's readiness wait passes.
async fn acquire_answering(s: &Served, thread: &str) -> (Value, tokio::task::JoinHandle<()>) {
    let (gate, mut acquire) = s.acquire_held("POST", "/start", thread);
    tokio::select! {
        () = gate.arrived() => {}
        r = &mut acquire => panic!("handed out without a create: {r:?}"),
    }
    let id = naming::sandbox_id("user-1", thread).expect("id");
    let name = s.stack.names(&id).sandbox;
    let made =
        sockproxy_tests::raw::get(&s.stack.engine.socket, &format!("/containers/{name}/json"))
            .expect("inspect");
    let cid = made.json()["Id"].as_str().unwrap_or_default().to_owned();
    let port = s
        .stack
        .ports()
        .get(&id, &cid)
        .expect("ports")
        .expect("a published port");
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind");
    let server = tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            let mut buf = [0u8; 512];
            let _ = c.read(&mut buf).await;
            let _ = c
                .write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
                .await;
        }
    });
    gate.release();
    let (status, v) = acquire.await.expect("acquire");
    assert_eq!(status, 200, "{v}");
    (v, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_sandbox_that_runs_but_does_not_answer_http_is_replaced() {
    let own = Ownership::new(
        Store::Memory(Memory::default()),
        "me",
        Duration::from_secs(600),
    );
    let s = Served::start_probing(config(0, 0), own, Duration::from_secs(10)).await;
    let (first, server) = acquire_answering(&s, "probe").await;
    assert_eq!(first["source"], "created");
    assert_eq!(s.release(&first["lease"]).await.1["result"], "warm");
    let again = s.acquired("user-1", "probe", "run-2").await;
    assert_eq!(
        (again["source"].clone(), again["generation"].clone()),
        (json!("warm"), first["generation"].clone()),
        "it answers: reclaimed"
    );
    assert_eq!(s.release(&again["lease"]).await.1["result"], "warm");
    // Its server hangs: the port still accepts connections, nothing ever answers.
    server.abort();
    let _ = server.await;
    let port = first["url"]
        .as_str()
        .and_then(|u| u.rsplit(':').next())
        .unwrap_or_default();
    let _hung = std::net::TcpListener::bind(format!("127.0.0.1:{port}")).expect("rebind");
    assert!(
        s.running(&first["generation"]),
        "the container itself still runs"
    );
    let (fresh, _server) = acquire_answering(&s, "probe").await;
    assert_eq!(fresh["source"], "created", "{fresh}");
    assert_ne!(fresh["generation"], first["generation"]);
    assert!(
        !s.exists(&first["generation"]),
        "the silent one was destroyed"
    );
    assert_eq!(creates(&s), 2);
}

/// The replica cap never evicts a warm sandbox that an acquire of its own thread is reclaiming
/// (the reclaim's health check runs under that sandbox's lock): a review saw the reclaim
/// answered 200 with a sandbox the cap's eviction destroyed a moment later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replica_cap_does_not_evict_a_sandbox_being_reclaimed() {
    let s = Served::start_with(config(0, 1), true).await;
    let x = s.acquired("user-1", "x", "run").await;
    assert_eq!(s.release(&x["lease"]).await.1["result"], "warm");
    let x_id = naming::sandbox_id("user-1", "x").expect("id");
    let x_name = s.stack.names(&x_id).sandbox;
    // The reclaim of x is held at its health check's inspect, holding x's lock.
    let (gate, reclaim) = s.acquire_held("GET", &format!("{x_name}/json"), "x");
    gate.arrived().await;
    // Another thread's acquire at the cap of one: x is the oldest warm sandbox, but in use,
    // so there is nothing to evict and the cap refuses the create.
    let (status, y) = s.acquire("user-1", "y", "run").await;
    assert_eq!(status, 503, "{y}");
    assert!(
        s.running(&x["generation"]),
        "not evicted while being reclaimed"
    );
    gate.release();
    let (status, got) = reclaim.await.expect("reclaim");
    assert_eq!(status, 200, "{got}");
    assert_eq!(
        (got["source"].clone(), got["generation"].clone()),
        (json!("warm"), x["generation"].clone()),
        "the reclaim gets x, alive"
    );
    assert!(s.running(&x["generation"]));
    assert_eq!(s.release(&got["lease"]).await.0, 200);
}
