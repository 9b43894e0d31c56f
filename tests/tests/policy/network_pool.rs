//! `--network-pool` on the real engine: every network a stack makes, its own network among
//! them, is made with a subnet of the operator's pool and that subnet's gateway named, the next
//! free one each time, and a create past the pool's end is refused with nothing made. And why:
//! a dockerd of the test's own, restarted (SIGTERM, as systemd does) while the stack keeps
//! making and removing networks, comes back every time; without a pool, Debian 12's dockerd
//! 20.10.24 did not come back after most such restarts (the `#[ignore]`d control below,
//! docs/sockproxy.md "Network subnets").

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use sockproxy_policy::settings::NetworkPool;
use sockproxy_tests::engine::{real_engine, remove_stack, Engine};
use sockproxy_tests::own_dockerd::OwnDockerd;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::bypasses::{inspect, send};

fn pool(cidr: &str, size: u8) -> NetworkPool {
    NetworkPool::new(cidr.parse().expect("cidr"), size).expect("pool")
}

/// The network's `IPAM.Config` as the engine holds it: `(subnet, gateway)` of each entry.
fn ipam(e: &Engine, name: &str) -> Vec<(String, String)> {
    let n = inspect(e, "networks", name).json();
    n["IPAM"]["Config"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (s("Subnet"), s("Gateway"))
        })
        .collect()
}

fn pair(subnet: &str, gateway: &str) -> Vec<(String, String)> {
    vec![(subnet.to_owned(), gateway.to_owned())]
}

#[test]
fn a_stacks_networks_get_the_next_free_subnet_of_its_pool_and_none_past_its_end() {
    let test = "a_stacks_networks_get_the_next_free_subnet_of_its_pool_and_none_past_its_end";
    let Some(e) = real_engine(test) else {
        return;
    };
    let p = unique_prefix();
    // Four /24s; no other test uses this range.
    let proxy = StackProxy::start_with(&e.socket, &p, true, |c| {
        c.create_rules.network_pool = Some(pool("10.213.0.0/22", 24));
    });
    let net = proxy.stack_network.clone();
    step("the stack's own network, made at the first create", || {
        let name = format!("{p}sandbox-a");
        let body = json!({ "Image": e.image, "Cmd": ["sleep", "600"] });
        let r = send(
            proxy.socket(),
            "POST",
            &format!("/containers/create?name={name}"),
            &body,
        );
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(ipam(&e, &net), pair("10.213.0.0/24", "10.213.0.1"));
    });
    let make = |name: &str, internal: bool| {
        let body = json!({ "Name": name, "Internal": internal });
        send(proxy.socket(), "POST", "/networks/create", &body)
    };
    step("a sandbox's two networks, the next two /24s", || {
        for (i, (name, internal)) in [
            (format!("{p}sandbox-net-a"), true),
            (format!("{p}sandbox-egress-a"), false),
        ]
        .iter()
        .enumerate()
        {
            let r = make(name, *internal);
            assert_eq!(r.status, 201, "{}", r.text());
            let third = i + 1;
            assert_eq!(
                ipam(&e, name),
                pair(
                    &format!("10.213.{third}.0/24"),
                    &format!("10.213.{third}.1")
                )
            );
        }
    });
    step("a subnet given back is chosen again", || {
        let gone = format!("{p}sandbox-egress-a");
        let r = send(
            proxy.socket(),
            "DELETE",
            &format!("/networks/{gone}"),
            &json!(null),
        );
        assert_eq!(r.status, 204, "{}", r.text());
        let again = format!("{p}sandbox-egress-b");
        assert_eq!(make(&again, false).status, 201);
        assert_eq!(ipam(&e, &again), pair("10.213.2.0/24", "10.213.2.1"));
    });
    step(
        "IPv6 (in Go's any-case spelling) and oversized labels refused, nothing made",
        || {
            let v6 = format!("{p}sandbox-egress-v6");
            let body = json!({ "Name": v6, "enableipv6": true });
            let r = send(proxy.socket(), "POST", "/networks/create", &body);
            assert_eq!(r.status, 403, "{}", r.text());
            assert!(
                r.text()
                    .contains("EnableIPv6 true is not allowed for this stack under --network-pool"),
                "{}",
                r.text()
            );
            assert_eq!(inspect(&e, "networks", &v6).status, 404);
            let big = format!("{p}sandbox-egress-big");
            let body = json!({ "Name": big, "Labels": { "k": "x".repeat(16 << 10) } });
            let r = send(proxy.socket(), "POST", "/networks/create", &body);
            assert_eq!(r.status, 403, "{}", r.text());
            assert!(
                r.text()
                    .contains("are not allowed for this stack's networks (at most 16384)"),
                "{}",
                r.text()
            );
            assert_eq!(inspect(&e, "networks", &big).status, 404);
        },
    );
    step(
        "the last /24, then a refusal naming the pool, and nothing made",
        || {
            let last = format!("{p}sandbox-egress-c");
            assert_eq!(make(&last, false).status, 201);
            assert_eq!(ipam(&e, &last), pair("10.213.3.0/24", "10.213.3.1"));
            let past = format!("{p}sandbox-egress-d");
            let r = make(&past, false);
            assert_eq!(r.status, 403, "{}", r.text());
            assert_eq!(
            r.json()["message"],
            json!("sockproxy: networks.create: no /24 of --network-pool 10.213.0.0/22 is free (the engine's networks hold them all)")
        );
            assert_eq!(inspect(&e, "networks", &past).status, 404);
        },
    );
    drop(proxy);
    remove_stack(&e.socket, &p);
}

/// Makes and removes the stack's networks through `proxy` from four threads until `stop`;
/// counts the removals the engine answered.
fn churn(
    socket: &std::path::Path,
    p: &str,
    stop: &Arc<AtomicBool>,
    removed: &Arc<AtomicUsize>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..4)
        .map(|k| {
            let (socket, p) = (socket.to_owned(), p.to_owned());
            let (stop, removed) = (Arc::clone(stop), Arc::clone(removed));
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let name = format!("{p}sandbox-egress-{k}-{i}");
                    let made = send(
                        &socket,
                        "POST",
                        "/networks/create",
                        &json!({ "Name": name }),
                    );
                    if made.status != 201 {
                        // The engine is restarting: wait a little, as a client would.
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                    let r = send(
                        &socket,
                        "DELETE",
                        &format!("/networks/{name}"),
                        &json!(null),
                    );
                    if r.status == 204 {
                        removed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect()
}

/// Restarts the test's own dockerd `restarts` times while the stack makes and removes
/// networks (eight removals the engine answered first, each time); how many removals each
/// round saw within 20 s, and how many half-removed networks dockerd's log says it found at
/// those starts.
fn restarts_under_churn(
    test: &str,
    network_pool: Option<NetworkPool>,
    restarts: usize,
) -> Option<(Vec<usize>, usize)> {
    let e = real_engine(test)?;
    let mut d = OwnDockerd::start(test, &e.socket)?;
    let p = unique_prefix();
    let proxy = StackProxy::start_with(&d.socket(), &p, true, |c| {
        c.create_rules.network_pool = network_pool;
    });
    let stop = Arc::new(AtomicBool::new(false));
    let removed = Arc::new(AtomicUsize::new(0));
    let mut rounds = Vec::new();
    for n in 0..restarts {
        stop.store(false, Ordering::Relaxed);
        let before = removed.load(Ordering::Relaxed);
        let threads = churn(proxy.socket(), &p, &stop, &removed);
        let deadline = Instant::now() + Duration::from_secs(20);
        // Until removals are under way (the engine answers them), then a little longer.
        while removed.load(Ordering::Relaxed) < before + 8 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        rounds.push(removed.load(Ordering::Relaxed) - before);
        std::thread::sleep(Duration::from_millis(300 + 137 * n as u64 % 400));
        // SIGTERM while removals are in flight; `restart` fails the test with dockerd's log
        // if it does not answer within 60 s.
        d.restart();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
    }
    let log = d.log();
    let stale = log.matches("Removing stale network").count();
    Some((rounds, stale))
}

#[test]
fn under_a_network_pool_a_dockerd_restart_while_networks_are_removed_comes_back() {
    let test = "under_a_network_pool_a_dockerd_restart_while_networks_are_removed_comes_back";
    let Some((rounds, stale)) = restarts_under_churn(test, Some(pool("10.214.0.0/16", 28)), 5)
    else {
        return;
    };
    eprintln!("{test}: removals before each restart {rounds:?}; {stale} half-removed networks found at the starts");
    // Each restart came back (`restart` asserts it), and after each the stack made and removed
    // networks again: a subnet a cut-short create left held is passed over, not chosen forever.
    assert!(
        rounds.iter().all(|&r| r >= 8),
        "networks made and removed before every restart: {rounds:?}"
    );
}

/// The hazard the pool removes, on the engine the tests run on: without it, a restart while
/// networks are removed leaves dockerd 20.10 unable to start (`restart` fails with its log,
/// `panic: runtime error: index out of range` in `reservePools`). Not run by default: engines
/// from 23.0 on carry the fix and come back.
#[test]
#[ignore = "shows an engine bug of dockerd before 23.0; run by hand"]
#[should_panic(expected = "dockerd did not answer")]
fn without_a_pool_dockerd_20_10_does_not_come_back_from_such_a_restart() {
    let test = "without_a_pool_dockerd_20_10_does_not_come_back_from_such_a_restart";
    let _ = restarts_under_churn(test, None, 8);
}
