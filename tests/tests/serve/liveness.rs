//! Issue 48, point 3: dead is not alive. deer-flow registers what discovery returns without
//! checking it, so a sandbox that is not running (exited, dead, created and never started) is
//! answered 404 as a missing one is, left out of the list, and handed to the reconciler, which
//! tears it down; a create answers once its container runs and its port is known, leaving the
//! readiness wait to deer-flow (which gives the POST 30 s).

use std::time::Duration;

use lifecycle::decide::Mode;
use serde_json::{json, Value};
use sockproxy_tests::engine::{each_engine_async, Engine, Fakes};
use sockproxy_tests::provisioner::{hex, ApiStack, KEY};

fn derived(thread: &str) -> String {
    hex(&<sha2::Sha256 as sha2::Digest>::digest(
        format!("user-1:{thread}").as_bytes(),
    ))[..16]
        .to_owned()
}

fn create_body(thread: &str) -> Value {
    json!({"sandbox_id": derived(thread), "thread_id": thread, "user_id": "user-1"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_is_not_running_is_404_unlisted_and_reconciled_away() {
    if !sockproxy_tests::bindroot::can_pin(
        "a_sandbox_that_is_not_running_is_404_unlisted_and_reconciled_away",
    ) {
        return;
    }
    each_engine_async(
        "a_sandbox_that_is_not_running_is_404_unlisted_and_reconciled_away",
        Fakes::Debian,
        |e| {
            Box::pin(async move {
                let s = ApiStack::start(e, Mode::Open, Some(KEY)).await;
                let key = [("X-API-Key", KEY)];
                let id = derived("exits");
                let (status, text) = s.create(&create_body("exits")).await;
                assert_eq!(status, 200, "{text}");
                let cid = s.inspect(&s.name(&id))["Id"].as_str().unwrap_or("").to_owned();
                // It exits behind the provider's back (an OOM kill, say).
                let stopped = sockproxy_tests::raw::request(
                    &s.engine,
                    "POST",
                    &format!("/containers/{cid}/stop?t=0"),
                    None,
                )
                .expect("stop");
                assert!(stopped.status == 204 || stopped.status == 304);
                let path = format!("/api/sandboxes/{id}");
                let (status, text) = s.call("GET", &path, &key, None).await;
                assert_eq!(status, 404, "{text}");
                assert_eq!(
                    serde_json::from_str::<Value>(&text).unwrap_or(Value::Null),
                    json!({"detail": format!("Sandbox '{id}' not found")})
                );
                let (_, listed) = s.call("GET", "/api/sandboxes", &key, None).await;
                assert!(!listed.contains(&id), "not listed: {listed}");
                // One made and never started (what a crashed create leaves), lifecycle's labels.
                let never = derived("never-started");
                let made = sockproxy_tests::raw::request(
                    &s.engine,
                    "POST",
                    &format!("/containers/create?name={}", s.name(&never)),
                    Some(
                        json!({"Image": e.image, "Cmd": ["sleep", "600"], "Labels": {
                            "deerflow.role": "sandbox", "deerflow.sandbox_id": never,
                            "deerflow.network_mode": "open", "deerflow.stack": s.prefix,
                            "lifecycle.origin": "provisioner",
                            "lifecycle.scope": hex(&<sha2::Sha256 as sha2::Digest>::digest(b"user-1:never-started"))}})
                        .to_string()
                        .as_bytes(),
                    ),
                )
                .expect("create");
                assert_eq!(made.status, 201, "{}", made.text());
                let (status, _) = s
                    .call("GET", &format!("/api/sandboxes/{never}"), &key, None)
                    .await;
                assert_eq!(status, 404, "created but not running");
                // The reconciler (the GET woke it; its pass runs here) tears both down.
                lifecycle::serve::background::reconcile(&s.provider).await;
                assert_eq!(s.inspect(&cid), Value::Null, "the exited one is gone");
                assert_eq!(s.inspect(&s.name(&never)), Value::Null, "the created one too");
                // The thread's next create makes a fresh, running one.
                let (status, text) = s.create(&create_body("exits")).await;
                assert_eq!(status, 200, "{text}");
                let fresh = s.inspect(&s.name(&id));
                assert_ne!(fresh["Id"], json!(cid));
                assert_eq!(fresh["State"]["Running"], json!(true));
            })
        },
    )
    .await;
}

/// A create answers once the container runs, however long the provider's readiness wait: the
/// sandbox here never answers HTTP and creates would wait an hour for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_answers_once_its_container_runs_without_the_readiness_wait() {
    if !sockproxy_tests::bindroot::can_pin(
        "a_create_answers_once_its_container_runs_without_the_readiness_wait",
    ) {
        return;
    }
    each_engine_async(
        "a_create_answers_once_its_container_runs_without_the_readiness_wait",
        Fakes::Debian,
        |e| {
            Box::pin(async move {
                let s = ApiStack::start_never_ready(e, Mode::Open, Duration::from_secs(3600)).await;
                let (status, text) = s.create(&create_body("slow")).await;
                assert_eq!(status, 200, "{text}");
                let v: Value = serde_json::from_str(&text).expect("json");
                assert_eq!(v["status"], "Running");
                let c = s.inspect(&s.name(&derived("slow")));
                assert_eq!(c["State"]["Running"], json!(true));
                let port = c["HostConfig"]["PortBindings"]["8080/tcp"][0]["HostPort"].clone();
                assert_eq!(
                    v["sandbox_url"],
                    json!(format!("http://localhost:{}", port.as_str().unwrap_or("")))
                );
            })
        },
    )
    .await;
}

/// A container that exits right after its start is not answered as running: the create fails
/// (500) and undoes what it made, port included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_that_exits_at_once_is_a_failed_create_and_is_undone() {
    if !sockproxy_tests::bindroot::can_pin(
        "a_container_that_exits_at_once_is_a_failed_create_and_is_undone",
    ) {
        return;
    }
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let s = ApiStack::start_exiting(&e).await;
    let (status, text) = s.create(&create_body("exits-at-once")).await;
    assert_eq!(status, 500, "{text}");
    assert!(text.contains("not running right after its start"), "{text}");
    assert_eq!(s.inspect(&s.name(&derived("exits-at-once"))), Value::Null);
    assert_eq!(
        s.port_reservations(),
        Vec::<String>::new(),
        "its port released"
    );
}

/// `DELETE` answers what it did: a sandbox whose container is gone but whose sidecar and
/// network are left is "cleaned" (they are removed), where it once answered `{"ok":true}` and
/// removed nothing; then nothing of it is there ("absent").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_what_a_gone_sandbox_left_and_says_what_it_did() {
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let s = ApiStack::start(&e, Mode::Restricted, Some(KEY)).await;
    let id = derived("left");
    let (sidecar, net) = leftovers(&s, &id, "sandbox-net", true);
    let key = [("X-API-Key", KEY)];
    let path = format!("/api/sandboxes/{id}");
    let (status, text) = s.call("DELETE", &path, &key, None).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap_or(Value::Null),
        json!({"ok": true, "sandbox_id": id, "result": "cleaned"})
    );
    assert!(!s.exists(&format!("/containers/{sidecar}/json")));
    assert!(!s.exists(&format!("/networks/{net}")));
    let (status, text) = s.call("DELETE", &path, &key, None).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap_or(Value::Null),
        json!({"ok": true, "sandbox_id": id, "result": "absent"})
    );
}

/// In restricted mode the reconciler removes the sidecar and network lifecycle made for a
/// sandbox ID no container holds (what a sandbox removed from under it left), and leaves those
/// of a sandbox that is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciler_removes_a_lone_sidecar_and_network() {
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let s = ApiStack::start(&e, Mode::Restricted, Some(KEY)).await;
    let (status, text) = s.create(&create_body("kept")).await;
    assert_eq!(status, 200, "{text}");
    let id = derived("lone");
    let (sidecar, net) = leftovers(&s, &id, "sandbox-egress", false);
    lifecycle::serve::background::reconcile(&s.provider).await;
    assert!(
        !s.exists(&format!("/containers/{sidecar}/json")),
        "the lone sidecar"
    );
    assert!(!s.exists(&format!("/networks/{net}")), "the lone network");
    // The running sandbox's own sidecar stays.
    let kept = derived("kept");
    assert!(s.exists(&format!(
        "/containers/{}netproxy-{}/json",
        s.prefix,
        name_digest(&s.prefix, &kept)
    )));
    assert_eq!(s.inspect(&s.name(&kept))["State"]["Running"], json!(true));
}

/// The 16 hex digits lifecycle derives a restricted sandbox's sidecar and network names from.
fn name_digest(prefix: &str, id: &str) -> String {
    hex(&<sha2::Sha256 as sha2::Digest>::digest(
        format!("{prefix}sandbox:{id}").as_bytes(),
    ))[..16]
        .to_owned()
}

/// What a restricted sandbox `id` whose container is gone leaves, made as lifecycle makes it
/// (its labels, its derived names): the sidecar container and the network `{prefix}{kind}-…`.
fn leftovers(s: &ApiStack, id: &str, kind: &str, internal: bool) -> (String, String) {
    let digest = name_digest(&s.prefix, id);
    let ours = |role: &str| {
        json!({"deerflow.role": role, "deerflow.sandbox_id": id,
               "deerflow.network_mode": "allowlist", "deerflow.stack": s.prefix})
    };
    let sidecar = format!("{}netproxy-{digest}", s.prefix);
    s.make(&sidecar, ours("netproxy"));
    let net = format!("{}{kind}-{digest}", s.prefix);
    let mut body = json!({"Name": net, "Labels": ours("network")});
    if internal {
        body["Internal"] = json!(true);
    }
    let made = sockproxy_tests::raw::request(
        &s.engine,
        "POST",
        "/networks/create",
        Some(body.to_string().as_bytes()),
    )
    .expect("answer");
    assert_eq!(made.status, 201, "{}", made.text());
    (sidecar, net)
}
