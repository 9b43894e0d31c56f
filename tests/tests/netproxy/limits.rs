//! netproxy's limits on loopback, with `loopback`'s scripted resolver and upstream: the
//! connection cap and the per-client cap (open tunnels count) answer 503, a slow or oversized
//! head is cut off without hurting other tunnels, and an idle tunnel is closed.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use netproxy::server::Limits;

use crate::loopback::{connect_tunnel, proxy, proxy_idle, send, upstream, Scripted};

#[test]
fn over_the_connection_cap_clients_get_503_with_retry_after() {
    let r = Scripted::with(&[]);
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let p = proxy(r, &[], &[], limits);
    let _held = TcpStream::connect(p.addr).expect("first connection");
    std::thread::sleep(Duration::from_millis(100));
    let out = send(
        p.addr,
        b"GET http://x.test/ HTTP/1.1\r\nHost: x.test\r\n\r\n",
    );
    assert!(out.starts_with("HTTP/1.1 503"), "{out}");
    let lower = out.to_ascii_lowercase();
    assert!(lower.contains("retry-after: 1\r\n"), "{out}");
    assert!(
        lower.contains("x-netproxy-error: connection_limit\r\n"),
        "{out}"
    );
}

#[test]
fn slow_and_oversized_clients_are_cut_off_without_hurting_other_tunnels() {
    let (up, _) = upstream();
    let r = Scripted::with(&[("allowed.test", &[&["127.0.0.1"]])]);
    let limits = Limits {
        max_per_client: 3,
        header_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let p = proxy_idle(
        r,
        &[&format!("allowed.test:{}", up.port())],
        &[],
        limits,
        Duration::from_secs(30),
    );
    let mut tunnel = connect_tunnel(p.addr, up.port());

    // A client that never finishes its request head is cut off by the header timeout.
    let mut slow = TcpStream::connect(p.addr).expect("connect");
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    slow.write_all(b"GET http://allowed.test/ HTTP/1.1\r\nHost: allow")
        .expect("write");
    let mut got = Vec::new();
    let _ = slow.read_to_end(&mut got);
    assert!(
        String::from_utf8_lossy(&got).contains("request head too slow"),
        "{}",
        String::from_utf8_lossy(&got)
    );

    // An oversized head is refused.
    let big = format!(
        "GET http://allowed.test/ HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let out = send(p.addr, big.as_bytes());
    assert!(
        out.starts_with("HTTP/1.1 431") && out.contains("request head too large"),
        "{out}"
    );

    // The first tunnel never noticed.
    tunnel.write_all(b"PING\r\n\r\n").expect("write");
    let mut pong = [0u8; 4];
    tunnel.read_exact(&mut pong).expect("still open");
    assert_eq!(&pong, b"PONG");
}

#[test]
fn an_idle_tunnel_is_closed() {
    // An upstream that accepts and then says nothing.
    let quiet = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = quiet.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let held: Vec<TcpStream> = quiet.incoming().take(1).flatten().collect();
        std::thread::sleep(Duration::from_secs(20));
        drop(held);
    });
    let r = Scripted::with(&[("allowed.test", &[&["127.0.0.1"]])]);
    let p = proxy_idle(
        r,
        &[&format!("allowed.test:{port}")],
        &[],
        Limits::default(),
        Duration::from_millis(300),
    );
    let mut tunnel = connect_tunnel(p.addr, port);
    let mut buf = [0u8; 1];
    let n = tunnel.read(&mut buf).expect("EOF, not a read timeout");
    assert_eq!(n, 0, "the proxy ended the idle tunnel");
}

#[test]
fn open_tunnels_count_toward_the_per_client_cap() {
    let (up, _) = upstream();
    let r = Scripted::with(&[("allowed.test", &[&["127.0.0.1"]])]);
    let limits = Limits {
        max_per_client: 3,
        ..Limits::default()
    };
    let p = proxy(r, &[&format!("allowed.test:{}", up.port())], &[], limits);
    // hyper lets go of a connection once it is upgraded; the tunnel keeps its share anyway.
    let tunnels: Vec<TcpStream> = (0..3).map(|_| connect_tunnel(p.addr, up.port())).collect();
    let out = send(p.addr, b"GET http://allowed.test/ HTTP/1.1\r\n\r\n");
    assert!(
        out.starts_with("HTTP/1.1 503") && out.contains("client_connection_limit"),
        "{out}"
    );
    drop(tunnels);
    // Closed tunnels give their share back (the proxy notices the close asynchronously).
    let freed = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        !send(
            p.addr,
            b"GET http://other.test/ HTTP/1.1\r\nConnection: close\r\n\r\n",
        )
        .starts_with("HTTP/1.1 503")
    });
    assert!(freed, "the shares came back after the tunnels closed");
}
