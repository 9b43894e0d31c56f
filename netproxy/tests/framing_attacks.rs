//! Issue 14's framing cases, against netproxy in process on loopback inside a network
//! namespace, with a recorder as the one allowed upstream: every ambiguous or malformed head is
//! refused in the proxy's own shape (status, `X-Netproxy-Error`, JSON body), nothing of it
//! reaches the upstream, and the limits do not depend on how the bytes arrive.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use common::logs::Logs;
use common::ns::{self, Recorder};
use common::scripted::Scripted;
use common::Netproxy;
use netproxy::policy::Policy;
use netproxy::proxy::NetProxy;
use netproxy::rules::Rule;
use netproxy::server::{Background, Limits};

fn proxy(up: SocketAddr, limits: Limits) -> Background {
    let policy = Policy {
        allow: vec![Rule::parse(&format!("allowed.test:{}", up.port())).expect("rule")],
        allow_cidrs: vec!["127.0.0.1/32".parse().expect("net")],
        ..Policy::default()
    };
    let r = Scripted::with(&[("allowed.test", &["127.0.0.1"])]);
    Background::start(
        "127.0.0.1:0".parse().expect("addr"),
        Arc::new(NetProxy::new(policy, r)),
        limits,
    )
    .expect("netproxy starts")
}

/// Writes `pieces` (each its own write), then reads the whole answer.
fn exchange(proxy: SocketAddr, pieces: &[&[u8]]) -> String {
    let mut s = TcpStream::connect(proxy).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.set_nodelay(true).expect("nodelay");
    for p in pieces {
        if s.write_all(p).is_err() {
            break;
        }
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The last answer in `out` is a refusal in the proxy's shape with this status and reason.
fn assert_refusal(out: &str, status: u16, reason: &str) {
    let last = out.rfind("HTTP/1.1 ").map_or(out, |at| &out[at..]);
    assert!(last.starts_with(&format!("HTTP/1.1 {status} ")), "{out}");
    let lower = last.to_ascii_lowercase();
    assert!(
        lower.contains(&format!(
            "x-netproxy-error: {}\r\n",
            reason.to_ascii_lowercase()
        )),
        "{out}"
    );
    let body: serde_json::Value =
        serde_json::from_str(last.split("\r\n\r\n").nth(1).unwrap_or("")).expect("a JSON body");
    assert_eq!(body["reason"], reason, "{out}");
    assert!(
        body["error"].is_string() && body["host"].is_string(),
        "{body}"
    );
}

/// Case 5: bare-LF heads and leading empty lines, first request or kept-alive, are refused
/// outright; the smuggled request never reaches the upstream.
#[test]
fn case05_bare_lf_and_leading_empty_lines_are_refused() {
    if !ns::enter("case05_bare_lf_and_leading_empty_lines_are_refused", &[]) {
        return;
    }
    let up = Recorder::bind("127.0.0.1:0");
    let p = proxy(up.addr, Limits::default());
    let port = up.addr.port();
    let ok = format!("GET http://allowed.test:{port}/ HTTP/1.1\r\nHost: a\r\n\r\n");
    let attacks = [
        (format!("POST http://allowed.test:{port}/ HTTP/1.1\nHost: a\nContent-Length: 3\nContent-Length: 3\n\nabc"), "bare LF line ending"),
        (format!("POST http://allowed.test:{port}/ HTTP/1.1\nContent-Length: 4\nTransfer-Encoding: chunked\n\n0\n\n"), "bare LF line ending"),
        (format!("\r\nPOST http://allowed.test:{port}/ HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), "leading empty line"),
        (format!("\r\n\r\nPOST http://allowed.test:{port}/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"), "leading empty line"),
    ];
    let mut allowed = 0;
    for (attack, reason) in &attacks {
        let out = exchange(p.addr, &[attack.as_bytes()]);
        assert_refusal(&out, 400, reason);
        // Kept alive: the allowed first request is answered (the recorder closes it, the
        // client connection stays), the attack after it refused.
        let out = exchange(p.addr, &[ok.as_bytes(), attack.as_bytes()]);
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        allowed += 1;
        assert_refusal(&out, 400, reason);
    }
    assert_eq!(
        up.hits(),
        allowed,
        "only the allowed requests reached the upstream"
    );
}

/// Case 7: refusals of heads hyper would have refused itself carry the header and JSON body.
#[test]
fn case07_every_head_refusal_carries_the_header_and_the_json_body() {
    if !ns::enter(
        "case07_every_head_refusal_carries_the_header_and_the_json_body",
        &[],
    ) {
        return;
    }
    let logs = Logs::capture();
    let up = Recorder::bind("127.0.0.1:0");
    let limits = Limits {
        header_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let p = proxy(up.addr, limits);
    let port = up.addr.port();
    let many: String = (0..101).map(|i| format!("X-{i}: 1\r\n")).collect();
    let cases: Vec<(String, u16, &str)> = vec![
        (
            format!("GET http://allowed.test:{port}/ HTTP/1.1\r\n{many}\r\n"),
            431,
            "too many headers",
        ),
        (
            format!(
                "GET http://allowed.test:{port}/ HTTP/1.1\r\nX: {}\r\n\r\n",
                "a".repeat(20_000)
            ),
            431,
            "request head too large",
        ),
        (
            format!("GET http://allowed.test:{port}/ HTTP/2.0\r\n\r\n"),
            400,
            "malformed request head",
        ),
        (
            format!("GET http://allowed.test:{port}/ HTTP/1.1\r\nBad Name: 1\r\n\r\n"),
            400,
            "malformed request head",
        ),
        (
            format!("GET http://allowed.test:{port}/ HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            400,
            "malformed Content-Length",
        ),
        (
            format!("POST http://allowed.test:{port}/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
            400,
            "Transfer-Encoding must end in chunked",
        ),
        (
            format!("GET http://allowed.test:{port}/ HTTP/1.1\r\nHost: a"),
            408,
            "request head too slow",
        ),
        (
            "\x00\x01garbage\r\n\r\n".to_owned(),
            400,
            "malformed request head",
        ),
    ];
    for (raw, status, reason) in &cases {
        let out = exchange(p.addr, &[raw.as_bytes()]);
        assert_refusal(&out, *status, reason);
    }
    assert_eq!(up.hits(), 0);
    // Each got its one decision line, in order, saying why (case 8: every head decided).
    let decisions = logs.with_message("decision");
    let said: Vec<(&str, &str, u64)> = decisions
        .iter()
        .map(|v| {
            (
                v["decision"].as_str().unwrap_or(""),
                v["reason"].as_str().unwrap_or(""),
                v["status"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let want: Vec<(&str, &str, u64)> = cases
        .iter()
        .map(|(_, status, reason)| ("deny", *reason, u64::from(*status)))
        .collect();
    assert_eq!(said, want);
    // The method is the client's as far as it could be read (issue 38), never the stand-in's.
    let methods: Vec<&str> = decisions
        .iter()
        .map(|v| v["method"].as_str().unwrap_or("?"))
        .collect();
    let sent: Vec<&str> = cases
        .iter()
        .map(|(raw, _, _)| match raw.split(' ').next() {
            Some(m) if m.starts_with('\0') => "??garbage",
            Some(m) => m,
            None => "",
        })
        .collect();
    assert_eq!(methods, sent, "{decisions:?}");
    assert_eq!(
        decisions[0]["raw_host"].as_str(),
        Some(format!("http://allowed.test:{port}/").as_str()),
        "and the target as sent"
    );
}

/// Case 11: one head-size limit however the bytes arrive: a head of exactly the limit is
/// carried and one byte more is refused, sent whole or a few bytes per write.
#[test]
fn case11_the_head_size_limit_does_not_depend_on_how_bytes_arrive() {
    if !ns::enter(
        "case11_the_head_size_limit_does_not_depend_on_how_bytes_arrive",
        &[],
    ) {
        return;
    }
    let up = Recorder::bind("127.0.0.1:0");
    let limits = Limits {
        max_header_bytes: 2000,
        ..Limits::default()
    };
    let p = proxy(up.addr, limits);
    let port = up.addr.port();
    let head = |len: usize| {
        let bare =
            format!("GET http://allowed.test:{port}/ HTTP/1.1\r\nConnection: close\r\nX: \r\n\r\n");
        format!(
            "GET http://allowed.test:{port}/ HTTP/1.1\r\nConnection: close\r\nX: {}\r\n\r\n",
            "a".repeat(len - bare.len())
        )
    };
    let (at, over) = (head(2000), head(2001));
    for piece in [usize::MAX, 1000, 7] {
        let split = |s: &str| -> Vec<Vec<u8>> {
            s.as_bytes()
                .chunks(piece.min(s.len()))
                .map(<[u8]>::to_vec)
                .collect()
        };
        let pieces = split(&at);
        let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
        let out = exchange(p.addr, &refs);
        assert!(out.starts_with("HTTP/1.1 200"), "{piece}: {out}");
        let pieces = split(&over);
        let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
        let out = exchange(p.addr, &refs);
        assert_refusal(&out, 431, "request head too large");
    }
    assert_eq!(up.hits(), 3);
}

/// Case 9: a client that half-closes right after a complete request head gets its answer and a
/// decision line, every time (20 tries; it used to be about half).
#[test]
fn case09_a_half_closed_client_gets_its_answer_and_a_decision() {
    if !ns::enter(
        "case09_a_half_closed_client_gets_its_answer_and_a_decision",
        &[],
    ) {
        return;
    }
    let up = Recorder::bind("127.0.0.1:0");
    let port = up.addr.port();
    let np = Netproxy::start(&["--allow", &format!("127.0.0.1:{port}")]);
    for i in 0..20 {
        let mut s = TcpStream::connect(("127.0.0.1", np.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(
            s,
            "GET http://127.0.0.1:{port}/{i} HTTP/1.1\r\nHost: a\r\n\r\n"
        )
        .expect("write");
        s.shutdown(Shutdown::Write).expect("half-close");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 200"), "try {i}: {out:?}");
        let line = common::wait_for(&np.lines, "\"decision\"");
        assert!(line.contains("\"decision\":\"allow\""), "{line}");
    }
    assert_eq!(up.hits(), 20);
}
