//! Issue 40: a start-up error of `lifecycle` (and of `lifecycle serve`) is printed once, as one
//! line, whatever `RUST_BACKTRACE` says: exit 2 for bad configuration (a flag value clap
//! refuses, a bad prefix, a bad socket mode), 1 for a failure at run time (an engine address
//! nothing answers on, a socket that cannot be bound or that another provider serves on).
//! Stderr is compared byte for byte. No engine is needed: none is ever reached.

use std::path::Path;
use std::process::Command;

use sockproxy_tests::lc::lifecycle_base;

/// What the run printed on stderr, and its exit code.
fn run(mut cmd: Command) -> (Option<i32>, String) {
    let out = cmd
        .env("RUST_BACKTRACE", "1")
        .env_remove("LIFECYCLE_LOG")
        .env_remove("LIFECYCLE_SOCKET_MODE")
        .env_remove("LIFECYCLE_SANDBOX_PORT")
        .output()
        .expect("lifecycle runs");
    assert!(out.stdout.is_empty(), "nothing on stdout");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn base(engine: &Path, state: &Path) -> Command {
    lifecycle_base(engine, "deer-flow-", "open", state)
}

#[test]
fn a_start_up_error_is_one_line_with_its_exit_code() {
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join("state");
    let engine = dir.path().join("no-engine.sock");
    let e = engine.display();
    let missing_dir = dir.path().join("missing").join("serve.sock");
    let m = missing_dir.display();
    // A socket another process answers on.
    let taken = dir.path().join("taken.sock");
    let _other = std::os::unix::net::UnixListener::bind(&taken).expect("bind");
    let t = taken.display();

    let mut bad_value = base(&engine, &state);
    bad_value.args(["--sandbox-port", "many", "ls"]);
    let mut bad_prefix = Command::new(sockproxy_tests::bins::lifecycle());
    bad_prefix
        .arg("--docker-host")
        .arg(format!("unix://{e}"))
        .args(["--prefix", "deer-flow", "--mode", "open", "--state-dir"])
        .arg(&state)
        .arg("ls");
    let mut bad_mode = base(&engine, &state);
    bad_mode
        .args(["serve", "--socket-mode", "0999", "--listen"])
        .arg(dir.path().join("s.sock"));
    let mut no_engine = base(&engine, &state);
    no_engine.arg("ls");
    let mut no_dir = base(&engine, &state);
    no_dir.args(["serve", "--listen"]).arg(&missing_dir);
    let mut served = base(&engine, &state);
    served.args(["serve", "--listen"]).arg(&taken);
    let mut small = base(&engine, &state);
    small.args(["--sandbox-memory", "1k", "ls"]);
    let mut no_pids = base(&engine, &state);
    no_pids.args(["--sidecar-pids-limit", "0", "ls"]);

    let cases = [
        (
            "a flag value clap refuses",
            bad_value,
            2,
            "lifecycle: invalid value 'many' for '--sandbox-port <SANDBOX_PORT>': invalid digit found in string\n".to_owned(),
        ),
        (
            "a bad prefix",
            bad_prefix,
            2,
            "lifecycle: --prefix: prefix \"deer-flow\" must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*[-_.]$ (start alphanumeric, end with '-', '_' or '.')\n".to_owned(),
        ),
        (
            "a bad socket mode",
            bad_mode,
            2,
            "lifecycle serve: --socket-mode: \"0999\": expected octal bits such as 0660\n"
                .to_owned(),
        ),
        (
            "no engine at --docker-host",
            no_engine,
            1,
            format!("lifecycle: list sandboxes: cannot reach the engine at unix://{e}: Socket not found: {e}\n"),
        ),
        (
            "the socket's directory missing",
            no_dir,
            1,
            format!("lifecycle serve: cannot listen on {m}: No such file or directory (os error 2)\n"),
        ),
        (
            "a sandbox memory limit dockerd would refuse",
            small,
            2,
            "lifecycle: --sandbox-memory: \"1k\": expected a size such as 512m or 2g (b, k, m or g; at least 6m)\n".to_owned(),
        ),
        (
            "no process limit for the sidecar",
            no_pids,
            2,
            "lifecycle: --sidecar-pids-limit: 0: expected a number of processes from 1 to 4194304\n".to_owned(),
        ),
        (
            "another process serving on the socket",
            served,
            1,
            format!("lifecycle serve: cannot listen on {t}: another process is serving on this socket; refusing to take it\n"),
        ),
    ];
    for (what, cmd, code, want) in cases {
        let (got_code, got) = run(cmd);
        assert_eq!(got_code, Some(code), "{what}: {got}");
        assert_eq!(got, want, "{what}");
    }
}
