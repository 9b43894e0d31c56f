//! Socket activation (issue 40, point 5), run the way systemd runs it: `systemd-socket-activate`
//! (from the systemd package) makes the listening socket, then on the first connection execs
//! the program with `LISTEN_FDS`/`LISTEN_PID`. sockproxy and `lifecycle serve` answer on the
//! socket they were handed, leave it in place when they exit (it is systemd's, for the next
//! start), and refuse, in one line, a socket at another path than `--listen`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sockproxy_tests::bins;
use sockproxy_tests::engine::TEST_IMAGE;
use sockproxy_tests::fake::{FakeEngine, Flavor};
use sockproxy_tests::raw;
use sockproxy_tests::skip::skip;
use sockproxy_tests::stack::StackProxy;

/// `systemd-socket-activate -l SOCKET PROGRAM ARGS…`, its stderr in `log`; `None` (after a skip
/// notice for `test`) where the tool is not installed.
fn activated(
    test: &str,
    socket: &Path,
    program: &Path,
    args: &[String],
    log: &Path,
) -> Option<Child> {
    let have = Command::new("systemd-socket-activate")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        skip(
            test,
            "socket activation: systemd-socket-activate is not installed",
            "apt-get install systemd, as .ci/run does",
        );
        return None;
    }
    let child = Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(socket)
        .arg(program)
        .args(args)
        .env_remove("DOCKER_HOST")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"))
        .spawn()
        .expect("systemd-socket-activate starts");
    // The activator makes the socket before it waits for a connection.
    let start = Instant::now();
    while !socket.exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "no socket made");
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(child)
}

/// SIGTERM, then the exit status (a hang guard only: SIGKILL after 30 s fails the test).
fn terminate(mut child: Child) -> std::process::ExitStatus {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    wait(&mut child)
}

fn wait(child: &mut Child) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the program did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn sockproxy_serves_the_socket_systemd_passes_and_leaves_it() {
    let test = "sockproxy_serves_the_socket_systemd_passes_and_leaves_it";
    let engine = FakeEngine::start(Flavor::Debian2010);
    let dir = tempfile::tempdir().expect("dir");
    let socket = dir.path().join("docker.sock");
    let log = dir.path().join("stderr");
    let upstream = format!("unix://{}", engine.socket().display());
    let args = strings(&[
        "--listen",
        &socket.display().to_string(),
        "--prefix",
        "deer-flow-",
        "--upstream",
        &upstream,
    ]);
    let Some(child) = activated(test, &socket, &bins::sockproxy(), &args, &log) else {
        return;
    };
    let r = raw::get(&socket, "/_ping").expect("answered on the passed socket");
    assert_eq!((r.status, r.text()), (200, "OK".to_owned()));
    let r = raw::get(&socket, "/containers/other/json").expect("answered");
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(terminate(child).success());
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("socket_activation=true"), "{text}");
    assert!(socket.exists(), "the socket is systemd's: it stays");
}

#[test]
fn sockproxy_refuses_a_passed_socket_at_another_path() {
    let test = "sockproxy_refuses_a_passed_socket_at_another_path";
    let dir = tempfile::tempdir().expect("dir");
    let socket = dir.path().join("a.sock");
    let listen = dir.path().join("b.sock");
    let log = dir.path().join("stderr");
    let args = strings(&[
        "--listen",
        &listen.display().to_string(),
        "--prefix",
        "deer-flow-",
    ]);
    let Some(mut child) = activated(test, &socket, &bins::sockproxy(), &args, &log) else {
        return;
    };
    // The first connection starts the program, which refuses and exits.
    let _ = raw::get(&socket, "/_ping");
    let status = wait(&mut child);
    assert_eq!(status.code(), Some(1));
    let text = std::fs::read_to_string(&log).expect("log");
    let last = text.lines().last().unwrap_or("");
    assert_eq!(
        last,
        format!(
            "sockproxy: cannot listen: systemd passed the socket at {}, but --listen is {}: make them the same path",
            socket.display(),
            listen.display()
        )
    );
    assert!(!listen.exists(), "nothing made at --listen");
}

#[test]
fn lifecycle_serve_serves_the_socket_systemd_passes_and_leaves_it() {
    let test = "lifecycle_serve_serves_the_socket_systemd_passes_and_leaves_it";
    let engine = FakeEngine::start(Flavor::Debian2010);
    let proxy = StackProxy::start(engine.socket(), "deer-flow-", false);
    let dir = tempfile::tempdir().expect("dir");
    let state: PathBuf = dir.path().join("state");
    std::fs::create_dir(&state).expect("state dir");
    let socket = dir.path().join("provider.sock");
    let log = dir.path().join("stderr");
    let docker_host = format!("unix://{}", proxy.socket().display());
    let args = strings(&[
        "--docker-host",
        &docker_host,
        "--prefix",
        "deer-flow-",
        "--mode",
        "open",
        "--state-dir",
        &state.display().to_string(),
        "--image",
        TEST_IMAGE,
        "serve",
        "--listen",
        &socket.display().to_string(),
    ]);
    let Some(child) = activated(test, &socket, &bins::lifecycle(), &args, &log) else {
        return;
    };
    let r = raw::get(&socket, "/v1/sandboxes").expect("answered on the passed socket");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["sandboxes"], serde_json::json!([]));
    let status = terminate(child);
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(status.success(), "{status:?}: {text}");
    assert!(text.contains("socket_activation=true"), "{text}");
    assert!(socket.exists(), "the socket is systemd's: it stays");
}
