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
    eval_in(&policy(), method, uri, facts)
}

fn eval_in(policy: &Policy, method: Method, uri: &str, facts: &Facts) -> Decision {
    let uri: Uri = uri.parse().expect("a URI");
    let headers = HeaderMap::new();
    let request = Request {
        method: &method,
        uri: &uri,
        headers: &headers,
    };
    evaluate(&request, facts, policy)
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
    assert_eq!(plan.needs(), Need::Object(Kind::Container, r));

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
    assert_eq!(plan.needs(), Need::Exec(EXEC.into()));
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

#[test]
fn an_id_prefix_is_resolved_among_the_stacks_own_objects() {
    let plan = eval(Method::POST, "/containers/1111/stop", &Facts::None)
        .outcome
        .expect("allowed");
    assert_eq!(plan.needs(), Need::Own(Kind::Container));
    let own = [(ID.to_owned(), "deer-flow-sandbox-1".to_owned())];
    let plan = eval(Method::POST, "/containers/1111/stop", &Facts::Own(&own))
        .outcome
        .expect("allowed");
    assert!(plan.pin.is_none());
    assert_eq!(
        plan.needs(),
        Need::Object(Kind::Container, ObjRef::Hex(ID.into()))
    );
    // Another stack's container sharing the prefix is not among the stack's own: absent.
    let d = eval(Method::POST, "/containers/2222/stop", &Facts::Own(&own));
    assert_eq!(d.outcome, Err(Refusal::NoSuchContainer("2222".into())));
    // The own objects are no fact about a name.
    let d = eval(
        Method::POST,
        "/containers/deer-flow-sandbox-1/stop",
        &Facts::Own(&own),
    );
    assert!(d.outcome.is_err());
}

#[test]
fn a_list_filter_naming_a_container_is_pinned_among_the_stacks_own() {
    let uri = "/containers/json?filters=%7B%22before%22%3A%5B%22deer-flow-sandbox-1%22%5D%7D";
    let plan = eval(Method::GET, uri, &Facts::None)
        .outcome
        .expect("allowed");
    assert_eq!(plan.needs(), Need::Own(Kind::Container));
    let own = [(ID.to_owned(), "deer-flow-sandbox-1".to_owned())];
    let plan = eval(Method::GET, uri, &Facts::Own(&own))
        .outcome
        .expect("allowed");
    assert_eq!(plan.needs(), Need::Nothing);
    assert_eq!(
        plan.target.query.get("filters"),
        Some(format!(r#"{{"before":{{"{ID}":true}}}}"#).as_str())
    );
    let d = eval(Method::GET, uri, &Facts::Own(&[]));
    assert_eq!(
        d.outcome,
        Err(Refusal::NoSuchContainer("deer-flow-sandbox-1".into()))
    );
}

#[test]
fn another_object_a_request_names_is_pinned_by_its_own_fact() {
    // Networks are the stack's to change in restricted mode only.
    let restricted = Policy {
        scope: Scope::new(Prefix::parse("deer-flow-").expect("valid"), true),
        ..policy()
    };
    let eval = |method, uri, facts: &Facts| eval_in(&restricted, method, uri, facts);
    let net = ObjRef::Name("deer-flow-sandbox-net-1".into());
    let found = Facts::None;
    let joins = Facts::Other {
        kind: Kind::Network,
        r: &net,
        found: &found,
    };
    let plan = eval(
        Method::POST,
        "/containers/create?name=deer-flow-sandbox-2",
        &joins,
    )
    .outcome
    .expect("allowed");
    assert_eq!(plan.needs(), Need::Object(Kind::Network, net.clone()));
    let ins = Inspected {
        id: ID,
        name: "deer-flow-sandbox-net-1",
        stack_label: None,
    };
    let found = Facts::Object(ins);
    let joins = Facts::Other {
        kind: Kind::Network,
        r: &net,
        found: &found,
    };
    let plan = eval(
        Method::POST,
        "/containers/create?name=deer-flow-sandbox-2",
        &joins,
    )
    .outcome
    .expect("allowed");
    assert_eq!(plan.pin.as_ref().map(Pinned::id), Some(ID));
    // A container a create names this way, or a network another's: not the request's to name.
    let c = Facts::Other {
        kind: Kind::Container,
        r: &net,
        found: &found,
    };
    assert!(eval(
        Method::POST,
        "/containers/create?name=deer-flow-sandbox-2",
        &c
    )
    .outcome
    .is_err());
    // The container a connect names is decided as a change, by name before any inspect.
    let other = ObjRef::Name("other".into());
    let connect = Facts::Other {
        kind: Kind::Container,
        r: &other,
        found: &Facts::None,
    };
    let d = eval(
        Method::POST,
        "/networks/deer-flow-sandbox-net-1/connect",
        &connect,
    );
    assert_eq!(d.reason.as_str(), "out_of_scope");
}
