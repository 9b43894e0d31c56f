//! Issue 14's smaller cases through the binary, each in its own network namespace: at the file
//! descriptor limit a waiting client is told 503 instead of being left queued; `NETPROXY_LOG`
//! filters the log like the other two binaries' variables; and, in process, that the
//! network-change watcher takes its descriptor before anything is accepted.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::Duration;

use common::ns;
use common::{wait_for, Netproxy};

/// Case 11: at the descriptor limit, accept answers 503 `fd_limit` where it can.
#[test]
fn case11_at_the_fd_limit_clients_get_503() {
    if !ns::enter("case11_at_the_fd_limit_clients_get_503", &[]) {
        return;
    }
    // 48 descriptors: the runtime, the listener and the spare take some; idle clients the rest.
    let np = Netproxy::start_under(
        &["prlimit", "--nofile=48:48", "--"],
        &["--header-timeout-ms", "30000"],
        &[],
    );
    let held: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(("127.0.0.1", np.port)).expect("connect"))
        .collect();
    wait_for(&np.lines, "file descriptor limit");
    let mut last = held.last().expect("a client").try_clone().expect("clone");
    last.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut out = String::new();
    let _ = last.read_to_string(&mut out);
    let lower = out.to_ascii_lowercase();
    assert!(
        out.starts_with("HTTP/1.1 503") && lower.contains("x-netproxy-error: fd_limit\r\n"),
        "{out:?}"
    );
    drop(held);
}

/// Case 11: `NETPROXY_LOG` is an `EnvFilter`: with `netproxy::audit=warn` the decision lines
/// are left out while the rest stays.
#[test]
fn case11_netproxy_log_filters() {
    if !ns::enter("case11_netproxy_log_filters", &[]) {
        return;
    }
    let np =
        Netproxy::start_under::<&str>(&[], &[], &[("NETPROXY_LOG", "info,netproxy::audit=warn")]);
    let out = np.get("http://198.51.100.1/");
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    // The answer is in, so its decision line would have been written by now; a reload line
    // written after it marks the end of what to look at.
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &np.pid().to_string()])
        .status()
        .expect("kill");
    assert!(hup.success());
    let mut seen = Vec::new();
    loop {
        let line = np
            .lines
            .recv_timeout(Duration::from_secs(10))
            .expect("a policy reloaded line");
        if line.contains("policy reloaded") {
            break;
        }
        seen.push(line);
    }
    assert!(!seen.iter().any(|l| l.contains("\"decision\"")), "{seen:?}");
}

/// Issue 38, finding 6: past the first warning, every `fd_limit` 503 writes its decision line.
#[test]
fn f6_fd_limit_503s_write_their_decision_lines() {
    if !ns::enter("f6_fd_limit_503s_write_their_decision_lines", &[]) {
        return;
    }
    let np = Netproxy::start_under(
        &["prlimit", "--nofile=48:48", "--"],
        &["--header-timeout-ms", "30000"],
        &[],
    );
    let held: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(("127.0.0.1", np.port)).expect("connect"))
        .collect();
    wait_for(&np.lines, "file descriptor limit");
    let line = wait_for(&np.lines, "\"fd_limit\"");
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(
        (
            v["message"].as_str(),
            v["decision"].as_str(),
            v["status"].as_u64()
        ),
        (Some("decision"), Some("deny"), Some(503)),
        "{line}"
    );
    drop(held);
}

/// Issue 38, finding 2, through the binary: at the descriptor limit an interface read fails
/// (EMFILE). It used to be judged against an empty list (only the failing dial kept the
/// sidecar's own address from being reached); since issue 50, finding 1, a read that fails
/// after an announced change leaves the networks unknown, not the list from before the change:
/// the request is refused `own_networks_unknown` (503), and once descriptors are free again
/// the networks are read anew and the own address is refused `proxy_network`, though an
/// `--allow-cidr` covers it.
#[test]
fn f2_at_the_fd_limit_own_networks_stay_known() {
    use std::io::Write;
    if !ns::enter(
        "f2_at_the_fd_limit_own_networks_stay_known",
        &[
            "link add own0 type veth peer name own1",
            "addr add 10.77.0.1/24 dev own0",
            "link set own0 up",
            "link set own1 up",
        ],
    ) {
        return;
    }
    let port = common::free_port();
    let own = ns::Recorder::bind(&format!("10.77.0.1:{port}"));
    let np = Netproxy::start_under(
        &["prlimit", "--nofile=48:48", "--"],
        &[
            "--header-timeout-ms",
            "30000",
            "--allow-cidr",
            "10.0.0.0/8",
            "--allow",
            &format!("10.77.0.1:{port}"),
        ],
        &[],
    );
    // A connection the proxy has accepted (its refusal is answered and it stays open).
    let mut a = TcpStream::connect(("127.0.0.1", np.port)).expect("connect");
    a.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let ask = |a: &mut TcpStream, url: &str| -> String {
        write!(a, "GET {url} HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&got).contains('}') {
            match a.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    let first = ask(&mut a, "http://198.51.100.1/");
    assert!(first.starts_with("HTTP/1.1 403"), "{first}");
    // Every other descriptor taken by idle clients: of 64, those that fit are accepted and
    // the rest answered 503 `fd_limit`, one line each. Once the last line is out (and its
    // socket closed and the spare refilled), the table is full and stays so.
    // Descriptors numbered under the limit (one inherited from the test harness may sit
    // above it and takes no room).
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
    let room = 48 - fds();
    let held: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(("127.0.0.1", np.port)).expect("connect"))
        .collect();
    for _ in room..64 {
        wait_for(&np.lines, "\"fd_limit\"");
    }
    let full = (0..500).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        fds() == 48
    });
    assert!(full, "the descriptor table is full");
    // An interface change is announced, so the next vetting reads the interfaces: EMFILE.
    ns::ip("addr add 10.66.0.1/24 dev own0");
    let out = ask(&mut a, &format!("http://10.77.0.1:{port}/"));
    assert!(
        out.starts_with("HTTP/1.1 503")
            && out
                .to_ascii_lowercase()
                .contains("x-netproxy-error: own_networks_unknown\r\n"),
        "{out}"
    );
    wait_for(&np.lines, "cannot read the interfaces");
    assert_eq!(own.hits(), 0);
    drop(held);
    // Descriptors free again (the held clients' connections closed): read anew.
    let again = (0..250).find_map(|_| {
        std::thread::sleep(Duration::from_millis(20));
        let out = np.get(&format!("http://10.77.0.1:{port}/"));
        out.to_ascii_lowercase()
            .contains("x-netproxy-error: proxy_network\r\n")
            .then_some(out)
    });
    assert!(again.is_some(), "refused proxy_network once readable");
    wait_for(&np.lines, "the interfaces can be read again");
    assert_eq!(own.hits(), 0);
}

/// The network-change watcher's descriptor is taken when `watch` is called (the binary calls it
/// before it binds a listener), not later in its task: a task that ran after the clients had
/// filled the table found it full (changes never pushed to open tunnels) or took the descriptor
/// the accept loop had just freed to answer 503, which left case 11's last client unanswered.
#[test]
fn the_change_watcher_takes_its_descriptor_before_anything_is_accepted() {
    use std::os::fd::OwnedFd;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[derive(Debug, Default)]
    struct Counting(AtomicUsize);
    impl netproxy::own::Interfaces for Counting {
        fn networks(&self) -> Result<Vec<ipnet::IpNet>, netproxy::own::OwnUnknown> {
            Ok(Vec::new())
        }
        fn announcements(&self) -> Option<OwnedFd> {
            self.0.fetch_add(1, Ordering::SeqCst);
            std::fs::File::open("/dev/null").ok().map(OwnedFd::from)
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let args =
            netproxy::config::Args::load_from(["netproxy", "--allow", "x.test:80"]).expect("flags");
        let counting = Arc::new(Counting::default());
        let np = Arc::new(netproxy::proxy::NetProxy {
            interfaces: counting.clone(),
            ..netproxy::proxy::NetProxy::new(
                args.policy().expect("policy"),
                common::scripted::Scripted::with(&[]),
            )
        });
        np.watch();
        // Nothing awaited since: on this one-thread runtime no spawned task has run yet.
        assert_eq!(
            counting.0.load(Ordering::SeqCst),
            1,
            "taken by watch itself"
        );
        np.watch();
        tokio::task::yield_now().await;
        assert_eq!(counting.0.load(Ordering::SeqCst), 1, "started once");
    });
}
