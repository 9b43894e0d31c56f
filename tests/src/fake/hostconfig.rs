//! How dockerd reads a container's HostConfig, including the two legacy paths that make a
//! body mean more than its `HostConfig` key says (issue 12), so tests see the danger:
//!
//! - 20.10 decodes `POST /containers/create` into `runconfig.ContainerConfigWrapper`
//!   (`runconfig/config_unix.go`), which embeds a deprecated `*container.HostConfig` at the top
//!   level. `getHostConfig` uses it whenever the `HostConfig` key is absent or `null`, and
//!   otherwise copies five resource fields from it into a zero inner value. Docker 29 ignores
//!   top-level HostConfig fields.
//! - 20.10's `postContainersStart` (`api/server/router/container/container_routes.go`): below
//!   API 1.24 a body longer than 7 bytes (or chunked) is decoded the same way and *replaces*
//!   the container's HostConfig; from 1.24 on it is a 400.
//!
//! Keys are matched like Go's `encoding/json`: case-insensitively (with its two non-ASCII folds,
//! `ſ` and the Kelvin sign), the last of several spellings winning, unknown keys ignored.
//! The effective value is kept with dockerd's canonical key names, so inspect shows it.

use serde_json::{json, Map, Value};

use super::flavor::Flavor;

/// `container.Config` fields (20.10).
const CONFIG: &[&str] = &[
    "Hostname",
    "Domainname",
    "User",
    "AttachStdin",
    "AttachStdout",
    "AttachStderr",
    "ExposedPorts",
    "Tty",
    "OpenStdin",
    "StdinOnce",
    "Env",
    "Cmd",
    "Healthcheck",
    "ArgsEscaped",
    "Image",
    "Volumes",
    "WorkingDir",
    "Entrypoint",
    "NetworkDisabled",
    "MacAddress",
    "OnBuild",
    "Labels",
    "StopSignal",
    "StopTimeout",
    "Shell",
];

/// `container.HostConfig` fields with its embedded `Resources` (20.10), as JSON names.
const HOST: &[&str] = &[
    "Binds",
    "ContainerIDFile",
    "LogConfig",
    "NetworkMode",
    "PortBindings",
    "RestartPolicy",
    "AutoRemove",
    "VolumeDriver",
    "VolumesFrom",
    "CapAdd",
    "CapDrop",
    "CgroupnsMode",
    "Dns",
    "DnsOptions",
    "DnsSearch",
    "ExtraHosts",
    "GroupAdd",
    "IpcMode",
    "Cgroup",
    "Links",
    "OomScoreAdj",
    "PidMode",
    "Privileged",
    "PublishAllPorts",
    "ReadonlyRootfs",
    "SecurityOpt",
    "StorageOpt",
    "Tmpfs",
    "UTSMode",
    "UsernsMode",
    "ShmSize",
    "Sysctls",
    "Runtime",
    "ConsoleSize",
    "Isolation",
    "CpuShares",
    "Memory",
    "NanoCpus",
    "CgroupParent",
    "BlkioWeight",
    "BlkioWeightDevice",
    "BlkioDeviceReadBps",
    "BlkioDeviceWriteBps",
    "BlkioDeviceReadIOps",
    "BlkioDeviceWriteIOps",
    "CpuPeriod",
    "CpuQuota",
    "CpuRealtimePeriod",
    "CpuRealtimeRuntime",
    "CpusetCpus",
    "CpusetMems",
    "Devices",
    "DeviceCgroupRules",
    "DeviceRequests",
    "KernelMemory",
    "KernelMemoryTCP",
    "MemoryReservation",
    "MemorySwap",
    "MemorySwappiness",
    "OomKillDisable",
    "PidsLimit",
    "Ulimits",
    "CpuCount",
    "CpuPercent",
    "IOMaximumIOps",
    "IOMaximumBandwidth",
    "Mounts",
    "MaskedPaths",
    "ReadonlyPaths",
    "Init",
];

/// The wrapper's own fields, which dominate the embedded ones.
const WRAPPER: &[&str] = &["HostConfig", "NetworkingConfig", "Cpuset"];

/// Nested structs whose keys are canonicalized too.
const NESTED: &[(&str, &[&str])] = &[
    ("LogConfig", &["Type", "Config"]),
    ("RestartPolicy", &["Name", "MaximumRetryCount"]),
];
const MOUNT: &[&str] = &[
    "Type",
    "Source",
    "Target",
    "ReadOnly",
    "Consistency",
    "BindOptions",
    "VolumeOptions",
    "TmpfsOptions",
];

/// 20.10 `getHostConfig`: inner fields that take the top-level value when they are zero.
const MERGED: &[&str] = &[
    "Memory",
    "MemorySwap",
    "CpuShares",
    "CpusetCpus",
    "VolumeDriver",
];

/// Go's case folding of a JSON key.
fn fold(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'ſ' => 'S',
            '\u{212A}' => 'K',
            c => c.to_ascii_uppercase(),
        })
        .collect()
}

fn canonical(key: &str, names: &[&'static str]) -> Option<&'static str> {
    let f = fold(key);
    names.iter().copied().find(|n| fold(n) == f)
}

/// The members of a JSON object in document order (duplicates kept), or `None` if `raw` is
/// not an object. `raw` must be valid JSON.
pub fn members(raw: &str) -> Option<Vec<(String, Value)>> {
    let b = raw.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    let mut out = Vec::new();
    while b.get(i) == Some(&b'"') {
        let key_end = value_end(b, i);
        let key: String = serde_json::from_str(raw.get(i..key_end)?).ok()?;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_ws(b, i + 1);
        let end = value_end(b, start);
        out.push((key, serde_json::from_str(raw.get(start..end)?).ok()?));
        i = skip_ws(b, end);
        if b.get(i) == Some(&b',') {
            i = skip_ws(b, i + 1);
        }
    }
    Some(out)
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// End (exclusive) of the JSON value starting at `i`.
fn value_end(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0usize;
    let mut in_str = false;
    let start = i;
    while let Some(&c) = b.get(i) {
        if in_str {
            match c {
                b'\\' => i += 1,
                b'"' => {
                    in_str = false;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            }
        } else {
            match c {
                b'"' => in_str = true,
                b'{' | b'[' => depth += 1,
                b'}' | b']' if depth == 0 => return i,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                b',' if depth == 0 && i > start => return i,
                c if depth == 0 && c.is_ascii_whitespace() && i > start => return i,
                _ => {}
            }
        }
        i += 1;
    }
    i
}

/// Canonical names, last spelling wins, unknown keys dropped.
fn canonicalize(pairs: Vec<(String, Value)>, names: &[&'static str]) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in pairs {
        if let Some(name) = canonical(&k, names) {
            out.insert(name.to_owned(), v);
        }
    }
    out
}

fn object_members(v: &Value) -> Option<Vec<(String, Value)>> {
    // A nested value was re-parsed by serde_json (order of *different* keys lost, exact
    // duplicates already collapsed); good enough below the top level.
    v.as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// A HostConfig object with canonical keys, nested structs included.
fn host_object(pairs: Vec<(String, Value)>) -> Map<String, Value> {
    let mut hc = canonicalize(pairs, HOST);
    for (field, names) in NESTED {
        if let Some(inner) = hc.get(*field).and_then(object_members) {
            hc.insert(
                (*field).to_owned(),
                Value::Object(canonicalize(inner, names)),
            );
        }
    }
    if let Some(Value::Array(mounts)) = hc.get_mut("Mounts") {
        for m in mounts.iter_mut() {
            if let Some(inner) = object_members(m) {
                *m = Value::Object(canonicalize(inner, MOUNT));
            }
        }
    }
    hc
}

/// A create (or pre-1.24 start) body as dockerd decodes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// `Config` fields, canonical names.
    pub config: Map<String, Value>,
    /// The effective HostConfig (canonical names), `None` when the body gave none.
    pub host: Option<Map<String, Value>>,
    pub networking: Value,
}

/// Decodes a body the way `decodeContainerConfig` / `decodeHostConfig` do on `flavor`.
pub fn decode(flavor: Flavor, raw: &[u8]) -> Result<Decoded, String> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(Decoded {
            config: Map::new(),
            host: None,
            networking: Value::Null,
        });
    }
    let text = std::str::from_utf8(raw).map_err(|e| format!("invalid JSON: {e}"))?;
    serde_json::from_str::<Value>(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let pairs = members(text)
        .ok_or("json: cannot unmarshal into Go value of type runconfig.ContainerConfigWrapper")?;
    let wrapper = canonicalize(pairs.clone(), WRAPPER);
    let config = canonicalize(pairs.clone(), CONFIG);
    let top: Vec<(String, Value)> = pairs
        .into_iter()
        .filter(|(k, _)| canonical(k, WRAPPER).is_none() && canonical(k, HOST).is_some())
        .collect();
    let top = (flavor == Flavor::Debian2010 && !top.is_empty()).then(|| host_object(top));
    let inner = match wrapper.get("HostConfig") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => object_members(v).map(host_object),
        Some(_) => {
            return Err("json: cannot unmarshal into Go struct field ContainerConfigWrapper.HostConfig of type container.HostConfig".into())
        }
    };
    let mut host = match (inner, top) {
        (None, top) => top,
        (Some(mut inner), Some(top)) => {
            for f in MERGED {
                let zero = inner.get(*f).is_none_or(is_zero);
                if let Some(v) = top.get(*f).filter(|v| !is_zero(v)) {
                    if zero {
                        inner.insert((*f).to_owned(), v.clone());
                    }
                }
            }
            Some(inner)
        }
        (Some(inner), None) => Some(inner),
    };
    // `SetDefaultNetModeIfBlank`.
    if let Some(h) = host.as_mut() {
        if h.get("NetworkMode")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            h.insert("NetworkMode".into(), json!("default"));
        }
    }
    Ok(Decoded {
        config,
        host,
        networking: wrapper
            .get("NetworkingConfig")
            .cloned()
            .unwrap_or(Value::Null),
    })
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

/// The HostConfig dockerd reports for what was given: its defaults, overlaid. An empty cgroup
/// namespace mode is the daemon's default for the flavor's cgroup version: the host's on v1
/// (20.10 here), a private one on v2 (29).
pub fn with_defaults(flavor: Flavor, given: Option<Map<String, Value>>) -> Value {
    let mut hc = json!({
        "Binds": null, "ContainerIDFile": "", "LogConfig": { "Type": "json-file", "Config": {} },
        "NetworkMode": "default", "PortBindings": {}, "RestartPolicy": { "Name": "no", "MaximumRetryCount": 0 },
        "AutoRemove": false, "VolumeDriver": "", "VolumesFrom": null, "CapAdd": null, "CapDrop": null,
        "IpcMode": "private", "Links": null, "OomScoreAdj": 0, "PidMode": "", "Privileged": false,
        "PublishAllPorts": false, "ReadonlyRootfs": false, "SecurityOpt": null, "UTSMode": "",
        "UsernsMode": "", "ShmSize": 67_108_864, "Devices": [], "DeviceCgroupRules": null,
        "OomKillDisable": false, "PidsLimit": null,
    });
    if let (Some(obj), Some(given)) = (hc.as_object_mut(), given) {
        for (k, v) in given {
            if !(v.is_null() && obj.get(&k).is_some_and(|d| !d.is_null())) {
                obj.insert(k, v);
            }
        }
    }
    if hc["CgroupnsMode"].as_str().is_none_or(str::is_empty) {
        hc["CgroupnsMode"] = match flavor {
            Flavor::Debian2010 => "host",
            Flavor::Docker29 => "private",
        }
        .into();
    }
    hc
}

/// What `POST /containers/{id}/start` does with its body on 20.10 (`postContainersStart`):
/// `Ok(None)` start as created, `Ok(Some(hc))` replace the HostConfig first, `Err` a 400.
pub fn start_body(
    flavor: Flavor,
    version: Option<&str>,
    content_length: Option<u64>,
    chunked: bool,
    content_type: Option<&str>,
    raw: &[u8],
) -> Result<Option<Value>, String> {
    // "A non-nil json object is at least 7 characters."
    if !(chunked || content_length.is_some_and(|l| l > 7)) {
        return Ok(None);
    }
    let v = version.unwrap_or(flavor.api_version());
    let parsed = v
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
    if parsed.is_none_or(|p| p >= (1, 24)) {
        return Err("starting container with non-empty request body was deprecated since API v1.22 and removed in v1.24".into());
    }
    // `httputils.CheckForJSON`.
    let ct = content_type.unwrap_or("");
    let media = ct.split(';').next().unwrap_or("").trim();
    if !media.eq_ignore_ascii_case("application/json") {
        return Err(format!(
            "Content-Type specified ({ct}) must be 'application/json'"
        ));
    }
    let d = decode(flavor, raw)?;
    Ok(Some(with_defaults(flavor, d.host)))
}

#[cfg(test)]
#[path = "hostconfig_tests.rs"]
mod tests;
