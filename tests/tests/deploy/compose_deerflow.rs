//! `deploy/compose.deerflow.yaml` brought up as shipped on the real engine and driven as
//! deer-flow's gateway drives it: the images built offline, the key and the base directory
//! prepared as the file's header says (the key readable by the provisioner's user, the base
//! directory a `nosuid,nodev` mount it may write), deer-flow's remote-backend calls (the
//! contract test's client, `deerflow_remote.py`) create, discover, list and delete a sandbox
//! whose readiness the provisioner waits for, after the firewall step of the header; the
//! sandbox's URL answers from a container where the file puts deer-flow's gateway (on its
//! `gateway` network, a bridge) and not from a container on another bridge, and `down` leaves
//! nothing of the stack on the engine. The test's own override sets only what an offline engine needs:
//! the sandbox image and its command.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sockproxy_tests::bindroot::{can_pin, BindRootDir};
use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{ensure_images, real_engine, remove_stack, Cleanup};
use sockproxy_tests::multihost::free_port;
use sockproxy_tests::provisioner::{python, script, SERVING_CMD};
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::compose::{
    assert_nothing_left, foreign_container, have_compose, ps_names, repo, text, Compose,
};
use crate::firewall::{container_reaches, have_iptables, HostState};
use crate::gateway_net::GatewayNet;

/// The provisioner's user in the shipped image (`nobody`).
pub(crate) const PROVISIONER_UID: u32 = 65534;

/// Whether `/run/sockproxy-pins` is a shared mount, making it one as `.ci/run` does (the
/// proxy's pin directory is shared with the host through it).
pub(crate) fn shared_pin_parent() {
    let dir = std::path::Path::new("/run/sockproxy-pins");
    std::fs::create_dir_all(dir).expect("mkdir /run/sockproxy-pins");
    let shared = std::process::Command::new("findmnt")
        .args(["-n", "-o", "PROPAGATION", "--target", "/run/sockproxy-pins"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("shared"))
        .unwrap_or(false);
    if !shared {
        for args in [
            &["--bind", "/run/sockproxy-pins", "/run/sockproxy-pins"][..],
            &["--make-rshared", "/run/sockproxy-pins"][..],
        ] {
            let ok = std::process::Command::new("mount")
                .args(args)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "mount {args:?}");
        }
    }
}

/// What the header of `deploy/compose.deerflow.yaml` has an operator make, and the test's
/// offline override: the thread data's base directory and the key file, both the
/// provisioner's user's, and an override with the sandbox command an offline engine needs.
pub(crate) struct RouteFiles {
    pub(crate) base: BindRootDir,
    pub(crate) secrets: tempfile::TempDir,
    pub(crate) key_file: PathBuf,
    pub(crate) override_file: PathBuf,
}

impl RouteFiles {
    pub(crate) fn new(base_name: &str, key: &str) -> Self {
        let base = BindRootDir::new(base_name);
        let own = |path: &Path| {
            nix::unistd::chown(
                path,
                Some(nix::unistd::Uid::from_raw(PROVISIONER_UID)),
                Some(nix::unistd::Gid::from_raw(PROVISIONER_UID)),
            )
            .expect("chown");
        };
        own(base.path());
        let secrets = tempfile::tempdir().expect("dir");
        let key_file = secrets.path().join("provisioner.key");
        std::fs::write(&key_file, key).expect("key");
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        own(&key_file);
        // What an offline engine needs and nothing else: an image it holds, and its command.
        let override_file = secrets.path().join("offline.yaml");
        std::fs::write(
            &override_file,
            format!(
                "services:\n  provisioner:\n    environment:\n      LIFECYCLE_SANDBOX_CMD: \"{SERVING_CMD}\"\n"
            ),
        )
        .expect("override");
        Self {
            base,
            secrets,
            key_file,
            override_file,
        }
    }
}

#[test]
fn the_deerflow_compose_route_comes_up_serves_deer_flow_and_leaves_nothing() {
    let test = "the_deerflow_compose_route_comes_up_serves_deer_flow_and_leaves_nothing";
    let Some(e) = real_engine(test) else { return };
    if !have_compose(test) || !can_pin(test) || !have_iptables(test) {
        return;
    }
    let images = ensure_images(&e.socket);
    shared_pin_parent();
    let stack = unique_prefix();
    let project: String = stack.chars().filter(char::is_ascii_alphanumeric).collect();
    let net = GatewayNet::new(&stack);
    let mut host = HostState::default();
    let key = "0123456789abcdef0123456789abcdef";
    let RouteFiles {
        base,
        secrets: _secrets,
        key_file,
        override_file,
    } = RouteFiles::new("df-base-", key);
    let port = free_port();
    let pin_dir = format!("/run/sockproxy-pins/{project}");
    let compose = Compose::for_stack(
        &e,
        vec![repo().join("deploy/compose.deerflow.yaml"), override_file],
        images,
        &stack,
        &project,
        deerflow_env(base.path(), &key_file, port, &pin_dir)
            .into_iter()
            .chain(net.env())
            .collect(),
    );
    let url = format!("http://{}:{port}", net.address);
    let mut clean = Cleanup::new(&e.socket);
    let foreign = foreign_container(&e, &mut clean, &stack);

    step(
        "the firewall rule set of the header is made before up",
        || {
            net.shipped_firewall("compose.deerflow.yaml", &mut host, &project);
        },
    );

    step(
        "the route comes up and the provisioner answers /health",
        || {
            let up = compose.run(&["up", "-d"]);
            assert!(up.status.success(), "{}", text(&up));
            let began = Instant::now();
            loop {
                let health = std::net::TcpStream::connect((net.address.as_str(), port)).is_ok();
                if health {
                    break;
                }
                assert!(
                    began.elapsed() < Duration::from_secs(60),
                    "the provisioner never listened: {}",
                    text(&compose.run(&["logs", "--no-color"]))
                );
                std::thread::sleep(Duration::from_millis(250));
            }
        },
    );

    let sid = "5e1f0c3a9b7d2e44";
    let made: serde_json::Value = step(
        "deer-flow's calls create a sandbox, ready, with its thread's directories",
        || {
            let out = python(&script(), &[&url, key, "create", sid, "u1", "t1", "[]"]);
            let line = out.lines().last().unwrap_or_default();
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {out}"))
        },
    );
    let sandbox_url = made["sandbox_url"].as_str().unwrap_or_default().to_owned();
    let sandbox_port: u16 = sandbox_url
        .strip_prefix(&format!("http://{}:", net.address))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("published on the gateway's bridge address: {made}"));

    step(
        "the sandbox's URL answers on the gateway's network, not from another bridge",
        || {
            // Where deer-flow's gateway runs: a container on the route's gateway network.
            let beside = clean.container(&format!("o{stack}beside"));
            let out = docker(
                &e.socket,
                &[
                    "run",
                    "-d",
                    "--name",
                    &beside,
                    "--network",
                    &net.name,
                    &e.image,
                    "sleep",
                    "600",
                ],
            );
            assert!(out.ok(), "{}", out.stderr);
            // A probe gives up after 3 s without an answer; on a loaded machine a first answer
            // may take longer, so what must answer is asked up to five times.
            let reaches = |p: u16| {
                (0..5).any(|i| {
                    if i > 0 {
                        std::thread::sleep(Duration::from_secs(1));
                    }
                    container_reaches(&e.socket, &beside, &net.address, p)
                })
            };
            let why = || {
                let cmd = |p: &str, a: &[&str]| {
                    std::process::Command::new(p)
                        .args(a)
                        .output()
                        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                        .unwrap_or_default()
                };
                format!(
                    "rule set:\n{}\nINPUT:\n{}\nlisteners:\n{}\n{}",
                    HostState::chain(&project),
                    cmd("iptables", &["-w", "-L", "INPUT", "-v", "-n"]),
                    cmd("ss", &["-ltn"]),
                    text(&compose.run(&["logs", "--no-color", "--tail", "30"]))
                )
            };
            assert!(
                reaches(sandbox_port),
                "{sandbox_url} from the gateway's network: {}",
                why()
            );
            assert!(
                reaches(port),
                "the provisioner from the gateway's network: {}",
                why()
            );
            for (what, p) in [("the sandbox", sandbox_port), ("the provisioner", port)] {
                assert!(
                    !container_reaches(&e.socket, &foreign, &net.address, p),
                    "{what} from another stack's container on the default bridge"
                );
            }
            // Off the network before `down` removes it.
            assert!(docker(&e.socket, &["rm", "-f", &beside]).ok());
        },
    );

    step("deer-flow's delete removes it", || {
        python(&script(), &[&url, key, "delete", sid]);
        let left = ps_names(&e.socket, &format!("name=^{stack}"));
        assert_eq!(left, "", "the sandbox is gone");
    });

    step("down leaves nothing of the stack on the engine", || {
        let down = compose.run(&["down", "-v"]);
        assert!(down.status.success(), "{}", text(&down));
        assert_nothing_left(&e.socket, &project, &stack);
    });
    remove_stack(&e.socket, &stack);
    let _ = std::process::Command::new("umount").arg(&pin_dir).status();
}

/// What `deploy/compose.deerflow.yaml` reads besides every route's settings: the thread data's
/// base directory, the provisioner's key file and port, the pin directory.
pub(crate) fn deerflow_env(
    base: &Path,
    key_file: &Path,
    port: u16,
    pin_dir: &str,
) -> Vec<(String, String)> {
    [
        ("DEER_FLOW_HOST_BASE_DIR", base.display().to_string()),
        ("PROVISIONER_KEY_FILE", key_file.display().to_string()),
        ("PROVISIONER_PORT", port.to_string()),
        ("PIN_DIR", pin_dir.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}
