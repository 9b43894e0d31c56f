//! The create-body table: every fixture in `tests/fixtures/create_bodies.json` is a raw body and
//! the decision it must get (`allow`, or the exact refusal message), for a `--restricted` stack
//! with prefix `deer-flow-`, `--allow-cap NET_BIND_SERVICE` and `--allow-bind-root /srv/sandboxes`.

use super::*;
use crate::body::parse_checked;
use crate::scope::Prefix;

#[derive(serde::Deserialize)]
struct Case {
    case: String,
    body: String,
    want: String,
}

fn decide(body: &str) -> String {
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), true);
    let rules = CreateRules {
        allow_caps: vec!["NET_BIND_SERVICE".into()],
        bind_roots: vec![PathBuf::from("/srv/sandboxes")],
        public_ports: false,
    };
    let engine = Path::new("/run/custom/docker.sock");
    match parse_checked(body.as_bytes()).and_then(|v| check(v, &scope, &rules, engine, "atlas")) {
        Ok(out) => {
            assert_eq!(
                out["Labels"][STACK_LABEL], "atlas",
                "allowed bodies are stamped"
            );
            "allow".into()
        }
        Err(r) => r.to_string(),
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
        "s",
    )
    .expect_err("refused");
    assert_eq!(err.status(), http::StatusCode::FORBIDDEN);
    assert_eq!(
        err.to_string(),
        "sockproxy: containers.create: bind source /run/custom/docker.sock is the engine's socket"
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
        "atlas",
    )
    .expect("allowed");
    assert_eq!(out["labels"]["sockproxy.stack"], "atlas");
    assert_eq!(out["labels"]["k"], "v");
}
