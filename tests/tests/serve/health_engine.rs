//! deer-flow's `GET /health` answers for the engine behind the serve's proxy: HAProxy
//! health-checks it (deploy/multi-host/haproxy.cfg), so a host whose dockerd died must answer
//! 503 and drop out of the rotation, and 200 again once the engine is back. On a real dockerd
//! of the test's own, stopped (SIGTERM, as systemd stops it) and started again, with HAProxy
//! running the shipped configuration in front of the one host.

use std::process::Stdio;

use sockproxy_tests::engine::real_engine;
use sockproxy_tests::multihost::{
    free_port, haproxy, http, key_file, may_run, wait_for, wait_until, Killed,
};
use sockproxy_tests::own_dockerd::OwnDockerd;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

#[test]
fn health_answers_503_while_the_engine_is_down_and_haproxy_takes_the_host_out() {
    let test = "health_answers_503_while_the_engine_is_down_and_haproxy_takes_the_host_out";
    if !may_run(test, true) {
        return;
    }
    let Some(e) = real_engine(test) else { return };
    let Some(mut dockerd) = OwnDockerd::start(test, &e.socket) else {
        return;
    };
    let prefix = unique_prefix();
    let proxy = StackProxy::start(&dockerd.socket(), &prefix, false);
    proxy.wait_names_live();
    let dir = tempfile::tempdir().expect("dir");
    let key_file = key_file(dir.path());
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("serve.log")).expect("log");
    let serve = sockproxy_tests::lc::lifecycle_base(proxy.socket(), &prefix, "open", dir.path())
        .arg("serve")
        .arg("--listen")
        .arg(format!("tcp://127.0.0.1:{port}"))
        .arg("--api-key-file")
        .arg(&key_file)
        .env("LIFECYCLE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("lifecycle serve starts");
    let _serve = Killed(serve);
    let serve_log = || std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
    wait_for("the serve answers /health 200", 30, || {
        http(port, "GET", "/health") == (200, serde_json::json!({ "status": "ok" }))
    });
    let front = free_port();
    let _haproxy = Killed(haproxy(dir.path(), front, &[("host1".into(), port)]));
    wait_for("HAProxy routes to the host", 30, || {
        http(front, "GET", "/health").0 == 200
    });

    dockerd.stop();
    let mut last = (0, serde_json::Value::Null);
    let down = wait_until(30, || {
        last = http(port, "GET", "/health");
        last.0 == 503
    });
    assert!(down, "/health answers 503: {last:?}\n{}", serve_log());
    assert_eq!(last.1["status"], "unavailable", "{:?}", last.1);
    let detail = last.1["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains("Docker engine") && detail.contains("does not answer"),
        "{detail}"
    );
    // HAProxy reads the 503 and takes the host out: its own 503 (no host left), not the
    // serve's JSON.
    let mut through = (0, serde_json::Value::Null);
    let out = wait_until(30, || {
        through = http(front, "GET", "/health");
        through.0 == 503 && through.1.is_null()
    });
    assert!(out, "HAProxy took the host out: {through:?}");
    assert!(
        serve_log().contains("does not answer /_ping"),
        "one line said so: {}",
        serve_log()
    );

    dockerd.start_again();
    wait_for("/health answers 200 again", 30, || {
        http(port, "GET", "/health") == (200, serde_json::json!({ "status": "ok" }))
    });
    wait_for("HAProxy routes to the host again", 30, || {
        http(front, "GET", "/health").0 == 200
    });
    assert!(
        serve_log().contains("answers /_ping again"),
        "{}",
        serve_log()
    );
}
