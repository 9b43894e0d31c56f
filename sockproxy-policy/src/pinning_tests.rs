//! Unit tests of `pinning`.
use super::*;
use crate::scope::Prefix;

fn rules(scope: &Scope) -> Rules<'_> {
    Rules {
        scope,
        require_stack_label: true,
        stack: "atlas",
    }
}

const ID: &str = "1111111111111111111111111111111111111111111111111111111111111111";

#[test]
fn inspected_objects() {
    let s = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
    let r = rules(&s);
    let name = ObjRef::Name("deer-flow-sandbox-1".into());
    let ins = |label| Inspected {
        id: ID,
        name: "/deer-flow-sandbox-1",
        stack_label: label,
    };
    let ok = inspected(
        Kind::Container,
        Access::Change,
        "containers.stop",
        &name,
        &ins(Some("atlas")),
        &r,
    );
    assert_eq!(ok.map(|p| p.id().to_owned()), Ok(ID.to_owned()));
    // A change to another stack's container answers what a missing one answers, under the
    // flag the proxy's own not-found for both (issue 37).
    for (op, label) in [
        ("containers.stop", None),
        ("containers.kill", Some("other-stack")),
        ("containers.remove", Some("")),
    ] {
        assert_eq!(
            inspected(Kind::Container, Access::Change, op, &name, &ins(label), &r),
            Err(Refusal::NoSuchContainer("deer-flow-sandbox-1".into())),
            "{op}"
        );
    }
    assert_eq!(
        not_found(Kind::Container, &name, StatusCode::NOT_FOUND, &r),
        Some(Refusal::NoSuchContainer("deer-flow-sandbox-1".into()))
    );
    assert_eq!(
        not_found(Kind::Container, &name, StatusCode::NOT_FOUND, &r)
            .map(|x| (x.status(), x.body())),
        inspected(
            Kind::Container,
            Access::Change,
            "containers.stop",
            &name,
            &ins(None),
            &r
        )
        .err()
        .map(|x| (x.status(), x.body())),
        "the same status and bytes"
    );
    assert_eq!(
        not_found(
            Kind::Network,
            &ObjRef::Name("deer-flow-sandbox-net-9".into()),
            StatusCode::NOT_FOUND,
            &r
        ),
        Some(Refusal::NoSuchNetwork("deer-flow-sandbox-net-9".into()))
    );
    // Other answers, and every answer without the flag, are the engine's.
    assert_eq!(
        not_found(Kind::Container, &name, StatusCode::CONFLICT, &r),
        None
    );
    let unlabelled = Rules {
        require_stack_label: false,
        ..r
    };
    assert_eq!(
        not_found(Kind::Container, &name, StatusCode::NOT_FOUND, &unlabelled),
        None
    );
    // Reads too: another stack on the same prefix must not see its environment or logs.
    for label in [None, Some("other-stack")] {
        assert_eq!(
            inspected(
                Kind::Container,
                Access::Read,
                "containers.inspect",
                &name,
                &ins(label),
                &r
            ),
            Err(Refusal::NoSuchContainer("deer-flow-sandbox-1".into())),
            "{label:?}"
        );
    }
    // Without the flag, the prefix alone decides.
    let prefix_only = Rules {
        require_stack_label: false,
        ..r
    };
    for access in [Access::Read, Access::Change] {
        assert_eq!(
            inspected(
                Kind::Container,
                access,
                "containers.x",
                &name,
                &ins(Some("other-stack")),
                &prefix_only
            ),
            Ok(Pinned(ID.into())),
            "{access:?}"
        );
    }
    // Networks too: one without the stack's label is not the stack's to see or change.
    let net = ObjRef::Name("deer-flow-sandbox-net-1".into());
    let net_ins = |label| Inspected {
        id: ID,
        name: "deer-flow-sandbox-net-1",
        stack_label: label,
    };
    let restricted = Scope::new(Prefix::parse("deer-flow-").expect("valid"), true);
    let rr = rules(&restricted);
    for label in [None, Some("other-stack")] {
        assert_eq!(
            inspected(
                Kind::Network,
                Access::Change,
                "networks.connect",
                &net,
                &net_ins(label),
                &rr
            ),
            // The answer for a network nobody has (issue 37: a 403 was an oracle).
            Err(Refusal::NoSuchNetwork("deer-flow-sandbox-net-1".into())),
            "{label:?}"
        );
        assert_eq!(
            inspected(
                Kind::Network,
                Access::Change,
                "networks.remove",
                &ObjRef::Hex("11".into()),
                &net_ins(label),
                &rr
            ),
            Err(Refusal::NoSuchNetwork("11".into())),
            "{label:?}"
        );
    }
    assert_eq!(
        inspected(
            Kind::Network,
            Access::Read,
            "networks.inspect",
            &net,
            &net_ins(None),
            &rr
        ),
        Err(Refusal::NoSuchNetwork("deer-flow-sandbox-net-1".into()))
    );
    // The engine's own networks carry no label and stay readable, never changeable.
    let bridge = Inspected {
        id: ID,
        name: "bridge",
        stack_label: None,
    };
    let by_name = ObjRef::Name("bridge".into());
    let read = |access, op| inspected(Kind::Network, access, op, &by_name, &bridge, &rr);
    assert_eq!(
        read(Access::Read, "networks.inspect"),
        Ok(Pinned(ID.into()))
    );
    assert_eq!(
        read(Access::Change, "networks.remove")
            .map(|_| ())
            .map_err(|r| r.to_string()),
        Err("sockproxy: networks.remove: bridge is not one of this stack's networks".to_owned())
    );
    assert_eq!(
        inspected(
            Kind::Network,
            Access::Change,
            "networks.connect",
            &net,
            &net_ins(Some("atlas")),
            &rr
        ),
        Ok(Pinned(ID.into()))
    );
    let hex = ObjRef::Hex("11".into());
    let foreign = Inspected {
        id: ID,
        name: "/other",
        stack_label: Some("atlas"),
    };
    assert_eq!(
        inspected(
            Kind::Container,
            Access::Read,
            "containers.inspect",
            &hex,
            &foreign,
            &r
        ),
        Err(Refusal::NoSuchContainer("11".into()))
    );
    let short = Inspected {
        id: "11",
        ..ins(Some("atlas"))
    };
    assert_eq!(
        inspected(
            Kind::Container,
            Access::Change,
            "containers.stop",
            &name,
            &short,
            &r
        ),
        Err(Refusal::Upstream("inspect answer has no full ID".into()))
    );
}

#[test]
fn failed_inspects_and_prefixes() {
    let hex = ObjRef::Hex("ab".into());
    let name = ObjRef::Name("deer-flow-sandbox-1".into());
    let amb = b"{\"message\":\"Multiple IDs found with provided prefix: ab\"}";
    assert_eq!(
        inspect_failed(
            Kind::Container,
            &hex,
            StatusCode::INTERNAL_SERVER_ERROR,
            amb
        ),
        Err(Refusal::NoSuchContainer("ab".into()))
    );
    assert_eq!(
        inspect_failed(Kind::Container, &name, StatusCode::NOT_FOUND, b""),
        Ok(())
    );
    assert_eq!(
        inspect_failed(
            Kind::Container,
            &name,
            StatusCode::INTERNAL_SERVER_ERROR,
            b""
        ),
        Err(Refusal::Upstream(
            "inspect answered 500 Internal Server Error".into()
        ))
    );
    let own = vec![
        ("abc1".to_owned(), "/deer-flow-sandbox-1".to_owned()),
        ("abd2".to_owned(), "/deer-flow-sandbox-2".to_owned()),
    ];
    assert_eq!(
        own_prefix(Kind::Container, "abc", &own),
        Ok("abc1".to_owned())
    );
    assert_eq!(
        own_prefix(Kind::Container, "ab", &own),
        Err(Refusal::NoSuchContainer("ab".into()))
    );
    assert_eq!(
        own_prefix(Kind::Network, "ff", &own),
        Err(Refusal::NoSuchNetwork("ff".into()))
    );
}

#[test]
fn exec_instances() {
    let s = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
    let r = Rules {
        require_stack_label: false,
        ..rules(&s)
    };
    let c = Inspected {
        id: ID,
        name: "/deer-flow-sandbox-1",
        stack_label: None,
    };
    assert_eq!(
        exec(Access::Change, "e", (ID, ID), &c, &r),
        Ok(Pinned(ID.into()))
    );
    // Under --require-stack-label, an exec of an unlabelled container is not found, for
    // an inspect as for a start.
    let labelled = Rules {
        require_stack_label: true,
        ..r
    };
    for access in [Access::Read, Access::Change] {
        assert_eq!(
            exec(access, "e", (ID, ID), &c, &labelled),
            Err(Refusal::NoSuchExec("e".into()))
        );
        let own = Inspected {
            stack_label: Some("atlas"),
            ..c
        };
        assert_eq!(
            exec(access, "e", (ID, ID), &own, &labelled),
            Ok(Pinned(ID.into())),
            "{access:?}"
        );
    }
    let other = Inspected {
        name: "/other",
        ..c
    };
    assert_eq!(
        exec(Access::Change, "e", (ID, ID), &other, &r),
        Err(Refusal::NoSuchExec("e".into()))
    );
    let moved = "2222222222222222222222222222222222222222222222222222222222222222";
    assert_eq!(
        exec(Access::Change, "e", (ID, moved), &c, &r),
        Err(Refusal::NoSuchExec("e".into()))
    );
}
