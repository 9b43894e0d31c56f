//! Properties the fuzz targets (`fuzz/`) assert and the stable replay test
//! (`tests/tests/tools/fuzz_corpus.rs`) checks again on every committed corpus input. Each function
//! takes the raw fuzz input, reads it as documented, and returns `Err(why)` when a property
//! does not hold; malformed input that the code under test refuses is not a violation.
//!
//! - `request`: bytes → (method, target) → `canon` → `api::parse` → `policy::decide`; an
//!   allowed request, re-serialized as the proxy forwards it, parses back to the same target,
//!   endpoint and plan, and the plan is one the scope allows.
//! - `create_body`: bytes → `body::parse_checked` → `create_body::check`; what is forwarded
//!   holds only listed fields, never `Privileged: true`, always a private cgroup namespace, and
//!   checking it again (as bytes, the way the engine will read it) gives the same body.
//! - `list_filter`: `filter::filter_list` keeps a subset of the input entries, in order,
//!   verbatim, all visible to the scope, and every visible one up to `limit`.
//! - `engine_answer`: `h1::parse_head` takes a whole head off the front of what the engine
//!   sent or leaves every byte alone; what it frames is consistent; a chunked body read from
//!   what follows yields no empty piece and no more data than it consumed; and
//!   `heads::LastHead` reads the same bytes exactly as the parse does, both before it keeps a
//!   head and from the head it kept.

use std::path::Path;

use http::{HeaderMap, Method, Uri};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::api;
use crate::canon::{canonicalize, Target};
use crate::create_body;
use crate::create_rules::{CreateRules, NoPaths};
use crate::filter::filter_list;
use crate::host_config;
use crate::json::parse_checked;
use crate::policy::{decide, Plan};
use crate::reference::ObjRef;
use crate::scope::{Access, Kind, Prefix, Scope, STACK_LABEL};

/// The prefix every property runs with (deer-flow's).
pub const PREFIX: &str = "deer-flow-";

/// Methods the first input byte selects from.
const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT",
];

/// The one image the request property's scope may pull.
const PULLABLE: &str = "busybox:1.36";

fn scope(restricted: bool, info: bool) -> Result<Scope, String> {
    let prefix = Prefix::parse(PREFIX).map_err(|e| format!("test prefix: {e}"))?;
    Ok(Scope::new(prefix, restricted).with_info(info))
}

/// The query as the proxy forwards it (every parameter the proxy checked, in order).
pub fn forwarded_target(t: &Target) -> String {
    let q = t.query.encode_without(&[]);
    if q.is_empty() {
        t.path()
    } else {
        format!("{}?{q}", t.path())
    }
}

/// Input: byte 0 picks the method, byte 1's low bits `--restricted` and `--info deny`, the rest
/// is the request target.
pub fn request(data: &[u8]) -> Result<(), String> {
    let [m, flags, rest @ ..] = data else {
        return Ok(());
    };
    let method = Method::from_bytes(METHODS[usize::from(*m) % METHODS.len()].as_bytes())
        .map_err(|e| e.to_string())?;
    let scope = scope(flags & 1 == 1, flags & 2 == 0)?;
    let Ok(raw) = std::str::from_utf8(rest) else {
        return Ok(());
    };
    let Ok(uri) = raw.parse::<Uri>() else {
        return Ok(());
    };
    let Ok(target) = canonicalize(&uri, &HeaderMap::new()) else {
        return Ok(());
    };
    let allow_images = vec![crate::images::normalize_image(PULLABLE)];
    let ep = api::parse(&method, &target);
    let Ok(plan) = decide(&ep, &target.query, &scope, &allow_images) else {
        return Ok(());
    };
    plan_in_scope(&plan, &target, &scope)?;
    let again = forwarded_target(&target);
    let uri2: Uri = again
        .parse()
        .map_err(|e| format!("forwarded target {again:?} does not parse: {e}"))?;
    let target2 = canonicalize(&uri2, &HeaderMap::new())
        .map_err(|e| format!("forwarded target {again:?} refused: {e}"))?;
    if target2 != target {
        return Err(format!(
            "forwarded target {again:?} reads as {target2:?}, not {target:?}"
        ));
    }
    let ep2 = api::parse(&method, &target2);
    if ep2 != ep {
        return Err(format!("{again:?} is {ep2:?}, was {ep:?}"));
    }
    match decide(&ep2, &target2.query, &scope, &allow_images) {
        Ok(plan2) if plan2 == plan => Ok(()),
        other => Err(format!("{again:?} decided {other:?}, was Ok({plan:?})")),
    }
}

/// What an allowed plan acts on is in the scope (names are decided without the engine).
fn plan_in_scope(plan: &Plan, target: &Target, scope: &Scope) -> Result<(), String> {
    let name_ok = |kind, access, r: &ObjRef| match r {
        ObjRef::Name(n) => scope.allows(kind, access, n) && !n.contains('/'),
        ObjRef::Hex(h) => h.bytes().all(|b| b.is_ascii_hexdigit()) && !h.is_empty(),
    };
    let ok = match plan {
        Plan::CreateContainer => {
            let name = target.query.get("name").unwrap_or("");
            let name = name.strip_prefix('/').unwrap_or(name);
            scope.allows(Kind::Container, Access::Change, name) && !name.contains('/')
        }
        Plan::Container {
            op: crate::api::ContainerOp::Rename,
            target: r,
            access,
        } => {
            // The new name is in scope too, and no link alias.
            let new = target.query.get("name").unwrap_or("");
            let new = new.strip_prefix('/').unwrap_or(new);
            name_ok(Kind::Container, *access, r)
                && scope.allows(Kind::Container, Access::Change, new)
                && !new.contains('/')
        }
        Plan::Container {
            target: r, access, ..
        } => name_ok(Kind::Container, *access, r),
        Plan::Network {
            target: r, access, ..
        } => name_ok(Kind::Network, *access, r),
        Plan::CreateNetwork => scope.restricted(),
        Plan::Exec { id, .. } => id.bytes().all(|b| b.is_ascii_hexdigit()),
        Plan::Forward | Plan::List(_) | Plan::Events | Plan::Info | Plan::VolumeList => true,
        // The one volume named in the path is the stack's, and never under the label rule.
        Plan::Volume => {
            target.segments.len() == 2
                && target.segments[0] == "volumes"
                && scope.visible(&target.segments[1])
                && !scope.requires_label()
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{plan:?} allowed outside the scope"))
    }
}

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

/// Input: byte 0's low bit picks networks (else containers), byte 1 is `limit` (0: none); the
/// rest is the engine's list answer.
pub fn list_filter(data: &[u8]) -> Result<(), String> {
    let [sel, lim, body @ ..] = data else {
        return Ok(());
    };
    let kind = if sel & 1 == 1 {
        Kind::Network
    } else {
        Kind::Container
    };
    let limit = (*lim > 0).then_some(usize::from(*lim));
    let scope = scope(sel & 2 == 2, true)?;
    let Ok(out) = filter_list(kind, body, &scope, limit) else {
        return Ok(());
    };
    let input: Vec<&RawValue> = serde_json::from_slice(body)
        .map_err(|e| format!("filter accepted an answer that is not a JSON array: {e}"))?;
    let output: Vec<&RawValue> = serde_json::from_slice(&out)
        .map_err(|e| format!("filter output is not a JSON array: {e}"))?;
    // A subsequence of the input, entry bytes unchanged.
    let mut rest = input.iter();
    for o in &output {
        if !rest.any(|i| i.get() == o.get()) {
            return Err(format!(
                "output entry {} is not an input entry in order",
                o.get()
            ));
        }
    }
    for o in &output {
        if !visible(kind, o, &scope) {
            return Err(format!("output entry {} is not visible", o.get()));
        }
    }
    let want = input.iter().filter(|i| visible(kind, i, &scope)).count();
    let want = limit.map_or(want, |l| want.min(l));
    if output.len() != want {
        return Err(format!(
            "{} entries kept, {want} visible (limit {limit:?})",
            output.len()
        ));
    }
    Ok(())
}

/// An entry's `Name` and `Names` (the last of each when repeated, as a JSON object reads), kept
/// as raw JSON; every other field is skipped unread. A number no `f64` can hold (`1e666`, valid
/// JSON, which the filter passes through untouched) makes neither the entry nor the field the
/// kind does not read unreadable: `visible` decodes only the field its kind names.
#[derive(Default)]
struct NameFields {
    name: Option<Box<RawValue>>,
    names: Option<Box<RawValue>>,
}

impl<'de> serde::Deserialize<'de> for NameFields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = NameFields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list entry (an object)")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<NameFields, A::Error> {
                let mut out = NameFields::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "Name" => out.name = Some(map.next_value()?),
                        "Names" => out.names = Some(map.next_value()?),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(Fields)
    }
}

/// Visibility read independently of `filter`: a container's name is its first `Names` entry
/// without an inner `/` (one leading `/` stripped), a network's its `Name`.
fn visible(kind: Kind, entry: &RawValue, scope: &Scope) -> bool {
    let Ok(v) = serde_json::from_str::<NameFields>(entry.get()) else {
        return false;
    };
    let field =
        |raw: Option<Box<RawValue>>| raw.and_then(|r| serde_json::from_str::<Value>(r.get()).ok());
    let name = match kind {
        Kind::Network => field(v.name)
            .as_ref()
            .and_then(Value::as_str)
            .map(str::to_owned),
        Kind::Container => field(v.names)
            .as_ref()
            .and_then(Value::as_array)
            .and_then(|names| {
                names
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|n| n.strip_prefix('/').unwrap_or(n))
                    .find(|n| !n.contains('/'))
                    .map(str::to_owned)
            }),
    };
    name.is_some_and(|n| n.starts_with(PREFIX) && scope.visible(&n))
}
