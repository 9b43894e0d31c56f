//! What deer-flow's gateway asks besides its sandboxes (issue 13), with the real docker CLI on
//! the fake and the real engine: `docker info` and `docker version` print cleanly through the
//! proxy and say nothing of the host or other stacks, and the predefined networks are readable
//! with only the stack's own containers in them.

use std::time::Duration;

use sockproxy_tests::cli::{self, docker_with};
use sockproxy_tests::engine::{each_engine, Cleanup, Fakes};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

#[test]
fn info_version_and_the_bridge_network_answer_for_the_stack() {
    each_engine(
        "info_version_and_the_bridge_network_answer_for_the_stack",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            // A stack the operator lets on the default bridge (`--allow-default-bridge`),
            // which other stacks' containers may share: it sees only its own there.
            let p = StackProxy::start_with(&e.socket, &prefix, false, |c| {
                c.create_rules.allow_default_bridge = true;
            });
            // A neighbour on the default bridge, running, and one of the stack's own.
            let neighbour = clean.container(&format!("x{prefix}neighbour"));
            let own = clean.container(&format!("{prefix}sandbox-info"));
            for (sock, name) in [(e.socket.as_path(), &neighbour), (p.socket(), &own)] {
                let out = cli::docker(
                    sock,
                    &[
                        "run",
                        "-d",
                        "--network",
                        "bridge",
                        "--name",
                        name,
                        &e.image,
                        "sleep",
                        "600",
                    ],
                );
                assert!(out.ok(), "{}", out.stderr);
            }
            let host_info = raw::get(&e.socket, "/info").expect("answer").json();
            for c in cli::clis() {
                let run = |sock: &std::path::Path, args: &[&str]| {
                    docker_with(&c, sock, args, None, Duration::from_secs(60))
                };
                step("info and version print as they do directly", || {
                    for args in [
                        &["info", "--format", "{{json .OperatingSystem}}"][..],
                        &["version", "--format", "{{.Server.Version}}"][..],
                    ] {
                        let (direct, through) = (run(&e.socket, args), run(p.socket(), args));
                        assert_eq!(through.code, Some(0), "{args:?}: {}", through.stderr);
                        assert_eq!(
                            through.stdout,
                            direct.stdout,
                            "{args:?} via {}",
                            c.display()
                        );
                        assert_eq!(through.stderr, "", "{args:?}");
                    }
                });
                step(
                    "info names the stack and counts its containers, not the host's",
                    || {
                        let info = run(p.socket(), &["info"]);
                        let text = info.out();
                        assert_eq!(info.code, Some(0), "{}", info.stderr);
                        assert!(!info.stderr.contains("sockproxy"), "{}", info.stderr);
                        assert!(text.contains(&format!("Name: test-{prefix}")), "{text}");
                        let host_name = host_info["Name"].as_str().unwrap_or_default();
                        let host_id = host_info["ID"].as_str().unwrap_or_default();
                        assert!(
                            !text
                                .lines()
                                .any(|l| l.trim() == format!("Name: {host_name}")),
                            "{text}"
                        );
                        assert!(host_id.is_empty() || !text.contains(host_id), "{text}");
                        let counts = run(
                            p.socket(),
                            &[
                                "info",
                                "--format",
                                "{{.Containers}} {{.ContainersRunning}} {{.Images}}",
                            ],
                        );
                        assert_eq!(counts.out().trim(), "1 1 0", "{}", counts.stderr);
                    },
                );
                step(
                    "the bridge network shows the stack's containers only, by name and by ID",
                    || {
                        let bridge = run(p.socket(), &["network", "inspect", "bridge"]);
                        assert_eq!(bridge.code, Some(0), "{}", bridge.stderr);
                        assert!(!bridge.out().contains(&neighbour), "{}", bridge.out());
                        let direct_bridge = run(&e.socket, &["network", "inspect", "bridge"]);
                        if direct_bridge.out().contains(&neighbour) {
                            assert!(bridge.out().contains(&own), "{}", bridge.out());
                        }
                        // By ID (a prefix of it) too, resolved among what the stack may read.
                        let id = raw::get(&e.socket, "/networks/bridge")
                            .expect("answer")
                            .json()["Id"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        let by_id = run(
                            p.socket(),
                            &["network", "inspect", "--format", "{{.Name}}", &id[..12]],
                        );
                        assert_eq!(by_id.out().trim(), "bridge", "{}", by_id.stderr);
                    },
                );
                // The other predefined networks are readable, never changeable.
                step(
                    "the other predefined networks are readable, never changeable",
                    || {
                        for n in ["host", "none"] {
                            assert_eq!(run(p.socket(), &["network", "inspect", n]).code, Some(0));
                        }
                        let rm = run(p.socket(), &["network", "rm", "bridge"]);
                        assert_ne!(rm.code, Some(0));
                    },
                );
            }
        },
    );
}
