//! A property whose generator reaches the rules: bodies built mostly from values the policy
//! accepts, so accepted bodies carry each checked field (Privileged, CapAdd, Binds,
//! SecurityOpt, ReadonlyRootfs, Healthcheck, StopTimeout) in a fair share of cases; each field's
//! rule is asserted on the forwarded body, and each branch's count must be above zero (a
//! property whose checks never run asserts nothing).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Map, Value};

use crate::create_body::check;
use crate::create_rules::{CreateRules, Disk};
use crate::scope::{Prefix, Scope};

fn root() -> &'static Path {
    static ROOT: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    &ROOT
        .get_or_init(|| {
            let d = tempfile::tempdir().expect("temp dir");
            let root = d.path().join("sandboxes");
            std::fs::create_dir_all(root.join("t1")).expect("t1");
            (d, root)
        })
        .1
}

/// A HostConfig whose fields are, most of the time, ones the rules accept.
fn host_config() -> impl Strategy<Value = Map<String, Value>> {
    let root = root().display().to_string();
    let binds = prop_oneof![
        4 => Just(json!([format!("{root}/t1:/data")])),
        1 => Just(json!([format!("{root}/t1:/data:ro")])),
        1 => Just(json!(["/etc:/etc"])),
    ];
    let caps = prop_oneof![
        3 => Just(json!(["NET_BIND_SERVICE"])),
        1 => Just(json!(["SYS_ADMIN"])),
        1 => Just(json!([])),
    ];
    let opts = prop_oneof![
        3 => Just(json!(["no-new-privileges"])),
        1 => Just(json!(["no-new-privileges:true"])),
        1 => Just(json!(["seccomp=unconfined"])),
    ];
    (
        proptest::option::of(any::<bool>()),
        proptest::option::of(caps),
        proptest::option::of(binds),
        proptest::option::of(opts),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(|(privileged, cap_add, binds, opts, ro)| {
            let mut h = Map::new();
            for (k, v) in [
                ("Privileged", privileged.map(Value::Bool)),
                ("CapAdd", cap_add),
                ("Binds", binds),
                ("SecurityOpt", opts),
                ("ReadonlyRootfs", ro.map(Value::Bool)),
            ] {
                if let Some(v) = v {
                    h.insert(k.to_owned(), v);
                }
            }
            h
        })
}

fn body() -> impl Strategy<Value = Value> {
    let healthcheck = prop_oneof![
        3 => Just(json!({"Test": ["CMD", "true"], "Interval": 30_000_000_000i64})),
        1 => Just(json!({"Test": ["CMD", "true"], "Interval": 1_000_000i64})),
    ];
    let stop = prop_oneof![3 => Just(json!(10)), 1 => Just(json!(-1))];
    (
        host_config(),
        proptest::option::of(healthcheck),
        proptest::option::of(stop),
    )
        .prop_map(|(h, hc, stop)| {
            let mut b = json!({"Image": "busybox", "HostConfig": h});
            if let Some(hc) = hc {
                b["Healthcheck"] = hc;
            }
            if let Some(s) = stop {
                b["StopTimeout"] = s;
            }
            b
        })
}

#[test]
fn accepted_bodies_carry_each_checked_field_and_keep_its_rule() {
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), true);
    let rules = CreateRules {
        allow_caps: vec!["NET_BIND_SERVICE".into()],
        bind_roots: vec![root().to_owned()],
        ..CreateRules::default()
    };
    let engine = Path::new("/run/docker.sock");
    let counts = std::cell::RefCell::new(BTreeMap::<&'static str, usize>::new());
    let mut runner = TestRunner::new(Config {
        cases: 1500,
        ..Config::default()
    });
    let result = runner.run(&body(), |b| {
        let Ok(out) = check(b, &scope, &rules, engine, &Disk, "s") else {
            counts
                .borrow_mut()
                .entry("refused")
                .and_modify(|n| *n += 1)
                .or_insert(1);
            return Ok(());
        };
        let seen = |what: &'static str| {
            *counts.borrow_mut().entry(what).or_default() += 1;
        };
        let h = out["HostConfig"].as_object().cloned().unwrap_or_default();
        if let Some(p) = h.get("Privileged") {
            seen("Privileged");
            prop_assert_eq!(p, &Value::Bool(false), "only false is forwarded");
        }
        if let Some(caps) = h.get("CapAdd").and_then(Value::as_array) {
            if !caps.is_empty() {
                seen("CapAdd");
            }
            for c in caps {
                prop_assert_eq!(c, &json!("NET_BIND_SERVICE"), "only allowed capabilities");
            }
        }
        if let Some(binds) = h.get("Binds").and_then(Value::as_array) {
            seen("Binds");
            for b in binds {
                let source = b.as_str().unwrap_or("").split(':').next().unwrap_or("");
                prop_assert!(
                    Path::new(source).starts_with(root()),
                    "bind {b} under the root"
                );
            }
        }
        if let Some(opts) = h.get("SecurityOpt").and_then(Value::as_array) {
            seen("SecurityOpt");
            for o in opts {
                let o = o.as_str().unwrap_or("");
                prop_assert!(o.starts_with("no-new-privileges"), "option {o}");
            }
        }
        if h.contains_key("ReadonlyRootfs") {
            seen("ReadonlyRootfs");
        }
        if let Some(hc) = out.get("Healthcheck") {
            seen("Healthcheck");
            let interval = hc["Interval"].as_i64().unwrap_or(0);
            prop_assert!(
                interval == 0 || interval >= 1_000_000_000,
                "interval {interval}"
            );
        }
        if let Some(t) = out.get("StopTimeout") {
            seen("StopTimeout");
            let t = t.as_i64().unwrap_or(-1);
            prop_assert!((0..=300).contains(&t), "stop timeout {t}");
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let counts = counts.into_inner();
    for branch in [
        "refused",
        "Privileged",
        "CapAdd",
        "Binds",
        "SecurityOpt",
        "ReadonlyRootfs",
        "Healthcheck",
        "StopTimeout",
    ] {
        let n = counts.get(branch).copied().unwrap_or(0);
        assert!(n > 0, "the {branch} branch never ran: {counts:?}");
    }
}
