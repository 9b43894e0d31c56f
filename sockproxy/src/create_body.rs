//! What a stack may ask for when it creates a container (`POST /containers/create`): a pure
//! decision on the parsed body (keys already checked by `body::parse_checked`, matched here
//! case-insensitively as Go's decoder matches them), returning the body to forward with the
//! `sockproxy.stack` label stamped on it, or the refusal naming the first reason.

use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

use crate::refusal::Refusal;
use crate::scope::{Access, Kind, Scope};

/// The label every created container carries.
pub const STACK_LABEL: &str = "sockproxy.stack";

/// Operator choices that open doors the defaults keep shut.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateRules {
    /// Capabilities `CapAdd` may name (`--allow-cap`).
    pub allow_caps: Vec<String>,
    /// Host directories bind mounts may come from (`--allow-bind-root`).
    pub bind_roots: Vec<PathBuf>,
    /// Publish ports on addresses other than loopback (`--allow-public-ports`).
    pub public_ports: bool,
}

fn refuse(why: impl Into<String>) -> Refusal {
    Refusal::Setting {
        op: "containers.create".into(),
        why: why.into(),
    }
}

/// The value Go would decode into `field` (keys are unique after folding).
pub fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

fn present(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::Number(_)) => true,
    }
}

fn strings(v: Option<&Value>) -> Result<Vec<String>, Refusal> {
    match v {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| Refusal::BadRequest("expected a list of strings".into()))
            })
            .collect(),
        Some(_) => Err(Refusal::BadRequest("expected a list of strings".into())),
    }
}

fn string(v: Option<&Value>) -> Result<&str, Refusal> {
    match v {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(Refusal::BadRequest("expected a string".into())),
    }
}

/// A container another setting points at must be the stack's own, by name.
fn own_container(what: &str, reference: &str, scope: &Scope) -> Result<(), Refusal> {
    let name = reference.strip_prefix('/').unwrap_or(reference);
    if scope.allows(Kind::Container, Access::Change, name) && !name.contains('/') {
        Ok(())
    } else {
        Err(refuse(format!(
            "{what} {reference} is not one of this stack's sandboxes"
        )))
    }
}

fn own_network(what: &str, name: &str, scope: &Scope) -> Result<(), Refusal> {
    if matches!(name, "" | "default" | "bridge" | "none")
        || scope.allows(Kind::Network, Access::Change, name)
    {
        Ok(())
    } else {
        Err(refuse(format!(
            "{what} {name} is not one of this stack's networks"
        )))
    }
}

/// `host` is refused; `container:X` must name the stack's own container.
fn namespace_mode(field_name: &str, value: &str, scope: &Scope) -> Result<(), Refusal> {
    if value == "host" {
        return Err(refuse(format!("{field_name} host is not allowed")));
    }
    if let Some(x) = value.strip_prefix("container:") {
        return own_container(field_name, x, scope);
    }
    Ok(())
}

/// A host path may be bound only from under an allowed root, with no `..`, never the engine's
/// socket.
fn bind_source(source: &str, rules: &CreateRules, engine_socket: &Path) -> Result<(), Refusal> {
    let path = Path::new(source);
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(refuse(format!("bind source {source} contains '..'")));
    }
    let sockets = [
        engine_socket,
        Path::new("/var/run/docker.sock"),
        Path::new("/run/docker.sock"),
    ];
    if sockets.iter().any(|s| path == *s || path.starts_with(s)) {
        return Err(refuse(format!(
            "bind source {source} is the engine's socket"
        )));
    }
    // `Path::starts_with` compares whole components: /srv/a does not admit /srv/ab.
    if rules.bind_roots.iter().any(|root| path.starts_with(root)) {
        Ok(())
    } else {
        Err(refuse(format!(
            "bind source {source} is not under an allowed bind root (--allow-bind-root)"
        )))
    }
}

fn binds(
    host: &Map<String, Value>,
    rules: &CreateRules,
    engine_socket: &Path,
) -> Result<(), Refusal> {
    for bind in strings(field(host, "Binds"))? {
        let source = bind.split(':').next().unwrap_or("");
        // A source that is not an absolute path is a named volume.
        if source.starts_with('/') {
            bind_source(source, rules, engine_socket)?;
        }
    }
    let mounts = match field(host, "Mounts") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(m)) => m,
        Some(_) => return Err(Refusal::BadRequest("Mounts must be a list".into())),
    };
    for m in mounts {
        let m = m
            .as_object()
            .ok_or_else(|| Refusal::BadRequest("a mount must be an object".into()))?;
        let kind = string(field(m, "Type"))?.to_ascii_lowercase();
        match kind.as_str() {
            "bind" => bind_source(string(field(m, "Source"))?, rules, engine_socket)?,
            "volume" => {
                let driver = field(m, "VolumeOptions")
                    .and_then(Value::as_object)
                    .and_then(|o| field(o, "DriverConfig"))
                    .and_then(Value::as_object);
                if let Some(d) = driver {
                    let name = string(field(d, "Name"))?;
                    let opts = field(d, "Options").and_then(Value::as_object);
                    let binds_host = opts.is_some_and(|o| {
                        field(o, "device").is_some()
                            || field(o, "o")
                                .and_then(Value::as_str)
                                .is_some_and(|v| v.split(',').any(|x| x == "bind" || x == "rbind"))
                    });
                    if binds_host || !matches!(name, "" | "local") {
                        return Err(refuse(
                            "volume driver options that bind a host device or path are not allowed",
                        ));
                    }
                }
            }
            "tmpfs" => {}
            other => return Err(refuse(format!("mounts of type {other:?} are not allowed"))),
        }
    }
    Ok(())
}

fn ports(host: &Map<String, Value>, rules: &CreateRules) -> Result<(), Refusal> {
    if rules.public_ports {
        return Ok(());
    }
    if present(field(host, "PublishAllPorts")) {
        return Err(refuse(
            "PublishAllPorts publishes on every address (--allow-public-ports)",
        ));
    }
    let Some(Value::Object(bindings)) = field(host, "PortBindings") else {
        return Ok(());
    };
    for (port, list) in bindings {
        for b in list.as_array().map(Vec::as_slice).unwrap_or(&[]) {
            let ip = b
                .as_object()
                .map(|o| string(field(o, "HostIp")))
                .transpose()?
                .unwrap_or("");
            if !matches!(ip, "127.0.0.1" | "::1") {
                let shown = if ip.is_empty() { "every address" } else { ip };
                return Err(refuse(format!(
                    "port {port} published on {shown}, not loopback (--allow-public-ports)"
                )));
            }
        }
    }
    Ok(())
}

const UNCONFINED: [&str; 8] = [
    "seccomp=unconfined",
    "seccomp:unconfined",
    "apparmor=unconfined",
    "apparmor:unconfined",
    "label=disable",
    "label:disable",
    "systempaths=unconfined",
    "systempaths:unconfined",
];

fn host_config(
    host: &Map<String, Value>,
    scope: &Scope,
    rules: &CreateRules,
    engine_socket: &Path,
) -> Result<(), Refusal> {
    if present(field(host, "Privileged")) {
        return Err(refuse("privileged containers are not allowed"));
    }
    for cap in strings(field(host, "CapAdd"))? {
        let bare = cap.trim_start_matches("CAP_").to_ascii_uppercase();
        if !rules
            .allow_caps
            .iter()
            .any(|a| a.trim_start_matches("CAP_").eq_ignore_ascii_case(&bare))
        {
            return Err(refuse(format!(
                "capability {cap} is not allowed (--allow-cap)"
            )));
        }
    }
    for f in ["Devices", "DeviceRequests", "DeviceCgroupRules"] {
        if present(field(host, f)) {
            return Err(refuse(format!("{f} are not allowed")));
        }
    }
    let net = string(field(host, "NetworkMode"))?;
    if net == "host" {
        return Err(refuse("NetworkMode host is not allowed"));
    } else if let Some(x) = net.strip_prefix("container:") {
        own_container("NetworkMode", x, scope)?;
    } else {
        own_network("NetworkMode", net, scope)?;
    }
    for f in [
        "PidMode",
        "IpcMode",
        "UTSMode",
        "UsernsMode",
        "CgroupnsMode",
    ] {
        namespace_mode(f, string(field(host, f))?, scope)?;
    }
    for opt in strings(field(host, "SecurityOpt"))? {
        let normalized = opt.replace(' ', "").to_ascii_lowercase();
        if UNCONFINED.contains(&normalized.as_str()) || normalized.starts_with("seccomp=unconfined")
        {
            return Err(refuse(format!("SecurityOpt {opt} is not allowed")));
        }
    }
    if present(field(host, "CgroupParent")) {
        return Err(refuse("CgroupParent is not allowed"));
    }
    let runtime = string(field(host, "Runtime"))?;
    if !matches!(runtime, "" | "runc") {
        return Err(refuse(format!("Runtime {runtime} is not allowed")));
    }
    binds(host, rules, engine_socket)?;
    for v in strings(field(host, "VolumesFrom"))? {
        own_container("VolumesFrom", v.split(':').next().unwrap_or(""), scope)?;
    }
    for l in strings(field(host, "Links"))? {
        own_container("Links", l.split(':').next().unwrap_or(""), scope)?;
    }
    ports(host, rules)
}

/// Decides on a parsed create body; returns the body to forward, labelled for `stack`.
pub fn check(
    mut body: Value,
    scope: &Scope,
    rules: &CreateRules,
    engine_socket: &Path,
    stack: &str,
) -> Result<Value, Refusal> {
    let obj = body
        .as_object_mut()
        .ok_or_else(|| Refusal::BadRequest("body is not a JSON object".into()))?;
    match field(obj, "HostConfig") {
        None | Some(Value::Null) => {}
        Some(Value::Object(host)) => host_config(host, scope, rules, engine_socket)?,
        Some(_) => return Err(Refusal::BadRequest("HostConfig must be an object".into())),
    }
    if let Some(Value::Object(nc)) = field(obj, "NetworkingConfig") {
        if let Some(Value::Object(eps)) = field(nc, "EndpointsConfig") {
            for name in eps.keys() {
                own_network("NetworkingConfig.EndpointsConfig", name, scope)?;
            }
        }
    }
    let labels_key = obj
        .keys()
        .find(|k| k.eq_ignore_ascii_case("Labels"))
        .cloned()
        .unwrap_or_else(|| "Labels".into());
    let labels = obj
        .entry(labels_key)
        .or_insert_with(|| Value::Object(Map::new()));
    if labels.is_null() {
        *labels = Value::Object(Map::new());
    }
    let labels = labels
        .as_object_mut()
        .ok_or_else(|| Refusal::BadRequest("Labels must be an object".into()))?;
    labels.insert(STACK_LABEL.into(), Value::String(stack.into()));
    Ok(body)
}

#[cfg(test)]
#[path = "create_body_tests.rs"]
mod tests;
