//! `fake-dockerd` started as a program, used with the real docker CLI the way docs/development.md shows
//! a newcomer: version, ps, run -d, exec -i, logs -f, network create/ls/rm — directly, and with
//! sockproxy in front of it.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sockproxy_tests::bins;
use sockproxy_tests::cli::{docker, docker_stdin, docker_with, spawn_docker};
use sockproxy_tests::engine::TEST_IMAGE;
use sockproxy_tests::stack::StackProxy;

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &Path, flavor: &str) -> (Daemon, PathBuf) {
    let sock = dir.join(format!("{flavor}.sock"));
    let child = Command::new(bins::fake_dockerd())
        .arg("--listen")
        .arg(&sock)
        .args(["--flavor", flavor])
        .stderr(Stdio::null())
        .spawn()
        .expect("fake-dockerd starts");
    let started = Instant::now();
    while UnixStream::connect(&sock).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "fake-dockerd did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (Daemon(child), sock)
}

#[test]
fn the_docker_cli_works_against_fake_dockerd_and_through_sockproxy() {
    let dir = tempfile::tempdir().expect("dir");
    let (_daemon, sock) = start(dir.path(), "debian-20.10");
    let v = docker(
        &sock,
        &[
            "version",
            "--format",
            "{{.Server.Version}} {{.Server.APIVersion}}",
        ],
    );
    assert_eq!(v.out().trim(), "20.10.24+dfsg1 1.41", "{}", v.stderr);
    assert!(docker(&sock, &["ps", "-a"]).ok());

    let run = docker(
        &sock,
        &[
            "run",
            "-d",
            "--name",
            "demo",
            TEST_IMAGE,
            "sh",
            "-c",
            "echo hello; sleep 600",
        ],
    );
    assert!(run.ok(), "{}", run.stderr);
    let exec = docker_stdin(
        &sock,
        &["exec", "-i", "demo", "cat"],
        b"typed into exec -i\n",
    );
    assert_eq!(exec.out(), "typed into exec -i\n", "{}", exec.stderr);
    let mut logs = spawn_docker(&sock, &["logs", "-f", "demo"]);
    let first = logs
        .lines()
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_default();
    assert_eq!(first, "hello");
    assert!(
        logs.child.try_wait().expect("status").is_none(),
        "logs -f keeps following"
    );
    drop(logs);

    assert!(docker(&sock, &["network", "create", "demo-net"]).ok());
    let ls = docker(&sock, &["network", "ls", "--format", "{{.Name}}"]);
    assert!(ls.out().lines().any(|l| l == "demo-net"), "{}", ls.out());
    assert!(docker(&sock, &["network", "rm", "demo-net"]).ok());

    // The same engine behind a stack's proxy: the stack sees and changes only its own.
    let proxy = StackProxy::start(&sock, "deer-flow-", false);
    let own = docker(
        proxy.socket(),
        &[
            "run",
            "-d",
            "--name",
            "deer-flow-sandbox-demo",
            TEST_IMAGE,
            "sleep",
            "600",
        ],
    );
    assert!(own.ok(), "{}", own.stderr);
    let ps = docker(proxy.socket(), &["ps", "-a", "--format", "{{.Names}}"]);
    assert_eq!(ps.out(), "deer-flow-sandbox-demo\n");
    let refused = docker(proxy.socket(), &["stop", "demo"]);
    assert!(
        refused
            .stderr
            .contains("sockproxy: containers.stop: demo is not one of this stack's sandboxes"),
        "{}",
        refused.stderr
    );
}

#[test]
fn the_docker_29_flavor_negotiates_or_refuses_old_clients() {
    let dir = tempfile::tempdir().expect("dir");
    let (_daemon, sock) = start(dir.path(), "docker-29");
    for cli in sockproxy_tests::cli::clis() {
        let v = docker_with(
            &cli,
            &sock,
            &["version", "--format", "{{.Server.Version}}"],
            None,
            Duration::from_secs(30),
        );
        if v.ok() {
            assert_eq!(v.out().trim(), "29.0.0");
        } else {
            // Debian's CLI speaks at most API 1.41; Docker 29.0 requires 1.44.
            assert!(
                v.stderr
                    .contains("is too old. Minimum supported API version is 1.44"),
                "{}: {}",
                cli.display(),
                v.stderr
            );
        }
    }
}
