//! Tests run the way the attacks were: inside a fresh network namespace (`unshare -n`) where
//! only `lo` is up, forbidden addresses are added to `lo`, and a `Recorder` listening on them
//! counts whatever really connected. Nothing leaves the namespace: it has no other route.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const INSIDE: &str = "NETPROXY_TEST_NETNS";

/// Runs the test `name` (this test binary, `--exact`) again inside a new network namespace,
/// with `lo` up and each `ip` command of `setup` run first (IPv6 addresses want `nodad`, or
/// they are briefly tentative and cannot be bound). Returns `true` inside (go on with the
/// test), `false` in the parent, after asserting the run inside passed.
pub fn enter(name: &str, setup: &[&str]) -> bool {
    if std::env::var(INSIDE).as_deref() == Ok(name) {
        ip("link set lo up");
        // lo's IPv6 comes up asynchronously; an address added before it has would lose its
        // route again for a moment ("Network is unreachable").
        wait_routable("::1");
        for cmd in setup {
            ip(cmd);
        }
        for cmd in setup {
            if let Some(addr) = cmd
                .strip_prefix("addr add ")
                .and_then(|rest| rest.split('/').next())
            {
                wait_routable(addr);
            }
        }
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let status = Command::new("unshare")
        .arg("-n")
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(INSIDE, name)
        .status()
        .expect("unshare runs (the tests need root for network namespaces)");
    assert!(
        status.success(),
        "{name} failed inside its network namespace"
    );
    false
}

/// Runs `ip` with `args` (split on whitespace); it must succeed.
pub fn ip(args: &str) {
    let ok = Command::new("ip")
        .args(args.split_whitespace())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "ip {args}");
}

/// Waits (5 s at most) until `addr` can be routed to: right after `lo` comes up, its IPv6
/// routes can still be missing for a moment ("Network is unreachable" on connect). A UDP
/// `connect` only looks the route up; nothing is sent.
pub fn wait_routable(addr: &str) {
    let ip: std::net::IpAddr = addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}"));
    let any: SocketAddr = if ip.is_ipv4() {
        "0.0.0.0:0".parse().expect("addr")
    } else {
        "[::]:0".parse().expect("addr")
    };
    for _ in 0..250 {
        let routed = std::net::UdpSocket::bind(any)
            .and_then(|s| s.connect(SocketAddr::new(ip, 9)))
            .is_ok();
        if routed {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("{addr} never became routable");
}

/// A listener on a forbidden address that counts connections and answers each with a small
/// HTTP response (so a test can also show an allowed dial works).
#[derive(Debug, Clone)]
pub struct Recorder {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
}

impl Recorder {
    pub fn bind(addr: &str) -> Self {
        let listener = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        let addr = listener.local_addr().expect("addr");
        let hits = Arc::new(AtomicUsize::new(0));
        let count = hits.clone();
        std::thread::spawn(move || {
            for s in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut s = s;
                    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") && got.len() < 65536 {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = s.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nreached",
                    );
                });
            }
        });
        Self { addr, hits }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}
