//! deer-flow's gateway, replayed (issue 13). The docker CLI sequences its container backend
//! (`LocalContainerBackend`, bytedance/deer-flow) runs — upstream's open mode (`run --rm -d
//! --security-opt seccomp=unconfined -p 127.0.0.1:PORT:8080 --mount …`, `inspect -f
//! {{.State.Running}}`, `port`, `ps --filter name=…`, batched `inspect`, `stop`) plus the labelled
//! and restricted-mode sequences issue 13 lists (its sidecar, internal and egress networks,
//! `exec -i` with stdin, the destroy order) — run twice with the real docker CLI: directly
//! against an engine, and through a sockproxy for the prefix `deer-flow-` (open steps through a
//! plain proxy, restricted steps through `--restricted`). Each step must exit the same way and
//! print the same thing, after normalization (`sockproxy_tests::deerflow`); where the two must
//! differ, the proxied output's own property is checked instead (marked below).
//!
//! Engines: the fake in both flavors (the 20.10 CLI cannot talk to the docker-29 flavor, whose
//! minimum API is 1.44, so only a newer CLI runs there; none at all is a skip) and the real
//! dockerd (skipped with a notice when none answers, never with `CI=true`). Names carry a random (user, thread), and
//! everything a run makes is removed from the engine afterwards.

use std::path::Path;

use serde_json::{json, Value};

use sockproxy_tests::cli::{clis, docker_with};
use sockproxy_tests::deerflow::{
    differences, replay, BindRoot, Compare, Masks, Names, Printed, Step, PREFIX, UPSTREAM_MOUNTS,
};
use sockproxy_tests::engine::{each_engine, Cleanup, Engine, Fakes};
use sockproxy_tests::skip::skip;
use sockproxy_tests::stack::StackProxy;

/// The capabilities deer-flow's sandbox adds (issue 13) and the one its images may need.
const CAPS: [&str; 6] = [
    "CHOWN",
    "FOWNER",
    "SETUID",
    "SETGID",
    "DAC_OVERRIDE",
    "NET_BIND_SERVICE",
];

/// Two host ports nobody listens on now (deer-flow's `get_free_port` does the same), told apart:
/// both are held until both are known, since a port let go can be the next one handed out, and
/// the masks then read the second sandbox's port as the first's.
fn free_ports() -> (u16, u16) {
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    let (a, b) = (bind(), bind());
    let port = |l: &std::net::TcpListener| l.local_addr().expect("its address").port();
    (port(&a), port(&b))
}

/// The stack name `StackProxy` gives a proxy: what a scoped `docker info` must call itself.
fn stack_name() -> String {
    format!("test-{PREFIX}")
}

/// A long-running command that stops at once on SIGTERM (busybox as PID 1 would otherwise wait
/// out `docker stop`'s 10 s); the fake's interpreter knows `sleep` only.
fn serve_cmd(e: &Engine) -> Vec<String> {
    let cmd: &[&str] = if e.is_fake() {
        &["sleep", "600"]
    } else {
        &[
            "sh",
            "-c",
            "trap 'exit 0' TERM; while true; do sleep 1; done",
        ]
    };
    cmd.iter().map(|s| (*s).to_owned()).collect()
}

/// deer-flow's `docker run` (`_start_container`, with issue 13's labels and caps) for the
/// sandbox named by `id` (a placeholder), open (published port) or on a network.
fn sandbox_run(e: &Engine, label: &'static str, id: &str, mode: &str, net: Option<&str>) -> Step {
    let publish = if net.is_some() || id != "<id>" {
        String::new()
    } else {
        "-p 127.0.0.1:<port>:8080".into()
    };
    let mut line = format!(
        "run --security-opt seccomp=unconfined --rm -d {publish} --name deer-flow-sandbox-{id} \
         --label deerflow.sandbox_id={id} --label deerflow.role=sandbox \
         --label deerflow.network_mode={mode} {} -e SANDBOX_ID={id} \
         -v <bindroot>/threads/thread-1/user-data:/mnt/user-data \
         --mount type=bind,src=<bindroot>/skills,dst=/mnt/skills,readonly",
        CAPS[..5]
            .iter()
            .map(|c| format!("--cap-add {c}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    if let Some(net) = net {
        line += &format!(
            " -e HTTP_PROXY=http://deer-flow-netproxy-<d>:8080 \
             -e HTTPS_PROXY=http://deer-flow-netproxy-<d>:8080 --network {net}"
        );
    }
    let mut step = Step::cmd(label, true, &format!("{line} <image>"));
    step.args.extend(serve_cmd(e));
    step
}

/// Today's upstream `_start_container`, unchanged: no labels or capabilities, environment from
/// `sandbox.environment` (an empty value among it), and every bind mount `_get_extra_mounts`
/// gives a thread, as `--mount type=bind,…`. Only the command after the image is ours (the
/// test image has none of its own).
fn upstream_run(e: &Engine, label: &'static str, id: &str) -> Step {
    let mounts: Vec<String> = UPSTREAM_MOUNTS
        .iter()
        .map(|(src, dst, ro)| {
            let ro = if *ro { ",readonly" } else { "" };
            format!("--mount type=bind,src=<bindroot>/{src},dst={dst}{ro}")
        })
        .collect();
    let line = format!(
        "run --security-opt seccomp=unconfined --rm -d -p 127.0.0.1:<port2>:8080 \
         --name deer-flow-sandbox-{id} -e TZ=UTC -e EMPTY= {} <image>",
        mounts.join(" ")
    );
    let mut step = Step::cmd(label, true, &line);
    step.args.extend(serve_cmd(e));
    step
}

fn running(label: &'static str, ok: bool, name: &str) -> Step {
    Step::cmd(
        label,
        ok,
        &format!("inspect -f {{{{.State.Running}}}} {name}"),
    )
}

const SANDBOX: &str = "deer-flow-sandbox-<id>";
const SANDBOX2: &str = "deer-flow-sandbox-<id2>";
const SIDECAR: &str = "deer-flow-netproxy-<d>";
const NET: &str = "deer-flow-sandbox-net-<d>";
const EGRESS: &str = "deer-flow-sandbox-egress-<d>";

/// Open mode: upstream's create, discover, list and destroy, by name and by ID.
fn open_steps(e: &Engine) -> Vec<Step> {
    let (s, s2) = (SANDBOX, SANDBOX2);
    let mut again = sandbox_run(e, "run (same name again)", "<id>", "open", None);
    again.learn = Some("sandbox-id-again");
    // deer-flow reads this refusal's words ("Conflict. The container name", "is already in use
    // by container") and adopts the sandbox that holds the name: they must come through as the
    // engine says them.
    let mut taken = sandbox_run(e, "run (name taken)", "<id>", "open", None);
    taken.ok = false;
    vec![
        Step::cmd("version", true, "version --format {{.Server.Version}}"),
        Step::cmd("info OS", true, "info --format '{{json .OperatingSystem}}'"),
        running("is_alive before create", false, s),
        sandbox_run(e, "run (open)", "<id>", "open", None).learn("sandbox-id"),
        running("is_alive", true, s),
        taken,
        Step::cmd("port", true, &format!("port {s} 8080")),
        Step::cmd(
            "ps by label and name",
            true,
            &format!(
                "ps -a --filter label=deerflow.role=sandbox --filter name={s} \
                 --format '{{{{.Names}}}}|{{{{.Label \"deerflow.sandbox_id\"}}}}|{{{{.Ports}}}}'"
            ),
        ),
        // Upstream's list_running: every running `deer-flow-sandbox-*` on the engine. The
        // direct listing may include other tenants' sandboxes; compare this run's lines.
        Step::cmd(
            "list_running",
            true,
            "ps --filter name=deer-flow-sandbox- --format {{.Names}}",
        )
        .compare(Compare::OwnLines),
        Step::cmd(
            "batched inspect with a missing name",
            false,
            &format!("inspect {s} {s2}"),
        ),
        // Direct shows every container on the bridge; proxied only the stack's own, and it has
        // none there: its sandboxes are on its own network.
        Step::cmd("network inspect bridge", true, "network inspect bridge")
            .compare(Compare::Property),
        // Direct describes the host; proxied describes the stack alone.
        Step::cmd("info (all of it)", true, "info --format '{{json .}}'")
            .compare(Compare::Property),
        upstream_run(e, "run (second sandbox, upstream's mounts)", "<id2>").learn("sandbox2-id"),
        Step::cmd("port (second sandbox)", true, &format!("port {s2} 8080")),
        Step::cmd("stop by name", true, &format!("stop {s}")).gone(s),
        running("is_alive after stop", false, s),
        Step::cmd("stop by ID", true, "stop <sandbox2-id>").gone(s2),
        Step::cmd("rm -f by ID, already gone", true, "rm -f <sandbox2-id>"),
        Step::cmd("rm -f by name, already gone", true, &format!("rm -f {s}")),
        again,
        Step::cmd("rm -f running, by name", true, &format!("rm -f {s}")).gone(s),
        Step::cmd("inspect, both missing", false, &format!("inspect {s} {s2}")),
    ]
}

/// Restricted mode: networks, sidecar (configured over `exec -i`), sandbox, destroy.
fn restricted_steps(e: &Engine) -> Vec<Step> {
    let (s, side, net, egress) = (SANDBOX, SIDECAR, NET, EGRESS);
    let mut create = Step::cmd(
        "create sidecar",
        true,
        &format!(
            "create --rm --cap-drop=ALL --read-only --tmpfs /tmp --user 65532:65532 \
             -p 127.0.0.1:<port>:8080 --network {egress} --name {side} \
             --label deerflow.role=netproxy --label deerflow.sandbox_id=<id> <image>"
        ),
    )
    .learn("sidecar-id");
    create.args.extend(serve_cmd(e));
    let ps_format = "'{{.Names}}|{{.Label \"deerflow.role\"}}'";
    vec![
        Step::cmd("version", true, "version --format {{.Server.Version}}"),
        Step::cmd(
            "network inspect, missing",
            false,
            &format!("network inspect {net}"),
        ),
        Step::cmd(
            "network create internal",
            true,
            &format!(
                "network create --internal \
                 --opt com.docker.network.bridge.gateway_mode_ipv4=isolated {net}"
            ),
        )
        .learn("net-id"),
        Step::cmd(
            "network create egress",
            true,
            &format!("network create --opt com.docker.network.bridge.enable_icc=false {egress}"),
        )
        .learn("egress-id"),
        Step::cmd("network inspect", true, &format!("network inspect {net}")),
        running("sidecar alive before create", false, side),
        create,
        Step::cmd(
            "network connect",
            true,
            &format!("network connect {net} {side}"),
        ),
        Step::cmd("start sidecar", true, &format!("start {side}")),
        Step::cmd("exec -i with stdin", true, &format!("exec -i {side} cat"))
            .stdin(b"{\"allow\": [\"example.test\"]}\n"),
        running("is_alive before create", false, s),
        sandbox_run(
            e,
            "run sandbox on the internal network",
            "<id>",
            "allowlist",
            Some(net),
        )
        .learn("sandbox-id"),
        Step::cmd("batched inspect", true, &format!("inspect {s} {side}")),
        Step::cmd(
            "network inspect with both",
            true,
            &format!("network inspect {net}"),
        ),
        Step::cmd(
            "ps by sandbox id",
            true,
            &format!("ps -a --filter label=deerflow.sandbox_id=<id> --format {ps_format}"),
        ),
        Step::cmd("stop sidecar", true, &format!("stop {side}")).gone(side),
        Step::cmd("rm -f sidecar", true, &format!("rm -f {side}")),
        Step::cmd("stop sandbox", true, &format!("stop {s}")).gone(s),
        Step::cmd("network rm internal", true, &format!("network rm {net}")),
        Step::cmd("network rm egress", true, &format!("network rm {egress}")),
        Step::cmd("inspect, both gone", false, &format!("inspect {s} {side}")),
        Step::cmd(
            "network inspect, gone",
            false,
            &format!("network inspect {net}"),
        ),
    ]
}

fn first(p: &Printed) -> Result<&Value, String> {
    p.json
        .as_ref()
        .and_then(|v| v.get(0).or(Some(v)))
        .ok_or_else(|| format!("{}: not JSON: {:?}", p.label, p.stdout))
}

/// The checks for steps whose proxied output legitimately differs from the engine's.
fn property(step: &Step, d: &Printed, p: &Printed) -> Result<(), String> {
    let (dv, pv) = (first(d)?, first(p)?);
    match step.label {
        "network inspect bridge" => {
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Some(o) = v.as_object_mut() {
                    o.remove("Containers");
                }
                v
            };
            if strip(dv) != strip(pv) {
                return Err(format!(
                    "bridge differs beyond Containers:\n{}\n{}",
                    d.stdout, p.stdout
                ));
            }
            let names: Vec<&str> = pv["Containers"]
                .as_object()
                .map(|m| m.values().filter_map(|c| c["Name"].as_str()).collect())
                .unwrap_or_default();
            if names.iter().any(|n| !n.starts_with(PREFIX)) {
                return Err(format!("a foreign container is listed: {names:?}"));
            }
            // The stack's sandbox is on the stack's own network, not the shared bridge.
            if !names.is_empty() {
                return Err(format!(
                    "the stack's containers are on the bridge: {names:?}"
                ));
            }
            Ok(())
        }
        "info (all of it)" => {
            let mut bad = Vec::new();
            for (key, want) in [
                ("ID", json!("")),
                ("Name", json!(stack_name())),
                ("Images", json!(0)),
                ("DockerRootDir", json!("")),
                ("ServerVersion", dv["ServerVersion"].clone()),
                ("OperatingSystem", dv["OperatingSystem"].clone()),
                ("OSType", dv["OSType"].clone()),
                ("Architecture", dv["Architecture"].clone()),
            ] {
                if pv[key] != want {
                    bad.push(format!("{key} is {} (want {want})", pv[key]));
                }
            }
            if pv["Swarm"]["LocalNodeState"] != json!("inactive") {
                bad.push(format!("Swarm is {}", pv["Swarm"]));
            }
            for key in [
                "Labels",
                "RegistryConfig",
                "HttpProxy",
                "HttpsProxy",
                "NoProxy",
            ] {
                if !is_empty(&pv[key]) {
                    bad.push(format!("{key} is shown: {}", pv[key]));
                }
            }
            if pv["Plugins"]
                .as_object()
                .is_some_and(|m| m.values().any(|v| !is_empty(v)))
            {
                bad.push(format!("plugins are shown: {}", pv["Plugins"]));
            }
            // Counts are the stack's own: at least its running sandbox. (No upper bound from
            // the direct run: other replays on a shared engine come and go between the two.)
            let count = |k: &str| pv[k].as_i64().unwrap_or(-1);
            let (all, running) = (count("Containers"), count("ContainersRunning"));
            let parts = count("ContainersPaused") + count("ContainersStopped") + running;
            if running < 1 || all < running || parts != all {
                bad.push(format!("counts {all} = {parts}, {running} running"));
            }
            if bad.is_empty() {
                Ok(())
            } else {
                Err(bad.join("; "))
            }
        }
        other => Err(format!("no property check for {other}")),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.values().all(is_empty),
        _ => false,
    }
}

/// The CLIs that can talk to `e`. A CLI whose API version is below the engine's minimum (the
/// 20.10 CLI's 1.41 against the docker-29 flavor's 1.44) is left out: dockerd refuses it the
/// same way, so that pairing does not exist in the field. Any other failure to talk is a skip
/// (`skip::skip`), and so is an engine no CLI on `PATH` speaks to.
fn usable_clis(e: &Engine, test: &str) -> Vec<std::path::PathBuf> {
    let usable: Vec<_> = clis()
        .into_iter()
        .filter(|cli| {
            let v = docker_with(
                cli,
                &e.socket,
                &["version"],
                None,
                std::time::Duration::from_secs(60),
            );
            if v.ok() {
                return true;
            }
            let why = format!(
                "{} cannot talk to {} ({})",
                cli.display(),
                e.label(),
                v.stderr.trim()
            );
            if v.stderr
                .contains("is too old. Minimum supported API version is")
            {
                eprintln!("{test}: {why}; not a pairing dockerd serves either");
            } else {
                skip(
                    test,
                    &why,
                    "a docker CLI that speaks the engine's API on PATH",
                );
            }
            false
        })
        .collect();
    if usable.is_empty() {
        skip(
            test,
            &format!(
                "the replay on {}: no docker CLI on PATH speaks its API",
                e.label()
            ),
            "install a docker CLI of API 1.44 or newer, e.g. docker-ce-cli",
        );
    }
    usable
}

/// Replays one mode directly and through a proxy with `cli`; returns every problem found.
/// With `self_check`, the second run is direct too: the harness's own test that two
/// independent runs normalize to the same outputs (the property steps are skipped there).
fn replay_mode(e: &Engine, cli: &Path, restricted: bool, self_check: bool) -> Vec<String> {
    let bind = BindRoot::create();
    let bind_root = bind.root.clone();
    let proxy = StackProxy::start_with(&e.socket, PREFIX, restricted, |c| {
        c.create_rules.allow_caps = CAPS.iter().map(|c| (*c).to_owned()).collect();
        c.create_rules.bind_roots = vec![bind_root];
        c.create_rules.allow_seccomp_unconfined = true;
    });
    let mut problems = Vec::new();
    let mut printed: Vec<(Vec<Step>, Vec<Printed>)> = Vec::new();
    let second = if self_check {
        e.socket.as_path()
    } else {
        proxy.socket()
    };
    for (via, sock) in [("directly", e.socket.as_path()), ("second", second)] {
        let (n, n2) = (Names::random("a"), Names::random("b"));
        let (port, port2) = free_ports();
        let mut clean = Cleanup::new(&e.socket);
        for c in [&n.sandbox, &n2.sandbox, &n.sidecar] {
            clean.container(c);
        }
        for net in [&n.network, &n.egress] {
            clean.network(net);
        }
        let mut masks = Masks::default();
        masks.add(&n.id, "id");
        masks.add(&n.digest, "d");
        masks.add(&n2.id, "id2");
        masks.add(&port.to_string(), "port");
        masks.add(&port2.to_string(), "port2");
        masks.add(&bind.root.display().to_string(), "bindroot");
        masks.add(&e.image, "image");
        let steps = if restricted {
            restricted_steps(e)
        } else {
            open_steps(e)
        };
        let out = replay(cli, sock, &e.socket, &steps, &mut masks);
        if via == "directly" {
            for (step, p) in steps.iter().zip(&out) {
                if (p.code == Some(0)) != step.ok {
                    problems.push(format!(
                        "directly, step {:?} exited {:?} (expected {}): {}{}",
                        step.label,
                        p.code,
                        if step.ok { "success" } else { "failure" },
                        p.stdout,
                        p.stderr
                    ));
                }
            }
        }
        printed.push((steps, out));
    }
    if let [(steps, direct), (_, proxied)] = printed.as_slice() {
        let needles = ["<id>", "<id2>"];
        let skip = |_: &Step, _: &Printed, _: &Printed| Ok(());
        let check: &dyn Fn(&Step, &Printed, &Printed) -> Result<(), String> =
            if self_check { &skip } else { &property };
        problems.extend(differences(steps, direct, proxied, &needles, check));
    }
    problems
}

fn replay_everywhere(test: &str, restricted: bool, self_check: bool) {
    if !sockproxy_tests::bindroot::can_pin(test) {
        return;
    }
    let mut problems = Vec::new();
    each_engine(test, Fakes::All, |e| {
        for cli in usable_clis(&e, test) {
            eprintln!("== {test} on {} with {}", e.label(), cli.display());
            for p in replay_mode(&e, &cli, restricted, self_check) {
                problems.push(format!("[{} / {}] {p}", e.label(), cli.display()));
            }
        }
    });
    assert!(
        problems.is_empty(),
        "{} problem(s):\n\n{}",
        problems.len(),
        problems.join("\n\n")
    );
}

#[test]
fn deer_flow_open_mode_prints_the_same_through_the_proxy() {
    let test = "deer_flow_open_mode_prints_the_same_through_the_proxy";
    replay_everywhere(test, false, false);
}

#[test]
fn deer_flow_restricted_mode_prints_the_same_through_the_proxy() {
    let test = "deer_flow_restricted_mode_prints_the_same_through_the_proxy";
    replay_everywhere(test, true, false);
}

/// The harness itself: two direct runs of each mode normalize to the same outputs, so a
/// difference through the proxy is the proxy's.
#[test]
fn two_direct_replays_normalize_to_the_same_outputs() {
    let test = "two_direct_replays_normalize_to_the_same_outputs";
    replay_everywhere(test, false, true);
    replay_everywhere(test, true, true);
}
