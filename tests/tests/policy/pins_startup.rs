//! With `--allow-bind-root` and no way to pin, sockproxy does not start: one line saying why,
//! byte for byte, exit 1, and no socket left behind. Without `CAP_SYS_ADMIN` (`setpriv` drops
//! it from the bounding set); in a mount namespace whose mounts the engine does not see
//! (`unshare -m`, against the fake engine, which checks a bind source on its own view as
//! dockerd does); a pin directory another proxy holds, one inside a bind root, one that holds
//! files or mounts its tmpfs would hide.

use std::path::Path;
use std::process::Command;

use sockproxy_tests::bindroot::{can_pin, BindRootDir};
use sockproxy_tests::bins;
use sockproxy_tests::fake::{FakeEngine, Flavor};
use sockproxy_tests::skip::skip;
use sockproxy_tests::stack::{PinnedDir, StackProxy};

/// Runs sockproxy under `wrap` (a command and its arguments, or none) and returns its exit
/// code and stderr.
fn refused(wrap: &[&str], args: &[String]) -> (Option<i32>, String) {
    let (program, pre) = match wrap.split_first() {
        Some((p, rest)) => (p.to_string(), rest.iter().map(|s| s.to_string()).collect()),
        None => (
            bins::sockproxy().display().to_string(),
            Vec::<String>::new(),
        ),
    };
    let mut cmd = Command::new(program);
    cmd.args(pre);
    if !wrap.is_empty() {
        cmd.arg(bins::sockproxy());
    }
    let mut child = cmd
        .args(args)
        .env("SOCKPROXY_LOG", "off")
        .env("RUST_BACKTRACE", "1")
        .env_remove("DOCKER_HOST")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    // A proxy that starts after all must not hold the test up.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: sockproxy started, where it should have refused");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn args(sock: &Path, engine: &Path, root: &Path, pins: &Path) -> Vec<String> {
    [
        "--listen",
        &sock.display().to_string(),
        "--prefix",
        "deer-flow-",
        "--upstream",
        &format!("unix://{}", engine.display()),
        "--allow-bind-root",
        &root.display().to_string(),
        "--pin-dir",
        &pins.display().to_string(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

#[test]
fn a_proxy_that_cannot_pin_does_not_start() {
    let test = "a_proxy_that_cannot_pin_does_not_start";
    if !can_pin(test) {
        return;
    }
    let runs = |p: &str| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !runs("setpriv") || !runs("unshare") {
        skip(
            test,
            "setpriv and unshare are needed",
            "apt-get install util-linux",
        );
        return;
    }
    let engine = FakeEngine::start(Flavor::Debian2010);
    let root = BindRootDir::new("pinstart");
    let dir = PinnedDir::new(tempfile::tempdir().expect("dir"));
    let sock = dir.path().join("s.sock");
    let pins = dir.pins();
    let a = args(&sock, engine.socket(), root.path(), &pins);
    let d = pins.display();

    let no_cap = refused(&["setpriv", "--bounding-set", "-sys_admin", "--"], &a);
    assert_eq!(
        no_cap,
        (
            Some(1),
            "sockproxy: --allow-bind-root needs CAP_SYS_ADMIN to pin bind sources (the proxy mounts each checked source where only it writes; docs/sockproxy.md, \"Pinned bind sources\")\n".into()
        )
    );

    let unseen = refused(
        &["unshare", "--mount", "--propagation", "private", "--"],
        &a,
    );
    assert_eq!(
        unseen,
        (
            Some(1),
            format!("sockproxy: --pin-dir \"{d}\": the engine does not see the proxy's mounts there (the proxy runs in a mount namespace whose mounts do not reach the engine's: with systemd, install deploy/systemd/sockproxy-pins.conf; in compose, mount the directory with rshared propagation)\n")
        )
    );

    let inside = root.path().join("pins");
    let mut b = a.clone();
    b[9] = inside.display().to_string();
    assert_eq!(
        refused(&[], &b),
        (
            Some(1),
            format!("sockproxy: --pin-dir \"{}\": must be an absolute path without '.' or '..', outside every bind root and holding none\n", inside.display())
        )
    );

    let other = dir.path().join("other");
    std::fs::create_dir_all(other.join("sub")).expect("other");
    let mut c = a.clone();
    c[9] = other.display().to_string();
    assert_eq!(
        refused(&[], &c),
        (
            Some(1),
            format!("sockproxy: --pin-dir \"{}\": is not empty (it holds \"sub\"), and the proxy's tmpfs would hide what is there; give the proxy a directory of its own\n", other.display())
        )
    );
    rustix::mount::mount(
        "elsewhere",
        other.join("sub"),
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .expect("a mount beneath");
    assert_eq!(
        refused(&[], &c),
        (
            Some(1),
            format!("sockproxy: --pin-dir \"{0}\": {0}/sub is mounted beneath it, which the proxy's tmpfs would hide\n", other.display())
        )
    );
    rustix::mount::unmount(other.join("sub"), rustix::mount::UnmountFlags::DETACH)
        .expect("unmount");

    let bound = root.path().to_owned();
    let held = pins.clone();
    let first = StackProxy::start_with(engine.socket(), "deer-flow-", false, |cfg| {
        cfg.create_rules.bind_roots = vec![bound];
        cfg.pins.dir = held;
    });
    assert_eq!(
        refused(&[], &a),
        (
            Some(1),
            format!("sockproxy: --pin-dir \"{d}\": another sockproxy pins bind sources there; give each stack its own\n")
        )
    );
    drop(first);
    assert!(
        !sock.exists(),
        "no socket left by a proxy that did not start"
    );
}
