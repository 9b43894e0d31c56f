//! The stack's own network (issue 49), on the fake and the real engine, each refusal checked
//! on what the engine holds afterwards: a create that names no network is put on `{P}net`,
//! which the proxy makes once (labelled, inter-container traffic off) even when creates race,
//! through one proxy or two of one stack; the stack lists it but cannot remove it or connect
//! to it; the default bridge is refused unless the operator allows it; a network under that
//! name the proxy did not make is never used; a restricted stack's internal network is made
//! with no host address; ports are published on loopback only.

use serde_json::json;
use sockproxy_tests::engine::{each_engine, Cleanup, Engine, Fakes};
use sockproxy_tests::raw::{self, RawResponse};
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::bypasses::{inspect, refused, send};

fn create(p: &StackProxy, e: &Engine, name: &str, host: serde_json::Value) -> RawResponse {
    let body = json!({ "Image": e.image, "Cmd": ["sleep", "600"], "HostConfig": host });
    send(
        p.socket(),
        "POST",
        &format!("/containers/create?name={name}"),
        &body,
    )
}

/// How many networks the engine holds under `name`, exactly.
fn networks_named(e: &Engine, name: &str) -> usize {
    let all = raw::get(&e.socket, "/networks").expect("answer").json();
    all.as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["Name"] == json!(name))
        .count()
}

#[test]
fn a_create_naming_no_network_joins_the_stacks_own() {
    let test = "a_create_naming_no_network_joins_the_stacks_own";
    each_engine(test, Fakes::Debian, |e| {
        let p = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let proxy = StackProxy::start(&e.socket, &p, true);
        let net = proxy.stack_network.clone();
        assert_eq!(net, format!("{p}net"));

        step(
            "made at the first create, labelled, with no traffic between its containers",
            || {
                assert_eq!(inspect(&e, "networks", &net).status, 404, "not before");
                for (i, host) in [json!({}), json!({ "NetworkMode": "default" })]
                    .into_iter()
                    .enumerate()
                {
                    let name = clean.container(&format!("{p}sandbox-{i}"));
                    let r = create(&proxy, &e, &name, host);
                    assert_eq!(r.status, 201, "{}", r.text());
                    let c = inspect(&e, "containers", &format!("{name}/json")).json();
                    assert_eq!(c["HostConfig"]["NetworkMode"], json!(net), "{c}");
                }
                let n = inspect(&e, "networks", &net).json();
                assert_eq!(n["Labels"]["sockproxy.stack"], json!(format!("test-{p}")));
                assert_eq!(
                    n["Options"],
                    json!({ "com.docker.network.bridge.enable_icc": "false" })
                );
                assert_eq!(n["Internal"], json!(false));
                assert_eq!(networks_named(&e, &net), 1);
            },
        );

        step(
            "the stack lists it, and cannot remove it or connect to it",
            || {
                let listed = raw::get(proxy.socket(), "/networks")
                    .expect("answer")
                    .text();
                assert!(listed.contains(&format!("\"{net}\"")), "{listed}");
                let r = raw::request(proxy.socket(), "DELETE", &format!("/networks/{net}"), None)
                    .expect("answer");
                refused(&r, 403, "is not one of this stack's networks");
                let side = clean.container(&format!("{p}netproxy-x"));
                let r = create(&proxy, &e, &side, json!({ "NetworkMode": "none" }));
                assert_eq!(r.status, 201, "{}", r.text());
                for op in ["connect", "disconnect"] {
                    let body = json!({ "Container": side });
                    let r = send(
                        proxy.socket(),
                        "POST",
                        &format!("/networks/{net}/{op}"),
                        &body,
                    );
                    refused(&r, 403, "is not one of this stack's networks");
                }
                assert_eq!(inspect(&e, "networks", &net).status, 200, "still there");
                let c = inspect(&e, "containers", &format!("{side}/json")).json();
                assert!(c["NetworkSettings"]["Networks"].get(&net).is_none(), "{c}");
            },
        );

        step("the default bridge is refused, by mode or endpoint", || {
            for (i, body) in [
                json!({ "HostConfig": { "NetworkMode": "bridge" } }),
                json!({ "NetworkingConfig": { "EndpointsConfig": { "bridge": {} } } }),
            ]
            .into_iter()
            .enumerate()
            {
                let name = clean.container(&format!("{p}sandbox-br{i}"));
                let mut full = json!({ "Image": e.image, "Cmd": ["sleep", "600"] });
                if let (Some(f), Some(b)) = (full.as_object_mut(), body.as_object()) {
                    f.extend(b.clone());
                }
                let r = send(
                    proxy.socket(),
                    "POST",
                    &format!("/containers/create?name={name}"),
                    &full,
                );
                refused(&r, 403, "--allow-default-bridge");
                assert_eq!(
                    inspect(&e, "containers", &format!("{name}/json")).status,
                    404
                );
            }
        });

        step("--allow-default-bridge lets a container on it", || {
            let open = StackProxy::start_with(&e.socket, &p, false, |c| {
                c.create_rules.allow_default_bridge = true;
            });
            let name = clean.container(&format!("{p}sandbox-br"));
            let r = create(&open, &e, &name, json!({ "NetworkMode": "bridge" }));
            assert_eq!(r.status, 201, "{}", r.text());
            let c = inspect(&e, "containers", &format!("{name}/json")).json();
            assert_eq!(c["HostConfig"]["NetworkMode"], json!("bridge"));
        });

        step("a port is published on loopback only", || {
            for (i, ip) in ["", "0.0.0.0", "172.17.0.1", "::"].into_iter().enumerate() {
                let name = clean.container(&format!("{p}sandbox-pub{i}"));
                let host =
                    json!({ "PortBindings": { "8080/tcp": [{ "HostIp": ip, "HostPort": "" }] } });
                let r = create(&proxy, &e, &name, host);
                refused(&r, 403, "(loopback only; --allow-public-ports)");
                assert_eq!(
                    inspect(&e, "containers", &format!("{name}/json")).status,
                    404,
                    "{ip}"
                );
            }
        });
    });
}

#[test]
fn a_network_under_its_name_that_the_proxy_did_not_make_is_never_used() {
    let test = "a_network_under_its_name_that_the_proxy_did_not_make_is_never_used";
    each_engine(test, Fakes::Debian, |e| {
        let p = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let proxy = StackProxy::start(&e.socket, &p, false);
        // Made on the engine by hand: no label, inter-container traffic on.
        let net = clean.network(&proxy.stack_network);
        let body = json!({ "Name": net }).to_string();
        let r = raw::request(&e.socket, "POST", "/networks/create", Some(body.as_bytes()))
            .expect("answer");
        assert_eq!(r.status, 201, "{}", r.text());
        let name = clean.container(&format!("{p}sandbox-1"));
        let r = create(&proxy, &e, &name, json!({}));
        refused(&r, 409, &format!("the engine holds a network {net} that sockproxy did not make for this stack (it has no sockproxy.stack=test-{p} label"));
        assert_eq!(
            inspect(&e, "containers", &format!("{name}/json")).status,
            404
        );
        let n = inspect(&e, "networks", &net).json();
        assert_eq!(n["Labels"], json!({}), "left as it was: {n}");
        assert_eq!(networks_named(&e, &net), 1);
    });
}

/// The engine does not serialize network creates (twelve at once made twelve networks of one
/// name on dockerd 20.10): the stack's lock does, for creates through one proxy and through
/// two proxies of one stack that share its lock file.
#[test]
fn racing_first_creates_make_one_network() {
    let test = "racing_first_creates_make_one_network";
    each_engine(test, Fakes::Debian, |e| {
        let p = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let dir = tempfile::tempdir().expect("dir");
        let lock = dir.path().join("stack.lock");
        let proxies: Vec<StackProxy> = (0..2)
            .map(|_| {
                StackProxy::start_with(&e.socket, &p, false, |c| {
                    c.stack_lock = Some(lock.clone());
                })
            })
            .collect();
        let names: Vec<String> = (0..8)
            .map(|i| clean.container(&format!("{p}sandbox-r{i}")))
            .collect();
        std::thread::scope(|s| {
            let made: Vec<_> = names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let proxy = &proxies[i % 2];
                    let e = &e;
                    s.spawn(move || create(proxy, e, name, json!({})))
                })
                .collect();
            for m in made {
                let r = m.join().expect("a create");
                assert_eq!(r.status, 201, "{}", r.text());
            }
        });
        assert_eq!(networks_named(&e, &proxies[0].stack_network), 1);
    });
}

#[test]
fn a_restricted_stacks_internal_network_gives_the_host_no_address() {
    let test = "a_restricted_stacks_internal_network_gives_the_host_no_address";
    each_engine(test, Fakes::Debian, |e| {
        let p = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let proxy = StackProxy::start(&e.socket, &p, true);
        let make = |name: &str, body: serde_json::Value| {
            let mut full = json!({ "Name": name });
            if let (Some(f), Some(b)) = (full.as_object_mut(), body.as_object()) {
                f.extend(b.clone());
            }
            send(proxy.socket(), "POST", "/networks/create", &full)
        };
        let inhibit = "com.docker.network.bridge.inhibit_ipv4";
        let internal = clean.network(&format!("{p}sandbox-net-a"));
        let r = make(&internal, json!({ "Internal": true }));
        assert_eq!(r.status, 201, "{}", r.text());
        let n = inspect(&e, "networks", &internal).json();
        assert_eq!(n["Options"][inhibit], json!("true"), "{n}");
        // The egress network keeps its way out: the host's address is its gateway.
        let egress = clean.network(&format!("{p}sandbox-egress-a"));
        let r = make(
            &egress,
            json!({ "Options": { "com.docker.network.bridge.enable_icc": "false" } }),
        );
        assert_eq!(r.status, 201, "{}", r.text());
        let n = inspect(&e, "networks", &egress).json();
        assert!(n["Options"].get(inhibit).is_none(), "{n}");
        for (i, body) in [
            json!({ "Internal": true, "Options": { inhibit: "false" } }),
            json!({ "Internal": true, "EnableIPv6": true }),
        ]
        .into_iter()
        .enumerate()
        {
            let name = clean.network(&format!("{p}sandbox-net-b{i}"));
            let r = make(&name, body);
            refused(&r, 403, "on an internal network");
            assert_eq!(inspect(&e, "networks", &name).status, 404, "{name}");
        }
    });
}
