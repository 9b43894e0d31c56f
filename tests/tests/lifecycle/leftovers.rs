//! Issue 48, point 2, for the CLI: what a sandbox that is gone left (a sidecar, its networks,
//! with lifecycle's labels for that ID) is removed by `lifecycle destroy ID`, which says so,
//! where it once answered "nothing to destroy" and left them to wedge every later create; what
//! lifecycle did not make for the ID (another stack's label) is left alone.

use std::time::Duration;

use serde_json::json;
use sockproxy_tests::crash::output_within;
use sockproxy_tests::lc::{lifecycle_command, LcStack};
use sockproxy_tests::raw;

/// Far more than a destroy on the fake engine takes: only a hang reaches it.
const LIMIT: Duration = Duration::from_secs(120);

fn network(s: &LcStack, name: &str, labels: serde_json::Value, internal: bool) {
    let body = json!({ "Name": name, "Internal": internal, "Labels": labels });
    let r = raw::request(
        &s.engine.socket,
        "POST",
        "/networks/create",
        Some(body.to_string().as_bytes()),
    )
    .expect("answer");
    assert_eq!(r.status, 201, "{}", r.text());
}

#[test]
fn destroy_removes_what_a_gone_sandbox_left_and_says_so() {
    let s = LcStack::new(true);
    let id = s.id("gone");
    let names = s.names(&id);
    let ours = |role: &str| {
        json!({"deerflow.role": role, "deerflow.sandbox_id": id,
               "deerflow.network_mode": "allowlist", "deerflow.stack": s.prefix})
    };
    s.make(&names.sidecar, ours("netproxy"));
    network(&s, &names.network, ours("network"), true);
    // Not lifecycle's for this ID: another stack's label.
    let mut foreign = ours("network");
    foreign["deerflow.stack"] = json!("someone-else-");
    network(&s, &names.egress, foreign, false);
    let mut destroy = lifecycle_command(s.proxy.socket(), &s.prefix, "restricted", &s.state_dir());
    destroy.args(["destroy", &id]);
    let out = output_within(destroy, LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let removed: Vec<String> = v["leftovers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str().map(str::to_owned))
        .collect();
    assert_eq!(removed.len(), 2, "{v}");
    assert!(
        removed[0].starts_with(&format!("container {}", names.sidecar)),
        "{v}"
    );
    assert_eq!(removed[1], format!("network {}", names.network), "{v}");
    assert_eq!(v["container_id"], serde_json::Value::Null);
    assert!(!s.exists(&format!("/containers/{}/json", names.sidecar)));
    assert!(!s.exists(&format!("/networks/{}", names.network)));
    assert!(
        s.exists(&format!("/networks/{}", names.egress)),
        "another's network is left alone"
    );
    // With nothing of it left, it is "nothing to destroy" again (exit 1).
    let mut again = lifecycle_command(s.proxy.socket(), &s.prefix, "restricted", &s.state_dir());
    again.args(["destroy", &id]);
    let again = output_within(again, LIMIT);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("nothing to destroy"));
}
