//! Unit tests of `filter`.
#[test]
fn before_and_since_name_only_own_containers() {
    let own = vec![
        ("aaa111".to_owned(), "deer-flow-sandbox-1".to_owned()),
        ("bbb222".to_owned(), "deer-flow-sandbox-2".to_owned()),
    ];
    assert!(!names_containers(r#"{"name":["x"]}"#));
    assert!(names_containers(r#"{"since":["x"]}"#));
    assert_eq!(
        pin_container_refs(r#"{"before":["deer-flow-sandbox-1"],"name":["d"]}"#, &own),
        Ok(r#"{"before":{"aaa111":true},"name":["d"]}"#.to_owned())
    );
    assert_eq!(
        pin_container_refs(r#"{"since":{"/deer-flow-sandbox-2":true}}"#, &own),
        Ok(r#"{"since":{"bbb222":true}}"#.to_owned())
    );
    assert_eq!(
        pin_container_refs(r#"{"since":["aaa"]}"#, &own),
        Ok(r#"{"since":{"aaa111":true}}"#.to_owned())
    );
    // A foreign container and a missing one get the same answer.
    for r in ["other-stack-db", "ccc", "deer-flow-sandbox-9"] {
        assert_eq!(
            pin_container_refs(&format!(r#"{{"before":["{r}"]}}"#), &own),
            Err(Refusal::NoSuchContainer(r.to_owned()))
        );
    }
    assert_eq!(
        pin_container_refs("nope", &own),
        Err(Refusal::BadRequest("filters is not a JSON object".into()))
    );
}

use super::*;
use crate::scope::Prefix;

fn scope() -> Scope {
    Scope::new(Prefix::parse("deer-flow-").expect("valid"), false)
}

fn names(out: &[u8]) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(out).expect("json");
    v.as_array()
        .expect("array")
        .iter()
        .map(|e| {
            e.get("Names")
                .and_then(|n| n.get(0))
                .or_else(|| e.get("Name"))
                .and_then(|n| n.as_str())
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

/// dockerd below API 1.28 lists every network's endpoints; other stacks' containers on the
/// stack's own network are left out, as in the network's inspect.
#[test]
fn network_lists_keep_only_own_endpoints() {
    let body = br#"[{"Name":"deer-flow-net-a","Id":"n1","Containers":{
        "c1":{"Name":"deer-flow-sandbox-a","IPv4Address":"172.23.0.2/16"},
        "c2":{"Name":"other-stack-x","IPv4Address":"172.23.0.3/16"}},
        "Peers":[{"Name":"node-2"}]},
        {"Name":"other-net","Id":"n2","Containers":{}}]"#;
    let out = stack_list(Kind::Network, body, &scope(), None, &Names::default(), None).expect("ok");
    let v: Vec<serde_json::Value> = serde_json::from_slice(&out).expect("json");
    assert_eq!(v.len(), 1);
    let containers = v[0]["Containers"].as_object().expect("object");
    assert_eq!(containers.keys().collect::<Vec<_>>(), ["c1"]);
    assert!(v[0].get("Peers").is_none());
    assert_eq!(
        own_endpoints_in_list(b"{}", &scope(), None),
        Err(FilterError(
            "invalid type: map, expected a sequence at line 1 column 0".into()
        ))
    );
}

/// Under `--require-stack-label`, an entry under the prefix is listed only with the
/// stack's own label: another stack sharing the prefix (or an engine-made object) is not.
#[test]
fn under_the_label_rule_lists_keep_only_the_stacks_labelled_entries() {
    let labelled = scope().with_required_label(Some("atlas"));
    let containers = br#"[
        {"Id":"1","Names":["/deer-flow-sandbox-a"],"Labels":{"sockproxy.stack":"atlas","k":"v"}},
        {"Id":"2","Names":["/deer-flow-sandbox-b"],"Labels":{"sockproxy.stack":"bravo"}},
        {"Id":"3","Names":["/deer-flow-sandbox-c"],"Labels":{}},
        {"Id":"4","Names":["/deer-flow-sandbox-d"],"Labels":null},
        {"Id":"5","Names":["/deer-flow-sandbox-e"]},
        {"Id":"6","Names":["/other"],"Labels":{"sockproxy.stack":"atlas"}}
    ]"#;
    let out = filter_list(Kind::Container, containers, &labelled, None).expect("ok");
    assert_eq!(names(&out), ["/deer-flow-sandbox-a"]);
    let all = filter_list(Kind::Container, containers, &scope(), None).expect("ok");
    assert_eq!(names(&all).len(), 5, "without the flag the prefix decides");
    let networks = br#"[
        {"Name":"deer-flow-net-a","Labels":{"sockproxy.stack":"atlas"}},
        {"Name":"deer-flow-net-b","Labels":{"sockproxy.stack":"bravo"}},
        {"Name":"deer-flow-net-c","Labels":{}},
        {"Name":"bridge","Labels":{}}
    ]"#;
    let out = filter_list(Kind::Network, networks, &labelled, None).expect("ok");
    assert_eq!(names(&out), ["deer-flow-net-a"]);
    // An unreadable label fails closed, as any unreadable entry does.
    let bad = br#"[{"Names":["/deer-flow-a"],"Labels":{"sockproxy.stack":7}}]"#;
    assert_eq!(
        filter_list(Kind::Container, bad, &labelled, None),
        Err(FilterError(
            "invalid type: integer `7`, expected a string at line 1 column 55".into()
        ))
    );
}

/// Under `--require-stack-label` an endpoint is the stack's only if its container is one
/// of the stack's own (labelled) ones: another stack's sandbox on `bridge` shares the prefix.
#[test]
fn under_the_label_rule_endpoints_are_kept_by_own_id() {
    let labelled = scope().with_required_label(Some("atlas"));
    let bridge = || {
        serde_json::json!({ "Name": "bridge", "Containers": {
            "c1": { "Name": "deer-flow-sandbox-a" },
            "c2": { "Name": "deer-flow-sandbox-b" },
            "c3": { "Name": "other" } } })
    };
    let kept = |scope: &Scope, own: Option<&OwnIds>| {
        let mut v = bridge();
        own_endpoints(&mut v, scope, own);
        let mut ids: Vec<String> = v["Containers"]
            .as_object()
            .expect("object")
            .keys()
            .cloned()
            .collect();
        ids.sort();
        ids
    };
    let own: OwnIds = ["c1".to_owned(), "c3".to_owned()].into();
    assert_eq!(kept(&labelled, Some(&own)), ["c1"]);
    assert_eq!(kept(&labelled, None), Vec::<String>::new(), "fails closed");
    assert_eq!(
        kept(&scope(), None),
        ["c1", "c2"],
        "without the flag, by name"
    );
}

#[test]
fn containers_filtered_by_own_name_not_alias() {
    let body = br#"[
        {"Id":"1","Names":["/deer-flow-sandbox-a"]},
        {"Id":"2","Names":["/other"]},
        {"Id":"3","Names":["/deer-flow-sandbox-b/other","/other2"]},
        {"Id":"4","Names":["/other3/deer-flow-x","/deer-flow-netproxy-a"]},
        {"Id":"5"},
        {"Id":"6","Names":["/Deer-flow-x"]}
    ]"#;
    let out = filter_list(Kind::Container, body, &scope(), None).expect("ok");
    assert_eq!(names(&out), ["/deer-flow-sandbox-a", "/other3/deer-flow-x"]);
    let ids: Vec<String> = serde_json::from_slice::<Vec<serde_json::Value>>(&out)
        .expect("json")
        .iter()
        .map(|e| e["Id"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(ids, ["1", "4"]);
}

#[test]
fn limit_applies_after_filtering() {
    let body = br#"[{"Names":["/x"]},{"Names":["/deer-flow-1"]},{"Names":["/y"]},{"Names":["/deer-flow-2"]},{"Names":["/deer-flow-3"]}]"#;
    let out = filter_list(Kind::Container, body, &scope(), Some(2)).expect("ok");
    assert_eq!(names(&out), ["/deer-flow-1", "/deer-flow-2"]);
}

#[test]
fn networks_filtered() {
    let body = br#"[{"Name":"bridge"},{"Name":"deer-flow-net-egress"},{"Name":"host"}]"#;
    let out = filter_list(Kind::Network, body, &scope(), None).expect("ok");
    assert_eq!(names(&out), ["deer-flow-net-egress"]);
}

#[test]
fn unreadable_lists_fail_closed() {
    for (body, why) in [
        (&b"{}"[..], "expected '[' at byte 0"),
        (b"[1]", "expected an object at byte 1"),
        (
            b"[{\"Names\":\"/x\"}]",
            "invalid type: string \"/x\", expected a sequence at line 1 column 13",
        ),
        (b"[", "expected an object at byte 1"),
        (b"null", "expected '[' at byte 0"),
        (b"", "expected '[' at byte 0"),
        (b"[{}", "expected ',' or ']' at byte 3"),
        (b"[{},", "expected an object at byte 4"),
        (b"[{},]", "expected an object at byte 4"),
        (b"[{} {}]", "expected ',' or ']' at byte 4"),
        (b"[{}] x", "trailing characters at byte 4"),
        (b"[{}]]", "trailing characters at byte 4"),
        (b"[[[\"/deer-flow-x\"]]]", "expected an object at byte 1"),
        (
            b"[{\"Names\":[\"/deer-flow-x\"],\"Names\":[\"/y\"]}]",
            "duplicate field `Names` at line 1 column 33",
        ),
        (
            b"[{\"Names\":[\"/deer-flow-x\"]},{\"Names\":1}]",
            "invalid type: integer `1`, expected a sequence at line 1 column 10",
        ),
        (
            b"[{\"Names\":[\"/deer-flow-1\"],\"Labels\":{\"a\":\"\xff\"}}]",
            "not UTF-8 at byte 42",
        ),
        (
            b"[{\"Names\":[\"/deer-flow-1\"]}]\xc3",
            "not UTF-8 at byte 28",
        ),
    ] {
        assert_eq!(
            filter_list(Kind::Container, body, &scope(), None),
            Err(FilterError(why.into())),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn an_unreadable_entry_past_the_limit_still_fails_closed() {
    let body = br#"[{"Names":["/deer-flow-1"]},{"Names":5}]"#;
    assert_eq!(
        filter_list(Kind::Container, body, &scope(), Some(1)),
        Err(FilterError(
            "invalid type: integer `5`, expected a sequence at line 1 column 10".into()
        ))
    );
}

#[test]
fn whitespace_anywhere_json_allows_it() {
    let body = b" \n[ \t{\"Names\" : [\"/deer-flow-1\"]}\r\n, {\"Names\":[\"/x\"]} ,{\"Names\":[\"/deer-flow-2\"]} ] \n";
    let out = filter_list(Kind::Container, body, &scope(), None).expect("ok");
    assert_eq!(names(&out), ["/deer-flow-1", "/deer-flow-2"]);
    for empty in [&b"[]"[..], b" [ ] ", b"[\n]\n"] {
        assert_eq!(
            filter_list(Kind::Container, empty, &scope(), None).expect("ok"),
            b"[]\n"
        );
    }
}

proptest::proptest! {
    /// The one-pass filter keeps exactly the entries a whole-document parse says are the
    /// stack's, byte for byte, in order, whatever the layout.
    #[test]
    fn same_entries_as_a_whole_document_parse(
        entries in proptest::collection::vec(
            (proptest::option::of("(deer-flow-|other-|Deer-flow-)[a-z]{0,3}"), 0u32..5),
            0..12,
        ),
        pretty: bool,
        limit in proptest::option::of(1usize..6),
    ) {
        let list: Vec<serde_json::Value> = entries
            .iter()
            .map(|(name, n)| match name {
                Some(name) => serde_json::json!({"Id": n, "Names": [format!("/{name}")], "Labels": {"a": "}],"}}),
                None => serde_json::json!({"Id": n}),
            })
            .collect();
        let body = if pretty {
            serde_json::to_vec_pretty(&list)
        } else {
            serde_json::to_vec(&list)
        }
        .expect("serializes");
        let expected: Vec<&serde_json::Value> = list
            .iter()
            .filter(|e| e["Names"][0].as_str().is_some_and(|n| scope().visible(&n[1..])))
            .take(limit.unwrap_or(usize::MAX))
            .collect();
        let out = filter_list(Kind::Container, &body, &scope(), limit).expect("ok");
        let got: Vec<serde_json::Value> = serde_json::from_slice(&out).expect("json");
        proptest::prop_assert_eq!(got.iter().collect::<Vec<_>>(), expected.clone());
        if !pretty {
            // Byte for byte: each kept entry exactly as the engine wrote it.
            let entries: Vec<String> = expected.iter().map(|e| e.to_string()).collect();
            let exact = format!("[{}]\n", entries.join(","));
            proptest::prop_assert_eq!(String::from_utf8_lossy(&out), exact);
        }
    }
}

#[test]
fn limit_parsing() {
    assert_eq!(parse_limit(None), Ok(None));
    assert_eq!(parse_limit(Some("3")), Ok(Some(3)));
    assert_eq!(parse_limit(Some("0")), Ok(None));
    assert_eq!(parse_limit(Some("-1")), Ok(None));
    assert_eq!(
        parse_limit(Some("x")),
        Err("limit \"x\" is not an integer".into())
    );
}
