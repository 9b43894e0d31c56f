//! The HTTP layer in front of the policy: heads hyper would refuse without a body (malformed,
//! too large, too many headers, bad framing) answered in dockerd's shape before they reach an
//! engine, the exact header limit, garbage, and slow, idle or surplus clients
//! (`--header-timeout`, `--max-connections`). The stand-in upstream is `offline`'s.

use sockproxy_tests::raw;
use sockproxy_tests::recorder::Recorder;
use sockproxy_tests::stack::StackProxy;

use crate::offline::{assert_refusal, engine};

/// The heads hyper would refuse itself (with a bare 400 or 431 and no body), each with the
/// status and reason the proxy answers instead.
fn http_layer_cases() -> Vec<(Vec<u8>, u16, &'static str)> {
    let big = format!(
        "GET /_ping HTTP/1.1\r\nHost: docker\r\nX-Big: {}\r\n\r\n",
        "a".repeat(300 * 1024)
    );
    let many = format!(
        "GET /_ping HTTP/1.1\r\n{}\r\n",
        (0..101)
            .map(|i| format!("X-{i}: 1\r\n"))
            .collect::<String>()
    );
    vec![
        (
            b"GET /a b c HTTP/1.1\r\nHost: d\r\n\r\n".to_vec(),
            400,
            "malformed request head",
        ),
        (
            b"GET /_ping\x01 HTTP/1.1\r\nHost: d\r\n\r\n".to_vec(),
            400,
            "malformed request head",
        ),
        (
            b"GET /_ping HTTP/2.0\r\nHost: d\r\n\r\n".to_vec(),
            400,
            "malformed request head",
        ),
        (
            b"GET /_ping HTTP/1.1\r\nBad Name: d\r\n\r\n".to_vec(),
            400,
            "malformed request head",
        ),
        (
            b"GET /_p\xffing HTTP/1.1\r\nHost: d\r\n\r\n".to_vec(),
            400,
            "malformed request head",
        ),
        (
            b"GET http://[::1/_ping HTTP/1.1\r\nHost: d\r\n\r\n".to_vec(),
            400,
            "malformed request target",
        ),
        (big.into_bytes(), 431, "request head too large"),
        (many.into_bytes(), 431, "too many headers"),
        (
            b"GET /_ping HTTP/1.1\nHost: d\n\n".to_vec(),
            400,
            "bare LF line ending",
        ),
        (
            b"POST /_ping HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab".to_vec(),
            400,
            "duplicate Content-Length",
        ),
        (
            b"POST /_ping HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec(),
            400,
            "Transfer-Encoding must end in chunked",
        ),
    ]
}

/// What hyper would refuse itself with a bare 400 or 431 and no body is refused before hyper
/// parses it, in dockerd's shape, on any request of a kept-alive connection; the requests before
/// it are answered as usual and nothing of it reaches the engine.
#[test]
fn http_layer_refusals_carry_the_json_body_on_any_request() {
    let up = Recorder::fixed("[]");
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    let ok: &[u8] = b"GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n";
    let cases = http_layer_cases();
    for (bad, status, why) in &cases {
        for before in [0, 2] {
            let mut stream = ok.repeat(before);
            stream.extend_from_slice(bad);
            let what = String::from_utf8_lossy(&bad[..bad.len().min(60)]).into_owned();
            let answers = raw::exchange(p.socket(), &stream).expect("answers");
            assert_eq!(answers.len(), before + 1, "{what} after {before}");
            for a in &answers[..before] {
                assert_eq!(a.status, 200, "{what}: {}", a.text());
            }
            let last = &answers[before];
            assert_refusal(last, *status, &format!("sockproxy: bad request: {why}"));
            assert_eq!(last.header("connection"), Some("close"), "{what}");
        }
    }
    let pings = up.requests().iter().filter(|r| *r == "GET /_ping").count();
    assert_eq!(
        up.requests().len(),
        pings,
        "only the good pings reach the engine"
    );
    assert_eq!(pings, 2 * cases.len());
}

/// A head with exactly as many headers as the limit allows is forwarded, not refused by the
/// proxy's scanner or by hyper behind it.
#[test]
fn a_head_with_exactly_the_header_limit_is_forwarded() {
    let up = Recorder::fixed("[]");
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    let head = format!(
        "GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n{}\r\n",
        (2..100)
            .map(|i| format!("X-{i}: 1\r\n"))
            .collect::<String>()
    );
    let r = raw::send(p.socket(), head.as_bytes()).expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.requests(), vec!["GET /_ping".to_owned()]);
}

#[test]
fn malformed_requests_get_400_and_nothing_is_forwarded() {
    let up = Recorder::fixed("[]");
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    let cases: &[&[u8]] = &[
        b"GET /containers//json HTTP/1.1\r\n",
        b"GET /containers/json/ HTTP/1.1\r\n",
        b"GET /containers/./json HTTP/1.1\r\n",
        b"POST /containers/deer-flow-sandbox-a/../x/stop HTTP/1.1\r\n",
        b"POST /containers/deer-flow-sandbox-a\\..\\x/stop HTTP/1.1\r\n",
        b"POST /containers/foo%2Fbar/stop HTTP/1.1\r\n",
        b"POST /containers/deer-flow-sandbox-%61/stop HTTP/1.1\r\n",
        b"GET /containers/json\x01 HTTP/1.1\r\n",
        b"GET /containers/a b/json HTTP/1.1\r\n",
        b"GET http://docker/containers/json HTTP/1.1\r\n",
        b"OPTIONS * HTTP/1.1\r\n",
        b"GET /containers/json?all=1&all=0 HTTP/1.1\r\n",
        b"GET /containers/json?filters=%7B%7D&filters=%7B%7D HTTP/1.1\r\n",
        b"POST /containers/create?name=deer-flow-sandbox-a&name=other HTTP/1.1\r\n",
        b"DELETE /containers/deer-flow-sandbox-a?force=1&force=0 HTTP/1.1\r\n",
        b"GET /containers/json?all=1;all=0 HTTP/1.1\r\n",
        b"GET /exec/not-hex/json HTTP/1.1\r\n",
    ];
    for case in cases {
        let mut req = case.to_vec();
        req.extend_from_slice(b"Host: docker\r\nConnection: close\r\n\r\n");
        let r = raw::send(p.socket(), &req).expect("answer");
        assert_eq!(
            r.status,
            400,
            "{:?} → {}",
            String::from_utf8_lossy(case),
            r.text()
        );
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert!(
            r.message().starts_with("sockproxy: bad request: "),
            "{}",
            r.text()
        );
    }
    let form = b"POST /containers/create?name=deer-flow-sandbox-a HTTP/1.1\r\nHost: docker\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 10\r\n\r\nname=other";
    assert_eq!(raw::send(p.socket(), form).expect("answer").status, 400);
    assert_eq!(
        up.requests(),
        Vec::<String>::new(),
        "nothing may reach the engine"
    );
}

#[test]
fn garbage_never_crashes_the_proxy() {
    let up = Recorder::fixed("[]");
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    let garbage: &[&[u8]] = &[
        b"\x00\x01\x02\r\n\r\n",
        b"GET\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET /_ping HTTP/1.1\r\nHost: docker\r\nContent-Length: x\r\n\r\n",
        b"GET /_ping HTTP/1.1\r\nBad Header\r\n\r\n",
        b"\r\n\r\n\r\n",
        &[b'A'; 20000],
    ];
    for g in garbage {
        if let Ok(r) = raw::send(p.socket(), g) {
            assert!(
                (400..500).contains(&r.status),
                "{:?}: {}",
                String::from_utf8_lossy(g),
                r.status
            );
        }
    }
    assert_eq!(
        raw::get(p.socket(), "/_ping").expect("still up").status,
        200
    );
    assert_eq!(up.requests(), ["GET /_ping"]);
}

/// A fake engine and a proxy in front of it whose `--header-timeout` is 1 s (an idle limit of
/// 2 s).
fn with_a_one_second_header_timeout() -> (sockproxy_tests::fake::FakeEngine, StackProxy) {
    let engine =
        sockproxy_tests::fake::FakeEngine::start(sockproxy_tests::fake::Flavor::Debian2010);
    let p = StackProxy::start_with(engine.socket(), "deer-flow-", false, |c| {
        c.header_timeout = std::time::Duration::from_secs(1);
    });
    (engine, p)
}

/// An idle kept-alive connection is closed after twice `--header-timeout`, while an answer that
/// streams for longer than that (an event stream) is left alone and still delivers.
#[test]
fn an_idle_kept_alive_connection_is_closed_and_a_long_stream_is_not() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let (engine, p) = with_a_one_second_header_timeout();
    let mut events = raw::Conn::open(p.socket(), b"GET /events HTTP/1.1\r\nHost: docker\r\n\r\n")
        .expect("events");
    assert_eq!(events.status, 200);
    let mut idle = std::os::unix::net::UnixStream::connect(p.socket()).expect("connect");
    idle.write_all(b"GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n")
        .expect("ping");
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = [0u8; 1024];
    let n = idle.read(&mut answer).expect("answered");
    assert!(
        answer[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer[..n])
    );
    let idle_from = Instant::now();
    let closed = idle.read(&mut answer).expect("closed, not timed out");
    let took = idle_from.elapsed();
    assert_eq!(closed, 0, "the proxy closes the idle connection");
    assert!(
        took >= Duration::from_millis(1900),
        "closed after {took:?}, before twice the header timeout"
    );
    // The event stream has been quiet for as long; it is still open and delivers.
    let body = br#"{"Image":"busybox","Cmd":["sleep","600"]}"#;
    let made = raw::request(
        engine.socket(),
        "POST",
        "/containers/create?name=deer-flow-sandbox-idle",
        Some(body),
    )
    .expect("create");
    assert_eq!(made.status, 201, "{}", made.text());
    let seen = events.read_until(Duration::from_secs(10), |b| {
        String::from_utf8_lossy(b).contains("deer-flow-sandbox-idle")
    });
    assert!(String::from_utf8_lossy(&seen).contains("deer-flow-sandbox-idle"));
}

/// The idle limit counts from a connection's latest answer: a client that sends a request
/// every 0.6 s keeps its connection for longer than the limit (twice a 1 s `--header-timeout`),
/// and loses it that long after its last answer.
#[test]
fn a_kept_alive_connection_in_use_is_closed_only_after_its_last_answer() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let (_engine, p) = with_a_one_second_header_timeout();
    let mut conn = std::os::unix::net::UnixStream::connect(p.socket()).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = [0u8; 1024];
    let first = Instant::now();
    for i in 0..6 {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(600));
        }
        conn.write_all(b"GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n")
            .unwrap_or_else(|e| panic!("ping {i} after {:?}: {e}", first.elapsed()));
        let n = conn.read(&mut answer).expect("answered");
        assert!(
            answer[..n].starts_with(b"HTTP/1.1 200"),
            "ping {i} after {:?}: {:?}",
            first.elapsed(),
            String::from_utf8_lossy(&answer[..n])
        );
    }
    assert!(
        first.elapsed() > Duration::from_secs(3),
        "in use for longer than the limit"
    );
    // The close is waited for, not timed from above: the read timeout (10 s) only keeps a
    // connection that is never closed from hanging the test (issue 41: no wall-clock upper
    // bound, which a loaded machine can overrun). A lower bound cannot flake that way.
    let idle_from = Instant::now();
    let closed = conn.read(&mut answer).expect("closed, not timed out");
    let took = idle_from.elapsed();
    assert_eq!(closed, 0, "the proxy closes the connection once idle");
    assert!(
        took >= Duration::from_millis(1900),
        "closed {took:?} after the last answer, before the idle limit counted from it"
    );
}

/// Slow clients: a head that never completes is answered 408 and cut off after
/// `--header-timeout`, and past
/// `--max-connections` a client is answered 503 in dockerd's shape instead of waiting.
#[test]
fn slow_clients_are_cut_off_and_extra_ones_answered_busy() {
    use std::io::{Read, Write};
    let up = engine("deer-flow-");
    let p = StackProxy::start_with(up.socket(), "deer-flow-", false, |c| {
        c.header_timeout = std::time::Duration::from_secs(1);
        c.max_connections = 2;
    });
    let slow = |partial: &[u8]| {
        let mut s = std::os::unix::net::UnixStream::connect(p.socket()).expect("connect");
        s.write_all(partial).expect("write");
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("timeout");
        s
    };
    // Two slow clients fill the proxy.
    let mut a = slow(b"GET /_ping HTTP/1.1\r\nHost: x\r\n");
    let mut b = slow(b"GET /_pi");
    let busy = raw::get(p.socket(), "/_ping").expect("answer");
    assert_refusal(
        &busy,
        503,
        "sockproxy: busy: too many connections (--max-connections)",
    );
    // Each slow client is answered and closed by the proxy (it does not wait for the client to
    // go), whether its request line was complete or not.
    for (what, s) in [("a whole request line", &mut a), ("half a line", &mut b)] {
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).expect("closed by the proxy");
        let answered = sockproxy_tests::raw::parse(&answer).expect("an answer");
        eprintln!("{what}: {}", answered.text());
        assert_refusal(
            &answered,
            408,
            "sockproxy: bad request: request head too slow",
        );
    }
    // Room again once they are gone.
    let mut ok = None;
    for _ in 0..50 {
        let r = raw::get(p.socket(), "/_ping").expect("answer");
        if r.status == 200 {
            ok = Some(r);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        ok.is_some(),
        "the proxy serves again after the slow clients"
    );
    assert!(up.requests().iter().all(|r| r.contains("_ping")));
}

/// A head with an `Upgrade` header but no `Connection: upgrade` is answered as a plain request,
/// and the connection then closes: the head scanner treats everything after such a head as a
/// tunnel, so a later head on it (here a bare-LF one and one with two `Content-Length`s) must
/// never reach the HTTP parser unjudged.
#[test]
fn a_request_with_an_upgrade_header_ends_its_connection_unless_upgraded() {
    let up = Recorder::fixed("[]");
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    let first: &[u8] = b"GET /_ping HTTP/1.1\r\nHost: docker\r\nUpgrade: foo\r\n\r\n";
    let laters: [&[u8]; 2] = [
        b"GET /version HTTP/1.1\nHost: d\n\n",
        b"POST /_ping HTTP/1.1\r\nHost: d\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    ];
    for later in laters {
        let mut stream = first.to_vec();
        stream.extend_from_slice(later);
        let answers = raw::exchange(p.socket(), &stream).expect("answers");
        assert_eq!(answers.len(), 1, "{:?}", String::from_utf8_lossy(later));
        assert_eq!(answers[0].status, 200, "{}", answers[0].text());
        assert_eq!(answers[0].header("connection"), Some("close"));
    }
    assert_eq!(up.requests(), ["GET /_ping", "GET /_ping"]);
}

/// A CONNECT is refused, and its connection then closes: the head scanner treats everything
/// after a CONNECT as tunnel bytes, so a later head on it (bare LF, two `Content-Length`s)
/// must never reach the HTTP parser unjudged. Found by review: it did, and the bare-LF
/// `GET /version` that is refused on its own was forwarded.
#[test]
fn a_connect_is_refused_and_ends_its_connection() {
    let up = Recorder::fixed("[]");
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    let firsts: [&[u8]; 2] = [
        b"CONNECT /containers/json HTTP/1.1\r\nHost: docker\r\n\r\n",
        b"CONNECT docker:2375 HTTP/1.1\r\nHost: docker\r\n\r\n",
    ];
    let laters: [&[u8]; 2] = [
        b"GET /version HTTP/1.1\nHost: d\n\n",
        b"POST /_ping HTTP/1.1\r\nHost: d\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    ];
    for first in firsts {
        for later in laters {
            let mut stream = first.to_vec();
            stream.extend_from_slice(later);
            let answers = raw::exchange(p.socket(), &stream).expect("answers");
            let what = String::from_utf8_lossy(&stream).into_owned();
            assert_eq!(answers.len(), 1, "{what}");
            assert!(
                [400, 403].contains(&answers[0].status),
                "{what}: {}",
                answers[0].text()
            );
            assert_eq!(answers[0].header("connection"), Some("close"), "{what}");
        }
    }
    assert!(up.requests().is_empty(), "{:?}", up.requests());
}
