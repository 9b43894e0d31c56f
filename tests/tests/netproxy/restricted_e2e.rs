//! Restricted mode end to end on the real dockerd: lifecycle behind `sockproxy --restricted`
//! creates a sandbox whose only way out is the real netproxy image; from inside the sandbox an
//! allowed upstream answers through the sidecar, a name that is not allowed gets 403 with
//! `X-Netproxy-Error`, and the upstream cannot be reached directly at all. The upstream lives
//! outside the sidecar's networks (on the engine host, reached at the default bridge's
//! gateway): the sidecar's own networks are never dialable (issue 14, case 2), which the
//! container on its egress network shows even with that network's range trusted. lifecycle's
//! `--egress-own-cidr` and `--egress-nat64-prefix` reach the sidecar: an allowed address in the
//! one is refused as the proxy's own network, one in the other by the IPv4 it carries.

use lifecycle::naming::sandbox_id;
use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{ensure_netproxy_image, real_engine, Cleanup};
use sockproxy_tests::lc::lifecycle_base;
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

#[test]
fn a_restricted_sandbox_reaches_only_what_its_sidecar_allows() {
    let Some(e) = real_engine("a_restricted_sandbox_reaches_only_what_its_sidecar_allows") else {
        return;
    };
    let sidecar_image = ensure_netproxy_image(&e.socket);
    let prefix = unique_prefix();
    let id = sandbox_id("user-e2e", "thread-e2e").expect("valid");
    let names = sockproxy_tests::lc::names(&prefix, &id);
    let upstream = format!("{prefix}upstream");
    let mut clean = Cleanup::new(&e.socket);
    clean.container(&names.sandbox);
    clean.container(&names.sidecar);
    clean.container(&upstream);
    clean.network(&names.network);
    clean.network(&names.egress);

    // A container on the stack's egress network: the sidecar's own network, never dialable.
    let subnet = step("a neighbour on the stack's egress network", || {
        assert!(docker(&e.socket, &["network", "create", &names.egress]).ok());
        let neighbour = docker(
            &e.socket,
            &[
                "run",
                "-d",
                "--name",
                &upstream,
                "--network",
                &names.egress,
                &e.image,
                "sh",
                "-c",
                "mkdir -p /www && echo neighbour > /www/index.html && httpd -f -p 80 -h /www",
            ],
        );
        assert!(neighbour.ok(), "{}", neighbour.stderr);
        let net = raw::get(&e.socket, &format!("/networks/{}", names.egress))
            .expect("answer")
            .json();
        let subnet = net["IPAM"]["Config"][0]["Subnet"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let neighbour_ip = raw::get(&e.socket, &format!("/containers/{upstream}/json"))
            .expect("answer")
            .json()["NetworkSettings"]["Networks"][&names.egress]["IPAddress"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(!subnet.is_empty() && !neighbour_ip.is_empty());
        subnet
    });

    // The allowed upstream: on the engine host's network, reached at the default bridge's
    // gateway, a host address outside the sidecar's networks.
    let (gateway, port, upstream_url) = step("the allowed upstream on the engine host", || {
        let host_upstream = format!("{prefix}host-upstream");
        clean.container(&host_upstream);
        let port = std::net::TcpListener::bind("0.0.0.0:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let up = docker(
            &e.socket,
            &[
                "run",
                "-d",
                "--name",
                &host_upstream,
                "--network",
                "host",
                &e.image,
                "sh",
                "-c",
                &format!(
                "mkdir -p /www && echo upstream-ok > /www/index.html && httpd -f -p {port} -h /www"
            ),
            ],
        );
        assert!(up.ok(), "{}", up.stderr);
        let bridge = raw::get(&e.socket, "/networks/bridge")
            .expect("answer")
            .json();
        let gateway = bridge["IPAM"]["Config"][0]["Gateway"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| {
                // Not always filled in: the gateway is the subnet's first address.
                let net: ipnet::Ipv4Net = bridge["IPAM"]["Config"][0]["Subnet"]
                    .as_str()?
                    .parse()
                    .ok()?;
                net.hosts().next().map(|a| a.to_string())
            })
            .expect("the default bridge's gateway");
        let upstream_url = format!("http://{gateway}:{port}/");
        (gateway, port, upstream_url)
    });

    // An address on a bridge of this test's own with nothing on it: if the sidecar ever dialed
    // it, nothing would leave this machine.
    let probe = format!("{prefix}probe");
    clean.network(&probe);
    let unused = step("an empty bridge of the test's own", || {
        assert!(docker(&e.socket, &["network", "create", &probe]).ok());
        raw::get(&e.socket, &format!("/networks/{probe}"))
            .expect("answer")
            .json()["IPAM"]["Config"][0]["Subnet"]
            .as_str()
            .and_then(|s| s.parse::<ipnet::Ipv4Net>().ok())
            .and_then(|net| net.hosts().last())
            .map(|a| a.to_string())
            .expect("the bridge's subnet")
    });

    let proxy = StackProxy::start(&e.socket, &prefix, true);
    let state = tempfile::tempdir().expect("dir");
    step(
        "lifecycle creates a restricted sandbox behind sockproxy --restricted",
        || {
            let made = lifecycle_base(proxy.socket(), &prefix, "restricted", state.path())
                .args([
                    "--sidecar-image",
                    &sidecar_image,
                    "--egress-allow",
                    &format!("{gateway}:{port}"),
                    "--egress-allow",
                    &format!("{upstream}:80"),
                    "--egress-allow-cidr",
                    &format!("{gateway}/32"),
                    "--egress-allow-cidr",
                    &subnet,
                    // A translator prefix of this network's own (a ULA, so nothing is ever
                    // routed there), trusted as a range and declared as NAT64.
                    "--egress-allow",
                    "[fd64::a9fe:a9fe]:80",
                    "--egress-allow-cidr",
                    "fd64::/96",
                    "--egress-nat64-prefix",
                    "fd64::/96",
                    // Stands for the host's own addresses: allowed by rule, its range
                    // trusted, and still never dialed.
                    "--egress-allow",
                    &format!("{unused}:80"),
                    "--egress-allow-cidr",
                    &format!("{unused}/32"),
                    "--egress-own-cidr",
                    &format!("{unused}/32"),
                ])
                .args([
                    "--sandbox-cmd",
                    "httpd -f -p 8080 -h /tmp",
                    "--ready-timeout",
                    "30",
                    "--stop-timeout",
                    "1",
                ])
                .args(["create", "--user", "user-e2e", "--thread", "thread-e2e"])
                .output()
                .expect("lifecycle runs");
            assert!(
                made.status.success(),
                "{}",
                String::from_utf8_lossy(&made.stderr)
            );
            // What the engine holds: the sidecar runs with each flag and its value, in pairs.
            let args = raw::get(&e.socket, &format!("/containers/{}/json", names.sidecar))
                .expect("answer")
                .json()["Args"]
                .clone();
            let args: Vec<String> = serde_json::from_value(args).expect("Args");
            for pair in [
                ["--own-cidr".to_owned(), format!("{unused}/32")],
                ["--nat64-prefix".to_owned(), "fd64::/96".to_owned()],
            ] {
                assert!(args.windows(2).any(|w| w == pair), "{pair:?} in {args:?}");
            }
        },
    );

    let run = |args: &[&str]| {
        let mut full = vec!["exec", names.sandbox.as_str()];
        full.extend_from_slice(args);
        docker(&e.socket, &full)
    };
    step("the allowed upstream answers through the sidecar", || {
        let fetched = run(&["wget", "-q", "-O", "-", &upstream_url]);
        assert_eq!(
            fetched.out(),
            "upstream-ok\n",
            "through the sidecar: {}",
            fetched.stderr
        );
    });

    // busybox wget hides an error's headers: ask the sidecar raw, from inside the sandbox (nc
    // quits at the end of its input, so the input stays open until the answer is in). `head`
    // is a request head in printf's spelling; the answer comes back lower-cased.
    let ask_sidecar = |head: &str| {
        let ask = format!(
            "(printf '{head}\\r\\n'; sleep 2) | nc {} 3128",
            names.sidecar
        );
        run(&["sh", "-c", &ask]).out().to_ascii_lowercase()
    };
    step("a name that is not allowed gets 403", || {
        let said = ask_sidecar(
            "GET http://forbidden.invalid/ HTTP/1.1\\r\\nHost: forbidden.invalid\\r\\nConnection: close\\r\\n",
        );
        assert!(said.starts_with("http/1.1 403"), "{said}");
        assert!(said.contains("x-netproxy-error: not_allowed"), "{said}");
        assert!(said.contains(r#""host":"forbidden.invalid""#), "{said}");
    });

    // The neighbour on the egress network: allowed by name, its range trusted, and still
    // refused, because it is in the sidecar's own network.
    step(
        "the neighbour on the sidecar's own network is refused",
        || {
            let said = ask_sidecar(&format!(
                "GET http://{upstream}/ HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n"
            ));
            assert!(
                said.starts_with("http/1.1 403")
                    && said.contains("x-netproxy-error: proxy_network"),
                "{said}"
            );
        },
    );

    // Allowed by rule, its prefix trusted: only the declared translator prefix tells the
    // sidecar that it carries the metadata address, so it is refused before any dial.
    step(
        "an address in the declared NAT64 prefix is judged by the IPv4 it carries",
        || {
            // Had it been dialed, it would have gone nowhere: no IPv6 on the sidecar's networks.
            for net in [&names.network, &names.egress] {
                let n = raw::get(&e.socket, &format!("/networks/{net}"))
                    .expect("answer")
                    .json();
                assert_eq!(n["EnableIPv6"], false, "{net}: {n}");
            }
            let said = ask_sidecar("CONNECT [fd64::a9fe:a9fe]:80 HTTP/1.1\\r\\n");
            assert!(
                said.starts_with("http/1.1 403")
                    && said.contains("x-netproxy-error: special_address:link_local"),
                "{said}"
            );
        },
    );

    step(
        "an address in an --egress-own-cidr network is refused",
        || {
            let said = ask_sidecar(&format!("CONNECT {unused}:80 HTTP/1.1\\r\\n"));
            assert!(
                said.starts_with("http/1.1 403")
                    && said.contains("x-netproxy-error: proxy_network"),
                "{said}"
            );
        },
    );

    step("the upstream is unreachable without the sidecar", || {
        let direct = run(&[
            "wget",
            "-Y",
            "off",
            "-T",
            "3",
            "-q",
            "-O",
            "-",
            &upstream_url,
        ]);
        assert!(
            !direct.ok(),
            "the upstream must not be reachable without the sidecar: {}",
            direct.out()
        );
    });

    step("the sidecar logged both decisions", || {
        let logs = docker(&e.socket, &["logs", &names.sidecar]);
        assert!(
            logs.stderr.contains("\"decision\":\"allow\"")
                && logs.stderr.contains("\"decision\":\"deny\""),
            "{}",
            logs.stderr
        );
    });
}
