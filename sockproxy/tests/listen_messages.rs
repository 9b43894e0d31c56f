//! Start-up messages about the listening socket that say what to do (issue 51, point 3), byte
//! for byte: its directory missing (named, with the command that makes it), its directory not
//! writable by the account the proxy runs as (named, with that uid), and `--socket-group` a
//! group the account is not in without `CAP_CHOWN`. Each exits 1 and leaves no socket behind.
//! The last two run the proxy as another account and need root: a notice without, a failure
//! under CI=true, which runs as root.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_sockproxy");

#[path = "../../tests/src/bounded.rs"]
#[allow(dead_code)]
mod bounded;
use bounded::{OutputWithin, SHORT};

fn dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("lm")
        .tempdir_in("/tmp")
        .expect("dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// The proxy's exit code and its one error line, run as `as_nobody` says.
fn start(listen: &Path, extra: &[&str], as_nobody: bool) -> (Option<i32>, String) {
    let mut cmd = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
        c
    } else {
        Command::new(BIN)
    };
    let out = cmd
        .args([
            "--prefix",
            "deer-flow-",
            "--upstream",
            "unix:///nonexistent.sock",
        ])
        .arg("--listen")
        .arg(listen)
        .args(extra)
        .env_remove("DOCKER_HOST")
        .output_within(SHORT)
        .expect("the proxy runs and exits");
    // The error is the last line; before it only the engine notice (no engine here) may be.
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let last = stderr
        .lines()
        .last()
        .map(|l| format!("{l}\n"))
        .unwrap_or_default();
    assert!(
        stderr
            .lines()
            .rev()
            .skip(1)
            .all(|l| l.contains("no Docker engine answers")),
        "{stderr}"
    );
    (out.status.code(), last)
}

fn root_or_notice(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true: {test} runs the proxy as another account and needs root"
    );
    eprintln!("NOTICE: {test}: skipped, not root (run the suite as root, as CI does)");
    false
}

#[test]
fn a_missing_listen_directory_is_named_with_the_command_that_makes_it() {
    let d = dir();
    let missing = d.path().join("run/sockproxy");
    let listen = missing.join("docker.sock");
    let (code, err) = start(&listen, &[], false);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err,
        format!(
            "sockproxy: cannot listen: {l}: the directory {m} does not exist: create it (mkdir -p {m}, owned by the user the program runs as) or listen elsewhere\n",
            l = listen.display(),
            m = missing.display()
        )
    );
    assert!(!missing.exists(), "nothing is made");
}

#[test]
fn a_listen_directory_the_account_cannot_write_is_named_with_its_uid() {
    let test = "a_listen_directory_the_account_cannot_write_is_named_with_its_uid";
    if !root_or_notice(test) {
        return;
    }
    let d = dir();
    let run = d.path().join("run");
    std::fs::create_dir(&run).expect("mkdir");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let listen = run.join("docker.sock");
    let (code, err) = start(&listen, &[], true);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err,
        format!(
            "sockproxy: cannot listen: {l}: the directory {r} is not writable by uid 65534, which this program runs as: make it that user's (chown) or listen elsewhere\n",
            l = listen.display(),
            r = run.display()
        )
    );
    assert!(!listen.exists());
}

#[test]
fn a_socket_group_the_account_is_not_in_says_so_and_how_to_join() {
    let test = "a_socket_group_the_account_is_not_in_says_so_and_how_to_join";
    if !root_or_notice(test) {
        return;
    }
    let d = dir();
    let run = d.path().join("run");
    std::fs::create_dir(&run).expect("mkdir");
    nix::unistd::chown(&run, Some(nix::unistd::Uid::from_raw(65534)), None).expect("chown");
    let listen = run.join("docker.sock");
    let (code, err) = start(&listen, &["--socket-group", "0"], true);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err,
        format!(
            "sockproxy: cannot listen: {l}: cannot give the socket group 0: uid 65534 is not a member of it and lacks CAP_CHOWN; add the user to the group (usermod -aG), run with CAP_CHOWN, or drop --socket-group\n",
            l = listen.display()
        )
    );
    assert!(!listen.exists(), "the socket made is removed again");
}
