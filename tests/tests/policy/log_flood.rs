//! The log guard on the real engine (`--log-flood-lines`, `--log-flood-seconds`): a sandbox that
//! prints as fast as it can, with or without a TTY, is stopped by its own stack's proxy, stays
//! stopped whatever its restart policy, and the stop is a decision line naming it; one that logs
//! steadily under the limit keeps running; after a stop, a flooder started again or a new one is
//! stopped at its first second over; each stop is counted in `sockproxy_decisions_total`.
//! Checked on what the engine holds (`State`), through the program as shipped.

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use serde_json::{json, Value};
use sockproxy_tests::engine::{real_engine, Cleanup};
use sockproxy_tests::multihost::{wait_for, wait_until};
use sockproxy_tests::step::step;
use sockproxy_tests::{bins, raw, unique_prefix};

/// The proxy program, killed when dropped.
struct Program {
    child: Child,
    log: std::path::PathBuf,
}

impl Program {
    /// The log guard's decision lines naming `name`, in order.
    fn stops(&self, name: &str) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["rule"] == "log_flood" && v["name"] == name)
            .collect()
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn create(sock: &Path, name: &str, body: &Value) {
    let b = body.to_string();
    let r = raw::request(
        sock,
        "POST",
        &format!("/containers/create?name={name}"),
        Some(b.as_bytes()),
    )
    .expect("create answers");
    assert_eq!(r.status, 201, "{name}: {}", r.text());
    let r = raw::request(sock, "POST", &format!("/containers/{name}/start"), None)
        .expect("start answers");
    assert_eq!(r.status, 204, "{name}: {}", r.text());
}

fn state(engine: &Path, name: &str) -> Value {
    let r = raw::get(engine, &format!("/containers/{name}/json")).expect("inspect answers");
    assert_eq!(r.status, 200, "{name}: {}", r.text());
    r.json()["State"].clone()
}

/// Waits (at most 60 s) for `name` to stop running on the engine; its `State` then.
fn stopped_within(engine: &Path, name: &str) -> Value {
    wait_for(&format!("{name} stopped"), 60, || {
        state(engine, name)["Running"] == false
    });
    state(engine, name)
}

#[test]
fn a_sandbox_flooding_its_log_is_stopped_and_a_steady_one_is_not() {
    let Some(e) = real_engine("a_sandbox_flooding_its_log_is_stopped_and_a_steady_one_is_not")
    else {
        return;
    };
    let prefix = unique_prefix();
    let dir = tempfile::tempdir().expect("dir");
    let sock = dir.path().join("stack.sock");
    let log = dir.path().join("sockproxy.log");
    let child = bins::sockproxy_command(&sock, &e.socket, &prefix)
        .args(["--log-flood-lines", "200", "--log-flood-seconds", "2"])
        .arg("--pin-dir")
        .arg(dir.path().join("pins"))
        .arg("--metrics-listen")
        .arg(dir.path().join("metrics.sock"))
        .env("SOCKPROXY_LOG_FORMAT", "json")
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("sockproxy starts");
    let program = Program { child, log };
    wait_for("the socket", 10, || sock.exists());
    let mut clean = Cleanup::new(&e.socket);
    let flood = clean.container(&format!("{prefix}sandbox-flood"));
    let tty = clean.container(&format!("{prefix}sandbox-ttyflood"));
    let steady = clean.container(&format!("{prefix}sandbox-steady"));
    let run = |cmd: &str, tty: bool| {
        json!({
            "Image": e.image, "Cmd": ["sh", "-c", cmd], "Tty": tty,
            "HostConfig": { "RestartPolicy": { "Name": "always" } },
        })
    };
    // About 20 lines a second: a chatty program, a tenth of the limit.
    create(
        &sock,
        &steady,
        &run("while :; do echo steady; sleep 0.05; done", false),
    );
    create(&sock, &flood, &run("yes flood", false));
    create(&sock, &tty, &run("yes tty", true));

    step(
        "both flooders are stopped; a restart policy of always does not bring them back",
        || {
            for name in [&flood, &tty] {
                let s = stopped_within(&e.socket, name);
                assert_eq!(s["ExitCode"], 137, "{name}: {s}");
            }
            std::thread::sleep(Duration::from_secs(3));
            for name in [&flood, &tty] {
                let s = state(&e.socket, name);
                assert_eq!(s["Running"], false, "{name} came back: {s}");
                assert_eq!(s["Restarting"], false, "{name}: {s}");
            }
        },
    );
    step("the steady one is still running", || {
        assert_eq!(state(&e.socket, &steady)["Running"], true);
    });
    step(
        "each stop is one decision line naming the container",
        || {
            for name in [&flood, &tty] {
                let mine = program.stops(name);
                assert_eq!(mine.len(), 1, "{name}: {mine:?}");
                assert_eq!(mine[0]["decision"], "stop");
                assert_eq!(mine[0]["status"], 204);
                assert_eq!(
                mine[0]["refusal"],
                format!(
                    "sockproxy: containers.stop: {name} logged at least 200 lines a second for 2 s (--log-flood-lines 200, --log-flood-seconds 2); stopped"
                )
            );
            }
            assert_eq!(program.stops(&steady), Vec::<Value>::new());
        },
    );
    step(
        "after a stop, a flooder started again or made anew is stopped at its first second over",
        || {
            let r = raw::request(&sock, "POST", &format!("/containers/{flood}/start"), None)
                .expect("start answers");
            assert_eq!(r.status, 204, "{}", r.text());
            let another = clean.container(&format!("{prefix}sandbox-flood2"));
            create(&sock, &another, &run("yes again", false));
            for (name, count) in [(&flood, 2), (&another, 1)] {
                stopped_within(&e.socket, name);
                // The line follows the engine's answer to the stop.
                wait_until(10, || program.stops(name).len() >= count);
                let mine = program.stops(name);
                assert_eq!(mine.len(), count, "{name}: {mine:?}");
                let last = &mine[count - 1];
                assert!(
                    last["refusal"]
                        .as_str()
                        .is_some_and(|m| m.contains("for 1 s")),
                    "{last}"
                );
            }
            assert_eq!(state(&e.socket, &steady)["Running"], true);
        },
    );
    step("the stops are counted as decisions", || {
        let m = raw::get(&dir.path().join("metrics.sock"), "/metrics").expect("metrics answer");
        let line = m
            .text()
            .lines()
            .find(|l| {
                l.starts_with("sockproxy_decisions_total{") && l.contains("decision=\"stop\"")
            })
            .map(str::to_owned)
            .unwrap_or_default();
        assert!(
            line.contains("reason=\"log_flood\"") && line.ends_with(" 4"),
            "{line:?}"
        );
    });
}

/// The proxy with the log guard at 200 lines a second for 3 s, its log in `log`.
fn guard(
    e: &sockproxy_tests::engine::Engine,
    sock: &Path,
    prefix: &str,
    log: &Path,
    state: &Path,
) -> Program {
    let child = bins::sockproxy_command(sock, &e.socket, prefix)
        .args(["--log-flood-lines", "200", "--log-flood-seconds", "3"])
        .arg("--state-dir")
        .arg(state)
        .env("SOCKPROXY_LOG_FORMAT", "json")
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("sockproxy starts");
    let program = Program {
        child,
        log: log.to_path_buf(),
    };
    wait_for("the socket", 10, || sock.exists());
    program
}

/// The seconds over the limit `program`'s one stop of `name` names.
fn stopped_after(engine: &Path, program: &Program, name: &str) -> String {
    stopped_within(engine, name);
    wait_until(10, || !program.stops(name).is_empty());
    let mine = program.stops(name);
    assert_eq!(mine.len(), 1, "{name}: {mine:?}");
    let m = mine[0]["refusal"].as_str().unwrap_or_default().to_owned();
    m.split(" a second for ")
        .nth(1)
        .and_then(|rest| rest.split(" (").next())
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_proxy_killed_and_started_again_keeps_the_repeat_window_in_its_state_dir() {
    let Some(e) =
        real_engine("a_proxy_killed_and_started_again_keeps_the_repeat_window_in_its_state_dir")
    else {
        return;
    };
    let prefix = unique_prefix();
    let dir = tempfile::tempdir().expect("dir");
    let kept_in = dir.path().join("state");
    let mut clean = Cleanup::new(&e.socket);
    let flood =
        |n: usize| json!({ "Image": e.image, "Cmd": ["sh", "-c", format!("yes flood{n}")] });
    let first = clean.container(&format!("{prefix}sandbox-flood1"));
    let second = clean.container(&format!("{prefix}sandbox-flood2"));
    let third = clean.container(&format!("{prefix}sandbox-flood3"));

    let mut program = guard(
        &e,
        &dir.path().join("a.sock"),
        &prefix,
        &dir.path().join("a.log"),
        &kept_in,
    );
    step(
        "a first flood is stopped after the full 3 s, and the stop is kept on disk",
        || {
            create(&dir.path().join("a.sock"), &first, &flood(1));
            assert_eq!(stopped_after(&e.socket, &program, &first), "3 s");
            // Written just after the stop's decision line.
            wait_for("the memory file", 10, || {
                kept_in.join("log-flood-stop").exists()
            });
            let kept =
                std::fs::read_to_string(kept_in.join("log-flood-stop")).expect("the memory file");
            assert!(kept.trim_end().parse::<u64>().is_ok(), "{kept:?}");
        },
    );
    step("killed (SIGKILL) and started again on the same --state-dir, the proxy stops the next flooder at its first second over", || {
        let _ = program.child.kill();
        let _ = program.child.wait();
        program = guard(&e, &dir.path().join("b.sock"), &prefix, &dir.path().join("b.log"), &kept_in);
        create(&dir.path().join("b.sock"), &second, &flood(2));
        assert_eq!(stopped_after(&e.socket, &program, &second), "1 s");
        let log = std::fs::read_to_string(dir.path().join("b.log")).unwrap_or_default();
        assert!(log.contains("stopped for flooding before this start"), "{log}");
    });
    step(
        "the control: started again on an empty --state-dir, the flooder gets the full 3 s",
        || {
            let _ = program.child.kill();
            let _ = program.child.wait();
            program = guard(
                &e,
                &dir.path().join("c.sock"),
                &prefix,
                &dir.path().join("c.log"),
                &dir.path().join("empty"),
            );
            create(&dir.path().join("c.sock"), &third, &flood(3));
            assert_eq!(stopped_after(&e.socket, &program, &third), "3 s");
        },
    );
    for name in [&first, &second, &third] {
        assert_eq!(state(&e.socket, name)["ExitCode"], 137, "{name}");
    }
}
