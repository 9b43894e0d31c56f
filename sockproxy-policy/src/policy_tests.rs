//! The decision table for `policy::decide` and its properties.
pub(crate) mod table {
    use crate::policy::*;
    use crate::scope::Prefix;

    /// The table's scope and endpoint makers; the name tables (`policy_name_tests`) use them too.
    pub(crate) fn scope(restricted: bool) -> Scope {
        Scope::new(Prefix::parse("deer-flow-").expect("valid"), restricted)
    }

    pub(crate) fn container(op: ContainerOp, name: &str) -> Endpoint {
        Endpoint::Container {
            op,
            target: ObjRef::parse(name).expect("ref"),
        }
    }

    #[test]
    fn decision_table() {
        let q = Query::default();
        let stop_sidecar = container(ContainerOp::Stop, "deer-flow-netproxy-c1a44b2434411cc2");
        let cases: Vec<(Endpoint, bool, Result<(), String>)> = vec![
            (Endpoint::Ping, false, Ok(())),
            (
                stop_sidecar.clone(),
                false,
                Err("sockproxy: containers.stop: deer-flow-netproxy-c1a44b2434411cc2 is not one of this stack's sandboxes".into()),
            ),
            (stop_sidecar, true, Ok(())),
            (container(ContainerOp::Inspect, "deer-flow-netproxy-x"), false, Ok(())),
            (
                container(ContainerOp::Inspect, "other-x"),
                false,
                Err("sockproxy: containers.inspect: other-x is not one of this stack's sandboxes".into()),
            ),
            (container(ContainerOp::Stop, "abc123"), false, Ok(())),
            (
                Endpoint::Denied { op: "system.info".into() },
                true,
                Err("sockproxy: system.info: not allowed for this stack".into()),
            ),
            (Endpoint::Info, false, Ok(())),
            (
                Endpoint::NetworkCreate,
                false,
                Err("sockproxy: networks.create: not allowed for this stack".into()),
            ),
            (Endpoint::NetworkCreate, true, Ok(())),
            (
                Endpoint::Network { op: NetworkOp::Remove, target: ObjRef::parse("bridge").expect("ref") },
                true,
                Err("sockproxy: networks.remove: bridge is not one of this stack's networks".into()),
            ),
            (
                Endpoint::Network { op: NetworkOp::Remove, target: ObjRef::parse("deer-flow-net-1").expect("ref") },
                false,
                Err("sockproxy: networks.remove: not allowed for this stack".into()),
            ),
            (
                Endpoint::Unknown { op: "POST /containers/a/b/stop".into() },
                true,
                Err("sockproxy: POST /containers/a/b/stop: not allowed for this stack".into()),
            ),
        ];
        for (ep, restricted, want) in cases {
            let got = decide(&ep, &q, &scope(restricted), &[])
                .map(|_| ())
                .map_err(|r| r.to_string());
            assert_eq!(got, want, "{ep:?} restricted={restricted}");
        }
    }

    /// Each operation passes the parameters dockerd reads for it (what the docker CLI,
    /// docker-py and bollard send) and nothing else; a refusal names the parameter.
    #[test]
    fn query_parameters_are_an_allowlist_per_operation() {
        use ContainerOp as C;
        let sb = "deer-flow-sandbox-1";
        let exec = |op| Endpoint::Exec {
            op,
            id: "e".repeat(64),
        };
        let network = |op| Endpoint::Network {
            op,
            target: ObjRef::parse("deer-flow-net-1").expect("ref"),
        };
        // Each passes, with the plan of its endpoint.
        let on_sb = |op, access| Route::Container {
            op,
            target: ObjRef::parse(sb).expect("ref"),
            access,
        };
        let (read, change) = (Access::Read, Access::Change);
        let allowed: Vec<(Endpoint, &str, Route)> = vec![
            (Endpoint::ContainerCreate, "name=deer-flow-sandbox-1&platform=linux%2Famd64", Route::CreateContainer),
            (container(C::Start, sb), "", on_sb(C::Start, change)),
            (container(C::Start, sb), "detachKeys=ctrl-p", on_sb(C::Start, change)),
            (container(C::Stop, sb), "t=5&signal=SIGTERM", on_sb(C::Stop, change)),
            (container(C::Restart, sb), "t=1", on_sb(C::Restart, change)),
            (container(C::Kill, sb), "signal=KILL", on_sb(C::Kill, change)),
            (container(C::Wait, sb), "condition=next-exit", on_sb(C::Wait, read)),
            (container(C::Remove, sb), "v=False&link=False&force=False", on_sb(C::Remove, change)),
            (container(C::Remove, sb), "force=1", on_sb(C::Remove, change)),
            (
                container(C::Logs, sb),
                "details=0&follow=1&since=1&stderr=1&stdout=1&tail=all&timestamps=0&until=2&format=json",
                on_sb(C::Logs, read),
            ),
            (
                container(C::Attach, sb),
                "stream=1&stdin=1&stdout=1&stderr=1&logs=0&detachKeys=ctrl-q",
                on_sb(C::Attach, change),
            ),
            (container(C::Resize, sb), "h=40&w=120", on_sb(C::Resize, change)),
            (container(C::Inspect, sb), "size=1", on_sb(C::Inspect, read)),
            (
                container(C::Archive, sb),
                "path=%2Ftmp&noOverwriteDirNonDir=1&copyUIDGID=1",
                on_sb(C::Archive, change),
            ),
            (container(C::Top, sb), "ps_args=aux", on_sb(C::Top, read)),
            (container(C::Rename, sb), "name=deer-flow-sandbox-2", on_sb(C::Rename, change)),
            (
                exec(ExecOp::Resize),
                "h=1&w=2",
                Route::Exec { op: ExecOp::Resize, id: "e".repeat(64), access: change },
            ),
            (
                network(NetworkOp::Inspect),
                "verbose=1&scope=local",
                Route::Network {
                    op: NetworkOp::Inspect,
                    target: ObjRef::parse("deer-flow-net-1").expect("ref"),
                    access: read,
                },
            ),
        ];
        for (ep, raw, plan) in allowed {
            let q = Query::parse(Some(raw)).expect("query");
            let got = decide(&ep, &q, &scope(true), &[]).map_err(|r| r.to_string());
            assert_eq!(got, Ok(plan), "{ep:?} ?{raw}");
        }
        let refused: Vec<(Endpoint, &str, &str)> = vec![
            (
                container(C::Start, sb),
                "checkpoint=..%2F..%2Ftmp%2Fx",
                "containers.start: query parameter checkpoint",
            ),
            (
                container(C::Start, sb),
                "checkpoint-dir=%2Ftmp",
                "containers.start: query parameter checkpoint-dir",
            ),
            (
                container(C::Start, sb),
                "Checkpoint=x",
                "containers.start: query parameter Checkpoint",
            ),
            (
                container(C::Stop, "abc123"),
                "t=1&checkpoint=x",
                "containers.stop: query parameter checkpoint",
            ),
            (
                container(C::Update, sb),
                "x=1",
                "containers.update: query parameter x",
            ),
            (
                container(C::ExecCreate, sb),
                "user=root",
                "containers.exec: query parameter user",
            ),
            (
                container(C::Archive, sb),
                "path=%2F&x=1",
                "containers.archive: query parameter x",
            ),
            (
                Endpoint::ContainerCreate,
                "name=deer-flow-sandbox-1&pull=always",
                "containers.create: query parameter pull",
            ),
            (
                exec(ExecOp::Start),
                "detachKeys=x",
                "exec.start: query parameter detachKeys",
            ),
            (
                exec(ExecOp::Inspect),
                "size=1",
                "exec.inspect: query parameter size",
            ),
            (
                network(NetworkOp::Connect),
                "force=1",
                "networks.connect: query parameter force",
            ),
            (
                network(NetworkOp::Remove),
                "force=1",
                "networks.remove: query parameter force",
            ),
        ];
        for (ep, raw, why) in refused {
            let q = Query::parse(Some(raw)).expect("query");
            let got = decide(&ep, &q, &scope(true), &[]).map_err(|r| r.to_string());
            assert_eq!(
                got,
                Err(format!("sockproxy: {why} is not allowed for this stack")),
                "{ep:?} ?{raw}"
            );
        }
    }

    /// A list that asks for sizes is refused (dockerd would size the host's every container);
    /// `size` false in any of dockerd's spellings passes, as docker-py and bollard send it.
    #[test]
    fn container_lists_may_not_ask_for_sizes() {
        let list = |raw: &str| {
            let q = Query::parse(Some(raw)).expect("query");
            decide(&Endpoint::ContainerList, &q, &scope(false), &[]).map_err(|r| r.to_string())
        };
        for raw in [
            "all=1",
            "size=0",
            "size=False",
            "size=",
            "size=no",
            "size=NONE",
            "size=%20false%20",
        ] {
            assert_eq!(list(raw), Ok(Route::List(Kind::Container)), "{raw}");
        }
        for (raw, v) in [
            ("size=1", "1"),
            ("all=1&size=true", "true"),
            ("size=yes", "yes"),
            ("size=2", "2"),
        ] {
            assert_eq!(
                list(raw),
                Err(format!("sockproxy: containers.list: query parameter size={v} is not allowed for this stack (the engine would size every container on the host)")),
                "{raw}"
            );
        }
    }

    /// A stack's named volumes (its prefix) may be listed, inspected and removed; another
    /// stack's answer as missing ones do, and under --require-stack-label the stack has none.
    #[test]
    fn volumes_are_decided_by_name() {
        use crate::api::VolumeOp;
        let vol = |op, name: &str| Endpoint::Volume {
            op,
            name: name.into(),
        };
        let run = |ep: &Endpoint, raw: &str, s: &Scope| {
            let q = Query::parse(Some(raw)).expect("query");
            decide(ep, &q, s, &[]).map_err(|r| r.to_string())
        };
        let open = scope(false);
        let labelled = scope(false).with_required_label(Some("atlas"));
        let missing = |n: &str| Err(format!("get {n}: no such volume"));
        let cases = [
            (Endpoint::VolumeList, "", &open, Ok(Route::VolumeList)),
            (Endpoint::VolumeList, "filters=%7B%7D", &labelled, Ok(Route::VolumeList)),
            (vol(VolumeOp::Inspect, "deer-flow-data"), "", &open, Ok(Route::Volume)),
            (vol(VolumeOp::Remove, "deer-flow-data"), "force=1", &open, Ok(Route::Volume)),
            (vol(VolumeOp::Inspect, "other-data"), "", &open, missing("other-data")),
            (vol(VolumeOp::Remove, "other-data"), "", &open, missing("other-data")),
            (vol(VolumeOp::Remove, "Deer-flow-data"), "", &open, missing("Deer-flow-data")),
            (vol(VolumeOp::Inspect, "deer-flow-data"), "", &labelled, missing("deer-flow-data")),
            (vol(VolumeOp::Remove, "deer-flow-data"), "", &labelled, missing("deer-flow-data")),
            (
                vol(VolumeOp::Inspect, "deer-flow-data"),
                "force=1",
                &open,
                Err("sockproxy: volumes.inspect: query parameter force is not allowed for this stack".into()),
            ),
            (
                Endpoint::VolumeList,
                "dangling=1",
                &open,
                Err("sockproxy: volumes.list: query parameter dangling is not allowed for this stack".into()),
            ),
        ];
        for (ep, raw, s, want) in cases {
            assert_eq!(run(&ep, raw, s), want, "{ep:?} ?{raw}");
        }
    }

    /// An exec's inspect only reads; its start and resize change (the container must be one
    /// the stack may change, not only see).
    #[test]
    fn exec_access_follows_the_operation() {
        let id = "e".repeat(64);
        for (op, access) in [
            (ExecOp::Inspect, Access::Read),
            (ExecOp::Start, Access::Change),
            (ExecOp::Resize, Access::Change),
        ] {
            let ep = Endpoint::Exec { op, id: id.clone() };
            assert_eq!(
                decide(&ep, &Query::default(), &scope(false), &[]),
                Ok(Route::Exec {
                    op,
                    id: id.clone(),
                    access
                }),
                "{op:?}"
            );
        }
    }

    #[test]
    fn names_are_at_most_max_name_bytes() {
        let at = |n: usize| format!("deer-flow-sandbox-{}", "a".repeat(n - 18));
        let create = |name: &str| {
            let q = Query::parse(Some(&format!("name={name}"))).expect("query");
            decide(&Endpoint::ContainerCreate, &q, &scope(false), &[]).map_err(|r| r.to_string())
        };
        let rename = |name: &str| {
            let q = Query::parse(Some(&format!("name={name}"))).expect("query");
            let ep = container(ContainerOp::Rename, "deer-flow-sandbox-a");
            decide(&ep, &q, &scope(false), &[]).map_err(|r| r.to_string())
        };
        assert!(create(&at(MAX_NAME_BYTES)).is_ok());
        assert!(create(&format!("/{}", at(MAX_NAME_BYTES))).is_ok());
        assert!(rename(&at(MAX_NAME_BYTES)).is_ok());
        assert_eq!(
            create(&at(MAX_NAME_BYTES + 1)),
            Err("sockproxy: containers.create: a name of 129 bytes is not allowed for this stack (at most 128)".into())
        );
        assert_eq!(
            rename(&at(MAX_NAME_BYTES + 1)),
            Err("sockproxy: containers.rename: a name of 129 bytes is not allowed for this stack (at most 128)".into())
        );
        // Out of scope is said first, whatever the length.
        assert!(create(&"x".repeat(300))
            .is_err_and(|e| e.contains("is not one of this stack's sandboxes")));
    }

    #[test]
    fn info_deny_refuses_info() {
        let s = scope(false).with_info(false);
        assert_eq!(
            decide(&Endpoint::Info, &Query::default(), &s, &[]).map_err(|r| r.to_string()),
            Err("sockproxy: system.info: not allowed for this stack".into())
        );
    }
}

mod properties {
    use crate::api;
    use crate::canon;
    use crate::policy::*;
    use crate::scope::Prefix;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Any target: the pure pipeline answers without panicking.
        #[test]
        fn pipeline_never_panics(method in "(GET|POST|DELETE|PUT|HEAD|PATCH|X)", path in "[ -~]{0,60}") {
            let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
            if let Ok(uri) = path.parse::<http::Uri>() {
                if let Ok(t) = canon::canonicalize(&uri, &http::HeaderMap::new()) {
                    let m = http::Method::from_bytes(method.as_bytes()).expect("method");
                    let ep = api::parse(&m, &t);
                    let _ = decide(&ep, &t.query, &scope, &[]);
                }
            }
        }

        /// A container named outside the stack's sandbox scope is never allowed to be changed,
        /// whatever the action and version segment.
        #[test]
        fn foreign_names_are_never_changeable(
            name in "[a-zA-Z0-9_.-]{1,24}",
            action in "(start|stop|kill|restart|attach|resize|exec|archive)",
            version in "(|/v1.41|/v1.44)",
        ) {
            prop_assume!(!name.starts_with("deer-flow-sandbox-"));
            prop_assume!(!name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
            let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
            let method = if action == "archive" { "PUT" } else { "POST" };
            let target = format!("{version}/containers/{name}/{action}");
            if let Ok(uri) = target.parse::<http::Uri>() {
                if let Ok(t) = canon::canonicalize(&uri, &http::HeaderMap::new()) {
                    let m = http::Method::from_bytes(method.as_bytes()).expect("method");
                    let ep = api::parse(&m, &t);
                    prop_assert!(decide(&ep, &t.query, &scope, &[]).is_err(), "{target} was allowed");
                }
            }
        }
    }
}
