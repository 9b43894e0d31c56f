//! Issue 48, point 2: a crash at any step wedges nothing. The `lifecycle serve` binary runs
//! with a counting relay between it and the stack's sockproxy (`FaultRelay::cut_at`; no hook in
//! the shipped program) and is killed with SIGKILL after engine step k (a request that changes
//! the engine) of a create and of a teardown made through deer-flow's API, for every k, in open
//! and restricted mode, both when the engine acted and its answer never came back and when the
//! answer came back (the next request is then held). A provider restarted on the same state
//! finishes or undoes the step (its intent record) at start-up: nothing of the sandbox is left
//! (containers, networks, port reservations, quarantine and intent records), deer-flow's next
//! create of the thread works, and its delete leaves nothing either. The exhaustive sweep runs
//! on the fake engine; the real engine runs a subset (its own steps are slower), each case the
//! same way.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sockproxy_tests::crash::{scan_ledger, scan_ports};
use sockproxy_tests::engine::{real_engine, Engine};
use sockproxy_tests::lc::fault_relay::{Cut, FaultRelay};
use sockproxy_tests::raw;
use sockproxy_tests::serve_process::ServeProcess;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;

/// The create deer-flow sends (its own derivation of user-1/thread-1).
pub(crate) const ID: &str = "7d9ac0ff9b98cd06";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Create,
    Teardown,
}

#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// Cut at the step and killed there.
    Killed,
    /// The call ended before step k: there is no such step.
    Completed,
}

/// One stack on engine `e`: its proxy (with the mount root as its bind root), state, sockets.
pub(crate) struct Site<'e> {
    e: &'e Engine,
    mode: &'static str,
    pub(crate) prefix: String,
    pub(crate) proxy: StackProxy,
    root: PathBuf,
    state: tempfile::TempDir,
    dir: tempfile::TempDir,
    /// On a `nosuid,nodev` mount of its own, as a pinning proxy's bind root must be.
    _root: sockproxy_tests::bindroot::BindRootDir,
}

impl<'e> Site<'e> {
    pub(crate) fn new(e: &'e Engine, mode: &'static str) -> Self {
        let root_dir = sockproxy_tests::bindroot::BindRootDir::new("crashroot");
        let root = root_dir.path().to_owned();
        let prefix = sockproxy_tests::unique_prefix();
        let bind_root = root.clone();
        let proxy = StackProxy::start_with(&e.socket, &prefix, mode == "restricted", |c| {
            c.create_rules.bind_roots = vec![bind_root];
        });
        proxy.wait_names_live();
        Self {
            e,
            mode,
            prefix,
            proxy,
            root,
            state: tempfile::tempdir().expect("state"),
            dir: tempfile::tempdir().expect("sockets"),
            _root: root_dir,
        }
    }

    /// A provider on `engine_sock` (the relay, or the proxy itself), listening at `name`.
    fn provider(&self, engine_sock: &Path, name: &str) -> ServeProcess {
        self.provider_with(engine_sock, name, &[])
    }

    /// `provider` with more flags for `serve`.
    pub(crate) fn provider_with(
        &self,
        engine_sock: &Path,
        name: &str,
        serve: &[&str],
    ) -> ServeProcess {
        let root = self.root.display().to_string();
        let mut serve_flags = vec!["--mount-root", &root, "--tick", "1"];
        serve_flags.extend_from_slice(serve);
        let image = self.e.image.clone();
        ServeProcess::start_in(
            self.mode,
            engine_sock,
            &self.prefix,
            self.state.path(),
            self.dir.path().join(name),
            &[
                "--sidecar-image",
                &image,
                "--sidecar-cmd",
                "sleep 600",
                "--sandbox-cmd",
                "sleep 600",
                "--stop-timeout",
                "1",
                "--ready-timeout",
                "0",
            ],
            &serve_flags,
        )
    }

    /// Everything of the stack the engine holds, and every reservation and record in its
    /// state: what must be empty once nothing of the sandbox is left. (`{P}net` is the proxy's
    /// own network, not the sandbox's.)
    pub(crate) fn leftovers(&self) -> Vec<String> {
        let mut out = Vec::new();
        let names = |path: &str, key: &str| -> Vec<String> {
            raw::get(&self.e.socket, path)
                .map(|r| r.json())
                .unwrap_or(Value::Null)
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|o| match &o[key] {
                    Value::Array(a) => a
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect(),
                    Value::String(s) => vec![s.clone()],
                    _ => vec![],
                })
                .map(|n| n.trim_start_matches('/').to_owned())
                .filter(|n| n.starts_with(&self.prefix))
                .collect()
        };
        for c in names("/containers/json?all=1", "Names") {
            out.push(format!("container {c}"));
        }
        let own = format!("{}net", self.prefix);
        for n in names("/networks", "Name").into_iter().filter(|n| *n != own) {
            out.push(format!("network {n}"));
        }
        for (path, _) in scan_ports(self.state.path()) {
            out.push(format!("port reservation {}", path.display()));
        }
        let ledger = lifecycle::ledger::Ledger::new(self.state.path(), &self.prefix);
        for (key, d) in scan_ledger(ledger.dir()) {
            if !d.records.is_empty() {
                out.push(format!("quarantine records of {key}"));
            }
        }
        let intents = lifecycle::intent::Intents::new(self.state.path(), &self.prefix);
        for id in intents.open().unwrap_or_default() {
            out.push(format!("intent record of {id}"));
        }
        out
    }

    /// Waits (bounded) until `leftovers` is empty; what is left after 30 s otherwise.
    fn settled(&self) -> Vec<String> {
        let start = Instant::now();
        loop {
            let left = self.leftovers();
            if left.is_empty() || start.elapsed() > Duration::from_secs(30) {
                return left;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Site<'_> {
    /// On a real engine the stack's containers and networks go, however the case ended.
    fn drop(&mut self) {
        if !self.e.is_fake() {
            sockproxy_tests::engine::remove_stack(&self.e.socket, &self.prefix);
        }
    }
}

pub(crate) fn create_body() -> Vec<u8> {
    json!({"sandbox_id": ID, "thread_id": "thread-1", "user_id": "user-1"})
        .to_string()
        .into_bytes()
}

/// deer-flow's create on `sock`: the answer.
pub(crate) fn create(sock: &Path) -> std::io::Result<raw::RawResponse> {
    raw::request(sock, "POST", "/api/sandboxes", Some(&create_body()))
}

fn delete(sock: &Path) -> std::io::Result<raw::RawResponse> {
    raw::request(sock, "DELETE", &format!("/api/sandboxes/{ID}"), None)
}

/// One case: a provider through the relay, cut at `cut` during `phase`, killed there; a
/// provider restarted on the proxy itself; then the checks.
fn run(e: &Engine, mode: &'static str, phase: Phase, cut: Cut) -> Ended {
    let what = format!("{mode} {phase:?} {cut:?}");
    let site = Site::new(e, mode);
    let relay = FaultRelay::start(site.proxy.socket());
    let mut first = site.provider(relay.socket(), "first.sock");
    if phase == Phase::Teardown {
        let made = create(&first.sock).expect("the create answers");
        assert_eq!(made.status, 200, "{what}: {}", made.text());
    }
    let gate = relay.cut_at(cut);
    let sock = first.sock.clone();
    let call = std::thread::spawn(move || match phase {
        Phase::Create => create(&sock),
        Phase::Teardown => delete(&sock),
    });
    let start = Instant::now();
    let ended = loop {
        if gate.wait_arrived_within(Duration::from_millis(20)) {
            break Ended::Killed;
        }
        if call.is_finished() {
            break Ended::Completed;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: neither the cut nor the answer came"
        );
    };
    first.kill9();
    drop(relay);
    let answered = call.join().expect("the call's thread");
    if ended == Ended::Completed {
        let r = answered.expect("an answer");
        assert_eq!(r.status, 200, "{what}: {}", r.text());
    }
    let second = site.provider(site.proxy.socket(), "second.sock");
    // The restarted provider finished or undid the step at start-up: nothing is left (unless
    // the create completed, whose sandbox is there and adopted).
    if !(phase == Phase::Create && ended == Ended::Completed) {
        let left = site.settled();
        assert!(
            left.is_empty(),
            "{what}: left after the restart: {left:?}\n{}",
            second.stderr()
        );
    }
    // deer-flow's next create of the thread works: the sandbox runs.
    let made = create(&second.sock).expect("the create answers");
    assert_eq!(
        made.status,
        200,
        "{what}: {}\n{}",
        made.text(),
        second.stderr()
    );
    let c = raw::get(
        &e.socket,
        &format!("/containers/{}sandbox-{ID}/json", site.prefix),
    )
    .expect("inspect");
    assert_eq!(c.json()["State"]["Running"], json!(true), "{what}");
    let gone = delete(&second.sock).expect("the delete answers");
    assert_eq!(gone.status, 200, "{what}: {}", gone.text());
    let left = site.settled();
    assert!(left.is_empty(), "{what}: left after the delete: {left:?}");
    ended
}

/// Every k of `phase` in `mode`, each way of cutting, until the step count is passed; the
/// number of crash points of each way.
fn sweep(e: &Engine, mode: &'static str, phase: Phase) -> (u32, u32) {
    let mut points = (0, 0);
    for (n, cut) in [
        (&mut points.0, Cut::Acted as fn(u32) -> Cut),
        (&mut points.1, Cut::Answered as fn(u32) -> Cut),
    ] {
        for k in 1..=16 {
            match run(e, mode, phase, cut(k)) {
                Ended::Killed => *n += 1,
                Ended::Completed => break,
            }
        }
    }
    points
}

/// Every engine step of a create and a teardown, open and restricted, killed after it both
/// ways, on the fake engine.
#[test]
fn a_provider_killed_after_any_engine_step_wedges_nothing() {
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let started = Instant::now();
    let mut counts = Vec::new();
    for mode in ["open", "restricted"] {
        for phase in [Phase::Create, Phase::Teardown] {
            let points = step(&format!("{mode} {phase:?}: every step, both ways"), || {
                sweep(&e, mode, phase)
            });
            counts.push((mode, phase, points));
        }
    }
    eprintln!(
        "crash points (after the engine acted, after its answer) {counts:?} in {:?}",
        started.elapsed()
    );
    // What lifecycle asks the engine to change: a create is 2 steps open (create, start) and 7
    // restricted (two networks, the sidecar's create, connect and start, the sandbox's create
    // and start); a teardown 2 (stop, remove) and 6 (both containers' stop and remove, two
    // networks). A cut after an answer needs a request after it: a create has one (the check
    // that its container runs), an open teardown too (the check that its container is gone),
    // a restricted teardown's last step (its egress network's removal) none.
    assert_eq!(
        counts,
        vec![
            ("open", Phase::Create, (2, 2)),
            ("open", Phase::Teardown, (2, 2)),
            ("restricted", Phase::Create, (7, 7)),
            ("restricted", Phase::Teardown, (6, 5)),
        ]
    );
}

/// The same on the real engine, for a subset of the points: the sidecar made and its network
/// joined, the sandbox started, the sandbox stopped, and the sidecar removed.
#[test]
fn on_the_real_engine_a_provider_killed_mid_step_wedges_nothing() {
    let test = "on_the_real_engine_a_provider_killed_mid_step_wedges_nothing";
    let Some(e) = real_engine(test) else {
        return;
    };
    let started = Instant::now();
    for (mode, phase, cut) in [
        ("restricted", Phase::Create, Cut::Acted(3)),
        ("restricted", Phase::Create, Cut::Answered(4)),
        ("restricted", Phase::Teardown, Cut::Acted(1)),
        ("restricted", Phase::Teardown, Cut::Answered(4)),
        ("open", Phase::Create, Cut::Answered(2)),
        ("open", Phase::Teardown, Cut::Acted(2)),
    ] {
        let ended = step(&format!("{mode} {phase:?} {cut:?}"), || {
            run(&e, mode, phase, cut)
        });
        assert_eq!(ended, Ended::Killed, "{mode} {phase:?} {cut:?}");
    }
    eprintln!("{test}: 6 cases in {:?}", started.elapsed());
}
