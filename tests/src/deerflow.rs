//! Replaying deer-flow's gateway (`LocalContainerBackend`, bytedance/deer-flow,
//! `backend/packages/harness/deerflow/community/aio_sandbox/local_backend.py`) as docker CLI
//! steps, and comparing what the CLI prints directly against an engine with what it prints
//! through a stack's sockproxy. Outputs are normalized first: the run's own names, IDs, ports
//! and paths become placeholders, and timestamps, addresses and other engine-made IDs are masked.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use regex::Regex;
use serde_json::Value;

use crate::cli::{docker_with, CliOutput};
use crate::raw;

/// The stack prefix deer-flow's names use.
pub const PREFIX: &str = "deer-flow-";

/// deer-flow's names for one (user, thread): `stackmodel::sandbox_id` + `stackmodel::Names`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub id: String,
    pub digest: String,
    pub sandbox: String,
    pub sidecar: String,
    pub network: String,
    pub egress: String,
}

impl Names {
    pub fn new(user: &str, thread: &str) -> Self {
        let prefix = stackmodel::Prefix::parse(PREFIX).unwrap_or_else(|e| panic!("{e}"));
        let id = stackmodel::sandbox_id(user, thread);
        let n = stackmodel::Names::new(&prefix, &id);
        Self {
            sandbox: n.sandbox,
            sidecar: n.sidecar,
            network: n.network,
            egress: n.egress,
            digest: n.digest,
            id,
        }
    }

    /// Names for a fresh random (user, thread), so runs never meet on a shared engine.
    pub fn random(tag: &str) -> Self {
        Self::new(
            &format!("user-{tag}-{}", std::process::id()),
            &format!("thread-{}", random_hex()),
        )
    }
}

/// Splits a shell-like line into words (the fake engine's splitter: quotes group).
pub use crate::fake::program::words;

fn random_hex() -> String {
    let mut buf = [0u8; 8];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf));
    stackmodel::k(&format!("{buf:?}{:?}", Instant::now()))
}

/// How a step's two outputs are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    /// Exit code, stdout and stderr equal after normalization.
    Same,
    /// Same exit code; stdout lines kept only where they name this run (the engine may hold
    /// other tenants' containers that the direct listing shows).
    OwnLines,
    /// Same exit code; the proxied output is checked by the closure the scenario gives.
    Property,
}

/// One docker CLI invocation of the replay.
#[derive(Debug, Clone)]
pub struct Step {
    pub label: &'static str,
    pub args: Vec<String>,
    pub stdin: Option<Vec<u8>>,
    /// The exit status the direct run must have (the replay's understanding of deer-flow).
    pub ok: bool,
    pub compare: Compare,
    /// stdout (trimmed) is an ID to remember under this placeholder.
    pub learn: Option<&'static str>,
    /// After the step, wait until this container is gone (`--rm` removes it asynchronously).
    pub gone: Option<String>,
}

impl Step {
    pub fn new(label: &'static str, ok: bool, args: &[&str]) -> Self {
        Self {
            label,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            stdin: None,
            ok,
            compare: Compare::Same,
            learn: None,
            gone: None,
        }
    }

    /// A step written as a shell line (single or double quotes group words, no escapes);
    /// `<placeholder>`s are filled from the run's masks when it runs.
    pub fn cmd(label: &'static str, ok: bool, line: &str) -> Self {
        let mut s = Self::new(label, ok, &[]);
        s.args = words(line);
        s
    }

    pub fn learn(mut self, placeholder: &'static str) -> Self {
        self.learn = Some(placeholder);
        self
    }

    pub fn gone(mut self, name: &str) -> Self {
        self.gone = Some(name.to_owned());
        self
    }

    pub fn stdin(mut self, data: &[u8]) -> Self {
        self.stdin = Some(data.to_vec());
        self
    }

    pub fn compare(mut self, c: Compare) -> Self {
        self.compare = c;
        self
    }
}

/// What one run (direct or proxied) printed, step by step, normalized.
#[derive(Debug, Clone, PartialEq)]
pub struct Printed {
    pub label: &'static str,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// stdout parsed as JSON (normalized), when it is JSON.
    pub json: Option<Value>,
}

/// Placeholders for one run: literal values that differ between runs.
#[derive(Debug, Default, Clone)]
pub struct Masks {
    literal: Vec<(String, String)>,
}

impl Masks {
    pub fn add(&mut self, value: &str, placeholder: &str) {
        if !value.is_empty() {
            self.literal
                .push((value.to_owned(), placeholder.to_owned()));
            // A container's hostname and short IDs are its ID's first 12 characters.
            if value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()) {
                self.literal
                    .push((value[..12].to_owned(), format!("{placeholder}12")));
            }
        }
    }

    /// `<placeholder>` tokens in a step's argument, replaced by their values.
    pub fn fill(&self, arg: &str) -> String {
        let mut out = arg.to_owned();
        for (v, p) in &self.literal {
            out = out.replace(&format!("<{p}>"), v);
        }
        out
    }

    /// Every known value, then every engine-made value, masked. Long values go first, then
    /// unknown 64-hex IDs, then 12-character prefixes, then short values (ports) as whole
    /// words only, so a short value never bites into an ID.
    pub fn text(&self, s: &str) -> String {
        let mut out = s.to_owned();
        let mut lits = self.literal.clone();
        lits.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        let p = patterns();
        for (v, ph) in lits.iter().filter(|(v, _)| v.len() > 12) {
            out = out.replace(v.as_str(), &format!("<{ph}>"));
        }
        out = p[0].0.replace_all(&out, p[0].1).into_owned();
        for (v, ph) in lits.iter().filter(|(v, _)| v.len() == 12) {
            out = out.replace(v.as_str(), &format!("<{ph}>"));
        }
        out = p[1].0.replace_all(&out, p[1].1).into_owned();
        for (v, ph) in lits.iter().filter(|(v, _)| v.len() < 12) {
            if let Ok(re) = Regex::new(&format!(r"\b{}\b", regex::escape(v))) {
                out = re
                    .replace_all(&out, format!("<{ph}>").as_str())
                    .into_owned();
            }
        }
        for (re, to) in &p[2..] {
            out = re.replace_all(&out, *to).into_owned();
        }
        out
    }

    pub fn json(&self, v: &Value) -> Value {
        if v.get("HostConfig").is_some() {
            // A container the proxy made reads as one made directly (`unpin`).
            let mut unpinned = v.clone();
            crate::unpin::as_unpinned(&mut unpinned);
            if unpinned != *v {
                return self.masked(&unpinned);
            }
        }
        self.masked(v)
    }

    fn masked(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.text(s)),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.json(x)).collect()),
            Value::Object(m) => {
                let mut out = serde_json::Map::new();
                for (key, val) in m {
                    let val = match key.as_str() {
                        // Process IDs and a sandbox's network namespace are the engine's own.
                        "Pid" | "SandboxKey" | "IPPrefixLen" => Value::String("<masked>".into()),
                        // The CLI passes `-e` values through a map, dockerd its mounts: the
                        // order of both varies.
                        "Env" | "Mounts" => {
                            let mut v = self.json(val);
                            if let Value::Array(a) = &mut v {
                                a.sort_by_key(ToString::to_string);
                            }
                            v
                        }
                        _ => self.json(val),
                    };
                    out.insert(self.text(key), val);
                }
                // The proxy stamps the containers it creates with its stack label: a
                // legitimate difference, dropped on both sides.
                if let Some(Value::Object(labels)) = out.get_mut("Labels") {
                    labels.remove("sockproxy.stack");
                }
                // So does its cgroup namespace, always a private one (a cgroup v1 engine's
                // default is the host's); tests/tests/policy/writes.rs checks it on each engine.
                out.remove("CgroupnsMode");
                // And what it sets so that stacks stay apart and within their limits (issues
                // 48 and 49): a container that names no network goes on the stack's own, not
                // the default bridge; `NET_RAW` is dropped; limits are filled in; an internal
                // network gives the host no address. tests/tests/policy/stack_network.rs and
                // limits.rs check each on the engine.
                for key in [
                    "NetworkMode",
                    "CapDrop",
                    "Memory",
                    "MemorySwap",
                    "NanoCpus",
                    "PidsLimit",
                ] {
                    out.remove(key);
                }
                if out.contains_key("Networks") && out.contains_key("Ports") {
                    // A container's NetworkSettings: the networks it is on differ, so do the
                    // default bridge's own fields; its published ports are compared.
                    out.retain(|k, _| k == "Ports");
                }
                if let Some(Value::Object(options)) = out.get_mut("Options") {
                    options.remove("com.docker.network.bridge.inhibit_ipv4");
                }
                Value::Object(out)
            }
            other => other.clone(),
        }
    }
}

fn patterns() -> &'static [(Regex, &'static str)] {
    static P: std::sync::OnceLock<Vec<(Regex, &'static str)>> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        [
            (r"[0-9a-f]{64}", "<ID>"),
            (r"\b[0-9a-f]{12}\b", "<ID12>"),
            (
                r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)",
                "<TS>",
            ),
            (r"\b(?:[0-9a-f]{2}:){5}[0-9a-f]{2}\b", "<MAC>"),
            // Container and network addresses (never loopback, which published ports name).
            (r"\b(?:10|172|192)\.\d{1,3}\.\d{1,3}\.\d{1,3}\b", "<IP>"),
            // The engine's address pools hand out /16s, then /20s.
            (r"<IP>/\d{1,2}\b", "<IP>/<len>"),
            (
                r"\bUp (Less than a second|\d+ seconds?|About a minute)",
                "Up <T>",
            ),
        ]
        .iter()
        .map(|(re, to)| (Regex::new(re).expect("valid pattern"), *to))
        .collect()
    })
}

/// Runs `steps` with `cli` against `sock`, normalizing each output with `masks` (which learns
/// IDs as steps print them). `engine` is where `gone` waits look (never through a proxy).
pub fn replay(
    cli: &Path,
    sock: &Path,
    engine: &Path,
    steps: &[Step],
    masks: &mut Masks,
) -> Vec<Printed> {
    let mut out = Vec::new();
    for step in steps {
        let filled: Vec<String> = step.args.iter().map(|a| masks.fill(a)).collect();
        let args: Vec<&str> = filled.iter().map(String::as_str).collect();
        let got: CliOutput = docker_with(
            cli,
            sock,
            &args,
            step.stdin.as_deref(),
            Duration::from_secs(120),
        );
        if let Some(p) = step.learn.filter(|_| got.ok()) {
            masks.add(got.out().trim(), p);
        }
        if let Some(name) = &step.gone {
            wait_gone(engine, &masks.fill(name));
        }
        let stdout = masks.text(&got.out());
        let json = serde_json::from_slice::<Value>(&got.stdout)
            .ok()
            .map(|v| masks.json(&v));
        out.push(Printed {
            label: step.label,
            code: got.code,
            stdout,
            stderr: masks.text(&got.stderr),
            json,
        });
    }
    out
}

/// Waits (bounded) until the engine answers 404 for container `name`.
pub fn wait_gone(engine: &Path, name: &str) {
    let start = Instant::now();
    while raw::get(engine, &format!("/containers/{name}/json")).is_ok_and(|r| r.status != 404) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{name} was not removed after it stopped (--rm)"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The bind mounts today's deer-flow gives a thread's sandbox (`aio_sandbox_provider.py`,
/// `_get_extra_mounts`: thread data, skills views, the Lark CLI's config with its writable
/// `locks` inside the read-only `config`, and its data), for user `user-1` and thread
/// `thread-1`: (source under the base directory, destination, read-only).
pub const UPSTREAM_MOUNTS: [(&str, &str, bool); 11] = [
    (
        "users/user-1/threads/thread-1/user-data/workspace",
        "/mnt/user-data/workspace",
        false,
    ),
    (
        "users/user-1/threads/thread-1/user-data/uploads",
        "/mnt/user-data/uploads",
        false,
    ),
    (
        "users/user-1/threads/thread-1/user-data/outputs",
        "/mnt/user-data/outputs",
        false,
    ),
    (
        "users/user-1/threads/thread-1/acp-workspace",
        "/mnt/acp-workspace",
        true,
    ),
    ("skills_view/public", "/mnt/skills/public", true),
    (
        "users/user-1/skills_view/custom",
        "/mnt/skills/custom",
        true,
    ),
    (
        "users/user-1/skills_view/legacy",
        "/mnt/skills/legacy",
        true,
    ),
    (
        "users/user-1/skills_view/integrations",
        "/mnt/skills/integrations",
        true,
    ),
    (
        "users/user-1/integrations/lark-cli/config",
        "/mnt/integrations/lark-cli/config",
        true,
    ),
    (
        "users/user-1/integrations/lark-cli/config/locks",
        "/mnt/integrations/lark-cli/config/locks",
        false,
    ),
    (
        "users/user-1/integrations/lark-cli/data",
        "/mnt/integrations/lark-cli/data",
        false,
    ),
];

/// A directory tree a stack may bind from: `{root}/threads/{thread}/user-data`,
/// `{root}/skills` and upstream's layout (`UPSTREAM_MOUNTS`), canonical (the proxy resolves
/// bind sources without symlinks).
#[derive(Debug)]
pub struct BindRoot {
    _dir: crate::bindroot::BindRootDir,
    pub root: PathBuf,
    pub user_data: PathBuf,
    pub skills: PathBuf,
}

impl BindRoot {
    /// On a `nosuid,nodev` mount (`bindroot`): needs `bindroot::can_pin`.
    pub fn create() -> Self {
        let dir = crate::bindroot::BindRootDir::new("dfbind");
        let root = dir.path().to_owned();
        let user_data = root.join("threads/thread-1/user-data");
        let skills = root.join("skills");
        for d in [&user_data, &skills] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        for (source, _, _) in UPSTREAM_MOUNTS {
            std::fs::create_dir_all(root.join(source)).expect("mkdir");
        }
        Self {
            _dir: dir,
            root,
            user_data,
            skills,
        }
    }
}

/// Lines of `text` that mention any of `needles` (the run's own names or placeholders).
pub fn own_lines(text: &str, needles: &[&str]) -> String {
    text.lines()
        .filter(|l| needles.iter().any(|n| l.contains(n)))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Normalized JSON output, for reports.
fn pretty(p: &Printed) -> String {
    p.json
        .as_ref()
        .and_then(|v| serde_json::to_string_pretty(v).ok())
        .unwrap_or_else(|| p.stdout.clone())
}

/// Steps whose outputs differ, as readable reports; `property` checks `Compare::Property`
/// steps' proxied output (and may compare it with the direct one).
pub fn differences(
    steps: &[Step],
    direct: &[Printed],
    proxied: &[Printed],
    needles: &[&str],
    property: &dyn Fn(&Step, &Printed, &Printed) -> Result<(), String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for ((step, d), p) in steps.iter().zip(direct).zip(proxied) {
        let mut why: BTreeMap<&str, String> = BTreeMap::new();
        if d.code != p.code {
            why.insert(
                "exit code",
                format!("{:?} directly, {:?} proxied", d.code, p.code),
            );
        }
        match step.compare {
            Compare::Same => {
                if d.json.is_some() && d.json != p.json {
                    why.insert(
                        "stdout (JSON)",
                        format!("directly:\n{}\nproxied:\n{}", pretty(d), pretty(p)),
                    );
                } else if d.json.is_none() && d.stdout != p.stdout {
                    why.insert(
                        "stdout",
                        format!("directly: {:?}\nproxied: {:?}", d.stdout, p.stdout),
                    );
                }
                if d.stderr != p.stderr {
                    why.insert(
                        "stderr",
                        format!("directly: {:?}\nproxied: {:?}", d.stderr, p.stderr),
                    );
                }
            }
            Compare::OwnLines => {
                let (a, b) = (own_lines(&d.stdout, needles), own_lines(&p.stdout, needles));
                if a != b {
                    why.insert("own lines", format!("directly: {a:?}\nproxied: {b:?}"));
                }
            }
            Compare::Property => {
                if let Err(e) = property(step, d, p) {
                    why.insert("property", e);
                }
            }
        }
        if !why.is_empty() {
            let args = step.args.join(" ");
            let detail: Vec<String> = why.iter().map(|(k, v)| format!("  {k}: {v}")).collect();
            out.push(format!(
                "step {:?} (docker {args}):\n{}",
                step.label,
                detail.join("\n")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_design_vectors() {
        let n = Names::new("user-1", "thread-1");
        assert_eq!(n.id, "7d9ac0ff9b98cd06");
        assert_eq!(n.digest, "a39cbf0e8f2eeca4");
        assert_eq!(n.sandbox, "deer-flow-sandbox-7d9ac0ff9b98cd06");
        assert_eq!(n.sidecar, "deer-flow-netproxy-a39cbf0e8f2eeca4");
        assert_eq!(n.network, "deer-flow-sandbox-net-a39cbf0e8f2eeca4");
        assert_eq!(n.egress, "deer-flow-sandbox-egress-a39cbf0e8f2eeca4");
        assert_ne!(Names::random("a").id, Names::random("a").id);
    }

    #[test]
    fn masks_replace_known_values_first_then_engine_made_ones() {
        let mut m = Masks::default();
        let id = "ab".repeat(32);
        m.add(&id, "sandbox-id");
        m.add("deadbeefdeadbeef", "id");
        let s = format!(
            "{id} {} deer-flow-sandbox-deadbeefdeadbeef {} 2026-01-02T03:04:05.123Z 172.18.0.3/16 02:42:ac:11:00:02",
            &id[..12],
            "cd".repeat(32)
        );
        assert_eq!(
            m.text(&s),
            "<sandbox-id> <sandbox-id12> deer-flow-sandbox-<id> <ID> <TS> <IP>/<len> <MAC>"
        );
        let v = serde_json::json!({ id.clone(): { "Pid": 7, "Labels": { "sockproxy.stack": "x", "a": "b" } } });
        assert_eq!(
            m.json(&v),
            serde_json::json!({ "<sandbox-id>": { "Pid": "<masked>", "Labels": { "a": "b" } } })
        );
    }
}
