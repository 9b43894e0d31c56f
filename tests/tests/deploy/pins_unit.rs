//! `deploy/systemd/sockproxy-pins.conf`, the drop-in for a stack with bind roots (issue 46):
//! systemd accepts `sockproxy@.service` with it; with it the unit sets nothing that gives the
//! service a mount namespace of its own (where its pins would never reach dockerd), runs as
//! root with `CAP_SYS_ADMIN` alone; and sockproxy run as the unit with the drop-in runs it, a
//! create with a bind and its removal included, makes no system call the merged filter refuses,
//! `mount` and `umount2` among them.

use std::path::Path;
use std::process::Command;

use sockproxy_tests::bindroot::{can_pin, BindRootDir};
use sockproxy_tests::bins;
use sockproxy_tests::fake::{FakeEngine, Flavor};
use sockproxy_tests::raw;

use crate::syscalls;
use crate::systemd::{assert_allowed, env_file, exec_start, local_units, repo, set, Traced};

/// The unit with the drop-in after it, as systemd merges them: the drop-in's `[Service]`
/// assignments come after the unit's.
fn merged() -> String {
    let read = |p: &str| std::fs::read_to_string(repo().join(p)).expect(p);
    format!(
        "{}\n{}",
        read("deploy/systemd/sockproxy@.service"),
        read("deploy/systemd/sockproxy-pins.conf")
    )
}

/// The settings that give a service a mount namespace of its own (systemd 252's
/// `exec_needs_mount_namespace()`, src/core/execute.c, the systemd `.ci/run` installs), each
/// with the values that do not; an unset key gives none. `DynamicUser=yes` implies
/// `ProtectSystem=strict`, `ProtectHome=read-only` and `PrivateTmp=yes`.
const NO_NAMESPACE: &[(&str, &[&str])] = &[
    ("DynamicUser", &["no", "false"]),
    ("ProtectSystem", &["no", "false"]),
    ("ProtectHome", &["no", "false"]),
    ("PrivateTmp", &["no", "false"]),
    ("PrivateDevices", &["no", "false"]),
    ("PrivateMounts", &["no", "false"]),
    ("PrivateIPC", &["no", "false"]),
    ("ProtectKernelTunables", &["no", "false"]),
    ("ProtectKernelModules", &["no", "false"]),
    ("ProtectKernelLogs", &["no", "false"]),
    ("ProtectControlGroups", &["no", "false"]),
    ("ProtectProc", &["default"]),
    ("ProcSubset", &["all"]),
    ("MountFlags", &["", "shared"]),
    ("MountAPIVFS", &["no", "false"]),
    ("ReadWritePaths", &[""]),
    ("ReadOnlyPaths", &[""]),
    ("InaccessiblePaths", &[""]),
    ("ExecPaths", &[""]),
    ("NoExecPaths", &[""]),
    ("BindPaths", &[""]),
    ("BindReadOnlyPaths", &[""]),
    ("TemporaryFileSystem", &[""]),
    ("RootDirectory", &[""]),
    ("RootImage", &[""]),
    ("MountImages", &[""]),
    ("ExtensionImages", &[""]),
    ("ExtensionDirectories", &[""]),
    ("LogNamespace", &[""]),
    ("IPCNamespacePath", &[""]),
    ("StateDirectory", &[""]),
    ("CacheDirectory", &[""]),
    ("LogsDirectory", &[""]),
];

#[test]
fn the_pins_drop_in_leaves_no_mount_namespace_and_systemd_accepts_it() {
    let unit = merged();
    for (key, fine) in NO_NAMESPACE {
        // The last assignment wins (an empty one resets a list).
        let last = syscalls::unit_values(&unit, key).pop();
        if let Some(v) = last {
            assert!(
                fine.contains(&v.as_str()),
                "{key}={v} gives the service a mount namespace"
            );
        }
    }
    assert_eq!(
        syscalls::unit_values(&unit, "User").pop().as_deref(),
        Some("root")
    );
    assert_eq!(
        syscalls::unit_values(&unit, "CapabilityBoundingSet"),
        ["", "CAP_SYS_ADMIN"],
        "CAP_SYS_ADMIN alone"
    );
    if !syscalls::can_analyze("the_pins_drop_in_leaves_no_mount_namespace_and_systemd_accepts_it") {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    local_units(dir.path());
    let drop_ins = dir.path().join("sockproxy@deer-flow.service.d");
    std::fs::create_dir(&drop_ins).expect("drop-in dir");
    std::fs::copy(
        repo().join("deploy/systemd/sockproxy-pins.conf"),
        drop_ins.join("pins.conf"),
    )
    .expect("drop-in");
    std::os::unix::fs::symlink(
        "sockproxy@.service",
        dir.path().join("sockproxy@deer-flow.service"),
    )
    .expect("link");
    let instance = dir.path().join("sockproxy@deer-flow.service");
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&instance)
        .current_dir(dir.path())
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&verify.stderr);
    assert!(
        verify.status.success() && stderr.trim().is_empty(),
        "{stderr}"
    );
    // systemd reads the drop-in beside the unit: its exposure check sees root and CAP_SYS_ADMIN.
    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(&instance)
        .current_dir(dir.path())
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&security.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("Service runs as root user")),
        "the drop-in was read: {text}"
    );
}

/// Issue 46: sockproxy run as `sockproxy@.service` with the drop-in runs it, with a bind root,
/// a pin directory, a create that pins a bind and the release after its removal, makes no
/// system call the merged filter refuses; `mount` and `umount2` are among those it made.
#[test]
fn the_unit_with_the_pins_drop_in_allows_every_call_pinning_makes() {
    let test = "the_unit_with_the_pins_drop_in_allows_every_call_pinning_makes";
    if !syscalls::can_trace(test) || !can_pin(test) {
        return;
    }
    let unit = merged();
    let engine = FakeEngine::start(Flavor::Debian2010);
    let root = BindRootDir::new("unitpins");
    std::fs::create_dir(root.path().join("ws")).expect("ws");
    let dir = sockproxy_tests::stack::PinnedDir::new(tempfile::tempdir().expect("dir"));
    let run = dir.path().join("run");
    std::fs::create_dir(&run).expect("run dir");
    let argv = exec_start(
        &unit,
        "/usr/local/bin/sockproxy",
        &bins::sockproxy(),
        &[("/run/sockproxy/%i", run.display().to_string())],
    );
    let example = std::fs::read_to_string(repo().join("deploy/systemd/sockproxy.env.example"))
        .expect("env example");
    let mut env = env_file(&example);
    env.retain(|(k, _)| k != "SOCKPROXY_SOCKET_GROUP");
    set(
        &mut env,
        "SOCKPROXY_UPSTREAM",
        format!("unix://{}", engine.socket().display()),
    );
    set(
        &mut env,
        "SOCKPROXY_ALLOW_BIND_ROOT",
        root.path().display().to_string(),
    );
    set(
        &mut env,
        "SOCKPROXY_PIN_DIR",
        dir.pins().display().to_string(),
    );
    let mut p = Traced::start(dir.path(), &argv, &env);
    let sock = run.join("docker.sock");
    p.wait_ready("sockproxy", || {
        raw::get(&sock, "/_ping").is_ok_and(|r| r.status == 200)
    });
    let body = serde_json::json!({
        "Image": "sockproxy-test-busybox",
        "HostConfig": { "Binds": [format!("{}/ws:/ws", root.path().display())] },
    });
    let r = raw::request(
        &sock,
        "POST",
        "/containers/create?name=deer-flow-sandbox-unit",
        Some(body.to_string().as_bytes()),
    )
    .expect("create");
    assert_eq!(r.status, 201, "{}: {}", r.text(), p.log());
    let r = raw::request(&sock, "DELETE", "/containers/deer-flow-sandbox-unit", None).expect("rm");
    assert_eq!(r.status, 204, "{}", r.text());
    let staging = dir.pins().join("p");
    p.wait_ready("the pin released", || empty(&staging));
    let trace = p.stop();
    for call in ["mount", "umount2", "openat2"] {
        assert!(
            trace.syscalls.contains(call),
            "{call} traced: {:?}",
            trace.syscalls
        );
    }
    assert_allowed("sockproxy@.service with sockproxy-pins.conf", &unit, &trace);
}

fn empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none())
}
