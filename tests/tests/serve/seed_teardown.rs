//! Seed `004_…`'s behaviours about teardowns that fail and the quarantine records they leave,
//! each under the seed's own test name (the rest are in `seed`, whose helpers these use).

use serde_json::{json, Value};
use sockproxy_tests::serve::{config, Served};

use crate::seed::{
    block_record_write, creates, error_of, fail_stop_once, remove_behind_its_back, sandbox_labels,
    stops_of, str_of,
};

/// A warm sandbox of `thread` whose destroy fails at its stop and cannot write its quarantine
/// record either: the destroy's answer, the sandbox as acquired, and its ID and generation.
async fn destroy_failing_without_a_record(
    s: &Served,
    thread: &str,
) -> (u16, Value, Value, String, String) {
    let a = s.acquired("user-1", thread, "run").await;
    assert_eq!(s.release(&a["lease"]).await.1["result"], "warm");
    let (id, cid) = (str_of(&a["sandbox_id"]), str_of(&a["generation"]));
    block_record_write(s, &id);
    fail_stop_once(s, &cid);
    let (status, v) = s.destroy(&a["sandbox_id"]).await;
    (status, v, a, id, cid)
}

/// Mirrors `test_failed_quarantine_write_keeps_dirty_container_tracked`: a teardown that fails
/// and cannot even write its quarantine record keeps the container tracked and fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_quarantine_write_keeps_dirty_container_tracked() {
    let s = Served::start(config(0, 0)).await;
    let (status, v, a, id, cid) = destroy_failing_without_a_record(&s, "dirty").await;
    assert_eq!(status, 502, "{v}");
    assert!(error_of(&v).contains("quarantine ledger"), "{v}");
    assert!(
        !s.stack.ledger().fences(&id, &cid).expect("ledger"),
        "the record write did fail"
    );
    let listed = s.listed(&a["sandbox_id"]).await;
    assert_eq!(
        listed["destroy_pending"], true,
        "still tracked, fenced: {listed}"
    );
    assert_eq!(listed["container_id"], a["generation"]);
    assert!(
        s.running(&a["generation"]),
        "the dirty container is still there"
    );
    let again = s.acquired("user-1", "dirty", "next").await;
    assert_ne!(
        again["generation"], a["generation"],
        "the dirty generation is never handed out"
    );
    assert_eq!(again["source"], "created");
    assert!(
        !s.exists(&a["generation"]),
        "torn down before the fresh one"
    );
    assert_eq!(stops_of(&s, &cid), 2);
}

/// Mirrors `test_inline_recycle_reports_a_refused_teardown_as_deferred`: a release that finds
/// its sandbox quarantined and cannot tear it down reports the failure, not "destroyed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_recycle_reports_a_refused_teardown_as_deferred() {
    let s = Served::start(config(0, 0)).await;
    let a = s.acquired("user-1", "recycle", "run").await;
    let (id, cid) = (str_of(&a["sandbox_id"]), str_of(&a["generation"]));
    s.stack.ledger().mark(&id, &cid).expect("mark");
    fail_stop_once(&s, &cid);
    let (status, v) = s.release(&a["lease"]).await;
    assert_eq!(status, 502, "a refused teardown is reported: {v}");
    assert_ne!(v["result"], "destroyed", "{v}");
    assert!(!error_of(&v).is_empty(), "{v}");
    assert!(s.exists(&a["generation"]), "the container is still there");
    let listed = s.listed(&a["sandbox_id"]).await;
    assert_eq!(listed["destroy_pending"], true, "{listed}");
    assert_eq!(listed["holders"], json!([]), "{listed}");
    assert!(s.stack.ledger().fences(&id, &cid).expect("ledger"));
    assert_eq!(stops_of(&s, &cid), 1);
    // The reaper's first retry comes at its next pass.
    assert_eq!(s.provider.reap().await, vec![id.clone()]);
    assert!(!s.exists(&a["generation"]));
    assert!(!s.stack.ledger().fences(&id, &cid).expect("ledger"));
}

/// Mirrors `test_acquire_recycle_failure_defers_with_quarantine_reason`: an acquire that must
/// recycle a quarantined held sandbox and cannot tear it down defers, saying the record is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_recycle_failure_defers_with_quarantine_reason() {
    let s = Served::start(config(0, 0)).await;
    let a = s.acquired("user-1", "stuck", "run").await;
    let (id, cid) = (str_of(&a["sandbox_id"]), str_of(&a["generation"]));
    s.stack.ledger().mark(&id, &cid).expect("mark");
    fail_stop_once(&s, &cid);
    let (status, v) = s.acquire("user-1", "stuck", "second").await;
    assert_eq!(status, 502, "{v}");
    assert!(error_of(&v).contains("quarantine record kept"), "{v}");
    assert_eq!(creates(&s), 1, "nothing created in its place");
    assert_eq!(stops_of(&s, &cid), 1, "the teardown was tried");
    assert!(s.exists(&a["generation"]));
    assert!(s.stack.ledger().fences(&id, &cid).expect("ledger"));
    let listed = s.listed(&a["sandbox_id"]).await;
    assert_eq!(listed["holders"], json!([{ "holder": "run" }]), "{listed}");
    assert_eq!(listed["container_id"], a["generation"]);
}

/// Mirrors `test_get_uses_in_memory_registry_only`: the listing and a lease renewal answer
/// from the provider's memory and ask the engine nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_uses_in_memory_registry_only() {
    let s = Served::start(config(0, 0)).await;
    let a = s.acquired("user-1", "memory", "run").await;
    s.stack.proxy.wait_names_live();
    s.stack.fake().clear_requests();
    let listed = s.listed(&a["sandbox_id"]).await;
    assert_eq!(listed["state"], "active", "{listed}");
    assert_eq!(listed["container_id"], a["generation"]);
    let lease = str_of(&a["lease"]);
    let (status, v) = s
        .call("POST", &format!("/v1/leases/{lease}/renew"), None)
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["sandbox_id"], a["sandbox_id"]);
    assert_eq!(v["result"], "renewed");
    assert_eq!(
        s.stack.asked(),
        Vec::<String>::new(),
        "the engine was asked"
    );
}

/// Mirrors `test_failed_destroy_record_write_blocks_cached_reuse_until_retry`: the fenced
/// entry left by a teardown whose record write failed is finished by the reaper's retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_destroy_record_write_blocks_cached_reuse_until_retry() {
    let s = Served::start(config(0, 0)).await;
    let (status, v, a, id, cid) = destroy_failing_without_a_record(&s, "record").await;
    assert_eq!(status, 502, "{v}");
    let listed = s.listed(&a["sandbox_id"]).await;
    assert_eq!(listed["destroy_pending"], true, "{listed}");
    assert!(s.running(&a["generation"]));
    assert_eq!(s.provider.reap().await, vec![id.clone()], "retried");
    assert!(!s.exists(&a["generation"]), "the retry tore it down");
    assert_eq!(s.listed(&a["sandbox_id"]).await, Value::Null);
    assert_eq!(stops_of(&s, &cid), 2);
    assert!(
        !s.stack.ledger().is_quarantined(&id).expect("ledger"),
        "no record left"
    );
    // Nothing left for a later retry: a destroy now finds nothing.
    assert_eq!(s.destroy(&a["sandbox_id"]).await.0, 404);
}

/// Mirrors `test_destroy_completion_does_not_remove_a_replacement_runtime`: a retried destroy
/// of a generation that is gone leaves the container that took its name running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_completion_does_not_remove_a_replacement_runtime() {
    let s = Served::start(config(0, 0)).await;
    let a = s.acquired("user-1", "same", "run").await;
    assert_eq!(s.release(&a["lease"]).await.1["result"], "warm");
    let (id, old) = (str_of(&a["sandbox_id"]), str_of(&a["generation"]));
    fail_stop_once(&s, &old);
    let (status, v) = s.destroy(&a["sandbox_id"]).await;
    assert_eq!(status, 502, "{v}");
    assert_eq!(s.listed(&a["sandbox_id"]).await["destroy_pending"], true);
    remove_behind_its_back(&s, &old);
    let new = s.stack.make(
        &s.stack.names(&id).sandbox,
        sandbox_labels(&s, "user-1", "same"),
    );
    assert_ne!(new, old);
    let (status, v) = s.destroy(&a["sandbox_id"]).await;
    assert_eq!(
        (status, v["result"].clone()),
        (200, json!("replaced")),
        "{v}"
    );
    assert!(s.running(&json!(new)), "the replacement still runs");
    let lines = s.stack.fake().request_lines();
    assert!(
        !lines
            .iter()
            .any(|l| l.contains(&format!("/containers/{new}"))
                && (l.starts_with("POST") || l.starts_with("DELETE"))),
        "nothing was sent to stop or remove the replacement: {lines:?}"
    );
    assert!(!s.stack.ledger().fences(&id, &old).expect("ledger"));
    assert_eq!(s.listed(&a["sandbox_id"]).await, Value::Null);
}
