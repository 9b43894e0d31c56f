//! The `create_body` property the fuzz target of that name asserts and the stable replay test
//! (`tests/tests/tools/fuzz_corpus.rs`) checks again on every committed corpus input:
//! bytes → `json::parse_checked` → `create_body::check`; what is forwarded holds only listed
//! fields, never `Privileged: true`, always a private cgroup namespace, keeps within the `spend`
//! bounds and declares no anonymous volume, and checking it again (as bytes, the way the engine
//! will read it) gives the same body.

use std::path::Path;

use serde_json::Value;

use crate::create_body;
use crate::create_rules::{CreateRules, NoPaths};
use crate::host_config;
use crate::json::parse_checked;
use crate::props::scope;
use crate::scope::STACK_LABEL;

/// Top-level fields a forwarded create body may carry.
pub const CREATE_TOP: [&str; 27] = [
    "HostConfig",
    "NetworkingConfig",
    "Hostname",
    "Domainname",
    "User",
    "WorkingDir",
    "StopSignal",
    "AttachStdin",
    "AttachStdout",
    "AttachStderr",
    "Tty",
    "OpenStdin",
    "StdinOnce",
    "ArgsEscaped",
    "NetworkDisabled",
    "ExposedPorts",
    "Volumes",
    "Env",
    "OnBuild",
    "Shell",
    "Cmd",
    "Entrypoint",
    "Healthcheck",
    "StopTimeout",
    "Image",
    "Labels",
    "MacAddress",
];

/// Input: byte 0's low bit picks `--restricted`; the rest is the create body.
pub fn create_body(data: &[u8]) -> Result<(), String> {
    let [flags, body @ ..] = data else {
        return Ok(());
    };
    let scope = scope(flags & 1 == 1, true)?;
    let rules = CreateRules::default();
    let engine = Path::new("/run/docker.sock");
    let check = |bytes: &[u8]| {
        parse_checked(bytes)
            .and_then(|v| create_body::check(v, &scope, &rules, engine, &NoPaths, "s"))
    };
    let Ok(out) = check(body) else {
        return Ok(());
    };
    let Some(top) = out.as_object() else {
        return Err(format!("forwarded body is not an object: {out}"));
    };
    if let Some(k) = top.keys().find(|k| !CREATE_TOP.contains(&k.as_str())) {
        return Err(format!("forwarded top-level field {k} is not listed"));
    }
    match top.get("HostConfig") {
        None => return Err(format!("forwarded body has no HostConfig: {out}")),
        Some(Value::Object(h)) => {
            if h.get("CgroupnsMode") != Some(&Value::from("private")) {
                return Err(format!("forwarded cgroup namespace not private: {out}"));
            }
            if let Some(k) = h
                .keys()
                .find(|k| !host_config::FIELDS.contains(&k.as_str()))
            {
                return Err(format!("forwarded HostConfig.{k} is not listed"));
            }
            if h.iter()
                .any(|(k, v)| k.eq_ignore_ascii_case("Privileged") && v != &Value::Bool(false))
            {
                return Err(format!("forwarded Privileged: {out}"));
            }
        }
        Some(other) => return Err(format!("forwarded HostConfig is {other}")),
    }
    if top.get("Labels").and_then(|l| l.get(STACK_LABEL)) != Some(&Value::from("s")) {
        return Err(format!("forwarded body lacks the stack label: {out}"));
    }
    within_spend(&out, &rules.spend)?;
    let bytes = serde_json::to_vec(&out).map_err(|e| e.to_string())?;
    match check(&bytes) {
        Ok(again) if again == out => Ok(()),
        other => Err(format!("forwarded body {out} checks again as {other:?}")),
    }
}

/// What a forwarded create body may make the engine spend (`spend`): healthcheck durations 0
/// or at least the minimum, retries and stop timeout within bounds, a stop signal that ends the
/// process, few published host ports, none low. Read from the forwarded body, whose keys are
/// the canonical names.
fn within_spend(out: &Value, spend: &crate::spend::Spend) -> Result<(), String> {
    let int = |v: Option<&Value>| v.and_then(Value::as_i64).unwrap_or(0);
    if let Some(h) = out.get("Healthcheck") {
        for f in ["Interval", "Timeout", "StartPeriod", "StartInterval"] {
            let n = int(h.get(f));
            if n != 0 && n < spend.min_healthcheck_interval_ns {
                return Err(format!("forwarded Healthcheck.{f} {n}: {out}"));
            }
        }
        if !(0..=spend.max_healthcheck_retries).contains(&int(h.get("Retries"))) {
            return Err(format!("forwarded Healthcheck.Retries: {out}"));
        }
    }
    if !(0..=spend.max_stop_timeout).contains(&int(out.get("StopTimeout"))) {
        return Err(format!("forwarded StopTimeout: {out}"));
    }
    let signal = out.get("StopSignal").and_then(Value::as_str).unwrap_or("");
    if !crate::spend::ends_a_process(signal) {
        return Err(format!("forwarded StopSignal {signal:?}: {out}"));
    }
    let bindings: Vec<&Value> = out["HostConfig"]
        .get("PortBindings")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(Value::as_array)
        .flatten()
        .collect();
    if bindings.len() > spend.max_port_bindings {
        return Err(format!("forwarded {} port bindings: {out}", bindings.len()));
    }
    for b in bindings {
        let raw = b.get("HostPort").and_then(Value::as_str).unwrap_or("");
        let low = raw.split('-').next().unwrap_or("").trim();
        let port: u16 = if low.is_empty() {
            0
        } else {
            low.parse()
                .map_err(|_| format!("forwarded HostPort {raw:?}: {out}"))?
        };
        if port != 0 && port < spend.min_host_port {
            return Err(format!("forwarded HostPort {raw:?}: {out}"));
        }
    }
    within_host_spend(out, spend)
}

/// The host-side bounds (`spend_host`) on a forwarded create body: CPU and I/O weight, no
/// real-time CPU time, the pids limit, core dumps, and no working directory or mount target
/// in `/dev`, `/proc` or `/sys`.
fn within_host_spend(out: &Value, spend: &crate::spend::Spend) -> Result<(), String> {
    use crate::paths::kernel_fs;
    let h = &out["HostConfig"];
    let int = |f: &str| h.get(f).and_then(Value::as_i64).unwrap_or(0);
    let max_blkio = i64::try_from(spend.max_blkio_weight).unwrap_or(i64::MAX);
    let bounds = [
        ("CpuShares", spend.max_cpu_shares),
        ("BlkioWeight", max_blkio),
        ("PidsLimit", spend.max_pids_limit),
        ("CpuRealtimePeriod", 0),
        ("CpuRealtimeRuntime", 0),
    ];
    for (f, max) in bounds {
        if !(0..=max).contains(&int(f)) {
            return Err(format!("forwarded HostConfig.{f}: {out}"));
        }
    }
    for u in h
        .get("Ulimits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if u.get("Name").and_then(Value::as_str) == Some("core") {
            for f in ["Soft", "Hard"] {
                let n = u.get(f).and_then(Value::as_i64).unwrap_or(0);
                if !(0..=spend.max_core_ulimit).contains(&n) {
                    return Err(format!("forwarded core ulimit {n}: {out}"));
                }
            }
        }
    }
    let dir = out.get("WorkingDir").and_then(Value::as_str).unwrap_or("");
    if kernel_fs(dir).is_some() {
        return Err(format!("forwarded WorkingDir {dir}: {out}"));
    }
    let mut targets: Vec<String> = Vec::new();
    for b in h
        .get("Binds")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let parts: Vec<&str> = b.as_str().unwrap_or("").split(':').collect();
        targets.extend(parts.get(1).map(|t| (*t).to_owned()));
    }
    for m in h
        .get("Mounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        targets.extend(m.get("Target").and_then(Value::as_str).map(str::to_owned));
    }
    for key in ["Tmpfs"].iter().filter_map(|k| h.get(*k)) {
        targets.extend(key.as_object().into_iter().flat_map(|m| m.keys().cloned()));
    }
    if let Some(v) = out.get("Volumes").and_then(Value::as_object) {
        targets.extend(v.keys().cloned());
    }
    if let Some(t) = targets.iter().find(|t| kernel_fs(t).is_some()) {
        return Err(format!("forwarded mount target {t}: {out}"));
    }
    no_anonymous_volume(out)
}

/// No forwarded body makes an anonymous volume: every volume mount names its source, and every
/// `Volumes` path is the target of a bind or a mount (compared as `filepath.Clean` leaves them,
/// written here again rather than borrowed from the code under test).
fn no_anonymous_volume(out: &Value) -> Result<(), String> {
    let h = &out["HostConfig"];
    let list = |k: &str| {
        h.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let trim = |t: &str| {
        let mut kept: Vec<&str> = Vec::new();
        for part in t.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    kept.pop();
                }
                p => kept.push(p),
            }
        }
        kept.join("/")
    };
    let mut covered: Vec<String> = Vec::new();
    for b in list("Binds") {
        covered.extend(b.as_str().and_then(|b| b.split(':').nth(1)).map(trim));
    }
    for m in list("Mounts") {
        let source = m.get("Source").and_then(Value::as_str).unwrap_or("");
        if m.get("Type").and_then(Value::as_str) == Some("volume") && source.is_empty() {
            return Err(format!("forwarded an anonymous volume mount: {out}"));
        }
        covered.extend(m.get("Target").and_then(Value::as_str).map(trim));
    }
    let paths = out.get("Volumes").and_then(Value::as_object);
    match paths
        .into_iter()
        .flat_map(|p| p.keys())
        .find(|p| !covered.contains(&trim(p)))
    {
        Some(p) => Err(format!("forwarded Volumes {p} that nothing covers: {out}")),
        None => Ok(()),
    }
}
