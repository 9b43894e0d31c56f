//! Issue 49 on the real engine: what a stack's containers reach. Every probe runs inside a
//! container (`docker exec … nc`, the busybox test image) and reads what came back; the
//! containers' own commands only sleep or serve. Each test fails on the proxy before the
//! issue: every stack's containers shared the engine's default bridge, and an internal network
//! gave the host an address.
//!
//! - Open mode: a container stack A makes reaches neither of stack B's sandboxes (deer-flow's
//!   `docker run -p 127.0.0.1:PORT:8080` and lifecycle's create), whose published ports still
//!   answer on the host; two sandboxes of one stack do not reach each other.
//! - Restricted mode: a sandbox on its internal network reaches the peer on it (the sidecar's
//!   place) and no listener the test holds on the host on 0.0.0.0 or `::`, at the gateway
//!   address or any host address, IPv4 or IPv6 (the bridge's link-local address among them).

use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{real_engine, Cleanup, Engine, TEST_IMAGE};
use sockproxy_tests::lc::lifecycle_command;
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::bypasses::{inspect, send};

/// busybox's httpd answers every request (404 for /): any HTTP answer is a reach.
const SERVE: &str = "httpd -f -p 8080 -h /tmp";

/// Whether `container` (through `sock`: its stack's proxy, or the engine) gets an HTTP answer
/// from `host`:`port`; the probe is `nc` inside the container, bounded by its own `-w`.
fn reaches(sock: &Path, container: &str, host: &str, port: u16) -> bool {
    let line = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {host} {port}");
    let out = docker(sock, &["exec", container, "sh", "-c", &line]);
    out.out().starts_with("HTTP/")
}

/// A container made through `sock` with `docker run -d`; its name.
fn run(sock: &Path, clean: &mut Cleanup, name: &str, args: &[&str], cmd: &str) -> String {
    let name = clean.container(name);
    let mut argv = vec!["run", "-d", "--name", &name];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&[TEST_IMAGE, "sh", "-c", cmd]);
    let out = docker(sock, &argv);
    assert!(out.ok(), "docker run {name}: {}", out.stderr);
    name
}

/// The container's address on `network`, as the engine holds it.
fn ip_on(e: &Engine, container: &str, network: &str) -> String {
    let c = inspect(e, "containers", &format!("{container}/json")).json();
    c["NetworkSettings"]["Networks"][network]["IPAddress"]
        .as_str()
        .unwrap_or_else(|| panic!("{container} is not on {network}: {}", c["NetworkSettings"]))
        .to_owned()
}

/// An HTTP answer from 127.0.0.1:`port`, as deer-flow's gateway on the host asks it.
fn answers_on_loopback(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got.starts_with(b"HTTP/")
}

#[test]
fn a_stacks_containers_reach_no_other_sandbox_in_open_mode() {
    let test = "a_stacks_containers_reach_no_other_sandbox_in_open_mode";
    let Some(e) = real_engine(test) else { return };
    let (pa, pb) = (unique_prefix(), unique_prefix());
    let mut clean = Cleanup::new(&e.socket);
    let a = StackProxy::start(&e.socket, &pa, false);
    // What deer-flow's proxy allows (its `docker run` passes seccomp=unconfined).
    let b = StackProxy::start_with(&e.socket, &pb, false, |c| {
        c.create_rules.allow_seccomp_unconfined = true;
    });
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let (b_net, a_net) = (b.stack_network.clone(), a.stack_network.clone());

    let deer = step(
        "stack B: deer-flow's docker run, its port on loopback",
        || {
            let publish = format!("127.0.0.1:{port}:8080");
            let args = [
                "--rm",
                "--security-opt",
                "seccomp=unconfined",
                "-p",
                &publish,
            ];
            run(
                b.socket(),
                &mut clean,
                &format!("{pb}sandbox-df"),
                &args,
                SERVE,
            )
        },
    );
    let lc = step(
        "stack B: lifecycle's open-mode create (it waits for the URL)",
        || {
            let state = tempfile::tempdir().expect("state");
            let id = lifecycle::naming::sandbox_id("user-1", "thread-iso").expect("id");
            let name = lifecycle::naming::Names::new(
                &lifecycle::naming::Prefix::parse(&pb).expect("prefix"),
                &id,
            )
            .sandbox;
            clean.container(&name);
            let out = lifecycle_command(b.socket(), &pb, "open", state.path())
                .args(["--sandbox-cmd", SERVE, "--ready-timeout", "30"])
                .args(["create", "--user", "user-1", "--thread", "thread-iso"])
                .output()
                .expect("lifecycle runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            name
        },
    );
    let peer = run(
        b.socket(),
        &mut clean,
        &format!("{pb}sandbox-peer"),
        &[],
        "sleep 600",
    );
    let probe = run(
        a.socket(),
        &mut clean,
        &format!("{pa}sandbox-probe"),
        &[],
        "sleep 600",
    );

    step(
        "the engine holds each stack's containers on its own network",
        || {
            for (c, net) in [
                (&deer, &b_net),
                (&lc, &b_net),
                (&peer, &b_net),
                (&probe, &a_net),
            ] {
                let held = inspect(&e, "containers", &format!("{c}/json")).json();
                assert_eq!(held["HostConfig"]["NetworkMode"], json!(net), "{c}");
                let on: Vec<&String> = held["NetworkSettings"]["Networks"]
                    .as_object()
                    .map(|m| m.keys().collect())
                    .unwrap_or_default();
                assert_eq!(on, [net], "{c}");
            }
            for (net, stack) in [
                (&a_net, format!("test-{pa}")),
                (&b_net, format!("test-{pb}")),
            ] {
                let n = inspect(&e, "networks", net).json();
                assert_eq!(n["Labels"]["sockproxy.stack"], json!(stack), "{n}");
                assert_eq!(
                    n["Options"],
                    json!({ "com.docker.network.bridge.enable_icc": "false" }),
                    "{n}"
                );
            }
        },
    );

    step(
        "deer-flow's published port answers on the host's loopback",
        || {
            assert!(answers_on_loopback(port), "127.0.0.1:{port}");
        },
    );

    let (deer_ip, lc_ip) = (ip_on(&e, &deer, &b_net), ip_on(&e, &lc, &b_net));
    step(
        "control: the probe reaches a sandbox from inside its own namespace",
        || {
            let id = inspect(&e, "containers", &format!("{deer}/json")).json()["Id"]
                .as_str()
                .expect("an ID")
                .to_owned();
            let control = clean.container(&format!("ctl-{pb}"));
            let body = json!({
                "Image": TEST_IMAGE, "Cmd": ["sleep", "600"],
                "HostConfig": { "NetworkMode": format!("container:{id}") }
            });
            let r = send(
                &e.socket,
                "POST",
                &format!("/containers/create?name={control}"),
                &body,
            );
            assert_eq!(r.status, 201, "{}", r.text());
            let r = raw::request(
                &e.socket,
                "POST",
                &format!("/containers/{control}/start"),
                None,
            )
            .expect("answer");
            assert_eq!(r.status, 204, "{}", r.text());
            assert!(reaches(&e.socket, &control, "127.0.0.1", 8080));
        },
    );

    step(
        "stack A's container reaches neither of stack B's sandboxes",
        || {
            assert!(!reaches(a.socket(), &probe, &deer_ip, 8080), "{deer_ip}");
            assert!(!reaches(a.socket(), &probe, &lc_ip, 8080), "{lc_ip}");
        },
    );

    step("two sandboxes of one stack do not reach each other", || {
        assert!(!reaches(b.socket(), &peer, &deer_ip, 8080), "{deer_ip}");
        assert!(!reaches(b.socket(), &peer, &lc_ip, 8080), "{lc_ip}");
    });

    step("NET_RAW is gone from the sandbox's capabilities", || {
        let held = inspect(&e, "containers", &format!("{deer}/json")).json();
        assert_eq!(held["HostConfig"]["CapDrop"], json!(["NET_RAW"]));
        let out = docker(
            b.socket(),
            &["exec", &deer, "grep", "CapEff", "/proc/1/status"],
        );
        let hex = out
            .out()
            .split_whitespace()
            .last()
            .unwrap_or_default()
            .to_owned();
        let eff = u64::from_str_radix(&hex, 16).expect("CapEff in hex");
        assert_eq!(eff & (1 << 13), 0, "CAP_NET_RAW (13) is effective: {hex}");
    });
}

/// A listener on the host (the test's own network namespace) on `addr`:0 that answers every
/// connection with an HTTP status line, until dropped.
struct HostListener {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl HostListener {
    fn start(addr: &str) -> Self {
        let l = TcpListener::bind((addr, 0)).expect("bind");
        l.set_nonblocking(true).expect("nonblocking");
        let port = l.local_addr().expect("address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Self { port, stop }
    }
}

impl Drop for HostListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Every address of the host's interfaces, with the interface each is on.
fn host_addresses() -> Vec<(IpAddr, String)> {
    nix::ifaddrs::getifaddrs()
        .expect("interfaces")
        .filter_map(|i| {
            let a = i.address?;
            let ip = a
                .as_sockaddr_in()
                .map(|s| IpAddr::V4(s.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())))?;
            Some((ip, i.interface_name))
        })
        .collect()
}

#[test]
fn a_restricted_sandbox_reaches_its_peer_and_no_host_address() {
    let test = "a_restricted_sandbox_reaches_its_peer_and_no_host_address";
    let Some(e) = real_engine(test) else { return };
    let p = unique_prefix();
    let mut clean = Cleanup::new(&e.socket);
    let r = StackProxy::start(&e.socket, &p, true);
    let (v4, v6) = (HostListener::start("0.0.0.0"), HostListener::start("::"));
    let net = clean.network(&format!("{p}sandbox-net-iso"));

    let held = step(
        "the stack's internal network is made with no host address",
        || {
            let made = send(
                r.socket(),
                "POST",
                "/networks/create",
                &json!({ "Name": net, "Internal": true }),
            );
            assert_eq!(made.status, 201, "{}", made.text());
            let n = inspect(&e, "networks", &net).json();
            assert_eq!(
                n["Options"]["com.docker.network.bridge.inhibit_ipv4"],
                json!("true"),
                "{n}"
            );
            n
        },
    );
    let gateway = held["IPAM"]["Config"][0]["Gateway"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let bridge = format!("br-{}", &held["Id"].as_str().expect("an ID")[..12]);
    let on = ["--network", net.as_str()];
    let sidecar = run(
        r.socket(),
        &mut clean,
        &format!("{p}netproxy-iso"),
        &on,
        SERVE,
    );
    let sandbox = run(
        r.socket(),
        &mut clean,
        &format!("{p}sandbox-iso"),
        &on,
        "sleep 600",
    );

    step(
        "control: a plain internal network gives its containers the host",
        || {
            let plain = clean.network(&format!("ctl-{p}net"));
            let made = send(
                &e.socket,
                "POST",
                "/networks/create",
                &json!({ "Name": plain, "Internal": true }),
            );
            assert_eq!(made.status, 201, "{}", made.text());
            let n = inspect(&e, "networks", &plain).json();
            let gw = n["IPAM"]["Config"][0]["Gateway"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let ctl = run(
                &e.socket,
                &mut clean,
                &format!("ctl-{p}c"),
                &["--network", &plain],
                "sleep 600",
            );
            assert!(reaches(&e.socket, &ctl, &gw, v4.port), "{gw}");
        },
    );

    step(
        "the sandbox reaches its peer on the internal network",
        || {
            let ip = ip_on(&e, &sidecar, &net);
            assert!(reaches(r.socket(), &sandbox, &ip, 8080), "{ip}");
        },
    );

    step("the sandbox reaches no host address, IPv4 or IPv6", || {
        let mut targets = vec![(gateway.clone(), v4.port)];
        for (ip, iface) in host_addresses() {
            match ip {
                IpAddr::V4(a) => targets.push((a.to_string(), v4.port)),
                // A link-local address is reached on the sandbox's own link: the bridge's is
                // the one a sandbox could reach.
                IpAddr::V6(a) if a.segments()[0] & 0xffc0 == 0xfe80 => {
                    if iface == bridge {
                        targets.push((format!("{a}%eth0"), v6.port));
                    }
                }
                IpAddr::V6(a) => targets.push((a.to_string(), v6.port)),
            }
        }
        assert!(
            targets.iter().any(|(t, _)| t.contains("%eth0")),
            "the bridge {bridge} has a link-local address to probe: {:?}",
            host_addresses()
        );
        let reached: Vec<&(String, u16)> = targets
            .iter()
            .filter(|(host, port)| reaches(r.socket(), &sandbox, host, *port))
            .collect();
        assert!(reached.is_empty(), "reached from the sandbox: {reached:?}");
    });

    step("IPv6 cannot be turned on in the sandbox", || {
        let name = clean.container(&format!("{p}sandbox-v6"));
        let key = "net.ipv6.conf.all.disable_ipv6";
        let strict = StackProxy::start_with(&e.socket, &p, true, |c| {
            c.create_rules.allow_sysctls = vec![key.into()];
        });
        let body: Value = json!({
            "Image": TEST_IMAGE, "Cmd": ["sleep", "600"],
            "HostConfig": { "NetworkMode": net, "Sysctls": { key: "0" } }
        });
        let r = send(
            strict.socket(),
            "POST",
            &format!("/containers/create?name={name}"),
            &body,
        );
        crate::bypasses::refused(&r, 403, "stay off IPv6, whatever --allow-sysctl says");
        assert_eq!(
            inspect(&e, "containers", &format!("{name}/json")).status,
            404
        );
    });
}
