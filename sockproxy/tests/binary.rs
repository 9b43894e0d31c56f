//! The `sockproxy` binary as an operator runs it: flags and their environment fallbacks, the
//! prefix rule, the socket file (mode, stale replacement, refusal to clobber), the engine
//! notice, JSON decision lines, and SIGTERM. Lives beside the binary because only this
//! package's tests are given its path.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// The suite's one bounded wait for a program (this package cannot depend on the tests crate).
#[allow(dead_code)]
#[path = "../../tests/src/bounded.rs"]
mod bounded;
use bounded::{OutputWithin, WaitWithin, SHORT};

const BIN: &str = env!("CARGO_BIN_EXE_sockproxy");

fn wait_for_socket(path: &Path, child: &mut Child) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if UnixStream::connect(path).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("sockproxy exited early ({status}): {err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("sockproxy did not listen on {}", path.display());
}

fn proxy(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (Child, PathBuf) {
    let listen = env
        .iter()
        .find(|(k, _)| *k == "SOCKPROXY_LISTEN")
        .map_or_else(|| dir.join("stack.sock"), |(_, v)| PathBuf::from(v));
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("DOCKER_HOST")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    if !env.iter().any(|(k, _)| *k == "SOCKPROXY_LISTEN") {
        cmd.arg("--listen").arg(&listen);
    }
    let mut child = cmd.spawn().expect("spawn sockproxy");
    wait_for_socket(&listen, &mut child);
    (child, listen)
}

fn request(sock: &Path, line: &str) -> String {
    let mut s = UnixStream::connect(sock).expect("connect");
    // A proxy that never answers fails the test rather than hanging it.
    s.set_read_timeout(Some(SHORT)).expect("timeout");
    write!(s, "{line}\r\nHost: docker\r\nConnection: close\r\n\r\n").expect("write");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    child.wait_within(SHORT).expect("exit")
}

fn running_as_root() -> bool {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("proc")) == 0
}

#[test]
fn a_prefix_breaking_the_rule_is_refused_with_the_rule() {
    let dir = tempfile::tempdir().expect("dir");
    for bad in ["deer-flow", "-x-", "deer flow-"] {
        let out = Command::new(BIN)
            .args(["--listen"])
            .arg(dir.path().join("s.sock"))
            .arg(format!("--prefix={bad}"))
            .output_within(SHORT)
            .expect("runs");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("^[a-zA-Z0-9][a-zA-Z0-9_.-]*[-_.]$"),
            "{bad}: {err}"
        );
        assert!(!dir.path().join("s.sock").exists(), "nothing is created");
    }
}

#[test]
fn env_fallbacks_json_decision_lines_and_the_engine_notice() {
    let dir = tempfile::tempdir().expect("dir");
    let listen = dir.path().join("env.sock");
    let missing = format!("unix://{}", dir.path().join("no-engine.sock").display());
    let listen_s = listen.display().to_string();
    let (mut child, sock) = proxy(
        dir.path(),
        &[],
        &[
            ("SOCKPROXY_LISTEN", &listen_s),
            ("SOCKPROXY_PREFIX", "deer-flow-"),
            ("SOCKPROXY_UPSTREAM", &missing),
            ("SOCKPROXY_STACK", "atlas"),
            ("SOCKPROXY_LOG_FORMAT", "json"),
            ("SOCKPROXY_INFO", "deny"),
        ],
    );
    assert_eq!(sock, listen);
    let info = request(&sock, "GET /v1.41/info HTTP/1.1");
    assert!(info.starts_with("HTTP/1.1 403"), "{info}");
    let ping = request(&sock, "GET /_ping HTTP/1.1");
    assert!(ping.starts_with("HTTP/1.1 502"), "{ping}");
    assert!(ping.contains("sockproxy: upstream unavailable: "), "{ping}");
    terminate(&mut child);
    let stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map_while(Result::ok)
        .map(|l| serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let notice = lines
        .iter()
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("no Docker engine answers"))
        })
        .expect("one line says no engine answers");
    assert!(notice["message"]
        .as_str()
        .unwrap_or("")
        .contains("start one"));
    let decisions: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["message"] == "decision")
        .collect();
    assert_eq!(decisions.len(), 2, "one line per decision: {lines:?}");
    let d = decisions[0];
    for field in [
        "stack",
        "peer_uid",
        "peer_pid",
        "op",
        "target",
        "decision",
        "reason",
        "status",
        "duration_ms",
    ] {
        assert!(d.get(field).is_some(), "missing {field}: {d}");
    }
    assert_eq!(d["stack"], "atlas");
    assert_eq!(d["op"], "system.info");
    assert_eq!(d["decision"], "deny");
    assert_eq!(d["reason"], "endpoint_not_allowed");
    assert_eq!(d["status"], 403);
    assert_eq!(d["target"], "/v1.41/info");
    assert_eq!(d["peer_pid"].as_u64(), Some(u64::from(std::process::id())));
    assert_eq!(decisions[1]["status"], 502);
}

#[test]
fn socket_mode_stale_files_and_sigterm() {
    let dir = tempfile::tempdir().expect("dir");
    let sock = dir.path().join("stack.sock");
    // A stale socket (its listener is gone) is replaced.
    drop(UnixListener::bind(&sock).expect("bind"));
    assert!(sock.exists());
    let (mut child, sock) = proxy(
        dir.path(),
        &[
            "--prefix",
            "deer-flow-",
            "--upstream",
            "unix:///nonexistent.sock",
        ],
        &[],
    );
    let mode = std::fs::metadata(&sock).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    // A live socket is not taken over.
    let out = Command::new(BIN)
        .arg("--listen")
        .arg(&sock)
        .args(["--prefix", "deer-flow-"])
        .output_within(SHORT)
        .expect("runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another process is serving on this socket")
    );
    let status = terminate(&mut child);
    assert!(status.success(), "{status}");
    assert!(!sock.exists(), "the socket file is removed on exit");

    // A file that is not a socket is never replaced.
    std::fs::write(&sock, b"precious").expect("write");
    let out = Command::new(BIN)
        .arg("--listen")
        .arg(&sock)
        .args(["--prefix", "deer-flow-"])
        .output_within(SHORT)
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a socket"));
    assert_eq!(std::fs::read(&sock).expect("read"), b"precious");

    std::fs::remove_file(&sock).expect("rm");
    let (mut child, sock) = proxy(
        dir.path(),
        &["--prefix", "deer-flow-", "--socket-mode", "0600"],
        &[],
    );
    let mode = std::fs::metadata(&sock).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    terminate(&mut child);

    // --socket-group hands the socket to a group (changing it needs root or membership).
    if running_as_root() {
        let gid: u32 = 4242;
        let (mut child, sock) = proxy(
            dir.path(),
            &["--prefix", "deer-flow-", "--socket-group", &gid.to_string()],
            &[],
        );
        let meta = std::fs::metadata(&sock).expect("stat");
        assert_eq!(std::os::unix::fs::MetadataExt::gid(&meta), gid);
        terminate(&mut child);
    }
}

/// stdcopy framing: stream 1 (stdout), three zero bytes, the big-endian length.
fn frame(data: &[u8]) -> Vec<u8> {
    let mut out = vec![1, 0, 0, 0];
    out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(0).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// An engine stand-in, enough for `docker logs -f`: ping, inspect of one in-scope container,
/// and a followed log that sends "first", pauses, then "second" and ends.
fn streaming_engine(sock: &Path) {
    let listener = UnixListener::bind(sock).expect("bind engine");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = stream;
                loop {
                    let mut head = Vec::new();
                    let mut b = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if s.read(&mut b).unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(b[0]);
                    }
                    let line = String::from_utf8_lossy(&head).into_owned();
                    let common =
                        "Api-Version: 1.41\r\nOstype: linux\r\nDocker-Experimental: false\r\n";
                    if line.contains("/logs") {
                        let first = frame(b"first\n");
                        let second = frame(b"second\n");
                        let _ = write!(s, "HTTP/1.1 200 OK\r\n{common}Content-Type: application/vnd.docker.raw-stream\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n", first.len());
                        let _ = s.write_all(&first);
                        let _ = s.write_all(b"\r\n");
                        std::thread::sleep(Duration::from_millis(1500));
                        let _ = write!(s, "{:x}\r\n", second.len());
                        let _ = s.write_all(&second);
                        let _ = s.write_all(b"\r\n0\r\n\r\n");
                        return;
                    }
                    let body = if line.contains("/_ping") {
                        "OK".to_owned()
                    } else {
                        format!(
                            r#"{{"Id":"{}","Name":"/deer-flow-sandbox-x","Config":{{"Tty":false}},"State":{{"Running":true}}}}"#,
                            "a".repeat(64)
                        )
                    };
                    let body = if line.starts_with("HEAD") {
                        String::new()
                    } else {
                        body
                    };
                    let _ = write!(s, "HTTP/1.1 200 OK\r\n{common}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                }
            });
        }
    });
}

#[test]
fn sigterm_lets_docker_logs_f_finish_and_refuses_new_clients() {
    let dir = tempfile::tempdir().expect("dir");
    let engine = dir.path().join("engine.sock");
    streaming_engine(&engine);
    let upstream = format!("unix://{}", engine.display());
    let metrics = dir.path().join("metrics.sock");
    let metrics_at = metrics.display().to_string();
    let (mut child, sock) = proxy(
        dir.path(),
        &[
            "--prefix",
            "deer-flow-",
            "--upstream",
            &upstream,
            "--shutdown-grace",
            "10",
            "--metrics-listen",
            &metrics_at,
        ],
        &[],
    );
    assert!(UnixStream::connect(&metrics).is_ok(), "metrics served");
    let config = tempfile::tempdir().expect("dir");
    let mut logs = Command::new("docker")
        .args(["logs", "-f", "deer-flow-sandbox-x"])
        .env("DOCKER_HOST", format!("unix://{}", sock.display()))
        .env("DOCKER_CONFIG", config.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the docker CLI runs");
    let mut out = BufReader::new(logs.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("first line");
    assert_eq!(first, "first\n", "the stream is flowing");
    // The stream is in flight; the operator stops the proxy.
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let start = Instant::now();
    while sock.exists() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!sock.exists(), "the socket file is removed at once");
    assert!(
        UnixStream::connect(&sock).is_err(),
        "new connections are refused"
    );
    // The metrics endpoint goes with it, while the stream is still in flight: a replacement
    // started meanwhile can bind it.
    assert!(
        !metrics.exists(),
        "the metrics socket file is removed with the main one"
    );
    assert!(UnixStream::connect(&metrics).is_err(), "no scrape answered");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("rest of the stream");
    assert_eq!(rest, "second\n", "the stream finished");
    let cli = logs.wait_within(SHORT).expect("docker logs exits");
    assert!(cli.success(), "docker logs -f ended cleanly: {cli}");
    let status = child.wait_within(SHORT).expect("exit");
    assert!(status.success(), "{status}");
}

#[test]
fn a_policy_file_is_read_printed_and_checked() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("stack.toml");
    std::fs::write(
        &file,
        "allow-cap = [\"CHOWN\", \"FOWNER\"]\nallow-seccomp-unconfined = true\ninfo = \"deny\"\n",
    )
    .expect("write");
    let run = |extra: &[&str]| {
        std::process::Command::new(BIN)
            .args(["--listen", "/tmp/unused.sock", "--prefix", "deer-flow-"])
            .args(extra)
            .env_remove("DOCKER_HOST")
            .output_within(SHORT)
            .expect("runs")
    };
    let f = file.display().to_string();
    let out = run(&["--policy", &f, "--allow-cap", "SETUID", "--print-policy"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("allow-cap = [\"SETUID\", \"CHOWN\", \"FOWNER\"]"),
        "{text}"
    );
    assert!(text.contains("allow-seccomp-unconfined = true"), "{text}");
    assert!(text.contains("info = \"deny\""), "{text}");
    assert!(text.contains("deer-flow-sandbox-*  open: yes"), "{text}");
    std::fs::write(&file, "allow-privileged = true\n").expect("write");
    let out = run(&["--policy", &f, "--print-policy"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown field `allow-privileged`"), "{err}");
}

/// A start-up error is printed once, as one line, whatever `RUST_BACKTRACE` says: exit 2 for
/// bad configuration (clap's refusals too, without their usage text: issue 40), 1 for a failure
/// at run time.
#[test]
fn a_start_up_error_is_one_line_with_its_exit_code() {
    let dir = tempfile::tempdir().expect("dir");
    let sock = dir.path().join("s.sock");
    let not_a_socket = dir.path().join("file");
    std::fs::write(&not_a_socket, b"x").expect("write");
    let cases: [(Vec<String>, i32, String); 5] = [
        (
            vec!["--listen".into(), sock.display().to_string(), "--prefix".into(), "deer-flow-".into(), "--max-connections".into(), "many".into()],
            2,
            "sockproxy: invalid value 'many' for '--max-connections <MAX_CONNECTIONS>': invalid digit found in string".into(),
        ),
        (
            vec!["--listen".into(), sock.display().to_string()],
            2,
            "sockproxy: the following required arguments were not provided: --prefix <PREFIX>".into(),
        ),
        (
            vec!["--listen".into(), sock.display().to_string(), "--prefix".into(), "deer-flow".into()],
            2,
            "sockproxy: --prefix: prefix \"deer-flow\" must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*[-_.]$ (start alphanumeric, end with '-', '_' or '.')".into(),
        ),
        (
            vec![
                "--listen".into(),
                sock.display().to_string(),
                "--prefix".into(),
                "deer-flow-".into(),
                "--min-api-version".into(),
                "1.0".into(),
            ],
            2,
            "sockproxy: --min-api-version \"1.0\": expected MAJOR.MINOR, at least 1.24".into(),
        ),
        (
            vec![
                "--listen".into(),
                not_a_socket.display().to_string(),
                "--prefix".into(),
                "deer-flow-".into(),
                "--upstream".into(),
                format!("unix://{}", dir.path().join("engine.sock").display()),
            ],
            1,
            format!(
                "sockproxy: cannot listen: {}: exists and is not a socket; refusing to replace it",
                not_a_socket.display()
            ),
        ),
    ];
    for (args, code, want) in cases {
        let out = Command::new(BIN)
            .args(&args)
            .env("RUST_BACKTRACE", "1")
            .env("SOCKPROXY_LOG", "off")
            .env_remove("DOCKER_HOST")
            .env_remove("SOCKPROXY_PREFIX")
            .env_remove("SOCKPROXY_MAX_CONNECTIONS")
            .output_within(SHORT)
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err, format!("{want}\n"), "{args:?}: byte for byte");
    }
}

/// `--print-policy` needs no `--listen` (it never listens); anything else without it is a usage
/// error (exit 2, one line), naming the flag.
#[test]
fn print_policy_needs_no_listen() {
    let out = Command::new(BIN)
        .args(["--prefix", "deer-flow-", "--print-policy"])
        .env_remove("SOCKPROXY_LISTEN")
        .env_remove("DOCKER_HOST")
        .output_within(SHORT)
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("info = \"stack\""), "{text}");
    let out = Command::new(BIN)
        .args(["--prefix", "deer-flow-"])
        .env_remove("SOCKPROXY_LISTEN")
        .output_within(SHORT)
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "sockproxy: the following required arguments were not provided: --listen <LISTEN>\n"
    );
}
