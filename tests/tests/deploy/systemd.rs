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

#[test]
fn systemd_accepts_the_unit_and_it_is_sandboxed() {
    let unit =
        std::fs::read_to_string(repo().join("deploy/systemd/sockproxy@.service")).expect("unit");
    for line in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "RestrictAddressFamilies=AF_UNIX",
        "CapabilityBoundingSet=",
        "RuntimeDirectory=sockproxy/%i",
        "EnvironmentFile=/etc/sockproxy/%i.env",
        "Restart=on-failure",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} missing");
    }
    let have_analyze = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_analyze {
        skip(
            "systemd_accepts_the_unit_and_it_is_sandboxed",
            "systemd-analyze verify: systemd-analyze is not installed",
            "apt-get install systemd, as .ci/run does",
        );
        return;
    }
    // The unit's ExecStart must point at something real: the sockproxy this run built.
    let binary = bins::sockproxy();
    let dir = tempfile::tempdir().expect("dir");
    let local = unit.replace("/usr/local/bin/sockproxy", &binary.display().to_string());
    std::fs::write(dir.path().join("sockproxy@.service"), local).expect("write");
    std::os::unix::fs::symlink(
        "sockproxy@.service",
        dir.path().join("sockproxy@deer-flow.service"),
    )
    .expect("link");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.path().join("sockproxy@deer-flow.service"))
        .output()
        .expect("systemd-analyze runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.trim(), "", "no warnings");
    let env =
        std::fs::read_to_string(repo().join("deploy/systemd/sockproxy.env.example")).expect("env");
    assert!(env.lines().any(|l| l.starts_with("SOCKPROXY_PREFIX=")));
}

/// The provisioner unit (`lifecycle serve` on TCP for deer-flow) as systemd reads it.
#[test]
fn systemd_accepts_the_provisioner_unit() {
    let unit =
        std::fs::read_to_string(repo().join("deploy/systemd/lifecycle-provisioner@.service"))
            .expect("unit");
    for line in [
        "NoNewPrivileges=yes",
        "LoadCredential=api-key:/etc/lifecycle/%i.key",
        "Environment=LIFECYCLE_DOCKER_HOST=unix:///run/sockproxy/%i/docker.sock",
        "Requires=sockproxy@%i.service",
        "CapabilityBoundingSet=",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} missing");
    }
    let have_analyze = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_analyze {
        skip(
            "systemd_accepts_the_provisioner_unit",
            "systemd-analyze verify: systemd-analyze is not installed",
            "apt-get install systemd, as .ci/run does",
        );
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let local = unit.replace(
        "/usr/local/bin/lifecycle",
        &bins::lifecycle().display().to_string(),
    );
    std::fs::write(dir.path().join("lifecycle-provisioner@.service"), local).expect("write");
    // Its Requires= must resolve: the sockproxy unit beside it.
    let proxy = std::fs::read_to_string(repo().join("deploy/systemd/sockproxy@.service"))
        .expect("unit")
        .replace(
            "/usr/local/bin/sockproxy",
            &bins::sockproxy().display().to_string(),
        );
    std::fs::write(dir.path().join("sockproxy@.service"), proxy).expect("write");
    std::os::unix::fs::symlink(
        "lifecycle-provisioner@.service",
        dir.path().join("lifecycle-provisioner@deer-flow.service"),
    )
    .expect("link");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.path().join("lifecycle-provisioner@deer-flow.service"))
        .current_dir(dir.path())
        .output()
        .expect("systemd-analyze runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.trim(), "", "no warnings");
}
