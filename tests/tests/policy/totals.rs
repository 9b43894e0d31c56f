//! The stack's totals (issue 50, point 3), on the fake and the real engine: `--max-containers`
//! and `--max-memory` count every container of the stack's families the engine holds, in any
//! state, sidecars included, with the default limit for one that has none; creates racing
//! through the proxy never pass them together; a refusal is in dockerd's error shape, and the
//! engine holds what the totals allow and nothing more.

use serde_json::json;
use sockproxy_tests::engine::{each_engine, Cleanup, Engine, Fakes};
use sockproxy_tests::raw::{self, RawResponse};
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::bypasses::{inspect, send};

const GIB: i64 = 1 << 30;

fn create(p: &StackProxy, e: &Engine, name: &str, host: serde_json::Value) -> RawResponse {
    let body = json!({ "Image": e.image, "Cmd": ["sleep", "600"], "HostConfig": host });
    send(
        p.socket(),
        "POST",
        &format!("/containers/create?name={name}"),
        &body,
    )
}

/// A container made on the engine directly (past any proxy), not started: what a crashed
/// provider or an operator may leave.
fn left_behind(e: &Engine, clean: &mut Cleanup, name: &str) {
    let name = clean.container(name);
    let body = json!({ "Image": e.image, "Cmd": ["true"] }).to_string();
    let r = raw::request(
        &e.socket,
        "POST",
        &format!("/containers/create?name={name}"),
        Some(body.as_bytes()),
    )
    .expect("answer");
    assert_eq!(r.status, 201, "{}", r.text());
}

/// The stack's containers as the engine holds them, in any state.
fn held(e: &Engine, p: &str) -> usize {
    let filters = json!({ "name": [format!("^/{p}")] }).to_string();
    let path = format!(
        "/containers/json?all=1&{}",
        form_urlencoded::Serializer::new(String::new())
            .append_pair("filters", &filters)
            .finish()
    );
    raw::get(&e.socket, &path)
        .expect("answer")
        .json()
        .as_array()
        .map_or(0, Vec::len)
}

fn in_dockerd_shape(r: &RawResponse, status: u16, message: &str) {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json(), json!({ "message": message }));
}

#[test]
fn racing_creates_stop_at_max_containers() {
    let test = "racing_creates_stop_at_max_containers";
    each_engine(test, Fakes::Debian, |e| {
        let p = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let proxy = StackProxy::start_with(&e.socket, &p, false, |c| {
            c.create_rules.spend.limits.max_containers = 4;
        });
        // Two of the four are taken already: a sidecar and a sandbox, neither running.
        left_behind(&e, &mut clean, &format!("{p}netproxy-left"));
        left_behind(&e, &mut clean, &format!("{p}sandbox-left"));
        let names: Vec<String> = (0..8)
            .map(|i| clean.container(&format!("{p}sandbox-race{i}")))
            .collect();
        let answers: Vec<RawResponse> = std::thread::scope(|s| {
            let made: Vec<_> = names
                .iter()
                .map(|name| {
                    let (proxy, e) = (&proxy, &e);
                    s.spawn(move || create(proxy, e, name, json!({})))
                })
                .collect();
            made.into_iter()
                .map(|m| m.join().expect("a create"))
                .collect()
        });
        let made = answers.iter().filter(|r| r.status == 201).count();
        assert_eq!(
            made,
            2,
            "{:?}",
            answers.iter().map(RawResponse::text).collect::<Vec<_>>()
        );
        for r in answers.iter().filter(|r| r.status != 201) {
            in_dockerd_shape(
                r,
                403,
                "sockproxy: containers.create: this stack has 4 containers, the most it may have (--max-containers 4)",
            );
        }
        assert_eq!(held(&e, &p), 4, "the engine holds the total and no more");
    });
}

#[test]
fn the_memory_total_counts_defaults_and_updates() {
    let test = "the_memory_total_counts_defaults_and_updates";
    each_engine(test, Fakes::Debian, |e| {
        let p = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let proxy = StackProxy::start_with(&e.socket, &p, false, |c| {
            c.create_rules.spend.limits.max_memory = 5 * GIB;
        });
        let memory = |name: &str| {
            inspect(&e, "containers", &format!("{name}/json")).json()["HostConfig"]["Memory"]
                .clone()
        };
        // Made past the proxy with no limit: counted as the default, 2 GiB.
        left_behind(&e, &mut clean, &format!("{p}sandbox-left"));
        let first = step("a create at the default fits (4 GiB in all)", || {
            let name = clean.container(&format!("{p}sandbox-a"));
            let r = create(&proxy, &e, &name, json!({}));
            assert_eq!(r.status, 201, "{}", r.text());
            name
        });
        step(
            "another at the default does not (6 GiB), and is not made",
            || {
                let name = clean.container(&format!("{p}sandbox-b"));
                let r = create(&proxy, &e, &name, json!({}));
                in_dockerd_shape(
                &r,
                403,
                &format!("sockproxy: containers.create: this stack's containers would hold {} bytes of memory limits in all, more than it may (--max-memory {})", 6 * GIB, 5 * GIB),
            );
                assert_eq!(
                    inspect(&e, "containers", &format!("{name}/json")).status,
                    404
                );
            },
        );
        step("one of 1 GiB does (5 GiB)", || {
            let name = clean.container(&format!("{p}sandbox-c"));
            let r = create(&proxy, &e, &name, json!({ "Memory": GIB }));
            assert_eq!(r.status, 201, "{}", r.text());
        });
        step(
            "an update that raises a limit past the total is refused",
            || {
                let r = send(
                    proxy.socket(),
                    "POST",
                    &format!("/containers/{first}/update"),
                    &json!({ "Memory": 3 * GIB }),
                );
                in_dockerd_shape(
                &r,
                403,
                &format!("sockproxy: containers.update: this stack's containers would hold {} bytes of memory limits in all, more than it may (--max-memory {})", 6 * GIB, 5 * GIB),
            );
                assert_eq!(memory(&first), json!(2 * GIB), "unchanged");
                let r = send(
                    proxy.socket(),
                    "POST",
                    &format!("/containers/{first}/update"),
                    &json!({ "Memory": GIB }),
                );
                assert_eq!(r.status, 200, "{}", r.text());
                assert_eq!(memory(&first), json!(GIB), "lowered");
            },
        );
    });
}
