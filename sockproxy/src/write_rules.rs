//! Decisions on the bodies of writes other than container create: exec create (no privileged
//! exec), container update (resource limits only) and network create (name in scope; no driver
//! or option that attaches to a host bridge or interface). Pure; bodies come from
//! `body::parse_checked`, fields are matched as Go matches them.

use serde_json::{Map, Value};

use crate::create_body::field;
use crate::refusal::Refusal;
use crate::scope::{Access, Kind, Scope};

fn setting(op: &str, why: impl Into<String>) -> Refusal {
    Refusal::Setting {
        op: op.into(),
        why: why.into(),
    }
}

fn object(v: &Value) -> Result<&Map<String, Value>, Refusal> {
    v.as_object()
        .ok_or_else(|| Refusal::BadRequest("body is not a JSON object".into()))
}

pub fn exec_create(v: &Value) -> Result<(), Refusal> {
    match field(object(v)?, "Privileged") {
        Some(Value::Bool(true)) => {
            Err(setting("containers.exec", "privileged exec is not allowed"))
        }
        None | Some(Value::Null | Value::Bool(false)) => Ok(()),
        Some(_) => Err(Refusal::BadRequest("Privileged must be a boolean".into())),
    }
}

/// Fields of `POST /containers/{id}/update` that only change resource limits (dockerd's
/// `container.Resources`, less devices, cgroup parent and OOM-killer switches).
const RESOURCE_FIELDS: [&str; 24] = [
    "CpuShares",
    "Memory",
    "NanoCpus",
    "CpuPeriod",
    "CpuQuota",
    "CpuRealtimePeriod",
    "CpuRealtimeRuntime",
    "CpusetCpus",
    "CpusetMems",
    "MemoryReservation",
    "MemorySwap",
    "MemorySwappiness",
    "KernelMemory",
    "KernelMemoryTCP",
    "PidsLimit",
    "Ulimits",
    "CpuCount",
    "CpuPercent",
    "IOMaximumIOps",
    "IOMaximumBandwidth",
    "BlkioWeight",
    "BlkioWeightDevice",
    "BlkioDeviceReadBps",
    "BlkioDeviceWriteBps",
];

/// Unset or empty is not a change (the docker CLI sends every field, zero when not given).
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_zero),
    }
}

pub fn update(v: &Value) -> Result<(), Refusal> {
    for (key, value) in object(v)? {
        let resource = RESOURCE_FIELDS.iter().any(|f| f.eq_ignore_ascii_case(key))
            || key.eq_ignore_ascii_case("BlkioDeviceReadIOps")
            || key.eq_ignore_ascii_case("BlkioDeviceWriteIOps");
        if !resource && !is_zero(value) {
            return Err(setting(
                "containers.update",
                format!("{key} is not a resource limit"),
            ));
        }
    }
    Ok(())
}

/// Options that put a network on an existing host bridge or interface.
const HOST_ATTACH_OPTIONS: [&str; 3] = ["com.docker.network.bridge.name", "parent", "macvlan_mode"];

pub fn network_create(v: &Value, scope: &Scope) -> Result<(), Refusal> {
    let obj = object(v)?;
    let name = match field(obj, "Name") {
        Some(Value::String(n)) => n.as_str(),
        _ => {
            return Err(Refusal::BadRequest(
                "networks.create: body has no string Name".into(),
            ))
        }
    };
    if !scope.allows(Kind::Network, Access::Change, name) {
        return Err(Refusal::NetworkOutOfScope {
            op: "networks.create".into(),
            name: name.into(),
        });
    }
    let driver = match field(obj, "Driver") {
        None | Some(Value::Null) => "",
        Some(Value::String(d)) => d.as_str(),
        Some(_) => return Err(Refusal::BadRequest("Driver must be a string".into())),
    };
    if !matches!(driver, "" | "bridge") {
        return Err(setting(
            "networks.create",
            format!("driver {driver} is not allowed"),
        ));
    }
    if let Some(Value::Object(opts)) = field(obj, "Options") {
        for key in opts.keys() {
            if HOST_ATTACH_OPTIONS
                .iter()
                .any(|o| o.eq_ignore_ascii_case(key))
            {
                return Err(setting(
                    "networks.create",
                    format!("option {key} would attach to a host bridge or interface"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Prefix;
    use serde_json::json;

    #[test]
    fn exec_update_and_network_tables() {
        assert!(exec_create(&json!({ "Cmd": ["sh"], "Privileged": false })).is_ok());
        assert_eq!(
            exec_create(&json!({ "privileged": true })).map_err(|e| e.to_string()),
            Err("sockproxy: containers.exec: privileged exec is not allowed".into())
        );
        // What `docker update --memory 64m` sends: every resource field, most of them zero.
        assert!(update(&json!({ "Memory": 67108864, "CpuShares": 0, "RestartPolicy": { "Name": "", "MaximumRetryCount": 0 } })).is_ok());
        assert_eq!(
            update(&json!({ "RestartPolicy": { "Name": "always" } })).map_err(|e| e.to_string()),
            Err("sockproxy: containers.update: RestartPolicy is not a resource limit".into())
        );
        assert!(update(&json!({ "Devices": [{ "PathOnHost": "/dev/sda" }] })).is_err());
        assert!(update(&json!({ "Privileged": true })).is_err());
        let s = Scope::new(Prefix::parse("deer-flow-").expect("valid"), true);
        assert!(
            network_create(&json!({ "Name": "deer-flow-net-1", "Internal": true }), &s).is_ok()
        );
        assert!(network_create(&json!({ "Name": "other" }), &s).is_err());
        assert_eq!(
            network_create(&json!({ "Name": "deer-flow-net-1", "Options": { "com.docker.network.bridge.name": "docker0" } }), &s)
                .map_err(|e| e.to_string()),
            Err("sockproxy: networks.create: option com.docker.network.bridge.name would attach to a host bridge or interface".into())
        );
        assert!(network_create(&json!({ "Name": "deer-flow-net-1", "Driver": "macvlan", "Options": { "parent": "eth0" } }), &s).is_err());
        assert!(
            network_create(&json!({ "name": "deer-flow-net-1", "driver": "host" }), &s).is_err()
        );
    }
}
