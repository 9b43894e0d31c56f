//! Issue 48, point 1: what a key holder can count on when others can connect. Connections that
//! have not shown the key are capped per peer address and must send their head quickly, so
//! nobody starves the key holder of connections; a sandbox made through deer-flow's API is
//! never leased through `/v1/` (nor reaped or evicted because of one), and one `/v1/` leases is
//! not handed to deer-flow; a sandbox ID deer-flow mints at random serves only the user who made
//! it; and the metrics are served by `--metrics-listen`, not on the API's listener.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use lifecycle::decide::Mode;
use lifecycle::serve::gate::MAX_UNAUTHENTICATED_PER_PEER;
use lifecycle::serve::limits::Limits;
use serde_json::{json, Value};
use sockproxy_tests::engine::Engine;
use sockproxy_tests::provisioner::{ApiStack, KEY};

/// A TCP connection to `to` from the loopback address `from` (127.0.0.0/8 is all loopback).
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(format!("{from}:0").parse().expect("address"))
        .expect("bind the source address");
    let stream = socket.connect(to).await.expect("connect");
    let stream = stream.into_std().expect("std stream");
    stream.set_nonblocking(false).expect("blocking");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    stream
}

/// Sends one keep-alive request on `s` and reads its answer's status line and headers, leaving
/// the connection open; `None` when the connection is closed without an answer.
fn keep_alive(s: &mut TcpStream, path: &str, key: Option<&str>) -> Option<u16> {
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: x\r\n");
    if let Some(k) = key {
        head.push_str(&format!("X-API-Key: {k}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        // Every answer here carries a Content-Length and a short body.
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_owned)
                })
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return text.get(9..12).and_then(|c| c.parse().ok());
            }
        }
    }
}

/// Whether the server closed `s` (EOF or a reset) within the stream's read timeout.
fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(0))
        || matches!(s.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_connections_are_capped_per_peer_and_the_key_holder_is_served() {
    if !sockproxy_tests::bindroot::can_pin(
        "unauthenticated_connections_are_capped_per_peer_and_the_key_holder_is_served",
    ) {
        return;
    }
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    // A header timeout far longer than the head deadline of a connection without the key: what
    // cuts the silent one below is that deadline.
    let limits = Limits::new(120.0, 10.0, 256).expect("limits");
    let s = ApiStack::start_limited(&e, Mode::Open, Some(KEY), limits).await;
    let addr = s.addr;
    let attacker = tokio::task::spawn_blocking(move || {
        // Open routes answered, then kept alive: connections that never show the key.
        let rt = tokio::runtime::Handle::current();
        let mut held = Vec::new();
        for _ in 0..MAX_UNAUTHENTICATED_PER_PEER {
            let mut c = rt.block_on(connect_from("127.0.0.2", addr));
            assert_eq!(keep_alive(&mut c, "/health", None), Some(200));
            held.push(c);
        }
        // One more from that address: closed before any answer.
        let mut over = rt.block_on(connect_from("127.0.0.2", addr));
        let refused = keep_alive(&mut over, "/health", None);
        (held, refused)
    });
    let (held, refused) = attacker.await.expect("attacker");
    assert_eq!(
        refused, None,
        "the peer's next connection is closed unanswered"
    );
    // The key holder, from another address, opens more connections than the cap, each showing
    // the key first: none is capped, and all are served while the others are held.
    let holder = tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Handle::current();
        let mut mine = Vec::new();
        for _ in 0..MAX_UNAUTHENTICATED_PER_PEER + 4 {
            let mut c = rt.block_on(connect_from("127.0.0.3", addr));
            assert_eq!(keep_alive(&mut c, "/v1/sandboxes", Some(KEY)), Some(200));
            mine.push(c);
        }
        // Each one that showed the key serves on.
        for c in &mut mine {
            assert_eq!(keep_alive(c, "/api/sandboxes", Some(KEY)), Some(200));
        }
        mine.len()
    });
    assert_eq!(
        holder.await.expect("holder"),
        MAX_UNAUTHENTICATED_PER_PEER + 4
    );
    // A connection that sends half a head and no key is cut at the short head deadline, long
    // before the header timeout (120 s; the read below gives up after 30 s).
    let mut half = connect_from("127.0.0.4", addr).await;
    let cut = tokio::task::spawn_blocking(move || {
        half.write_all(b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n")
            .expect("half a head");
        closed(&mut half)
    });
    assert!(cut.await.expect("reader"), "cut at the head deadline");
    // Once the peer's connections go, it may connect again.
    drop(held);
    let again = tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Handle::current();
        for _ in 0..100 {
            let mut c = rt.block_on(connect_from("127.0.0.2", addr));
            if keep_alive(&mut c, "/health", None) == Some(200) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    });
    assert!(again.await.expect("reconnect"), "served again");
    let metrics = s.metrics().await;
    assert!(
        metrics.lines().any(|l| l
            .strip_prefix(
                r#"lifecycle_connections_refused_total{reason="unauthenticated_per_peer"} "#
            )
            .is_some_and(|n| n != "0")),
        "{metrics}"
    );
}

fn body(sandbox_id: &str, user: &str, thread: Option<&str>) -> Value {
    let mut b = json!({"sandbox_id": sandbox_id, "user_id": user});
    if let Some(t) = thread {
        b["thread_id"] = json!(t);
    }
    b
}

/// A `/v1/` acquire of a sandbox made through deer-flow's API is refused (409) and changes
/// nothing: no lease keeps it past deer-flow's `DELETE`, and it is never reaped on the idle
/// timer nor evicted by the cap afterwards. A sandbox `/v1/` made is not handed to deer-flow
/// (409): not while a lease holds it, nor warm (it has none of deer-flow's mounts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_two_apis_never_share_a_sandbox_that_one_of_them_holds() {
    if !sockproxy_tests::bindroot::can_pin(
        "the_two_apis_never_share_a_sandbox_that_one_of_them_holds",
    ) {
        return;
    }
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let s = ApiStack::start(&e, Mode::Open, Some(KEY)).await;
    let key = [("X-API-Key", KEY)];
    let (status, text) = s
        .create(&body("7d9ac0ff9b98cd06", "user-1", Some("thread-1")))
        .await;
    assert_eq!(status, 200, "{text}");
    let cid = s.inspect(&s.name("7d9ac0ff9b98cd06"))["Id"].clone();
    let acquire = json!({"user_id": "user-1", "thread_id": "thread-1", "holder": "run"});
    let (status, text) = s
        .call(
            "POST",
            "/v1/acquire",
            &key,
            Some(acquire.to_string().into_bytes()),
        )
        .await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("provisioner API"), "{text}");
    let (_, listed) = s.call("GET", "/v1/sandboxes", &key, None).await;
    let listed: Value = serde_json::from_str(&listed).expect("json");
    assert_eq!(listed["sandboxes"][0]["holder_count"], 0, "{listed}");
    s.clock.advance(Duration::from_secs(86_400));
    assert!(s.provider.reap().await.is_empty(), "never reaped");
    assert_eq!(
        s.inspect(&s.name("7d9ac0ff9b98cd06"))["Id"],
        cid,
        "still the same container"
    );
    // deer-flow's DELETE removes it at once: no lease defers it.
    let (status, text) = s
        .call("DELETE", "/api/sandboxes/7d9ac0ff9b98cd06", &key, None)
        .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(s.inspect(&s.name("7d9ac0ff9b98cd06")), Value::Null);
    // The other way round: held through /v1/, it is not deer-flow's to take.
    let (status, text) = s
        .call(
            "POST",
            "/v1/acquire",
            &key,
            Some(acquire.to_string().into_bytes()),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    let lease: Value = serde_json::from_str(&text).expect("json");
    let (status, text) = s
        .create(&body("7d9ac0ff9b98cd06", "user-1", Some("thread-1")))
        .await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("leased through /v1/"), "{text}");
    // Released (warm), it is still not deer-flow's: a /v1/ sandbox has none of the mounts
    // deer-flow's create asks for, so it is never answered as that sandbox; it stays /v1/'s
    // (warm, reaped on the idle timer).
    let release = format!(
        "/v1/leases/{}/release",
        lease["lease"].as_str().unwrap_or("")
    );
    assert_eq!(s.call("POST", &release, &key, None).await.0, 200);
    let (status, text) = s
        .create(&body("7d9ac0ff9b98cd06", "user-1", Some("thread-1")))
        .await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("other mounts"), "{text}");
    s.clock.advance(Duration::from_secs(86_400));
    assert_eq!(
        s.provider.reap().await,
        vec!["7d9ac0ff9b98cd06".to_owned()],
        "/v1/'s, reaped when idle"
    );
}

/// The cap never evicts a sandbox deer-flow made, also after a refused `/v1/` acquire of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioner_sandbox_is_never_evicted_after_a_v1_acquire_of_its_thread() {
    if !sockproxy_tests::bindroot::can_pin(
        "a_provisioner_sandbox_is_never_evicted_after_a_v1_acquire_of_its_thread",
    ) {
        return;
    }
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let s = ApiStack::start_capped(&e, KEY, 1).await;
    let key = [("X-API-Key", KEY)];
    let (status, text) = s
        .create(&body("7d9ac0ff9b98cd06", "user-1", Some("thread-1")))
        .await;
    assert_eq!(status, 200, "{text}");
    let acquire = |thread: &str| {
        Some(
            json!({"user_id": "user-1", "thread_id": thread, "holder": "run"})
                .to_string()
                .into_bytes(),
        )
    };
    assert_eq!(
        s.call("POST", "/v1/acquire", &key, acquire("thread-1"))
            .await
            .0,
        409
    );
    let (status, text) = s
        .call("POST", "/v1/acquire", &key, acquire("thread-2"))
        .await;
    assert_eq!(status, 503, "the cap holds, with nothing to evict: {text}");
    assert_ne!(s.inspect(&s.name("7d9ac0ff9b98cd06")), Value::Null);
}

/// deer-flow mints a random sandbox ID when a create names no thread: such an ID is the user's
/// who made it. Another user naming it is refused (409) and never gets its URL; the same user
/// gets the same sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_id_deer_flow_mints_serves_only_the_user_who_made_it() {
    if !sockproxy_tests::bindroot::can_pin(
        "a_sandbox_id_deer_flow_mints_serves_only_the_user_who_made_it",
    ) {
        return;
    }
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let s = ApiStack::start(&e, Mode::Open, Some(KEY)).await;
    let (status, made) = s.create(&body("a1b2c3d4", "alice", None)).await;
    assert_eq!(status, 200, "{made}");
    let made: Value = serde_json::from_str(&made).expect("json");
    let (status, text) = s.create(&body("a1b2c3d4", "mallory", None)).await;
    assert_eq!(status, 409, "{text}");
    assert!(
        !text.contains(made["sandbox_url"].as_str().unwrap_or("-")),
        "{text}"
    );
    let (status, again) = s.create(&body("a1b2c3d4", "alice", None)).await;
    assert_eq!(status, 200, "{again}");
    let again: Value = serde_json::from_str(&again).expect("json");
    assert_eq!(again["sandbox_url"], made["sandbox_url"]);
    let creates = sockproxy_tests::provisioner::engine_asked(&e)
        .iter()
        .filter(|l| l.contains("/containers/create"))
        .count();
    assert_eq!(creates, 1, "one container, alice's");
    let label = &s.inspect(&s.name("a1b2c3d4"))["Config"]["Labels"]["lifecycle.scope"];
    assert_eq!(
        label,
        &json!(sockproxy_tests::provisioner::hex(
            &<sha2::Sha256 as sha2::Digest>::digest(b"alice")
        )),
        "scoped to the user"
    );
}

/// The binary serves its metrics on `--metrics-listen` (Prometheus text, no key) and not on the
/// API's socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_metrics_on_metrics_listen_only() {
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let stack = sockproxy_tests::stack::StackProxy::start(&e.socket, "deer-flow-", false);
    let dir = tempfile::tempdir().expect("dir");
    let metrics = dir.path().join("metrics.sock");
    let serve = sockproxy_tests::serve_process::ServeProcess::start(
        stack.socket(),
        "deer-flow-",
        dir.path(),
        dir.path().join("api.sock"),
        &[],
        &["--metrics-listen", &metrics.display().to_string()],
    );
    let api = sockproxy_tests::raw::get(&serve.sock, "/metrics").expect("answer");
    assert_eq!(api.status, 404, "{}", api.text());
    let scrape =
        sockproxy_tests::metrics::Scrape::take(sockproxy_tests::metrics::At::Unix(&metrics));
    scrape.assert_types(&[
        ("lifecycle_pool_sandboxes", "gauge"),
        ("lifecycle_quarantine_records", "gauge"),
        ("lifecycle_acquires_abandoned_total", "counter"),
    ]);
    sockproxy_tests::metrics::promtool_check(
        "the_binary_serves_metrics_on_metrics_listen_only",
        &scrape.text,
    );
    let health = sockproxy_tests::raw::get(&metrics, "/healthz").expect("answer");
    assert_eq!(health.status, 200, "{}", health.text());
    drop(serve);
}
