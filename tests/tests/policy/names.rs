//! The proxy's name map (issue 18): a request naming one of the stack's containers costs one
//! engine round trip once the proxy has seen it, and the map never pins the wrong container —
//! names reused, renamed or removed, through the proxy or behind its back, an event missed, the
//! engine restarted — and a remembered object is refused exactly as an inspected one would be.

use std::path::Path;
use std::time::{Duration, Instant};

use sockproxy_tests::engine::{each_engine, Cleanup, Engine, Fakes};
use sockproxy_tests::fake::{FakeEngine, Fault, FaultRule, Flavor};
use sockproxy_tests::raw::{self, RawResponse};
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

fn call(sock: &Path, method: &str, target: &str) -> RawResponse {
    raw::request(sock, method, target, None).expect("an answer")
}

/// Creates a container that sleeps, through `sock`; its full ID.
fn create(sock: &Path, name: &str, image: &str) -> String {
    let body = serde_json::json!({ "Image": image, "Cmd": ["sleep", "600"] }).to_string();
    let r = raw::request(
        sock,
        "POST",
        &format!("/v1.41/containers/create?name={name}"),
        Some(body.as_bytes()),
    )
    .expect("an answer");
    assert_eq!(r.status, 201, "create {name}: {}", r.text());
    r.json()["Id"].as_str().expect("an ID").to_owned()
}

fn ok(r: &RawResponse, what: &str) {
    assert!(
        (200..300).contains(&r.status),
        "{what}: {} {}",
        r.status,
        r.text()
    );
}

/// `Some(running)` for a container the engine holds, `None` when it has none by that name/ID.
fn running(engine: &Path, r: &str) -> Option<bool> {
    let a = call(engine, "GET", &format!("/containers/{r}/json"));
    (a.status == 200).then(|| a.json()["State"]["Running"].as_bool() == Some(true))
}

fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads `r` through the proxy until its name map holds `n` containers. An inspect whose
/// answer may predate an event still on its way is not remembered, so one read may not do.
fn remember(p: &StackProxy, r: &str, n: usize) {
    let start = Instant::now();
    loop {
        ok(
            &call(p.socket(), "GET", &format!("/v1.41/containers/{r}/json")),
            "inspect",
        );
        if p.remembered().0 == n {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the proxy never remembered {r}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_remembered_name_pins_with_one_engine_round_trip() {
    for map_on in [true, false] {
        let e = Engine::start_fake(Flavor::Debian2010);
        let fake = e.fake.as_ref().expect("a fake engine");
        let prefix = unique_prefix();
        let p = StackProxy::start_with(&e.socket, &prefix, false, |c| c.name_cache = map_on);
        if map_on {
            p.wait_names_live();
        }
        let name = format!("{prefix}sandbox-1");
        let id = create(p.socket(), &name, &e.image);
        if map_on {
            remember(&p, &name, 1);
        }
        // Once the proxy has seen it, by name or by full ID, only the request itself reaches
        // the engine, pinned to the full ID. `--no-name-cache` inspects every time.
        for (action, r) in [
            ("start", &name),
            ("stop?t=0", &name),
            ("start", &id),
            ("kill", &name),
        ] {
            fake.clear_requests();
            ok(
                &call(
                    p.socket(),
                    "POST",
                    &format!("/v1.41/containers/{r}/{action}"),
                ),
                action,
            );
            let forwarded = format!("POST /containers/{id}/{action}");
            let want = if map_on {
                vec![forwarded]
            } else {
                vec![format!("GET /containers/{r}/json"), forwarded]
            };
            assert_eq!(fake.request_lines(), want, "{action} {r}, map {map_on}");
        }
        assert_eq!(p.remembered().0, usize::from(map_on));
    }
}

#[test]
fn names_reused_renamed_and_removed_pin_the_right_container() {
    let test = "names_reused_renamed_and_removed_pin_the_right_container";
    each_engine(test, Fakes::Debian, |e| {
        let prefix = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let p = StackProxy::start(&e.socket, &prefix, false);
        p.wait_names_live();
        let [n1, n2, n3] =
            ["a", "b", "c"].map(|s| clean.container(&format!("{prefix}sandbox-{s}")));
        let proxied = |method: &str, r: &str, action: &str| {
            call(
                p.socket(),
                method,
                &format!("/v1.41/containers/{r}{action}"),
            )
        };
        let a = create(p.socket(), &n1, &e.image);
        ok(&proxied("POST", &n1, "/start"), "start a");
        remember(&p, &n1, 1);

        // Removed through the proxy, and the name taken again behind its back.
        ok(&proxied("DELETE", &n1, "?force=1"), "remove a");
        let b = create(&e.socket, &n1, &e.image);
        ok(&proxied("POST", &n1, "/start"), "start the new a");
        assert_eq!(running(&e.socket, &b), Some(true));
        assert_eq!(running(&e.socket, &a), None);

        // Renamed through the proxy: the old name is gone at once.
        ok(
            &proxied("POST", &n1, &format!("/rename?name={n2}")),
            "rename",
        );
        assert_eq!(proxied("POST", &n1, "/stop?t=0").status, 404);
        assert_eq!(
            running(&e.socket, &b),
            Some(true),
            "stopped by its old name"
        );
        ok(&proxied("POST", &n2, "/stop?t=0"), "stop by the new name");
        assert_eq!(running(&e.socket, &b), Some(false));

        // Renamed behind the proxy's back: its event makes the map forget.
        ok(&proxied("POST", &n2, "/start"), "start b");
        remember(&p, &n2, 1);
        let r = call(
            &e.socket,
            "POST",
            &format!("/containers/{b}/rename?name={n3}"),
        );
        ok(&r, "rename on the engine");
        until("the rename event reaches the proxy", || {
            p.remembered().0 == 0
        });
        assert_eq!(proxied("POST", &n2, "/stop?t=0").status, 404);
        assert_eq!(running(&e.socket, &b), Some(true));
        ok(&proxied("POST", &n3, "/stop?t=0"), "stop c");
        assert_eq!(running(&e.socket, &b), Some(false));
    });
}

#[test]
fn a_pin_whose_events_were_missed_is_inspected_afresh_once() {
    let e = Engine::start_fake(Flavor::Debian2010);
    let fake = e.fake.as_ref().expect("a fake engine");
    let prefix = unique_prefix();
    let p = StackProxy::start(&e.socket, &prefix, false);
    p.wait_names_live();
    let name = format!("{prefix}sandbox-1");
    let a = create(p.socket(), &name, &e.image);
    ok(
        &call(p.socket(), "POST", &format!("/containers/{name}/start")),
        "start",
    );
    remember(&p, &name, 1);
    // The engine removes the container and makes another under its name, and the proxy
    // hears of neither.
    fake.mute_events(true);
    ok(
        &call(&e.socket, "DELETE", &format!("/containers/{a}?force=1")),
        "rm",
    );
    let b = create(&e.socket, &name, &e.image);
    fake.mute_events(false);
    assert_eq!(p.remembered().0, 1, "the proxy still holds the old ID");
    fake.clear_requests();
    ok(
        &call(p.socket(), "POST", &format!("/containers/{name}/start")),
        "start the new one",
    );
    assert_eq!(
        fake.request_lines(),
        [
            format!("POST /containers/{a}/start"),
            format!("GET /containers/{name}/json"),
            format!("POST /containers/{b}/start"),
        ]
    );
    assert_eq!(running(&e.socket, &b), Some(true));

    // A 404 about the request itself (not the name): one fresh inspect finds the same ID, and
    // the engine's answer goes back; the request is not sent twice.
    fake.inject(FaultRule {
        times: Some(1),
        ..FaultRule::new(Some("POST"), "/restart", Fault::Status404)
    });
    fake.clear_requests();
    let r = call(
        p.socket(),
        "POST",
        &format!("/containers/{name}/restart?t=0"),
    );
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.message().contains("injected not found"), "{}", r.text());
    assert_eq!(
        fake.request_lines(),
        [
            format!("POST /containers/{b}/restart?t=0"),
            format!("GET /containers/{name}/json"),
        ]
    );
}

#[test]
fn the_map_is_emptied_while_the_engine_is_away() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sock = dir.path().join("engine.sock");
    let fake = FakeEngine::start_at(&sock, Flavor::Debian2010).expect("fake engine");
    let prefix = unique_prefix();
    let p = StackProxy::start(&sock, &prefix, false);
    p.wait_names_live();
    let name = format!("{prefix}sandbox-1");
    create(p.socket(), &name, "busybox");
    ok(
        &call(p.socket(), "POST", &format!("/containers/{name}/start")),
        "start",
    );
    remember(&p, &name, 1);
    drop(fake);
    let _ = std::fs::remove_file(&sock);
    until("the proxy notices the engine is gone", || !p.names_live());
    assert_eq!(p.remembered(), (0, 0));
    // A new engine knows nothing of the old IDs; the proxy inspects until it has heard.
    let fake = FakeEngine::start_at(&sock, Flavor::Debian2010).expect("fake engine again");
    p.wait_names_live();
    let id = create(p.socket(), &name, "busybox");
    fake.clear_requests();
    ok(
        &call(p.socket(), "POST", &format!("/containers/{name}/start")),
        "start",
    );
    assert_eq!(
        fake.request_lines(),
        [
            format!("GET /containers/{name}/json"),
            format!("POST /containers/{id}/start"),
        ]
    );
}

#[test]
fn a_remembered_container_is_refused_as_an_inspected_one() {
    let test = "a_remembered_container_is_refused_as_an_inspected_one";
    each_engine(test, Fakes::Debian, |e| {
        let prefix = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let p = StackProxy::start_with(&e.socket, &prefix, false, |c| {
            c.create_rules.require_stack_label = true;
        });
        // The same stack's proxy without the map: what an inspect decides.
        let q = StackProxy::start_with(&e.socket, &prefix, false, |c| {
            c.create_rules.require_stack_label = true;
            c.name_cache = false;
        });
        p.wait_names_live();
        // In the stack's names, but made on the engine without the stack's label.
        let name = clean.container(&format!("{prefix}sandbox-unlabelled"));
        let id = create(&e.socket, &name, &e.image);
        ok(
            &call(&e.socket, "POST", &format!("/containers/{id}/start")),
            "start",
        );
        // Reading it is refused as well (the label rule covers reads: the engine's not-found),
        // but the inspect behind the refusal makes the proxy remember it.
        let start = Instant::now();
        while p.remembered().0 != 1 {
            let r = call(p.socket(), "GET", &format!("/v1.41/containers/{name}/json"));
            assert_eq!(r.status, 404, "{}", r.text());
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the proxy never remembered {name}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // The stop by name and by full ID, and spellings no other test sends from the map: a
        // kill on the oldest version the proxy takes, a forced remove with no version, and a
        // rename on a middle version.
        let requests = [
            ("POST", format!("/v1.41/containers/{name}/stop?t=0")),
            ("POST", format!("/v1.41/containers/{id}/stop?t=0")),
            ("POST", format!("/v1.24/containers/{name}/kill?signal=KILL")),
            ("DELETE", format!("/containers/{id}?force=1")),
            (
                "POST",
                format!("/v1.30/containers/{name}/rename?name={name}-x"),
            ),
        ];
        for (method, path) in &requests {
            if let Some(f) = &e.fake {
                f.clear_requests();
            }
            let r = call(p.socket(), method, path);
            if let Some(f) = &e.fake {
                assert_eq!(
                    f.request_lines(),
                    Vec::<String>::new(),
                    "decided from the map"
                );
            }
            let inspected = call(q.socket(), method, path);
            assert!(r.status == 403 || r.status == 404, "{path}: {}", r.text());
            assert_eq!((r.status, r.text()), (inspected.status, inspected.text()));
        }
        let by_name = call(
            p.socket(),
            "POST",
            &format!("/v1.41/containers/{name}/stop?t=0"),
        );
        // Answered as a container nobody has (issue 37: a 403 told the stack it exists).
        assert_eq!(
            (by_name.status, by_name.message()),
            (404, format!("No such container: {name}")),
            "{}",
            by_name.text()
        );
        assert_eq!(running(&e.socket, &id), Some(true));
        // Still there under its own name: neither removed nor renamed.
        assert_eq!(running(&e.socket, &name), Some(true));
    });
}

/// dockerd 20.10 sends the event stream's head before it subscribes; the proxy's subscription
/// asks for the last seconds' events (`since`), so an event in that moment is replayed rather
/// than missed. Checked on the request the proxy sends to a stand-in engine.
#[test]
fn the_event_subscription_replays_the_moment_before_it() {
    use std::io::{BufRead, BufReader, Write};
    let dir = tempfile::tempdir().expect("temp dir");
    let sock = dir.path().join("engine.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    let (seen_tx, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(8) {
            let Ok(mut conn) = conn else { return };
            let mut line = String::new();
            let _ = BufReader::new(&conn).read_line(&mut line);
            let _ = seen_tx.send(line);
            let _ = conn.write_all(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let _p = StackProxy::start(&sock, "deer-flow-", false);
    let line = seen
        .recv_timeout(Duration::from_secs(20))
        .expect("the proxy subscribes");
    assert!(line.starts_with("GET /events?"), "{line}");
    let since: u64 = line
        .split(['?', '&', ' '])
        .find_map(|kv| kv.strip_prefix("since="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no since in {line}"));
    assert!(
        since < before + 1 && since + 10 > before,
        "since={since}, now={before}"
    );
}

/// An engine (or something in front of it) that answers the event subscription and ends the
/// stream at once is subscribed to again no faster than one that refuses it: the pause grows
/// (100 ms, 200 ms, ...) instead of starting from 100 ms after every empty stream.
#[test]
fn an_event_stream_that_ends_at_once_is_retried_with_a_growing_pause() {
    use std::io::{BufRead, BufReader, Write};
    let dir = tempfile::tempdir().expect("temp dir");
    let sock = dir.path().join("engine.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    let watched = Duration::from_secs(3);
    let counter = std::thread::spawn(move || {
        let (deadline, mut subscriptions) = (Instant::now() + watched, 0);
        while Instant::now() < deadline {
            let Ok((conn, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let _ = conn.set_nonblocking(false);
            let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
            let mut line = String::new();
            let _ = BufReader::new(&conn).read_line(&mut line);
            subscriptions += usize::from(line.starts_with("GET /events?"));
            let _ = (&conn).write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n",
            );
        }
        subscriptions
    });
    let _p = StackProxy::start(&sock, "deer-flow-", false);
    let subscriptions = counter.join().expect("the counting thread");
    // 100 + 200 + 400 + 800 ms of pauses fit in 3 s, so about five subscriptions; a pause
    // that started again from 100 ms after each empty stream gave about thirty.
    assert!(
        (2..=8).contains(&subscriptions),
        "{subscriptions} subscriptions in {watched:?}"
    );
}
