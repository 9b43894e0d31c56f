//! Issue 50, finding 1: the sidecar's own networks as they change under it, through the binary
//! with the default dial budget, each test in its own network namespace (`unshare -n`). A
//! network "joined" is an address added to `own0` (its /24 becomes an own network); the
//! upstream behind it is a `Recorder` on a `lo` alias (loopback interfaces are never own), so
//! it answers before and after the join and counts what really connected. Blackholed
//! addresses (SYNs leave, nothing answers) hold the dial budget. Targets are IP literals:
//! nothing is looked up.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::ns::{self, Recorder};
use common::{free_port, wait_for, Netproxy};

/// `own0` holds 10.77.0.1/24 from the start; the upstream is 10.66.0.1 on `lo`; 10.200.0.1-8
/// are blackholed (routed out of `bh0`, whose peer has no address, with a permanent neighbour
/// entry each, so no ARP failure ends an attempt early).
fn setup() -> Vec<String> {
    let mut s: Vec<String> = [
        "link add own0 type veth peer name own1",
        "addr add 10.77.0.1/24 dev own0",
        "link set own0 up",
        "link set own1 up",
        "addr add 10.66.0.1/32 dev lo",
        "link add bh0 type veth peer name bh1",
        "link set bh0 up",
        "link set bh1 up",
        "addr add 10.201.0.1/32 dev bh0",
        "route add 10.200.0.0/24 dev bh0 src 10.201.0.1",
    ]
    .map(str::to_owned)
    .to_vec();
    s.extend(
        (1..=8).map(|i| {
            format!("neigh add 10.200.0.{i} lladdr 02:00:00:00:00:01 dev bh0 nud permanent")
        }),
    );
    s
}

fn enter(name: &str) -> bool {
    let setup = setup();
    let setup: Vec<&str> = setup.iter().map(String::as_str).collect();
    ns::enter(name, &setup)
}

/// The sidecar joins 10.66.0.0/24 (the upstream's network, seen from the sidecar).
fn join() {
    ns::ip("addr add 10.66.0.2/24 dev own0");
}

/// A connection to the proxy, accepted (a first refused request answered on it), kept open.
fn accepted(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let first = ask(&mut s, "http://198.51.100.1/");
    assert!(first.starts_with("HTTP/1.1 403"), "{first}");
    s
}

/// One request on a kept-alive connection; its answer, read up to the end of its JSON body
/// (every answer here is short).
fn ask(s: &mut TcpStream, url: &str) -> String {
    write!(s, "GET {url} HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got);
        if text.contains('}') || text.contains("reached") {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn refused_with(out: &str, status: &str, reason: &str) -> bool {
    out.starts_with(&format!("HTTP/1.1 {status}"))
        && out
            .to_ascii_lowercase()
            .contains(&format!("x-netproxy-error: {reason}\r\n"))
}

/// `n` CONNECTs to blackholed addresses, each holding a dial permit for the connect timeout.
fn hold_dials(port: u16, n: u8) -> Vec<TcpStream> {
    (1..=n)
        .map(|i| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            write!(
                s,
                "CONNECT 10.200.0.{i}:443 HTTP/1.1\r\nHost: 10.200.0.{i}:443\r\n\r\n"
            )
            .expect("write");
            s
        })
        .collect()
}

/// Issue 50, finding 1, as reported: at the descriptor limit the sidecar joins a network; the
/// announced change cannot be read (EMFILE); a request to an address in the new network must
/// not be judged against the old list. It used to be allowed, wait for a dial slot (held by a
/// blackholed dial), and once descriptors were free again it was dialed into the sidecar's own
/// new network. Now it is refused `own_networks_unknown`, and nothing ever connects.
#[test]
fn f1_a_network_joined_at_the_fd_limit_is_never_dialed() {
    if !enter("f1_a_network_joined_at_the_fd_limit_is_never_dialed") {
        return;
    }
    let port = free_port();
    let up = Recorder::bind(&format!("10.66.0.1:{port}"));
    let target = format!("10.66.0.1:{port}");
    // 48 descriptors: the dial budget is what the limit leaves (one), the default otherwise.
    let np = Netproxy::start_under(
        &["prlimit", "--nofile=48:48", "--"],
        &[
            "--header-timeout-ms",
            "30000",
            "--connect-timeout-ms",
            "4000",
            "--allow-cidr",
            "10.0.0.0/8",
            "--allow",
            &target,
            "--allow",
            "10.200.0.1:443",
        ],
        &[],
    );
    let mut b = accepted(np.port);
    // The only dial slot, held for the connect timeout.
    let held_dial = hold_dials(np.port, 1);
    wait_for(&np.lines, "\"10.200.0.1\"");
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", np.pid()))
            .expect("/proc/PID/fd")
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n < 48)
            })
            .count()
    };
    // Every other descriptor taken by idle clients (those that do not fit are answered 503).
    let held: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(("127.0.0.1", np.port)).expect("connect"))
        .collect();
    let full = (0..500).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        fds() == 48
    });
    assert!(full, "the descriptor table is full");
    join();
    let out = ask(&mut b, &format!("http://{target}/"));
    // Descriptors free again, and the blackholed dial gives its slot back (its 504).
    drop(held);
    for mut s in held_dial {
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    // Whatever was still waiting for the slot has had it (b's answer is in, too).
    assert_eq!(
        up.hits(),
        0,
        "the sidecar's own new network was dialed: {out}"
    );
    assert!(refused_with(&out, "503", "own_networks_unknown"), "{out}");
}

/// Finding 1: a change announced between the check and the dial (the request waiting for a
/// dial slot meanwhile) is seen at dial time: the address is judged again and refused
/// `proxy_network`, never dialed. Default budget: 8 attempts per client, held by blackholed
/// CONNECTs from the same client.
#[test]
fn f1_a_network_joined_while_waiting_for_a_dial_slot_is_never_dialed() {
    if !enter("f1_a_network_joined_while_waiting_for_a_dial_slot_is_never_dialed") {
        return;
    }
    let port = free_port();
    let up = Recorder::bind(&format!("10.66.0.1:{port}"));
    let target = format!("10.66.0.1:{port}");
    let np = Netproxy::start(&[
        "--connect-timeout-ms",
        "4000",
        "--allow-cidr",
        "10.0.0.0/8",
        "--allow",
        &target,
        "--allow",
        "10.200.0.0:443",
        "--allow",
        "10.200.0.1:443",
        "--allow",
        "10.200.0.2:443",
        "--allow",
        "10.200.0.3:443",
        "--allow",
        "10.200.0.4:443",
        "--allow",
        "10.200.0.5:443",
        "--allow",
        "10.200.0.6:443",
        "--allow",
        "10.200.0.7:443",
        "--allow",
        "10.200.0.8:443",
    ]);
    let mut b = accepted(np.port);
    let held = hold_dials(np.port, netproxy::proxy::DEFAULT_MAX_DIALS_PER_CLIENT as u8);
    for _ in 0..netproxy::proxy::DEFAULT_MAX_DIALS_PER_CLIENT {
        wait_for(&np.lines, "\"10.200.0.");
    }
    write!(b, "GET http://{target}/ HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    // Judged while 10.66.0.0/24 is not the sidecar's: allowed, then waits for a slot.
    let decided = wait_for(&np.lines, &format!("\"10.66.0.1:{port}\""));
    assert!(decided.contains("\"allow\""), "{decided}");
    join();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains('}') && !got.ends_with(b"reached") {
        match b.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let out = String::from_utf8_lossy(&got);
    drop(held);
    assert_eq!(up.hits(), 0, "dialed into the sidecar's own network: {out}");
    assert!(refused_with(&out, "403", "proxy_network"), "{out}");
}

/// An upstream that accepts connections and holds them open, reading and dropping whatever
/// comes, until its client goes.
fn holder(addr: &str) -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind(addr).expect("bind");
    let at = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in l.incoming().take(4).flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = [0u8; 4096];
                while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    at
}

/// Finding 1: an open tunnel is judged again when a network change is announced, as on a
/// reload: the sidecar joins the network its upstream is in, and the tunnel is closed
/// (`ended=revoked`) without any request or reload.
#[test]
fn f1_an_open_tunnel_into_a_network_joined_later_is_closed() {
    if !enter("f1_an_open_tunnel_into_a_network_joined_later_is_closed") {
        return;
    }
    let up = holder("10.66.0.1:0");
    let target = up.to_string();
    let np = Netproxy::start(&["--allow-cidr", "10.0.0.0/8", "--allow", &target]);
    let mut s = TcpStream::connect(("127.0.0.1", np.port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").expect("write");
    let mut head = [0u8; 12];
    s.read_exact(&mut head).expect("an answer");
    assert_eq!(&head, b"HTTP/1.1 200");
    s.write_all(b"still open\n")
        .expect("the tunnel carries bytes");
    join();
    let closed = np.tunnel_closed();
    assert_eq!(closed["ended"].as_str(), Some("revoked"), "{closed}");
    // The client sees its tunnel end (EOF or reset), not its read timeout.
    let mut rest = Vec::new();
    let end = s.read_to_end(&mut rest);
    assert!(
        end.as_ref().map_or_else(
            |e| e.kind() != std::io::ErrorKind::WouldBlock
                && e.kind() != std::io::ErrorKind::TimedOut,
            |_| true
        ),
        "{end:?}"
    );
}
