//! CONNECT tunnels through the `netproxy` binary, spliced (`relay: "splice"` in the
//! `tunnel closed` line proves the path): bytes arrive identical and in order both ways, each
//! side can half-close and still hear the other, bytes sent with the CONNECT head go upstream
//! first, an idle tunnel is still closed, and a client that vanishes ends only its own tunnel.
//! Everything is on 127.0.0.1.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::Netproxy;

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

/// An upstream on 127.0.0.1 that serves one connection with `serve` on its own thread.
fn upstream<T: Send + 'static>(
    serve: impl FnOnce(TcpStream) -> T + Send + 'static,
) -> (u16, JoinHandle<T>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let served = std::thread::spawn(move || {
        let (s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(DEADLINE)).expect("timeout");
        s.set_write_timeout(Some(DEADLINE)).expect("timeout");
        serve(s)
    });
    (port, served)
}

/// A netproxy that allows exactly the upstream at `up`.
fn netproxy(up: u16, extra: &[&str]) -> Netproxy {
    let allow = format!("127.0.0.1:{up}");
    let mut args = vec!["--allow", &allow];
    args.extend_from_slice(extra);
    Netproxy::start(&args)
}

/// A tunnel through the proxy at `proxy` to `up`: the CONNECT head and `early` in one write, then the 200 read byte by
/// byte, so nothing after its head is consumed here.
fn open_tunnel(proxy: u16, up: u16, early: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", proxy)).expect("connect");
    s.set_read_timeout(Some(DEADLINE)).expect("timeout");
    s.set_nodelay(true).expect("nodelay");
    let mut first =
        format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\nHost: 127.0.0.1:{up}\r\n\r\n").into_bytes();
    first.extend_from_slice(early);
    s.write_all(&first).expect("write");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).expect("head");
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

fn read_all(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("read to EOF");
    got
}

/// Writes `data` on a clone of `s` from another thread, then shuts its write side down.
fn send_and_shut(s: &TcpStream, data: Vec<u8>) -> JoinHandle<()> {
    let mut w = s.try_clone().expect("clone");
    std::thread::spawn(move || {
        w.write_all(&data).expect("write");
        w.shutdown(Shutdown::Write).expect("shutdown");
    })
}

/// The tunnel's log line: spliced, ended as `ended`, with these counts.
fn assert_spliced(np: &Netproxy, up: usize, down: usize, ended: &str) {
    let line = np.tunnel_closed();
    assert_eq!(line["relay"], "splice", "{line}");
    assert_eq!(line["ended"], ended, "{line}");
    assert_eq!(line["bytes_up"], up, "{line}");
    assert_eq!(line["bytes_down"], down, "{line}");
}

#[test]
fn megabytes_cross_a_spliced_tunnel_intact_both_ways_at_once() {
    const LEN: usize = 8 << 20;
    let (up, served) = upstream(|mut s| {
        let sending = send_and_shut(&s, pattern(2, LEN));
        let got = read_all(&mut s);
        sending.join().expect("upstream sent");
        got
    });
    let np = netproxy(up, &[]);
    let mut c = open_tunnel(np.port, up, b"");
    let sending = send_and_shut(&c, pattern(1, LEN));
    let got = read_all(&mut c);
    sending.join().expect("client sent");
    // Not assert_eq!: a mismatch would print megabytes.
    assert!(got == pattern(2, LEN), "down: {} bytes, differ", got.len());
    let up_got = served.join().expect("upstream");
    assert!(
        up_got == pattern(1, LEN),
        "up: {} bytes, differ",
        up_got.len()
    );
    assert_spliced(&np, LEN, LEN, "closed");
}

#[test]
fn a_client_that_half_closes_still_gets_the_answer() {
    let (up, served) = upstream(|mut s| {
        // Reading to EOF proves the client's shutdown reached the upstream.
        let question = read_all(&mut s);
        s.write_all(b"answer to ").expect("write");
        s.write_all(&question).expect("write");
        question
    });
    let np = netproxy(up, &[]);
    let mut c = open_tunnel(np.port, up, b"");
    c.write_all(b"question").expect("write");
    c.shutdown(Shutdown::Write).expect("shutdown");
    assert_eq!(read_all(&mut c), b"answer to question");
    assert_eq!(served.join().expect("upstream"), b"question");
    assert_spliced(&np, 8, 18, "closed");
}

#[test]
fn an_upstream_that_half_closes_still_gets_the_clients_bytes() {
    const LEN: usize = 1 << 20;
    let (up, served) = upstream(|mut s| {
        s.write_all(b"greeting").expect("write");
        s.shutdown(Shutdown::Write).expect("shutdown");
        read_all(&mut s)
    });
    let np = netproxy(up, &[]);
    let mut c = open_tunnel(np.port, up, b"");
    // EOF reaches the client while its own direction stays open.
    assert_eq!(read_all(&mut c), b"greeting");
    c.write_all(&pattern(3, LEN))
        .expect("write after the upstream's EOF");
    c.shutdown(Shutdown::Write).expect("shutdown");
    let got = served.join().expect("upstream");
    assert!(got == pattern(3, LEN), "{} bytes, differ", got.len());
    assert_spliced(&np, LEN, 8, "closed");
}

#[test]
fn bytes_sent_with_the_connect_head_go_upstream_first_and_intact() {
    // Small: in the head's own packet. Large: spread over what netproxy reads before hyper,
    // hyper's read-ahead and the socket.
    for early in [b"sent with the head".to_vec(), pattern(4, 256 << 10)] {
        let (up, served) = upstream(|mut s| read_all(&mut s));
        let np = netproxy(up, &[]);
        let mut c = open_tunnel(np.port, up, &early);
        c.write_all(b"then this").expect("write");
        c.shutdown(Shutdown::Write).expect("shutdown");
        let got = served.join().expect("upstream");
        let mut want = early.clone();
        want.extend_from_slice(b"then this");
        assert!(
            got == want,
            "{} early bytes: upstream got {} bytes, starting {:?}",
            early.len(),
            got.len(),
            String::from_utf8_lossy(&got[..got.len().min(24)])
        );
        assert!(read_all(&mut c).is_empty());
        assert_spliced(&np, want.len(), 0, "closed");
    }
}

#[test]
fn an_idle_spliced_tunnel_is_closed() {
    let (up, served) = upstream(|mut s| {
        let mut ping = [0u8; 4];
        s.read_exact(&mut ping).expect("ping");
        s.write_all(b"pong").expect("pong");
        // Then silence, until the proxy hangs up.
        let mut rest = [0u8; 1];
        s.read(&mut rest).expect("EOF, not a read timeout")
    });
    let np = netproxy(up, &["--tunnel-idle-timeout-ms", "300"]);
    let mut c = open_tunnel(np.port, up, b"");
    c.write_all(b"ping").expect("write");
    let mut pong = [0u8; 4];
    c.read_exact(&mut pong).expect("pong");
    assert_eq!(&pong, b"pong");
    let quiet = Instant::now();
    let mut rest = [0u8; 1];
    let n = c.read(&mut rest).expect("EOF, not a read timeout");
    assert_eq!(n, 0, "the proxy ended the idle tunnel");
    assert!(
        quiet.elapsed() >= Duration::from_millis(200),
        "closed after {:?}, before it was idle",
        quiet.elapsed()
    );
    assert_eq!(served.join().expect("upstream"), 0, "upstream closed too");
    assert_spliced(&np, 4, 4, "idle_timeout");
}

#[test]
fn a_client_that_vanishes_mid_download_ends_only_its_tunnel() {
    let (up, served) = upstream(|mut s| {
        // Sends until the proxy hangs up (bounded by the write timeout).
        let chunk = vec![7u8; 64 << 10];
        while s.write_all(&chunk).is_ok() {}
    });
    let (up2, served2) = upstream(|mut s| {
        let mut ping = [0u8; 4];
        s.read_exact(&mut ping).expect("ping");
        s.write_all(b"pong").expect("pong");
    });
    let np = netproxy(up, &["--allow", &format!("127.0.0.1:{up2}")]);
    let mut c = open_tunnel(np.port, up, b"");
    let mut some = vec![0u8; 256 << 10];
    c.read_exact(&mut some).expect("the download runs");
    // Closed with bytes unread: the kernel resets the connection; the relay's next write into
    // it fails (EPIPE or ECONNRESET).
    drop(c);
    let line = np.tunnel_closed();
    assert_eq!(line["relay"], "splice", "{line}");
    assert_eq!(
        line["ended"], "error",
        "a reset is not a clean close: {line}"
    );
    served.join().expect("the upstream was hung up on");
    // The proxy lives on.
    let mut c = open_tunnel(np.port, up2, b"");
    c.write_all(b"ping").expect("write");
    let mut pong = [0u8; 4];
    c.read_exact(&mut pong).expect("pong");
    assert_eq!(&pong, b"pong");
    served2.join().expect("second upstream");
}
