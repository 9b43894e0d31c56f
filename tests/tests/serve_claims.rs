//! `lifecycle serve`'s ownership claims around failures, on a real private `redis-server`
//! (issue 16): a failed create's rollback runs under a `del:` claim like every teardown, and a
//! rollback that fails keeps that claim (renewed), fenced and reported.

use std::time::Duration;

use lifecycle::naming;
use lifecycle::serve::store::Claim;
use serde_json::{json, Value};
use sockproxy_tests::redis_server::RedisServer;
use sockproxy_tests::serve::{call, config, Served};

/// Long enough for the fake's containers to start, short enough that a test waits little:
/// nothing listens at a fake sandbox's URL, so every create here times out.
const READY: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readiness_timeout_rolls_back_under_a_del_claim() {
    let Some(redis) = RedisServer::start("a_readiness_timeout_rolls_back_under_a_del_claim") else {
        return;
    };
    let own = redis.ownership("me", Duration::from_secs(60));
    let s = Served::start_probing(config(0, 0), own, READY).await;
    let peer = redis.ownership("peer", Duration::from_secs(60));
    let id = naming::sandbox_id("user-1", "slow").expect("id");
    let gate = s
        .relay
        .as_ref()
        .expect("relayed")
        .hold_once("POST", "/stop");
    let sock = s.socket();
    let acquire = tokio::spawn(async move {
        let body = json!({"user_id": "user-1", "thread_id": "slow", "holder": "run"});
        call(&sock, "POST", "/v1/acquire", Some(body)).await
    });
    gate.arrived().await;
    assert_eq!(
        peer.value(&id).await.ok(),
        Some(Some("del:me".into())),
        "the rollback's stop is sent under a del: claim"
    );
    assert_eq!(
        peer.claim(&id).await.ok(),
        Some(Claim::Deleting("me".into())),
        "no peer takes the ID while the rollback runs"
    );
    gate.release();
    let (status, v) = acquire.await.expect("acquire");
    assert_eq!(status, 502, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("failed to become ready"),
        "{v}"
    );
    assert_eq!(
        peer.value(&id).await.ok(),
        Some(None),
        "released once rolled back"
    );
    assert!(
        !s.stack
            .exists(&format!("/containers/{}/json", s.stack.names(&id).sandbox)),
        "what was made is gone"
    );
    assert_eq!(s.listed(&json!(id)).await, Value::Null, "nothing tracked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rollback_keeps_its_del_claim_renewed_fenced_and_reported() {
    let Some(redis) =
        RedisServer::start("a_failed_rollback_keeps_its_del_claim_renewed_fenced_and_reported")
    else {
        return;
    };
    let ttl = Duration::from_millis(600);
    let s = Served::start_probing(config(0, 0), redis.ownership("me", ttl), READY).await;
    let peer = redis.ownership("peer", Duration::from_secs(60));
    let id = naming::sandbox_id("user-1", "stuck").expect("id");
    s.relay
        .as_ref()
        .expect("relayed")
        .fail_once("POST", "/stop");
    let (status, v) = s.acquire("user-1", "stuck", "run").await;
    assert_eq!(status, 502, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("rollback failed"),
        "{v}"
    );
    let listed = s.listed(&json!(id)).await;
    assert_eq!(listed["destroy_pending"], true, "tracked fenced: {listed}");
    let cid = listed["container_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(s.exists(&json!(cid)), "the half-made sandbox is left");
    assert!(
        s.stack.ledger().fences(&id, &cid).expect("ledger"),
        "and quarantined"
    );
    // Two TTLs pass: only the heartbeat's renewals keep the claim.
    for _ in 0..6 {
        s.provider.heartbeat().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        peer.value(&id).await.ok(),
        Some(Some("del:me".into())),
        "the rollback's del: claim is kept and renewed"
    );
    assert_eq!(
        peer.claim(&id).await.ok(),
        Some(Claim::Deleting("me".into())),
        "no peer adopts or reuses it"
    );
    let (status, v) = s.acquire("user-1", "stuck", "again").await;
    assert_eq!(status, 409, "never handed out: {v}");
    let (_, metrics) = s.call("GET", "/metrics", None).await;
    let metrics = metrics.as_str().unwrap_or_default().to_owned();
    for line in [
        "lifecycle_destroys_total{result=\"failed\"} 1",
        "lifecycle_failures_total{kind=\"rollback\"} 1",
        "lifecycle_quarantine_records 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    let (status, v) = s.destroy(&json!(id)).await;
    assert_eq!(
        (status, v["result"].clone()),
        (200, json!("destroyed")),
        "{v}"
    );
    assert!(!s.exists(&json!(cid)), "the retry tore it down");
    assert_eq!(
        peer.value(&id).await.ok(),
        Some(None),
        "and dropped the claim"
    );
}
