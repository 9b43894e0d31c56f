//! Table tests of `evaluate`: the first decision with no facts, the fact each plan asks for
//! next, and the pin and body the facts give.
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
        host: Host::unread(),
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

fn plan(d: Decision) -> Plan {
    d.outcome.expect("allowed")
}

fn object(name: &str, label: Option<&str>) -> Fact {
    Fact::Object {
        found: Found {
            id: ID.into(),
            name: name.into(),
            stack_label: label.map(str::to_owned),
        },
        engine_api: Some("1.41".into()),
    }
}

fn facts(given: impl IntoIterator<Item = (Need, Fact)>) -> Facts {
    let mut facts = Facts::default();
    for (need, fact) in given {
        facts.give(need, fact);
    }
    facts
}

/// The stack's network as the transport made it for `policy`.
fn made_network(policy: &Policy) -> Fact {
    let mut made = crate::stack_net::create_body(policy);
    made["Id"] = ID.into();
    Fact::StackNetwork(crate::stack_net::Held::read(made.to_string().as_bytes()).expect("read"))
}

fn named(kind: Kind, name: &str) -> Need {
    Need::Object(kind, ObjRef::Name(name.into()))
}

fn absent(status: StatusCode) -> Fact {
    Fact::Absent {
        status,
        body: Bytes::from_static(b"{\"message\":\"No such container: x\"}"),
    }
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
        let d = eval(method.clone(), uri, &Facts::default());
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
    let stop = "/containers/deer-flow-sandbox-1/stop";
    let first = plan(eval(Method::POST, stop, &Facts::default()));
    assert!(first.pin.is_none());
    let need = named(Kind::Container, "deer-flow-sandbox-1");
    assert_eq!(first.need, need);
    assert_eq!(first.body, Sent::Nothing);

    let ours = facts([(need.clone(), object("/deer-flow-sandbox-1", None))]);
    let d = eval(Method::POST, stop, &ours);
    assert_eq!(d.reason, Reason::InScope);
    let done = plan(d);
    assert_eq!(done.pin.as_ref().map(Pinned::id), Some(ID));
    assert_eq!((done.need, done.relay), (Need::Nothing, None));

    // The engine resolved a short ID to another stack's container.
    let short = Need::Object(Kind::Container, ObjRef::Hex("1111".into()));
    let mut theirs = facts([(
        Need::Own(Kind::Container),
        Fact::Own(vec![(ID.into(), "deer-flow-sandbox-1".into())]),
    )]);
    theirs.give(
        Need::Object(Kind::Container, ObjRef::Hex(ID.into())),
        object("/other-sandbox", None),
    );
    let d = eval(Method::POST, "/containers/1111/stop", &theirs);
    assert_eq!(d.outcome, Err(Refusal::NoSuchContainer("1111".into())));
    assert_eq!(d.reason.as_str(), "absent_or_out_of_scope");
    assert!(!theirs.has(&short), "a prefix is never inspected by itself");

    // A fact nobody asked for is no fact about the object: it is still needed.
    let exec = facts([(
        Need::Exec(EXEC.into()),
        Fact::Exec {
            id: EXEC.into(),
            container_id: ID.into(),
        },
    )]);
    assert_eq!(plan(eval(Method::POST, stop, &exec)).need, need);
    // A fact of the wrong kind for its need is refused, not acted on.
    let wrong = facts([(need, Fact::Own(vec![]))]);
    assert!(eval(Method::POST, stop, &wrong).outcome.is_err());
}

#[test]
fn an_inspect_the_engine_refused_is_relayed_or_refused() {
    let stop = "/containers/deer-flow-sandbox-1/stop";
    let need = named(Kind::Container, "deer-flow-sandbox-1");
    // A name the engine does not know: its own answer goes back.
    let gone = facts([(need.clone(), absent(StatusCode::NOT_FOUND))]);
    let relayed = plan(eval(Method::POST, stop, &gone));
    assert_eq!(
        (relayed.need, relayed.relay, relayed.pin),
        (Need::Nothing, Some(need.clone()), None)
    );
    // Under `--require-stack-label` it is answered in the words of another stack's.
    let labelled = Policy {
        scope: policy().scope.with_required_label(Some("atlas")),
        create_rules: CreateRules {
            require_stack_label: true,
            ..CreateRules::default()
        },
        ..policy()
    };
    assert_eq!(
        eval_in(&labelled, Method::POST, stop, &gone).outcome,
        Err(Refusal::NoSuchContainer("deer-flow-sandbox-1".into()))
    );
    // An engine failure is the proxy's 502.
    let failed = facts([(need, absent(StatusCode::INTERNAL_SERVER_ERROR))]);
    assert_eq!(
        eval(Method::POST, stop, &failed).reason.as_str(),
        "upstream_unavailable"
    );
}

#[test]
fn an_exec_is_pinned_by_its_container() {
    let uri = format!("/exec/{EXEC}/json");
    let exec = Need::Exec(EXEC.into());
    assert_eq!(plan(eval(Method::GET, &uri, &Facts::default())).need, exec);
    let mut found = facts([(
        exec.clone(),
        Fact::Exec {
            id: EXEC.into(),
            container_id: ID.into(),
        },
    )]);
    let container = Need::Object(Kind::Container, ObjRef::Hex(ID.into()));
    assert_eq!(plan(eval(Method::GET, &uri, &found)).need, container);
    found.give(container.clone(), object("/deer-flow-sandbox-1", None));
    let done = plan(eval(Method::GET, &uri, &found));
    assert_eq!(done.pin.as_ref().map(Pinned::id), Some(EXEC));
    found.give(container.clone(), object("/other", None));
    assert_eq!(
        eval(Method::GET, &uri, &found).outcome,
        Err(Refusal::NoSuchExec(EXEC.into()))
    );
    // Gone between the two inspects.
    found.give(container, absent(StatusCode::NOT_FOUND));
    assert_eq!(
        eval(Method::GET, &uri, &found).outcome,
        Err(Refusal::NoSuchExec(EXEC.into()))
    );
    // The engine knows no such exec, or failed.
    for (status, reason) in [
        (StatusCode::NOT_FOUND, "absent_or_out_of_scope"),
        (StatusCode::BAD_GATEWAY, "upstream_unavailable"),
    ] {
        let d = eval(Method::GET, &uri, &facts([(exec.clone(), absent(status))]));
        assert_eq!(d.reason.as_str(), reason, "{status}");
    }
}

#[test]
fn an_id_prefix_is_resolved_among_the_stacks_own_objects() {
    let first = plan(eval(
        Method::POST,
        "/containers/1111/stop",
        &Facts::default(),
    ));
    assert_eq!(first.need, Need::Own(Kind::Container));
    let own = facts([(
        Need::Own(Kind::Container),
        Fact::Own(vec![(ID.into(), "deer-flow-sandbox-1".into())]),
    )]);
    let next = plan(eval(Method::POST, "/containers/1111/stop", &own));
    assert!(next.pin.is_none());
    assert_eq!(
        next.need,
        Need::Object(Kind::Container, ObjRef::Hex(ID.into()))
    );
    // Another stack's container sharing the prefix is not among the stack's own: absent.
    let d = eval(Method::POST, "/containers/2222/stop", &own);
    assert_eq!(d.outcome, Err(Refusal::NoSuchContainer("2222".into())));
}

#[test]
fn a_list_filter_naming_a_container_is_pinned_among_the_stacks_own() {
    let uri = "/containers/json?filters=%7B%22before%22%3A%5B%22deer-flow-sandbox-1%22%5D%7D";
    assert_eq!(
        plan(eval(Method::GET, uri, &Facts::default())).need,
        Need::Own(Kind::Container)
    );
    let own = facts([(
        Need::Own(Kind::Container),
        Fact::Own(vec![(ID.into(), "deer-flow-sandbox-1".into())]),
    )]);
    let done = plan(eval(Method::GET, uri, &own));
    assert_eq!(done.need, Need::Nothing);
    assert_eq!(
        done.target.query.get("filters"),
        Some(format!(r#"{{"before":{{"{ID}":true}}}}"#).as_str())
    );
    let none = facts([(Need::Own(Kind::Container), Fact::Own(vec![]))]);
    assert_eq!(
        eval(Method::GET, uri, &none).outcome,
        Err(Refusal::NoSuchContainer("deer-flow-sandbox-1".into()))
    );
}

#[test]
fn a_body_is_a_fact_read_before_the_engine_is_asked() {
    let create = "/containers/create?name=deer-flow-sandbox-2";
    let first = plan(eval(Method::POST, create, &Facts::default()));
    assert_eq!((first.need, first.body), (Need::Body, Sent::Unread));
    let body = |v: serde_json::Value| {
        facts([
            (Need::Body, Fact::Body(v)),
            (Need::StackNetwork, made_network(&policy())),
            (Need::Usage, Fact::Usage(vec![])),
        ])
    };
    let done = plan(eval(
        Method::POST,
        create,
        &body(serde_json::json!({"Image": "busybox"})),
    ));
    let Sent::Checked(out) = done.body else {
        panic!("forwarded as checked: {:?}", done.body)
    };
    assert_eq!(out["Labels"]["sockproxy.stack"], "atlas");
    let d = eval(
        Method::POST,
        create,
        &body(serde_json::json!({"HostConfig": {"Privileged": true}})),
    );
    assert_eq!(d.reason.as_str(), "setting_not_allowed");
    // An exec create reads its body before the container is inspected.
    let exec = "/containers/deer-flow-sandbox-1/exec";
    assert_eq!(
        plan(eval(Method::POST, exec, &Facts::default())).need,
        Need::Body
    );
    let read = body(serde_json::json!({"Cmd": ["true"]}));
    assert_eq!(
        plan(eval(Method::POST, exec, &read)).need,
        named(Kind::Container, "deer-flow-sandbox-1")
    );
    // An archive upload streams; an archive needs an engine that says API 1.43.
    let archive = "/containers/deer-flow-sandbox-1/archive?path=%2Ftmp";
    assert_eq!(
        plan(eval(Method::PUT, archive, &Facts::default())).body,
        Sent::Stream
    );
    let need = named(Kind::Container, "deer-flow-sandbox-1");
    let old = facts([(need.clone(), object("/deer-flow-sandbox-1", None))]);
    assert_eq!(
        eval(Method::PUT, archive, &old).reason.as_str(),
        "setting_not_allowed"
    );
    let new = facts([(
        need,
        Fact::Object {
            found: Found {
                id: ID.into(),
                name: "/deer-flow-sandbox-1".into(),
                stack_label: None,
            },
            engine_api: Some("1.43".into()),
        },
    )]);
    let done = plan(eval(Method::PUT, archive, &new));
    assert_eq!(
        (done.body, done.pin.as_ref().map(Pinned::id)),
        (Sent::Stream, Some(ID))
    );
}

#[test]
fn other_objects_a_request_names_are_pinned_by_their_own_facts() {
    // Networks are the stack's to change in restricted mode only.
    let restricted = Policy {
        scope: Scope::new(Prefix::parse("deer-flow-").expect("valid"), true),
        ..policy()
    };
    let eval = |method, uri, facts: &Facts| eval_in(&restricted, method, uri, facts);
    let connect = "/networks/deer-flow-sandbox-net-1/connect";
    let body = serde_json::json!({"Container": "deer-flow-sandbox-2"});
    let mut found = facts([(Need::Body, Fact::Body(body))]);
    let net = named(Kind::Network, "deer-flow-sandbox-net-1");
    assert_eq!(plan(eval(Method::POST, connect, &found)).need, net);
    found.give(net, object("deer-flow-sandbox-net-1", None));
    let container = named(Kind::Container, "deer-flow-sandbox-2");
    assert_eq!(plan(eval(Method::POST, connect, &found)).need, container);
    found.give(
        container,
        Fact::Object {
            found: Found {
                id: EXEC.into(),
                name: "/deer-flow-sandbox-2".into(),
                stack_label: None,
            },
            engine_api: None,
        },
    );
    let done = plan(eval(Method::POST, connect, &found));
    assert_eq!(done.pin.as_ref().map(Pinned::id), Some(ID));
    assert_eq!(
        done.body,
        Sent::Checked(serde_json::json!({"Container": EXEC}))
    );
    // The container a connect names is decided as a change, by name before any inspect.
    let other = facts([
        (
            Need::Body,
            Fact::Body(serde_json::json!({"Container": "other"})),
        ),
        (
            named(Kind::Network, "deer-flow-sandbox-net-1"),
            object("deer-flow-sandbox-net-1", None),
        ),
    ]);
    assert_eq!(
        eval(Method::POST, connect, &other).reason.as_str(),
        "out_of_scope"
    );

    // Under `--require-stack-label` each network a create joins is inspected for the label.
    let labelled = Policy {
        scope: restricted.scope.clone().with_required_label(Some("atlas")),
        create_rules: CreateRules {
            require_stack_label: true,
            ..CreateRules::default()
        },
        ..restricted.clone()
    };
    let create = "/containers/create?name=deer-flow-sandbox-2";
    let body = serde_json::json!({"Image": "busybox", "HostConfig": {"NetworkMode": "deer-flow-sandbox-net-1"}});
    let mut found = facts([(Need::Body, Fact::Body(body))]);
    let net = named(Kind::Network, "deer-flow-sandbox-net-1");
    assert_eq!(
        plan(eval_in(&labelled, Method::POST, create, &found)).need,
        net
    );
    found.give(net.clone(), object("deer-flow-sandbox-net-1", None));
    assert_eq!(
        eval_in(&labelled, Method::POST, create, &found).outcome,
        Err(Refusal::NoSuchNetwork("deer-flow-sandbox-net-1".into()))
    );
    found.give(net, object("deer-flow-sandbox-net-1", Some("atlas")));
    // Then the stack's totals, counted under its lock.
    let counting = plan(eval_in(&labelled, Method::POST, create, &found));
    assert_eq!(counting.need, Need::Usage);
    found.give(Need::Usage, Fact::Usage(vec![]));
    let done = plan(eval_in(&labelled, Method::POST, create, &found));
    assert!(matches!(done.body, Sent::Checked(_)) && done.pin.is_none());
}

/// The transport's loop over a fixed set of answers: the evaluations it takes and the needs it
/// asks for.
fn count(method: Method, uri: &str, answer: impl Fn(&Need) -> Fact) -> (usize, Vec<Need>) {
    let mut facts = Facts::default();
    let mut asked = vec![];
    for n in 1..10 {
        let p = plan(eval(method.clone(), uri, &facts));
        if p.need == Need::Nothing {
            return (n, asked);
        }
        facts.give(p.need.clone(), answer(&p.need));
        asked.push(p.need);
    }
    panic!("{uri}: no final plan");
}

#[test]
fn each_fact_is_asked_for_once() {
    let (n, asked) = count(Method::POST, "/containers/deer-flow-sandbox-1/stop", |_| {
        object("/deer-flow-sandbox-1", None)
    });
    assert_eq!(
        (n, asked),
        (2, vec![named(Kind::Container, "deer-flow-sandbox-1")])
    );
    let (n, asked) = count(Method::GET, "/_ping", |_| unreachable!());
    assert_eq!((n, asked), (1, vec![]));
    let exec = format!("/exec/{EXEC}/start");
    let (n, asked) = count(Method::POST, &exec, |need| match need {
        Need::Body => Fact::Body(serde_json::json!({"Detach": true})),
        Need::Exec(_) => Fact::Exec {
            id: EXEC.into(),
            container_id: ID.into(),
        },
        _ => object("/deer-flow-sandbox-1", None),
    });
    assert_eq!(n, 4);
    assert_eq!(
        asked,
        [
            Need::Body,
            Need::Exec(EXEC.into()),
            Need::Object(Kind::Container, ObjRef::Hex(ID.into()))
        ]
    );
}

#[test]
fn under_a_network_pool_a_network_create_asks_for_the_engines_subnets_and_gets_one_of_the_pool() {
    let pool = crate::subnet_pool::NetworkPool::new("10.213.0.0/16".parse().expect("cidr"), 24)
        .expect("pool");
    let pooled = Policy {
        scope: Scope::new(Prefix::parse("deer-flow-").expect("valid"), true),
        create_rules: CreateRules {
            network_pool: Some(pool),
            ..CreateRules::default()
        },
        ..policy()
    };
    let create = "/networks/create";
    let body = serde_json::json!({ "Name": "deer-flow-sandbox-egress-1", "Driver": "bridge" });
    let mut found = facts([(Need::Body, Fact::Body(body.clone()))]);
    assert_eq!(
        plan(eval_in(&pooled, Method::POST, create, &found)).need,
        Need::Subnets
    );
    found.give(
        Need::Subnets,
        Fact::Subnets(vec!["10.213.0.0/24".parse().expect("cidr")]),
    );
    let Sent::Checked(sent) = plan(eval_in(&pooled, Method::POST, create, &found)).body else {
        panic!("a checked body");
    };
    assert_eq!(
        sent["IPAM"],
        serde_json::json!({ "Driver": "default", "Config": [{ "Subnet": "10.213.1.0/24", "Gateway": "10.213.1.1" }] })
    );
    // The stack still names no subnet of its own, pool or not.
    let chosen = serde_json::json!({ "Name": "deer-flow-sandbox-egress-1",
        "IPAM": { "Config": [{ "Subnet": "10.213.9.0/24" }] } });
    let found = facts([(Need::Body, Fact::Body(chosen))]);
    assert_eq!(
        eval_in(&pooled, Method::POST, create, &found)
            .outcome
            .map(|_| ()),
        Err(Refusal::Setting {
            op: "networks.create".into(),
            why: "IPAM.Config is not allowed for this stack".into()
        })
    );
    // Without a pool nothing more is asked.
    let restricted = Policy {
        create_rules: CreateRules::default(),
        ..pooled
    };
    let found = facts([(Need::Body, Fact::Body(body))]);
    assert_eq!(
        plan(eval_in(&restricted, Method::POST, create, &found)).need,
        Need::Nothing
    );
}
