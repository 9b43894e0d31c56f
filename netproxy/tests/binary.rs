//! The `netproxy` binary: a `--policy` file, SIGHUP reload (validate, then swap; a bad file is
//! refused and the running policy stays), JSON decision lines. Targets are IP literals on
//! loopback, so nothing is ever looked up.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

fn get(proxy: u16, url: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", proxy)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn wait_for(lines: &mpsc::Receiver<String>, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(l) = lines.recv_timeout(Duration::from_millis(200)) {
            if l.contains(what) {
                return l;
            }
        }
    }
    panic!("no log line with {what:?}");
}

#[test]
fn the_policy_file_reloads_on_sighup_and_a_bad_file_keeps_the_old_policy() {
    let upstream = TcpListener::bind("127.0.0.1:0").expect("bind");
    let up = upstream.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for s in upstream.incoming().flatten() {
            let mut s = s;
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    let dir = tempfile::tempdir().expect("dir");
    let policy = dir.path().join("policy.json");
    std::fs::write(&policy, r#"{"allow":["198.51.100.7:80"]}"#).expect("write");
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_netproxy"))
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--allow-cidr",
            "127.0.0.1/32",
            "--policy",
        ])
        .arg(&policy)
        .stderr(Stdio::piped())
        .spawn()
        .expect("netproxy starts");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    wait_for(&lines, "netproxy listening");
    let url = format!("http://127.0.0.1:{up}/");
    assert!(
        get(port, &url).starts_with("HTTP/1.1 403"),
        "not in the first policy"
    );
    let line = wait_for(&lines, "\"decision\"");
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
    for field in [
        "client", "raw_host", "host", "port", "rule", "resolved", "chosen", "decision", "reason",
    ] {
        assert!(v.get(field).is_some(), "{field} in {line}");
    }

    std::fs::write(&policy, format!(r#"{{"allow":["127.0.0.1:{up}"]}}"#)).expect("write");
    let hup = |pid: u32| {
        Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .expect("kill")
    };
    hup(child.id());
    wait_for(&lines, "policy reloaded");
    assert!(
        get(port, &url).starts_with("HTTP/1.1 200"),
        "allowed after the reload"
    );

    std::fs::write(&policy, r#"{"allow":["not a rule"]}"#).expect("write");
    hup(child.id());
    wait_for(&lines, "policy reload refused");
    assert!(
        get(port, &url).starts_with("HTTP/1.1 200"),
        "the running policy stays"
    );
    let _ = child.kill();
    let _ = child.wait();
}
