//! The `netproxy` binary: a `--policy` file, SIGHUP reload (validate, then swap; a bad file is
//! refused and the running policy stays), JSON decision lines. Targets are IP literals on
//! loopback, so nothing is ever looked up.

mod common;

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::bounded::{OutputWithin, SHORT};
use common::{wait_for, Netproxy};

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
    let np = Netproxy::start(&[OsStr::new("--policy"), policy.as_os_str()]);
    let (port, lines) = (np.port, &np.lines);
    let url = format!("http://127.0.0.1:{up}/");
    assert!(
        get(port, &url).starts_with("HTTP/1.1 403"),
        "not in the first policy"
    );
    let line = wait_for(lines, "\"decision\"");
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
    for field in [
        "client", "method", "raw_host", "host", "port", "rule", "resolved", "decision", "reason",
        "status",
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
    hup(np.pid());
    wait_for(lines, "policy reloaded");
    assert!(
        get(port, &url).starts_with("HTTP/1.1 200"),
        "allowed after the reload"
    );

    std::fs::write(&policy, r#"{"allow":["not a rule"]}"#).expect("write");
    hup(np.pid());
    wait_for(lines, "policy reload refused");
    assert!(
        get(port, &url).starts_with("HTTP/1.1 200"),
        "the running policy stays"
    );
}

/// Issue 38, finding 7: a policy file that is a JSON array is refused at start (one line on
/// stderr, exit status 2: bad configuration) and on reload (the running policy stays).
#[test]
fn an_array_policy_file_is_refused_at_start_and_on_reload() {
    let dir = tempfile::tempdir().expect("dir");
    let policy = dir.path().join("policy.json");
    std::fs::write(&policy, r#"[["*.allowed.test","evil.test"],[]]"#).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_netproxy"))
        .args(["--listen", "127.0.0.1:0", "--policy"])
        .arg(&policy)
        .output_within(SHORT)
        .expect("netproxy runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with("netproxy: policy file ")
            && stderr.contains("must be a JSON object")
            && stderr.contains("not an array"),
        "{stderr}"
    );

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
    std::fs::write(&policy, format!(r#"{{"allow":["127.0.0.1:{up}"]}}"#)).expect("write");
    let np = Netproxy::start(&[OsStr::new("--policy"), policy.as_os_str()]);
    let url = format!("http://127.0.0.1:{up}/");
    assert!(get(np.port, &url).starts_with("HTTP/1.1 200"), "allowed");
    std::fs::write(
        &policy,
        format!(r#"[["127.0.0.2:{up}"],["127.0.0.1:{up}"]]"#),
    )
    .expect("write");
    let hup = Command::new("kill")
        .args(["-HUP", &np.pid().to_string()])
        .status()
        .expect("kill");
    assert!(hup.success());
    let line = wait_for(&np.lines, "policy reload refused");
    assert!(line.contains("not an array"), "{line}");
    assert!(
        get(np.port, &url).starts_with("HTTP/1.1 200"),
        "the running policy stays"
    );
}

/// Issues 38 and 40: a start-up error is printed once, as one line, whatever `RUST_BACKTRACE`
/// says (no `Caused by:` block, no backtrace, no usage text, no cause said twice): exit 2 for
/// bad configuration (a value clap refuses, a rule, the policy file), 1 for a failure at run
/// time (the listen address taken). Stderr is compared byte for byte.
#[test]
fn a_start_up_error_is_one_line_with_its_exit_code() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let dir = tempfile::tempdir().expect("dir");
    let missing = dir.path().join("missing.json");
    let m = missing.display();
    let cases: [(Vec<String>, i32, String); 5] = [
        (
            vec!["--listen".into(), "nonsense".into()],
            2,
            "netproxy: invalid value 'nonsense' for '--listen <LISTEN>': invalid socket address syntax\n".into(),
        ),
        (
            vec!["--max-dials".into(), "many".into()],
            2,
            "netproxy: invalid value 'many' for '--max-dials <MAX_DIALS>': invalid digit found in string\n".into(),
        ),
        (
            vec!["--listen".into(), addr.clone(), "--allow".into(), "a..b.test".into()],
            2,
            "netproxy: --allow \"a..b.test\": malformed host\n".into(),
        ),
        (
            vec!["--listen".into(), addr.clone(), "--policy".into(), missing.display().to_string()],
            2,
            format!("netproxy: policy file {m}: No such file or directory (os error 2)\n"),
        ),
        (
            vec!["--listen".into(), addr.clone(), "--log-format".into(), "plain".into()],
            1,
            format!("netproxy: cannot listen on {addr}: Address already in use (os error 98)\n"),
        ),
    ];
    for (args, code, want) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_netproxy"))
            .args(&args)
            .env("RUST_BACKTRACE", "1")
            .env("NETPROXY_LOG", "off")
            .env_remove("NETPROXY_POLICY")
            .env_remove("NETPROXY_ALLOW")
            .output_within(SHORT)
            .expect("netproxy runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert_eq!(stderr, want, "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    drop(taken);
}
