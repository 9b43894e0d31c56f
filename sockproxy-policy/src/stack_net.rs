//! The stack's own network. Every stack's containers used to share the engine's default
//! bridge, where a container one stack made reached another stack's sandboxes; now a create
//! that names no network (`NetworkMode` empty or `default`) is put on the stack's own network
//! (`name`): a bridge with inter-container traffic off (`enable_icc=false`: one stack serves
//! many users, so its sandboxes do not reach each other either), labelled `sockproxy.stack`.
//! An explicit `bridge` is refused unless the operator allows it (`--allow-default-bridge`).
//! The proxy makes the network (the transport, under the stack's lock, with `create_body`) at
//! the first create that needs it; the stack may put containers on it, never change or remove
//! it (it is in no family a stack may change). A network the engine already holds under that
//! name is used only when it is what the proxy would have made (`judge`); otherwise nothing is
//! placed on it. Also here: `NET_RAW` is dropped from every container unless the operator
//! allows it, so a container cannot forge packets on its network (ARP spoofing).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::create_rules::Ctx;
use crate::evaluate::Policy;
use crate::fields::value_not_allowed;
use crate::refusal::Refusal;
use crate::scope::{Scope, STACK_LABEL};

/// The bridge option that turns inter-container traffic off.
pub const ICC: &str = "com.docker.network.bridge.enable_icc";

/// The stack's network: `{P}net`; under `--require-stack-label`, where stacks share a prefix
/// and must share no network, `{P}net_` and the first 16 hex of SHA-256 of the stack's name.
/// Neither is in a family a stack may change.
pub fn name(scope: &Scope, stack: &str) -> String {
    let p = scope.prefix().as_str();
    if scope.requires_label() {
        format!("{p}net_{}", stackmodel::k(stack))
    } else {
        format!("{p}net")
    }
}

/// What the transport asks the engine to make when it holds no network of that name.
pub fn create_body(policy: &Policy) -> Value {
    json!({
        "Name": name(&policy.scope, &policy.stack),
        "CheckDuplicate": true,
        "Driver": "bridge",
        "Internal": false,
        "EnableIPv6": false,
        "Options": { ICC: "false" },
        "Labels": { STACK_LABEL: policy.stack },
    })
}

/// Puts a checked create on the stack's network `net` when it names none (`NetworkMode` empty
/// or `default`; settings given under `EndpointsConfig.default` move to `net`), and refuses
/// the engine's default bridge, by `NetworkMode` or endpoint, unless the operator allows it.
pub(crate) fn place(ctx: &Ctx, net: &str, o: &mut Map<String, Value>) -> Result<(), Refusal> {
    let bridge = |path: &str| -> Refusal {
        value_not_allowed(
            ctx.op,
            path,
            "bridge",
            &format!("this stack's containers go on its own network {net}; --allow-default-bridge"),
        )
    };
    let allowed = ctx.rules.allow_default_bridge;
    let mode = o
        .get("HostConfig")
        .and_then(|h| h.get("NetworkMode"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if mode == "bridge" && !allowed {
        return Err(bridge("HostConfig.NetworkMode"));
    }
    let default_mode = matches!(mode.as_str(), "" | "default");
    if let Some(eps) = o
        .get_mut("NetworkingConfig")
        .and_then(|n| n.get_mut("EndpointsConfig"))
        .and_then(Value::as_object_mut)
    {
        if eps.contains_key("bridge") && !allowed {
            return Err(bridge("NetworkingConfig.EndpointsConfig"));
        }
        // dockerd reads `default` here as the daemon's default network when the mode is the
        // default; that network is now the stack's.
        if default_mode {
            if let Some(settings) = eps.remove("default") {
                if eps.contains_key(net) {
                    return Err(Refusal::BadRequest(format!(
                        "{}: NetworkingConfig.EndpointsConfig names {net} twice (as default)",
                        ctx.op
                    )));
                }
                eps.insert(net.to_owned(), settings);
            }
        }
    }
    if default_mode {
        if let Some(Value::Object(h)) = o.get_mut("HostConfig") {
            h.insert("NetworkMode".into(), Value::String(net.to_owned()));
        }
    }
    Ok(())
}

/// Whether a checked create body puts the container on the stack's network `net`.
pub(crate) fn uses(checked: &Value, net: &str) -> bool {
    let mode = checked
        .get("HostConfig")
        .and_then(|h| h.get("NetworkMode"))
        .and_then(Value::as_str);
    let endpoint = checked
        .get("NetworkingConfig")
        .and_then(|n| n.get("EndpointsConfig"))
        .and_then(|e| e.get(net))
        .is_some();
    mode == Some(net) || endpoint
}

/// `CapDrop` with `NET_RAW` added, unless the operator lets the stack keep it (`--allow-cap
/// NET_RAW`) or the client drops it already (or `ALL`).
pub(crate) fn drop_net_raw(ctx: &Ctx, o: &mut Map<String, Value>) {
    if ctx.rules.allows_cap("NET_RAW") {
        return;
    }
    let mut drops: Vec<Value> = match o.remove("CapDrop") {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    let dropped = drops.iter().filter_map(Value::as_str).any(|c| {
        let bare = crate::create_rules::bare_cap(c);
        bare == "NET_RAW" || bare == "ALL"
    });
    if !dropped {
        drops.push(Value::from("NET_RAW"));
    }
    o.insert("CapDrop".into(), Value::Array(drops));
}

/// The stack's network as the engine's inspect describes it: what `judge` reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Held {
    #[serde(rename = "Id")]
    pub id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Driver", default)]
    driver: String,
    #[serde(rename = "Internal", default)]
    internal: bool,
    #[serde(rename = "EnableIPv6", default)]
    ipv6: bool,
    #[serde(rename = "Attachable", default)]
    attachable: bool,
    #[serde(rename = "Ingress", default)]
    ingress: bool,
    #[serde(rename = "ConfigOnly", default)]
    config_only: bool,
    #[serde(rename = "Options", default)]
    options: Option<BTreeMap<String, String>>,
    #[serde(rename = "Labels", default)]
    labels: Option<BTreeMap<String, String>>,
}

impl Held {
    /// A network inspect answer.
    pub fn read(body: &[u8]) -> Result<Self, Refusal> {
        serde_json::from_slice(body)
            .map_err(|e| Refusal::Upstream(format!("unreadable network inspect answer: {e}")))
    }
}

/// Whether `held`, the network the engine holds under the stack network's name, is one the
/// proxy made for this stack: the stack's label, a plain bridge with inter-container traffic
/// off and no other option. Anything else (made by hand, by another stack, changed) is not
/// used: the create is refused, and the message says what to do.
pub(crate) fn judge(op: &str, held: &Held, policy: &Policy) -> Result<(), Refusal> {
    let want = name(&policy.scope, &policy.stack);
    let label = held.labels.as_ref().and_then(|l| l.get(STACK_LABEL));
    let options = held.options.clone().unwrap_or_default();
    let mut wrong = Vec::new();
    if held.name != want {
        wrong.push(format!("its name is {}", held.name));
    }
    if label.map(String::as_str) != Some(policy.stack.as_str()) {
        wrong.push(format!("it has no {STACK_LABEL}={} label", policy.stack));
    }
    if held.driver != "bridge" {
        wrong.push(format!("its driver is {:?}", held.driver));
    }
    for (set, what) in [
        (held.internal, "internal"),
        (held.ipv6, "IPv6"),
        (held.attachable, "attachable"),
        (held.ingress, "ingress"),
        (held.config_only, "config-only"),
    ] {
        if set {
            wrong.push(format!("it is {what}"));
        }
    }
    let expected = BTreeMap::from([(ICC.to_owned(), "false".to_owned())]);
    if options != expected {
        wrong.push(format!(
            "its options are {options:?}, not {ICC}=false alone"
        ));
    }
    if wrong.is_empty() {
        return Ok(());
    }
    Err(Refusal::StackNetwork {
        op: op.to_owned(),
        why: format!(
            "the engine holds a network {want} that sockproxy did not make for this stack ({}); nothing is put on it: remove or rename it and sockproxy makes its own",
            wrong.join(", ")
        ),
    })
}

#[cfg(test)]
#[path = "stack_net_tests.rs"]
mod tests;
