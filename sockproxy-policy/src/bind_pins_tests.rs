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

fn staged(sources: &[Source]) -> Vec<Pinned> {
    sources
        .iter()
        .enumerate()
        .map(|(i, s)| Pinned {
            source: s.clone(),
            staging: PathBuf::from(format!("/run/pins/p/{i}")),
        })
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
    let pins = staged(&sources(&body, &rules()).expect("allowed"));
    let out = rewrite(body, &pins).expect("rewritten");
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
    let pins = staged(&sources(&body, &rules()).expect("allowed"));
    let out = rewrite(body, &pins).expect("rewritten");
    assert_eq!(out["HostConfig"].get("Binds"), None, "{out}");
    assert_eq!(bind_sources(&out), ["/run/pins/p/0"]);
}

#[test]
fn a_body_without_binds_is_forwarded_as_it_is() {
    let body = json!({ "Labels": { "sockproxy.stack": "s" },
                       "HostConfig": { "Binds": ["df-vol:/v"], "CgroupnsMode": "private" } });
    assert_eq!(sources(&body, &rules()), Ok(vec![]));
    assert_eq!(rewrite(body.clone(), &[]), Ok(body));
}

#[test]
fn pins_that_are_not_the_bodys_sources_forward_nothing() {
    let body = json!({ "Labels": {}, "HostConfig": { "Binds": ["/data/x:/x", "/data/y:/y"] } });
    let srcs = sources(&body, &rules()).expect("allowed");
    let mut swapped = staged(&srcs);
    swapped.swap(0, 1);
    let too_few = &staged(&srcs)[..1];
    for pins in [&swapped[..], too_few, &[]] {
        let err = rewrite(body.clone(), pins).expect_err("refused");
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
        let out = rewrite(body, &staged(&srcs)).expect("rewritten");
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
