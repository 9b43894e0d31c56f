//! `deploy/compose.yaml` with `deploy/compose.restricted.yaml` brought up on the real engine
//! and driven: the gateway stand-in makes a restricted sandbox behind its netproxy sidecar with
//! the egress rule an operator writes in `EGRESS_ALLOW`; from inside the sandbox the allowed
//! target answers (through the sidecar), a target the rule does not name is refused, the host's
//! services at the sandbox network's own gateway are not reached; the gateway destroys it, and
//! `down` leaves nothing of the stack. The test's override sets only what this engine needs:
//! the sandbox image's command (busybox's httpd: lifecycle waits for the URL), and the private
//! address range the allowed target is on (a listener of the test's own on the host, at the
//! default bridge's gateway); its gateway network gets addresses of its own, and the firewall
//! rule set of compose.yaml's header is made before `up`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;

use sockproxy_tests::cli::{docker, CliOutput};
use sockproxy_tests::engine::{ensure_images, network_gateway, real_engine, remove_stack};
use sockproxy_tests::raw;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::compose::{assert_nothing_left, created, have_compose, repo, text, Compose};
use crate::firewall::{have_iptables, HostState};
use crate::gateway_net::GatewayNet;

const ANSWER: &str = "compose-restricted-target";

/// `wget -q -O - URL` run in the container `name`.
fn wget_in(socket: &std::path::Path, name: &str, url: &str) -> CliOutput {
    docker(socket, &["exec", name, "wget", "-q", "-O", "-", url])
}

/// A listener on every host address answering each connection with `ANSWER`.
fn target() -> u16 {
    let listener = TcpListener::bind("0.0.0.0:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(mut c) = c else { continue };
            let _ = c.set_read_timeout(Some(std::time::Duration::from_millis(300)));
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            let body = format!("{ANSWER}\n");
            let _ = write!(
                c,
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn the_restricted_compose_route_allows_its_rule_and_nothing_else() {
    let test = "the_restricted_compose_route_allows_its_rule_and_nothing_else";
    let Some(e) = real_engine(test) else { return };
    if !have_compose(test) || !have_iptables(test) {
        return;
    }
    let images = ensure_images(&e.socket);
    let stack = unique_prefix();
    let net = GatewayNet::new(&stack);
    let project: String = stack.chars().filter(char::is_ascii_alphanumeric).collect();
    let gid = std::fs::metadata(&e.socket).expect("engine socket").gid();
    let port = target();
    let gw = network_gateway(&e.socket, "bridge");
    assert!(!gw.is_empty(), "the default bridge's gateway");
    let dir = tempfile::tempdir().expect("dir");
    let override_file = dir.path().join("engine.yaml");
    std::fs::write(
        &override_file,
        format!(
            "services:\n  gateway:\n    environment:\n      LIFECYCLE_SANDBOX_CMD: \"httpd -f -p 8080 -h /tmp\"\n      LIFECYCLE_EGRESS_ALLOW_CIDR: \"{gw}/32\"\n      LIFECYCLE_STOP_TIMEOUT: \"1\"\n"
        ),
    )
    .expect("override");
    let compose = Compose::for_stack(
        &e,
        vec![
            repo().join("deploy/compose.yaml"),
            repo().join("deploy/compose.restricted.yaml"),
            override_file,
        ],
        images,
        &stack,
        &project,
        [
            ("DOCKER_GID".to_owned(), gid.to_string()),
            // As an operator writes it: a netproxy --allow rule, its port.
            ("EGRESS_ALLOW".to_owned(), format!("{gw}:{port}")),
        ]
        .into_iter()
        .chain(net.env())
        .collect(),
    );
    let mut host = HostState::default();
    step(
        "the firewall rule set of compose.yaml's header is made before up",
        || {
            net.shipped_firewall("compose.yaml", &mut host, &project);
        },
    );

    step("the restricted stack's proxy comes up", || {
        let up = compose.run(&["up", "-d", "sockproxy"]);
        assert!(up.status.success(), "{}", text(&up));
    });

    let (id, name) = step(
        "the gateway makes a restricted sandbox behind its sidecar",
        || {
            let mut made = compose.run(&[
                "run", "--rm", "gateway", "create", "--user", "u1", "--thread", "t1",
            ]);
            // The proxy needs a moment to listen in its volume.
            for _ in 0..40 {
                if made.status.success() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(250));
                made = compose.run(&[
                    "run", "--rm", "gateway", "create", "--user", "u1", "--thread", "t1",
                ]);
            }
            let (created, name) = created(&made, &stack);
            let id = created["sandbox_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (id, name)
        },
    );

    step("the allowed target answers from inside the sandbox", || {
        let got = wget_in(&e.socket, &name, &format!("http://{gw}:{port}/"));
        assert_eq!(got.out(), format!("{ANSWER}\n"), "{}", got.stderr);
    });

    step("a target the rule does not name is refused", || {
        let other = port.checked_add(1).unwrap_or(port - 1);
        let got = wget_in(&e.socket, &name, &format!("http://{gw}:{other}/"));
        assert!(!got.ok(), "refused: {}", got.out());
        assert!(!got.out().contains(ANSWER), "{}", got.out());
    });

    step(
        "the host is not reached at the sandbox network's own gateway",
        || {
            let inspect = raw::get(&e.socket, &format!("/containers/{name}/json"))
                .expect("answer")
                .json();
            let nets = inspect["NetworkSettings"]["Networks"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            assert!(!nets.is_empty(), "{inspect}");
            for net in nets.keys() {
                let own_gw = network_gateway(&e.socket, net);
                if own_gw.is_empty() {
                    continue;
                }
                let got = docker(
                    &e.socket,
                    &[
                        "exec",
                        &name,
                        "nc",
                        "-z",
                        "-w",
                        "3",
                        &own_gw,
                        &port.to_string(),
                    ],
                );
                assert!(!got.ok(), "the host answered at {own_gw} on {net}");
            }
        },
    );

    step("the gateway destroys it, and down leaves nothing", || {
        let destroyed = compose.run(&["run", "--rm", "gateway", "destroy", &id]);
        assert!(destroyed.status.success(), "{}", text(&destroyed));
        let down = compose.run(&["down", "-v"]);
        assert!(down.status.success(), "{}", text(&down));
        assert_nothing_left(&e.socket, &project, &stack);
    });
    remove_stack(&e.socket, &stack);
}
