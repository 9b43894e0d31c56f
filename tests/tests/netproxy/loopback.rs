//! netproxy on loopback with an injected resolver: what is allowed is carried (CONNECT and
//! absolute form, headers rewritten), what is not is refused before any lookup or dial;
//! rebinding and mixed answers, resolver timeouts, smuggling attempts and garbage, and every
//! request of a kept-alive connection decided again. Every address dialed is 127.0.0.1; refused
//! ones are never dialed. The scripted resolver, upstream and clients are shared with `limits`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use netproxy::proxy::{NetProxy, Policy};
use netproxy::resolve::{Lookup, Resolve};
use netproxy::rules::Rule;
use netproxy::server::{Background, Limits};

/// Answers from a script: each name has a list of answer sets, used in turn (the last repeats);
/// `hang` never answers. Counts every query.
#[derive(Debug, Default)]
pub struct Scripted {
    answers: Mutex<HashMap<String, Vec<Vec<IpAddr>>>>,
    queries: AtomicUsize,
}

impl Scripted {
    pub fn with(pairs: &[(&str, &[&[&str]])]) -> Arc<Self> {
        let s = Self::default();
        for (name, sets) in pairs {
            let sets = sets
                .iter()
                .map(|set| set.iter().map(|ip| ip.parse().expect("ip")).collect())
                .collect();
            s.answers
                .lock()
                .expect("lock")
                .insert((*name).to_owned(), sets);
        }
        Arc::new(s)
    }
}

impl Resolve for Scripted {
    fn lookup(&self, name: &str) -> Lookup {
        self.queries.fetch_add(1, Ordering::SeqCst);
        let answer = {
            let mut map = self.answers.lock().expect("lock");
            map.get_mut(name).map(|sets| {
                if sets.len() > 1 {
                    sets.remove(0)
                } else {
                    sets[0].clone()
                }
            })
        };
        Box::pin(async move {
            match answer {
                Some(a) => Ok(a),
                None => {
                    // "hang.test" and anything unknown: never answers.
                    std::future::pending::<()>().await;
                    Ok(vec![])
                }
            }
        })
    }
}

/// An upstream on 127.0.0.1 that answers every HTTP request with the request head it got
/// (and a header netproxy must strip), counting connections.
pub fn upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut s = stream;
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                if got.starts_with(b"PING") {
                    let _ = s.write_all(b"PONG");
                    return;
                }
                let head = String::from_utf8_lossy(&got).into_owned();
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nX-Netproxy-Error: forged\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{head}",
                    head.len()
                );
                let _ = s.write_all(resp.as_bytes());
            });
        }
    });
    (addr, accepted)
}

pub fn proxy(resolver: Arc<Scripted>, allow: &[&str], deny: &[&str], limits: Limits) -> Background {
    proxy_idle(resolver, allow, deny, limits, Duration::from_secs(300))
}

pub fn proxy_idle(
    resolver: Arc<Scripted>,
    allow: &[&str],
    deny: &[&str],
    limits: Limits,
    tunnel_idle: Duration,
) -> Background {
    let policy = Policy {
        allow: allow
            .iter()
            .map(|r| Rule::parse(r).expect("rule"))
            .collect(),
        deny: deny
            .iter()
            .map(|r| Rule::parse_deny(r).expect("rule"))
            .collect(),
        allow_cidrs: vec!["127.0.0.1/32".parse().expect("net")],
        own_networks: vec![],
        nat64_prefixes: vec![],
    };
    let np = NetProxy {
        dns_timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_secs(2),
        tunnel_idle,
        ..NetProxy::new(policy, resolver)
    };
    Background::start("127.0.0.1:0".parse().expect("addr"), Arc::new(np), limits)
        .expect("netproxy starts")
}

pub fn send(proxy: SocketAddr, raw: &[u8]) -> String {
    let mut s = connect(proxy);
    s.write_all(raw).expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn get(proxy: SocketAddr, url: &str, extra: &str) -> String {
    send(
        proxy,
        format!("GET {url} HTTP/1.1\r\nHost: ignored.test\r\nConnection: close\r\n{extra}\r\n")
            .as_bytes(),
    )
}

#[test]
fn allowed_names_are_carried_with_headers_rewritten() {
    let (up, _) = upstream();
    let r = Scripted::with(&[("allowed.test", &[&["127.0.0.1"]])]);
    let p = proxy(
        r.clone(),
        &[&format!("allowed.test:{}", up.port())],
        &[],
        Limits::default(),
    );
    let out = get(
        p.addr,
        &format!("http://Allowed.TEST.:{}/path?q=1", up.port()),
        "Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nX-Keep: yes\r\n",
    );
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let echoed = out.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    assert!(
        echoed.starts_with("GET /path?q=1 HTTP/1.1\r\n"),
        "origin form upstream: {echoed}"
    );
    assert!(
        echoed.contains(&format!("host: allowed.test:{}\r\n", up.port())),
        "Host rewritten: {echoed}"
    );
    assert!(
        !echoed.to_ascii_lowercase().contains("proxy-"),
        "no Proxy-* upstream: {echoed}"
    );
    assert!(echoed.contains("x-keep: yes"), "{echoed}");
    assert!(
        !out.to_ascii_lowercase().contains("x-netproxy-error"),
        "an upstream's error header is stripped"
    );

    // CONNECT: a raw tunnel to the vetted address.
    let mut s = connect_tunnel(p.addr, up.port());
    s.write_all(b"PING\r\n\r\n").expect("write");
    let mut pong = [0u8; 4];
    s.read_exact(&mut pong).expect("pong");
    assert_eq!(&pong, b"PONG");
    assert_eq!(
        r.queries.load(Ordering::SeqCst),
        2,
        "one lookup per request"
    );
}

#[test]
fn a_denied_name_is_never_looked_up_or_dialed() {
    let (up, accepted) = upstream();
    let r = Scripted::with(&[
        ("allowed.test", &[&["127.0.0.1"]]),
        ("secret.allowed.test", &[&["127.0.0.1"]]),
    ]);
    let p = proxy(
        r.clone(),
        &["allowed.test", &format!("*.allowed.test:{}", up.port())],
        &["secret.allowed.test"],
        Limits::default(),
    );
    for url in [
        format!("http://other.test:{}/", up.port()),
        format!("http://notallowed.test:{}/", up.port()),
        format!("http://secret.allowed.test:{}/", up.port()),
        format!("http://allowed.test:{}/", up.port()),
        format!("http://127.1:{}/", up.port()),
        format!("http://0x7f000001:{}/", up.port()),
    ] {
        let out = get(p.addr, &url, "");
        assert!(out.starts_with("HTTP/1.1 403"), "{url}: {out}");
        assert!(
            out.to_ascii_lowercase().contains("x-netproxy-error: "),
            "{out}"
        );
        let body: serde_json::Value =
            serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap_or("")).expect("JSON body");
        assert!(
            body["error"].is_string() && body["reason"].is_string() && body["host"].is_string(),
            "{body}"
        );
    }
    assert_eq!(
        r.queries.load(Ordering::SeqCst),
        0,
        "no lookup for a denied name"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "nothing dialed");
}

#[test]
fn rebinding_mixed_answers_and_timeouts_fail_closed() {
    let (up, accepted) = upstream();
    let port = up.port();
    let r = Scripted::with(&[
        // First answer vetted and dialed; the name then "rebinds" to another loopback address.
        ("rebind.test", &[&["127.0.0.1"], &["127.0.0.2"]]),
        ("mixed.test", &[&["127.0.0.1", "10.0.0.1"]]),
        ("mapped.test", &[&["::ffff:169.254.169.254"]]),
        ("nat64.test", &[&["64:ff9b::a9fe:a9fe"]]),
    ]);
    let rule = |n: &str| format!("{n}:{port}");
    let allow = [
        rule("rebind.test"),
        rule("mixed.test"),
        rule("mapped.test"),
        rule("nat64.test"),
        rule("hang.test"),
    ];
    let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
    let p = proxy(r.clone(), &allow, &[], Limits::default());
    let first = get(p.addr, &format!("http://rebind.test:{port}/"), "");
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let second = get(p.addr, &format!("http://rebind.test:{port}/"), "");
    assert!(
        second.contains("x-netproxy-error: special_address:loopback"),
        "{second}"
    );
    for (name, reason) in [
        ("mixed.test", "special_address:private"),
        ("mapped.test", "special_address:link_local"),
        ("nat64.test", "special_address:nat64"),
    ] {
        let out = get(p.addr, &format!("http://{name}:{port}/"), "");
        assert!(
            out.starts_with("HTTP/1.1 403") && out.contains(&format!("x-netproxy-error: {reason}")),
            "{name}: {out}"
        );
    }
    let out = get(p.addr, &format!("http://hang.test:{port}/"), "");
    assert!(
        out.starts_with("HTTP/1.1 504") && out.contains("x-netproxy-error: dns_timeout"),
        "{out}"
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "only the vetted first answer was ever dialed"
    );
}

#[test]
fn smuggling_and_malformed_requests_are_refused() {
    let (up, accepted) = upstream();
    let r = Scripted::with(&[("allowed.test", &[&["127.0.0.1"]])]);
    let p = proxy(
        r,
        &[&format!("allowed.test:{}", up.port())],
        &[],
        Limits::default(),
    );
    let port = up.port();
    let cases: Vec<(String, &str)> = vec![
        (format!("CONNECT allowed.test:{port} HTTP/1.1\r\nHost: evil.test:{port}\r\n\r\n"), "403"),
        (format!("GET http://allowed.test:{port}/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), "400"),
        (format!("POST http://allowed.test:{port}/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), "400"),
        (format!("POST http://allowed.test:{port}/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"), "400"),
        (format!("POST http://allowed.test:{port}/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"), "400"),
        (format!("GET https://allowed.test:{port}/ HTTP/1.1\r\nHost: a\r\n\r\n"), "400"),
        (format!("GET http://u:p@allowed.test:{port}/ HTTP/1.1\r\nHost: a\r\n\r\n"), "400"),
        (format!("CONNECT allowed.test:0{port} HTTP/1.1\r\n\r\n"), "400"),
        (format!("CONNECT [allowed.test]:{port} HTTP/1.1\r\n\r\n"), "400"),
        // A CONNECT has no body; hyper would eat the tunnel's first bytes as one.
        (format!("CONNECT allowed.test:{port} HTTP/1.1\r\nContent-Length: 5\r\n\r\nGET /x HTTP/1.1\r\n\r\n"), "400 Bad Request"),
        (format!("CONNECT allowed.test:{port} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), "400 Bad Request"),
        ("GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_owned(), "400"),
        ("\x00\x01garbage\r\n\r\n".to_owned(), "400"),
    ];
    for (raw, want) in cases {
        let out = send(p.addr, raw.as_bytes());
        assert!(
            out.starts_with(&format!("HTTP/1.1 {want}")),
            "{raw:?}: {out}"
        );
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "nothing malformed reached the upstream"
    );
    // Still serving.
    assert!(get(p.addr, &format!("http://allowed.test:{port}/"), "").starts_with("HTTP/1.1 200"));
}

#[test]
fn every_request_on_a_kept_alive_connection_is_decided_again() {
    let (up, _) = upstream();
    let r = Scripted::with(&[("allowed.test", &[&["127.0.0.1"]])]);
    let p = proxy(
        r,
        &[&format!("allowed.test:{}", up.port())],
        &[],
        Limits::default(),
    );
    let mut s = connect(p.addr);
    // First an allowed request (its upstream closes, the client connection stays), then a
    // denied one on the same client connection.
    write!(
        s,
        "GET http://allowed.test:{}/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
        up.port()
    )
    .expect("write");
    let first = read_one_response(&mut s);
    assert!(
        first.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&first)
    );
    write!(
        s,
        "GET http://denied.test:{}/ HTTP/1.1\r\nHost: denied.test\r\n\r\n",
        up.port()
    )
    .expect("write");
    let second = String::from_utf8_lossy(&read_one_response(&mut s)).into_owned();
    assert!(
        second.starts_with("HTTP/1.1 403") && second.contains("x-netproxy-error: not_allowed"),
        "{second}"
    );
    // Ambiguous framing is refused on any request of a connection, not just the first, even
    // in the forms hyper would quietly resolve (an identical repeated Content-Length).
    write!(
        s,
        "POST http://allowed.test:{}/ HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        up.port()
    )
    .expect("write");
    let mut third = String::new();
    let _ = s.read_to_string(&mut third);
    assert!(
        third.starts_with("HTTP/1.1 400") && third.contains("duplicate Content-Length"),
        "{third}"
    );

    let mut s = connect(p.addr);
    write!(
        s,
        "GET http://allowed.test:{}/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
        up.port()
    )
    .expect("write");
    assert!(read_one_response(&mut s).starts_with(b"HTTP/1.1 200"));
    write!(
        s,
        "POST http://allowed.test:{}/ HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        up.port()
    )
    .expect("write");
    let mut fourth = String::new();
    let _ = s.read_to_string(&mut fourth);
    assert!(
        fourth.starts_with("HTTP/1.1 400")
            && fourth.contains("Content-Length with Transfer-Encoding"),
        "{fourth}"
    );
}

/// A CONNECT tunnel to `allowed.test:{port}` through the proxy, its 200 read.
pub fn connect_tunnel(proxy: SocketAddr, port: u16) -> TcpStream {
    tunnel_to(proxy, "allowed.test", port)
}

/// A CONNECT tunnel to `{host}:{port}` through the proxy, its 200 read.
pub fn tunnel_to(proxy: SocketAddr, host: &str, port: u16) -> TcpStream {
    let mut s = connect(proxy);
    write!(
        s,
        "CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
    )
    .expect("write");
    let head = read_head(&mut s);
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

/// A client connection to the proxy with a read deadline, so a hang fails the test.
pub fn connect(proxy: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(proxy).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s
}

/// Reads a response head, byte by byte so nothing after it is consumed.
pub fn read_head(s: &mut TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).expect("head");
        head.push(b[0]);
    }
    head
}

/// Reads exactly one response with a Content-Length body, leaving the connection open.
fn read_one_response(s: &mut TcpStream) -> Vec<u8> {
    let mut got = read_head(s);
    let head = String::from_utf8_lossy(&got).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).expect("body");
    got.extend_from_slice(&body);
    got
}
