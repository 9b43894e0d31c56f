//! `--lease-timeout`: a lease its holder neither releases nor renews is released by the reaper,
//! so a gateway that crashed mid-run does not keep its sandbox active for as long as the
//! provider runs; a renewed lease, and every lease with the timeout off, is kept.

use std::time::Duration;

use serde_json::Value;
use sockproxy_tests::serve::{config, Served};

const SECS: fn(u64) -> Duration = Duration::from_secs;

async fn renew(s: &Served, lease: &Value) -> (u16, Value) {
    let lease = lease.as_str().expect("lease is a string");
    s.call("POST", &format!("/v1/leases/{lease}/renew"), None)
        .await
}

fn holders(entry: &Value) -> Vec<String> {
    entry["holders"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|h| h["holder"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_not_renewed_within_the_timeout_is_released_and_its_sandbox_goes_warm() {
    let mut cfg = config(600, 0);
    cfg.lease_timeout = SECS(60);
    let s = Served::start(cfg).await;
    let crashed = s.acquired("user-1", "thread-1", "crashed-run").await;
    let alive = s.acquired("user-1", "thread-1", "live-run").await;
    assert_eq!(crashed["sandbox_id"], alive["sandbox_id"]);
    let id = &alive["sandbox_id"];

    s.clock.advance(SECS(40));
    let (status, v) = renew(&s, &alive["lease"]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"], "renewed");
    assert_eq!(v["sandbox_id"], *id);

    // 61 s after the acquire: the lease nobody renewed lapses, the renewed one (21 s) stays.
    s.clock.advance(SECS(21));
    assert!(s.provider.reap().await.is_empty(), "nothing was warm");
    let entry = s.listed(id).await;
    assert_eq!(entry["state"], "active", "{entry}");
    assert_eq!(holders(&entry), vec!["live-run".to_owned()], "{entry}");
    assert_eq!(
        s.release(&crashed["lease"]).await.0,
        404,
        "already released"
    );
    assert_eq!(renew(&s, &crashed["lease"]).await.0, 404, "gone");

    // The last holder stops renewing too: its sandbox is released into the warm pool (kept
    // running, health-checked), not destroyed, and the same thread reclaims it.
    s.clock.advance(SECS(60));
    assert!(s.provider.reap().await.is_empty());
    let entry = s.listed(id).await;
    assert_eq!(entry["state"], "warm", "{entry}");
    assert!(holders(&entry).is_empty(), "{entry}");
    assert!(s.running(&alive["generation"]));
    let (_, metrics) = s.metrics().await;
    let metrics = metrics.as_str().unwrap_or_default().to_owned();
    for line in [
        "lifecycle_leases_lapsed_total{result=\"held\"} 1",
        "lifecycle_leases_lapsed_total{result=\"warm\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    let again = s.acquired("user-1", "thread-1", "next-run").await;
    assert_eq!(again["source"], "warm");
    assert_eq!(again["generation"], alive["generation"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_lease_timeout_leases_last_until_released() {
    let s = Served::start(config(600, 0)).await;
    let run = s.acquired("user-1", "thread-1", "run").await;
    s.clock.advance(SECS(86_400 * 30));
    assert!(s.provider.reap().await.is_empty());
    let entry = s.listed(&run["sandbox_id"]).await;
    assert_eq!(entry["state"], "active", "{entry}");
    assert_eq!(holders(&entry), vec!["run".to_owned()]);
    // Renewing is harmless with the timeout off; an unknown lease is a 404.
    assert_eq!(renew(&s, &run["lease"]).await.0, 200);
    assert_eq!(
        renew(&s, &Value::from("0123456789abcdef01234567")).await.0,
        404
    );
    assert_eq!(s.release(&run["lease"]).await.1["result"], "warm");
}
