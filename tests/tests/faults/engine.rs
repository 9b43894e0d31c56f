//! The engine failing under the proxy (issue 17): killed and restarted under a `docker logs -f`,
//! an exec session and a list in flight; gone (socket missing); silent. The proxy answers in
//! dockerd's shape with a reason, ends streams instead of hanging them, keeps no connection or
//! stream of its own behind, and serves again as soon as the engine is back.

use std::io::Read;
use std::time::{Duration, Instant};

use sockproxy_tests::cli::{docker, spawn_docker};
use sockproxy_tests::fake::{FakeEngine, Fault, FaultRule, Flavor};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

/// Waits (bounded) for `done`; false if it never came.
fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn an_engine_restart_ends_streams_and_the_proxy_serves_again() {
    let dir = tempfile::Builder::new()
        .prefix("ef")
        .tempdir()
        .expect("dir");
    let sock = dir.path().join("engine.sock");
    let engine = FakeEngine::start_at(&sock, Flavor::Debian2010).expect("engine");
    let prefix = unique_prefix();
    let p = StackProxy::start(&sock, &prefix, false);
    let name = format!("{prefix}sandbox-faults");
    step("a sandbox runs through the proxy", || {
        let out = docker(
            p.socket(),
            &[
                "run",
                "-d",
                "--name",
                &name,
                "sockproxy-test-busybox",
                "sh",
                "-c",
                "echo hello; sleep 600",
            ],
        );
        assert!(out.ok(), "{}", out.stderr);
    });

    // A followed log and an exec session with stdin open, both through the proxy.
    let (mut logs, mut exec, list) = step(
        "a followed log, an exec session and a held list are in flight",
        || {
            let mut logs = spawn_docker(p.socket(), &["logs", "-f", &name]);
            let lines = logs.lines();
            assert_eq!(
                lines.recv_timeout(Duration::from_secs(30)).ok().as_deref(),
                Some("hello")
            );
            let exec = spawn_docker(p.socket(), &["exec", "-i", &name, "cat"]);
            // A list held in the engine while it goes away.
            engine.inject(FaultRule::new(
                Some("GET"),
                "/containers/json",
                Fault::Delay(Duration::from_secs(60)),
            ));
            let list_sock = p.socket().to_owned();
            let list = std::thread::spawn(move || raw::get(&list_sock, "/containers/json?all=1"));
            assert!(
                eventually(Duration::from_secs(30), || p.inflight() >= 3),
                "logs, exec and the list are in flight: {}",
                p.inflight()
            );
            (logs, exec, list)
        },
    );

    step(
        "the engine goes away: streams end, the held list is a clean 502",
        || {
            drop(engine);
            // Every stream ends (the CLI exits) rather than hanging, and the list is a clean 502.
            for (what, child) in [("logs -f", &mut logs.child), ("exec -i", &mut exec.child)] {
                assert!(
                    eventually(Duration::from_secs(30), || child
                        .try_wait()
                        .ok()
                        .flatten()
                        .is_some()),
                    "{what} still running after the engine went away"
                );
            }
            let listed = list.join().expect("thread").expect("an answer");
            assert_eq!(listed.status, 502, "{}", listed.text());
            assert!(
                listed
                    .message()
                    .starts_with("sockproxy: upstream unavailable: "),
                "{}",
                listed.text()
            );
            assert_eq!(listed.header("content-type"), Some("application/json"));
        },
    );

    // Engine gone: a clean 502 that says why.
    step("engine gone: a clean 502, nothing left in flight", || {
        let r = raw::get(p.socket(), "/_ping").expect("answer");
        assert_eq!(r.status, 502);
        assert!(r.message().contains("cannot connect"), "{}", r.text());
        // Nothing of the proxy's own is left: every connection and stream has ended.
        assert!(
            eventually(Duration::from_secs(30), || p.inflight() == 0),
            "{} connections or streams left",
            p.inflight()
        );
    });

    // The engine comes back at the same socket: the proxy serves at once, no restart.
    step("the engine comes back: the proxy serves at once", || {
        let _engine = FakeEngine::start_at(&sock, Flavor::Debian2010).expect("engine again");
        let r = raw::get(p.socket(), "/_ping").expect("answer");
        assert_eq!(r.status, 200, "{}", r.text());
        let r = raw::get(p.socket(), "/containers/json?all=1").expect("answer");
        assert_eq!(r.status, 200, "{}", r.text());
    });
}

#[test]
fn a_silent_engine_and_garbage_are_clean_errors() {
    // An engine that accepts, reads and never answers.
    let dir = tempfile::Builder::new()
        .prefix("ef")
        .tempdir()
        .expect("dir");
    let sock = dir.path().join("silent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().take(16).flatten() {
            held.push(c);
        }
    });
    let p = StackProxy::start(&sock, "deer-flow-", false);
    // A request the proxy must inspect first: bounded by the inspect timeout, a 502 with a reason.
    let r = raw::request(
        p.socket(),
        "POST",
        "/containers/deer-flow-sandbox-a/stop",
        None,
    )
    .expect("answer");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.message().contains("no answer within"), "{}", r.text());

    // An engine that answers garbage.
    let garbage = dir.path().join("garbage.sock");
    let listener = std::os::unix::net::UnixListener::bind(&garbage).expect("bind");
    std::thread::spawn(move || {
        use std::io::Write;
        for mut c in listener.incoming().take(16).flatten() {
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(b"\x00\xffnot http at all\r\n\r\n");
        }
    });
    let p = StackProxy::start(&garbage, "deer-flow-", false);
    for target in [
        "/_ping",
        "/containers/json",
        "/containers/deer-flow-sandbox-a/json",
    ] {
        let r = raw::get(p.socket(), target).expect("answer");
        assert_eq!(r.status, 502, "{target}: {}", r.text());
        assert!(
            r.message().starts_with("sockproxy: upstream unavailable: "),
            "{}",
            r.text()
        );
    }
}
