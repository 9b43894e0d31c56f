//! Under `--require-stack-label` a name with the stack's prefix does not make a container,
//! network or volume the stack's: two stacks given one prefix (or a network made on the engine
//! under it) cannot list, inspect or read the logs of each other's sandboxes, put a sandbox on
//! each other's networks, connect to or remove them, or share a named volume. A review reached another stack's network and volume this way; each refusal here is
//! checked on what the engine holds afterwards, on the fake and the real engine.

use serde_json::json;
use sockproxy_tests::engine::{each_engine, Cleanup, Engine, Fakes};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::bypasses::{inspect, refused, send};

fn strict(e: &Engine, prefix: &str, stack: &str) -> StackProxy {
    StackProxy::start_with(&e.socket, prefix, true, |c| {
        c.create_rules.require_stack_label = true;
        c.stack = stack.to_owned();
    })
}

#[test]
fn one_prefix_two_stacks_share_no_network_and_no_volume() {
    let test = "one_prefix_two_stacks_share_no_network_and_no_volume";
    each_engine(test, Fakes::Debian, |e| {
        let prefix = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let a = strict(&e, &prefix, "stack-a");
        let b = strict(&e, &prefix, "stack-b");
        let net = clean.network(&format!("{prefix}sandbox-net-aaaa"));
        let create = |p: &StackProxy, name: &str, extra: serde_json::Value| {
            let mut body = json!({ "Image": e.image, "Cmd": ["sleep", "600"] });
            if let (Some(b), Some(x)) = (body.as_object_mut(), extra.as_object()) {
                b.extend(x.clone());
            }
            send(
                p.socket(),
                "POST",
                &format!("/containers/create?name={name}"),
                &body,
            )
        };
        let container = |name: &str| inspect(&e, "containers", &format!("{name}/json"));

        step(
            "stack A makes its network, stamped with its label, and uses it",
            || {
                let r = send(
                    a.socket(),
                    "POST",
                    "/networks/create",
                    &json!({ "Name": net, "Internal": true }),
                );
                assert_eq!(r.status, 201, "{}", r.text());
                let held = inspect(&e, "networks", &net);
                assert_eq!(held.json()["Labels"]["sockproxy.stack"], json!("stack-a"));
                let mine = clean.container(&format!("{prefix}sandbox-a"));
                let r = create(&a, &mine, json!({ "HostConfig": { "NetworkMode": net } }));
                assert_eq!(r.status, 201, "{}", r.text());
            },
        );

        step(
            "stack B's create of A's network name makes no second one and names no ID",
            || {
                // dockerd 20.10 makes a duplicate unless asked to check, and its answer then
                // carries the existing network's ID: the proxy always asks it to check.
                for check in [json!(false), json!(null)] {
                    let body = json!({ "Name": net, "Internal": true, "CheckDuplicate": check });
                    let r = send(b.socket(), "POST", "/networks/create", &body);
                    refused(&r, 409, &format!("network with name {net} already exists"));
                    let held = inspect(&e, "networks", &net);
                    assert!(!r.text().contains(held.json()["Id"].as_str().unwrap_or("-")));
                }
                let same = raw::get(&e.socket, "/networks").expect("answer").json();
                let named = same
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|n| n["Name"] == json!(net))
                    .count();
                assert_eq!(named, 1, "one network of that name on the engine");
            },
        );

        step(
            "stack B cannot read A's sandbox or network: not listed, inspected or logged",
            || {
                let mine = format!("{prefix}sandbox-a");
                let id = container(&mine).json()["Id"]
                    .as_str()
                    .expect("an ID")
                    .to_owned();
                let get = |p: &StackProxy, target: &str| {
                    raw::request(p.socket(), "GET", target, None).expect("answer")
                };
                // The engine's not-found, as for a name nobody has: a 403 would tell B
                // that A holds that sandbox name.
                let named = format!("No such container: {mine}");
                for target in [
                    format!("/containers/{mine}/json"),
                    format!("/containers/{mine}/logs?stdout=1"),
                    format!("/containers/{mine}/top"),
                ] {
                    refused(&get(&b, &target), 404, &named);
                    // A reads its own (a `top` of a created sandbox is dockerd's 409).
                    let own = get(&a, &target);
                    assert!([200, 409].contains(&own.status), "{target}: {}", own.text());
                }
                refused(
                    &get(&b, &format!("/containers/{id}/json")),
                    404,
                    &format!("No such container: {id}"),
                );
                refused(
                    &get(&b, &format!("/networks/{net}")),
                    404,
                    &format!("network {net} not found"),
                );
                let listed = |p: &StackProxy, target: &str| -> Vec<String> {
                    let r = get(p, target);
                    assert_eq!(r.status, 200, "{}", r.text());
                    r.json()
                        .as_array()
                        .expect("a list")
                        .iter()
                        .map(|x| {
                            x["Names"][0]
                                .as_str()
                                .or(x["Name"].as_str())
                                .unwrap_or_default()
                                .trim_start_matches('/')
                                .to_owned()
                        })
                        .collect()
                };
                let all = "/containers/json?all=1";
                assert!(!listed(&b, all).contains(&mine), "B lists A's sandbox");
                assert!(listed(&a, all).contains(&mine), "A lists its own");
                assert!(
                    !listed(&b, "/networks").contains(&net),
                    "B lists A's network"
                );
                assert!(listed(&a, "/networks").contains(&net), "A lists its own");
                // An ID prefix resolves among the stack's own only.
                refused(
                    &get(&b, &format!("/containers/{}/json", &id[..12])),
                    404,
                    "No such container",
                );
            },
        );

        step(
            "stack B does not see A's running sandbox among bridge's endpoints",
            || {
                // Both let on the default bridge by the operator (`--allow-default-bridge`).
                let a = StackProxy::start_with(&e.socket, &prefix, true, |c| {
                    c.create_rules.require_stack_label = true;
                    c.create_rules.allow_default_bridge = true;
                    c.stack = "stack-a".into();
                });
                let on_bridge = clean.container(&format!("{prefix}sandbox-abr"));
                let r = create(
                    &a,
                    &on_bridge,
                    json!({ "HostConfig": { "NetworkMode": "bridge" } }),
                );
                assert_eq!(r.status, 201, "{}", r.text());
                let id = r.json()["Id"].as_str().expect("an ID").to_owned();
                let r = raw::request(
                    a.socket(),
                    "POST",
                    &format!("/containers/{on_bridge}/start"),
                    None,
                )
                .expect("answer");
                assert_eq!(r.status, 204, "{}", r.text());
                let seen = |p: &std::path::Path, target: &str| {
                    let r = raw::request(p, "GET", target, None).expect("answer");
                    assert_eq!(r.status, 200, "{target}: {}", r.text());
                    r.text().contains(&id)
                };
                // The network inspect, at the current API and at 1.27.
                for target in ["/networks/bridge", "/v1.27/networks/bridge"] {
                    assert!(seen(&e.socket, target), "the engine: {target}");
                    assert!(seen(a.socket(), target), "A sees its own: {target}");
                    assert!(!seen(b.socket(), target), "B sees A's: {target}");
                }
            },
        );

        step("stack B cannot put a sandbox on it", || {
            let rows = [
                json!({ "HostConfig": { "NetworkMode": net } }),
                json!({ "NetworkingConfig": { "EndpointsConfig": { net.clone(): {} } } }),
            ];
            for (i, extra) in rows.into_iter().enumerate() {
                let name = clean.container(&format!("{prefix}sandbox-b{i}"));
                let r = create(&b, &name, extra);
                // What a network nobody has gets (issue 37: a 403 told B that A holds it).
                refused(&r, 404, &format!("network {net} not found"));
                assert_eq!(container(&name).status, 404, "{name}");
            }
        });

        step(
            "stack B cannot connect its own sandbox to it, nor remove it",
            || {
                let own = clean.container(&format!("{prefix}sandbox-bown"));
                let r = create(&b, &own, json!({}));
                assert_eq!(r.status, 201, "{}", r.text());
                let r = send(
                    b.socket(),
                    "POST",
                    &format!("/networks/{net}/connect"),
                    &json!({ "Container": own }),
                );
                // What a network nobody has gets (issue 37: a 403 told B that A holds it).
                refused(&r, 404, &format!("network {net} not found"));
                let held = container(&own).json();
                assert!(
                    held["NetworkSettings"]["Networks"].get(&net).is_none(),
                    "{held}"
                );
                let r = raw::request(b.socket(), "DELETE", &format!("/networks/{net}"), None)
                    .expect("answer");
                // What a network nobody has gets (issue 37: a 403 told B that A holds it).
                refused(&r, 404, &format!("network {net} not found"));
                assert_eq!(inspect(&e, "networks", &net).status, 200, "still there");
            },
        );

        step(
            "a named volume is refused, so none is made to share",
            || {
                let vol = format!("{prefix}vol-a");
                let name = clean.container(&format!("{prefix}sandbox-vol"));
                let binds = json!({ "HostConfig": { "Binds": [format!("{vol}:/data")] } });
                let r = create(&b, &name, binds);
                refused(&r, 403, "--require-stack-label does not allow");
                assert_eq!(container(&name).status, 404);
                assert_eq!(inspect(&e, "volumes", &vol).status, 404, "no volume made");
            },
        );

        step(
            "a network made on the engine under the prefix is no stack's",
            || {
                let raw_net = clean.network(&format!("{prefix}sandbox-net-raw"));
                let body = json!({ "Name": raw_net, "Internal": true }).to_string();
                let r = raw::request(&e.socket, "POST", "/networks/create", Some(body.as_bytes()))
                    .expect("answer");
                assert_eq!(r.status, 201, "{}", r.text());
                let name = clean.container(&format!("{prefix}sandbox-raw"));
                let r = create(
                    &a,
                    &name,
                    json!({ "HostConfig": { "NetworkMode": raw_net } }),
                );
                refused(&r, 404, &format!("network {raw_net} not found"));
                assert_eq!(container(&name).status, 404);
                let r = raw::request(a.socket(), "DELETE", &format!("/networks/{raw_net}"), None)
                    .expect("answer");
                refused(&r, 404, &format!("network {raw_net} not found"));
                assert_eq!(inspect(&e, "networks", &raw_net).status, 200);
            },
        );
    });
}

/// An answer with what may differ between two identical answers (`Date`) left out: status,
/// every other header (name and value, in order) and the body's bytes.
fn answer_bytes(r: &raw::RawResponse) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let headers = r
        .headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("date"))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    (r.status, headers, r.body.clone())
}

/// Issue 37, finding 6: under `--require-stack-label` a change to another stack's container or
/// network answers exactly what the same request answers once nobody has that name, and a name
/// conflict on create or rename does not name the holder's ID.
#[test]
fn another_stacks_objects_answer_as_missing_ones_byte_for_byte() {
    let test = "another_stacks_objects_answer_as_missing_ones_byte_for_byte";
    each_engine(test, Fakes::Debian, |e| {
        let prefix = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let a = strict(&e, &prefix, "stack-a");
        let b = strict(&e, &prefix, "stack-b");
        let theirs = clean.container(&format!("{prefix}sandbox-theirs"));
        let net = clean.network(&format!("{prefix}sandbox-net-theirs"));
        let mine = clean.container(&format!("{prefix}sandbox-mine"));
        let create = |p: &StackProxy, name: &str| {
            let b = json!({ "Image": e.image, "Cmd": ["sleep", "600"] });
            send(
                p.socket(),
                "POST",
                &format!("/containers/create?name={name}"),
                &b,
            )
        };
        let r = create(&a, &theirs);
        assert_eq!(r.status, 201, "{}", r.text());
        let their_id = r.json()["Id"].as_str().expect("an ID").to_owned();
        let r = raw::request(
            a.socket(),
            "POST",
            &format!("/containers/{theirs}/start"),
            None,
        )
        .expect("answer");
        assert_eq!(r.status, 204, "{}", r.text());
        let r = send(
            a.socket(),
            "POST",
            "/networks/create",
            &json!({ "Name": net, "Internal": true }),
        );
        assert_eq!(r.status, 201, "{}", r.text());
        let r = create(&b, &mine);
        assert_eq!(r.status, 201, "{}", r.text());

        let changes: Vec<(&str, String, Option<serde_json::Value>)> = vec![
            ("POST", format!("/containers/{theirs}/stop?t=1"), None),
            ("POST", format!("/containers/{theirs}/kill"), None),
            ("POST", format!("/containers/{theirs}/restart"), None),
            ("DELETE", format!("/containers/{theirs}?force=1"), None),
            (
                "POST",
                format!("/containers/{theirs}/rename?name={prefix}sandbox-stolen"),
                None,
            ),
            (
                "POST",
                format!("/v1.41/containers/{theirs}/update"),
                Some(json!({ "CpuShares": 512 })),
            ),
            ("DELETE", format!("/networks/{net}"), None),
            (
                "POST",
                format!("/networks/{net}/connect"),
                Some(json!({ "Container": mine })),
            ),
        ];
        let ask = |p: &StackProxy| -> Vec<_> {
            changes
                .iter()
                .map(|(method, target, body)| {
                    let r = match body {
                        Some(v) => send(p.socket(), method, target, v),
                        None => raw::request(p.socket(), method, target, None).expect("answer"),
                    };
                    assert_eq!(r.status, 404, "{method} {target}: {}", r.text());
                    answer_bytes(&r)
                })
                .collect()
        };
        let held = step(
            "B's changes to A's objects answer 404 and change nothing",
            || {
                let answers = ask(&b);
                let c = inspect(&e, "containers", &format!("{theirs}/json")).json();
                assert_eq!(c["State"]["Running"], true, "{}", c["State"]);
                assert_eq!(c["Name"], format!("/{theirs}"));
                assert_eq!(inspect(&e, "networks", &net).status, 200);
                answers
            },
        );
        step(
            "B's conflicts on A's name do not name A's container",
            || {
                let r = create(&b, &theirs);
                assert_eq!(r.status, 409, "{}", r.text());
                assert!(r.message().contains(&theirs), "{}", r.text());
                assert!(!r.text().contains(&their_id[..12]), "{}", r.text());
                assert_eq!(r.header("content-type"), Some("application/json"));
                assert!(r.body.ends_with(b"}\n"), "dockerd's shape");
                let r = raw::request(
                    b.socket(),
                    "POST",
                    &format!("/containers/{mine}/rename?name={theirs}"),
                    None,
                )
                .expect("answer");
                assert_eq!(r.status, 409, "{}", r.text());
                assert!(!r.text().contains(&their_id[..12]), "{}", r.text());
                assert_eq!(
                    inspect(&e, "containers", &format!("{mine}/json")).status,
                    200
                );
            },
        );
        step("once A's objects are gone, B gets the same bytes", || {
            let r = raw::request(
                a.socket(),
                "DELETE",
                &format!("/containers/{theirs}?force=1"),
                None,
            )
            .expect("answer");
            assert_eq!(r.status, 204, "{}", r.text());
            let r = raw::request(a.socket(), "DELETE", &format!("/networks/{net}"), None)
                .expect("answer");
            assert_eq!(r.status, 204, "{}", r.text());
            let gone = ask(&b);
            for (i, (was, now)) in held.iter().zip(&gone).enumerate() {
                assert_eq!(
                    was,
                    now,
                    "{} {}: {} vs {}",
                    changes[i].0,
                    changes[i].1,
                    String::from_utf8_lossy(&was.2),
                    String::from_utf8_lossy(&now.2)
                );
            }
        });
    });
}
