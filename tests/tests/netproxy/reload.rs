//! A policy reload reaches the tunnels already open: one the new policy no longer allows is
//! closed at once, one it still allows carries on.

use std::io::{Read, Write};
use std::sync::Arc;

use netproxy::proxy::{NetProxy, Policy};
use netproxy::rules::Rule;
use netproxy::server::{Background, Limits};

use crate::loopback::{connect, read_head, tunnel_to as tunnel, upstream, Scripted};

fn policy(allow: &[String]) -> Policy {
    Policy {
        allow: allow
            .iter()
            .map(|r| Rule::parse(r).expect("rule"))
            .collect(),
        deny: vec![],
        allow_cidrs: vec!["127.0.0.1/32".parse().expect("net")],
        own_networks: vec![],
        nat64_prefixes: vec![],
    }
}

#[test]
fn a_reload_closes_the_tunnels_it_no_longer_allows() {
    let (up, _) = upstream();
    let port = up.port();
    let r = Scripted::with(&[
        ("revoked.test", &[&["127.0.0.1"]]),
        ("kept.test", &[&["127.0.0.1"]]),
    ]);
    let np = Arc::new(NetProxy::new(
        policy(&[format!("revoked.test:{port}"), format!("kept.test:{port}")]),
        r,
    ));
    let p = Background::start(
        "127.0.0.1:0".parse().expect("addr"),
        np.clone(),
        Limits::default(),
    )
    .expect("netproxy starts");
    let mut revoked = tunnel(p.addr, "revoked.test", port);
    let mut kept = tunnel(p.addr, "kept.test", port);
    // Both open and idle; the reload drops revoked.test.
    np.set_policy(policy(&[format!("kept.test:{port}")]));
    // The idle timer is 300 s; `connect`'s read deadline (10 s) fails the test first.
    let mut buf = [0u8; 16];
    let n = revoked
        .read(&mut buf)
        .expect("the tunnel ends, not times out");
    assert_eq!(n, 0, "closed by the proxy");
    kept.write_all(b"PING\r\n\r\n").expect("write");
    let mut pong = [0u8; 4];
    kept.read_exact(&mut pong)
        .expect("the kept tunnel still carries bytes");
    assert_eq!(&pong, b"PONG");
    // A new tunnel to the dropped name is refused, as before.
    let mut s = connect(p.addr);
    write!(
        s,
        "CONNECT revoked.test:{port} HTTP/1.1\r\nHost: revoked.test:{port}\r\n\r\n"
    )
    .expect("write");
    assert!(read_head(&mut s).starts_with(b"HTTP/1.1 403"));
}
