//! `lifecycle serve`'s ownership claims around failures and orphans, on a real private
//! `redis-server` (issue 16): a failed create's rollback runs under a `del:` claim like every
//! teardown; a rollback that fails keeps that claim (renewed), fenced and reported; and a dead
//! owner's claim blocks adoption for as long as its TTL runs, however long the grace has been.

use std::time::Duration;

use lifecycle::naming;
use lifecycle::serve::background::{self, reconcile};
use lifecycle::serve::claims::Claim;
use serde_json::{json, Value};
use sockproxy_tests::redis_server::RedisServer;
use sockproxy_tests::serve::{config, Served};
use tokio::sync::watch;

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
    let (gate, acquire) = s.acquire_held("POST", "/stop", "slow");
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
    // No beats for a while (a stalled process, a Redis restart): the key lapses. The next beat
    // takes it back as del:, never as an own: that deer-flow's take would accept.
    let mut lapsed = false;
    for _ in 0..100 {
        if peer.value(&id).await.ok() == Some(None) {
            lapsed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(lapsed, "the claim lapses without renewals");
    s.provider.heartbeat().await;
    assert_eq!(
        peer.value(&id).await.ok(),
        Some(Some("del:me".into())),
        "a lapsed fenced claim comes back as del:"
    );
    let (_, metrics) = s.metrics().await;
    let metrics = metrics.as_str().unwrap_or_default().to_owned();
    for line in [
        "lifecycle_destroys_total{result=\"failed\"} 1",
        "lifecycle_failures_total{kind=\"rollback\"} 1",
        "lifecycle_quarantine_records 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    // The thread comes back (deer-flow admits a replacement after a failed teardown): the old
    // generation is never handed out; its teardown is retried first, and only once it is gone
    // is a fresh one made.
    // (Nothing answers HTTP in this test, so the fresh one fails its readiness wait and is
    // rolled back in turn: what matters is that a fresh create was tried only after the
    // retried teardown.)
    let (status, v) = s.acquire("user-1", "stuck", "again").await;
    assert_eq!(status, 502, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("failed to become ready"),
        "a fresh create was tried: {v}"
    );
    assert!(!s.exists(&json!(cid)), "the retry tore the old one down");
    assert!(
        !s.stack.ledger().fences(&id, &cid).expect("ledger"),
        "and retired its record"
    );
    assert_eq!(s.listed(&json!(id)).await, Value::Null, "nothing tracked");
    assert_eq!(
        peer.value(&id).await.ok(),
        Some(None),
        "and every claim dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_owners_claim_blocks_adoption_until_its_ttl_lapses_whatever_the_grace() {
    let Some(redis) = RedisServer::start(
        "a_dead_owners_claim_blocks_adoption_until_its_ttl_lapses_whatever_the_grace",
    ) else {
        return;
    };
    // The adopter's grace runs on its stepped clock; the dead owner's TTL on Redis's own.
    let s = Served::start_owned(
        config(0, 0),
        false,
        redis.ownership("B", Duration::from_secs(60)),
    )
    .await;
    let grace = config(0, 0).adopt_grace;
    let id = naming::sandbox_id("user-1", "orphan").expect("id");
    let orphan = s.stack.make(
        &s.stack.names(&id).sandbox,
        json!({ "deerflow.role": "sandbox", "deerflow.network_mode": "open",
            "deerflow.sandbox_id": id, "lifecycle.scope": naming::scope_digest("user-1", "orphan") }),
    );
    let dead = redis.ownership("A", Duration::from_secs(3));
    assert_eq!(dead.claim(&id).await.ok(), Some(Claim::Ours));
    // A never renews. While its claim lives, B's passes span many graces and adopt nothing.
    for _ in 0..5 {
        s.clock.advance(10 * grace);
        reconcile(&s.provider).await;
        assert_eq!(
            s.listed(&json!(id)).await,
            Value::Null,
            "adopted within A's TTL"
        );
    }
    assert_eq!(
        dead.value(&id).await.ok(),
        Some(Some("own:A".into())),
        "every pass above ran while A's claim was still live"
    );
    let mut lapsed = false;
    for _ in 0..300 {
        if dead.value(&id).await.ok() == Some(None) {
            lapsed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(lapsed, "A's claim expires with its TTL");
    // The grace counts from the first pass that saw it unowned, not from the first sighting.
    reconcile(&s.provider).await;
    assert_eq!(
        s.listed(&json!(id)).await,
        Value::Null,
        "adopted before the grace"
    );
    s.clock.advance(grace);
    reconcile(&s.provider).await;
    let adopted = s.listed(&json!(id)).await;
    assert_eq!(
        (adopted["state"].clone(), adopted["container_id"].clone()),
        (json!("warm"), json!(orphan)),
        "{adopted}"
    );
    assert_eq!(dead.value(&id).await.ok(), Some(Some("own:B".into())));
}

/// A create whose readiness wait outlasts the claim's TTL keeps its claim: the heartbeat renews
/// the IDs acquires are working on, not only the tracked ones, so no peer can take the ID
/// mid-create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_in_progress_keeps_its_claim_past_the_ttl() {
    let Some(redis) = RedisServer::start("a_create_in_progress_keeps_its_claim_past_the_ttl")
    else {
        return;
    };
    let ttl = Duration::from_millis(600);
    let s = Served::start_probing(config(0, 0), redis.ownership("me", ttl), READY).await;
    let peer = redis.ownership("peer", Duration::from_secs(60));
    let id = naming::sandbox_id("user-1", "long").expect("id");
    let (gate, acquire) = s.acquire_held("POST", "/start", "long");
    gate.arrived().await;
    // Three TTLs pass while the create waits on its start; only renewals keep the claim.
    for _ in 0..9 {
        s.provider.heartbeat().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        peer.value(&id).await.ok(),
        Some(Some("own:me".into())),
        "the claim outlives its TTL while the create runs"
    );
    assert_eq!(
        peer.claim(&id).await.ok(),
        Some(Claim::Owned("me".into())),
        "no peer takes the ID mid-create"
    );
    gate.release();
    let (status, v) = acquire.await.expect("acquire");
    // Nothing listens at a fake sandbox's URL: the create ends in its readiness timeout.
    assert_eq!(status, 502, "{v}");
}

/// A create that finds a dead container under the sandbox's name (made by another process, so
/// not tracked here) replaces it under a `del:` claim like every teardown, and goes back to
/// `own:` before it creates the fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_container_found_by_a_create_is_replaced_under_a_del_claim() {
    let Some(redis) =
        RedisServer::start("a_dead_container_found_by_a_create_is_replaced_under_a_del_claim")
    else {
        return;
    };
    let s = Served::start_owned(
        config(0, 0),
        true,
        redis.ownership("me", Duration::from_secs(60)),
    )
    .await;
    let peer = redis.ownership("peer", Duration::from_secs(60));
    let id = naming::sandbox_id("user-1", "dead").expect("id");
    let mut labels = serde_json::Map::new();
    labels.insert(naming::LABEL_SANDBOX_ID.into(), json!(id));
    labels.insert(
        naming::LABEL_SCOPE.into(),
        json!(naming::scope_digest("user-1", "dead")),
    );
    labels.insert(naming::LABEL_NETWORK_MODE.into(), json!("open"));
    let labels = Value::Object(labels);
    let dead = s.stack.make(&s.stack.names(&id).sandbox, labels);
    s.kill_behind_its_back(&json!(dead));
    let (gate, acquire) = s.acquire_held("POST", &format!("/containers/{dead}/stop"), "dead");
    gate.arrived().await;
    assert_eq!(
        peer.value(&id).await.ok(),
        Some(Some("del:me".into())),
        "the dead container's stop is sent under a del: claim"
    );
    gate.release();
    let (status, v) = acquire.await.expect("acquire");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["source"], "created");
    assert_ne!(v["generation"], dead.as_str());
    assert!(!s.exists(&json!(dead)), "the dead container is gone");
    assert_eq!(
        peer.value(&id).await.ok(),
        Some(Some("own:me".into())),
        "ours again once the fresh one is made"
    );
}

/// Reconciliation adopts a container only under an ID lifecycle could have made and whose
/// sandbox name is the container's: `{P}sandbox-abcd1234` labelled `abcd1234` (not a sandbox
/// ID) would be adopted, then fail to destroy on every tick with its `del:` claim renewed
/// forever; a label naming another sandbox's ID is not this container's either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_adopts_only_a_sandbox_id_label_that_matches_the_containers_name() {
    let Some(redis) = RedisServer::start(
        "reconcile_adopts_only_a_sandbox_id_label_that_matches_the_containers_name",
    ) else {
        return;
    };
    let s = Served::start_owned(
        config(0, 0),
        false,
        redis.ownership("B", Duration::from_secs(60)),
    )
    .await;
    let grace = config(0, 0).adopt_grace;
    let peer = redis.ownership("peer", Duration::from_secs(60));
    let labels = |id: &str, thread: &str| {
        json!({ "deerflow.role": "sandbox", "deerflow.network_mode": "open",
            "deerflow.sandbox_id": id, "lifecycle.scope": naming::scope_digest("user-1", thread) })
    };
    let short = "abcd1234";
    s.stack.make(
        &format!("{}sandbox-{short}", s.stack.prefix),
        labels(short, "short"),
    );
    let named = naming::sandbox_id("user-1", "named").expect("id");
    let other = naming::sandbox_id("user-1", "other").expect("id");
    s.stack
        .make(&s.stack.names(&named).sandbox, labels(&other, "other"));
    let good = naming::sandbox_id("user-1", "good").expect("id");
    let orphan = s
        .stack
        .make(&s.stack.names(&good).sandbox, labels(&good, "good"));
    for _ in 0..3 {
        reconcile(&s.provider).await;
        s.clock.advance(grace);
    }
    reconcile(&s.provider).await;
    let adopted = s.listed(&json!(good)).await;
    assert_eq!(
        (adopted["state"].clone(), adopted["container_id"].clone()),
        (json!("warm"), json!(orphan)),
        "the passes did adopt a well-formed orphan: {adopted}"
    );
    for id in [short, other.as_str(), named.as_str()] {
        assert_eq!(s.listed(&json!(id)).await, Value::Null, "{id} adopted");
        assert_eq!(peer.value(id).await.ok(), Some(None), "{id} claimed");
    }
}

/// The heartbeat does not wait behind the reaper: a reap held in a sandbox's stop for several
/// TTLs (a slow stop, a removal wait, a lock wait) leaves the claims of the sandboxes this
/// provider still has leased renewed, so no peer can adopt and destroy them meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reap_held_past_the_ttl_does_not_hold_up_renewals() {
    let Some(redis) = RedisServer::start("a_reap_held_past_the_ttl_does_not_hold_up_renewals")
    else {
        return;
    };
    let ttl = Duration::from_millis(600);
    let s = Served::start_owned(config(1, 0), true, redis.ownership("me", ttl)).await;
    let peer = redis.ownership("peer", Duration::from_secs(60));
    let idle = s.acquired("user-1", "idle", "run").await;
    s.release(&idle["lease"]).await;
    let busy = s.acquired("user-1", "busy", "run").await;
    let busy_id = busy["sandbox_id"].as_str().expect("id").to_owned();
    let cid = idle["generation"].as_str().expect("generation");
    let gate = s
        .relay
        .as_ref()
        .expect("relayed")
        .hold_once("POST", &format!("/containers/{cid}/stop"));
    s.clock.advance(Duration::from_secs(2));
    let (stop, rx) = watch::channel(false);
    let bg = tokio::spawn(background::run(
        s.provider.clone(),
        Duration::from_millis(100),
        rx,
    ));
    gate.arrived().await;
    // Three TTLs pass while the reap waits on the idle sandbox's stop.
    tokio::time::sleep(3 * ttl).await;
    assert_eq!(
        peer.value(&busy_id).await.ok(),
        Some(Some("own:me".into())),
        "the leased sandbox's claim is renewed while the reap is held"
    );
    assert_eq!(
        peer.claim(&busy_id).await.ok(),
        Some(Claim::Owned("me".into())),
        "no peer takes it"
    );
    gate.release();
    stop.send(true).expect("stop");
    bg.await.expect("background ends");
    assert_eq!(s.listed(&busy["sandbox_id"]).await["state"], "active");
    assert_eq!(s.listed(&idle["sandbox_id"]).await, Value::Null, "reaped");
}

/// A teardown that failed is retried by the reaper's next pass, with the idle timeout off too
/// (a review found the reaper only retried entries past an idle timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reaper_retries_a_failed_rollback_with_the_idle_timeout_off() {
    let own = lifecycle::serve::store::Ownership::new(
        lifecycle::serve::store::Store::Memory(Default::default()),
        "me",
        Duration::from_secs(600),
    );
    let s = Served::start_probing(config(0, 0), own, READY).await;
    let id = naming::sandbox_id("user-1", "stuck").expect("id");
    s.relay
        .as_ref()
        .expect("relayed")
        .fail_once("POST", "/stop");
    let (status, v) = s.acquire("user-1", "stuck", "run").await;
    assert_eq!(status, 502, "{v}");
    let listed = s.listed(&json!(id)).await;
    assert_eq!(listed["destroy_pending"], true, "tracked fenced: {listed}");
    let cid = json!(listed["container_id"].as_str().unwrap_or_default());
    assert!(s.exists(&cid), "the half-made sandbox is left");
    assert_eq!(s.provider.reap().await, vec![id.clone()]);
    assert!(!s.exists(&cid), "the reaper's retry tore it down");
    assert_eq!(s.listed(&json!(id)).await, Value::Null, "no longer tracked");
}
