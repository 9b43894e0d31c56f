//! `deploy/compose.yaml` with Debian's docker-compose against the real engine (CI): the images
//! build offline, the firewall rule set its header names is made, the stack comes up, the
//! gateway stand-in (lifecycle, on its own bridge) creates a sandbox through the stack's
//! sockproxy with readiness on, its URL on the gateway bridge's address answers on that bridge
//! and not from another stack's container, a foreign container on the same engine stays
//! untouched and invisible to it, the gateway destroys the sandbox, the restricted variant is a
//! valid configuration, and the example comes down leaving nothing.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{ensure_images, real_engine, Cleanup, Engine};
use sockproxy_tests::raw;
use sockproxy_tests::skip::skip;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::firewall::{container_reaches, have_iptables, HostState};
use crate::gateway_net::GatewayNet;

pub(crate) struct Compose {
    pub(crate) files: Vec<PathBuf>,
    pub(crate) project: String,
    pub(crate) env: Vec<(String, String)>,
}

impl Compose {
    /// `files` as project `project` of stack `stack` on engine `e`, with what every compose
    /// route reads (the engine, its socket, the images' prefix, the stack's prefix and name,
    /// the sandbox image) and `more`.
    pub(crate) fn for_stack(
        e: &Engine,
        files: Vec<PathBuf>,
        images: &str,
        stack: &str,
        project: &str,
        more: Vec<(String, String)>,
    ) -> Self {
        let env = [
            ("DOCKER_HOST", format!("unix://{}", e.socket.display())),
            ("DOCKER_SOCKET", e.socket.display().to_string()),
            ("IMAGE_PREFIX", images.to_owned()),
            ("STACK_PREFIX", stack.to_owned()),
            ("STACK_NAME", project.to_owned()),
            ("SANDBOX_IMAGE", e.image.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .chain(more)
        .collect();
        Self {
            files,
            project: project.to_owned(),
            env,
        }
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new("docker-compose");
        cmd.arg("-p").arg(&self.project);
        for f in &self.files {
            cmd.arg("-f").arg(f);
        }
        cmd.args(args).env_remove("DOCKER_CONTEXT");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.output().expect("docker-compose runs")
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        let _ = self.run(&["down", "-v", "--remove-orphans"]);
    }
}

/// The names of the containers, in any state, that `docker ps -a --filter FILTER` lists.
pub(crate) fn ps_names(socket: &Path, filter: &str) -> String {
    docker(
        socket,
        &["ps", "-a", "--filter", filter, "--format", "{{.Names}}"],
    )
    .out()
}

/// After `down -v`: no container, volume or network of compose project `project` is left, and
/// no container or network of stack `stack` (the proxy removes the stack's network as it
/// stops, once no container names it).
pub(crate) fn assert_nothing_left(socket: &Path, project: &str, stack: &str) {
    for filter in [
        format!("label=com.docker.compose.project={project}"),
        format!("name=^{stack}"),
    ] {
        assert_eq!(ps_names(socket, &filter), "", "no container: {filter}");
    }
    for kind in ["volume", "network"] {
        let names = docker(socket, &[kind, "ls", "--format", "{{.Name}}"]).out();
        assert!(
            !names.contains(project) && !names.contains(stack),
            "no {kind} of the route or the stack: {names}"
        );
    }
    assert_eq!(
        sockproxy_tests::engine::stack_networks(socket, stack),
        Vec::<String>::new(),
        "the stack's network is gone"
    );
}

/// Another stack's container on the default bridge (removed with `clean`): what must not reach
/// a stack's sandboxes; its name.
pub(crate) fn foreign_container(e: &Engine, clean: &mut Cleanup, stack: &str) -> String {
    let foreign = clean.container(&format!("o{stack}foreign"));
    let run = docker(
        &e.socket,
        &["run", "-d", "--name", &foreign, &e.image, "sleep", "600"],
    );
    assert!(run.ok(), "{}", run.stderr);
    foreign
}

/// What `lifecycle-cli create` printed (its last JSON line) and the sandbox's container name,
/// which must be one of `stack`'s sandboxes; the command must have succeeded.
pub(crate) fn created(made: &Output, stack: &str) -> (serde_json::Value, String) {
    assert!(made.status.success(), "{}", text(made));
    let line = String::from_utf8_lossy(&made.stdout)
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("")
        .to_owned();
    let created: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {}", text(made)));
    let name = created["container_name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(name.starts_with(&format!("{stack}sandbox-")), "{name}");
    (created, name)
}

pub(crate) fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether Debian's docker-compose is installed; a skip notice for `test` when it is not.
pub(crate) fn have_compose(test: &str) -> bool {
    let have = Command::new("docker-compose")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        skip(
            test,
            "docker-compose is not installed",
            "apt-get install docker-compose, as .ci/run does",
        );
    }
    have
}

#[test]
fn the_compose_example_runs_a_stack_against_the_engine() {
    let Some(e) = real_engine("the_compose_example_runs_a_stack_against_the_engine") else {
        return;
    };
    if !have_compose("the_compose_example_runs_a_stack_against_the_engine")
        || !have_iptables("the_compose_example_runs_a_stack_against_the_engine")
    {
        return;
    }
    let images = ensure_images(&e.socket);
    let stack = unique_prefix();
    let net = GatewayNet::new(&stack);
    let mut host = HostState::default();
    let project: String = stack.chars().filter(char::is_ascii_alphanumeric).collect();
    let gid = std::fs::metadata(&e.socket).expect("engine socket").gid();
    let compose = Compose::for_stack(
        &e,
        vec![repo().join("deploy/compose.yaml")],
        images,
        &stack,
        &project,
        [("DOCKER_GID".to_owned(), gid.to_string())]
            .into_iter()
            .chain(net.env())
            .collect(),
    );
    let mut clean = Cleanup::new(&e.socket);
    let foreign = foreign_container(&e, &mut clean, &stack);

    step(
        "the firewall rule set of the header is made before up",
        || {
            net.shipped_firewall("compose.yaml", &mut host, &project);
        },
    );

    step(
        "the gateway waits for each sandbox's URL (readiness is on)",
        || {
            let config = compose.run(&["config"]);
            assert!(config.status.success(), "{}", text(&config));
            let config = String::from_utf8_lossy(&config.stdout).into_owned();
            assert!(
                !config.contains("LIFECYCLE_READY_TIMEOUT"),
                "lifecycle's own 60 s wait: {config}"
            );
            assert!(
                config.contains(&format!("LIFECYCLE_PUBLISH_ADDRESS: {}", net.address))
                    && config
                        .contains(&format!("SOCKPROXY_ALLOW_PUBLISH_ADDRESS: {}", net.address)),
                "{config}"
            );
        },
    );

    step(
        "the stack's sockproxy comes up and the gateway lists through it",
        || {
            let up = compose.run(&["up", "-d", "sockproxy"]);
            assert!(up.status.success(), "{}", text(&up));
            // The proxy needs a moment to listen in its volume.
            let mut listed = compose.run(&["run", "--rm", "gateway", "ls"]);
            for _ in 0..40 {
                if listed.status.success() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(250));
                listed = compose.run(&["run", "--rm", "gateway", "ls"]);
            }
            assert!(listed.status.success(), "{}", text(&listed));
        },
    );

    let (created, name) = step(
        "the gateway creates a sandbox, stamped with the stack, and waits for its URL",
        || {
            let made = compose.run(&[
                "run",
                "--rm",
                "-e",
                "LIFECYCLE_SANDBOX_CMD=httpd -f -p 8080 -h /tmp",
                "gateway",
                "create",
                "--user",
                "u1",
                "--thread",
                "t1",
            ]);
            let (created, name) = created(&made, &stack);
            clean.container(&name);
            let inspect = raw::get(&e.socket, &format!("/containers/{name}/json"))
                .expect("answer")
                .json();
            assert_eq!(inspect["State"]["Running"], true);
            assert_eq!(
                inspect["Config"]["Labels"]["sockproxy.stack"],
                project.as_str()
            );
            (created, name)
        },
    );

    step(
        "the URL is on the gateway's bridge address: it answers there, not another stack's container",
        || {
            let url = created["url"].as_str().unwrap_or_default();
            let port: u16 = url
                .strip_prefix(&format!("http://{}:", net.address))
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("{url} is on {}", net.address));
            assert!(docker(&e.socket, &["network", "inspect", &format!("{project}_gateway")]).ok());
            // A container where the gateway is (the stand-in is FROM scratch: lifecycle's own
            // readiness wait reached the URL from there before create answered).
            let beside = clean.container(&format!("o{stack}beside"));
            let out = docker(
                &e.socket,
                &["run", "-d", "--name", &beside, "--network", &format!("{project}_gateway"), &e.image, "sleep", "600"],
            );
            assert!(out.ok(), "{}", out.stderr);
            assert!(container_reaches(&e.socket, &beside, &net.address, port), "from the gateway's bridge");
            assert!(
                !container_reaches(&e.socket, &foreign, &net.address, port),
                "another stack's container on the default bridge"
            );
            // Off the network before `down` removes it.
            assert!(docker(&e.socket, &["rm", "-f", &beside]).ok());
        },
    );

    step(
        "the gateway sees its sandbox and not the foreign container",
        || {
            let ls = compose.run(&["run", "--rm", "gateway", "ls"]);
            let seen = String::from_utf8_lossy(&ls.stdout).into_owned();
            assert!(seen.contains(&name), "{seen}");
            assert!(
                !seen.contains(&foreign),
                "the foreign container is invisible to the gateway: {seen}"
            );
        },
    );

    step(
        "the gateway destroys its sandbox, the foreign container untouched",
        || {
            let id = created["sandbox_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let destroyed = compose.run(&["run", "--rm", "gateway", "destroy", &id]);
            assert!(destroyed.status.success(), "{}", text(&destroyed));
            assert_eq!(
                raw::get(&e.socket, &format!("/containers/{name}/json"))
                    .expect("answer")
                    .status,
                404
            );
            let foreign_state = raw::get(&e.socket, &format!("/containers/{foreign}/json"))
                .expect("answer")
                .json();
            assert_eq!(
                foreign_state["State"]["Running"], true,
                "the foreign container is untouched"
            );
        },
    );

    step("the restricted variant is a valid configuration", || {
        let restricted = Compose {
            files: vec![
                repo().join("deploy/compose.yaml"),
                repo().join("deploy/compose.restricted.yaml"),
            ],
            project: format!("{project}r"),
            env: compose.env.clone(),
        };
        let config = restricted.run(&["config"]);
        assert!(config.status.success(), "{}", text(&config));
        let merged = String::from_utf8_lossy(&config.stdout).into_owned();
        assert!(
            merged.contains("SOCKPROXY_RESTRICTED") && merged.contains("netproxy:latest"),
            "{merged}"
        );
        drop(restricted);
    });

    step("the example comes down and leaves nothing", || {
        let down = compose.run(&["down", "-v"]);
        assert!(down.status.success(), "{}", text(&down));
        assert_nothing_left(&e.socket, &project, &stack);
    });
}

/// `deploy/compose.deerflow.yaml` as docker-compose reads it: valid, the provisioner on TCP with
/// its key from a secret file, the proxy's bind root the provisioner's mount root, and the
/// provisioner in the host's network namespace, listening and publishing sandboxes on the
/// gateway network's bridge address only (the one the proxy allows besides loopback, the
/// firewall rule set of the header admitting only that bridge); and what
/// pinning bind sources takes (issue 46): the proxy as root with SYS_ADMIN and no AppArmor
/// confinement, its bind root read-write, its pin directory shared with the host (`rshared`),
/// and its socket given the provisioner's group.
#[test]
fn the_deerflow_compose_file_is_valid_and_wires_the_key_and_the_mount_root() {
    if !have_compose("the_deerflow_compose_file_is_valid_and_wires_the_key_and_the_mount_root") {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let key = dir.path().join("provisioner.key");
    std::fs::write(&key, "k\n").expect("key");
    let out = Command::new("docker-compose")
        .arg("-f")
        .arg(repo().join("deploy/compose.deerflow.yaml"))
        .arg("config")
        .env("DEER_FLOW_HOST_BASE_DIR", "/srv/deer-flow")
        .env("PROVISIONER_KEY_FILE", &key)
        .output()
        .expect("docker-compose runs");
    let config = text(&out);
    assert!(out.status.success(), "{config}");
    for want in [
        "LIFECYCLE_LISTEN: tcp://172.30.0.1:8002",
        "LIFECYCLE_PUBLISH_ADDRESS: 172.30.0.1",
        "LIFECYCLE_SANDBOX_HOST: 172.30.0.1",
        "SOCKPROXY_ALLOW_PUBLISH_ADDRESS: 172.30.0.1",
        "com.docker.network.bridge.name: dfgw0",
        "name: deer-flow-gateway",
        "network_mode: host",
        "LIFECYCLE_API_KEY_FILE: /run/secrets/provisioner_key",
        "LIFECYCLE_MOUNT_ROOT: /srv/deer-flow",
        "- --allow-bind-root",
        "- /srv/deer-flow",
        "- --pin-dir",
        "- /run/sockproxy-pins/deer-flow",
        "- /run/sockproxy-pins/deer-flow:/run/sockproxy-pins/deer-flow:rshared",
        "- /srv/deer-flow:/srv/deer-flow:rw",
        "- SYS_ADMIN",
        "- apparmor=unconfined",
        "user: 0:0",
        "- --socket-group",
        "- '65534'",
    ] {
        assert!(config.contains(want), "{want} in\n{config}");
    }
    assert!(
        !config.contains("/srv/deer-flow:/srv/deer-flow:ro"),
        "a read-only view would pin read-only binds: {config}"
    );
    // Without the base directory it refuses to start, naming it.
    let out = Command::new("docker-compose")
        .arg("-f")
        .arg(repo().join("deploy/compose.deerflow.yaml"))
        .arg("config")
        .env_remove("DEER_FLOW_HOST_BASE_DIR")
        .env("PROVISIONER_KEY_FILE", &key)
        .output()
        .expect("docker-compose runs");
    assert!(!out.status.success());
    assert!(
        text(&out).contains("DEER_FLOW_HOST_BASE_DIR"),
        "{}",
        text(&out)
    );
}

/// The deer-flow compose file's provisioner gets a stop grace that covers its shutdown as its
/// environment bounds it, so the engine's SIGKILL never cuts a teardown half way.
#[test]
fn the_deerflow_compose_files_stop_grace_covers_the_providers_bounded_shutdown() {
    let text =
        std::fs::read_to_string(repo().join("deploy/compose.deerflow.yaml")).expect("compose");
    let provisioner = text
        .split("\n  provisioner:")
        .nth(1)
        .and_then(|rest| rest.split("\nsecrets:").next())
        .expect("the provisioner service");
    let value = |key: &str| -> u64 {
        provisioner
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
            .map(|v| v.trim_matches('"'))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("the provisioner sets {key}"))
    };
    let need = lifecycle::serve::shutdown::stop_grace_secs(
        value("LIFECYCLE_STOP_TIMEOUT"),
        value("LIFECYCLE_MAX_REPLICAS") as usize,
        value("LIFECYCLE_SHUTDOWN_PARALLEL") as usize,
    )
    .expect("the provisioner caps the replicas");
    let grace: u64 = provisioner
        .lines()
        .find_map(|l| l.trim().strip_prefix("stop_grace_period: "))
        .and_then(|v| v.strip_suffix('s'))
        .and_then(|v| v.parse().ok())
        .expect("stop_grace_period in seconds");
    assert!(grace >= need, "stop_grace_period: {grace}s < {need}s");
}

/// The restricted overlay's egress rules as an operator writes them (space-separated, each a
/// netproxy `--allow` rule with its own comma-separated ports) reach lifecycle through
/// docker-compose and pass its parser; the comma-separated form the overlay once documented is
/// refused with one line naming the rule.
#[test]
fn the_restricted_overlays_egress_rules_pass_lifecycles_parser() {
    if !have_compose("the_restricted_overlays_egress_rules_pass_lifecycles_parser") {
        return;
    }
    let rules = "pypi.org files.pythonhosted.org:443,8443";
    let out = Command::new("docker-compose")
        .arg("-f")
        .arg(repo().join("deploy/compose.yaml"))
        .arg("-f")
        .arg(repo().join("deploy/compose.restricted.yaml"))
        .arg("config")
        .env("EGRESS_ALLOW", rules)
        .output()
        .expect("docker-compose runs");
    let config = text(&out);
    assert!(out.status.success(), "{config}");
    let allow = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("LIFECYCLE_EGRESS_ALLOW: "))
        .map(|v| v.trim_matches(|c| c == '\'' || c == '"').to_owned())
        .expect("the overlay sets LIFECYCLE_EGRESS_ALLOW");
    assert_eq!(allow, rules);
    let state = tempfile::tempdir().expect("state");
    let run = |value: &str| {
        Command::new(sockproxy_tests::bins::lifecycle())
            .args(["--docker-host", "unix:///nonexistent/docker.sock"])
            .args([
                "--prefix",
                "deer-flow-",
                "--mode",
                "restricted",
                "--state-dir",
            ])
            .arg(state.path())
            .args(["quarantine", "ls"])
            .env_remove("DOCKER_HOST")
            .env("LIFECYCLE_EGRESS_ALLOW", value)
            .output()
            .expect("lifecycle runs")
    };
    let ok = run(&allow);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    let commas = run("pypi.org,files.pythonhosted.org");
    assert_eq!(commas.status.code(), Some(2), "{}", text(&commas));
    let stderr = String::from_utf8_lossy(&commas.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--egress-allow \"pypi.org,files.pythonhosted.org\""),
        "{stderr}"
    );
}
