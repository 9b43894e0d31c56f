//! Issue 49 on the real dockerd: a restricted sandbox reaches its sidecar and nothing else, and
//! is reached only through the sidecar's relay. lifecycle (behind `sockproxy --restricted`, the
//! real netproxy image as sidecar) makes two sandboxes of one stack; the test checks what the
//! engine holds (a host-less internal network, the relay published from the sidecar), that the
//! URL answers from the host and from a container on another bridge, that neither sandbox
//! reaches a host service listening on `0.0.0.0` (a listener this test runs) at any host
//! address, that the two cannot reach each other, and that the sidecar still carries an allowed
//! request. Every probe is `nc`/`wget` run in the sandbox with `docker exec`: the sandbox's own
//! command (busybox's httpd) decides nothing, and the same probe from a container on an ordinary
//! bridge shows the service answers. (busybox's `wget -T` crashes in the test image: no `-T`;
//! the `docker` helper bounds each call.)

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::Output;
use std::sync::{Arc, Mutex};

use lifecycle::naming::sandbox_id;
use sockproxy_tests::bounded::{OutputWithin, LONG};
use sockproxy_tests::cli::{docker, CliOutput};
use sockproxy_tests::engine::{ensure_netproxy_image, network_gateway, real_engine, Cleanup};
use sockproxy_tests::lc::{lifecycle_base, names as names_of};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

/// What the host service answers, whatever is sent (an HTTP answer, so `wget` reads it too).
const SERVICE: &str = "host-service-answered";

/// A service on every host address (`0.0.0.0`), answering each connection with `SERVICE` and
/// recording who connected: the host's services a sandbox must not reach.
fn host_service() -> (u16, Arc<Mutex<Vec<IpAddr>>>) {
    let listener = TcpListener::bind("0.0.0.0:0").expect("bind 0.0.0.0");
    let port = listener.local_addr().expect("address").port();
    let peers = Arc::new(Mutex::new(Vec::new()));
    let seen = peers.clone();
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(mut c) = c else { continue };
            if let Ok(peer) = c.peer_addr() {
                seen.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(peer.ip());
            }
            let _ = c.set_read_timeout(Some(std::time::Duration::from_millis(300)));
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            let body = format!("{SERVICE}\n");
            let _ = write!(
                c,
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, peers)
}

/// Every IPv4 address of this network namespace (the engine's host): its bridges' gateways
/// among them.
fn host_addresses() -> BTreeSet<Ipv4Addr> {
    nix::ifaddrs::getifaddrs()
        .expect("interfaces")
        .filter_map(|i| i.address?.as_sockaddr_in().map(|a| a.ip()))
        .filter(|a| !a.is_loopback())
        .collect()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_default()
}

/// `nc` to `addr:port` from inside `container` with a bounded wait; what came back.
fn nc_from(sock: &Path, container: &str, addr: &str, port: u16) -> CliOutput {
    let probe = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {addr} {port}");
    docker(sock, &["exec", container, "sh", "-c", &probe])
}

fn ip_on(sock: &Path, container: &str, network: &str) -> String {
    raw::get(sock, &format!("/containers/{container}/json"))
        .expect("answer")
        .json()["NetworkSettings"]["Networks"][network]["IPAddress"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_restricted_sandbox_reaches_its_sidecar_only_and_is_reached_through_its_relay() {
    let Some(e) = real_engine(
        "a_restricted_sandbox_reaches_its_sidecar_only_and_is_reached_through_its_relay",
    ) else {
        return;
    };
    let sidecar_image = ensure_netproxy_image(&e.socket);
    let prefix = unique_prefix();
    let threads = ["thread-iso-a", "thread-iso-b"];
    let ids: Vec<String> = threads
        .iter()
        .map(|t| sandbox_id("user-iso", t).expect("valid"))
        .collect();
    let names: Vec<_> = ids.iter().map(|id| names_of(&prefix, id)).collect();
    let mut clean = Cleanup::new(&e.socket);
    for n in &names {
        clean.container(&n.sandbox);
        clean.container(&n.sidecar);
        clean.network(&n.network);
        clean.network(&n.egress);
    }
    // A bridge of the test's own, standing for where a gateway in a container runs: the
    // relay is published on its gateway address (a host address that bridge reaches).
    let other = clean.network(&format!("{prefix}gateway-net"));
    let client = clean.container(&format!("{prefix}gateway"));
    let publish = step("a bridge and a container on it, for the gateway", || {
        assert!(docker(&e.socket, &["network", "create", &other]).ok());
        let up = docker(
            &e.socket,
            &[
                "run",
                "-d",
                "--name",
                &client,
                "--network",
                &other,
                &e.image,
                "sleep",
                "600",
            ],
        );
        assert!(up.ok(), "{}", up.stderr);
        let gw = network_gateway(&e.socket, &other);
        assert!(!gw.is_empty(), "the bridge's gateway");
        gw
    });
    let (port, peers) = host_service();
    // The allowed upstream: the host service itself at the default bridge's gateway, which
    // only the sidecar may dial, by rule.
    let default_gw = network_gateway(&e.socket, "bridge");
    assert!(!default_gw.is_empty(), "the default bridge's gateway");

    let proxy = StackProxy::start_with(&e.socket, &prefix, true, |c| {
        c.create_rules.public_ports = true;
    });
    let state = tempfile::tempdir().expect("dir");
    let urls: Vec<String> =
        step("lifecycle creates two restricted sandboxes", || {
            threads
                .iter()
                .map(|thread| {
                    let made = lifecycle_base(proxy.socket(), &prefix, "restricted", state.path())
                    .args(["--sidecar-image", &sidecar_image, "--publish-address", &publish])
                    .args(["--egress-allow", &format!("{default_gw}:{port}")])
                    .args(["--egress-allow-cidr", &format!("{default_gw}/32")])
                    .args([
                        "--sandbox-cmd",
                        "mkdir -p /www && hostname > /www/index.html && httpd -f -p 8080 -h /www",
                        "--ready-timeout",
                        "30",
                        "--stop-timeout",
                        "1",
                    ])
                    .args(["create", "--user", "user-iso", "--thread", thread])
                    .output_within(LONG)
                    .expect("lifecycle runs");
                    assert!(
                        made.status.success(),
                        "{}",
                        String::from_utf8_lossy(&made.stderr)
                    );
                    json(&made)["url"].as_str().unwrap_or_default().to_owned()
                })
                .collect()
        });

    step(
        "what the engine holds: host-less internal networks, the relay published",
        || {
            for (n, url) in names.iter().zip(&urls) {
                let net = raw::get(&e.socket, &format!("/networks/{}", n.network))
                    .expect("answer")
                    .json();
                assert_eq!(net["Internal"], true, "{net}");
                assert_eq!(
                    net["Options"]["com.docker.network.bridge.inhibit_ipv4"], "true",
                    "{net}"
                );
                assert_eq!(net["EnableIPv6"], false, "{net}");
                let egress = raw::get(&e.socket, &format!("/networks/{}", n.egress))
                    .expect("answer")
                    .json();
                assert_eq!(egress["Internal"], false, "{egress}");
                assert!(
                    egress["Options"]
                        .get("com.docker.network.bridge.inhibit_ipv4")
                        .is_none(),
                    "the egress network is the sidecar's way out: {egress}"
                );
                let sidecar = raw::get(&e.socket, &format!("/containers/{}/json", n.sidecar))
                    .expect("answer")
                    .json();
                let args: Vec<String> =
                    serde_json::from_value(sidecar["Args"].clone()).expect("Args");
                let relay = [
                    "--relay".to_owned(),
                    format!("0.0.0.0:8080={}:8080", n.sandbox),
                ];
                assert!(args.windows(2).any(|w| w == relay), "{args:?}");
                let bound = &sidecar["NetworkSettings"]["Ports"]["8080/tcp"][0];
                assert_eq!(bound["HostIp"], publish.as_str(), "{sidecar}");
                let host_port = bound["HostPort"].as_str().unwrap_or_default();
                assert_eq!(url, &format!("http://{publish}:{host_port}"));
                let sandbox = raw::get(&e.socket, &format!("/containers/{}/json", n.sandbox))
                    .expect("answer")
                    .json();
                assert_eq!(
                    sandbox["HostConfig"]["PortBindings"],
                    serde_json::Value::Null,
                    "the sandbox publishes nothing itself"
                );
            }
        },
    );

    step(
        "each URL answers from the host, its own sandbox's page",
        || {
            for (n, url) in names.iter().zip(&urls) {
                let host = raw::get(&e.socket, &format!("/containers/{}/json", n.sandbox))
                    .expect("answer")
                    .json()["Config"]["Hostname"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let page = host_get(url);
                assert_eq!(page.trim(), host, "{url}");
            }
        },
    );

    step(
        "each URL answers from a container on another bridge",
        || {
            for url in &urls {
                let got = docker(
                    &e.socket,
                    &["exec", &client, "wget", "-q", "-O", "-", &format!("{url}/")],
                );
                assert!(
                    got.ok() && !got.out().trim().is_empty(),
                    "{url}: {}",
                    got.stderr
                );
            }
        },
    );

    // The probe works: from an ordinary bridge, the host service answers at its gateway.
    step(
        "the host service answers a container on an ordinary bridge",
        || {
            let got = nc_from(&e.socket, &client, &publish, port);
            assert!(got.out().contains(SERVICE), "{}: {}", got.out(), got.stderr);
        },
    );

    let sandbox_ips: Vec<String> = names
        .iter()
        .map(|n| ip_on(&e.socket, &n.sandbox, &n.network))
        .collect();
    step(
        "no sandbox reaches the host service at any host address",
        || {
            let mut targets: BTreeSet<String> =
                host_addresses().iter().map(ToString::to_string).collect();
            for n in &names {
                // The internal network's gateway address: the host holds it no more.
                let gw = network_gateway(&e.socket, &n.network);
                if !gw.is_empty() {
                    targets.insert(gw);
                }
            }
            assert!(
                targets.contains(&publish) && targets.contains(&default_gw),
                "{targets:?}"
            );
            // One sandbox tries them all (each a bounded `nc`); the other its own gateway and the
            // publish address.
            let other_gw = network_gateway(&e.socket, &names[1].network);
            for (n, addrs) in [
                (&names[0], targets.iter().cloned().collect::<Vec<_>>()),
                (&names[1], vec![other_gw, publish.clone()]),
            ] {
                for addr in addrs.iter().filter(|a| !a.is_empty()) {
                    let got = nc_from(&e.socket, &n.sandbox, addr, port);
                    assert!(
                        !got.out().contains(SERVICE),
                        "{} reached the host at {addr}: {}",
                        n.sandbox,
                        got.out()
                    );
                }
            }
            let seen = peers.lock().unwrap_or_else(|p| p.into_inner()).clone();
            for ip in &sandbox_ips {
                assert!(
                    !seen.iter().any(|p| p.to_string() == *ip),
                    "the service saw a connection from sandbox {ip}: {seen:?}"
                );
            }
        },
    );

    step("the two sandboxes cannot reach each other", || {
        for (from, to) in [(0, 1), (1, 0)] {
            for target in [sandbox_ips[to].as_str(), names[to].sandbox.as_str()] {
                let got = nc_from(&e.socket, &names[from].sandbox, target, 8080);
                assert!(
                    !got.out().starts_with("HTTP/"),
                    "{} reached {target}: {}",
                    names[from].sandbox,
                    got.out()
                );
            }
        }
    });

    step("the sidecar still carries an allowed request", || {
        let got = docker(
            &e.socket,
            &[
                "exec",
                &names[0].sandbox,
                "wget",
                "-q",
                "-O",
                "-",
                &format!("http://{default_gw}:{port}/"),
            ],
        );
        assert_eq!(got.out(), format!("{SERVICE}\n"), "{}", got.stderr);
        let seen = peers.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let sidecar_egress = ip_on(&e.socket, &names[0].sidecar, &names[0].egress);
        assert!(
            seen.iter().any(|p| p.to_string() == sidecar_egress),
            "it came from the sidecar ({sidecar_egress}): {seen:?}"
        );
    });

    step("destroy removes both sandboxes and their relays", || {
        for id in &ids {
            let out = lifecycle_base(proxy.socket(), &prefix, "restricted", state.path())
                .args(["--stop-timeout", "1", "destroy", id])
                .output_within(LONG)
                .expect("lifecycle runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for n in &names {
            assert_eq!(
                raw::get(&e.socket, &format!("/containers/{}/json", n.sidecar))
                    .expect("answer")
                    .status,
                404
            );
        }
    });
}

/// One HTTP GET from this process (the host), its body; empty when nothing answers.
fn host_get(url: &str) -> String {
    let Some(rest) = url.strip_prefix("http://") else {
        return String::new();
    };
    let Ok(mut c) = std::net::TcpStream::connect(rest) else {
        return String::new();
    };
    let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let _ = write!(c, "GET / HTTP/1.0\r\nHost: {rest}\r\n\r\n");
    let mut all = String::new();
    let _ = c.read_to_string(&mut all);
    all.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}
