//! `deploy/compose.yaml`'s proxy with a stack prefix that covers its own compose project
//! (`PROJECT_`: compose names the project's containers, volumes and networks with it): the proxy
//! does not start, and says which of its deployment's objects the stack would have been handed
//! (its own container, into which `docker exec` reaches the engine's socket; its socket's and
//! its state's volumes). The same project with a prefix apart starts and says the check passed.
//! A proxy in a container whose engine cannot be asked waits without serving, and stops when
//! asked.

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{ensure_images, real_engine};
use sockproxy_tests::unique_prefix;

use crate::compose::{have_compose, repo, text, Compose};

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
    let with_prefix = |prefix: &str| {
        Compose::for_stack(
            &e,
            vec![repo().join("deploy/compose.yaml")],
            images,
            prefix,
            &project,
            vec![("DOCKER_GID".to_owned(), gid.to_string())],
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
    assert!(!logs.contains("sockproxy listening"), "{logs}");
    // The engine: the proxy is not running (it exits at each restart), and nothing was made in
    // the stack's name (no stack network, no container but the proxy's).
    let state = docker(
        &e.socket,
        &[
            "inspect",
            "-f",
            "{{.State.Running}} {{.State.ExitCode}}",
            &name,
        ],
    );
    let state = state.out();
    assert!(
        state.trim() == "false 1" || state.trim().starts_with("true"),
        "{state}"
    );
    let running = docker(
        &e.socket,
        &[
            "ps",
            "-a",
            "--filter",
            &format!("name=^{project}_"),
            "--format",
            "{{.Names}}",
        ],
    )
    .out();
    assert_eq!(
        running.trim(),
        name,
        "only the proxy's container: {running}"
    );
    let down = covering.run(&["down", "-v"]);
    assert!(down.status.success(), "{}", text(&down));
    drop(covering);

    let apart = with_prefix(&format!("{project}-stack-"));
    let up = apart.run(&["up", "-d", "sockproxy"]);
    assert!(up.status.success(), "{}", text(&up));
    let (logs, _) = proxy_logs_with(&apart, &e.socket, "sockproxy listening");
    assert!(
        logs.contains("the stack's prefix is apart from the proxy's own deployment"),
        "{logs}"
    );
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
