//! A stack's volumes on the real engine (issue 37, finding 7): an anonymous volume, in each of
//! its spellings and from the docker CLI's `-v /data`, makes no container (the stack could
//! never list or remove it); a named volume a create makes under the stack's prefix is listed,
//! inspected and removed through the proxy, the client's own `name` filter included; another
//! stack's volume answers exactly as a missing one does and is left alone; under
//! `--require-stack-label` the stack has no volumes. Real engine only: the fake engine keeps no
//! volumes.

use serde_json::{json, Value};
use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{real_engine, Cleanup, Engine};
use sockproxy_tests::raw::{self, RawResponse};
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::bypasses::{inspect, refused, send};

/// A raw create of `name` through `p`: a sleeping container with `extra` fields.
pub(crate) fn create(p: &StackProxy, e: &Engine, name: &str, extra: Value) -> RawResponse {
    let mut body = json!({ "Image": e.image, "Cmd": ["sleep", "600"] });
    if let (Some(b), Value::Object(x)) = (body.as_object_mut(), extra) {
        b.extend(x);
    }
    send(
        p.socket(),
        "POST",
        &format!("/containers/create?name={name}"),
        &body,
    )
}

/// The names in a `GET /volumes` answer.
fn volume_names(r: &RawResponse) -> Vec<String> {
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["Warnings"], Value::Null, "{}", r.text());
    v["Volumes"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v["Name"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn engine_volume(e: &Engine, name: &str, labels: Value) {
    let r = send(
        &e.socket,
        "POST",
        "/volumes/create",
        &json!({ "Name": name, "Labels": labels }),
    );
    assert_eq!(r.status, 201, "{}", r.text());
}

/// `filters` as a query value.
fn filters(v: Value) -> String {
    v.to_string()
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn a_stacks_named_volumes_are_its_own_and_anonymous_ones_are_refused() {
    let Some(e) = real_engine("a_stacks_named_volumes_are_its_own_and_anonymous_ones_are_refused")
    else {
        return;
    };
    let ours = unique_prefix();
    let theirs = unique_prefix();
    let mut clean = Cleanup::new(&e.socket);
    let p = StackProxy::start(&e.socket, &ours, false);

    step("an anonymous volume makes no container", || {
        let name = clean.container(&format!("{ours}sandbox-anon"));
        let spellings = [
            ("Volumes /data", json!({ "Volumes": { "/data": {} } })),
            (
                "HostConfig.Mounts[0].Target /data",
                json!({ "HostConfig": { "Mounts": [{ "Type": "volume", "Target": "/data" }] } }),
            ),
            // A path no bind covers, beside one a bind does (docker-py's shape).
            (
                "Volumes /x",
                json!({ "Volumes": { "/data": {}, "/x": {} }, "HostConfig": { "Binds": [format!("{ours}vol-anon:/data")] } }),
            ),
        ];
        for (why, extra) in spellings {
            let r = create(&p, &e, &name, extra);
            refused(
                &r,
                403,
                &format!("sockproxy: containers.create: {why} is not allowed for this stack (an anonymous volume, which the stack could not list or remove; no flag allows one"),
            );
            assert_eq!(
                inspect(&e, "containers", &format!("{name}/json")).status,
                404
            );
            assert_eq!(
                inspect(&e, "volumes", &format!("{ours}vol-anon")).status,
                404
            );
        }
        let out = docker(
            p.socket(),
            &["create", "--name", &name, "-v", "/data", &e.image, "true"],
        );
        assert!(!out.ok(), "{}", out.out());
        assert!(
            out.stderr.contains(
                "Error response from daemon: sockproxy: containers.create: Volumes /data is not allowed for this stack (an anonymous volume"
            ),
            "{}",
            out.stderr
        );
        assert_eq!(
            inspect(&e, "containers", &format!("{name}/json")).status,
            404
        );
    });

    let vol = clean.volume(&format!("{ours}vol-a"));
    let foreign = clean.volume(&format!("{theirs}vol-b"));
    let holder = clean.container(&format!("{ours}sandbox-vol"));
    step(
        "a named volume a create makes is listed and inspected as the stack's",
        || {
            engine_volume(&e, &foreign, json!({}));
            let binds = json!({ "Volumes": { "/data": {} }, "HostConfig": { "Binds": [format!("{vol}:/data")] } });
            let r = create(&p, &e, &holder, binds);
            assert_eq!(r.status, 201, "{}", r.text());
            assert_eq!(
                inspect(&e, "volumes", &vol).status,
                200,
                "the create made it"
            );
            let all = raw::get(p.socket(), "/volumes").expect("answer");
            assert_eq!(volume_names(&all), std::slice::from_ref(&vol));
            // The client's own name filter narrows the stack's list, never widens it.
            for (name_filter, want) in [
                (json!({ "name": ["vol-a"] }), vec![vol.clone()]),
                (json!({ "name": { "vol-b": true } }), vec![]),
                (json!({ "name": [foreign.clone()] }), vec![]),
            ] {
                let target = format!("/volumes?filters={}", filters(name_filter.clone()));
                let r = raw::get(p.socket(), &target).expect("answer");
                assert_eq!(volume_names(&r), want, "{name_filter}");
            }
            let ls = docker(p.socket(), &["volume", "ls", "--format", "{{.Name}}"]);
            assert!(ls.ok(), "{}", ls.stderr);
            assert_eq!(ls.out().lines().collect::<Vec<_>>(), [vol.as_str()]);
            let r = raw::get(p.socket(), &format!("/volumes/{vol}")).expect("answer");
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.json()["Name"], vol.as_str());
        },
    );

    step(
        "another stack's volume answers as a missing one and is left alone",
        || {
            let read = raw::get(p.socket(), &format!("/volumes/{foreign}")).expect("answer");
            let remove = raw::request(p.socket(), "DELETE", &format!("/volumes/{foreign}"), None)
                .expect("answer");
            let rm = docker(p.socket(), &["volume", "rm", &foreign]);
            assert!(!rm.ok(), "{}", rm.out());
            assert_eq!(inspect(&e, "volumes", &foreign).status, 200, "still there");
            // What the engine answers for it once it is gone, byte for byte.
            let gone = raw::request(&e.socket, "DELETE", &format!("/volumes/{foreign}"), None)
                .expect("answer");
            assert_eq!(gone.status, 204, "{}", gone.text());
            let missing = inspect(&e, "volumes", &foreign);
            assert_eq!(missing.status, 404, "{}", missing.text());
            for r in [&read, &remove] {
                assert_eq!(r.status, 404, "{}", r.text());
                assert_eq!(r.body, missing.body, "{} vs {}", r.text(), missing.text());
            }
        },
    );

    step(
        "the stack removes its own volume once no container holds it",
        || {
            let r = raw::request(p.socket(), "DELETE", &format!("/volumes/{vol}"), None)
                .expect("answer");
            assert_eq!(r.status, 409, "the engine's own answer: {}", r.text());
            assert_eq!(inspect(&e, "volumes", &vol).status, 200);
            let r = raw::request(
                p.socket(),
                "DELETE",
                &format!("/containers/{holder}?force=1"),
                None,
            )
            .expect("answer");
            assert_eq!(r.status, 204, "{}", r.text());
            let rm = docker(p.socket(), &["volume", "rm", &vol]);
            assert!(rm.ok(), "{}", rm.stderr);
            assert_eq!(inspect(&e, "volumes", &vol).status, 404, "removed");
        },
    );

    step(
        "under --require-stack-label the stack has no volumes",
        || {
            let labelled = clean.volume(&format!("{ours}vol-l"));
            engine_volume(&e, &labelled, json!({ "sockproxy.stack": "stack-a" }));
            let strict = StackProxy::start_with(&e.socket, &ours, false, |c| {
                c.create_rules.require_stack_label = true;
                c.stack = "stack-a".into();
            });
            let r = raw::get(strict.socket(), "/volumes").expect("answer");
            assert_eq!(volume_names(&r), Vec::<String>::new());
            for method in ["GET", "DELETE"] {
                let r = raw::request(
                    strict.socket(),
                    method,
                    &format!("/volumes/{labelled}"),
                    None,
                )
                .expect("answer");
                assert_eq!(r.status, 404, "{method}: {}", r.text());
                assert_eq!(r.message(), format!("get {labelled}: no such volume"));
            }
            assert_eq!(inspect(&e, "volumes", &labelled).status, 200, "still there");
        },
    );
}
