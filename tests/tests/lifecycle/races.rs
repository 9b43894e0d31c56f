//! Issue 15's races between lifecycle processes (cases 3 and 4), run as real processes of the
//! `lifecycle` binary on the fake engine and on the real dockerd, behind the real sockproxy,
//! with a fault relay in front of it holding one request for a while (as the delayed
//! stop). The hold is released after a fixed pause or when the other processes are done; no
//! assertion depends on timing. Also case 7 (an `--rm` container's removal) on the real engine.
//! `LIFECYCLE_TEST_BIN` runs them against another build of the binary (an older one, to see
//! them fail).

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use lifecycle::ledger::Ledger;
use lifecycle::naming::sandbox_id;
use lifecycle::ports::Ports;
use sockproxy_tests::bounded::{OutputWithin, WaitWithin, LONG};
use sockproxy_tests::engine::{each_engine, real_engine, Cleanup, Engine, Fakes};
use sockproxy_tests::lc::fault_relay::FaultRelay;
use sockproxy_tests::lc::{lifecycle_command, names};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

/// How long a held request waits before it goes on (the stop was delayed 3 s).
const HOLD: Duration = Duration::from_secs(2);

struct Race {
    engine: Engine,
    // Declared before the proxy it relays to, so it stops first.
    relay: FaultRelay,
    _proxy: StackProxy,
    prefix: String,
    state: tempfile::TempDir,
    clean: Cleanup,
}

impl Race {
    fn new(engine: Engine, thread: &str) -> (Self, String) {
        let prefix = unique_prefix();
        let id = sandbox_id("user-1", thread).expect("valid");
        let mut clean = Cleanup::new(&engine.socket);
        let n = names(&prefix, &id);
        clean.container(&n.sandbox);
        let proxy = StackProxy::start(&engine.socket, &prefix, false);
        let relay = FaultRelay::start(proxy.socket());
        let race = Self {
            engine,
            relay,
            _proxy: proxy,
            prefix,
            state: tempfile::tempdir().expect("dir"),
            clean,
        };
        (race, id)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let (cmd, ready) = if self.engine.is_fake() {
            ("sleep 600", "0")
        } else {
            ("httpd -f -p 8080 -h /tmp", "30")
        };
        let mut c = lifecycle_command(self.relay.socket(), &self.prefix, "open", self.state.path());
        c.args(["--sandbox-cmd", cmd, "--ready-timeout", ready])
            .args(["--stop-timeout", "1"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output_within(LONG).expect("lifecycle runs")
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args).spawn().expect("lifecycle starts")
    }

    fn socket(&self) -> &Path {
        &self.engine.socket
    }

    fn ledger(&self) -> Ledger {
        Ledger::new(self.state.path(), &self.prefix)
    }

    fn ports(&self) -> Ports {
        Ports::new(self.state.path())
    }

    fn running(&self, reference: &str) -> bool {
        raw::get(self.socket(), &format!("/containers/{reference}/json"))
            .is_ok_and(|r| r.status == 200 && r.json()["State"]["Running"] == true)
    }
}

fn ok_json(o: &Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not one JSON value ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

/// Waits for the held request, then lets it go on after `HOLD`.
fn release_later(gate: sockproxy_tests::lc::fault_relay::Gate) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        // Released either way, so a build that never sends it fails instead of hanging.
        if gate.wait_arrived() {
            std::thread::sleep(HOLD);
        }
        gate.release();
    })
}

/// Case 3: three processes create the sandbox of one thread whose running generation G1 is
/// quarantined; the first stop of G1 is held. They end with one live sandbox that all three
/// report, with its port reserved, and no stop ever names the sandbox instead of an ID.
#[test]
fn racing_creates_end_with_one_live_sandbox_that_all_report() {
    each_engine(
        "racing_creates_end_with_one_live_sandbox_that_all_report",
        Fakes::Debian,
        |engine| {
            let label = engine.label();
            let (mut r, _) = Race::new(engine, "race-create");
            let create = ["create", "--user", "user-1", "--thread", "race-create"];
            let first = ok_json(&r.run(&create));
            // The ID and name as the binary under test derives them (LIFECYCLE_TEST_BIN).
            let field = |k: &str| first[k].as_str().unwrap_or_default().to_owned();
            let (id, g1) = (field("sandbox_id"), field("container_id"));
            r.clean.container(&field("container_name"));
            ok_json(&r.run(&["quarantine", "mark", &id]));
            let gate = r.relay.hold_once("POST", "/stop");
            let children: Vec<Child> = (0..3).map(|_| r.spawn(&create)).collect();
            let releaser = release_later(gate);
            let outs: Vec<serde_json::Value> = children
                .into_iter()
                .map(|c| ok_json(&c.output_within(LONG).expect("wait")))
                .collect();
            releaser.join().expect("releaser");
            let live = outs[0]["container_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            for o in &outs {
                assert_eq!(o["container_id"], live.as_str(), "{label}: {outs:?}");
            }
            assert_ne!(live, g1, "{label}");
            assert!(r.running(&live), "{label}: the sandbox all report is live");
            assert!(
                !r.running(&g1),
                "{label}: the quarantined generation is gone"
            );
            let port = outs[0]["host_port"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok());
            assert_eq!(r.ports().get(&id, &live).expect("read"), port, "{label}");
            assert!(!r.ledger().is_quarantined(&id).expect("read"), "{label}");
            let name = names(&r.prefix, &id).sandbox;
            let by_name: Vec<String> = r
                .relay
                .requests()
                .into_iter()
                .filter(|l| {
                    l.contains(&format!("/containers/{name}/stop"))
                        || l.contains(&live) && l.contains("/stop")
                })
                .collect();
            assert!(by_name.is_empty(), "{label}: {by_name:?}");
        },
    );
}

/// Case 4: a `retire` confirmed G1 absent and is held in its teardown's listing while a create
/// in the same thread runs. The create's new generation keeps its port.
#[test]
fn a_stale_retire_never_frees_a_live_generations_port() {
    each_engine(
        "a_stale_retire_never_frees_a_live_generations_port",
        Fakes::Debian,
        |engine| {
            let label = engine.label();
            let (mut r, _) = Race::new(engine, "race-retire");
            let create = ["create", "--user", "user-1", "--thread", "race-retire"];
            let first = ok_json(&r.run(&create));
            // The ID and name as the binary under test derives them (LIFECYCLE_TEST_BIN).
            let field = |k: &str| first[k].as_str().unwrap_or_default().to_owned();
            let (id, g1) = (field("sandbox_id"), field("container_id"));
            r.clean.container(&field("container_name"));
            ok_json(&r.run(&["quarantine", "mark", &id]));
            let rm = raw::request(
                r.socket(),
                "DELETE",
                &format!("/containers/{g1}?force=1"),
                None,
            )
            .expect("rm");
            assert_eq!(rm.status, 204, "{label}: removed out of band");
            let gate = r.relay.hold_once("GET", "/containers/json");
            let retire = r.spawn(&["retire"]);
            assert!(
                gate.wait_arrived(),
                "{label}: the retire's listing never came"
            );
            let creator = r.spawn(&create);
            std::thread::sleep(HOLD);
            gate.release();
            let retired = retire.output_within(LONG).expect("wait");
            assert!(
                retired.status.success(),
                "{label}: {}",
                String::from_utf8_lossy(&retired.stderr)
            );
            let made = ok_json(&creator.output_within(LONG).expect("wait"));
            let g2 = made["container_id"].as_str().unwrap_or_default().to_owned();
            let port = made["host_port"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok());
            assert!(port.is_some(), "{label}: {made}");
            // Whatever the ports' layout: the retire did not say it released the live one's port.
            let said = String::from_utf8_lossy(&retired.stdout).into_owned();
            for line in said.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
                let released: Vec<u64> = match (&v["ports_released"], &v["port_released"]) {
                    (serde_json::Value::Array(a), _) => {
                        a.iter().filter_map(|p| p.as_u64()).collect()
                    }
                    (_, p) => p.as_u64().into_iter().collect(),
                };
                assert!(
                    !released.contains(&made["host_port"].as_u64().unwrap_or_default()),
                    "{label}: the stale retire released the live generation's port: {said}"
                );
            }
            assert!(r.running(&g2), "{label}");
            assert_eq!(
                r.ports().get(&id, &g2).expect("read"),
                port,
                "{label}: the live generation's port is still reserved"
            );
            assert!(!r.ledger().is_quarantined(&id).expect("read"), "{label}");
        },
    );
}

/// Case 7 on the real engine: destroying an `--rm` container (which removes itself once
/// stopped, so the remove right after usually gets 409 "already in progress") succeeds.
#[test]
fn destroying_an_auto_remove_container_succeeds_on_the_real_engine() {
    let Some(engine) =
        real_engine("destroying_an_auto_remove_container_succeeds_on_the_real_engine")
    else {
        return;
    };
    let (r, id) = Race::new(engine, "autoremove");
    let name = names(&r.prefix, &id).sandbox;
    let body = serde_json::json!({
        "Image": sockproxy_tests::engine::TEST_IMAGE,
        "Cmd": ["sleep", "600"],
        "Labels": { "deerflow.network_mode": "open", "deerflow.role": "sandbox" },
        "HostConfig": { "AutoRemove": true },
    });
    let made = raw::request(
        r.socket(),
        "POST",
        &format!("/containers/create?name={name}"),
        Some(body.to_string().as_bytes()),
    )
    .expect("create");
    assert_eq!(made.status, 201, "{}", made.text());
    let started = raw::request(
        r.socket(),
        "POST",
        &format!("/containers/{name}/start"),
        None,
    )
    .expect("start");
    assert_eq!(started.status, 204);
    let done = ok_json(&r.run(&["destroy", &id]));
    assert_eq!(done["destroyed"], true);
    let gone = raw::get(r.socket(), &format!("/containers/{name}/json")).expect("inspect");
    assert_eq!(gone.status, 404);
    assert!(!r.ledger().is_quarantined(&id).expect("read"));
}
