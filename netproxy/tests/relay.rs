//! The inbound relay (`--relay LISTEN=TARGET`, issue 49's way in), each test in its own network
//! namespace (`unshare -n`): the sandbox is a stand-in in a namespace of its own behind a veth
//! pair (`common::peer`: it echoes, and says `bye` after its client's end of stream), the
//! sidecar's side of the pair is its own network. Shown: bytes carried exactly both ways with
//! half-close, through the binary; nothing but the configured target reachable through it,
//! whatever the client sends; a target name whose answer is not a peer on the sidecar's own
//! networks refused; the connection caps; a relayed connection closed when the sidecar leaves
//! the sandbox's network. Names come from a scripted resolver (only `.test` names).

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use common::ns::{self, Recorder};
use common::peer::{Peer, TRAILER};
use common::scripted::Scripted;
use common::{free_port, wait_for, Netproxy};
use netproxy::proxy::NetProxy;
use netproxy::relay::Relay;
use netproxy::server::{Background, Limits};

const DEADLINE: Duration = Duration::from_secs(10);

/// `len` bytes of a sequence that differs per `seed`, so a lost, repeated or reordered chunk
/// shows.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

fn connect(at: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(at).expect("connect");
    s.set_read_timeout(Some(DEADLINE)).expect("timeout");
    s
}

/// Sends `data` (from a thread, so a full socket never stalls the reading), half-closes, and
/// reads until the end: what came back.
fn exchange(mut s: TcpStream, data: Vec<u8>) -> Vec<u8> {
    let mut w = s.try_clone().expect("clone");
    let writer = std::thread::spawn(move || {
        w.write_all(&data).expect("write");
        w.shutdown(Shutdown::Write).expect("half-close");
    });
    let mut back = Vec::new();
    s.read_to_end(&mut back).expect("read to the end");
    writer.join().expect("writer");
    back
}

/// Bytes arrive intact and in order both ways, and the client's half-close reaches the sandbox
/// while the sandbox's answer after it still reaches the client; one `relay closed` line says
/// how much went each way, spliced.
#[test]
fn the_relay_carries_bytes_exactly_with_half_close() {
    if !ns::enter("the_relay_carries_bytes_exactly_with_half_close", &[]) {
        return;
    }
    let sandbox = Peer::start("sb0", "10.88.0.1/24", "10.88.0.2/24", 8080);
    let relay_port = free_port();
    let relay = format!("127.0.0.1:{relay_port}=10.88.0.2:8080");
    let np = Netproxy::start(&["--relay", &relay]);
    let sent = pattern(7, 4 << 20);
    let back = exchange(connect(([127, 0, 0, 1], relay_port).into()), sent.clone());
    assert_eq!(back.len(), sent.len() + TRAILER.len());
    assert!(back[..sent.len()] == sent[..], "the echo differs");
    assert_eq!(
        &back[sent.len()..],
        TRAILER,
        "the answer after the half-close"
    );
    let line = wait_for(&np.lines, "relay closed");
    let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(
        (
            v["relay_target"].as_str(),
            v["chosen"].as_str(),
            v["ended"].as_str(),
            v["relay"].as_str(),
            v["bytes_up"].as_u64(),
            v["bytes_down"].as_u64(),
        ),
        (
            Some("10.88.0.2:8080"),
            Some("10.88.0.2:8080"),
            Some("closed"),
            Some("splice"),
            Some(4 << 20),
            Some((4 << 20) + 3),
        ),
        "{line}"
    );
    assert_eq!(sandbox.connections(), 1);
}

/// Whatever a client sends (a CONNECT, an absolute-form request, a PROXY protocol header), it
/// reaches the sandbox's port as bytes and nothing else: a service on the sidecar's loopback
/// and one on its own address on the sandbox's network are never connected to.
#[test]
fn nothing_but_the_configured_target_is_reached() {
    if !ns::enter("nothing_but_the_configured_target_is_reached", &[]) {
        return;
    }
    let sandbox = Peer::start("sb0", "10.88.0.1/24", "10.88.0.2/24", 8080);
    let local = Recorder::bind("127.0.0.1:0");
    let own = Recorder::bind("10.88.0.1:8080");
    let relay_port = free_port();
    let relay = format!("127.0.0.1:{relay_port}=10.88.0.2:8080");
    let _np = Netproxy::start(&["--relay", &relay, "--allow-cidr", "10.0.0.0/8"]);
    let l = local.addr;
    let asks = [
        format!("CONNECT {l} HTTP/1.1\r\nHost: {l}\r\n\r\n"),
        "GET http://10.88.0.1:8080/ HTTP/1.1\r\nHost: 10.88.0.1:8080\r\n\r\n".to_owned(),
        format!(
            "PROXY TCP4 10.88.0.9 127.0.0.1 5555 {}\r\nGET / HTTP/1.1\r\n\r\n",
            l.port()
        ),
    ];
    for ask in &asks {
        let back = exchange(
            connect(([127, 0, 0, 1], relay_port).into()),
            ask.clone().into_bytes(),
        );
        assert_eq!(back, [ask.as_bytes(), TRAILER].concat(), "{ask:?}");
    }
    assert_eq!(sandbox.connections(), asks.len());
    let heads = sandbox.heads.lock().expect("lock").clone();
    assert_eq!(heads.len(), asks.len());
    for (head, ask) in heads.iter().zip(&asks) {
        assert_eq!(
            head.as_slice(),
            ask.as_bytes(),
            "the sandbox got the bytes as sent"
        );
    }
    assert_eq!((local.hits(), own.hits()), (0, 0), "only the sandbox");
}

/// netproxy in process with `resolver` (its relays on listeners of their own: `relay_to`).
fn in_process(resolver: Arc<Scripted>) -> Arc<NetProxy> {
    Arc::new(NetProxy {
        dns_timeout: Duration::from_millis(200),
        connect_timeout: Duration::from_secs(3),
        ..NetProxy::new(netproxy::policy::Policy::default(), resolver)
    })
}

fn relay_to(np: &Arc<NetProxy>, target: &str, limits: Limits) -> Background {
    let rule = format!("127.0.0.1:{}={target}", free_port());
    Background::relay(Relay::parse(&rule).expect("rule"), np.clone(), limits).expect("relay")
}

/// The metric text of `np`.
fn metrics(np: &NetProxy) -> String {
    use scrape::Exposition;
    netproxy::metrics::Exposed(np.metrics.clone()).metrics()
}

/// A target name is looked up at each connection, and its answer must be a peer on one of the
/// sidecar's own networks: an address outside them, the sidecar's own address, loopback, or
/// an answer mixing a good address with one of those is refused (the client's connection is
/// closed with nothing written, nothing is dialed, one `relay refused` line and its counter);
/// a name that does not resolve is refused too.
#[test]
fn a_target_name_must_resolve_to_a_peer_on_the_sidecars_networks() {
    if !ns::enter(
        "a_target_name_must_resolve_to_a_peer_on_the_sidecars_networks",
        &["addr add 11.0.0.5/32 dev lo"],
    ) {
        return;
    }
    let logs = common::logs::Logs::capture();
    let sandbox = Peer::start("sb0", "10.88.0.1/24", "10.88.0.2/24", 8080);
    let outside = Recorder::bind("11.0.0.5:8080");
    let own = Recorder::bind("10.88.0.1:8080");
    let local = Recorder::bind("127.0.0.1:8080");
    let r = Scripted::with(&[
        ("sandbox.test", &["10.88.0.2"]),
        ("outside.test", &["11.0.0.5"]),
        ("self.test", &["10.88.0.1"]),
        ("mixed.test", &["10.88.0.2", "11.0.0.5"]),
        ("loop.test", &["127.0.0.1"]),
    ]);
    let np = in_process(r);
    let good = relay_to(&np, "sandbox.test:8080", Limits::default());
    let back = exchange(connect(good.addr), b"hello".to_vec());
    assert_eq!(back, b"hellobye");
    logs.wait_for("relay closed", |v| v["relay_target"] == "sandbox.test:8080");
    for (name, reason) in [
        ("outside.test", "not_sidecar_network"),
        ("self.test", "sidecar_address"),
        ("mixed.test", "not_sidecar_network"),
        ("loop.test", "special_address"),
        ("gone.test", "dns_timeout"),
    ] {
        let relay = relay_to(&np, &format!("{name}:8080"), Limits::default());
        let mut s = connect(relay.addr);
        let _ = s.write_all(b"anything");
        let mut got = Vec::new();
        let end = s.read_to_end(&mut got);
        assert!(
            got.is_empty() && end.is_ok_or_reset(),
            "{name}: {got:?} {end:?}"
        );
        let line = logs.wait_for("relay refused", |v| {
            v["relay_target"] == format!("{name}:8080")
        });
        assert_eq!(line["reason"].as_str(), Some(reason), "{line}");
        let text = metrics(&np);
        assert!(
            text.contains(&format!(
                "netproxy_relay_connections_total{{outcome=\"{reason}\"}} "
            )),
            "{text}"
        );
    }
    assert_eq!(
        (outside.hits(), own.hits(), local.hits()),
        (0, 0, 0),
        "only the sandbox is ever dialed"
    );
    assert_eq!(sandbox.connections(), 1);
    let text = metrics(&np);
    assert!(
        text.contains("netproxy_relay_connections_total{outcome=\"relayed\"} 1\n")
            && text.contains("netproxy_relay_bytes_total{direction=\"up\"} 5\n")
            && text.contains("netproxy_relay_bytes_total{direction=\"down\"} 8\n"),
        "{text}"
    );
}

trait EndOk {
    fn is_ok_or_reset(&self) -> bool;
}

impl EndOk for std::io::Result<usize> {
    /// The stream ended (EOF or reset), not the read timeout.
    fn is_ok_or_reset(&self) -> bool {
        match self {
            Ok(_) => true,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    }
}

/// The relay keeps the proxy's connection caps (counted apart from the proxy's own): over
/// `--max-connections-per-client` a connection is closed at once with a `relay refused` line,
/// and once one ends, the next is relayed again.
#[test]
fn relayed_connections_are_capped() {
    if !ns::enter("relayed_connections_are_capped", &[]) {
        return;
    }
    let logs = common::logs::Logs::capture();
    let sandbox = Peer::start("sb0", "10.88.0.1/24", "10.88.0.2/24", 8080);
    let limits = Limits {
        max_per_client: 2,
        ..Limits::default()
    };
    let np = in_process(Scripted::with(&[]));
    let relay = relay_to(&np, "10.88.0.2:8080", limits);
    // Two held open (each has been echoed to: it reached the sandbox).
    let mut held: Vec<TcpStream> = (0..2)
        .map(|i| {
            let mut s = connect(relay.addr);
            s.write_all(&[b'0' + i]).expect("write");
            let mut one = [0u8; 1];
            s.read_exact(&mut one).expect("echoed");
            s
        })
        .collect();
    let mut third = connect(relay.addr);
    let mut got = Vec::new();
    let end = third.read_to_end(&mut got);
    assert!(got.is_empty() && end.is_ok_or_reset(), "{got:?} {end:?}");
    let line = logs.wait_for("relay refused", |_| true);
    assert_eq!(
        line["reason"].as_str(),
        Some("client_connection_limit"),
        "{line}"
    );
    assert!(
        metrics(&np).contains("netproxy_relay_connections_open 2\n"),
        "{}",
        metrics(&np)
    );
    assert_eq!(
        sandbox.connections(),
        2,
        "the third never reached the sandbox"
    );
    // One ends; the next is relayed.
    let first = held.remove(0);
    assert_eq!(exchange(first, Vec::new()), TRAILER);
    logs.wait_for("relay closed", |_| true);
    let back = exchange(connect(relay.addr), b"again".to_vec());
    assert_eq!(back, [b"again".as_slice(), TRAILER].concat());
    drop(held);
}

/// A relayed connection is judged again when a network change is announced: once the sidecar
/// is no longer on the sandbox's network, its connection there is closed (`ended=revoked`).
#[test]
fn a_relayed_connection_ends_when_the_sidecar_leaves_the_network() {
    if !ns::enter(
        "a_relayed_connection_ends_when_the_sidecar_leaves_the_network",
        &[],
    ) {
        return;
    }
    let logs = common::logs::Logs::capture();
    let _sandbox = Peer::start("sb0", "10.88.0.1/24", "10.88.0.2/24", 8080);
    let np = in_process(Scripted::with(&[]));
    let relay = relay_to(&np, "10.88.0.2:8080", Limits::default());
    let mut s = connect(relay.addr);
    s.write_all(b"x").expect("write");
    let mut one = [0u8; 1];
    s.read_exact(&mut one).expect("echoed");
    // The sidecar keeps its link but leaves the network: 10.88.0.0/24 is no longer its own.
    ns::ip("addr del 10.88.0.1/24 dev sb0");
    let line = logs.wait_for("relay closed", |_| true);
    assert_eq!(line["ended"].as_str(), Some("revoked"), "{line}");
    let mut rest = Vec::new();
    let end = s.read_to_end(&mut rest);
    assert!(end.is_ok_or_reset(), "{end:?}");
}
