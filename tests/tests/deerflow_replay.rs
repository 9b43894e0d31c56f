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
//! minimum API is 1.44, and is skipped there with a notice) and the real dockerd (skipped with a
//! notice when none answers, never with `CI=true`). Names carry a random (user, thread), and
//! everything a run makes is removed from the engine afterwards.

use std::path::Path;

use serde_json::{json, Value};

use sockproxy_tests::cli::{clis, docker_with};
use sockproxy_tests::deerflow::{
    differences, free_port, replay, BindRoot, Compare, Masks, Names, Printed, Step, PREFIX,
};
use sockproxy_tests::engine::{all_engines, Cleanup, Engine};
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

/// One run's inputs: its names, ports and bind paths.
struct Run<'a> {
    e: &'a Engine,
    n: Names,
    n2: Names,
    port: u16,
    bind: &'a BindRoot,
}

impl Run<'_> {
    /// `docker run` as `_start_container` builds it, with issue 13's labels and caps.
    fn sandbox_run(&self, n: &Names, mode: &str, network: Option<&str>) -> Vec<String> {
        let mut a: Vec<String> = ["run", "--security-opt", "seccomp=unconfined", "--rm", "-d"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        if network.is_none() {
            a.extend(["-p".into(), format!("127.0.0.1:{}:8080", self.port)]);
        }
        a.extend(["--name".into(), n.sandbox.clone()]);
        for l in [
            format!("deerflow.sandbox_id={}", n.id),
            "deerflow.role=sandbox".into(),
            format!("deerflow.network_mode={mode}"),
        ] {
            a.extend(["--label".into(), l]);
        }
        for cap in &CAPS[..5] {
            a.extend(["--cap-add".into(), (*cap).to_owned()]);
        }
        a.extend(["-e".into(), format!("SANDBOX_ID={}", n.id)]);
        a.extend([
            "-v".into(),
            format!("{}:/mnt/user-data", self.bind.user_data.display()),
        ]);
        a.extend([
            "--mount".into(),
            format!(
                "type=bind,src={},dst=/mnt/skills,readonly",
                self.bind.skills.display()
            ),
        ]);
        if let Some(net) = network {
            let proxy = format!("http://{}:8080", n.sidecar);
            a.extend(["-e".into(), format!("HTTP_PROXY={proxy}")]);
            a.extend(["-e".into(), format!("HTTPS_PROXY={proxy}")]);
            a.extend(["--network".into(), net.to_owned()]);
        }
        a.push(self.e.image.clone());
        a.extend(serve_cmd(self.e));
        a
    }

    fn running(&self, label: &'static str, ok: bool, name: &str) -> Step {
        Step::new(label, ok, &["inspect", "-f", "{{.State.Running}}", name])
    }

    fn open(&self) -> Vec<Step> {
        let (s, s2) = (&self.n.sandbox, &self.n2.sandbox);
        let mut run = Step::new("run (open)", true, &[]).learn("sandbox-id");
        run.args = self.sandbox_run(&self.n, "open", None);
        let mut run2 = Step::new("run (second sandbox)", true, &[]).learn("sandbox2-id");
        run2.args = self.sandbox_run(&self.n2, "open", None);
        run2.args.retain(|a| !a.starts_with("127.0.0.1:"));
        if let Some(i) = run2.args.iter().position(|a| a == "-p") {
            run2.args.remove(i);
        }
        let mut again = run.clone().learn("sandbox-id-again");
        again.label = "run (same name again)";
        vec![
            Step::new(
                "version",
                true,
                &["version", "--format", "{{.Server.Version}}"],
            ),
            Step::new(
                "info OS",
                true,
                &["info", "--format", "{{json .OperatingSystem}}"],
            ),
            self.running("is_alive before create", false, s),
            run,
            self.running("is_alive", true, s),
            Step::new("port", true, &["port", s, "8080"]),
            Step::new(
                "ps by label and name",
                true,
                &[
                    "ps",
                    "-a",
                    "--filter",
                    "label=deerflow.role=sandbox",
                    "--filter",
                    &format!("name={s}"),
                    "--format",
                    "{{.Names}}|{{.Label \"deerflow.sandbox_id\"}}|{{.Ports}}",
                ],
            ),
            // Upstream's list_running: every running `deer-flow-sandbox-*` on the engine. The
            // direct listing may include other tenants' sandboxes; compare this run's lines.
            Step::new(
                "list_running",
                true,
                &[
                    "ps",
                    "--filter",
                    &format!("name={PREFIX}sandbox-"),
                    "--format",
                    "{{.Names}}",
                ],
            )
            .compare(Compare::OwnLines),
            Step::new(
                "batched inspect with a missing name",
                false,
                &["inspect", s, s2],
            ),
            // Direct shows every container on the bridge; proxied only the stack's own.
            Step::new(
                "network inspect bridge",
                true,
                &["network", "inspect", "bridge"],
            )
            .compare(Compare::Property),
            // Direct describes the host; proxied describes the stack alone.
            Step::new(
                "info (all of it)",
                true,
                &["info", "--format", "{{json .}}"],
            )
            .compare(Compare::Property),
            run2,
            Step::new("stop by name", true, &["stop", s]).gone(s),
            self.running("is_alive after stop", false, s),
            Step::new("stop by ID", true, &["stop", "<sandbox2-id>"]).gone(s2),
            Step::new(
                "rm -f by ID, already gone",
                true,
                &["rm", "-f", "<sandbox2-id>"],
            ),
            Step::new("rm -f by name, already gone", true, &["rm", "-f", s]),
            again,
            Step::new("rm -f running, by name", true, &["rm", "-f", s]).gone(s),
            Step::new("inspect, both missing", false, &["inspect", s, s2]),
        ]
    }

    fn restricted(&self) -> Vec<Step> {
        let n = &self.n;
        let (net, egress, side, s) = (&n.network, &n.egress, &n.sidecar, &n.sandbox);
        let mut create = Step::new(
            "create sidecar",
            true,
            &[
                "create",
                "--rm",
                "--cap-drop=ALL",
                "--read-only",
                "--tmpfs",
                "/tmp",
                "--user",
                "65532:65532",
                "-p",
                &format!("127.0.0.1:{}:8080", self.port),
                "--network",
                egress,
                "--name",
                side,
                "--label",
                "deerflow.role=netproxy",
                "--label",
                &format!("deerflow.sandbox_id={}", n.id),
                &self.e.image,
            ],
        )
        .learn("sidecar-id");
        create.args.extend(serve_cmd(self.e));
        let mut run =
            Step::new("run sandbox on the internal network", true, &[]).learn("sandbox-id");
        run.args = self.sandbox_run(n, "allowlist", Some(net));
        let rules = b"{\"allow\": [\"example.test\"]}\n";
        vec![
            Step::new(
                "version",
                true,
                &["version", "--format", "{{.Server.Version}}"],
            ),
            Step::new(
                "network inspect, missing",
                false,
                &["network", "inspect", net],
            ),
            Step::new(
                "network create internal",
                true,
                &[
                    "network",
                    "create",
                    "--internal",
                    "--opt",
                    "com.docker.network.bridge.gateway_mode_ipv4=isolated",
                    net,
                ],
            )
            .learn("net-id"),
            Step::new(
                "network create egress",
                true,
                &[
                    "network",
                    "create",
                    "--opt",
                    "com.docker.network.bridge.enable_icc=false",
                    egress,
                ],
            )
            .learn("egress-id"),
            Step::new("network inspect", true, &["network", "inspect", net]),
            self.running("sidecar alive before create", false, side),
            create,
            Step::new("network connect", true, &["network", "connect", net, side]),
            Step::new("start sidecar", true, &["start", side]),
            Step::new("exec -i with stdin", true, &["exec", "-i", side, "cat"]).stdin(rules),
            self.running("is_alive before create", false, s),
            run,
            Step::new("batched inspect", true, &["inspect", s, side]),
            Step::new(
                "network inspect with both",
                true,
                &["network", "inspect", net],
            ),
            Step::new(
                "ps by sandbox id",
                true,
                &[
                    "ps",
                    "-a",
                    "--filter",
                    &format!("label=deerflow.sandbox_id={}", n.id),
                    "--format",
                    "{{.Names}}|{{.Label \"deerflow.role\"}}",
                ],
            ),
            Step::new("stop sidecar", true, &["stop", side]).gone(side),
            Step::new("rm -f sidecar", true, &["rm", "-f", side]),
            Step::new("stop sandbox", true, &["stop", s]).gone(s),
            Step::new("network rm internal", true, &["network", "rm", net]),
            Step::new("network rm egress", true, &["network", "rm", egress]),
            Step::new("inspect, both gone", false, &["inspect", s, side]),
            Step::new("network inspect, gone", false, &["network", "inspect", net]),
        ]
    }
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
            let own = format!("{PREFIX}sandbox-<id>");
            if !names.contains(&own.as_str()) {
                return Err(format!("the stack's running sandbox is missing: {names:?}"));
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
            // Counts are the stack's own: at least its running sandbox, at most the engine's.
            let count = |v: &Value, k: &str| v[k].as_i64().unwrap_or(-1);
            if !(1..=count(dv, "Containers")).contains(&count(pv, "Containers"))
                || !(1..=count(dv, "ContainersRunning")).contains(&count(pv, "ContainersRunning"))
            {
                bad.push(format!(
                    "counts {} / {} running",
                    pv["Containers"], pv["ContainersRunning"]
                ));
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

/// The CLIs that can talk to `e` (the 20.10 CLI's API 1.41 is below the docker-29 minimum).
fn usable_clis(e: &Engine, test: &str) -> Vec<std::path::PathBuf> {
    clis()
        .into_iter()
        .filter(|cli| {
            let v = docker_with(
                cli,
                &e.socket,
                &["version"],
                None,
                std::time::Duration::from_secs(60),
            );
            if !v.ok() {
                eprintln!(
                    "NOTICE: {test}: {} cannot talk to {} ({}); skipped there",
                    cli.display(),
                    e.label(),
                    v.stderr.trim()
                );
            }
            v.ok()
        })
        .collect()
}

/// Replays one mode directly and through a proxy with `cli`; returns every problem found.
fn replay_mode(e: &Engine, cli: &Path, restricted: bool) -> Vec<String> {
    let bind = BindRoot::new();
    let bind_root = bind.root.clone();
    let proxy = StackProxy::start_with(&e.socket, PREFIX, restricted, |c| {
        c.create_rules.allow_caps = CAPS.iter().map(|c| (*c).to_owned()).collect();
        c.create_rules.bind_roots = vec![bind_root];
        c.create_rules.allow_seccomp_unconfined = true;
    });
    let mut problems = Vec::new();
    let mut printed: Vec<(Vec<Step>, Vec<Printed>, Names)> = Vec::new();
    for (via, sock) in [
        ("directly", e.socket.as_path()),
        ("through sockproxy", proxy.socket()),
    ] {
        let run = Run {
            e,
            n: Names::random("a"),
            n2: Names::random("b"),
            port: free_port(),
            bind: &bind,
        };
        let mut clean = Cleanup::new(&e.socket);
        for c in [&run.n.sandbox, &run.n2.sandbox, &run.n.sidecar] {
            clean.container(c);
        }
        for net in [&run.n.network, &run.n.egress] {
            clean.network(net);
        }
        let mut masks = Masks::default();
        masks.add(&run.n.id, "id");
        masks.add(&run.n.digest, "d");
        masks.add(&run.n2.id, "id2");
        masks.add(&run.port.to_string(), "port");
        masks.add(&bind.root.display().to_string(), "bindroot");
        let steps = if restricted {
            run.restricted()
        } else {
            run.open()
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
        printed.push((steps, out, run.n));
    }
    if let [(steps, direct, _), (_, proxied, _)] = printed.as_slice() {
        let needles = ["<id>", "<id2>"];
        problems.extend(differences(steps, direct, proxied, &needles, &property));
    }
    problems
}

fn replay_everywhere(test: &str, restricted: bool) {
    let mut problems = Vec::new();
    for e in all_engines(test) {
        for cli in usable_clis(&e, test) {
            eprintln!("== {test} on {} with {}", e.label(), cli.display());
            for p in replay_mode(&e, &cli, restricted) {
                problems.push(format!("[{} / {}] {p}", e.label(), cli.display()));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} problem(s):\n\n{}",
        problems.len(),
        problems.join("\n\n")
    );
}

#[test]
fn deer_flow_open_mode_prints_the_same_through_the_proxy() {
    replay_everywhere(
        "deer_flow_open_mode_prints_the_same_through_the_proxy",
        false,
    );
}

#[test]
fn deer_flow_restricted_mode_prints_the_same_through_the_proxy() {
    replay_everywhere(
        "deer_flow_restricted_mode_prints_the_same_through_the_proxy",
        true,
    );
}
