//! Where this build's programs are, the one way every test (and the bench) finds them: cargo
//! puts every binary of a build in `target/<profile>/`, and a test runs from its `deps/`
//! below. That holds the tests crate's own binaries (`fake-dockerd`, `lifecycle-cli`, `bench`),
//! which cargo builds before any test of this crate, and those of the other packages
//! (`sockproxy`, `netproxy`), which `cargo test --workspace` builds for their own tests
//! (`cargo build --workspace --bins` otherwise). `env!("CARGO_BIN_EXE_…")` cannot serve: it is
//! set only for this crate's own binaries, and only while compiling a test target.

use std::path::PathBuf;

/// `target/<profile>`: the directory of the running executable, or the one above when it runs
/// from `deps/` (a test does; the bench does not).
pub fn dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable's path");
    let dir = exe.parent().expect("the executable has a directory");
    match dir.file_name() {
        Some(n) if n == "deps" => dir.parent().expect("deps/ has a parent").to_owned(),
        _ => dir.to_owned(),
    }
}

/// The built program `name`; panics, saying how to build it, when it is not there.
pub fn path(name: &str) -> PathBuf {
    let p = dir().join(name);
    assert!(
        p.is_file(),
        "{} is not built (cargo test --workspace builds every binary; or cargo build --workspace --bins)",
        p.display()
    );
    p
}

/// The `lifecycle` program under test: `LIFECYCLE_TEST_BIN` when set (another build of it, e.g.
/// an older one, to see the race tests fail), else the tests crate's `lifecycle-cli`, which is
/// `lifecycle/src/main.rs` built here.
pub fn lifecycle() -> PathBuf {
    std::env::var_os("LIFECYCLE_TEST_BIN").map_or_else(|| path("lifecycle-cli"), PathBuf::from)
}

/// The fake engine as a program.
pub fn fake_dockerd() -> PathBuf {
    path("fake-dockerd")
}

/// The benchmark command.
pub fn bench() -> PathBuf {
    path("bench")
}

/// The proxy, from the `sockproxy` package.
pub fn sockproxy() -> PathBuf {
    path("sockproxy")
}

/// The proxy program listening at `listen` in front of the engine at `engine`, for prefix
/// `prefix`, its output discarded; the caller adds its own flags and where the log goes.
pub fn sockproxy_command(
    listen: &std::path::Path,
    engine: &std::path::Path,
    prefix: &str,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(sockproxy());
    cmd.arg("--listen")
        .arg(listen)
        .arg("--upstream")
        .arg(format!("unix://{}", engine.display()))
        .args(["--prefix", prefix])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cmd
}
