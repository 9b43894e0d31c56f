//! `deploy/multi-host/compose.host.yaml` brought up as its header says, over
//! `deploy/compose.deerflow.yaml`, on the real engine: one host of several, with the shared
//! Redis the file expects from outside (`REDIS_URL`: the file runs none, so the test starts a
//! private `redis-server` on the host's loopback, which the provisioner reaches from the host's
//! network namespace) and `HOST_ADDR` an address of the host other than loopback (the engine's
//! default bridge gateway, standing in for a LAN address: the provisioner listens there and the
//! sandbox is published there, which the proxy allows only through the file's
//! `SOCKPROXY_ALLOW_PUBLISH_ADDRESS` of that one address). deer-flow's remote-backend calls
//! create, discover, list and delete a sandbox at `http://HOST_ADDR:PORT`; Redis holds the claim, the host's address and
//! the registry while it lives; `down` leaves nothing on the engine and withdraws the host.
//! The test's own override sets only the sandbox command an offline engine needs.

use std::process::Command;

use sockproxy_tests::bindroot::can_pin;
use sockproxy_tests::engine::{ensure_images, network_gateway, real_engine, remove_stack};
use sockproxy_tests::multihost::{call_to, free_port, wait_for, wait_until};
use sockproxy_tests::provisioner::{python, script, KEY};
use sockproxy_tests::redis_server::RedisServer;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::compose::{assert_nothing_left, have_compose, ps_names, repo, text, Compose};
use crate::compose_deerflow::{deerflow_env, shared_pin_parent, RouteFiles};
use crate::gateway_net::GatewayNet;

/// `redis-cli GET key` on `redis`'s socket ("" for none).
fn redis_get(redis: &RedisServer, key: &str) -> String {
    let out = Command::new("redis-cli")
        .arg("-s")
        .arg(redis.socket())
        .args(["GET", key])
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Whether an HTTP server answers at `addr` (`HOST:PORT`): any status line.
fn answers(addr: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let mut head = [0u8; 12];
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").is_ok()
        && s.read_exact(&mut head).is_ok()
        && head.starts_with(b"HTTP/1.")
}

/// Whatever a failed run left (compose's `down` keeps the sandboxes running): the stack's
/// containers and networks, and the proxy's pin directory. Declared before the `Compose`, so it
/// runs after its `down`.
struct Leftovers {
    engine: std::path::PathBuf,
    stack: String,
    pin_dir: String,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        remove_stack(&self.engine, &self.stack);
        let _ = Command::new("umount").args(["-R", &self.pin_dir]).status();
    }
}

#[test]
fn the_multi_host_compose_override_comes_up_as_one_host_and_leaves_nothing() {
    let test = "the_multi_host_compose_override_comes_up_as_one_host_and_leaves_nothing";
    let Some(e) = real_engine(test) else { return };
    if !have_compose(test) || !can_pin(test) {
        return;
    }
    let redis_port = free_port();
    let Some(redis) = RedisServer::start_tcp(test, redis_port) else {
        return;
    };
    let images = ensure_images(&e.socket);
    shared_pin_parent();
    let host_addr = network_gateway(&e.socket, "bridge");
    assert!(!host_addr.is_empty(), "the default bridge has a gateway");
    let stack = unique_prefix();
    let project: String = stack.chars().filter(char::is_ascii_alphanumeric).collect();
    let host_name = format!("host-{project}");
    // The key `call_to` sends.
    let key = KEY;
    let RouteFiles {
        base,
        secrets: _secrets,
        key_file,
        override_file,
    } = RouteFiles::new("mh-base-", key);
    let port = free_port();
    let pin_dir = format!("/run/sockproxy-pins/{project}");
    let _leftovers = Leftovers {
        engine: e.socket.clone(),
        stack: stack.clone(),
        pin_dir: pin_dir.clone(),
    };
    let compose = Compose::for_stack(
        &e,
        vec![
            repo().join("deploy/compose.deerflow.yaml"),
            repo().join("deploy/multi-host/compose.host.yaml"),
            override_file,
        ],
        images,
        &stack,
        &project,
        deerflow_env(base.path(), &key_file, port, &pin_dir)
            .into_iter()
            // The base file's gateway network, which this override leaves unused: the run's
            // own, as the defaults would collide between runs.
            .chain(GatewayNet::new(&stack).env())
            .chain([
                ("HOST_ADDR".to_owned(), host_addr.clone()),
                ("HOST_NAME".to_owned(), host_name.clone()),
                (
                    "REDIS_URL".to_owned(),
                    format!("redis://127.0.0.1:{redis_port}/0"),
                ),
            ])
            .collect(),
    );
    let api = format!("{host_addr}:{port}");
    let url = format!("http://{api}");
    let ns = format!("lifecycle:{stack}:sandbox:");

    step(
        "the host comes up on HOST_ADDR and announces itself in Redis",
        || {
            let up = compose.run(&["up", "-d"]);
            assert!(up.status.success(), "{}", text(&up));
            let mut last = String::new();
            let up = wait_until(60, || {
                let r = call_to(&api, "GET", "/health", None);
                last = format!("{} {}", r.status, r.body);
                r.status == 200
            });
            assert!(
                up,
                "the provisioner answers /health on HOST_ADDR: {last}\n{}",
                text(&compose.run(&["logs", "--no-color"]))
            );
            wait_for("the host's address in Redis", 30, || {
                redis_get(&redis, &format!("{ns}hosts:{host_name}")) == url
            });
        },
    );

    let sid = "6a1f0c3a9b7d2e55";
    let sandbox_url: String = step(
        "deer-flow's calls create, discover and list a sandbox published on HOST_ADDR",
        || {
            let out = python(&script(), &[&url, key, "create", sid, "u1", "t1", "[]"]);
            let line = out.lines().last().unwrap_or_default();
            let made: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {out}"));
            made["sandbox_url"].as_str().unwrap_or_default().to_owned()
        },
    );
    step(
        "the sandbox answers there; its claim and registry entry name the host",
        || {
            let addr = sandbox_url
                .strip_prefix("http://")
                .filter(|a| a.starts_with(&format!("{host_addr}:")))
                .unwrap_or_else(|| panic!("published on HOST_ADDR: {sandbox_url}"));
            // Polled as deer-flow does (up to 30 s): the create does not wait for the URL.
            assert!(
                wait_until(30, || answers(addr)),
                "no HTTP answer from {sandbox_url}"
            );
            assert_eq!(
                redis_get(&redis, &format!("{ns}{sid}")),
                format!("own:{host_name}")
            );
            let r = call_to(&api, "GET", &format!("/api/sandboxes/{sid}"), None);
            assert_eq!(
                (r.status, r.body["owner"].as_str()),
                (200, Some(host_name.as_str())),
                "{}",
                r.body
            );
        },
    );

    step("deer-flow's delete removes it", || {
        python(&script(), &[&url, key, "delete", sid]);
        let left = ps_names(&e.socket, &format!("name=^{stack}"));
        assert_eq!(left, "", "the sandbox is gone");
    });

    step(
        "down leaves nothing on the engine and withdraws the host",
        || {
            let down = compose.run(&["down", "-v"]);
            assert!(down.status.success(), "{}", text(&down));
            assert_nothing_left(&e.socket, &project, &stack);
            assert_eq!(
                redis_get(&redis, &format!("{ns}hosts:{host_name}")),
                "",
                "the host withdrew its address at shutdown"
            );
        },
    );
}
