//! Issue 14's dialing, timeout and audit cases, netproxy in process inside a network namespace
//! with a scripted resolver and its log lines captured: every vetted address is tried (Happy
//! Eyeballs) and the winner logged; an upstream that never answers or a client body that
//! stalls gets a 504 with its reason; the decision line is written before any byte goes
//! upstream and an end line follows whatever the client does.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::logs::Logs;
use common::ns::{self, Recorder};
use common::scripted::Scripted;
use netproxy::forward::Timeouts;
use netproxy::policy::Policy;
use netproxy::proxy::NetProxy;
use netproxy::rules::Rule;
use netproxy::server::{Background, Limits};

fn proxy(r: Arc<Scripted>, allow: &str, allow_cidr: &[&str], timeouts: Timeouts) -> Background {
    let policy = Policy {
        allow: vec![Rule::parse(allow).expect("rule")],
        allow_cidrs: allow_cidr.iter().map(|n| n.parse().expect("net")).collect(),
        ..Policy::default()
    };
    let np = NetProxy {
        timeouts,
        connect_timeout: Duration::from_secs(5),
        ..NetProxy::new(policy, r)
    };
    Background::start(
        "127.0.0.1:0".parse().expect("addr"),
        Arc::new(np),
        Limits::default(),
    )
    .expect("netproxy starts")
}

fn exchange(proxy: SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(proxy).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(raw).expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// An upstream that reads what it gets and never answers; connections are held 10 s at most.
/// `on_accept` runs for each connection as it is accepted.
fn silent(addr: &str, on_accept: impl Fn() + Send + 'static) -> SocketAddr {
    let l = TcpListener::bind(addr).expect("bind");
    let a = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in l.incoming().take(16).flatten() {
            on_accept();
            std::thread::spawn(move || {
                let mut s = s;
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                }
            });
        }
    });
    a
}

/// Case 10: a name answering `::1` and `127.0.0.1` whose upstream listens on IPv4 only is
/// served (IPv6 is refused, IPv4 tried at once), and so is one whose IPv6 has no route; the
/// address that won is logged.
#[test]
fn case10_every_vetted_address_is_tried_and_the_winner_logged() {
    if !ns::enter(
        "case10_every_vetted_address_is_tried_and_the_winner_logged",
        &[],
    ) {
        return;
    }
    let logs = Logs::capture();
    let up = Recorder::bind("127.0.0.1:0");
    let port = up.addr.port();
    let r = Scripted::with(&[
        ("dual.test", &["::1", "127.0.0.1"]),
        ("noroute.test", &["2001:db8::1", "127.0.0.1"]),
    ]);
    let p = proxy(
        r,
        &format!("*.test:{port}"),
        &["127.0.0.1/32", "::1/128", "2001:db8::/32"],
        Timeouts::default(),
    );
    for name in ["dual.test", "noroute.test"] {
        let out = exchange(
            p.addr,
            format!("GET http://{name}:{port}/ HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert!(
            out.starts_with("HTTP/1.1 200") && out.ends_with("reached"),
            "{name}: {out}"
        );
        let end = logs.wait_for("request ended", |v| v["host"] == name);
        assert_eq!(end["chosen"], format!("127.0.0.1:{port}"), "{end}");
        assert_eq!(end["ended"], "complete", "{end}");
    }
    // A tunnel too.
    let mut s = TcpStream::connect(p.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(s, "CONNECT dual.test:{port} HTTP/1.1\r\n\r\n").expect("write");
    let mut head = [0u8; 12];
    s.read_exact(&mut head).expect("answer");
    assert_eq!(&head, b"HTTP/1.1 200");
    drop(s);
    let closed = logs.wait_for("tunnel closed", |v| v["host"] == "dual.test");
    assert_eq!(closed["chosen"], format!("127.0.0.1:{port}"), "{closed}");
    assert_eq!(up.hits(), 3);
}

/// Case 6: an upstream that never answers, a client body that stalls, and an exchange that
/// runs too long each end in a 504 with their reason.
#[test]
fn case06_stalled_upstreams_and_bodies_get_504_with_a_reason() {
    if !ns::enter(
        "case06_stalled_upstreams_and_bodies_get_504_with_a_reason",
        &[],
    ) {
        return;
    }
    let up = silent("127.0.0.1:0", || {});
    let port = up.port();
    let r = Scripted::with(&[("quiet.test", &["127.0.0.1"])]);
    let rule = format!("quiet.test:{port}");
    let short = Duration::from_millis(300);
    let long = Duration::from_secs(30);
    let get = format!("GET http://quiet.test:{port}/ HTTP/1.1\r\nConnection: close\r\n\r\n");
    let cases = [
        (
            Timeouts { body_idle: long, response_head: short, request: long },
            get.clone(),
            "upstream_response_timeout",
        ),
        (
            Timeouts { body_idle: short, response_head: long, request: long },
            format!("POST http://quiet.test:{port}/ HTTP/1.1\r\nContent-Length: 10\r\nConnection: close\r\n\r\nab"),
            "request_body_timeout",
        ),
        (
            Timeouts { body_idle: long, response_head: long, request: short },
            get,
            "request_timeout",
        ),
    ];
    for (timeouts, raw, reason) in cases {
        let p = proxy(r.clone(), &rule, &["127.0.0.1/32"], timeouts);
        let mut s = TcpStream::connect(p.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(raw.as_bytes()).expect("write");
        // Read the answer with the client's side still open: a stalled body stays stalled.
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&out).contains("}") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        let out = String::from_utf8_lossy(&out).into_owned();
        assert!(out.starts_with("HTTP/1.1 504"), "{reason}: {out}");
        assert!(
            out.to_ascii_lowercase()
                .contains(&format!("x-netproxy-error: {reason}\r\n")),
            "{out}"
        );
    }
}

/// Case 8: the decision line is written before the upstream gets a byte; a client that sends
/// its body and leaves still produces the end line, with the bytes that went up.
#[test]
fn case08_the_decision_is_logged_before_any_byte_goes_upstream() {
    if !ns::enter(
        "case08_the_decision_is_logged_before_any_byte_goes_upstream",
        &[],
    ) {
        return;
    }
    let logs = Logs::capture();
    let decided_first = Arc::new(AtomicBool::new(false));
    let (seen, flag) = (logs.clone(), decided_first.clone());
    let up = silent("127.0.0.1:0", move || {
        let decided = seen
            .with_message("decision")
            .iter()
            .any(|v| v["host"] == "post.test" && v["decision"] == "allow");
        flag.store(decided, Ordering::SeqCst);
    });
    let port = up.port();
    let r = Scripted::with(&[("post.test", &["127.0.0.1"])]);
    let timeouts = Timeouts {
        response_head: Duration::from_millis(500),
        ..Timeouts::default()
    };
    let p = proxy(r, &format!("post.test:{port}"), &["127.0.0.1/32"], timeouts);
    let mut s = TcpStream::connect(p.addr).expect("connect");
    write!(
        s,
        "POST http://post.test:{port}/ HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
    )
    .expect("write");
    // The client leaves once the request is out, before any answer.
    logs.wait_for("decision", |v| v["host"] == "post.test");
    drop(s);
    let end = logs.wait_for("request ended", |v| v["host"] == "post.test");
    assert!(
        decided_first.load(Ordering::SeqCst),
        "the decision line was there when the upstream accepted"
    );
    assert_eq!(end["bytes_up"], 5, "{end}");
    assert_eq!(end["chosen"], format!("127.0.0.1:{port}"), "{end}");
    let decisions = logs.with_message("decision");
    assert_eq!(
        decisions.len(),
        1,
        "one decision per request: {decisions:?}"
    );
}

/// Case 8: a client that resets its connection right after a complete head still gets its
/// request decided and logged (the lookup here never answers: the decision is the DNS
/// timeout's refusal, made after the client is long gone).
#[test]
fn case08_a_reset_after_the_head_still_gets_a_decision() {
    if !ns::enter("case08_a_reset_after_the_head_still_gets_a_decision", &[]) {
        return;
    }
    let logs = Logs::capture();
    let r = Scripted::with(&[]);
    let policy = Policy {
        allow: vec![Rule::parse("hang.test:80").expect("rule")],
        ..Policy::default()
    };
    let np = NetProxy {
        dns_timeout: Duration::from_millis(300),
        ..NetProxy::new(policy, r.clone())
    };
    let p = Background::start(
        "127.0.0.1:0".parse().expect("addr"),
        Arc::new(np),
        Limits::default(),
    )
    .expect("netproxy starts");
    let mut s = TcpStream::connect(p.addr).expect("connect");
    s.write_all(b"GET http://hang.test/ HTTP/1.1\r\nHost: hang.test\r\n\r\n")
        .expect("write");
    // Wait until the head is being decided (the lookup was asked), then reset.
    for _ in 0..500 {
        if r.queries() > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(r.queries(), 1, "the head reached the pipeline");
    nix::sys::socket::setsockopt(
        &s,
        nix::sys::socket::sockopt::Linger,
        &nix::libc::linger {
            l_onoff: 1,
            l_linger: 0,
        },
    )
    .expect("linger 0");
    drop(s);
    let d = logs.wait_for("decision", |v| v["host"] == "hang.test");
    assert_eq!(
        (d["decision"].as_str(), d["reason"].as_str()),
        (Some("deny"), Some("dns_timeout")),
        "{d}"
    );
}
