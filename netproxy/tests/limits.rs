//! Issue 14's smaller cases through the binary, each in its own network namespace: at the file
//! descriptor limit a waiting client is told 503 instead of being left queued; `NETPROXY_LOG`
//! filters the log like the other two binaries' variables.

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
