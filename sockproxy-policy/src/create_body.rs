//! What a stack may ask for when it creates a container (`POST /containers/create`). The body
//! is read the way dockerd reads it, 20.10's legacy shape included (HostConfig fields at the top
//! level, used when `HostConfig` is absent or null), checked field by field against an
//! allowlist, and the value forwarded is rebuilt from what was checked, with the
//! `sockproxy.stack` label stamped on it. A field outside the allowlist is refused by name.

use std::path::Path;

use serde_json::{Map, Value};

use crate::create_rules::{CreateRules, Ctx, HostPaths};
use crate::fields::{self, value_not_allowed, Reader};
use crate::refusal::Refusal;
use crate::scope::{Scope, STACK_LABEL};
use crate::{host_config, host_refs};

const OP: &str = "containers.create";

/// Decides on a parsed create body; returns the body to forward, labelled for `stack`.
pub fn check(
    body: Value,
    scope: &Scope,
    rules: &CreateRules,
    engine_socket: &Path,
    host: &dyn HostPaths,
    stack: &str,
) -> Result<Value, Refusal> {
    let stack_network = crate::stack_net::name(scope, stack);
    let ctx = Ctx {
        op: OP,
        scope,
        rules,
        engine_socket,
        stack_network: &stack_network,
        host,
    };
    if !body.is_object() {
        return Err(Refusal::BadRequest("body is not a JSON object".into()));
    }
    let mut r = Reader::new(OP, "", body)?;
    let mut o = Map::new();
    let inner = r.take("HostConfig");
    let legacy = r.take_all(host_config::FIELDS);
    let host = match (inner, legacy.is_empty()) {
        (Some(h), true) => h,
        // 20.10 reads top-level HostConfig fields when `HostConfig` is absent or null.
        (None, false) => {
            Value::Object(legacy.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
        }
        // Still a HostConfig, for what the proxy always sets (`host_config`). With one there,
        // 20.10 gives a client below API 1.40 a "shareable" IPC namespace where none had the
        // daemon's default, a private one: that stays as it was.
        (None, true) => serde_json::json!({ "IpcMode": "private" }),
        (Some(_), false) => {
            let (name, _) = &legacy[0];
            return Err(Refusal::Setting {
                op: OP.into(),
                why: format!(
                    "{name} at the top level beside HostConfig is not allowed for this stack"
                ),
            });
        }
    };
    o.insert("HostConfig".into(), host_config::host_config(&ctx, host)?);
    r.keep(&mut o, "NetworkingConfig", |_, p, v| {
        networking_config(&ctx, p, v)
    })?;
    crate::stack_net::place(&ctx, &stack_network, &mut o)?;
    for f in ["Hostname", "Domainname", "User"] {
        r.keep(&mut o, f, fields::any_string)?;
    }
    r.keep(&mut o, "WorkingDir", crate::paths::working_dir)?;
    r.keep(&mut o, "StopSignal", crate::spend::stop_signal)?;
    for f in [
        "AttachStdin",
        "AttachStdout",
        "AttachStderr",
        "Tty",
        "OpenStdin",
        "StdinOnce",
        "ArgsEscaped",
        "NetworkDisabled",
    ] {
        r.keep(&mut o, f, fields::any_bool)?;
    }
    r.keep(&mut o, "ExposedPorts", fields::any_key_set)?;
    r.keep(&mut o, "Volumes", |r, p, v| {
        let set = fields::key_set(p, v)?;
        for target in set.as_object().into_iter().flat_map(|m| m.keys()) {
            crate::paths::mount_target(r.op(), p, target)?;
        }
        Ok(set)
    })?;
    for f in ["Env", "OnBuild", "Shell"] {
        r.keep(&mut o, f, fields::any_str_list)?;
    }
    r.keep(&mut o, "Cmd", fields::any_str_slice)?;
    r.keep(&mut o, "Entrypoint", fields::any_str_slice)?;
    r.keep(&mut o, "Healthcheck", |r, p, v| {
        crate::spend::healthcheck(&rules.spend, r, p, v)
    })?;
    r.keep(&mut o, "StopTimeout", |r, p, v| {
        crate::spend::stop_timeout(&rules.spend, r, p, v)
    })?;
    r.keep(&mut o, "Image", |r, p, v| {
        let image = fields::string(p, v)?;
        let normalized = crate::images::normalize_image(&image);
        if !rules.allow_images.is_empty() && !rules.allow_images.contains(&normalized) {
            return Err(value_not_allowed(r.op(), p, &image, "--allow-image"));
        }
        Ok(Value::String(image))
    })?;
    stamp_stack_label(&mut r, &mut o, stack)?;
    r.zero_kept(&mut o, &["MacAddress"])?;
    r.finish()?;
    crate::mounts::no_anonymous_volumes(OP, &o)?;
    Ok(Value::Object(o))
}

/// Forwards the client's `Labels` with `sockproxy.stack=<stack>` set over whatever it said: how
/// `--require-stack-label` later knows a container or network as this stack's.
pub(crate) fn stamp_stack_label(
    r: &mut Reader,
    o: &mut Map<String, Value>,
    stack: &str,
) -> Result<(), Refusal> {
    let mut labels = r
        .take("Labels")
        .map(|l| fields::str_map("Labels", l))
        .transpose()?
        .unwrap_or_default();
    if let Some(k) = labels
        .keys()
        .find(|k| k.starts_with(crate::bind_pins::BIND_LABEL_PREFIX))
    {
        return Err(value_not_allowed(
            r.op(),
            "Labels",
            k,
            "the proxy sets sockproxy.bind.* labels on pinned binds",
        ));
    }
    crate::deployment::no_compose_label(r.op(), "Labels", labels.keys())?;
    labels.insert(STACK_LABEL.into(), Value::String(stack.into()));
    o.insert("Labels".into(), Value::Object(labels));
    Ok(())
}

/// The stack's own networks a checked create body puts the container on (`HostConfig.NetworkMode`
/// and the `NetworkingConfig.EndpointsConfig` keys), the engine's defaults and the stack's
/// network (`stack_net`, judged on its own) left out: under `--require-stack-label` the proxy
/// inspects each for the stack's label before it creates.
pub fn joined_networks(out: &Value, stack_network: &str) -> Vec<String> {
    let engines = |n: &str| {
        matches!(n, "" | "default" | "bridge" | "none" | "host")
            || n.starts_with("container:")
            || n == stack_network
    };
    let mode = out
        .get("HostConfig")
        .and_then(|h| h.get("NetworkMode"))
        .and_then(Value::as_str);
    let endpoints = out
        .get("NetworkingConfig")
        .and_then(|n| n.get("EndpointsConfig"))
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|eps| eps.keys().map(String::as_str));
    let mut names: Vec<String> = Vec::new();
    for n in mode.into_iter().chain(endpoints) {
        if !engines(n) && !names.iter().any(|x| x == n) {
            names.push(n.to_owned());
        }
    }
    names
}

/// `NetworkingConfig.EndpointsConfig`: only the stack's networks (or the engine's defaults).
fn networking_config(ctx: &Ctx, path: &str, v: Value) -> Result<Value, Refusal> {
    let mut r = Reader::new(ctx.op, path, v)?;
    let mut o = Map::new();
    if let Some(eps) = r.take("EndpointsConfig") {
        let at = r.path("EndpointsConfig");
        let Value::Object(eps) = eps else {
            return Err(Refusal::BadRequest(format!("{at} must be an object")));
        };
        let mut out = Map::new();
        for (name, settings) in eps {
            // `NetworkMode: ""` means the default network, but an empty key here reaches the
            // engine's network lookup as an ID prefix that every network matches, and the
            // start then fails naming how many networks the host holds.
            if name.is_empty() {
                return Err(Refusal::Setting {
                    op: ctx.op.to_owned(),
                    why: format!("{at} has a network with an empty name"),
                });
            }
            host_refs::own_network(ctx, &at, &name)?;
            out.insert(
                name.clone(),
                endpoint_settings(ctx, &format!("{at}.{name}"), settings)?,
            );
        }
        o.insert("EndpointsConfig".into(), Value::Object(out));
    }
    r.finish()?;
    Ok(Value::Object(o))
}

/// An endpoint on one of the stack's networks (create's `NetworkingConfig`, network connect).
/// `NetworkID` would let the key name one network and the ID attach another: it, the
/// engine-assigned fields and driver options are accepted only empty.
pub fn endpoint_settings(ctx: &Ctx, path: &str, v: Value) -> Result<Value, Refusal> {
    let mut r = Reader::new(ctx.op, path, v)?;
    let mut o = Map::new();
    r.keep(&mut o, "IPAMConfig", |r, p, v| {
        let mut ir = Reader::new(r.op(), p, v)?;
        let mut io = Map::new();
        ir.keep(&mut io, "IPv4Address", fields::any_string)?;
        ir.keep(&mut io, "IPv6Address", fields::any_string)?;
        ir.keep(&mut io, "LinkLocalIPs", fields::any_str_list)?;
        ir.finish()?;
        Ok(Value::Object(io))
    })?;
    r.keep(&mut o, "Links", |_, p, v| {
        let list = fields::str_list(p, v)?;
        for l in &list {
            host_refs::own_container(ctx, p, host_refs::linked(ctx, p, l)?)?;
        }
        Ok(Value::from(list))
    })?;
    r.keep(&mut o, "Aliases", fields::any_str_list)?;
    r.keep(&mut o, "GwPriority", fields::any_int)?;
    r.zero_kept(
        &mut o,
        &[
            "NetworkID",
            "EndpointID",
            "Gateway",
            "IPAddress",
            "IPPrefixLen",
            "IPv6Gateway",
            "GlobalIPv6Address",
            "GlobalIPv6PrefixLen",
            "MacAddress",
            "DriverOpts",
            "DNSNames",
        ],
    )?;
    r.finish()?;
    Ok(Value::Object(o))
}

#[cfg(test)]
#[path = "create_body_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "create_body_rule_tests.rs"]
mod rule_tests;

#[cfg(test)]
#[path = "create_body_reach_tests.rs"]
mod reach_tests;
