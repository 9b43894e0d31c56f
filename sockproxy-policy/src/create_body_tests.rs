//! The create-body table: every fixture in `tests/fixtures/create_bodies.json` is a raw body and
//! the decision it must get (`allow`, or the exact refusal message), for a `--restricted` stack
//! with prefix `deer-flow-`, `--allow-cap NET_BIND_SERVICE` and `--allow-bind-root /srv/sandboxes`.

use std::path::PathBuf;

use super::*;
use crate::create_rules::{CreateRules, Disk};
use crate::json::parse_checked;
use crate::scope::{Prefix, STACK_LABEL};

#[derive(serde::Deserialize)]
struct Case {
    case: String,
    body: String,
    want: String,
}

/// A real directory stands in for the fixtures' `/srv/sandboxes` (bind sources are checked on
/// the filesystem), with `t1` in it and `escape -> /` planted the way a sandbox would, and its
/// lookalike sibling `sandboxesX/a` made too: a root check by string prefix would then allow
/// it, rather than refuse it for the wrong reason (a path it cannot find).
fn bind_root() -> &'static Path {
    static ROOT: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    &ROOT
        .get_or_init(|| {
            let d = tempfile::tempdir().expect("temp dir");
            let root = d.path().join("sandboxes");
            std::fs::create_dir_all(root.join("t1")).expect("t1");
            std::os::unix::fs::symlink("/", root.join("t1").join("escape")).expect("link");
            std::fs::create_dir_all(d.path().join("sandboxesX").join("a")).expect("lookalike");
            (d, root)
        })
        .1
}

fn decide(body: &str) -> String {
    let root = bind_root().to_str().expect("utf-8 temp path");
    let body = body.replace("/srv/sandboxes", root);
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), true);
    let rules = CreateRules {
        allow_caps: vec!["NET_BIND_SERVICE".into()],
        bind_roots: vec![PathBuf::from(root)],
        ..CreateRules::default()
    };
    let engine = Path::new("/run/custom/docker.sock");
    match parse_checked(body.as_bytes())
        .and_then(|v| check(v, &scope, &rules, engine, &Disk, "atlas"))
    {
        Ok(out) => {
            assert_eq!(
                out["Labels"][STACK_LABEL], "atlas",
                "allowed bodies are stamped"
            );
            "allow".into()
        }
        Err(r) => r.to_string().replace(root, "/srv/sandboxes"),
    }
}

#[test]
fn every_fixture_gets_its_decision() {
    let cases: Vec<Case> =
        serde_json::from_str(include_str!("../tests/fixtures/create_bodies.json"))
            .expect("fixtures parse");
    assert!(cases.len() > 50);
    let mut wrong = Vec::new();
    for c in &cases {
        let got = decide(&c.body);
        if got != c.want {
            wrong.push(format!("{}:\n   want {}\n    got {}", c.case, c.want, got));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn refused_status_is_403_and_the_engine_socket_is_always_refused() {
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
    let rules = CreateRules {
        bind_roots: vec![PathBuf::from("/run")],
        ..CreateRules::default()
    };
    let body = serde_json::json!({ "HostConfig": { "Binds": ["/run/custom/docker.sock:/s"] } });
    let err = check(
        body,
        &scope,
        &rules,
        Path::new("/run/custom/docker.sock"),
        &Disk,
        "s",
    )
    .expect_err("refused");
    assert_eq!(err.status(), http::StatusCode::FORBIDDEN);
    assert_eq!(
        err.to_string(),
        "sockproxy: containers.create: HostConfig.Binds /run/custom/docker.sock is the engine's socket"
    );
}

#[test]
fn a_client_label_cannot_claim_another_stack() {
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
    let body = serde_json::json!({ "labels": { "sockproxy.stack": "someone-else", "k": "v" } });
    let out = check(
        body,
        &scope,
        &CreateRules::default(),
        Path::new("/x"),
        &Disk,
        "atlas",
    )
    .expect("allowed");
    assert_eq!(out["Labels"]["sockproxy.stack"], "atlas");
    assert_eq!(out["Labels"]["k"], "v");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// The top-level fields a forwarded body may carry: the fuzz target's list, so the
    /// property and the fuzzer hold the code to one statement of the allowlist.
    use crate::props::CREATE_TOP as TOP;

    fn key() -> impl Strategy<Value = String> {
        let known: Vec<&'static str> = TOP
            .iter()
            .chain(host_config::FIELDS.iter())
            .copied()
            .collect();
        prop_oneof![
            proptest::sample::select(known).prop_flat_map(|k| {
                // The same field in any ASCII casing.
                proptest::collection::vec(any::<bool>(), k.len()).prop_map(move |up| {
                    k.chars()
                        .zip(up)
                        .map(|(c, u)| {
                            if u {
                                c.to_ascii_uppercase()
                            } else {
                                c.to_ascii_lowercase()
                            }
                        })
                        .collect::<String>()
                })
            }),
            "[A-Za-z]{1,12}",
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-2i64..70_000_000_000).prop_map(Value::from),
            prop_oneof![
                Just("host".to_owned()),
                Just("/".to_owned()),
                Just("/:/host".to_owned()),
                Just("container:other".to_owned()),
                Just("deer-flow-sandbox-1".to_owned()),
                Just("seccomp=unconfined".to_owned()),
                "[a-z/:=.-]{0,12}",
            ]
            .prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                proptest::collection::vec((key(), inner), 0..4)
                    .prop_map(|kv| Value::Object(dedup(kv))),
            ]
        })
    }

    fn dedup(kv: Vec<(String, Value)>) -> Map<String, Value> {
        let mut out = Map::new();
        for (k, v) in kv {
            if !out.keys().any(|o: &String| o.eq_ignore_ascii_case(&k)) {
                out.insert(k, v);
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        /// Whatever is sent, what is forwarded holds only listed fields, and reading the
        /// forwarded body again gives the same body (the engine sees what was decided).
        #[test]
        fn forwarded_bodies_hold_only_listed_fields(
            kv in proptest::collection::vec((key(), value()), 0..8)
        ) {
            let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), true);
            let rules = CreateRules { bind_roots: vec![bind_root().to_owned()], ..CreateRules::default() };
            let engine = Path::new("/run/docker.sock");
            if let Ok(out) = check(Value::Object(dedup(kv)), &scope, &rules, engine, &Disk, "s") {
                let top = out.as_object().expect("object");
                for k in top.keys() {
                    prop_assert!(TOP.contains(&k.as_str()), "top-level {k}");
                }
                if let Some(h) = top.get("HostConfig").and_then(Value::as_object) {
                    for k in h.keys() {
                        prop_assert!(host_config::FIELDS.contains(&k.as_str()), "HostConfig.{k}");
                        prop_assert!(k != "Privileged" || h[k] == Value::Bool(false));
                    }
                }
                let again = check(out.clone(), &scope, &rules, engine, &Disk, "s");
                prop_assert_eq!(again.ok(), Some(out));
            }
        }
    }
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
        // Forwarded as sent, with the private cgroup namespace every create gets.
        let mut sent = body["HostConfig"].clone();
        sent["CgroupnsMode"] = "private".into();
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
        let mut sent = body["HostConfig"].clone();
        sent["CgroupnsMode"] = "private".into();
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
