//! Table tests of `evaluate`: the first decision with no facts, and the pin each fact gives.
use super::*;
use crate::scope::Prefix;

const ID: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const EXEC: &str = "2222222222222222222222222222222222222222222222222222222222222222";

fn policy() -> Policy {
    Policy {
        scope: Scope::new(Prefix::parse("deer-flow-").expect("valid"), false),
        stack: "atlas".into(),
        create_rules: CreateRules::default(),
        allow_images: vec![],
        min_api_version: (1, 24),
    }
}

fn eval(method: Method, uri: &str, facts: &Facts) -> Decision {
    let uri: Uri = uri.parse().expect("a URI");
    let headers = HeaderMap::new();
    let request = Request {
        method: &method,
        uri: &uri,
        headers: &headers,
    };
    evaluate(&request, facts, &policy())
}

#[test]
fn every_decision_says_why() {
    for (method, uri, op, reason) in [
        (Method::GET, "/_ping", "system.ping", "always_allowed"),
        (
            Method::GET,
            "/v1.41/containers/json",
            "containers.list",
            "filtered_list",
        ),
        (Method::GET, "/volumes", "volumes.list", "filtered_list"),
        (
            Method::POST,
            "/containers/deer-flow-sandbox-1/stop",
            "containers.stop",
            "in_scope",
        ),
        (
            Method::POST,
            "/containers/other/stop",
            "containers.stop",
            "out_of_scope",
        ),
        (Method::GET, "/secrets", "secrets", "endpoint_not_allowed"),
        (Method::GET, "/v1.12/_ping", "bad_request", "bad_request"),
        (
            Method::GET,
            "/containers/%2e%2e/json",
            "bad_request",
            "bad_request",
        ),
    ] {
        let d = eval(method.clone(), uri, &Facts::None);
        assert_eq!(
            (d.op.as_str(), d.reason.as_str()),
            (op, reason),
            "{method} {uri}"
        );
        let allowed = matches!(reason, "always_allowed" | "filtered_list" | "in_scope");
        assert_eq!(d.outcome.is_ok(), allowed, "{uri}");
    }
}

#[test]
fn a_named_object_is_pinned_only_by_its_fact() {
    let d = eval(
        Method::POST,
        "/containers/deer-flow-sandbox-1/stop",
        &Facts::None,
    );
    let plan = d.outcome.expect("allowed");
    assert!(plan.pin.is_none());
    let r = ObjRef::Name("deer-flow-sandbox-1".into());
    assert_eq!(plan.needs(), Need::Object(Kind::Container, &r));

    let ours = Inspected {
        id: ID,
        name: "deer-flow-sandbox-1",
        stack_label: None,
    };
    let d = eval(
        Method::POST,
        "/containers/deer-flow-sandbox-1/stop",
        &Facts::Object(ours),
    );
    let plan = d.outcome.expect("allowed");
    assert_eq!(plan.pin.as_ref().map(Pinned::id), Some(ID));
    assert_eq!(plan.needs(), Need::Nothing);
    assert_eq!(d.reason, Reason::InScope);

    // The engine resolved a short ID to another stack's container.
    let theirs = Inspected {
        name: "other-sandbox",
        ..ours
    };
    let d = eval(
        Method::POST,
        "/containers/1111/stop",
        &Facts::Object(theirs),
    );
    assert_eq!(d.outcome, Err(Refusal::NoSuchContainer("1111".into())));
    assert_eq!(d.reason.as_str(), "absent_or_out_of_scope");

    // A fact about an exec for a container plan is refused, not acted on.
    let d = eval(
        Method::POST,
        "/containers/deer-flow-sandbox-1/stop",
        &Facts::Exec {
            reported: (EXEC, ID),
            container: ours,
        },
    );
    assert!(d.outcome.is_err());
}

#[test]
fn an_exec_is_pinned_by_its_container() {
    let uri = format!("/exec/{EXEC}/json");
    let plan = eval(Method::GET, &uri, &Facts::None)
        .outcome
        .expect("allowed");
    assert_eq!(plan.needs(), Need::Exec(EXEC));
    let container = Inspected {
        id: ID,
        name: "deer-flow-sandbox-1",
        stack_label: None,
    };
    let facts = Facts::Exec {
        reported: (EXEC, ID),
        container,
    };
    let plan = eval(Method::GET, &uri, &facts).outcome.expect("allowed");
    assert_eq!(plan.pin.as_ref().map(Pinned::id), Some(EXEC));
    let other = Facts::Exec {
        reported: (EXEC, ID),
        container: Inspected {
            name: "other",
            ..container
        },
    };
    assert!(eval(Method::GET, &uri, &other).outcome.is_err());
}
