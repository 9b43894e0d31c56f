//! One of several hosts loses its engine while its serve keeps running (docs/multi-host.md):
//! its `/health` answers 503, so HAProxy sends that host's IDs elsewhere, and its claims and
//! registry entries must lapse so that the host they hash to now makes the sandbox instead of
//! redirecting deer-flow back to the dead one; when the engine returns, what the host held for
//! an ID another host took is removed from its engine. Host A's engine is a dockerd of the
//! test's own (stopped with SIGTERM, as systemd stops it, and started again); host B's is the
//! suite's engine; one private Redis.

use serde_json::json;
use sockproxy_tests::bindroot::BindRootDir;
use sockproxy_tests::engine::{real_engine, remove_stack};
use sockproxy_tests::multihost::{
    call, free_port, http, key_file, labelled, may_run, wait_for, wait_until, Killed, ServeHost,
};
use sockproxy_tests::own_dockerd::OwnDockerd;
use sockproxy_tests::provisioner::SERVING_CMD;
use sockproxy_tests::redis_server::RedisServer;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

#[test]
fn a_host_whose_engine_is_gone_lets_its_claims_lapse_and_another_host_makes_its_sandboxes() {
    let test =
        "a_host_whose_engine_is_gone_lets_its_claims_lapse_and_another_host_makes_its_sandboxes";
    if !may_run(test, false) {
        return;
    }
    let Some(e) = real_engine(test) else { return };
    let Some(redis) = RedisServer::start(test) else {
        return;
    };
    let Some(mut dockerd) = OwnDockerd::start(test, &e.socket) else {
        return;
    };
    // Sandboxes publish on 127.0.0.1 of the dockerd's own network namespace.
    dockerd.loopback_up();
    let dir = tempfile::tempdir().expect("dir");
    let key_file = key_file(dir.path());
    let key_prefix = format!("lifecycle:{}:sandbox", unique_prefix());
    let (prefix_a, prefix_b) = (unique_prefix(), unique_prefix());
    // deer-flow's thread directories under a root both proxies allow binding from.
    let root = BindRootDir::new("mhdown");
    let bind_root = root.path().to_owned();
    let proxy_a = StackProxy::start_with(&dockerd.socket(), &prefix_a, false, |c| {
        c.create_rules.bind_roots = vec![bind_root.clone()];
    });
    let proxy_b = StackProxy::start_with(&e.socket, &prefix_b, false, |c| {
        c.create_rules.bind_roots = vec![bind_root.clone()];
    });
    proxy_a.wait_names_live();
    proxy_b.wait_names_live();
    let serve = |name: &str, proxy: &StackProxy, prefix: &str, ready: &str| {
        let port = free_port();
        let state = dir.path().join(name);
        std::fs::create_dir_all(&state).expect("state");
        let log = std::fs::File::create(dir.path().join(format!("{name}.log"))).expect("log");
        let mut cmd = sockproxy_tests::lc::lifecycle_base(proxy.socket(), prefix, "open", &state);
        cmd.args(["--sandbox-cmd", SERVING_CMD, "--stop-timeout", "1"])
            .args(["--ready-timeout", ready]);
        let child = ServeHost {
            port,
            key_file: &key_file,
            root: root.path(),
            redis: &redis.url(),
            owner: name,
            key_prefix: Some(&key_prefix),
            ttl: 6,
        }
        .spawn(&mut cmd, &["--sandbox-host", "127.0.0.1"], log);
        wait_for(&format!("{name} answers /health"), 30, || {
            http(port, "GET", "/health").0 == 200
        });
        (port, Killed(child))
    };
    // Host A's sandboxes are published in its dockerd's own network namespace, which this
    // test cannot reach: its readiness wait is off (the handover is what is tested here).
    let (port_a, _serve_a) = serve("hostA", &proxy_a, &prefix_a, "0");
    let (port_b, _serve_b) = serve("hostB", &proxy_b, &prefix_b, "30");
    let log = |name: &str| {
        std::fs::read_to_string(dir.path().join(format!("{name}.log"))).unwrap_or_default()
    };

    let id = stackmodel::sandbox_id("user-down", "thread-down");
    let body = json!({
        "sandbox_id": id, "thread_id": "thread-down", "user_id": "user-down",
        "include_legacy_skills": true, "provision_lark_cli_runtime": false,
        "provision_lark_cli_broker": false, "extra_mounts": [],
    });
    let made = call(port_a, "POST", "/api/sandboxes", Some(&body));
    assert_eq!(made.status, 200, "{}", made.body);
    assert_eq!(made.body["owner"], "hostA", "{}", made.body);
    assert_eq!(
        labelled(&dockerd.socket(), &id).len(),
        1,
        "made on A's engine"
    );
    // While A's claim stands, B sends deer-flow to A.
    let sent = call(port_b, "POST", "/api/sandboxes", Some(&body));
    assert_eq!(sent.status, 307, "{}", sent.body);

    dockerd.stop();
    wait_for("A's /health answers 503", 30, || {
        http(port_a, "GET", "/health").0 == 503
    });
    // deer-flow's next create for the ID, on the host it now hashes to: made there once A's
    // claim (TTL 6 s) has lapsed, not redirected to A for as long as A's serve runs.
    let mut last = call(port_b, "POST", "/api/sandboxes", Some(&body));
    let taken = wait_until(45, || {
        last = call(port_b, "POST", "/api/sandboxes", Some(&body));
        last.status == 200
    });
    assert!(
        taken,
        "B made the sandbox: last answer {} {}\n--- A ---\n{}",
        last.status,
        last.body,
        log("hostA")
    );
    assert_eq!(last.body["owner"], "hostB", "{}", last.body);
    let (status, got) = http(port_b, "GET", &format!("/api/sandboxes/{id}"));
    assert_eq!(
        (status, got["owner"].as_str(), got["status"].as_str()),
        (200, Some("hostB"), Some("Running")),
        "{got}"
    );
    assert_eq!(labelled(&e.socket, &id).len(), 1, "made on B's engine");
    assert!(
        log("hostA").contains("claims and registry entries left to lapse"),
        "A said why: {}",
        log("hostA")
    );

    // A's engine returns: what A held for the ID is B's now, so it goes from A's engine; B's
    // stays.
    dockerd.start_again();
    let gone = wait_until(60, || labelled(&dockerd.socket(), &id).is_empty());
    assert!(
        gone,
        "A's stale sandbox removed: {:?}\n--- A ---\n{}",
        labelled(&dockerd.socket(), &id),
        log("hostA")
    );
    assert_eq!(labelled(&e.socket, &id).len(), 1, "B's sandbox stays");
    let (status, got) = http(port_b, "GET", &format!("/api/sandboxes/{id}"));
    assert_eq!(
        (status, got["owner"].as_str()),
        (200, Some("hostB")),
        "{got}"
    );
    remove_stack(&e.socket, &prefix_b);
}
