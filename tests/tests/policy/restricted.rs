//! `--restricted` opens the sidecar and network scopes: network create, connect, disconnect and
//! remove work on in-scope names and are refused on everything else (real dockerd, docker CLI).

use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{each_engine, Cleanup, Fakes};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

fn network_exists(sock: &std::path::Path, name: &str) -> bool {
    raw::get(sock, &format!("/networks/{name}")).is_ok_and(|r| r.status == 200)
}

#[test]
fn restricted_stack_manages_its_own_networks_only() {
    each_engine(
        "restricted_stack_manages_its_own_networks_only",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let foreign_net = clean.network(&format!("o{prefix}net"));
            let foreign_ctr = step("a foreign network and container on the engine", || {
                let out = docker(&e.socket, &["network", "create", &foreign_net]);
                assert!(out.ok(), "{}", out.stderr);
                let foreign_ctr = clean.container(&format!("o{prefix}ctr"));
                let out = docker(
                    &e.socket,
                    &[
                        "run",
                        "-d",
                        "--name",
                        &foreign_ctr,
                        &e.image,
                        "sleep",
                        "600",
                    ],
                );
                assert!(out.ok(), "{}", out.stderr);
                foreign_ctr
            });

            let p = StackProxy::start(&e.socket, &prefix, true);
            let net = clean.network(&format!("{prefix}net-1"));
            let sandbox = clean.container(&format!("{prefix}sandbox-1"));
            let sidecar = clean.container(&format!("{prefix}netproxy-1"));
            step(
                "the stack makes its network, sandbox and sidecar and connects them",
                || {
                    let out = docker(p.socket(), &["network", "create", "--internal", &net]);
                    assert!(out.ok(), "create: {}", out.stderr);
                    let out = docker(
                        p.socket(),
                        &["run", "-d", "--name", &sandbox, &e.image, "sleep", "600"],
                    );
                    assert!(out.ok(), "{}", out.stderr);
                    let out = docker(
                        p.socket(),
                        &["run", "-d", "--name", &sidecar, &e.image, "sleep", "600"],
                    );
                    assert!(
                        out.ok(),
                        "restricted proxies may run the sidecar: {}",
                        out.stderr
                    );
                    let out = docker(p.socket(), &["network", "connect", &net, &sandbox]);
                    assert!(out.ok(), "connect: {}", out.stderr);
                    let inspect = raw::get(&e.socket, &format!("/containers/{sandbox}/json"))
                        .expect("answer");
                    assert!(inspect.json()["NetworkSettings"]["Networks"]
                        .get(&net)
                        .is_some());
                    let out = docker(p.socket(), &["network", "ls", "--format", "{{.Name}}"]);
                    // The stack's own network, made at its first create that named none
                    // (the sidecar's), is listed too.
                    assert_eq!(
                        out.out(),
                        format!("{}\n{net}\n", p.stack_network),
                        "network list is filtered"
                    );
                },
            );

            // Which call the CLI makes first differs between CLI versions (`network rm` inspects first
            // on some), so each case lists the ops whose refusal it may print.
            step(
                "everything outside the stack is refused and untouched",
                || {
                    let net_msg = |op: &str, n: &str| {
                        format!("sockproxy: networks.{op}: {n} is not one of this stack's networks")
                    };
                    let refusals: Vec<(Vec<&str>, Vec<String>)> = vec![
                        (
                            vec!["network", "create", "other-net"],
                            vec![net_msg("create", "other-net")],
                        ),
                        (
                            vec!["network", "rm", "bridge"],
                            vec![net_msg("inspect", "bridge"), net_msg("remove", "bridge")],
                        ),
                        (
                            vec!["network", "rm", &foreign_net],
                            vec![
                                net_msg("inspect", &foreign_net),
                                net_msg("remove", &foreign_net),
                            ],
                        ),
                        (
                            vec!["network", "connect", &foreign_net, &sandbox],
                            vec![
                                net_msg("inspect", &foreign_net),
                                net_msg("connect", &foreign_net),
                            ],
                        ),
                        (
                            vec!["network", "connect", &net, &foreign_ctr],
                            vec![format!(
                "sockproxy: networks.connect: {foreign_ctr} is not one of this stack's sandboxes"
            )],
                        ),
                        (
                            vec!["network", "disconnect", "bridge", &sandbox],
                            vec![net_msg("disconnect", "bridge")],
                        ),
                    ];
                    for (args, wants) in refusals {
                        let out = docker(p.socket(), &args);
                        assert!(!out.ok(), "{args:?} must fail");
                        assert!(
                            wants.iter().any(|w| out.stderr.contains(w.as_str())),
                            "{args:?}: {}",
                            out.stderr
                        );
                    }
                    let r = raw::request(
                        p.socket(),
                        "DELETE",
                        &format!("/networks/{foreign_net}"),
                        None,
                    )
                    .expect("answer");
                    assert_eq!(
                        r.message(),
                        format!(
                "sockproxy: networks.remove: {foreign_net} is not one of this stack's networks"
            )
                    );
                    assert!(
                        network_exists(&e.socket, &foreign_net),
                        "the foreign network is untouched"
                    );
                    let foreign_inspect =
                        raw::get(&e.socket, &format!("/containers/{foreign_ctr}/json"))
                            .expect("answer");
                    assert!(foreign_inspect.json()["NetworkSettings"]["Networks"]
                        .get(&net)
                        .is_none());
                },
            );

            step("the stack disconnects and removes its own network", || {
                let out = docker(p.socket(), &["network", "disconnect", &net, &sandbox]);
                assert!(out.ok(), "disconnect: {}", out.stderr);
                let out = docker(p.socket(), &["network", "rm", &net]);
                assert!(out.ok(), "rm: {}", out.stderr);
                assert!(!network_exists(&e.socket, &net));
            });
        },
    );
}

#[test]
fn open_stack_cannot_change_networks_or_sidecars() {
    each_engine(
        "open_stack_cannot_change_networks_or_sidecars",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let net = clean.network(&format!("{prefix}net-1"));
            let p = StackProxy::start(&e.socket, &prefix, false);
            let out = docker(p.socket(), &["network", "create", &net]);
            assert!(
                out.stderr
                    .contains("sockproxy: networks.create: not allowed for this stack"),
                "{}",
                out.stderr
            );
            assert!(!network_exists(&e.socket, &net));
            let sidecar = clean.container(&format!("{prefix}netproxy-1"));
            let out = docker(
                p.socket(),
                &["run", "-d", "--name", &sidecar, &e.image, "true"],
            );
            assert!(
                out.stderr.contains(&format!(
                    "sockproxy: containers.create: {sidecar} is not one of this stack's sandboxes"
                )),
                "{}",
                out.stderr
            );
        },
    );
}
