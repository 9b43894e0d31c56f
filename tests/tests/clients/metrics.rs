//! sockproxy's metrics endpoint (`--metrics-listen`, docs/metrics.md) as a Prometheus scraper
//! and a health check see it: every family typed as documented, a refusal moving exactly its
//! own decision series by one, engine latency and errors, the name map's hits and misses, the
//! connection cap; `/healthz` 200 with an engine and 503 without one; the program's flag.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use sockproxy_tests::bins;
use sockproxy_tests::bounded::{OutputWithin, SHORT};
use sockproxy_tests::fake::{FakeEngine, Flavor};
use sockproxy_tests::metrics::{get, promtool_check, At, Scrape};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

const FAMILIES: [(&str, &str); 8] = [
    ("sockproxy_decisions_total", "counter"),
    ("sockproxy_engine_request_duration_seconds", "histogram"),
    ("sockproxy_engine_errors_total", "counter"),
    ("sockproxy_name_map_lookups_total", "counter"),
    ("sockproxy_name_map_live", "gauge"),
    ("sockproxy_name_map_entries", "gauge"),
    ("sockproxy_connections_open", "gauge"),
    ("sockproxy_connections_refused_total", "counter"),
];

fn with_metrics(
    engine: &Path,
    at: &Path,
    adjust: impl FnOnce(&mut sockproxy::config::Config),
) -> StackProxy {
    let at = at.to_owned();
    StackProxy::start_with(engine, &unique_prefix(), false, move |c| {
        c.metrics_listen = Some(scrape::Listen::Unix(at));
        adjust(c);
    })
}

#[test]
fn a_refusal_moves_exactly_its_own_decision_series_and_healthz_says_ok() {
    let engine = FakeEngine::start(Flavor::Debian2010);
    let dir = tempfile::tempdir().expect("dir");
    let m = dir.path().join("metrics.sock");
    let p = with_metrics(engine.socket(), &m, |_| {});
    let at = At::Unix(&m);

    let ping = raw::get(p.socket(), "/_ping").expect("ping");
    assert_eq!(ping.status, 200);
    let before = Scrape::take(at);
    before.assert_types(&FAMILIES);
    assert_eq!(
        before.value(r#"sockproxy_decisions_total{op="system.ping",decision="allow",reason="always_allowed",rule="always_allowed"}"#),
        1.0,
        "{}",
        before.text
    );
    assert_eq!(
        before.value(r#"sockproxy_engine_request_duration_seconds_count{op="system.ping"}"#),
        1.0,
        "{}",
        before.text
    );

    let refused = raw::request(p.socket(), "POST", "/containers/foreign/stop", None).expect("stop");
    assert_eq!(refused.status, 403, "{}", refused.text());
    let after = Scrape::take(at);
    assert_eq!(
        after.moved(&before, "sockproxy_decisions_total"),
        [(
            r#"sockproxy_decisions_total{op="containers.stop",decision="deny",reason="out_of_scope",rule="out_of_scope"}"#
                .to_owned(),
            1.0
        )],
        "{}",
        after.text
    );
    // Refused before any engine round trip: no latency, no error recorded for it. The name
    // map's own subscription (`op="watch"`) is the proxy's background work, made again
    // whenever the engine ends it: not this request's.
    let mut trips = after.moved(&before, "sockproxy_engine_request_duration_seconds_count");
    trips.retain(|(s, _)| !s.contains(r#"op="watch""#));
    assert_eq!(trips, []);
    assert_eq!(after.moved(&before, "sockproxy_engine_errors_total"), []);
    // The client's connection is counted closed once the proxy has seen it end, a moment after
    // the answer: waited for (a hang guard bounds it), not read once.
    let mut open = Scrape::take(at);
    for _ in 0..500 {
        if open.value("sockproxy_connections_open") == 0.0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        open = Scrape::take(at);
    }
    assert_eq!(
        open.value("sockproxy_connections_open"),
        0.0,
        "{}",
        open.text
    );
    promtool_check(
        "a_refusal_moves_exactly_its_own_decision_series_and_healthz_says_ok",
        &after.text,
    );

    let h = get(at, "/healthz");
    assert_eq!(h.status, 200, "{}", h.text());
    let body = h.json();
    assert_eq!(body["status"], "ok", "{body}");
    assert!(
        body["engine_answered_secs_ago"]
            .as_u64()
            .is_some_and(|s| s <= 10),
        "{body}"
    );
}

#[test]
fn without_an_engine_errors_are_counted_by_kind_and_healthz_is_503() {
    let dir = tempfile::tempdir().expect("dir");
    let m = dir.path().join("metrics.sock");
    // Without the name map's event subscription, whose retries would count errors too.
    let p = with_metrics(&dir.path().join("no-engine.sock"), &m, |c| {
        c.name_cache = false
    });
    let at = At::Unix(&m);
    let ping = raw::get(p.socket(), "/_ping").expect("ping");
    assert_eq!(ping.status, 502);
    let s = Scrape::take(at);
    assert_eq!(
        s.moved(&Scrape::parse(""), "sockproxy_engine_errors_total"),
        [(
            r#"sockproxy_engine_errors_total{kind="connect"}"#.to_owned(),
            1.0
        )],
        "{}",
        s.text
    );
    assert_eq!(
        s.value(r#"sockproxy_decisions_total{op="system.ping",decision="deny",reason="upstream_unavailable",rule="upstream_unavailable"}"#),
        1.0,
        "{}",
        s.text
    );
    let h = get(at, "/healthz");
    assert_eq!(h.status, 503, "{}", h.text());
    let body = h.json();
    assert_eq!(body["status"], "engine_unreachable", "{body}");
    assert!(body["engine_answered_secs_ago"].is_null(), "{body}");
    // The health check's own ping was tried, and failed the same way.
    let s = Scrape::take(at);
    assert_eq!(
        s.value(r#"sockproxy_engine_errors_total{kind="connect"}"#),
        2.0,
        "{}",
        s.text
    );
}

#[test]
fn the_name_map_counts_hits_and_misses() {
    let engine = FakeEngine::start(Flavor::Debian2010);
    let dir = tempfile::tempdir().expect("dir");
    let m = dir.path().join("metrics.sock");
    let p = with_metrics(engine.socket(), &m, |_| {});
    let at = At::Unix(&m);
    p.wait_names_live();
    let name = format!("{}box", p.prefix);
    let made = raw::request(
        engine.socket(),
        "POST",
        &format!("/containers/create?name={name}"),
        Some(br#"{"Image":"busybox","Cmd":["sleep","600"]}"#),
    )
    .expect("create");
    assert_eq!(made.status, 201, "{}", made.text());
    let started = raw::request(
        engine.socket(),
        "POST",
        &format!("/containers/{name}/start"),
        None,
    )
    .expect("start");
    assert_eq!(started.status, 204, "{}", started.text());
    // The first `top` inspects (a miss) and remembers; a later one is a hit. (The create's
    // event may arrive in between and make one more miss.)
    let mut asked = 0.0;
    let mut s = Scrape::take(at);
    while s.value(r#"sockproxy_name_map_lookups_total{result="hit"}"#) == 0.0 {
        assert!(asked < 20.0, "no hit in {asked} requests:\n{}", s.text);
        let r = raw::get(p.socket(), &format!("/containers/{name}/top")).expect("top");
        assert_eq!(r.status, 200, "{}", r.text());
        asked += 1.0;
        s = Scrape::take(at);
    }
    let hits = s.value(r#"sockproxy_name_map_lookups_total{result="hit"}"#);
    let misses = s.value(r#"sockproxy_name_map_lookups_total{result="miss"}"#);
    assert!(misses >= 1.0, "{}", s.text);
    assert_eq!(hits + misses, asked, "{}", s.text);
    assert_eq!(s.value("sockproxy_name_map_live"), 1.0, "{}", s.text);
    assert_eq!(
        s.value(r#"sockproxy_name_map_entries{kind="container"}"#),
        1.0,
        "{}",
        s.text
    );
}

#[test]
fn a_connection_over_the_cap_is_counted_refused() {
    let engine = FakeEngine::start(Flavor::Debian2010);
    let dir = tempfile::tempdir().expect("dir");
    let m = dir.path().join("metrics.sock");
    let p = with_metrics(engine.socket(), &m, |c| c.max_connections = 1);
    let at = At::Unix(&m);
    // One connection held open (answered, kept alive) takes the only slot.
    let mut held = UnixStream::connect(p.socket()).expect("connects");
    held.write_all(b"GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n")
        .expect("writes");
    held.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut buf = [0u8; 512];
    let n = held.read(&mut buf).expect("answered");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let before = Scrape::take(at);
    assert_eq!(
        before.value("sockproxy_connections_open"),
        1.0,
        "{}",
        before.text
    );
    let busy = raw::get(p.socket(), "/_ping").expect("answered");
    assert_eq!(busy.status, 503, "{}", busy.text());
    let after = Scrape::take(at);
    assert_eq!(
        after.moved(&before, "sockproxy_connections_refused_total"),
        [("sockproxy_connections_refused_total".to_owned(), 1.0)]
    );
    assert_eq!(
        after.moved(&before, "sockproxy_decisions_total"),
        [(
            r#"sockproxy_decisions_total{op="connection",decision="deny",reason="busy",rule="busy"}"#
                .to_owned(),
            1.0
        )]
    );
    promtool_check("a_connection_over_the_cap_is_counted_refused", &after.text);
    drop(held);
    let start = Instant::now();
    while Scrape::take(at).value("sockproxy_connections_open") != 0.0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the closed connection stays counted open"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The program's flag: a Unix path serves both routes; an address without tcp:// is refused at
/// start-up (exit 2) rather than becoming a file named after it.
#[test]
fn the_program_serves_its_metrics_listen_and_refuses_a_bare_address() {
    let engine = FakeEngine::start(Flavor::Debian2010);
    let dir = tempfile::tempdir().expect("dir");
    let bad = Command::new(bins::sockproxy())
        .arg("--listen")
        .arg(dir.path().join("bad.sock"))
        .args([
            "--prefix",
            "deer-flow-",
            "--metrics-listen",
            "127.0.0.1:9101",
        ])
        .output_within(SHORT)
        .expect("runs");
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--metrics-listen") && err.contains("tcp://127.0.0.1:9101"),
        "{err}"
    );

    let sock = dir.path().join("stack.sock");
    let m = dir.path().join("metrics.sock");
    let mut child = bins::sockproxy_command(&sock, engine.socket(), "deer-flow-")
        .arg("--metrics-listen")
        .arg(&m)
        .spawn()
        .expect("sockproxy starts");
    let start = Instant::now();
    while !(sock.exists() && m.exists()) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "sockproxy did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ping = raw::get(&sock, "/_ping").expect("ping");
    let h = get(At::Unix(&m), "/healthz");
    let s = Scrape::take(At::Unix(&m));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(ping.status, 200, "{}", ping.text());
    assert_eq!(h.status, 200, "{}", h.text());
    s.assert_types(&FAMILIES);
    // The event subscription's round trip is the proxy's own.
    assert_eq!(
        s.value(r#"sockproxy_engine_request_duration_seconds_count{op="watch"}"#),
        1.0,
        "{}",
        s.text
    );
}
