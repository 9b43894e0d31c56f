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
    use crate::create_props::CREATE_TOP as TOP;

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
