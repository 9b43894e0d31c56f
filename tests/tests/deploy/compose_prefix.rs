//! `deploy/compose.yaml`'s proxy with a stack prefix that covers its own compose project
//! (`PROJECT_`: compose names the project's containers, volumes and networks with it): the proxy
//! does not start (exit code 2, no socket made), and says which of its deployment's objects the
//! stack would have been handed (its own container, whose inspect and logs the stack would
//! read; its socket's and its state's volumes, which it could mount; every name compose gives
//! the project). The same project with a prefix apart starts, and says the check passed after
//! reading the project's objects.
//! A proxy in a container whose engine cannot be asked waits without serving, and stops when
//! asked.

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{ensure_images, real_engine};
use sockproxy_tests::unique_prefix;

use crate::compose::{have_compose, repo, text, Compose};
use crate::gateway_net::GatewayNet;

/// The logs of compose service `sockproxy` of `compose` once they hold `wanted` (30 s at most),
/// and its container's name.
fn proxy_logs_with(compose: &Compose, socket: &std::path::Path, wanted: &str) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let id = String::from_utf8_lossy(&compose.run(&["ps", "-q", "sockproxy"]).stdout)
            .trim()
            .to_owned();
        let logs = if id.is_empty() {
            String::new()
        } else {
            let l = docker(socket, &["logs", &id]);
            format!("{}{}", l.out(), l.stderr)
        };
        if logs.contains(wanted) || Instant::now() > deadline {
            let name = docker(socket, &["inspect", "-f", "{{.Name}}", &id]).out();
            return (logs, name.trim().trim_start_matches('/').to_owned());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_prefix_that_covers_the_proxys_compose_project_stops_it_at_start() {
    let test = "a_prefix_that_covers_the_proxys_compose_project_stops_it_at_start";
    let Some(e) = real_engine(test) else {
        return;
    };
    if !have_compose(test) {
        return;
    }
    let images = ensure_images(&e.socket);
    let project: String = unique_prefix()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let gid = std::fs::metadata(&e.socket).expect("engine socket").gid();
    // The gateway network's bridge and subnet of this run: the shipped defaults would collide
    // with another compose run on the engine.
    let net = GatewayNet::new(&project);
    let with_prefix = |prefix: &str| {
        Compose::for_stack(
            &e,
            vec![repo().join("deploy/compose.yaml")],
            images,
            prefix,
            &project,
            [("DOCKER_GID".to_owned(), gid.to_string())]
                .into_iter()
                .chain(net.env())
                .collect(),
        )
    };

    let covering = with_prefix(&format!("{project}_"));
    let up = covering.run(&["up", "-d", "sockproxy"]);
    assert!(up.status.success(), "{}", text(&up));
    let (logs, name) = proxy_logs_with(&covering, &e.socket, "covers the proxy's own deployment");
    for object in [
        format!("container {name}"),
        format!("volume {project}_stack-socket"),
        format!("volume {project}_sockproxy-state"),
        format!("compose project {project}"),
    ] {
        assert!(logs.contains(&object), "{object} named: {logs}");
    }
    assert!(
        logs.contains(&format!("every name compose gives project {project}")),
        "{logs}"
    );
    assert!(!logs.contains("sockproxy listening"), "{logs}");
    // It exits with the code of a bad setting (2) at each of the restarts its restart policy
    // makes (the engine counts them, and keeps the last exit code); and it never made its socket.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut restarts, mut code) = (0u32, String::new());
    while Instant::now() < deadline && restarts == 0 {
        let state = docker(
            &e.socket,
            &[
                "inspect",
                "-f",
                "{{.RestartCount}} {{.State.ExitCode}}",
                &name,
            ],
        )
        .out();
        let mut fields = state.split_whitespace();
        restarts = fields.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        code = fields.next().unwrap_or_default().to_owned();
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(restarts >= 1, "restarted by its policy");
    assert_eq!(code, "2", "the exit code of a bad setting");
    let listing = docker(
        &e.socket,
        &[
            "run",
            "--rm",
            "-v",
            &format!("{project}_stack-socket:/s"),
            &e.image,
            "ls",
            "-A",
            "/s",
        ],
    );
    assert!(listing.ok(), "{}", listing.stderr);
    assert_eq!(listing.out().trim(), "", "no socket in the stack's volume");
    let down = covering.run(&["down", "-v"]);
    assert!(down.status.success(), "{}", text(&down));
    drop(covering);

    let apart = with_prefix(&format!("{project}-stack-"));
    let up = apart.run(&["up", "-d", "sockproxy"]);
    assert!(up.status.success(), "{}", text(&up));
    let (logs, _) = proxy_logs_with(&apart, &e.socket, "sockproxy listening");
    let line = logs
        .lines()
        .find(|l| l.contains("the stack's prefix is apart from the proxy's own deployment"))
        .unwrap_or_else(|| panic!("the check's line: {logs}"));
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
    // Its container and two volumes at least, and the project's networks: the lists were read.
    assert!(v["objects"].as_u64().is_some_and(|n| n >= 4), "{line}");
    assert_eq!(v["project"].as_str(), Some(project.as_str()), "{line}");
    assert!(logs.contains("sockproxy listening"), "{logs}");
}

/// In a container, a proxy whose engine does not answer its check (here: the socket's group not
/// given, so every connection is refused) waits without serving, says so, and stops on
/// `docker stop`'s SIGTERM (as PID 1 it would not die of the signal's default action: the
/// engine would SIGKILL it after the grace, exit code 137).
#[test]
fn in_a_container_the_proxy_waits_for_its_engine_before_serving_and_stops_when_asked() {
    let test = "in_a_container_the_proxy_waits_for_its_engine_before_serving_and_stops_when_asked";
    let Some(e) = real_engine(test) else {
        return;
    };
    let images = ensure_images(&e.socket);
    let mut clean = sockproxy_tests::engine::Cleanup::new(&e.socket);
    let name = clean.container(&format!("{}waiting-proxy", unique_prefix()));
    let socket = format!("{}:/var/run/docker.sock", e.socket.display());
    let run = docker(
        &e.socket,
        &[
            "run",
            "-d",
            "--name",
            &name,
            "-v",
            &socket,
            "-e",
            "SOCKPROXY_PREFIX=apart-",
            &format!("{images}sockproxy:latest"),
            "--listen",
            "/run/sockproxy/docker.sock",
        ],
    );
    assert!(run.ok(), "{}", run.stderr);
    let deadline = Instant::now() + Duration::from_secs(30);
    let logs = loop {
        let l = docker(&e.socket, &["logs", &name]);
        let logs = format!("{}{}", l.out(), l.stderr);
        if logs.contains("not serving until the engine answers") || Instant::now() > deadline {
            break logs;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        logs.contains("not serving until the engine answers"),
        "{logs}"
    );
    assert!(!logs.contains("sockproxy listening"), "{logs}");
    let stop = docker(&e.socket, &["stop", "-t", "30", &name]);
    assert!(stop.ok(), "{}", stop.stderr);
    let code = docker(&e.socket, &["inspect", "-f", "{{.State.ExitCode}}", &name]).out();
    assert_eq!(
        code.trim(),
        "0",
        "stopped by SIGTERM, not killed after the grace"
    );
}
