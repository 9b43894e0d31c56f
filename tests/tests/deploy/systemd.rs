//! `deploy/systemd/sockproxy@.service` as systemd reads it: `systemd-analyze verify` accepts an
//! instance with no warning (it prints unknown keys and exits 0, so stderr must be empty too), and
//! the unit carries the sandboxing the deploy guide promises.

use std::path::{Path, PathBuf};
use std::process::Command;

use sockproxy_tests::bins;
use sockproxy_tests::skip::skip;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The shipped units, each with its ExecStart pointed at the binary this run built (it must
/// name something real), written into a temporary unit directory.
fn local_units(dir: &Path) {
    for (unit, binary, built) in [
        (
            "sockproxy@.service",
            "/usr/local/bin/sockproxy",
            bins::sockproxy(),
        ),
        (
            "lifecycle-provisioner@.service",
            "/usr/local/bin/lifecycle",
            bins::lifecycle(),
        ),
    ] {
        let text = std::fs::read_to_string(repo().join("deploy/systemd").join(unit)).expect("unit");
        let local = text.replace(binary, &built.display().to_string());
        std::fs::write(dir.join(unit), local).expect("write");
    }
}

/// `systemd-analyze verify` of instance `deer-flow` of `template` (from `local_units`): no
/// error and no warning (it prints unknown keys and exits 0, so stderr must be empty too).
/// `false` (after a skip notice for `test`) where systemd-analyze is not installed.
fn verified(test: &str, template: &str) -> bool {
    let have_analyze = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_analyze {
        skip(
            test,
            "systemd-analyze verify: systemd-analyze is not installed",
            "apt-get install systemd, as .ci/run does",
        );
        return false;
    }
    let dir = tempfile::tempdir().expect("dir");
    local_units(dir.path());
    let instance = template.replace("@.", "@deer-flow.");
    std::os::unix::fs::symlink(template, dir.path().join(&instance)).expect("link");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.path().join(&instance))
        .current_dir(dir.path())
        .output()
        .expect("systemd-analyze runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{template}: {stderr}");
    assert_eq!(stderr.trim(), "", "{template}: no warnings");
    true
}

fn unit_lines(unit: &str, want: &[&str]) {
    let text = std::fs::read_to_string(repo().join("deploy/systemd").join(unit)).expect("unit");
    for line in want {
        assert!(text.lines().any(|l| l == *line), "{unit}: {line} missing");
    }
}

#[test]
fn systemd_accepts_the_unit_and_it_is_sandboxed() {
    unit_lines(
        "sockproxy@.service",
        &[
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "PrivateTmp=yes",
            "RestrictAddressFamilies=AF_UNIX",
            "CapabilityBoundingSet=",
            "RuntimeDirectory=sockproxy/%i",
            "EnvironmentFile=/etc/sockproxy/%i.env",
            "Restart=on-failure",
        ],
    );
    if !verified(
        "systemd_accepts_the_unit_and_it_is_sandboxed",
        "sockproxy@.service",
    ) {
        return;
    }
    let env =
        std::fs::read_to_string(repo().join("deploy/systemd/sockproxy.env.example")).expect("env");
    assert!(env.lines().any(|l| l.starts_with("SOCKPROXY_PREFIX=")));
}

/// The provisioner unit (`lifecycle serve` on TCP for deer-flow) as systemd reads it.
#[test]
fn systemd_accepts_the_provisioner_unit() {
    unit_lines(
        "lifecycle-provisioner@.service",
        &[
            "NoNewPrivileges=yes",
            "LoadCredential=api-key:/etc/lifecycle/%i.key",
            "Environment=LIFECYCLE_DOCKER_HOST=unix:///run/sockproxy/%i/docker.sock",
            "Requires=sockproxy@%i.service",
            "CapabilityBoundingSet=",
        ],
    );
    verified(
        "systemd_accepts_the_provisioner_unit",
        "lifecycle-provisioner@.service",
    );
}
