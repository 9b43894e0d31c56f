//! `bind_pins` as tables: which sources a checked body binds, and the body forwarded with their
//! staging paths (no client path left in a bind, modes kept, labels set).

use serde_json::json;

use super::*;

fn rules() -> CreateRules {
    CreateRules {
        bind_roots: vec!["/srv/df".into(), "/srv/df/users".into(), "/data".into()],
        ..CreateRules::default()
    }
}

/// A staging path for each source, as the transport would give them.
fn staged(sources: &[BindSource]) -> Vec<PathBuf> {
    (0..sources.len())
        .map(|i| PathBuf::from(format!("/run/pins/p/{i}")))
        .collect()
}

/// Every `Source` of a bind in a forwarded body, from `Binds` and `Mounts`.
fn bind_sources(body: &Value) -> Vec<String> {
    let host = &body["HostConfig"];
    let binds = host["Binds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|b| b.starts_with('/'))
        .map(|b| b.split(':').next().unwrap_or("").to_owned());
    let mounts = host["Mounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["Type"] == "bind")
        .map(|m| m["Source"].as_str().unwrap_or("").to_owned());
    binds.chain(mounts).collect()
}

#[test]
fn sources_are_the_host_paths_in_order_each_from_its_deepest_root() {
    let body = json!({ "HostConfig": {
        "Binds": ["/srv/df/users/u1/ws:/w/", "df-vol:/v", "/data:/d:ro"],
        "Mounts": [
            { "Type": "tmpfs", "Target": "/t" },
            { "Type": "bind", "Source": "/srv/df/skills", "Target": "/s", "ReadOnly": true },
            { "Type": "volume", "Source": "df-v2", "Target": "/v2" },
        ],
    }});
    let got = sources(&body, &rules()).expect("allowed");
    let want = [
        ("/srv/df/users/u1/ws", "/srv/df/users", "u1/ws", "/w"),
        ("/data", "/data", "", "/d"),
        ("/srv/df/skills", "/srv/df", "skills", "/s"),
    ];
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (g, (path, root, beneath, target)) in got.iter().zip(want) {
        assert_eq!(g.path, Path::new(path));
        assert_eq!(g.root, Path::new(root));
        assert_eq!(g.beneath, Path::new(beneath));
        assert_eq!(g.target, target);
    }
}

#[test]
fn what_a_pinned_bind_cannot_keep_is_refused_by_name() {
    for (bind, why) in [
        (
            "/data/a:/a:z",
            "SELinux relabelling is not kept for a pinned bind source",
        ),
        (
            "/data/a:/a:ro,Z",
            "SELinux relabelling is not kept for a pinned bind source",
        ),
        (
            "/data/a:/a:nocopy",
            "nocopy is a volume option, not a bind's",
        ),
    ] {
        let body = json!({ "HostConfig": { "Binds": [bind] } });
        let err = sources(&body, &rules()).expect_err("refused");
        assert_eq!(
            err.to_string(),
            format!("sockproxy: containers.create: HostConfig.Binds {bind} is not allowed for this stack ({why})"),
        );
    }
    // A named volume keeps `nocopy`: nothing of it is pinned.
    let body = json!({ "HostConfig": { "Binds": ["df-vol:/v:nocopy"] } });
    assert_eq!(sources(&body, &rules()), Ok(vec![]));
}

#[test]
fn the_forwarded_body_binds_only_staging_paths_and_keeps_each_mode() {
    let body = json!({
        "Image": "img",
        "Labels": { "sockproxy.stack": "s", "k": "v" },
        "HostConfig": {
            "Binds": [
                "/srv/df/ws:/w",
                "df-vol:/v:ro",
                "/data/a:/a:ro,rslave",
                "/data/b:/b/:rw,cached",
            ],
            "Mounts": [
                { "Type": "bind", "Source": "/srv/df/skills", "Target": "/s", "ReadOnly": true,
                  "BindOptions": { "Propagation": "rprivate" } },
                { "Type": "tmpfs", "Target": "/t" },
            ],
            "CgroupnsMode": "private",
        },
    });
    let srcs = sources(&body, &rules()).expect("allowed");
    let out = rewrite(body, &srcs, &staged(&srcs)).expect("rewritten");
    assert_eq!(
        out,
        json!({
            "Image": "img",
            "Labels": {
                "sockproxy.stack": "s", "k": "v",
                "sockproxy.bind./w": "/srv/df/ws",
                "sockproxy.bind./a": "/data/a",
                "sockproxy.bind./b": "/data/b",
                "sockproxy.bind./s": "/srv/df/skills",
            },
            "HostConfig": {
                "Binds": ["df-vol:/v:ro"],
                "Mounts": [
                    { "Type": "bind", "Source": "/run/pins/p/3", "Target": "/s", "ReadOnly": true,
                      "BindOptions": { "Propagation": "rprivate" } },
                    { "Type": "tmpfs", "Target": "/t" },
                    { "Type": "bind", "Source": "/run/pins/p/0", "Target": "/w" },
                    { "Type": "bind", "Source": "/run/pins/p/1", "Target": "/a", "ReadOnly": true,
                      "BindOptions": { "Propagation": "rslave" } },
                    { "Type": "bind", "Source": "/run/pins/p/2", "Target": "/b/",
                      "Consistency": "cached" },
                ],
                "CgroupnsMode": "private",
            },
        })
    );
}

#[test]
fn a_body_with_only_host_binds_forwards_no_binds_key() {
    let body = json!({ "Labels": {}, "HostConfig": { "Binds": ["/data/x:/x"] } });
    let srcs = sources(&body, &rules()).expect("allowed");
    let out = rewrite(body, &srcs, &staged(&srcs)).expect("rewritten");
    assert_eq!(out["HostConfig"].get("Binds"), None, "{out}");
    assert_eq!(bind_sources(&out), ["/run/pins/p/0"]);
}

#[test]
fn a_body_without_binds_is_forwarded_as_it_is() {
    let body = json!({ "Labels": { "sockproxy.stack": "s" },
                       "HostConfig": { "Binds": ["df-vol:/v"], "CgroupnsMode": "private" } });
    assert_eq!(sources(&body, &rules()), Ok(vec![]));
    assert_eq!(rewrite(body.clone(), &[], &[]), Ok(body));
}

#[test]
fn staging_paths_that_are_not_the_bodys_sources_forward_nothing() {
    let body = json!({ "Labels": {}, "HostConfig": { "Binds": ["/data/x:/x", "/data/y:/y"] } });
    let srcs = sources(&body, &rules()).expect("allowed");
    let staging = staged(&srcs);
    let mut swapped = srcs.clone();
    swapped.swap(0, 1);
    for (srcs, staging) in [
        (&swapped[..], &staging[..]),
        (&srcs[..1], &staging[..1]),
        (&srcs[..], &staging[..1]),
        (&[], &[]),
    ] {
        let err = rewrite(body.clone(), srcs, staging).expect_err("refused");
        assert_eq!(err.status(), http::StatusCode::BAD_GATEWAY, "{err}");
    }
}

/// Whatever mix of binds a body has, the forwarded one binds no path the client named.
#[test]
fn no_client_path_is_left_in_any_bind() {
    let binds = [
        "/srv/df/a:/a",
        "/data:/d:ro",
        "df-vol:/v",
        "/srv/df/users/b:/b:rslave",
    ];
    let mounts = [
        json!({ "Type": "bind", "Source": "/data/m", "Target": "/m" }),
        json!({ "Type": "volume", "Source": "df-v", "Target": "/mv" }),
        json!({ "Type": "bind", "Source": "/srv/df", "Target": "/r", "ReadOnly": true }),
    ];
    for mask in 0u32..(1 << (binds.len() + mounts.len())) {
        let pick = |i: usize| mask & (1 << i) != 0;
        let b: Vec<&str> = binds
            .iter()
            .enumerate()
            .filter(|(i, _)| pick(*i))
            .map(|(_, b)| *b)
            .collect();
        let m: Vec<Value> = mounts
            .iter()
            .enumerate()
            .filter(|(i, _)| pick(binds.len() + i))
            .map(|(_, m)| m.clone())
            .collect();
        let body = json!({ "Labels": {}, "HostConfig": { "Binds": b, "Mounts": m } });
        let srcs = sources(&body, &rules()).expect("allowed");
        let out = rewrite(body, &srcs, &staged(&srcs)).expect("rewritten");
        let left = bind_sources(&out);
        assert_eq!(left.len(), srcs.len(), "{out}");
        assert!(left.iter().all(|s| s.starts_with("/run/pins/p/")), "{out}");
        for s in &srcs {
            assert_eq!(
                out["Labels"][format!("sockproxy.bind.{}", s.target)],
                json!(s.path.display().to_string())
            );
        }
    }
}

/// What the check refuses for pinning's sake: `VolumesFrom` once bind roots are allowed (the
/// inherited copy of a pin would be recreated empty after a reboot), and a client's own
/// `sockproxy.bind.*` label (it would point the operator at a path that was not bound).
#[test]
fn the_check_refuses_volumes_from_with_bind_roots_and_the_proxys_own_labels() {
    use crate::create_rules::NoPaths;
    use crate::scope::{Prefix, Scope};
    let scope = Scope::new(Prefix::parse("df-").expect("valid"), false);
    let check = |body: Value, rules: &CreateRules| {
        crate::create_body::check(body, &scope, rules, Path::new("/x.sock"), &NoPaths, "s")
    };
    let from = json!({ "HostConfig": { "VolumesFrom": ["df-sandbox-a:ro"] } });
    assert!(check(from.clone(), &CreateRules::default()).is_ok());
    assert_eq!(
        check(from, &rules()).map_err(|r| r.to_string()),
        Err("sockproxy: containers.create: HostConfig.VolumesFrom is not allowed with --allow-bind-root (an inherited bind would lose its pin); name the volumes or binds in this container".into())
    );
    // Another stack's name is still refused as such first.
    let foreign = json!({ "HostConfig": { "VolumesFrom": ["other"] } });
    assert_eq!(
        check(foreign, &rules()).map_err(|r| r.to_string()),
        Err("sockproxy: containers.create: HostConfig.VolumesFrom other is not one of this stack's sandboxes".into())
    );
    let none = json!({ "HostConfig": { "VolumesFrom": [] } });
    assert!(check(none, &rules()).is_ok());
    let label = json!({ "Labels": { "sockproxy.bind./w": "/" } });
    assert_eq!(
        check(label, &CreateRules::default()).map_err(|r| r.to_string()),
        Err("sockproxy: containers.create: Labels sockproxy.bind./w is not allowed for this stack (the proxy sets sockproxy.bind.* labels on pinned binds)".into())
    );
}

/// A host where every path exists and none is a link.
#[derive(Debug)]
struct NoLinks;

impl crate::create_rules::HostPaths for NoLinks {
    fn is_symlink(&self, _: &Path) -> std::io::Result<bool> {
        Ok(false)
    }
}

/// Through `evaluate`: a create that binds a host path asks for its pins last (after the body
/// and, under `--require-stack-label`, the networks it joins), and its final plan forwards the
/// body written on the staging paths given; one that binds none, or is refused, asks for none.
#[test]
fn a_create_asks_for_its_bind_pins_last_and_forwards_the_staging_paths() {
    use crate::evaluate::{evaluate, Fact, Facts, Found, Host, Need, Policy, Request, Sent};
    use crate::reference::ObjRef;
    use crate::scope::{Kind, Prefix, Scope};
    use http::{HeaderMap, Method, Uri};
    use std::sync::Arc;
    let policy = |label: bool| Policy {
        // Restricted: the stack's own networks are made by its provisioner.
        scope: Scope::new(Prefix::parse("df-").expect("valid"), true)
            .with_required_label(label.then_some("s")),
        stack: "s".into(),
        create_rules: CreateRules {
            require_stack_label: label,
            ..rules()
        },
        allow_images: vec![],
        min_api_version: (1, 24),
        host: Host {
            engine_socket: PathBuf::from("/run/docker.sock"),
            paths: Arc::new(NoLinks),
        },
    };
    let (method, uri, headers) = (
        Method::POST,
        "/v1.41/containers/create?name=df-sandbox-a"
            .parse::<Uri>()
            .expect("a URI"),
        HeaderMap::new(),
    );
    let request = Request {
        method: &method,
        uri: &uri,
        headers: &headers,
    };
    let bound = json!({ "Image": "i", "HostConfig": {
        "Binds": ["/data/x:/x:ro"], "NetworkMode": "df-sandbox-net-a" } });
    let net = Need::Object(Kind::Network, ObjRef::Name("df-sandbox-net-a".into()));
    let labelled = Fact::Object {
        found: Found {
            id: "1".repeat(64),
            name: "df-sandbox-net-a".into(),
            stack_label: Some("s".into()),
        },
        engine_api: None,
    };
    let mut facts = Facts::default();
    let mut asked = vec![];
    let plan = loop {
        let plan = evaluate(&request, &facts, &policy(true))
            .outcome
            .expect("allowed");
        let fact = match &plan.need {
            Need::Nothing => break plan,
            Need::Body => Fact::Body(bound.clone()),
            n if *n == net => labelled.clone(),
            Need::Usage => Fact::Usage(vec![]),
            Need::BindPins(srcs) => Fact::BindPins(staged(srcs)),
            n => panic!("asked for {n:?}"),
        };
        asked.push(plan.need.clone());
        facts.give(plan.need, fact);
    };
    let pins = Need::BindPins(sources(&bound, &rules()).expect("allowed"));
    // Pinned last, after the stack's totals: nothing can refuse the create once it is pinned.
    assert_eq!(asked, [Need::Body, net, Need::Usage, pins]);
    let Sent::Checked(out) = plan.body else {
        panic!("{:?}", plan.body)
    };
    assert_eq!(bind_sources(&out), ["/run/pins/p/0"]);
    assert_eq!(out["HostConfig"]["Mounts"][0]["ReadOnly"], json!(true));
    assert_eq!(out["Labels"]["sockproxy.bind./x"], json!("/data/x"));

    // No host path: final once the body is read. Refused: no pin is asked for.
    for (body, final_plan) in [
        (
            json!({ "Image": "i", "HostConfig": { "Binds": ["df-v:/v"] } }),
            true,
        ),
        (
            json!({ "Image": "i", "HostConfig": {
            "Binds": ["/data/x:/x"], "Privileged": true } }),
            false,
        ),
        (
            json!({ "Image": "i", "HostConfig": { "Binds": ["/etc:/x"] } }),
            false,
        ),
    ] {
        let mut facts = Facts::default();
        facts.give(Need::Body, Fact::Body(body.clone()));
        stack_facts(&mut facts, &policy(false));
        let d = evaluate(&request, &facts, &policy(false));
        match d.outcome {
            Ok(plan) => {
                assert!(final_plan, "{body}: {plan:?}");
                assert_eq!(plan.need, Need::Nothing);
            }
            Err(r) => assert!(!final_plan, "{body}: {r}"),
        }
    }
    // Staging paths that do not answer the sources are refused, not forwarded.
    let mut facts = Facts::default();
    facts.give(Need::Body, Fact::Body(bound.clone()));
    stack_facts(&mut facts, &policy(false));
    let d = evaluate(&request, &facts, &policy(false));
    let need = d.outcome.expect("allowed").need;
    assert!(matches!(need, Need::BindPins(_)), "{need:?}");
    facts.give(need, Fact::BindPins(vec![]));
    let refused = evaluate(&request, &facts, &policy(false)).outcome;
    assert!(refused.is_err(), "{refused:?}");
}

/// The stack's network as the proxy made it, and a stack with no containers yet: what a create
/// asks for before its pins.
fn stack_facts(facts: &mut crate::Facts, policy: &crate::Policy) {
    use crate::{Fact, Need};
    let mut made = crate::stack_net::create_body(policy);
    made["Id"] = json!("2".repeat(64));
    let held = crate::stack_net::Held::read(made.to_string().as_bytes()).expect("a network");
    facts.give(Need::StackNetwork, Fact::StackNetwork(held));
    facts.give(Need::Usage, Fact::Usage(vec![]));
}
