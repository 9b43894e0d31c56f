//! Issue 38's races and budgets, each in its own network namespace (`unshare -n`, only `lo`):
//! a reload during a CONNECT's lookup and during a streaming answer (findings 1 and 5), the
//! dial budget against blackholed addresses (finding 3), and the time limits on a client that
//! never reads (finding 4). Names come from in-test resolvers (only `.test` names), never DNS.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::http_get;
use common::ns::{self, Recorder};
use common::scripted::Scripted;
use netproxy::proxy::NetProxy;
use netproxy::server::{Background, Limits};

fn refused_with(out: &str, status: &str, reason: &str) -> bool {
    out.starts_with(&format!("HTTP/1.1 {status}"))
        && out
            .to_ascii_lowercase()
            .contains(&format!("x-netproxy-error: {reason}\r\n"))
}

fn get(p: SocketAddr, url: &str) -> String {
    http_get(p.port(), url)
}

/// A resolver whose answer waits until the test releases it; says when it has been asked.
#[derive(Debug)]
struct Gated {
    answer: std::net::IpAddr,
    asked: std::sync::Mutex<std::sync::mpsc::Sender<()>>,
    release: Arc<tokio::sync::Notify>,
}

impl netproxy::resolve::Resolve for Gated {
    fn lookup(&self, _name: &str) -> netproxy::resolve::Lookup {
        let _ = self.asked.lock().expect("lock").send(());
        let (answer, release) = (self.answer, self.release.clone());
        Box::pin(async move {
            release.notified().await;
            Ok(vec![answer])
        })
    }
}

fn allow_policy(rules: &[String]) -> netproxy::policy::Policy {
    netproxy::policy::Policy {
        allow: rules
            .iter()
            .map(|r| netproxy::rules::Rule::parse(r).expect("rule"))
            .collect(),
        allow_cidrs: vec!["127.0.0.1/32".parse().expect("net")],
        ..Default::default()
    }
}

/// Finding 1: a reload that lands while a CONNECT's lookup is pending is not missed: the
/// name is decided again on the new policy once the answer comes, so the tunnel is never
/// opened and nothing is dialed.
#[test]
fn f1_a_reload_during_the_lookup_gets_no_tunnel() {
    use std::io::{Read, Write};
    if !ns::enter("f1_a_reload_during_the_lookup_gets_no_tunnel", &[]) {
        return;
    }
    let logs = common::logs::Logs::capture();
    let up = Recorder::bind("127.0.0.1:0");
    let port = up.addr.port();
    let (asked_tx, asked) = std::sync::mpsc::channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let r = Arc::new(Gated {
        answer: "127.0.0.1".parse().expect("ip"),
        asked: std::sync::Mutex::new(asked_tx),
        release: release.clone(),
    });
    let np = Arc::new(NetProxy::new(
        allow_policy(&[format!("slow.test:{port}"), format!("kept.test:{port}")]),
        r,
    ));
    let p = Background::start(
        "127.0.0.1:0".parse().expect("addr"),
        np.clone(),
        Limits::default(),
    )
    .expect("netproxy starts");
    let mut s = std::net::TcpStream::connect(p.addr).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "CONNECT slow.test:{port} HTTP/1.1\r\nHost: slow.test:{port}\r\n\r\n"
    )
    .expect("write");
    asked
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the lookup started");
    // The reload (what SIGHUP does in the binary) lands while the lookup is pending.
    np.set_policy(allow_policy(&[format!("kept.test:{port}")]));
    release.notify_one();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out);
    assert!(refused_with(&out, "403", "not_allowed"), "{out}");
    assert_eq!(up.hits(), 0, "nothing was dialed");
    let d = logs.wait_for("decision", |_| true);
    assert_eq!(
        (d["decision"].as_str(), d["reason"].as_str()),
        (Some("deny"), Some("not_allowed")),
        "the decision line is the new policy's: {d}"
    );
    assert!(logs.with_message("tunnel closed").is_empty());
}

/// An upstream that answers every request with a chunked body that never ends (a chunk
/// every 20 ms, 1,000 at most); `ended` is set when its client goes away.
fn streaming(ended: Arc<std::sync::atomic::AtomicBool>) -> SocketAddr {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in l.incoming().take(4).flatten() {
            let ended = ended.clone();
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
                for _ in 0..1000 {
                    if s.write_all(b"5\r\nchunk\r\n").is_err() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                ended.store(true, std::sync::atomic::Ordering::SeqCst);
            });
        }
    });
    addr
}

/// Finding 5: a reload cuts an absolute-form answer already streaming from a host the new
/// policy refuses, with one end line `ended=revoked`; a new request to it gets 403.
#[test]
fn f5_a_reload_cuts_a_streaming_answer() {
    use std::io::{Read, Write};
    if !ns::enter("f5_a_reload_cuts_a_streaming_answer", &[]) {
        return;
    }
    let logs = common::logs::Logs::capture();
    let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let port = streaming(ended.clone()).port();
    let r = Scripted::with(&[("stream.test", &["127.0.0.1"])]);
    let np = Arc::new(NetProxy::new(
        allow_policy(&[format!("stream.test:{port}")]),
        r,
    ));
    let p = Background::start(
        "127.0.0.1:0".parse().expect("addr"),
        np.clone(),
        Limits::default(),
    )
    .expect("netproxy starts");
    let mut s = std::net::TcpStream::connect(p.addr).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET http://stream.test:{port}/ HTTP/1.1\r\nHost: stream.test\r\n\r\n"
    )
    .expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("chunk") {
        let n = s.read(&mut buf).expect("the answer streams");
        assert!(n > 0, "ended early");
        got.extend_from_slice(&buf[..n]);
    }
    np.set_policy(allow_policy(&[]));
    // The answer ends (EOF or reset), not the 10 s read timeout.
    let cut = loop {
        match s.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(_) => continue,
            Err(e) => break Err(e),
        }
    };
    assert!(
        cut.as_ref().map_or_else(
            |e| e.kind() != std::io::ErrorKind::WouldBlock
                && e.kind() != std::io::ErrorKind::TimedOut,
            |()| true
        ),
        "{cut:?}"
    );
    let end = logs.wait_for("request ended", |_| true);
    assert_eq!(end["ended"].as_str(), Some("revoked"), "{end}");
    assert_eq!(logs.with_message("request ended").len(), 1);
    let out = get(p.addr, &format!("http://stream.test:{port}/"));
    assert!(refused_with(&out, "403", "not_allowed"), "{out}");
    // The upstream connection was closed too (its writes fail within 1,000 chunks).
    for _ in 0..1000 {
        if ended.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        ended.load(std::sync::atomic::Ordering::SeqCst),
        "upstream let go"
    );
}

/// Upstream connection attempts now in SYN_SENT towards 10.200.0.0/24 (the blackhole of
/// `f3_…`), from `/proc/net/tcp` of this namespace.
fn connecting_to_blackhole() -> usize {
    let tcp = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    tcp.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // rem_address is little-endian hex: 10.200.0.x reads xx00C80A.
            f.len() > 3 && f[3] == "02" && f[2].get(2..8) == Some("00C80A")
        })
        .count()
}

/// A client connection from `source` (another client IP on lo) to `to`.
fn connect_from(source: &str, to: SocketAddr) -> std::net::TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let s = rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4().expect("socket");
        sock.bind(format!("{source}:0").parse().expect("addr"))
            .expect("bind");
        sock.connect(to).await.expect("connect")
    });
    let s = s.into_std().expect("std");
    s.set_nonblocking(false).expect("blocking");
    s
}

/// Finding 3: 64 CONNECTs to a name with 59 blackholed addresses keep at most
/// `--max-dials-per-client` (8) upstream sockets connecting at any moment, and a second
/// client is served meanwhile.
#[test]
fn f3_dials_per_client_are_bounded_and_another_client_is_served() {
    use std::io::{Read, Write};
    // The blackhole: 10.200.0.0/24 routed out of a veth whose peer has no address, with a
    // permanent neighbour entry per address, so SYNs leave and nothing ever answers (no ARP
    // failure ends the attempts early).
    let mut setup: Vec<String> = [
        "link add bh0 type veth peer name bh1",
        "link set bh0 up",
        "link set bh1 up",
        "addr add 10.201.0.1/32 dev bh0",
        "route add 10.200.0.0/24 dev bh0 src 10.201.0.1",
    ]
    .map(str::to_owned)
    .to_vec();
    setup.extend(
        (1..=59).map(|i| {
            format!("neigh add 10.200.0.{i} lladdr 02:00:00:00:00:01 dev bh0 nud permanent")
        }),
    );
    let setup: Vec<&str> = setup.iter().map(String::as_str).collect();
    if !ns::enter(
        "f3_dials_per_client_are_bounded_and_another_client_is_served",
        &setup,
    ) {
        return;
    }
    let up = Recorder::bind("127.0.0.1:0");
    let port = up.addr.port();
    let blackholed: Vec<String> = (1..=59).map(|i| format!("10.200.0.{i}")).collect();
    let refs: Vec<&str> = blackholed.iter().map(String::as_str).collect();
    let r = Scripted::with(&[("many.test", &refs), ("ok.test", &["127.0.0.1"])]);
    let policy = netproxy::policy::Policy {
        allow: vec![
            netproxy::rules::Rule::parse("many.test:443").expect("rule"),
            netproxy::rules::Rule::parse(&format!("ok.test:{port}")).expect("rule"),
        ],
        allow_cidrs: vec![
            "10.200.0.0/24".parse().expect("net"),
            "127.0.0.1/32".parse().expect("net"),
        ],
        ..Default::default()
    };
    let np = Arc::new(NetProxy {
        connect_timeout: std::time::Duration::from_secs(3),
        ..NetProxy::new(policy, r)
    });
    let p = Background::start(
        "127.0.0.1:0".parse().expect("addr"),
        np.clone(),
        Limits::default(),
    )
    .expect("netproxy starts");
    let flood: Vec<std::net::TcpStream> = (0..64)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(p.addr).expect("connect");
            s.set_read_timeout(Some(std::time::Duration::from_secs(15)))
                .expect("timeout");
            s.write_all(b"CONNECT many.test:443 HTTP/1.1\r\nHost: many.test:443\r\n\r\n")
                .expect("write");
            s
        })
        .collect();
    let client = "127.0.0.1".parse().expect("ip");
    let mut most = 0;
    for _ in 0..100 {
        most = most
            .max(connecting_to_blackhole())
            .max(np.dials.in_flight(client));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Meanwhile another client (another IP) gets its tunnel.
    let mut other = connect_from("127.0.0.2", p.addr);
    other
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    write!(
        other,
        "CONNECT ok.test:{port} HTTP/1.1\r\nHost: ok.test:{port}\r\n\r\n"
    )
    .expect("write");
    let mut head = [0u8; 12];
    other.read_exact(&mut head).expect("an answer");
    assert_eq!(&head, b"HTTP/1.1 200", "the second client is served");
    most = most.max(connecting_to_blackhole());
    assert!(
        (1..=netproxy::proxy::DEFAULT_MAX_DIALS_PER_CLIENT).contains(&most),
        "at most 8 attempts in flight, and the flood did dial: {most}"
    );
    // Every flooding CONNECT ends in a gateway error within its connect timeout.
    for mut s in flood {
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let out = String::from_utf8_lossy(&out);
        assert!(refused_with(&out, "504", "connect_timeout"), "{out}");
    }
}

/// An upstream that answers with a body as fast as it can be taken (64 KiB writes, 256 MiB at
/// most, 1 GiB announced); `ended` is set when its client goes away or it is done.
fn firehose(ended: Arc<std::sync::atomic::AtomicBool>) -> SocketAddr {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in l.incoming().take(4).flatten() {
            let ended = ended.clone();
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n");
                let chunk = vec![b'x'; 64 * 1024];
                for _ in 0..4096 {
                    if s.write_all(&chunk).is_err() {
                        break;
                    }
                }
                ended.store(true, std::sync::atomic::Ordering::SeqCst);
            });
        }
    });
    addr
}

/// Finding 4: a client that sends its request and never reads is cut at
/// `--request-timeout-ms` with an end line (`request_timeout`), and with a shorter
/// `--write-timeout-ms` at that (`write_timeout`); the upstream connection is let go too.
#[test]
fn f4_a_client_that_never_reads_is_cut_with_an_end_line() {
    use std::io::Write;
    if !ns::enter("f4_a_client_that_never_reads_is_cut_with_an_end_line", &[]) {
        return;
    }
    let logs = common::logs::Logs::capture();
    let short = std::time::Duration::from_millis(500);
    let long = std::time::Duration::from_secs(600);
    for (request, write, want) in [
        (short, long, "request_timeout"),
        (long, short, "write_timeout"),
    ] {
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let port = firehose(ended.clone()).port();
        let r = Scripted::with(&[("hose.test", &["127.0.0.1"])]);
        let np = NetProxy {
            timeouts: netproxy::forward::Timeouts {
                request,
                ..Default::default()
            },
            ..NetProxy::new(allow_policy(&[format!("hose.test:{port}")]), r)
        };
        let limits = Limits {
            write_timeout: write,
            ..Limits::default()
        };
        let p = Background::start("127.0.0.1:0".parse().expect("addr"), Arc::new(np), limits)
            .expect("netproxy starts");
        let before = logs.with_message("request ended").len();
        let mut s = std::net::TcpStream::connect(p.addr).expect("connect");
        write!(
            s,
            "GET http://hose.test:{port}/ HTTP/1.1\r\nHost: hose.test\r\n\r\n"
        )
        .expect("write");
        // Never read. The end line comes (waited for 10 s at most).
        let mut ends = Vec::new();
        for _ in 0..500 {
            ends = logs.with_message("request ended").split_off(before);
            if !ends.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(ends.len(), 1, "one end line: {ends:?}");
        assert_eq!(ends[0]["ended"].as_str(), Some(want), "{}", ends[0]);
        for _ in 0..1000 {
            if ended.load(std::sync::atomic::Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            ended.load(std::sync::atomic::Ordering::SeqCst),
            "the upstream was let go ({want})"
        );
        drop(s);
    }
}
