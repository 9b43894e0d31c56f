//! What netproxy passes back from an upstream: headers the upstream's `Connection` names stay
//! behind, and a 101 the client never asked for is a 502, not a switch.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

use netproxy::server::Limits;

use crate::loopback::{proxy, send, Scripted};

/// An upstream on 127.0.0.1 that reads one request head and answers `answer`, then closes.
fn answering(answer: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten().take(4) {
            let mut s = stream;
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(answer);
        }
    });
    addr
}

fn through(answer: &'static [u8]) -> String {
    let up = answering(answer);
    let r = Scripted::with(&[("up.test", &[&["127.0.0.1"]])]);
    let p = proxy(
        r,
        &[&format!("up.test:{}", up.port())],
        &[],
        Limits::default(),
    );
    send(
        p.addr,
        format!(
            "GET http://up.test:{}/ HTTP/1.1\r\nHost: up.test\r\nConnection: close\r\n\r\n",
            up.port()
        )
        .as_bytes(),
    )
}

#[test]
fn headers_the_upstream_names_in_connection_stay_behind() {
    let out = through(
        b"HTTP/1.1 200 OK\r\nConnection: X-Private, close\r\nX-Private: secret\r\nX-Public: yes\r\nContent-Length: 2\r\n\r\nok",
    );
    let lower = out.to_ascii_lowercase();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(lower.contains("x-public: yes\r\n"), "{out}");
    assert!(!lower.contains("x-private"), "{out}");
    assert!(out.ends_with("ok"), "{out}");
}

#[test]
fn an_unrequested_switch_of_protocols_is_a_502() {
    let out = through(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: tcp\r\nConnection: Upgrade\r\n\r\nRAW",
    );
    let lower = out.to_ascii_lowercase();
    assert!(out.starts_with("HTTP/1.1 502"), "{out}");
    assert!(lower.contains("x-netproxy-error: upstream_failed"), "{out}");
    assert!(!out.contains("RAW"), "{out}");
}
