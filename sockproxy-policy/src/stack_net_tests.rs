//! Tables of the stack's network: where a create is put, `NET_RAW`, the network the engine
//! holds under its name, and IPv6 sysctls in restricted mode.

use std::path::Path;

use serde_json::json;

use super::*;
use crate::create_rules::{CreateRules, Disk};
use crate::evaluate::Host;
use crate::scope::Prefix;

fn scope(restricted: bool) -> Scope {
    Scope::new(Prefix::parse("deer-flow-").expect("valid"), restricted)
}

fn checked(body: Value, rules: &CreateRules, restricted: bool) -> Result<Value, String> {
    crate::create_body::check(
        body,
        &scope(restricted),
        rules,
        Path::new("/x"),
        &Disk,
        "atlas",
    )
    .map_err(|e| e.to_string())
}

/// (body, `HostConfig.NetworkMode` forwarded, `EndpointsConfig` keys forwarded) or the refusal.
#[test]
fn a_create_that_names_no_network_goes_on_the_stack_network() {
    let bridge = "sockproxy: containers.create: HostConfig.NetworkMode bridge is not allowed for this stack (this stack's containers go on its own network deer-flow-net; --allow-default-bridge)";
    let endpoint = "sockproxy: containers.create: NetworkingConfig.EndpointsConfig bridge is not allowed for this stack (this stack's containers go on its own network deer-flow-net; --allow-default-bridge)";
    type Row = (
        Value,
        Result<(&'static str, Vec<&'static str>), &'static str>,
    );
    let rows: Vec<Row> = vec![
        (json!({}), Ok(("deer-flow-net", vec![]))),
        (json!({ "HostConfig": null }), Ok(("deer-flow-net", vec![]))),
        (
            json!({ "HostConfig": { "NetworkMode": "" } }),
            Ok(("deer-flow-net", vec![])),
        ),
        (
            json!({ "HostConfig": { "NetworkMode": "default" } }),
            Ok(("deer-flow-net", vec![])),
        ),
        // The legacy top-level form (20.10, no HostConfig).
        (
            json!({ "NetworkMode": "default" }),
            Ok(("deer-flow-net", vec![])),
        ),
        // A newer CLI names the default network's endpoint `default`.
        (
            json!({ "HostConfig": { "NetworkMode": "default" }, "NetworkingConfig": { "EndpointsConfig": { "default": { "Aliases": ["a"] } } } }),
            Ok(("deer-flow-net", vec!["deer-flow-net"])),
        ),
        (
            json!({ "HostConfig": { "NetworkMode": "deer-flow-net" } }),
            Ok(("deer-flow-net", vec![])),
        ),
        (
            json!({ "HostConfig": { "NetworkMode": "none" } }),
            Ok(("none", vec![])),
        ),
        (
            json!({ "HostConfig": { "NetworkMode": "container:deer-flow-sandbox-a" } }),
            Ok(("container:deer-flow-sandbox-a", vec![])),
        ),
        (json!({ "HostConfig": { "NetworkMode": "bridge" } }), Err(bridge)),
        (json!({ "NetworkMode": "bridge" }), Err(bridge)),
        (
            json!({ "NetworkingConfig": { "EndpointsConfig": { "bridge": {} } } }),
            Err(endpoint),
        ),
        (
            json!({ "HostConfig": { "NetworkMode": "deer-flow-net-x" } }),
            Err("sockproxy: containers.create: HostConfig.NetworkMode deer-flow-net-x is not one of this stack's networks"),
        ),
    ];
    let rules = CreateRules::default();
    for (body, want) in rows {
        let got = checked(body.clone(), &rules, false).map(|o| {
            let mode = o["HostConfig"]["NetworkMode"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            let keys: Vec<String> = o["NetworkingConfig"]["EndpointsConfig"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            (mode, keys)
        });
        let want = want
            .map(|(m, k)| (m.to_owned(), k.iter().map(|s| (*s).to_owned()).collect()))
            .map_err(str::to_owned);
        assert_eq!(got, want, "{body}");
    }
    // The operator's `--allow-default-bridge` lets `bridge` through as sent; the default
    // still goes on the stack's network.
    let allowed = CreateRules {
        allow_default_bridge: true,
        ..CreateRules::default()
    };
    let out = checked(
        json!({ "HostConfig": { "NetworkMode": "bridge" } }),
        &allowed,
        false,
    )
    .expect("allowed");
    assert_eq!(out["HostConfig"]["NetworkMode"], "bridge");
    let out = checked(json!({}), &allowed, false).expect("allowed");
    assert_eq!(out["HostConfig"]["NetworkMode"], "deer-flow-net");
    // A restricted stack's own networks are used as named.
    let out = checked(
        json!({ "HostConfig": { "NetworkMode": "deer-flow-sandbox-net-1" } }),
        &rules,
        true,
    )
    .expect("allowed");
    assert_eq!(out["HostConfig"]["NetworkMode"], "deer-flow-sandbox-net-1");
    assert!(!uses(&out, "deer-flow-net"));
}

/// `NET_RAW` is dropped unless the operator allows it; a client's own drop is kept as sent.
#[test]
fn net_raw_is_dropped_unless_allowed() {
    let rules = CreateRules::default();
    let rows = [
        (json!({}), json!(["NET_RAW"])),
        (json!({ "CapDrop": null }), json!(["NET_RAW"])),
        (json!({ "CapDrop": ["MKNOD"] }), json!(["MKNOD", "NET_RAW"])),
        (json!({ "CapDrop": ["net_raw"] }), json!(["net_raw"])),
        (
            json!({ "CapDrop": ["CAP_NET_RAW"] }),
            json!(["CAP_NET_RAW"]),
        ),
        (json!({ "CapDrop": ["ALL"] }), json!(["ALL"])),
    ];
    for (host, want) in rows {
        let out = checked(json!({ "HostConfig": host }), &rules, false).expect("allowed");
        assert_eq!(out["HostConfig"]["CapDrop"], want, "{host}");
    }
    assert_eq!(
        checked(json!({ "HostConfig": { "CapAdd": ["NET_RAW"] } }), &rules, false),
        Err("sockproxy: containers.create: HostConfig.CapAdd NET_RAW is not allowed for this stack (--allow-cap)".into())
    );
    for allowed in ["NET_RAW", "cap_net_raw", "ALL"] {
        let rules = CreateRules {
            allow_caps: vec![allowed.into()],
            ..CreateRules::default()
        };
        let out = checked(
            json!({ "HostConfig": { "CapAdd": ["NET_RAW"] } }),
            &rules,
            false,
        )
        .expect("allowed");
        assert_eq!(out["HostConfig"].get("CapDrop"), None, "{allowed}");
    }
}

fn policy(label: bool) -> Policy {
    Policy {
        scope: scope(false).with_required_label(label.then_some("atlas")),
        stack: "atlas".into(),
        create_rules: CreateRules::default(),
        allow_images: vec![],
        min_api_version: (1, 24),
        host: Host::unread(),
    }
}

/// The network made as `create_body` asks passes; a network made by hand, by another stack or
/// changed afterwards under that name is refused, saying why.
#[test]
fn only_the_network_the_proxy_made_is_used() {
    let p = policy(false);
    let made = || {
        let mut v = create_body(&p);
        v["Id"] = "1".repeat(64).into();
        v
    };
    let judged = |v: Value| {
        let held = Held::read(v.to_string().as_bytes()).expect("read");
        judge("containers.create", &held, &p).map_err(|e| e.to_string())
    };
    assert_eq!(judged(made()), Ok(()));
    let rows: [(&str, Value, &str); 6] = [
        ("Labels", json!({}), "it has no sockproxy.stack=atlas label"),
        (
            "Labels",
            json!({ "sockproxy.stack": "other" }),
            "it has no sockproxy.stack=atlas label",
        ),
        (
            "Options",
            json!({}),
            "its options are {}, not com.docker.network.bridge.enable_icc=false alone",
        ),
        (
            "Options",
            json!({ ICC: "false", "com.docker.network.bridge.name": "docker0" }),
            "its options are {\"com.docker.network.bridge.enable_icc\": \"false\", \"com.docker.network.bridge.name\": \"docker0\"}, not com.docker.network.bridge.enable_icc=false alone",
        ),
        ("Internal", json!(true), "it is internal"),
        ("Driver", json!("macvlan"), "its driver is \"macvlan\""),
    ];
    for (key, value, why) in rows {
        let mut v = made();
        v[key] = value;
        assert_eq!(
            judged(v.clone()),
            Err(format!("sockproxy: containers.create: the engine holds a network deer-flow-net that sockproxy did not make for this stack ({why}); nothing is put on it: remove or rename it and sockproxy makes its own")),
            "{v}"
        );
    }
}

/// Stacks that share a prefix (`--require-stack-label`) share no network: each has its own name.
#[test]
fn stacks_sharing_a_prefix_have_networks_of_their_own() {
    let plain = name(&scope(false), "atlas");
    assert_eq!(plain, "deer-flow-net");
    let a = name(&scope(false).with_required_label(Some("a")), "a");
    let b = name(&scope(false).with_required_label(Some("b")), "b");
    assert_ne!(a, b);
    assert_eq!(a, format!("deer-flow-net_{}", stackmodel::k("a")));
    for n in [&plain, &a] {
        assert!(!scope(true).allows(crate::scope::Kind::Network, crate::scope::Access::Change, n));
        assert!(scope(true).visible(n));
    }
    assert_eq!(
        create_body(&policy(true))["Name"],
        json!(name(&policy(true).scope, "atlas"))
    );
}

/// A restricted stack's sandboxes stay off IPv6 whatever `--allow-sysctl` says; an open stack's
/// may set what the operator allows.
#[test]
fn ipv6_sysctls_are_refused_in_restricted_mode() {
    let key = "net.ipv6.conf.all.disable_ipv6";
    let rules = CreateRules {
        allow_sysctls: vec![key.into(), "net.ipv4.ip_unprivileged_port_start".into()],
        ..CreateRules::default()
    };
    let body = json!({ "HostConfig": { "Sysctls": { key: "0" } } });
    assert_eq!(
        checked(body.clone(), &rules, true),
        Err(format!("sockproxy: containers.create: HostConfig.Sysctls {key} is not allowed for this stack (a restricted stack's sandboxes stay off IPv6, whatever --allow-sysctl says)"))
    );
    assert!(checked(body, &rules, false).is_ok());
    let v4 =
        json!({ "HostConfig": { "Sysctls": { "net.ipv4.ip_unprivileged_port_start": "80" } } });
    assert!(checked(v4, &rules, true).is_ok());
}

/// `evaluate` on a create with `given` facts, under `policy`.
fn evaluate_create(policy: &Policy, given: &[(crate::Need, crate::Fact)]) -> crate::Decision {
    let mut facts = crate::Facts::default();
    for (need, fact) in given {
        facts.give(need.clone(), fact.clone());
    }
    let (method, headers) = (http::Method::POST, http::HeaderMap::new());
    let uri: http::Uri = "/containers/create?name=deer-flow-sandbox-2"
        .parse()
        .expect("a URI");
    let request = crate::Request {
        method: &method,
        uri: &uri,
        headers: &headers,
    };
    crate::evaluate(&request, &facts, policy)
}

fn held(policy: &Policy, labels: Value) -> Held {
    let mut made = create_body(policy);
    made["Id"] = "1".repeat(64).into();
    made["Labels"] = labels;
    Held::read(made.to_string().as_bytes()).expect("read")
}

/// A create that names no network asks for the body, then the stack's network (made by the
/// transport when absent, judged here), then the totals; one on its own network skips the
/// stack's; a network the proxy did not make refuses the create, 409.
#[test]
fn a_create_asks_for_the_stack_network_then_the_totals() {
    use crate::{Fact, Need};
    let p = policy(false);
    let body = (Need::Body, Fact::Body(json!({ "Image": "busybox" })));
    let need = |given: &[(Need, Fact)], p: &Policy| {
        evaluate_create(p, given).outcome.map(|plan| plan.need)
    };
    assert_eq!(need(&[], &p), Ok(Need::Body));
    assert_eq!(
        need(std::slice::from_ref(&body), &p),
        Ok(Need::StackNetwork)
    );
    let made = (
        Need::StackNetwork,
        Fact::StackNetwork(held(&p, json!({ STACK_LABEL: "atlas" }))),
    );
    assert_eq!(need(&[body.clone(), made.clone()], &p), Ok(Need::Usage));
    let counted = (Need::Usage, Fact::Usage(vec![]));
    assert_eq!(need(&[body.clone(), made, counted], &p), Ok(Need::Nothing));
    let restricted = Policy {
        scope: scope(true),
        ..policy(false)
    };
    let own = (
        Need::Body,
        Fact::Body(json!({ "HostConfig": { "NetworkMode": "deer-flow-sandbox-net-1" } })),
    );
    assert_eq!(
        need(&[own], &restricted),
        Ok(Need::Usage),
        "no stack network for its own"
    );
    let foreign = (Need::StackNetwork, Fact::StackNetwork(held(&p, json!({}))));
    let d = evaluate_create(&p, &[body, foreign]);
    assert_eq!(d.reason.as_str(), "stack_network_unusable");
    assert_eq!(
        d.outcome.map(|_| ()).map_err(|r| r.status()),
        Err(http::StatusCode::CONFLICT)
    );
}
