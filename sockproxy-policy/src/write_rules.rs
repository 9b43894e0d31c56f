//! Bodies of writes other than container create, each read field by field into the value
//! forwarded (`fields::Reader`): exec create and start (no privileged exec), container update
//! (resource limits only), network create (name in scope, bridge driver,
//! an allowlist of options, no config-from), network connect and disconnect (own endpoints).

use std::path::Path;

use serde_json::{Map, Value};

use crate::create_body::{endpoint_settings, stamp_stack_label};
use crate::create_rules::{CreateRules, Ctx, NoPaths};
use crate::fields::{self, Reader};
use crate::host_config;
use crate::limits::At;
use crate::refusal::Refusal;
use crate::scope::{Access, Kind, Scope};

fn object(v: &Value) -> Result<(), Refusal> {
    if v.is_object() {
        Ok(())
    } else {
        Err(Refusal::BadRequest("body is not a JSON object".into()))
    }
}

/// `POST /containers/{id}/exec`.
pub fn exec_create(v: Value) -> Result<Value, Refusal> {
    object(&v)?;
    let mut r = Reader::new("containers.exec", "", v)?;
    let mut o = Map::new();
    r.keep(&mut o, "Privileged", |r, p, v| {
        if fields::boolean(p, &v)? {
            Err(Refusal::Setting {
                op: r.op().into(),
                why: "privileged exec is not allowed".into(),
            })
        } else {
            Ok(Value::Bool(false))
        }
    })?;
    for f in ["User", "DetachKeys"] {
        r.keep(&mut o, f, fields::any_string)?;
    }
    r.keep(&mut o, "WorkingDir", crate::paths::working_dir)?;
    for f in [
        "Tty",
        "AttachStdin",
        "AttachStdout",
        "AttachStderr",
        "Detach",
    ] {
        r.keep(&mut o, f, fields::any_bool)?;
    }
    r.keep(&mut o, "ConsoleSize", console)?;
    r.keep(&mut o, "Env", fields::any_str_list)?;
    r.keep(&mut o, "Cmd", fields::any_str_slice)?;
    // docker-py also names the container in the body; dockerd has no such field and reads the
    // path, which the proxy pins, so the string is accepted and not forwarded.
    if let Some(c) = r.take("Container") {
        fields::string("Container", c)?;
    }
    r.finish()?;
    Ok(Value::Object(o))
}

/// `POST /exec/{id}/start`: `{Detach, Tty, ConsoleSize}`.
pub fn exec_start(v: Value) -> Result<Value, Refusal> {
    object(&v)?;
    let mut r = Reader::new("exec.start", "", v)?;
    let mut o = Map::new();
    r.keep(&mut o, "Detach", fields::any_bool)?;
    r.keep(&mut o, "Tty", fields::any_bool)?;
    r.keep(&mut o, "ConsoleSize", console)?;
    r.finish()?;
    Ok(Value::Object(o))
}

fn console(_: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    match &v {
        Value::Array(a) if a.len() == 2 && a.iter().all(|x| x.as_u64().is_some()) => Ok(v),
        _ => Err(Refusal::BadRequest(format!(
            "{p} must be two non-negative integers"
        ))),
    }
}

/// `POST /containers/{id}/update`: `container.UpdateConfig`, resources and restart policy.
/// `version` is the request's API version, if its path names one.
pub fn update(
    v: Value,
    version: Option<&str>,
    spend: &crate::spend::Spend,
) -> Result<Value, Refusal> {
    object(&v)?;
    let mut r = Reader::new("containers.update", "", v)?;
    let mut o = Map::new();
    // Below API 1.40 dockerd drops `PidsLimit` from an update, and clients of that age send
    // `0` with every update (no `omitempty`), so 0 is "not set" there as at create.
    let old = version
        .and_then(crate::canon::api_version)
        .is_some_and(|v| v < (1, 40));
    let at = if old { At::OldUpdate } else { At::Update };
    host_config::resources(&mut r, &mut o, at, spend)?;
    // Changing the restart policy is not a resource limit (the CLI sends it empty).
    r.zero_kept(&mut o, &["RestartPolicy"])?;
    r.finish()?;
    Ok(Value::Object(o))
}

/// Bridge options a stack may set; everything else (a host bridge's name, host binding
/// addresses, ...) is refused by name. The gateway modes are limited further by
/// `GATEWAY_MODES`.
const BRIDGE_OPTIONS: [&str; 7] = [
    "com.docker.network.bridge.enable_icc",
    INHIBIT_IPV4,
    "com.docker.network.bridge.enable_ip_masquerade",
    "com.docker.network.bridge.gateway_mode_ipv4",
    "com.docker.network.bridge.gateway_mode_ipv6",
    "com.docker.network.driver.mtu",
    "com.docker.network.container_iface_prefix",
];

/// The bridge option that gives the host no IPv4 address on the network.
const INHIBIT_IPV4: &str = "com.docker.network.bridge.inhibit_ipv4";

/// The gateway modes a stack may choose. `nat-unprotected` and `routed` (engine 28 and later)
/// drop the rule that keeps other hosts from reaching container addresses directly, which would
/// expose every port of a sandbox without `--allow-public-ports`.
const GATEWAY_MODES: [&str; 2] = ["nat", "isolated"];

/// `POST /networks/create`.
pub fn network_create(v: Value, scope: &Scope, stack: &str) -> Result<Value, Refusal> {
    const OP: &str = "networks.create";
    object(&v)?;
    let mut r = Reader::new(OP, "", v)?;
    let mut o = Map::new();
    let name = match r.take("Name") {
        Some(Value::String(n)) => n,
        _ => {
            return Err(Refusal::BadRequest(
                "networks.create: body has no string Name".into(),
            ))
        }
    };
    if !scope.allows(Kind::Network, Access::Change, &name) {
        return Err(Refusal::NetworkOutOfScope {
            op: OP.into(),
            name,
        });
    }
    o.insert("Name".into(), Value::String(name));
    r.keep(&mut o, "Driver", |r, p, v| {
        let d = fields::string(p, v)?;
        if matches!(d.as_str(), "" | "bridge") {
            Ok(Value::String(d))
        } else {
            Err(Refusal::Setting {
                op: r.op().into(),
                why: format!("driver {d} is not allowed"),
            })
        }
    })?;
    r.keep(&mut o, "Scope", fields::one_of(&["", "local"]))?;
    for f in ["CheckDuplicate", "EnableIPv4", "EnableIPv6", "Internal"] {
        r.keep(&mut o, f, fields::any_bool)?;
    }
    // Always checked: without it an engine before API 1.44 makes a second network of a name
    // that exists, and every lookup by that name (another stack's among them) is then ambiguous.
    o.insert("CheckDuplicate".into(), Value::Bool(true));
    for f in ["Attachable", "Ingress", "ConfigOnly"] {
        r.keep(&mut o, f, fields::false_only)?;
    }
    // A config-only network chosen by name would bring in options refused when sent directly.
    r.zero_kept(&mut o, &["ConfigFrom"])?;
    // Stamped like a container's: `--require-stack-label` then knows the network as this
    // stack's, and one made elsewhere under the same prefix as not.
    stamp_stack_label(&mut r, &mut o, stack)?;
    r.keep(&mut o, "IPAM", |r, p, v| {
        let mut ir = Reader::new(r.op(), p, v)?;
        let mut io = Map::new();
        ir.keep(&mut io, "Driver", fields::one_of(&["", "default"]))?;
        // A chosen subnet could shadow a host route; the engine picks one from its pools.
        ir.zero_kept(&mut io, &["Config", "Options"])?;
        ir.finish()?;
        Ok(Value::Object(io))
    })?;
    r.keep(&mut o, "Options", |r, p, v| {
        let opts = fields::str_map(p, v)?;
        if let Some(k) = opts.keys().find(|k| !BRIDGE_OPTIONS.contains(&k.as_str())) {
            return Err(Refusal::Setting {
                op: r.op().into(),
                why: format!("option {k} is not allowed for this stack"),
            });
        }
        for (k, v) in &opts {
            let mode = v.as_str().unwrap_or_default();
            if k.contains(".gateway_mode_") && !GATEWAY_MODES.contains(&mode) {
                return Err(Refusal::Setting {
                    op: r.op().into(),
                    why: format!("option {k}={mode} is not allowed for this stack"),
                });
            }
        }
        Ok(Value::Object(opts))
    })?;
    r.finish()?;
    if o.get("Internal") == Some(&Value::Bool(true)) {
        host_off(&mut o)?;
    }
    // A sandbox's own network is its only way out being the sidecar: made without `Internal`
    // it would carry a default route past netproxy for every sandbox later put on it.
    let name = o.get("Name").and_then(Value::as_str).unwrap_or_default();
    let internal_only = stackmodel::family_of(scope.prefix(), Kind::Network, name)
        .is_some_and(|f| f.role == "sandbox-net-");
    if internal_only && o.get("Internal") != Some(&Value::Bool(true)) {
        return Err(Refusal::Setting {
            op: OP.into(),
            why: format!(
                "{name} is a sandbox's internal network and must be made with Internal: true"
            ),
        });
    }
    Ok(Value::Object(o))
}

/// An internal network keeps its containers off the host too: made with
/// `inhibit_ipv4=true` (added when the client did not set it; any other value is refused), the
/// bridge holds no IPv4 address, so a sandbox reaches no host service through the gateway
/// address, or any other host address (dockerd 20.10: no address, no route; the containers on
/// it still reach each other). IPv6 on it would give the bridge an address again: refused.
fn host_off(o: &mut Map<String, Value>) -> Result<(), Refusal> {
    const OP: &str = "networks.create";
    if o.get("EnableIPv6") == Some(&Value::Bool(true)) {
        return Err(Refusal::Setting {
            op: OP.into(),
            why: "EnableIPv6 true is not allowed for this stack on an internal network (the host would hold an IPv6 address on it)".into(),
        });
    }
    let options = o
        .entry("Options")
        .or_insert_with(|| Value::Object(Map::new()));
    if options.is_null() {
        *options = Value::Object(Map::new());
    }
    let Value::Object(options) = options else {
        return Err(Refusal::BadRequest("Options must be an object".into()));
    };
    match options.get(INHIBIT_IPV4).and_then(Value::as_str) {
        None => {
            options.insert(INHIBIT_IPV4.into(), Value::from("true"));
        }
        // Go's `strconv.ParseBool`, as the bridge driver reads the option.
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => {}
        Some(other) => {
            return Err(Refusal::Setting {
                op: OP.into(),
                why: format!("option {INHIBIT_IPV4}={other} is not allowed for this stack on an internal network (the host would hold an address on it)"),
            })
        }
    }
    Ok(())
}

/// `POST /networks/{id}/connect` and `/disconnect`: the container reference (returned for the
/// caller to resolve and pin) and the rest of the body as it will be forwarded.
pub fn network_attach(
    op: &str,
    v: Value,
    scope: &Scope,
    rules: &CreateRules,
) -> Result<(String, Map<String, Value>), Refusal> {
    object(&v)?;
    let mut r = Reader::new(op, "", v)?;
    let container = match r.take("Container") {
        Some(Value::String(c)) => c,
        _ => return Err(Refusal::BadRequest(format!("{op}: body has no Container"))),
    };
    let mut o = Map::new();
    if op == "networks.connect" {
        let ctx = Ctx {
            op,
            scope,
            rules,
            engine_socket: Path::new("/"),
            // An endpoint's settings name no network (the path does, checked by name).
            stack_network: "",
            host: &NoPaths,
        };
        r.keep(&mut o, "EndpointConfig", |_, p, v| {
            endpoint_settings(&ctx, p, v)
        })?;
    } else {
        r.keep(&mut o, "Force", fields::any_bool)?;
    }
    r.finish()?;
    Ok((container, o))
}

#[cfg(test)]
#[path = "write_rules_tests.rs"]
mod tests;
