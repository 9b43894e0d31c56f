//! Rules of `create_body::check` one at a time: what `--require-stack-label` shuts, anonymous
//! and named volumes, zero-only maps, links, the private cgroup namespace, public ports.

use std::path::Path;

use super::*;
use crate::create_rules::{CreateRules, Disk};
use crate::scope::Prefix;

/// What the proxy sets on every create's `HostConfig` with the default rules: a private cgroup
/// namespace, `NET_RAW` dropped, the default memory, CPU and pids limits, and the stack's own
/// network (`deer-flow-net`) when the body names none.
pub(crate) fn what_every_create_gets(mut host: serde_json::Value) -> serde_json::Value {
    host["CgroupnsMode"] = "private".into();
    host["CapDrop"] = serde_json::json!(["NET_RAW"]);
    host["Memory"] = crate::limits::DEFAULT_MEMORY.into();
    host["NanoCpus"] = crate::limits::DEFAULT_NANO_CPUS.into();
    host["PidsLimit"] = crate::limits::DEFAULT_PIDS_LIMIT.into();
    if host.get("NetworkMode").is_none() {
        host["NetworkMode"] = "deer-flow-net".into();
    }
    host
}

/// Under `--require-stack-label` a name in scope does not make a container the stack's, so a
/// body that names another container (its volumes, its namespaces, a link) is refused; without
/// the flag the name decides.
#[test]
fn settings_naming_a_container_are_refused_under_require_stack_label() {
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
    let strict = CreateRules {
        require_stack_label: true,
        ..CreateRules::default()
    };
    let bodies = [
        (
            serde_json::json!({ "HostConfig": { "VolumesFrom": ["deer-flow-sandbox-a:ro"] } }),
            "HostConfig.VolumesFrom",
        ),
        (
            serde_json::json!({ "HostConfig": { "PidMode": "container:deer-flow-sandbox-a" } }),
            "HostConfig.PidMode",
        ),
        (
            serde_json::json!({ "HostConfig": { "NetworkMode": "container:deer-flow-sandbox-a" } }),
            "HostConfig.NetworkMode",
        ),
        (
            serde_json::json!({ "HostConfig": { "Links": ["deer-flow-sandbox-a:db"] } }),
            "HostConfig.Links",
        ),
    ];
    for (body, path) in bodies {
        let open = check(
            body.clone(),
            &scope,
            &CreateRules::default(),
            Path::new("/x"),
            &Disk,
            "s",
        );
        // Forwarded as sent, with what every create gets.
        let sent = what_every_create_gets(body["HostConfig"].clone());
        assert_eq!(open.map(|o| o["HostConfig"].clone()), Ok(sent), "{body}");
        let err =
            check(body.clone(), &scope, &strict, Path::new("/x"), &Disk, "s").expect_err("refused");
        assert_eq!(err.status(), http::StatusCode::FORBIDDEN);
        assert_eq!(
            err.to_string(),
            format!("sockproxy: containers.create: {path} names another container, which --require-stack-label does not allow"),
            "{body}"
        );
    }
}

/// Under `--require-stack-label` a named volume is refused however it is named (a volume made
/// by a create has no labels to check); without the flag one with the stack's prefix passes.
#[test]
fn named_volumes_are_refused_under_require_stack_label() {
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
    let strict = CreateRules {
        require_stack_label: true,
        ..CreateRules::default()
    };
    let bodies = [
        (
            serde_json::json!({ "HostConfig": { "Binds": ["deer-flow-data:/data"] } }),
            "HostConfig.Binds names volume deer-flow-data",
        ),
        (
            serde_json::json!({ "HostConfig": { "Mounts": [{ "Type": "volume", "Source": "deer-flow-data", "Target": "/data" }] } }),
            "HostConfig.Mounts[0].Source names volume deer-flow-data",
        ),
    ];
    for (body, why) in bodies {
        let open = check(
            body.clone(),
            &scope,
            &CreateRules::default(),
            Path::new("/x"),
            &Disk,
            "s",
        );
        let sent = what_every_create_gets(body["HostConfig"].clone());
        assert_eq!(open.map(|o| o["HostConfig"].clone()), Ok(sent), "{body}");
        let err =
            check(body.clone(), &scope, &strict, Path::new("/x"), &Disk, "s").expect_err("refused");
        assert_eq!(err.status(), http::StatusCode::FORBIDDEN);
        assert_eq!(
            err.to_string(),
            format!("sockproxy: containers.create: {why}, which --require-stack-label does not allow (a volume carries no stack label)"),
            "{body}"
        );
    }
    // A tmpfs names nothing and still passes.
    let tmpfs = serde_json::json!({ "HostConfig": { "Tmpfs": { "/data": "" } } });
    let got = check(tmpfs, &scope, &strict, Path::new("/x"), &Disk, "s").expect("allowed");
    assert_eq!(
        got["HostConfig"]["Tmpfs"],
        serde_json::json!({ "/data": "" })
    );
}

/// An anonymous volume is refused in each of its spellings (the engine names it by a random ID
/// the stack could neither list nor remove), with or without `--require-stack-label`; a
/// `Volumes` path that a bind or a mount covers is no anonymous volume (docker-py's shape) and
/// is forwarded as sent.
#[test]
fn anonymous_volumes_are_refused() {
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
    let hint = "(an anonymous volume, which the stack could not list or remove; no flag allows \
                one: name a volume that starts with the stack's prefix, or use a tmpfs)";
    let refused = [
        (
            serde_json::json!({ "Volumes": { "/data": {} } }),
            "Volumes /data",
        ),
        (
            serde_json::json!({ "HostConfig": { "Mounts": [{ "Type": "volume", "Target": "/data" }] } }),
            "HostConfig.Mounts[0].Target /data",
        ),
        (
            serde_json::json!({ "HostConfig": { "Mounts": [{ "Type": "volume", "Source": "", "Target": "/d" }] } }),
            "HostConfig.Mounts[0].Target /d",
        ),
        // Covered is compared after cleaning, both sides: `/data/x` is not `/data`.
        (
            serde_json::json!({ "Volumes": { "/data/x": {} }, "HostConfig": { "Mounts": [{ "Type": "tmpfs", "Target": "/data" }] } }),
            "Volumes /data/x",
        ),
        // A tmpfs is not a mount point dockerd checks before it makes the volume.
        (
            serde_json::json!({ "Volumes": { "/t": {} }, "HostConfig": { "Tmpfs": { "/t": "" } } }),
            "Volumes /t",
        ),
    ];
    for strict in [false, true] {
        let rules = CreateRules {
            require_stack_label: strict,
            ..CreateRules::default()
        };
        for (body, why) in &refused {
            let got = check(body.clone(), &scope, &rules, Path::new("/x"), &Disk, "s");
            assert_eq!(
                got.map_err(|e| e.to_string()),
                Err(format!(
                    "sockproxy: containers.create: {why} is not allowed for this stack {hint}"
                )),
                "{body}"
            );
        }
    }
    let covered = [
        (
            serde_json::json!({ "Volumes": { "/data": {} }, "HostConfig": { "Binds": ["deer-flow-v:/data:ro"] } }),
            Some(serde_json::json!({ "/data": {} })),
        ),
        (
            serde_json::json!({ "Volumes": { "/data/": {} }, "HostConfig": { "Mounts": [{ "Type": "volume", "Source": "deer-flow-v", "Target": "/data" }] } }),
            Some(serde_json::json!({ "/data/": {} })),
        ),
        (
            serde_json::json!({ "Volumes": {} }),
            Some(serde_json::json!({})),
        ),
        (
            serde_json::json!({ "Volumes": null }),
            Some(serde_json::Value::Null),
        ),
    ];
    for (body, volumes) in covered {
        let out = check(
            body.clone(),
            &scope,
            &CreateRules::default(),
            Path::new("/x"),
            &Disk,
            "s",
        )
        .unwrap_or_else(|e| panic!("{body}: {e}"));
        assert_eq!(out.get("Volumes"), volumes.as_ref(), "{body}");
    }
}

/// A map that may only be empty is forwarded empty even when sent with keys of empty values
/// (an annotation or storage option named is not nothing to the engine).
#[test]
fn zero_only_maps_are_forwarded_empty() {
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
    let body = serde_json::json!({
        "HostConfig": { "Annotations": { "io.example.x": "" }, "StorageOpt": { "size": "" } }
    });
    let out = check(
        body,
        &scope,
        &CreateRules::default(),
        Path::new("/x"),
        &Disk,
        "s",
    )
    .expect("allowed");
    assert_eq!(out["HostConfig"]["Annotations"], serde_json::json!({}));
    assert_eq!(out["HostConfig"]["StorageOpt"], serde_json::json!({}));
}

/// A link is `NAME` or `NAME:ALIAS`, as dockerd's `ParseLink` reads it; a third part was judged
/// on a guessed name (the part before the last ':') and is now refused.
#[test]
fn links_are_read_as_the_engine_reads_them() {
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
    let create = |links: serde_json::Value| {
        let body = serde_json::json!({ "HostConfig": { "Links": links } });
        check(
            body,
            &scope,
            &CreateRules::default(),
            Path::new("/x"),
            &Disk,
            "s",
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    assert_eq!(create(serde_json::json!(["deer-flow-sandbox-a"])), Ok(()));
    assert_eq!(
        create(serde_json::json!(["deer-flow-sandbox-a:db"])),
        Ok(())
    );
    assert_eq!(
        create(serde_json::json!(["other:db"])),
        Err("sockproxy: containers.create: HostConfig.Links other is not one of this stack's sandboxes".into())
    );
    assert_eq!(
        create(serde_json::json!(["deer-flow-sandbox-a:other:db"])),
        Err("sockproxy: containers.create: HostConfig.Links deer-flow-sandbox-a:other:db is not allowed for this stack (a link is NAME or NAME:ALIAS)".into())
    );
}

/// Every created sandbox gets a cgroup namespace of its own: left to the engine, a cgroup v1
/// host gives it the host's, and so does 20.10 for any client below API 1.41 there.
#[test]
fn every_create_asks_for_a_private_cgroup_namespace() {
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
    let bodies = [
        serde_json::json!({}),
        serde_json::json!({ "HostConfig": null }),
        serde_json::json!({ "HostConfig": {} }),
        serde_json::json!({ "HostConfig": { "CgroupnsMode": "" } }),
        serde_json::json!({ "HostConfig": { "CgroupnsMode": "private" } }),
        serde_json::json!({ "hostconfig": { "cgroupnsmode": "" } }),
        // 20.10's legacy top-level HostConfig fields.
        serde_json::json!({ "Memory": 1_073_741_824 }),
        serde_json::json!({ "CgroupnsMode": "" }),
    ];
    for body in bodies {
        let shown = body.to_string();
        let out = check(
            body,
            &scope,
            &CreateRules::default(),
            Path::new("/x"),
            &Disk,
            "s",
        )
        .unwrap_or_else(|e| panic!("{shown}: {e:?}"));
        assert_eq!(out["HostConfig"]["CgroupnsMode"], "private", "{shown}");
    }
    // A HostConfig the proxy adds keeps the daemon's IPC default, which 20.10 would otherwise
    // make "shareable" below API 1.40.
    let out = check(
        serde_json::json!({}),
        &scope,
        &CreateRules::default(),
        Path::new("/x"),
        &Disk,
        "s",
    )
    .expect("allowed");
    assert_eq!(out["HostConfig"]["IpcMode"], "private");
    let host = serde_json::json!({ "HostConfig": { "CgroupnsMode": "host" } });
    assert_eq!(
        check(host, &scope, &CreateRules::default(), Path::new("/x"), &Disk, "s")
            .map_err(|e| e.to_string()),
        Err("sockproxy: containers.create: HostConfig.CgroupnsMode host is not allowed for this stack".into())
    );
}

/// deer-flow publishes on 0.0.0.0 when its sandbox host is not loopback (its own compose
/// files): refused by default, forwarded as sent with `--allow-public-ports`; loopback passes
/// either way.
#[test]
fn public_ports_need_their_flag() {
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
    let public = CreateRules {
        public_ports: true,
        ..CreateRules::default()
    };
    let body = |ip: &str| {
        serde_json::json!({
            "ExposedPorts": { "8080/tcp": {} },
            "HostConfig": { "PortBindings": { "8080/tcp": [{ "HostIp": ip, "HostPort": "41234" }] } }
        })
    };
    for ip in ["0.0.0.0", "", "192.0.2.7", "::"] {
        let err = check(
            body(ip),
            &scope,
            &CreateRules::default(),
            Path::new("/x"),
            &Disk,
            "s",
        )
        .expect_err("refused by default");
        assert!(
            err.to_string()
                .ends_with("is not allowed for this stack (loopback only; --allow-public-ports)"),
            "{ip}: {err}"
        );
        let out = check(body(ip), &scope, &public, Path::new("/x"), &Disk, "s").expect("allowed");
        assert_eq!(
            out["HostConfig"]["PortBindings"]["8080/tcp"][0],
            serde_json::json!({ "HostIp": ip, "HostPort": "41234" }),
            "{ip}: forwarded as sent"
        );
    }
    for ip in ["127.0.0.1", "::1"] {
        let out = check(
            body(ip),
            &scope,
            &CreateRules::default(),
            Path::new("/x"),
            &Disk,
            "s",
        );
        assert_eq!(
            out.map(|o| o["HostConfig"]["PortBindings"]["8080/tcp"][0].clone()),
            Ok(serde_json::json!({ "HostIp": ip, "HostPort": "41234" })),
            "{ip}: forwarded as sent"
        );
    }
}

/// `--allow-publish-address`: a binding on a listed address is forwarded as sent; any other
/// non-loopback one (every address included) is still refused, naming what is allowed.
#[test]
fn a_listed_publish_address_is_allowed_and_no_other() {
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
    let rules = CreateRules {
        publish_addresses: vec!["172.30.0.1".parse().expect("ip")],
        ..CreateRules::default()
    };
    let body = |ip: &str| {
        serde_json::json!({
            "ExposedPorts": { "8080/tcp": {} },
            "HostConfig": { "PortBindings": { "8080/tcp": [{ "HostIp": ip, "HostPort": "" }] } }
        })
    };
    let out = check(
        body("172.30.0.1"),
        &scope,
        &rules,
        Path::new("/x"),
        &Disk,
        "s",
    )
    .map(|o| o["HostConfig"]["PortBindings"]["8080/tcp"][0].clone());
    assert_eq!(
        out,
        Ok(serde_json::json!({ "HostIp": "172.30.0.1", "HostPort": "" }))
    );
    for (ip, shown) in [
        ("172.30.0.2", "172.30.0.2"),
        ("0.0.0.0", "0.0.0.0"),
        ("", "every address"),
    ] {
        let err =
            check(body(ip), &scope, &rules, Path::new("/x"), &Disk, "s").expect_err("refused");
        assert_eq!(
            err.to_string(),
            format!(
                "sockproxy: containers.create: HostConfig.PortBindings.8080/tcp published on {shown} is not allowed for this stack (loopback, 172.30.0.1 only; --allow-public-ports)"
            ),
            "{ip:?}"
        );
    }
}
