//! The real docker CLI through sockproxy in front of the real dockerd: the stack sees and
//! changes only its own containers; everything the gateway needs works, streams included.
//! Skipped with a notice when no engine is reachable locally; never skipped with `CI=true`.

use std::time::{Duration, Instant};

use sockproxy_tests::cli::{self, docker, docker_stdin, docker_with};
use sockproxy_tests::engine::{each_engine, Cleanup, Fakes};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

fn running(engine_sock: &std::path::Path, name: &str) -> bool {
    raw::get(engine_sock, &format!("/containers/{name}/json"))
        .map(|r| r.json()["State"]["Running"] == serde_json::Value::Bool(true))
        .unwrap_or(false)
}

/// Starts a container directly on the engine (not through any proxy).
fn foreign(engine_sock: &std::path::Path, image: &str, name: &str) -> String {
    let out = docker(
        engine_sock,
        &["run", "-d", "--name", name, image, "sleep", "600"],
    );
    assert!(out.ok(), "{}", out.stderr);
    out.out().trim().to_owned()
}

#[test]
fn ps_shows_only_the_stacks_containers() {
    each_engine("ps_shows_only_the_stacks_containers", Fakes::Debian, |e| {
        let prefix = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let other = clean.container(&format!("{prefix}x-other"));
        let outsider = clean.container(&format!("o{prefix}sandbox-1"));
        foreign(&e.socket, &e.image, &outsider);
        foreign(&e.socket, &e.image, &other);
        let p = StackProxy::start(&e.socket, &prefix, false);
        let own = clean.container(&format!("{prefix}sandbox-1"));
        let out = docker(
            p.socket(),
            &["run", "-d", "--name", &own, &e.image, "sleep", "600"],
        );
        assert!(out.ok(), "{}", out.stderr);
        for cli in cli::clis() {
            let out = docker_with(
                &cli,
                p.socket(),
                &["ps", "-a", "--format", "{{.Names}}"],
                None,
                Duration::from_secs(60),
            );
            assert!(out.ok(), "{}: {}", cli.display(), out.stderr);
            let mut names: Vec<String> = out.out().lines().map(str::to_owned).collect();
            names.sort();
            // Lists show everything under P (leftovers included), nothing else.
            assert_eq!(names, [own.clone(), other.clone()], "{}", cli.display());
            let out = docker_with(
                &cli,
                p.socket(),
                &[
                    "ps",
                    "-a",
                    "--filter",
                    &format!("name={outsider}"),
                    "--format",
                    "{{.Names}}",
                ],
                None,
                Duration::from_secs(60),
            );
            assert!(out.ok(), "{}", out.stderr);
            assert_eq!(out.out(), "", "a name outside the stack lists as nothing");
        }
        // The engine itself still holds all three.
        let direct = docker(
            &e.socket,
            &[
                "ps",
                "-a",
                "--filter",
                &format!("name={prefix}"),
                "--format",
                "{{.Names}}",
            ],
        );
        assert_eq!(direct.out().lines().count(), 3, "{}", direct.out());
    });
}

#[test]
fn run_exec_logs_stop_rm_work_through_the_proxy() {
    each_engine(
        "run_exec_logs_stop_rm_work_through_the_proxy",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, false);
            let name = clean.container(&format!("{prefix}sandbox-run"));
            let out = docker(
                p.socket(),
                &[
                    "run",
                    "-d",
                    "--name",
                    &name,
                    &e.image,
                    "sh",
                    "-c",
                    "echo first-line; sleep 600",
                ],
            );
            assert!(out.ok(), "docker run -d: {}", out.stderr);

            let out = docker(p.socket(), &["exec", &name, "echo", "no-stdin"]);
            assert!(out.ok(), "{}", out.stderr);
            assert_eq!(out.out(), "no-stdin\n");
            let out = docker_stdin(
                p.socket(),
                &["exec", "-i", &name, "cat"],
                b"through stdin\n",
            );
            assert!(out.ok(), "{}", out.stderr);
            assert_eq!(out.out(), "through stdin\n");

            // `docker logs -f` delivers the first line while the container is still running.
            let mut logs = cli::spawn_docker(p.socket(), &["logs", "-f", &name]);
            let first = logs
                .lines()
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_default();
            assert_eq!(first, "first-line");
            assert!(
                running(&e.socket, &name),
                "the line arrived while the container runs"
            );
            drop(logs);

            let out = docker(p.socket(), &["stop", "-t", "1", &name]);
            assert!(out.ok(), "{}", out.stderr);
            assert!(!running(&e.socket, &name));
            let out = docker(p.socket(), &["rm", "-f", &name]);
            assert!(out.ok(), "{}", out.stderr);
            assert_eq!(
                raw::get(&e.socket, &format!("/containers/{name}/json"))
                    .expect("answer")
                    .status,
                404
            );
            // The CLI treats a 404 on rm -f as done.
            let out = docker(p.socket(), &["rm", "-f", &name]);
            assert!(out.ok(), "{}", out.stderr);
        },
    );
}

#[test]
fn run_interactive_cat_passes_20_mb_intact() {
    each_engine(
        "run_interactive_cat_passes_20_mb_intact",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, false);
            let name = clean.container(&format!("{prefix}sandbox-cat"));
            // Deterministic, incompressible-looking bytes (xorshift), 20 MB.
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            let data: Vec<u8> = (0..20_000_000)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect();
            let start = Instant::now();
            let out = docker_stdin(
                p.socket(),
                &["run", "-i", "--rm", "--name", &name, &e.image, "cat"],
                &data,
            );
            assert!(out.ok(), "{}", out.stderr);
            assert_eq!(out.stdout.len(), data.len());
            assert!(out.stdout == data, "bytes changed on the way");
            eprintln!("20 MB through docker run -i cat in {:?}", start.elapsed());
        },
    );
}

#[test]
fn foreign_containers_are_refused_by_name_and_absent_by_id() {
    each_engine(
        "foreign_containers_are_refused_by_name_and_absent_by_id",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let victim = clean.container(&format!("v{prefix}victim"));
            let id = foreign(&e.socket, &e.image, &victim);
            let p = StackProxy::start(&e.socket, &prefix, false);
            for cli in cli::clis() {
                let run = |args: &[&str]| {
                    docker_with(&cli, p.socket(), args, None, Duration::from_secs(60))
                };
                for (args, op) in [
                    (vec!["stop", victim.as_str()], "containers.stop"),
                    (vec!["rm", "-f", victim.as_str()], "containers.remove"),
                    (vec!["kill", victim.as_str()], "containers.kill"),
                    (vec!["inspect", victim.as_str()], "containers.inspect"),
                    (vec!["exec", victim.as_str(), "true"], "containers.inspect"),
                ] {
                    let out = run(&args);
                    assert!(!out.ok(), "{args:?} must fail");
                    let want = format!("Error response from daemon: sockproxy: {op}: {victim} is not one of this stack's sandboxes");
                    assert!(
                        out.stderr.contains(&want),
                        "{args:?} ({}): {}",
                        cli.display(),
                        out.stderr
                    );
                }
                for r in [id.as_str(), &id[..12], &id[..4]] {
                    let out = run(&["stop", r]);
                    assert!(!out.ok());
                    assert!(
                        out.stderr.contains(&format!("No such container: {r}")),
                        "{}",
                        out.stderr
                    );
                    // `docker rm -f` of an absent container exits 0 on the CLI: it must still be absent.
                    let _ = run(&["rm", "-f", r]);
                }
            }
            assert!(
                running(&e.socket, &victim),
                "the foreign container is untouched"
            );
            let direct =
                raw::get(&e.socket, &format!("/containers/{victim}/json")).expect("answer");
            assert_eq!(direct.json()["Id"], serde_json::Value::String(id));
        },
    );
}

#[test]
fn the_design_example_message_is_printed_by_the_cli() {
    each_engine(
        "the_design_example_message_is_printed_by_the_cli",
        Fakes::Debian,
        |e| {
            let p = StackProxy::start(&e.socket, "deer-flow-", false);
            for cli in cli::clis() {
                let out = docker_with(
                    &cli,
                    p.socket(),
                    &["stop", "deer-flow-netproxy-c1a44b2434411cc2"],
                    None,
                    Duration::from_secs(60),
                );
                assert_eq!(out.code, Some(1));
                assert_eq!(
            out.stderr.trim_end(),
            "Error response from daemon: sockproxy: containers.stop: deer-flow-netproxy-c1a44b2434411cc2 is not one of this stack's sandboxes",
            "{}",
            cli.display()
        );
            }
        },
    );
}

#[test]
fn inspect_of_an_absent_name_prints_exactly_what_the_engine_prints() {
    each_engine(
        "inspect_of_an_absent_name_prints_exactly_what_the_engine_prints",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let p = StackProxy::start(&e.socket, &prefix, false);
            let denying = StackProxy::start_with(&e.socket, &prefix, false, |c| {
                c.scope = c.scope.clone().with_info(false)
            });
            let name = format!("{prefix}sandbox-gone");
            for cli in cli::clis() {
                let run = |sock: &std::path::Path| {
                    docker_with(
                        &cli,
                        sock,
                        &["inspect", &name],
                        None,
                        Duration::from_secs(60),
                    )
                };
                let (direct, through) = (run(&e.socket), run(p.socket()));
                // The CLI walks images, networks, volumes, /info and plugins: through the proxy
                // every step answers as the engine does, so deer-flow's absence check sees only
                // "No such object".
                assert_eq!(through.code, Some(1), "{}", through.stderr);
                assert_eq!(through.code, direct.code, "{}", cli.display());
                assert_eq!(through.stderr, direct.stderr, "{}", cli.display());
                assert!(
                    through
                        .stderr
                        .to_lowercase()
                        .contains(&format!("error: no such object: {name}")),
                    "{}",
                    through.stderr
                );
                assert!(!through.stderr.contains("sockproxy"), "{}", through.stderr);
                // `--info deny` keeps the old refusal, and the CLI prints it as an extra line.
                let denied = run(denying.socket());
                assert!(
                denied.stderr.contains(
                    "Error response from daemon: sockproxy: system.info: not allowed for this stack"
                ),
                "{}: {}",
                cli.display(),
                denied.stderr
            );
            }
        },
    );
}

#[test]
fn a_link_alias_path_cannot_reach_a_foreign_container() {
    each_engine(
        "a_link_alias_path_cannot_reach_a_foreign_container",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let victim = clean.container(&format!("v{prefix}victim"));
            foreign(&e.socket, &e.image, &victim);
            // The stack's own container carries a link alias to the foreign one (made on the engine).
            let own = clean.container(&format!("{prefix}sandbox-linked"));
            let out = docker(
                &e.socket,
                &[
                    "run",
                    "-d",
                    "--name",
                    &own,
                    "--link",
                    &format!("{victim}:alias"),
                    &e.image,
                    "sleep",
                    "600",
                ],
            );
            assert!(out.ok(), "{}", out.stderr);
            let direct =
                raw::get(&e.socket, &format!("/containers/{own}/alias/json")).expect("answer");
            assert_eq!(
                direct.status,
                200,
                "the engine resolves the alias: {}",
                direct.text()
            );
            let p = StackProxy::start(&e.socket, &prefix, false);
            for (method, target) in [
                ("POST", format!("/v1.41/containers/{own}/alias/stop")),
                ("POST", format!("/containers/{own}/alias/kill")),
                ("DELETE", format!("/containers/{own}/alias?force=1")),
                ("GET", format!("/containers/{own}/alias/json")),
                ("POST", format!("/containers/%2F{own}%2Falias/stop")),
            ] {
                let r = raw::request(p.socket(), method, &target, None).expect("answer");
                assert!(
                    r.status == 403 || r.status == 400,
                    "{method} {target}: {} {}",
                    r.status,
                    r.text()
                );
                assert!(r.message().starts_with("sockproxy: "), "{}", r.text());
            }
            assert!(
                running(&e.socket, &victim),
                "the foreign container is untouched"
            );
        },
    );
}
