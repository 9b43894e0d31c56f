//! sockproxy's `--allow-publish-address` on the real engine, the allowance the firewall rule
//! set goes with: what the engine holds after an allowed create and after each refused one.

use std::net::IpAddr;

use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{network_gateway, real_engine, Cleanup, TEST_IMAGE};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

/// `--allow-publish-address` on the real engine: a port published on the listed address is
/// created as sent; every address, 0.0.0.0 and another bridge's gateway are still refused,
/// naming what is allowed, and the engine holds no such container afterwards.
#[test]
fn sockproxy_lets_ports_be_published_on_a_listed_address_and_no_other() {
    let test = "sockproxy_lets_ports_be_published_on_a_listed_address_and_no_other";
    let Some(e) = real_engine(test) else { return };
    let s = &e.socket;
    let p = unique_prefix();
    let mut clean = Cleanup::new(s);
    let net = clean.network(&format!("{p}gwnet"));
    assert!(docker(s, &["network", "create", &net]).ok());
    let gw = network_gateway(s, &net);
    let listed: IpAddr = gw.parse().expect("a gateway address");
    let proxy = StackProxy::start_with(s, &p, false, |c| {
        c.create_rules.publish_addresses = vec![listed];
    });
    let ok = clean.container(&format!("{p}sandbox-ok"));
    let out = docker(
        proxy.socket(),
        &[
            "run",
            "-d",
            "--name",
            &ok,
            "-p",
            &format!("{gw}::8080"),
            TEST_IMAGE,
            "sleep",
            "600",
        ],
    );
    assert!(out.ok(), "{}", out.stderr);
    let held = raw::get(s, &format!("/containers/{ok}/json"))
        .expect("answer")
        .json();
    assert_eq!(
        held["HostConfig"]["PortBindings"]["8080/tcp"],
        serde_json::json!([{ "HostIp": gw, "HostPort": "" }])
    );
    assert_eq!(
        held["NetworkSettings"]["Ports"]["8080/tcp"][0]["HostIp"],
        gw.as_str()
    );

    let bridge_gw = network_gateway(s, "bridge");
    assert!(!bridge_gw.is_empty() && bridge_gw != gw);
    for (i, (publish, shown)) in [
        ("8080".to_owned(), "every address".to_owned()),
        ("0.0.0.0::8080".to_owned(), "0.0.0.0".to_owned()),
        (format!("{bridge_gw}::8080"), bridge_gw.clone()),
    ]
    .into_iter()
    .enumerate()
    {
        let name = clean.container(&format!("{p}sandbox-no{i}"));
        let out = docker(
            proxy.socket(),
            &[
                "run", "-d", "--name", &name, "-p", &publish, TEST_IMAGE, "sleep", "600",
            ],
        );
        assert!(!out.ok(), "{publish}");
        let want = format!(
            "HostConfig.PortBindings.8080/tcp published on {shown} is not allowed for this stack (loopback, {gw} only; --allow-public-ports)"
        );
        assert!(out.stderr.contains(&want), "{publish}: {}", out.stderr);
        assert_eq!(
            raw::get(s, &format!("/containers/{name}/json"))
                .expect("answer")
                .status,
            404,
            "{publish}: nothing made"
        );
    }
}
