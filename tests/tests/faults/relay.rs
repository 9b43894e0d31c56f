//! Issue 15's cases 2, 5, 6 and 7 as regressions, on the fake engine behind the real sockproxy,
//! with a fault relay between lifecycle and the proxy answering 500 to one request, holding one
//! until the test has changed the engine under it, or answering 409 "removal already in
//! progress" to a removal the engine did do. Each failed on the code before issue 15.

use std::time::Duration;

use lifecycle::decide::Mode;
use lifecycle::ops::OpError;
use serde_json::json;
use sockproxy_tests::lc::fault_relay::{Action, FaultRelay};
use sockproxy_tests::lc::{lifecycle_command, LcStack};
use sockproxy_tests::raw;

fn state_of(s: &LcStack, reference: &str) -> Option<serde_json::Value> {
    let r = raw::get(&s.engine.socket, &format!("/containers/{reference}/json")).ok()?;
    (r.status == 200).then(|| r.json()["State"].clone())
}

fn running(s: &LcStack, reference: &str) -> bool {
    state_of(s, reference).is_some_and(|st| st["Running"] == true)
}

/// Case 2: the undo of a failed create fails (its removal answered 500). The error says what is
/// left and exits 4, the generation is quarantined with its port kept, and the next create
/// replaces the never-ready container instead of handing it out as discovered.
#[test]
fn a_failed_rollback_is_reported_quarantined_and_keeps_its_port() {
    let s = LcStack::new(false);
    let relay = FaultRelay::start(s.proxy.socket());
    relay.fail_once("DELETE", "/containers/");
    let id = s.id("rollback");
    let name = s.names(&id).sandbox;
    let run = |ready: &str| {
        lifecycle_command(relay.socket(), &s.prefix, "open", &s.state_dir())
            .args(["--sandbox-cmd", "sleep 600", "--ready-timeout", ready])
            .args(["create", "--user", "user-1", "--thread", "rollback"])
            .output()
            .expect("runs")
    };
    // The fake's containers serve nothing: the readiness wait fails, then the undo does.
    let out = run("1");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("left behind: container") && err.contains(&name),
        "{err}"
    );
    assert!(!err.contains("what was created is destroyed"), "{err}");
    let left = state_of(&s, &name).expect("the container is still there");
    let cid = raw::get(&s.engine.socket, &format!("/containers/{name}/json"))
        .expect("inspect")
        .json()["Id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(err.contains(&cid), "the generation is named: {err}");
    assert_eq!(
        left["Running"], false,
        "it was stopped before the removal failed"
    );
    assert!(s.ledger().fences(&id, &cid).expect("read"), "quarantined");
    assert!(s.port(&id, &cid).is_some(), "its port stays reserved");

    let next = run("0");
    assert!(
        next.status.success(),
        "{}",
        String::from_utf8_lossy(&next.stderr)
    );
    let made: serde_json::Value = serde_json::from_slice(&next.stdout).expect("json");
    assert_eq!(made["discovered"], false);
    assert_ne!(made["container_id"], cid.as_str());
    assert!(
        state_of(&s, &cid).is_none(),
        "the left-over generation is gone"
    );
    assert!(!s.ledger().is_quarantined(&id).expect("read"));
    assert_eq!(s.port(&id, &cid), None, "and its port released");
}

/// Case 5: a destroy whose stop failed is retried: the retry retires the record and releases
/// the port; and `destroy` of an absent but quarantined sandbox completes the absent teardown.
#[tokio::test]
async fn a_destroy_retry_retires_its_generation_and_an_absent_quarantined_destroy_completes() {
    let s = LcStack::new(false);
    let relay = FaultRelay::start(s.proxy.socket());
    let lc = s.at(relay.socket(), Mode::Open).await;
    let made = lc.create("user-1", "retry").await.expect("create");
    let (id, cid) = (made.sandbox_id.clone(), made.container_id.clone());
    let port = made.host_port.expect("a port");
    relay.fail_once("POST", "/stop");
    let err = lc.destroy(&id).await.expect_err("the stop failed");
    assert!(
        matches!(err, OpError::Deferred { .. }),
        "a failed teardown says its record is kept (exit 3): {err}"
    );
    assert!(s.ledger().fences(&id, &cid).expect("read"));
    assert_eq!(s.port(&id, &cid), Some(port));
    let done = lc.destroy(&id).await.expect("the retry succeeds");
    assert_eq!(done.container_id.as_deref(), Some(cid.as_str()));
    assert_eq!(done.ports_released, vec![port]);
    assert!(
        !s.ledger().is_quarantined(&id).expect("read"),
        "the record is retired"
    );
    assert!(state_of(&s, &cid).is_none());

    let absent = s.id("absent");
    s.ledger().mark(&absent, "unknown").expect("mark");
    let done = lc
        .destroy(&absent)
        .await
        .expect("absent teardown, not nothing to destroy");
    assert!(done.absent_teardown && done.container_id.is_none());
    assert!(!s.ledger().is_quarantined(&absent).expect("read"));
    assert!(matches!(
        lc.destroy(&absent).await,
        Err(OpError::NoSuchSandbox(_))
    ));
}

/// Cases 3 and 5 at the level of one request: the stop was decided on generation G1; while it
/// is on its way, G1 goes and a replacement G2 takes the name. The stop (pinned to G1's ID)
/// finds nothing, and G2 is never stopped or removed.
#[tokio::test]
async fn a_replacement_under_the_name_is_never_touched() {
    let s = LcStack::new(false);
    let relay = FaultRelay::start(s.proxy.socket());
    let lc = s.at(relay.socket(), Mode::Open).await;
    let made = lc.create("user-1", "pinned").await.expect("create");
    let (id, g1) = (made.sandbox_id.clone(), made.container_id.clone());
    s.ledger().mark(&id, &g1).expect("mark");
    let name = s.names(&id).sandbox;
    let gate = relay.hold_once("POST", "/stop");
    let swap = async {
        gate.arrived().await;
        let rm = raw::request(
            &s.engine.socket,
            "DELETE",
            &format!("/containers/{g1}?force=1"),
            None,
        )
        .expect("rm");
        assert_eq!(rm.status, 204);
        let g2 = s.make(&name, json!({ "deerflow.network_mode": "open" }));
        gate.release();
        g2
    };
    let (done, g2) = tokio::join!(lc.destroy(&id), swap);
    let done = done.expect("G1 is gone, which is what the destroy wanted");
    assert_eq!(done.container_id.as_deref(), Some(g1.as_str()));
    assert!(running(&s, &g2), "the replacement still runs");
    let touched: Vec<String> = relay
        .requests()
        .into_iter()
        .filter(|l| l.contains("/stop") || l.contains("/kill") || l.starts_with("DELETE"))
        .filter(|l| l.contains(&g2) || l.contains(&name))
        .collect();
    assert!(
        touched.is_empty(),
        "nothing was sent to the replacement: {touched:?}"
    );
    assert!(!s.ledger().is_quarantined(&id).expect("read"));
}

/// Case 6: an exited container under the name is destroyed and replaced, not discovered; a
/// transient inspect error on the way destroys nothing.
#[tokio::test]
async fn an_exited_container_is_replaced_and_an_inspect_error_destroys_nothing() {
    let s = LcStack::new(false);
    let relay = FaultRelay::start(s.proxy.socket());
    let lc = s.at(relay.socket(), Mode::Open).await;
    let id = s.id("dead");
    let name = s.names(&id).sandbox;
    let dead = s.make(&name, json!({ "deerflow.network_mode": "open" }));
    let stop = raw::request(
        &s.engine.socket,
        "POST",
        &format!("/containers/{dead}/stop?t=0"),
        None,
    )
    .expect("stop");
    assert!(matches!(stop.status, 204 | 304), "{}", stop.status);
    assert!(!running(&s, &dead));
    let made = lc.create("user-1", "dead").await.expect("create");
    assert!(!made.discovered, "an exited container is not handed out");
    assert_ne!(made.container_id, dead);
    assert!(state_of(&s, &dead).is_none(), "the dead one is destroyed");
    assert!(running(&s, &made.container_id));

    // The live one, found through a 409, cannot be inspected once: nothing is destroyed.
    relay.fail_once("GET", &format!("/containers/{name}/json"));
    let err = lc
        .create("user-1", "dead")
        .await
        .expect_err("the inspect failed");
    assert!(err.to_string().contains("inspect"), "{err}");
    assert!(running(&s, &made.container_id), "nothing was destroyed");
    let again = lc.create("user-1", "dead").await.expect("discovered");
    assert!(again.discovered);
    assert_eq!(again.container_id, made.container_id);
}

/// Case 7: the engine answers a removal with 409 "removal … is already in progress" (as dockerd
/// does for an `--rm` container that was just stopped): lifecycle waits for the absence.
#[tokio::test]
async fn removal_already_in_progress_waits_for_absence() {
    let s = LcStack::new(false);
    let relay = FaultRelay::start(s.proxy.socket());
    let lc = s.at(relay.socket(), Mode::Open).await;
    let made = lc.create("user-1", "inprogress").await.expect("create");
    let cid = made.container_id.clone();
    relay.on(
        "DELETE",
        "/containers/",
        Action::ForwardThenAnswer(
            409,
            format!("removal of container {cid} is already in progress"),
        ),
        1,
    );
    let done = lc
        .destroy(&made.sandbox_id)
        .await
        .expect("a removal in progress is not an error");
    assert_eq!(
        done.ports_released,
        made.host_port.into_iter().collect::<Vec<_>>()
    );
    assert!(state_of(&s, &cid).is_none());
    // Bounded: a container that never goes is reported, not waited for forever.
    let mut lc = lc;
    lc.settings.removal_wait = Duration::from_millis(300);
    let made = lc.create("user-1", "inprogress").await.expect("create");
    relay.on(
        "DELETE",
        "/containers/",
        Action::Answer(409, "removal of container x is already in progress".into()),
        1,
    );
    let err = lc.destroy(&made.sandbox_id).await.expect_err("still there");
    assert!(err.to_string().contains("is gone"), "{err}");
    assert!(s
        .ledger()
        .fences(&made.sandbox_id, &made.container_id)
        .expect("read"));
}
