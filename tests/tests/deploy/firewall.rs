//! `deploy/firewall/sockproxy-firewall`, run as shipped, on the real engine's host: a
//! sandbox-like container publishes on a bridge's gateway address and on a "LAN" address (a veth
//! into a network namespace the test makes); without the rule set every bridge of the host
//! reaches both (the finding that kept sandboxes on loopback); with it only the admitted bridge
//! (`--from-interface`) or the admitted address (`--from-address`) does, and the host's own
//! processes still do; `--remove` brings back what was there before. The rule set's unit as
//! `systemd-analyze verify` reads it.
//!
//! The engine's host is the test's network namespace (a private dockerd's locally, the root
//! namespace in CI): every chain, namespace and interface the test makes is named for this run
//! and removed when it ends, failing or not.

use std::net::{IpAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{network_gateway, real_engine, Cleanup, TEST_IMAGE};
use sockproxy_tests::raw;
use sockproxy_tests::skip::skip;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::compose::{repo, text};

/// busybox's httpd answers every request (404 for /): any HTTP answer is a reach.
const SERVE: &str = "httpd -f -p 8080 -h /tmp";

/// The probe: an HTTP request with `nc`, bounded by its own `-w`; the first line of the answer.
fn probe_line(host: &str, port: u16) -> String {
    format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {host} {port} | head -n 1")
}

/// Whether `container` gets an HTTP answer from `host`:`port`.
pub(crate) fn container_reaches(sock: &Path, container: &str, host: &str, port: u16) -> bool {
    docker(
        sock,
        &["exec", container, "sh", "-c", &probe_line(host, port)],
    )
    .out()
    .starts_with("HTTP/")
}

/// Whether a process in network namespace `ns` gets an HTTP answer from `host`:`port` (the
/// host's busybox, the one the test image is made of).
fn netns_reaches(ns: &str, host: &str, port: u16) -> bool {
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        .args(["busybox", "sh", "-c", &probe_line(host, port)])
        .output()
        .expect("nsenter runs");
    String::from_utf8_lossy(&out.stdout).starts_with("HTTP/")
}

/// Whether the test's own process (the host) gets an HTTP answer from `host`:`port`.
fn host_reaches(host: &str, port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(ip) = host.parse::<IpAddr>() else {
        return false;
    };
    let Ok(mut s) =
        TcpStream::connect_timeout(&(ip, port).into(), std::time::Duration::from_secs(3))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got.starts_with(b"HTTP/")
}

fn script() -> PathBuf {
    repo().join("deploy/firewall/sockproxy-firewall")
}

fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

fn must(cmd: &str, args: &[&str]) {
    let out = run(cmd, args);
    assert!(out.status.success(), "{cmd} {args:?}: {}", text(&out));
}

/// What this run put on the host outside the engine: rule sets (removed with the script's own
/// `--remove`) and network namespaces (their veth ends go with them).
#[derive(Default)]
pub(crate) struct HostState {
    rule_sets: Vec<String>,
    namespaces: Vec<String>,
}

impl HostState {
    pub(crate) fn firewall(&mut self, name: &str, args: &[&str]) -> Output {
        if !self.rule_sets.iter().any(|n| n == name) {
            self.rule_sets.push(name.to_owned());
        }
        let out = Command::new(script())
            .args(["--name", name])
            .args(args)
            .output()
            .expect("the script runs");
        assert!(
            out.status.success(),
            "sockproxy-firewall {args:?}: {}",
            text(&out)
        );
        out
    }

    /// Namespace `ns` joined to the host by a veth: the host end `host_if` holds `host_ip`/30,
    /// the namespace's end `ns_ip`/30 with its default route through the host.
    fn lan_peer(&mut self, ns: &str, host_if: &str, host_ip: &str, ns_ip: &str) {
        must("ip", &["netns", "add", ns]);
        self.namespaces.push(ns.to_owned());
        must(
            "ip",
            &[
                "link", "add", host_if, "type", "veth", "peer", "name", "lan0", "netns", ns,
            ],
        );
        must(
            "ip",
            &["addr", "add", &format!("{host_ip}/30"), "dev", host_if],
        );
        must("ip", &["link", "set", host_if, "up"]);
        for args in [
            vec!["addr", "add", &*format!("{ns_ip}/30"), "dev", "lan0"],
            vec!["link", "set", "lan0", "up"],
            vec!["link", "set", "lo", "up"],
            vec!["route", "add", "default", "via", host_ip],
        ] {
            let mut all = vec!["-n", ns];
            all.extend(args);
            must("ip", &all);
        }
    }

    /// The rule set's chain, as `iptables -S` lists it (empty when there is none).
    pub(crate) fn chain(name: &str) -> String {
        let out = run("iptables", &["-w", "-S", &format!("SOCKPROXY-{name}")]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for HostState {
    fn drop(&mut self) {
        for name in &self.rule_sets {
            let _ = Command::new(script())
                .args(["--name", name, "--remove"])
                .output();
        }
        for ns in &self.namespaces {
            let _ = run("ip", &["netns", "del", ns]);
        }
    }
}

/// The host port `container`'s 8080/tcp is published on, as the engine holds it.
fn published_port(sock: &Path, container: &str) -> u16 {
    let c = raw::get(sock, &format!("/containers/{container}/json"))
        .expect("answer")
        .json();
    c["NetworkSettings"]["Ports"]["8080/tcp"][0]["HostPort"]
        .as_str()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{container}: no published port: {}", c["NetworkSettings"]))
}

/// Whether iptables answers here (root, the tool installed); a skip notice for `test` if not.
pub(crate) fn have_iptables(test: &str) -> bool {
    let ok = Command::new("iptables")
        .args(["-w", "-S", "DOCKER-USER"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip(
            test,
            "iptables does not answer (root in the engine's network namespace is needed)",
            "run the tests as root beside the engine, as .ci/run does",
        );
    }
    ok
}

#[test]
fn the_firewall_admits_only_the_gateways_bridge_or_address() {
    let test = "the_firewall_admits_only_the_gateways_bridge_or_address";
    let Some(e) = real_engine(test) else { return };
    if !have_iptables(test) {
        return;
    }
    let s = &e.socket;
    // `t{pid}x{n}`: short enough for an interface (15) and a chain (28 with SOCKPROXY-).
    let id = unique_prefix().trim_end_matches('-').to_owned();
    let mut clean = Cleanup::new(s);
    let mut host = HostState::default();

    let (gw_bridge, other_bridge) = (format!("g{id}"), format!("o{id}"));
    let (gw_net, other_net, sbx_net) = (
        clean.network(&format!("{id}-gw")),
        clean.network(&format!("{id}-other")),
        clean.network(&format!("{id}-sbx")),
    );
    for (net, bridge) in [
        (&gw_net, Some(&gw_bridge)),
        (&other_net, Some(&other_bridge)),
        (&sbx_net, None),
    ] {
        let mut args = vec!["network", "create"];
        let opt;
        if let Some(b) = bridge {
            opt = format!("com.docker.network.bridge.name={b}");
            args.extend(["-o", &opt]);
        }
        args.push(net);
        let out = docker(s, &args);
        assert!(out.ok(), "{net}: {}", out.stderr);
    }
    let gw_addr = network_gateway(s, &gw_net);
    assert!(!gw_addr.is_empty(), "{gw_net} has a gateway address");

    // The "LAN": the host's address on a veth into namespace A (the gateway's machine,
    // admitted) and another into namespace B (another machine on the network).
    let octet = std::process::id() % 250;
    let lan_addr = format!("198.18.{octet}.1");
    let (ns_a, ns_b) = (format!("{id}a"), format!("{id}b"));
    host.lan_peer(
        &ns_a,
        &format!("v{id}a"),
        &lan_addr,
        &format!("198.18.{octet}.2"),
    );
    host.lan_peer(
        &ns_b,
        &format!("v{id}b"),
        &format!("198.18.{octet}.5"),
        &format!("198.18.{octet}.6"),
    );

    let run_on = |clean: &mut Cleanup, name: &str, net: &str, publish: Option<&str>, cmd: &str| {
        let name = clean.container(&format!("{id}-{name}"));
        let mut args = vec!["run", "-d", "--name", &name, "--network", net];
        if let Some(p) = publish {
            args.extend(["-p", p]);
        }
        args.extend([TEST_IMAGE, "sh", "-c", cmd]);
        let out = docker(s, &args);
        assert!(out.ok(), "{name}: {}", out.stderr);
        name
    };
    let on_bridge = run_on(
        &mut clean,
        "sbx-bridge",
        &sbx_net,
        Some(&format!("{gw_addr}::8080")),
        SERVE,
    );
    let on_lan = run_on(
        &mut clean,
        "sbx-lan",
        &sbx_net,
        Some(&format!("{lan_addr}::8080")),
        SERVE,
    );
    let gateway = run_on(&mut clean, "gateway", &gw_net, None, "sleep 600");
    let foreign = run_on(&mut clean, "foreign", &other_net, None, "sleep 600");
    let (p_bridge, p_lan) = (published_port(s, &on_bridge), published_port(s, &on_lan));

    // dockerd publishes in the kernel's ephemeral range: what --ports names on a LAN address.
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").expect("range");
    let (low, high) = range
        .split_whitespace()
        .filter_map(|p| p.parse::<u16>().ok())
        .fold((u16::MAX, 0), |(l, h), p| (l.min(p), h.max(p)));
    for p in [p_bridge, p_lan] {
        assert!((low..=high).contains(&p), "{p} in {low}-{high}");
    }
    let ports = format!("{low}:{high}");

    let everyone = |port_bridge: bool| {
        let (addr, port) = if port_bridge {
            (gw_addr.as_str(), p_bridge)
        } else {
            (lan_addr.as_str(), p_lan)
        };
        [
            container_reaches(s, &gateway, addr, port),
            container_reaches(s, &foreign, addr, port),
            netns_reaches(&ns_a, addr, port),
            netns_reaches(&ns_b, addr, port),
            host_reaches(addr, port),
        ]
    };

    step(
        "without the rule set, every bridge and the network reach both ports",
        || {
            assert_eq!(
                everyone(true),
                [true; 5],
                "bridge address: gateway, foreign, A, B, host"
            );
            assert_eq!(
                everyone(false),
                [true; 5],
                "LAN address: gateway, foreign, A, B, host"
            );
        },
    );

    let (by_if, by_addr) = (format!("{id}i"), format!("{id}l"));
    step(
        "--from-interface: only the gateway's bridge (and the host) reach the bridge address",
        || {
            host.firewall(
                &by_if,
                &["--address", &gw_addr, "--from-interface", &gw_bridge],
            );
            // Idempotent: a second run leaves one rule set, not two.
            host.firewall(
                &by_if,
                &["--address", &gw_addr, "--from-interface", &gw_bridge],
            );
            let jumps = run("iptables", &["-w", "-S"]);
            let listed = String::from_utf8_lossy(&jumps.stdout);
            assert_eq!(
                listed
                    .lines()
                    .filter(|l| l.ends_with(&format!("-j SOCKPROXY-{by_if}")))
                    .count(),
                2,
                "one jump from INPUT, one from DOCKER-USER: {listed}"
            );
            assert_eq!(
                everyone(true),
                [true, false, false, false, true],
                "bridge address: gateway, foreign, A, B, host"
            );
            assert_eq!(
                everyone(false),
                [true; 5],
                "the LAN address is another rule set's"
            );
        },
    );

    step("--from-address with --ports: only the admitted machine (and the host) reach the LAN address", || {
        let admitted = format!("198.18.{octet}.2");
        host.firewall(
            &by_addr,
            &["--address", &lan_addr, "--ports", &ports, "--from-address", &admitted],
        );
        assert_eq!(
            everyone(false),
            [false, false, true, false, true],
            "LAN address: gateway, foreign, A, B, host"
        );
    });

    step("--remove restores what was there before", || {
        for name in [&by_if, &by_addr] {
            host.firewall(name, &["--remove"]);
            host.firewall(name, &["--remove"]);
            assert_eq!(HostState::chain(name), "", "SOCKPROXY-{name} is gone");
        }
        let jumps = run("iptables", &["-w", "-S"]);
        assert!(
            !String::from_utf8_lossy(&jumps.stdout).contains(&format!("SOCKPROXY-{id}")),
            "no jump is left"
        );
        assert_eq!(everyone(true), [true; 5], "bridge address");
        assert_eq!(everyone(false), [true; 5], "LAN address");
    });
}

/// What the script refuses before touching the host: each with its own line on stderr and
/// exit status 2, and nothing made; `--help` is its header, whole.
#[test]
fn the_firewall_script_refuses_what_it_cannot_make_exact() {
    let help = Command::new(script()).arg("--help").output().expect("runs");
    assert_eq!(help.status.code(), Some(0), "{}", text(&help));
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.starts_with("sockproxy-firewall: ")
            && help.contains("--from-interface IF | --from-address IP[/LEN]")
            && help
                .trim_end()
                .ends_with("run it from sockproxy-firewall@.service."),
        "{help}"
    );
    for (args, says) in [
        (
            vec!["--address", "10.0.0.1", "--from-interface", "x"],
            "--name must be",
        ),
        (
            vec!["--name", "a-name-longer-than-18", "--remove"],
            "--name must be",
        ),
        (
            vec![
                "--name",
                "x",
                "--address",
                "fd00::1",
                "--from-interface",
                "x",
            ],
            "--address must be an IPv4 address",
        ),
        (
            vec!["--name", "x", "--address", "10.0.0.1"],
            "name what is admitted",
        ),
        (
            vec![
                "--name",
                "x",
                "--address",
                "10.0.0.1",
                "--from-address",
                "10.0.0.2",
                "--ports",
                "1-2",
            ],
            "--ports must be",
        ),
        (
            vec![
                "--name",
                "x",
                "--address",
                "10.0.0.1",
                "--from-interface",
                "a b",
            ],
            "--from-interface must be",
        ),
        (
            vec![
                "--name",
                "x",
                "--address",
                "10.0.0.1",
                "--from-address",
                "any",
            ],
            "--from-address must be",
        ),
        (vec!["--name", "x", "--bogus"], "unknown argument --bogus"),
    ] {
        let out = Command::new(script()).args(&args).output().expect("runs");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with("sockproxy-firewall: ") && stderr.contains(says),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

/// The rule set's unit as systemd reads it (no error, no warning), and its env example as
/// written: the arguments it gives the script make a rule set here (removed at once).
#[test]
fn systemd_accepts_the_firewall_unit_and_its_example_runs() {
    let test = "systemd_accepts_the_firewall_unit_and_its_example_runs";
    if !crate::systemd::verified(test, "sockproxy-firewall@.service") {
        return;
    }
    let env = std::fs::read_to_string(repo().join("deploy/systemd/sockproxy-firewall.env.example"))
        .expect("env example");
    let args: Vec<String> = env
        .lines()
        .find_map(|l| l.strip_prefix("SOCKPROXY_FIREWALL_ARGS="))
        .expect("the example sets SOCKPROXY_FIREWALL_ARGS")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    if !have_iptables(test) {
        return;
    }
    let name = unique_prefix().trim_end_matches('-').to_owned();
    let mut host = HostState::default();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    host.firewall(&name, &args);
    let chain = HostState::chain(&name);
    // The host's own connections to a listener on the address (a provisioner in the host's
    // network namespace) come on lo; then the admitted bridge.
    assert!(
        chain.contains(&format!(
            "-A SOCKPROXY-{name} -i lo -j ACCEPT\n-A SOCKPROXY-{name} -i dfgw0 -j ACCEPT"
        )),
        "{chain}"
    );
    assert!(
        chain.contains(&format!("-A SOCKPROXY-{name} -j DROP")),
        "{chain}"
    );
    host.firewall(&name, &["--remove"]);
    assert_eq!(HostState::chain(&name), "");
}
