//! Unit tests of `write_rules`.
use super::*;
use crate::scope::Prefix;
use serde_json::json;

#[test]
fn exec_update_and_network_tables() {
    let spend = crate::spend::Spend::default();
    let update_now = |v: Value| update(v, None, &spend);
    assert_eq!(
        exec_create(json!({ "Cmd": ["sh"], "Privileged": false })),
        Ok(json!({ "Cmd": ["sh"], "Privileged": false }))
    );
    assert_eq!(
        exec_create(json!({ "privileged": true })).map_err(|e| e.to_string()),
        Err("sockproxy: containers.exec: privileged exec is not allowed".into())
    );
    // What `docker update --memory 64m` sends: every resource field, most of them zero.
    assert_eq!(
        update_now(
            json!({ "Memory": 67108864, "CpuShares": 0, "RestartPolicy": { "Name": "", "MaximumRetryCount": 0 } })
        ),
        Ok(json!({ "Memory": 67108864, "CpuShares": 0, "RestartPolicy": {} }))
    );
    assert_eq!(
        update_now(json!({ "RestartPolicy": { "Name": "always" } })).map_err(|e| e.to_string()),
        Err("sockproxy: containers.update: RestartPolicy is not allowed for this stack".into())
    );
    for (body, want) in [
        (
            json!({ "Devices": [{ "PathOnHost": "/dev/sda" }] }),
            "sockproxy: containers.update: Devices is not allowed for this stack",
        ),
        (
            json!({ "Privileged": true }),
            "sockproxy: containers.update: Privileged is not allowed for this stack",
        ),
    ] {
        assert_eq!(
            update_now(body).map(|_| ()).map_err(|e| e.to_string()),
            Err(want.to_owned())
        );
    }
    // An 18.09 client (API 1.39) sends 0 with every update; dockerd drops it there.
    assert_eq!(
        update(
            json!({ "PidsLimit": 0, "Memory": 67108864 }),
            Some("1.39"),
            &spend
        ),
        Ok(json!({ "PidsLimit": 0, "Memory": 67108864 }))
    );
    assert_eq!(
        update(json!({ "PidsLimit": 0 }), Some("1.40"), &spend).map(|_| ()).map_err(|e| e.to_string()),
        Err("sockproxy: containers.update: PidsLimit 0 is not allowed for this stack (allowed: 1..=32768; --max-pids-limit)".to_owned())
    );
    // dockerd reads 0 (and any value below 1) as "unlimited" at update.
    assert_eq!(
        update_now(json!({ "PidsLimit": 100 })),
        Ok(json!({ "PidsLimit": 100 }))
    );
    for unlimited in [0, -1] {
        assert_eq!(
            update_now(json!({ "PidsLimit": unlimited })).map_err(|e| e.to_string()),
            Err(format!("sockproxy: containers.update: PidsLimit {unlimited} is not allowed for this stack (allowed: 1..=32768; --max-pids-limit)"))
        );
    }
    let s = Scope::new(Prefix::parse("deer-flow-").expect("valid"), true);
    assert_eq!(
        network_create(
            json!({ "Name": "deer-flow-net-1", "Internal": true }),
            &s,
            "atlas"
        ),
        Ok(json!({
            "Name": "deer-flow-net-1",
            "Internal": true,
            "CheckDuplicate": true,
            "Labels": { "sockproxy.stack": "atlas" },
            // An internal network gives the host no address on it.
            "Options": { "com.docker.network.bridge.inhibit_ipv4": "true" }
        }))
    );
    assert_eq!(
        network_create(json!({ "Name": "other" }), &s, "atlas")
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err("sockproxy: networks.create: other is not one of this stack's networks".to_owned())
    );
    assert_eq!(
        network_create(json!({ "Name": "deer-flow-net-1", "Options": { "com.docker.network.bridge.name": "docker0" } }), &s, "atlas")
            .map_err(|e| e.to_string()),
        Err("sockproxy: networks.create: option com.docker.network.bridge.name is not allowed for this stack".into())
    );
    assert_eq!(
        network_create(json!({ "Name": "deer-flow-net-1", "Driver": "macvlan", "Options": { "parent": "eth0" } }), &s, "atlas")
            .map_err(|e| e.to_string()),
        Err("sockproxy: networks.create: driver macvlan is not allowed".into())
    );
    assert_eq!(
        network_create(
            json!({ "name": "deer-flow-net-1", "driver": "host" }),
            &s,
            "atlas"
        )
        .map_err(|e| e.to_string()),
        Err("sockproxy: networks.create: driver host is not allowed".into())
    );
    // deer-flow's two networks pass as it sends them, the internal one completed so that the
    // host holds no address on it.
    assert_eq!(
        network_create(
            json!({ "Name": "deer-flow-sandbox-net-a39cbf0e8f2eeca4", "Internal": true, "Options": { "com.docker.network.bridge.gateway_mode_ipv4": "isolated" } }),
            &s,
            "atlas"
        ),
        Ok(json!({
            "Name": "deer-flow-sandbox-net-a39cbf0e8f2eeca4",
            "Internal": true,
            "Options": {
                "com.docker.network.bridge.gateway_mode_ipv4": "isolated",
                "com.docker.network.bridge.inhibit_ipv4": "true"
            },
            "CheckDuplicate": true,
            "Labels": { "sockproxy.stack": "atlas" }
        }))
    );
    assert_eq!(
        network_create(
            json!({ "Name": "deer-flow-sandbox-egress-a39cbf0e8f2eeca4", "Options": { "com.docker.network.bridge.enable_icc": "false" } }),
            &s,
            "atlas"
        ),
        Ok(json!({
            "Name": "deer-flow-sandbox-egress-a39cbf0e8f2eeca4",
            "Options": { "com.docker.network.bridge.enable_icc": "false" },
            "CheckDuplicate": true,
            "Labels": { "sockproxy.stack": "atlas" }
        }))
    );
    // The stack's label is stamped over whatever the client said, beside its own labels.
    let made = network_create(
        json!({ "Name": "deer-flow-net-1", "labels": { "sockproxy.stack": "other", "team": "a" } }),
        &s,
        "atlas",
    )
    .expect("allowed");
    assert_eq!(
        made["Labels"],
        json!({ "sockproxy.stack": "atlas", "team": "a" })
    );
    let bare = network_create(json!({ "Name": "deer-flow-net-1" }), &s, "atlas");
    assert_eq!(
        bare.map(|v| v["Labels"].clone()),
        Ok(json!({ "sockproxy.stack": "atlas" }))
    );
    // A name that exists is always checked for (else a pre-1.44 engine makes a second).
    for sent in [
        json!({}),
        json!({ "CheckDuplicate": false }),
        json!({ "checkduplicate": null }),
    ] {
        let mut body = json!({ "Name": "deer-flow-net-1" });
        if let (Some(b), Some(x)) = (body.as_object_mut(), sent.as_object()) {
            b.extend(x.clone());
        }
        let made = network_create(body, &s, "atlas").map(|v| v["CheckDuplicate"].clone());
        assert_eq!(made, Ok(json!(true)), "{sent}");
    }
    // A sandbox's internal network must be internal; keys are read case-insensitively.
    assert_eq!(
        network_create(
            json!({ "name": "deer-flow-sandbox-net-a", "internal": true }),
            &s,
            "atlas"
        ),
        Ok(json!({
            "Name": "deer-flow-sandbox-net-a",
            "Internal": true,
            "CheckDuplicate": true,
            "Labels": { "sockproxy.stack": "atlas" },
            "Options": { "com.docker.network.bridge.inhibit_ipv4": "true" }
        }))
    );
    for body in [
        json!({ "Name": "deer-flow-sandbox-net-a" }),
        json!({ "Name": "deer-flow-sandbox-net-a", "Internal": false }),
        json!({ "Name": "deer-flow-sandbox-net-a", "Internal": null }),
        json!({ "Name": "deer-flow-sandbox-net-a", "internal": false }),
    ] {
        assert_eq!(
            network_create(body.clone(), &s, "atlas").map_err(|e| e.to_string()),
            Err("sockproxy: networks.create: deer-flow-sandbox-net-a is a sandbox's internal network and must be made with Internal: true".into()),
            "{body}"
        );
    }
    assert_eq!(
        network_create(json!({ "Name": "deer-flow-net-egress" }), &s, "atlas"),
        Ok(json!({
            "Name": "deer-flow-net-egress",
            "CheckDuplicate": true,
            "Labels": { "sockproxy.stack": "atlas" }
        }))
    );
    // Gateway modes that open container addresses to other hosts are refused.
    assert_eq!(
        network_create(json!({ "Name": "deer-flow-net-1", "Options": { "com.docker.network.bridge.gateway_mode_ipv6": "nat" } }), &s, "atlas")
            .map(|v| v["Options"].clone()),
        Ok(json!({ "com.docker.network.bridge.gateway_mode_ipv6": "nat" }))
    );
    for (family, mode) in [
        ("ipv4", "routed"),
        ("ipv4", "nat-unprotected"),
        ("ipv6", "routed"),
        ("ipv4", ""),
    ] {
        let key = format!("com.docker.network.bridge.gateway_mode_{family}");
        assert_eq!(
            network_create(
                json!({ "Name": "deer-flow-net-1", "Options": { key.clone(): mode } }),
                &s,
                "atlas"
            )
            .map_err(|e| e.to_string()),
            Err(format!(
                "sockproxy: networks.create: option {key}={mode} is not allowed for this stack"
            ))
        );
    }
    let refused = |v: Value| {
        network_create(v, &s, "atlas")
            .map_err(|e| e.to_string())
            .expect_err("refused")
    };
    assert_eq!(
        refused(
            json!({ "Name": "deer-flow-net-1", "ConfigFrom": { "Network": "foreign-config" } })
        ),
        "sockproxy: networks.create: ConfigFrom is not allowed for this stack"
    );
    assert_eq!(
        refused(json!({ "Name": "deer-flow-net-1", "configonly": true })),
        "sockproxy: networks.create: ConfigOnly is not allowed for this stack"
    );
    assert_eq!(
        refused(
            json!({ "Name": "deer-flow-net-1", "IPAM": { "Config": [{ "Subnet": "10.0.0.0/8" }] } })
        ),
        "sockproxy: networks.create: IPAM.Config is not allowed for this stack"
    );
    assert_eq!(
        network_create(
            json!({ "Name": "deer-flow-net-1", "ConfigFrom": { "Network": "" }, "IPAM": { "Driver": "default", "Config": [], "Options": {} } }),
            &s,
            "atlas"
        ),
        Ok(json!({
            "Name": "deer-flow-net-1",
            "ConfigFrom": {},
            "IPAM": { "Driver": "default", "Config": [], "Options": {} },
            "CheckDuplicate": true,
            "Labels": { "sockproxy.stack": "atlas" }
        }))
    );
    // Exec start and network connect bodies are read the same way.
    assert_eq!(
        exec_start(json!({ "detach": false, "Tty": true })).expect("ok"),
        json!({ "Detach": false, "Tty": true })
    );
    assert_eq!(
        exec_start(json!({ "Detach": false, "Privileged": true })).map_err(|e| e.to_string()),
        Err("sockproxy: exec.start: Privileged is not allowed for this stack".into())
    );
    let rules = CreateRules::default();
    let (c, body) = network_attach(
        "networks.connect",
        json!({ "Container": "deer-flow-sandbox-1", "EndpointConfig": { "Aliases": ["a"] } }),
        &s,
        &rules,
    )
    .expect("ok");
    assert_eq!(
        (c.as_str(), Value::Object(body)),
        (
            "deer-flow-sandbox-1",
            json!({ "EndpointConfig": { "Aliases": ["a"] } })
        )
    );
    assert_eq!(
        network_attach(
            "networks.connect",
            json!({ "Container": "deer-flow-sandbox-1", "EndpointConfig": { "NetworkID": "abc" } }),
            &s,
            &rules
        )
        .map_err(|e| e.to_string())
        .expect_err("refused"),
        "sockproxy: networks.connect: EndpointConfig.NetworkID is not allowed for this stack"
    );
}

/// An internal network is made with `inhibit_ipv4=true` (added, or as the client spelled it
/// true), never with another value or IPv6; an egress network is left as sent.
#[test]
fn internal_networks_give_the_host_no_address() {
    let s = Scope::new(Prefix::parse("deer-flow-").expect("valid"), true);
    const OPT: &str = "com.docker.network.bridge.inhibit_ipv4";
    let made = |body: serde_json::Value| {
        network_create(body, &s, "atlas")
            .map(|v| v["Options"].clone())
            .map_err(|e| e.to_string())
    };
    let net = "deer-flow-sandbox-net-1";
    let rows = [
        (json!({ "Name": net, "Internal": true }), Ok(json!({ OPT: "true" }))),
        (
            json!({ "Name": net, "Internal": true, "Options": null }),
            Ok(json!({ OPT: "true" })),
        ),
        (
            json!({ "Name": net, "Internal": true, "Options": { OPT: "1" } }),
            Ok(json!({ OPT: "1" })),
        ),
        (
            json!({ "Name": net, "Internal": true, "Options": { OPT: "false" } }),
            Err(format!("sockproxy: networks.create: option {OPT}=false is not allowed for this stack on an internal network (the host would hold an address on it)")),
        ),
        (
            json!({ "Name": net, "Internal": true, "EnableIPv6": true }),
            Err("sockproxy: networks.create: EnableIPv6 true is not allowed for this stack on an internal network (the host would hold an IPv6 address on it)".into()),
        ),
        // The egress network keeps its way out.
        (
            json!({ "Name": "deer-flow-sandbox-egress-1" }),
            Ok(serde_json::Value::Null),
        ),
    ];
    for (body, want) in rows {
        assert_eq!(made(body.clone()), want, "{body}");
    }
}
