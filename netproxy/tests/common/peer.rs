//! A sandbox stand-in in a network namespace of its own: a thread that `unshare`s its network
//! namespace, is handed one end of a veth pair whose other end stays in the test's namespace
//! (the sidecar's side), and serves a port there. In one namespace every address is the
//! sidecar's own, so a relay target must live in another one. The server echoes every byte
//! it gets as it gets it; when its client half-closes, it writes `bye`, half-closes too and
//! drops the connection. It counts connections and keeps the first bytes of each.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What the stand-in says back after its client's end of stream.
pub const TRAILER: &[u8] = b"bye";

#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicUsize>,
    /// The first 256 bytes each connection brought, in order of arrival.
    pub heads: Arc<Mutex<Vec<Vec<u8>>>>,
}

fn ip(args: &str) {
    let ok = Command::new("ip")
        .args(args.split_whitespace())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "ip {args}");
}

impl Peer {
    /// A veth pair `link`/`link-p`: `link` up in this namespace with `ours` (e.g.
    /// `10.88.0.1/24`), `link-p` moved into the stand-in's namespace with `theirs`
    /// (`10.88.0.2/24`), where it serves `port`.
    pub fn start(link: &str, ours: &str, theirs: &str, port: u16) -> Self {
        let far = format!("{link}-p");
        ip(&format!("link add {link} type veth peer name {far}"));
        ip(&format!("addr add {ours} dev {link}"));
        ip(&format!("link set {link} up"));
        let (tx, rx) = std::sync::mpsc::channel();
        let connections = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (count, log) = (connections.clone(), heads.clone());
        let (theirs, far2) = (theirs.to_owned(), far.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // This thread only: its sockets, and the `ip` it runs, live in the new namespace.
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare");
            tx.send(nix::unistd::gettid().as_raw()).expect("tid");
            // Moved in by the test's namespace, then configured here.
            for _ in 0..500 {
                let there = Command::new("ip")
                    .args(["link", "show", &far2])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if there {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            ip("link set lo up");
            ip(&format!("addr add {theirs} dev {far2}"));
            ip(&format!("link set {far2} up"));
            let at = theirs.split('/').next().expect("address");
            let listener = TcpListener::bind((at, port)).expect("bind in the stand-in");
            ready_tx
                .send(listener.local_addr().expect("addr"))
                .expect("ready");
            for s in listener.incoming().take(64).flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let log = log.clone();
                std::thread::spawn(move || echo(s, &log));
            }
        });
        let tid: i32 = rx.recv().expect("the stand-in's thread id");
        ip(&format!("link set {far} netns {tid}"));
        let addr = ready_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the stand-in listens");
        Self {
            addr,
            connections,
            heads,
        }
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn echo(mut s: std::net::TcpStream, log: &Mutex<Vec<Vec<u8>>>) {
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(30)));
    let mut head = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if head.len() < 256 {
                    head.extend_from_slice(&buf[..n.min(256 - head.len())]);
                }
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(_) => return,
        }
    }
    log.lock().expect("lock").push(head);
    let _ = s.write_all(TRAILER);
    let _ = s.shutdown(Shutdown::Write);
}
