//! Issue 51, point 2, on the real dockerd: a restricted sandbox's egress refusals are counted
//! per stack by `lifecycle serve` (`lifecycle_egress_refusals_total{reason}`, read from the
//! sidecar's log) and the count stays once the sandbox and its sidecar are gone. The sidecar is
//! the real netproxy image; the refused request is made from inside the sandbox.

use serde_json::json;
use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::real_engine;
use sockproxy_tests::provisioner::{ApiStack, KEY};

use lifecycle::decide::Mode;

/// The value of `lifecycle_egress_refusals_total{reason="REASON"}` in a scrape (`None`: the
/// series is not there).
fn refusals(text: &str, reason: &str) -> Option<u64> {
    let series = format!("lifecycle_egress_refusals_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_refusals_are_counted_per_stack_and_outlive_the_sandbox() {
    let Some(e) = real_engine("egress_refusals_are_counted_per_stack_and_outlive_the_sandbox")
    else {
        return;
    };
    let s = ApiStack::start(&e, Mode::Restricted, Some(KEY)).await;
    let before = s.metrics().await;
    assert_eq!(
        refusals(&before, "not_allowed"),
        Some(0),
        "registered at zero:\n{before}"
    );
    assert_eq!(refusals(&before, "other"), Some(0));

    let id = "7d9ac0ff9b98cd06";
    let body = json!({"sandbox_id": id, "thread_id": "thread-1", "user_id": "user-1"});
    let (status, answer) = s.create(&body).await;
    assert_eq!(status, 200, "{answer}");
    let sandbox = s.name(id);

    // A name no rule allows, asked for through the sandbox's proxy variables: 403.
    let sock = s.engine.clone();
    let tried = tokio::task::spawn_blocking(move || {
        docker(
            &sock,
            &[
                "exec",
                &sandbox,
                "wget",
                "-q",
                "-O",
                "-",
                "http://forbidden.invalid/",
            ],
        )
    })
    .await
    .expect("exec");
    assert!(
        !tried.ok() && tried.stderr.contains("403"),
        "refused by the sidecar: {} {}",
        tried.out(),
        tried.stderr
    );

    // The count rises once the sidecar's line is read (bounded wait, no timing asserted).
    let mut counted = None;
    for _ in 0..100 {
        counted = refusals(&s.metrics().await, "not_allowed");
        if counted == Some(1) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(counted, Some(1), "{}", s.metrics().await);

    let (status, answer) = s
        .call(
            "DELETE",
            &format!("/api/sandboxes/{id}"),
            &[("X-API-Key", KEY)],
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(s.inspect(&s.name(id)), serde_json::Value::Null, "destroyed");
    let after = s.metrics().await;
    assert_eq!(
        refusals(&after, "not_allowed"),
        Some(1),
        "the count outlives the sandbox:\n{after}"
    );
}
