//! netproxy's metrics endpoint (`--metrics-listen`, docs/metrics.md) as a Prometheus scraper
//! and a health check see it: every family typed as documented, a refused CONNECT moving
//! exactly its own refusal series by one, a tunnel counted open and its bytes when it closes,
//! a resolver timeout counted (and `/healthz` still 200: the process serves), a connection
//! over the cap counted; and the program's flag. Every address dialed is 127.0.0.1; refused
//! names end in `.invalid` or are never answered.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use netproxy::metrics::{Exposed, Metrics};
use netproxy::proxy::{NetProxy, Policy};
use netproxy::rules::Rule;
use netproxy::server::{Background, Limits};
use sockproxy_tests::metrics::{get, promtool_check, At, Scrape};

use crate::loopback::{connect, read_head, tunnel_to, upstream, Scripted};
use sockproxy_tests::bounded::{OutputWithin, SHORT};

const FAMILIES: [(&str, &str); 11] = [
    ("netproxy_requests_total", "counter"),
    ("netproxy_refusals_total", "counter"),
    ("netproxy_dns_lookup_duration_seconds", "histogram"),
    ("netproxy_dns_lookups_total", "counter"),
    ("netproxy_tunnels_open", "gauge"),
    ("netproxy_tunnel_bytes_total", "counter"),
    ("netproxy_connections_open", "gauge"),
    ("netproxy_connections_refused_total", "counter"),
    ("netproxy_relay_connections_total", "counter"),
    ("netproxy_relay_connections_open", "gauge"),
    ("netproxy_relay_bytes_total", "counter"),
];

/// The metrics endpoint for `metrics` on 127.0.0.1, port chosen by the system, served on a
/// runtime of its own until the returned sender is dropped.
fn endpoint(metrics: Arc<Metrics>) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let at = scrape::Listen::Tcp("127.0.0.1:0".parse().expect("addr"));
            let listener = scrape::bind(&at, scrape::METRICS_MODE, None).expect("binds");
            tx.send(listener.local_tcp().expect("tcp")).expect("told");
            scrape::serve(listener, Arc::new(Exposed(metrics)), async {
                let _ = stopped.await;
            })
            .await;
        });
    });
    (rx.recv().expect("the endpoint's address"), stop)
}

fn proxy(allow: &[String], limits: Limits) -> (Background, Arc<NetProxy>) {
    let resolver = Scripted::with(&[("allowed.test", &[&["127.0.0.1"]])]);
    let policy = Policy {
        allow: allow
            .iter()
            .map(|r| Rule::parse(r).expect("rule"))
            .collect(),
        deny: vec![],
        allow_cidrs: vec!["127.0.0.1/32".parse().expect("net")],
        own_networks: vec![],
        nat64_prefixes: vec![],
    };
    let np = Arc::new(NetProxy {
        dns_timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_secs(2),
        ..NetProxy::new(policy, resolver)
    });
    let bg = Background::start("127.0.0.1:0".parse().expect("addr"), np.clone(), limits)
        .expect("netproxy starts");
    (bg, np)
}

fn wait_until(what: &str, at: At<'_>, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let start = Instant::now();
    loop {
        let s = Scrape::take(at);
        if done(&s) {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}:\n{}",
            s.text
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn refused(proxy: SocketAddr, host: &str) -> String {
    let mut s = connect(proxy);
    write!(s, "CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n").expect("write");
    String::from_utf8_lossy(&read_head(&mut s)).into_owned()
}

#[test]
fn tunnels_refusals_dns_and_health_are_counted() {
    let (up, _) = upstream();
    let allow = [
        format!("allowed.test:{}", up.port()),
        "hang.test:443".to_owned(),
    ];
    let (p, np) = proxy(&allow, Limits::default());
    let (addr, _stop) = endpoint(np.metrics.clone());
    let at = At::Tcp(addr);

    // An allowed tunnel: counted open while it is, its bytes once it closes.
    let mut t = tunnel_to(p.addr, "allowed.test", up.port());
    t.write_all(b"PING\r\n\r\n").expect("write");
    let mut pong = String::new();
    t.read_to_string(&mut pong).expect("read");
    assert_eq!(pong, "PONG");
    drop(t);
    let before = wait_until("the tunnel closes", at, |s| {
        s.value("netproxy_tunnels_open") == 0.0
            && s.value(r#"netproxy_tunnel_bytes_total{direction="down"}"#) == 4.0
    });
    assert_eq!(
        before.value(r#"netproxy_tunnel_bytes_total{direction="up"}"#),
        8.0
    );
    assert_eq!(
        before.value(r#"netproxy_requests_total{op="connect",outcome="carried"}"#),
        1.0
    );
    assert_eq!(
        before.value(r#"netproxy_dns_lookups_total{result="answered"}"#),
        1.0
    );
    assert_eq!(
        before.value("netproxy_dns_lookup_duration_seconds_count"),
        1.0
    );
    let h = get(at, "/healthz");
    assert_eq!(h.status, 200, "{}", h.text());
    assert_eq!(h.json()["status"], "ok");

    // A refused name: exactly its own refusal series, and no lookup.
    let head = refused(p.addr, "nowhere.invalid:443");
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let after = Scrape::take(at);
    after.assert_types(&FAMILIES);
    assert_eq!(
        after.moved(&before, "netproxy_refusals_total"),
        [(
            r#"netproxy_refusals_total{reason="not_allowed"}"#.to_owned(),
            1.0
        )],
        "{}",
        after.text
    );
    assert_eq!(
        after.moved(&before, "netproxy_requests_total"),
        [(
            r#"netproxy_requests_total{op="connect",outcome="refused"}"#.to_owned(),
            1.0
        )]
    );
    assert_eq!(after.moved(&before, "netproxy_dns_lookups_total"), []);
    promtool_check("tunnels_refusals_dns_and_health_are_counted", &after.text);

    // A resolver that does not answer: counted, and /healthz says so until one is answered.
    let head = refused(p.addr, "hang.test:443");
    assert!(head.starts_with("HTTP/1.1 504"), "{head}");
    let s = Scrape::take(at);
    assert_eq!(
        s.moved(&after, "netproxy_dns_lookups_total"),
        [(
            r#"netproxy_dns_lookups_total{result="timeout"}"#.to_owned(),
            1.0
        )]
    );
    assert_eq!(
        s.value(r#"netproxy_refusals_total{reason="dns_timeout"}"#),
        1.0
    );
    // Issue 50, finding 3: health is the process serving, not the last lookup; the resolver's
    // figures are in the body (it used to answer 503 `resolver_failing` here).
    let h = get(at, "/healthz");
    assert_eq!(h.status, 200, "{}", h.text());
    assert_eq!(h.json()["status"], "ok");
    assert!(
        h.json()["resolver_failed_secs_ago"].is_u64(),
        "{}",
        h.text()
    );
    drop(tunnel_to(p.addr, "allowed.test", up.port()));
    let h = get(at, "/healthz");
    assert_eq!(h.status, 200, "{}", h.text());
}

#[test]
fn a_connection_over_the_cap_is_counted_refused() {
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let (p, np) = proxy(&[], limits);
    let (addr, _stop) = endpoint(np.metrics.clone());
    let at = At::Tcp(addr);
    // A head begun and not finished holds the only connection.
    let mut held = connect(p.addr);
    held.write_all(b"GET http://allowed.test/ HTTP/1.1\r\n")
        .expect("write");
    let before = wait_until("the held connection is counted", at, |s| {
        s.value("netproxy_connections_open") == 1.0
    });
    let mut second = TcpStream::connect(p.addr).expect("connects");
    second
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = String::new();
    let _ = second.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    let after = Scrape::take(at);
    assert_eq!(
        after.moved(&before, "netproxy_connections_refused_total"),
        [(
            r#"netproxy_connections_refused_total{reason="connection_limit"}"#.to_owned(),
            1.0
        )]
    );
    assert_eq!(
        after.moved(&before, "netproxy_refusals_total"),
        [(
            r#"netproxy_refusals_total{reason="connection_limit"}"#.to_owned(),
            1.0
        )]
    );
    promtool_check("a_connection_over_the_cap_is_counted_refused", &after.text);
    drop(held);
    wait_until("the closed connection is let go", at, |s| {
        s.value("netproxy_connections_open") == 0.0
    });
}

/// The program's flag: a Unix path serves both routes; an address without tcp:// is refused
/// at start-up rather than becoming a file named after it.
#[test]
fn the_program_serves_its_metrics_listen_and_refuses_a_bare_address() {
    let bin = sockproxy_tests::bins::path("netproxy");
    let bad = Command::new(&bin)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:9101",
        ])
        .output_within(SHORT)
        .expect("runs");
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--metrics-listen") && err.contains("tcp://127.0.0.1:9101"),
        "{err}"
    );

    let dir = tempfile::tempdir().expect("dir");
    let m = dir.path().join("metrics.sock");
    let mut child = Command::new(&bin)
        .args(["--listen", "127.0.0.1:0", "--allow", "allowed.test"])
        .arg("--metrics-listen")
        .arg(&m)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("netproxy starts");
    let start = Instant::now();
    while !m.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "netproxy did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The metrics socket is bound just before the accept loop starts: /healthz is 200 once
    // it runs.
    let mut h = get(At::Unix(&m), "/healthz");
    while h.status != 200 && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
        h = get(At::Unix(&m), "/healthz");
    }
    let s = Scrape::take(At::Unix(&m));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(h.status, 200, "{}", h.text());
    // What is written before any request: every family but those of requests and refusals.
    s.assert_types(&FAMILIES[2..]);
}
