//! What a stack may make the engine and the proxy spend (issue 37, docs/architecture.md, "What a stack may spend"), through the
//! real proxy and checked on what the engine holds afterwards: a body with more keys than
//! `--max-json-keys` is refused while another client's `/_ping` is answered; a healthcheck every
//! millisecond, a stop that never returns (`StopTimeout: -1`, `SIGCONT`, `t=-1`), many or low
//! host ports make no container and change none; the controls (a 30 s healthcheck, one loopback
//! port, a bounded stop) still work on the real engine.

use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};
use sockproxy_tests::engine::{each_engine, real_engine, Cleanup, Fakes};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::bypasses::{inspect, refused, send};

/// A bounded wait for another thread's answer: long enough for a loaded CI machine, short
/// enough that a proxy stalled by one body fails the test instead of hanging it.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

#[test]
fn a_body_with_too_many_keys_is_refused_and_other_clients_are_answered() {
    each_engine(
        "a_body_with_too_many_keys_is_refused_and_other_clients_are_answered",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, false);
            let name = clean.container(&format!("{prefix}sandbox-keys"));
            // 50,000 labels, each a key (about 600 KB, under the 1 MiB body limit).
            let labels: serde_json::Map<String, Value> = (0..50_000)
                .map(|i| (format!("k{i}"), Value::from("")))
                .collect();
            let body = json!({ "Image": e.image, "Cmd": ["true"], "Labels": labels });
            let sock = p.socket().to_owned();
            let target = format!("/containers/create?name={name}");
            let (big_tx, big_rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = big_tx.send(send(&sock, "POST", &target, &body));
            });
            let sock = p.socket().to_owned();
            let (ping_tx, ping_rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = ping_tx.send(raw::get(&sock, "/_ping").map(|r| r.status));
            });
            let ping = ping_rx
                .recv_timeout(ANSWER_WITHIN)
                .expect("a /_ping beside the big body is answered");
            assert_eq!(ping.expect("ping answer"), 200);
            let big = big_rx
                .recv_timeout(ANSWER_WITHIN)
                .expect("big body answered");
            refused(&big, 400, "body has more than 10000 keys (--max-json-keys)");
            assert_eq!(
                inspect(&e, "containers", &format!("{name}/json")).status,
                404,
                "no container made"
            );
            // The same labels under the operator's larger bound reach the engine.
            if !e.is_fake() {
                let p = StackProxy::start_with(&e.socket, &prefix, false, |c| {
                    c.create_rules.spend.max_json_keys = 60_000
                });
                let labels: serde_json::Map<String, Value> = (0..50_000)
                    .map(|i| (format!("k{i}"), Value::from("")))
                    .collect();
                let body = json!({ "Image": e.image, "Cmd": ["true"], "Labels": labels });
                let r = send(
                    p.socket(),
                    "POST",
                    &format!("/containers/create?name={name}"),
                    &body,
                );
                assert_eq!(r.status, 201, "{}", r.text());
                let held = inspect(&e, "containers", &format!("{name}/json")).json();
                assert_eq!(
                    held["Config"]["Labels"].as_object().map(|l| l.len()),
                    Some(50_001),
                    "the labels and the stack's"
                );
            }
        },
    );
}

/// `POST /containers/create?name=NAME` through the proxy with `extra` merged into a plain body.
fn create(p: &StackProxy, image: &str, name: &str, extra: Value) -> raw::RawResponse {
    let mut body = json!({ "Image": image, "Cmd": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"] });
    if let (Some(b), Some(x)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(x.clone());
    }
    send(
        p.socket(),
        "POST",
        &format!("/containers/create?name={name}"),
        &body,
    )
}

#[test]
fn unbounded_engine_work_is_refused_and_the_controls_still_work() {
    let Some(e) = real_engine("unbounded_engine_work_is_refused_and_the_controls_still_work")
    else {
        return;
    };
    let prefix = unique_prefix();
    let mut clean = Cleanup::new(&e.socket);
    let p = StackProxy::start(&e.socket, &prefix, false);
    let held = |name: &str| inspect(&e, "containers", &format!("{name}/json"));
    let lo = |port: &str| json!([{ "HostIp": "127.0.0.1", "HostPort": port }]);
    let five: serde_json::Map<String, Value> = (0..5)
        .map(|i| (format!("{}/tcp", 8000 + i), lo("")))
        .collect();
    step("refused creates make no container", || {
        let rows = [
            (
                json!({ "Healthcheck": { "Test": ["CMD", "true"], "Interval": 1_000_000 } }),
                "Healthcheck.Interval 1ms is not allowed for this stack (0 or at least 1s; --min-healthcheck-interval)",
            ),
            (
                json!({ "Healthcheck": { "Test": ["CMD", "true"], "Interval": 30_000_000_000_i64, "StartInterval": 1_000_000 } }),
                "Healthcheck.StartInterval 1ms",
            ),
            (
                json!({ "StopTimeout": -1 }),
                "StopTimeout -1 is not allowed for this stack (allowed: 0..=300; --max-stop-timeout)",
            ),
            (json!({ "StopSignal": "SIGCONT" }), "StopSignal SIGCONT is not allowed"),
            // Other spellings dockerd reads the same way: a lower-case name, a number, keys in
            // any case, and a range that crosses the host-port floor.
            (json!({ "StopSignal": "cont" }), "StopSignal cont is not allowed"),
            (json!({ "stopsignal": "18" }), "StopSignal 18 is not allowed"),
            (
                json!({ "healthcheck": { "test": ["CMD", "true"], "INTERVAL": 1_000_000 } }),
                "Healthcheck.Interval 1ms is not allowed",
            ),
            (
                json!({ "HostConfig": { "PortBindings": { "80/tcp": lo("1000-1100") } } }),
                "HostPort 1000-1100 is not allowed",
            ),
            (
                json!({ "HostConfig": { "PortBindings": { "80/tcp": lo("80") } } }),
                "HostPort 80 is not allowed for this stack (host ports below 1024 only when named; --min-host-port, --allow-host-port)",
            ),
            (
                json!({ "HostConfig": { "PortBindings": five } }),
                "publishes 5 host ports, more than this stack may (at most 4; --max-port-bindings)",
            ),
        ];
        for (i, (extra, needle)) in rows.into_iter().enumerate() {
            let name = clean.container(&format!("{prefix}sandbox-spend{i}"));
            let r = create(&p, &e.image, &name, extra);
            refused(&r, 403, needle);
            assert_eq!(held(&name).status, 404, "{name} not made");
        }
    });
    step("a 30 s healthcheck and one loopback port work", || {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port")
            .to_string();
        let name = clean.container(&format!("{prefix}sandbox-ctl"));
        let r = create(
            &p,
            &e.image,
            &name,
            json!({
                "Healthcheck": { "Test": ["CMD", "true"], "Interval": 30_000_000_000_i64, "Retries": 3 },
                "StopTimeout": 2, "StopSignal": "SIGTERM",
                "ExposedPorts": { "8080/tcp": {} },
                "HostConfig": { "PortBindings": { "8080/tcp": lo(&port) } },
            }),
        );
        assert_eq!(r.status, 201, "{}", r.text());
        let r = raw::request(
            p.socket(),
            "POST",
            &format!("/containers/{name}/start"),
            None,
        )
        .expect("start");
        assert_eq!(r.status, 204, "{}", r.text());
        let c = held(&name).json();
        assert_eq!(c["Config"]["Healthcheck"]["Interval"], 30_000_000_000_i64);
        assert_eq!(c["Config"]["StopTimeout"], 2);
        assert_eq!(c["State"]["Running"], true);
        assert!(
            c["State"]["Health"]["Status"].is_string(),
            "the engine runs the healthcheck: {}",
            c["State"]
        );
        assert_eq!(
            c["NetworkSettings"]["Ports"]["8080/tcp"][0]["HostPort"], port,
            "{}",
            c["NetworkSettings"]
        );
        // The published port answers on the host (docker-proxy accepts the connection).
        assert_eq!(
            std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().expect("port")))
                .map(drop)
                .map_err(|e| e.to_string()),
            Ok(()),
            "127.0.0.1:{port}"
        );
        // A stop that would never return is refused, and changes nothing.
        for q in ["t=-1", "t=301", "signal=SIGCONT"] {
            let r = raw::request(
                p.socket(),
                "POST",
                &format!("/containers/{name}/stop?{q}"),
                None,
            )
            .expect("stop");
            refused(&r, 403, "is not allowed for this stack");
            assert_eq!(held(&name).json()["State"]["Running"], true, "{q}");
        }
        let r = raw::request(
            p.socket(),
            "POST",
            &format!("/containers/{name}/restart?t=-1"),
            None,
        )
        .expect("restart");
        refused(
            &r,
            403,
            "query parameter t -1 is not allowed for this stack",
        );
        let r = raw::request(
            p.socket(),
            "POST",
            &format!("/containers/{name}/stop?t=5"),
            None,
        )
        .expect("stop");
        assert_eq!(r.status, 204, "{}", r.text());
        assert_eq!(held(&name).json()["State"]["Running"], false);
    });
}

/// Issue 37, finding 3: the engine is asked for the stack's own containers (an anchored name
/// filter for its prefix, and under `--require-stack-label` its label), so other stacks'
/// containers with bulky labels no longer count against this stack's list cap.
#[test]
fn other_stacks_bulky_containers_do_not_break_this_stacks_list() {
    each_engine(
        "other_stacks_bulky_containers_do_not_break_this_stacks_list",
        Fakes::Debian,
        |e| {
            let ours = unique_prefix();
            let theirs = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            const CAP: usize = 64 << 10;
            // Made on the engine directly, 60 KB of labels each.
            let bulky = |name: &str, stack: &str| {
                let body = json!({
                    "Image": e.image, "Cmd": ["true"],
                    "Labels": { "bulk": "x".repeat(60_000), "sockproxy.stack": stack },
                })
                .to_string();
                let r = raw::request(
                    &e.socket,
                    "POST",
                    &format!("/containers/create?name={name}"),
                    Some(body.as_bytes()),
                )
                .expect("answer");
                assert_eq!(r.status, 201, "{}", r.text());
            };
            let network = |name: &str, stack: &str, bulk: usize| {
                let body = json!({
                    "Name": name,
                    "Labels": { "bulk": "x".repeat(bulk), "sockproxy.stack": stack },
                })
                .to_string();
                let r = raw::request(&e.socket, "POST", "/networks/create", Some(body.as_bytes()))
                    .expect("answer");
                assert_eq!(r.status, 201, "{}", r.text());
                r.json()["Id"].as_str().expect("an ID").to_owned()
            };
            let net_names = |r: &raw::RawResponse| -> Vec<String> {
                assert_eq!(r.status, 200, "{}", r.text());
                r.json()
                    .as_array()
                    .expect("a list")
                    .iter()
                    .map(|n| n["Name"].as_str().unwrap_or("").to_owned())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect()
            };
            let names = |r: &raw::RawResponse| -> Vec<String> {
                assert_eq!(r.status, 200, "{}", r.text());
                r.json()
                    .as_array()
                    .expect("a list")
                    .iter()
                    .map(|c| c["Names"][0].as_str().unwrap_or("").to_owned())
                    .collect()
            };
            let lists = [
                "all=1",
                // The client's own filters, in either form, keep the prefix filter added.
                "all=1&filters=%7B%22status%22%3A%5B%22created%22%5D%7D",
                "all=1&filters=%7B%22status%22%3A%7B%22created%22%3Atrue%7D%7D",
            ];
            step("another prefix's bulky containers do not count", || {
                for i in 0..4 {
                    bulky(
                        &clean.container(&format!("{theirs}sandbox-bulk{i}")),
                        "other",
                    );
                }
                let whole = raw::get(&e.socket, "/containers/json?all=1").expect("answer");
                assert!(
                    whole.body.len() > 3 * CAP,
                    "the host's list: {}",
                    whole.body.len()
                );
                let p = StackProxy::start_with(&e.socket, &ours, false, |c| c.max_list_bytes = CAP);
                let mine = clean.container(&format!("{ours}sandbox-mine"));
                let r = create(&p, &e.image, &mine, json!({}));
                assert_eq!(r.status, 201, "{}", r.text());
                for q in lists {
                    let r = raw::get(p.socket(), &format!("/containers/json?{q}")).expect("answer");
                    assert_eq!(names(&r), [format!("/{mine}")], "{q}");
                }
                // The client's own name filter is matched by the proxy: one that names the
                // bulky containers finds none of the stack's, and they still do not count.
                for (q, want) in [
                    ("all=1&filters=%7B%22name%22%3A%5B%22bulk%22%5D%7D", vec![]),
                    (
                        "all=1&filters=%7B%22name%22%3A%7B%22mine%22%3Atrue%7D%7D",
                        vec![format!("/{mine}")],
                    ),
                ] {
                    let r = raw::get(p.socket(), &format!("/containers/json?{q}")).expect("answer");
                    assert_eq!(names(&r), want, "{q}");
                }
                // Networks: another prefix's bulky ones count neither against a network list
                // nor against the lookup of the stack's own network by an ID prefix.
                for j in 0..2 {
                    let name = clean.network(&format!("{theirs}net-bulk{j}"));
                    network(&name, "other", 60_000);
                }
                let own_net = clean.network(&format!("{ours}net-own"));
                let id = network(&own_net, "stack-a", 0);
                let r = raw::get(p.socket(), "/networks").expect("answer");
                // With the stack's own network, made at its first create.
                assert_eq!(net_names(&r), [p.stack_network.clone(), own_net.clone()]);
                let r = raw::get(p.socket(), &format!("/networks/{}", &id[..12])).expect("answer");
                assert_eq!(r.status, 200, "{}", r.text());
                assert_eq!(r.json()["Name"], own_net.as_str());
            });
            step(
                "under --require-stack-label, another stack's on the same prefix do not count",
                || {
                    for i in 0..4 {
                        bulky(
                            &clean.container(&format!("{ours}sandbox-bulk{i}")),
                            "stack-b",
                        );
                    }
                    let p = StackProxy::start_with(&e.socket, &ours, false, |c| {
                        c.max_list_bytes = CAP;
                        c.create_rules.require_stack_label = true;
                        c.stack = "stack-a".into();
                    });
                    let mine = clean.container(&format!("{ours}sandbox-a"));
                    let r = create(&p, &e.image, &mine, json!({}));
                    assert_eq!(r.status, 201, "{}", r.text());
                    for q in lists {
                        let r =
                            raw::get(p.socket(), &format!("/containers/json?{q}")).expect("answer");
                        assert_eq!(names(&r), [format!("/{mine}")], "{q}");
                    }
                    // Networks alike: another stack's bulky networks on this prefix too.
                    for j in 0..2 {
                        let name = clean.network(&format!("{ours}net-bulk{j}"));
                        network(&name, "stack-b", 60_000);
                    }
                    let whole = raw::get(&e.socket, "/networks").expect("answer");
                    assert!(
                        whole.body.len() > 3 * CAP,
                        "the host's: {}",
                        whole.body.len()
                    );
                    let r = raw::get(p.socket(), "/networks").expect("answer");
                    // With the stack's own network, made at its first create.
                    assert_eq!(
                        net_names(&r),
                        [format!("{ours}net-own"), p.stack_network.clone()]
                    );
                    // Without the flag, this prefix's bulky containers are the stack's to list:
                    // over the cap, the list fails closed as before.
                    let loose =
                        StackProxy::start_with(&e.socket, &ours, false, |c| c.max_list_bytes = CAP);
                    let r = raw::get(loose.socket(), "/containers/json?all=1").expect("answer");
                    assert_eq!(r.status, 502, "{}", r.text());
                },
            );
        },
    );
}

/// Issue 37, findings 7 and 8, on what the engine holds afterwards: log options past the
/// operator's bounds, CPU weight, an unbounded pids limit, unlimited core dumps, a working
/// directory in `/proc` (create and exec) and a volume at `/dev` make no container, exec or
/// change; a container within the bounds is made with what it asked for.
#[test]
fn host_side_bounds_hold_on_create_update_and_exec() {
    each_engine(
        "host_side_bounds_hold_on_create_update_and_exec",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, false);
            let held = |name: &str| inspect(&e, "containers", &format!("{name}/json"));
            let sleep = json!({ "Cmd": ["sleep", "600"] });
            step("refused creates make no container", || {
                let rows = [
                    (
                        json!({ "HostConfig": { "LogConfig": { "Type": "json-file", "Config": { "max-size": "1000g" } } } }),
                        "LogConfig.Config.max-size 1000g is not allowed for this stack (allowed: 1 to 104857600 bytes; --max-log-size)",
                    ),
                    (
                        json!({ "HostConfig": { "CpuShares": 262144 } }),
                        "HostConfig.CpuShares 262144 is not allowed for this stack (allowed: 0..=1024; --max-cpu-shares)",
                    ),
                    (
                        json!({ "HostConfig": { "PidsLimit": i64::MAX } }),
                        "HostConfig.PidsLimit 9223372036854775807 is not allowed",
                    ),
                    (
                        json!({ "HostConfig": { "Ulimits": [{ "Name": "core", "Soft": -1, "Hard": -1 }] } }),
                        "--max-core-ulimit",
                    ),
                    (
                        json!({ "WorkingDir": "/proc/self/fd/7" }),
                        "WorkingDir /proc/self/fd/7 is not allowed",
                    ),
                    (
                        json!({ "HostConfig": { "Binds": [format!("{prefix}vol:/dev")] } }),
                        "HostConfig.Binds /dev is not allowed for this stack (a mount target at or under /dev",
                    ),
                    (
                        json!({ "Volumes": { "/dev": {} } }),
                        "Volumes /dev is not allowed",
                    ),
                ];
                for (i, (extra, needle)) in rows.into_iter().enumerate() {
                    let name = clean.container(&format!("{prefix}sandbox-host{i}"));
                    let mut body = extra;
                    if let (Some(b), Some(x)) = (body.as_object_mut(), sleep.as_object()) {
                        b.extend(x.clone());
                        b.insert("Image".into(), json!(e.image));
                    }
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/containers/create?name={name}"),
                        &body,
                    );
                    refused(&r, 403, needle);
                    assert_eq!(held(&name).status, 404, "{name} not made");
                }
                assert_eq!(
                    inspect(&e, "volumes", &format!("{prefix}vol")).status,
                    404,
                    "no volume made"
                );
            });
            step(
                "within the bounds: made, updated and exec'd as asked",
                || {
                    let name = clean.container(&format!("{prefix}sandbox-within"));
                    let body = json!({
                        "Image": e.image, "Cmd": ["sleep", "600"], "WorkingDir": "/tmp",
                        "HostConfig": {
                            "CpuShares": 512, "PidsLimit": 100,
                            "LogConfig": { "Type": "json-file", "Config": { "max-size": "10m", "max-file": "2" } },
                        },
                    });
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/containers/create?name={name}"),
                        &body,
                    );
                    assert_eq!(r.status, 201, "{}", r.text());
                    let c = held(&name).json();
                    assert_eq!(c["HostConfig"]["CpuShares"], 512);
                    assert_eq!(c["HostConfig"]["PidsLimit"], 100);
                    assert_eq!(c["HostConfig"]["LogConfig"]["Config"]["max-size"], "10m");
                    assert_eq!(c["Config"]["WorkingDir"], "/tmp");
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/v1.41/containers/{name}/update"),
                        &json!({ "CpuShares": 262144 }),
                    );
                    refused(&r, 403, "CpuShares 262144 is not allowed");
                    assert_eq!(
                        held(&name).json()["HostConfig"]["CpuShares"],
                        512,
                        "unchanged"
                    );
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/v1.41/containers/{name}/update"),
                        &json!({ "CpuShares": 256 }),
                    );
                    assert_eq!(r.status, 200, "{}", r.text());
                    if !e.is_fake() {
                        // The fake answers an update without applying it.
                        assert_eq!(held(&name).json()["HostConfig"]["CpuShares"], 256);
                    }
                    let r = raw::request(
                        p.socket(),
                        "POST",
                        &format!("/containers/{name}/start"),
                        None,
                    )
                    .expect("start");
                    assert_eq!(r.status, 204, "{}", r.text());
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/containers/{name}/exec"),
                        &json!({ "Cmd": ["pwd"], "WorkingDir": "/proc/self/fd/7" }),
                    );
                    refused(&r, 403, "WorkingDir /proc/self/fd/7 is not allowed");
                    let execs = held(&name).json()["ExecIDs"].clone();
                    assert!(
                        execs.is_null() || execs == json!([]),
                        "no exec made: {execs}"
                    );
                },
            );
        },
    );
}
