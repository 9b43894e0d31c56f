//! `lifecycle serve`'s ownership claims around failures, on a real private `redis-server`
//! (issue 16): a failed create's rollback runs under a `del:` claim like every teardown.

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
