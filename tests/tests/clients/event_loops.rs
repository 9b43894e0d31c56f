//! The sockproxy program with several runtime workers (`--worker-threads`, given here by its
//! old name `--event-loops`), as its clients and its operator see it: the workers are threads
//! of their own, clients at once are all served, and on SIGTERM every stream keeps flowing
//! through the grace period while every decision line reaches the log (as it runs, and what is
//! queued at exit).

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use sockproxy_tests::bins;
use sockproxy_tests::fake::{FakeEngine, Flavor};
use sockproxy_tests::raw;

/// The proxy, killed if the test ends early.
struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect();
    names.sort();
    names
}

fn wait_for(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn create(engine: &Path, name: &str) {
    let body = br#"{"Image":"busybox","Cmd":["sleep","600"]}"#;
    let r = raw::request(
        engine,
        "POST",
        &format!("/containers/create?name={name}"),
        Some(body),
    )
    .expect("create");
    assert_eq!(r.status, 201, "{}", r.text());
}

#[test]
fn three_event_loops_serve_clients_at_once_and_drain_on_sigterm() {
    let engine = FakeEngine::start(Flavor::Debian2010);
    let dir = tempfile::tempdir().expect("dir");
    let sock = dir.path().join("stack.sock");
    let log = dir.path().join("sockproxy.log");
    let child = bins::sockproxy_command(&sock, engine.socket(), "deer-flow-")
        .args(["--event-loops", "3", "--shutdown-grace", "3"])
        .env_remove("SOCKPROXY_LOG")
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("sockproxy starts");
    let mut proxy = Proxy(child);
    wait_for("the socket", Duration::from_secs(20), || sock.exists());

    // The workers are named sp-loop-0…: there are three, no fourth.
    let pid = proxy.0.id();
    let loops = || {
        let threads = thread_names(pid);
        ["sp-loop-1", "sp-loop-2"]
            .iter()
            .all(|l| threads.iter().any(|t| t == l))
    };
    wait_for("the event-loop threads", Duration::from_secs(20), loops);
    let threads = thread_names(pid);
    assert!(!threads.iter().any(|t| t == "sp-loop-3"), "{threads:?}");

    // Six clients at once, three kept-alive pings each.
    let ping = b"GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n";
    let last = b"GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n";
    let mut three = ping.repeat(2);
    three.extend_from_slice(last);
    let clients: Vec<_> = (0..6)
        .map(|_| {
            let (sock, three) = (sock.clone(), three.clone());
            std::thread::spawn(move || raw::exchange(&sock, &three).expect("answers"))
        })
        .collect();
    for c in clients {
        let answers = c.join().expect("client");
        assert_eq!(answers.len(), 3);
        for a in answers {
            assert_eq!((a.status, a.text().as_str()), (200, "OK"));
        }
    }

    // The decision lines reach the log soon after, with no shutdown to flush them.
    let decision_lines = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" decision "))
            .count()
    };
    wait_for(
        "the 18 pings' lines in the log",
        Duration::from_secs(10),
        || decision_lines() == 6 * 3,
    );

    // Three event streams at once.
    let mut streams: Vec<raw::Conn> = (0..3)
        .map(|_| {
            let c = raw::Conn::open(&sock, b"GET /events HTTP/1.1\r\nHost: docker\r\n\r\n")
                .expect("events");
            assert_eq!(c.status, 200);
            c
        })
        .collect();

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(proxy.0.id()).expect("pid")),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    wait_for("the socket file to go", Duration::from_secs(5), || {
        !sock.exists()
    });
    // In the grace period every stream still carries the stack's events.
    create(engine.socket(), "deer-flow-sandbox-loops");
    create(engine.socket(), "other-stack-loops");
    for (i, s) in streams.iter_mut().enumerate() {
        let seen = s.read_until(Duration::from_secs(10), |b| {
            String::from_utf8_lossy(b).contains("deer-flow-sandbox-loops")
        });
        let text = String::from_utf8_lossy(&seen);
        assert!(
            text.contains("deer-flow-sandbox-loops"),
            "stream {i}: {text}"
        );
        assert!(!text.contains("other-stack-loops"), "stream {i}: {text}");
    }

    let start = Instant::now();
    let status = loop {
        if let Some(s) = proxy.0.try_wait().expect("status") {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    let text = std::fs::read_to_string(&log).expect("log");
    let decisions = text.lines().filter(|l| l.contains(" decision ")).count();
    assert_eq!(decisions, 6 * 3 + 3, "{text}");
    assert!(text.contains("worker_threads=3"), "{text}");
    // Set by its old name, which still works for a release: the log says so.
    assert!(
        text.contains("--event-loops (SOCKPROXY_EVENT_LOOPS) is now --worker-threads"),
        "{text}"
    );
}
