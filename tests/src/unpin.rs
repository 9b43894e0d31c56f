//! A container inspect as it reads with its binds unpinned: sockproxy forwards every host-path
//! bind as a `HostConfig.Mounts` entry of type `bind` on a staging path, with the path the
//! client named in a `sockproxy.bind.<target>` label (`sockproxy_policy::bind_pins`). Read
//! back through that label, a proxied container compares with one made directly: its binds'
//! sources are the named paths, `HostConfig`'s binds one sorted list `SOURCE:TARGET[:ro]`
//! (`Binds` and bind `Mounts` together, on both sides), the labels gone.

use std::collections::BTreeMap;

use serde_json::Value;

use sockproxy_policy::BIND_LABEL_PREFIX;

/// Target → the path the client named, from a container's `sockproxy.bind.*` labels.
pub fn pinned_sources(inspect: &Value) -> BTreeMap<String, String> {
    inspect["Config"]["Labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            Some((
                k.strip_prefix(BIND_LABEL_PREFIX)?.to_owned(),
                v.as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// `HostConfig`'s binds, from `Binds` and bind `Mounts` alike, as sorted `SOURCE:TARGET[:ro]`
/// with each pinned source read back as the path named.
pub fn host_binds(inspect: &Value) -> Vec<String> {
    let named = pinned_sources(inspect);
    let host = &inspect["HostConfig"];
    let mut out: Vec<String> = host["Binds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|b| b.starts_with('/'))
        .map(|b| {
            let mut parts = b.splitn(3, ':');
            let (s, t) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let ro = parts.next().unwrap_or("").split(',').any(|m| m == "ro");
            format!("{s}:{t}{}", if ro { ":ro" } else { "" })
        })
        .collect();
    for m in host["Mounts"].as_array().into_iter().flatten() {
        if m["Type"] != "bind" {
            continue;
        }
        let target = m["Target"].as_str().unwrap_or("");
        let source = named.get(target).map_or_else(
            || m["Source"].as_str().unwrap_or("").to_owned(),
            Clone::clone,
        );
        let ro = m["ReadOnly"].as_bool().unwrap_or(false);
        out.push(format!("{source}:{target}{}", if ro { ":ro" } else { "" }));
    }
    out.sort();
    out
}

/// Rewrites a container inspect (`Config`, `HostConfig` and `Mounts` at its top) as it reads
/// unpinned; any other value is left as it is.
pub fn as_unpinned(v: &mut Value) {
    let is_container = ["Config", "HostConfig", "Mounts"]
        .iter()
        .all(|k| v.get(k).is_some());
    if !is_container {
        return;
    }
    let named = pinned_sources(v);
    let binds = host_binds(v);
    if let Some(mounts) = v["Mounts"].as_array_mut() {
        for m in mounts {
            let dest = m["Destination"].as_str().unwrap_or("").to_owned();
            if let Some(source) = named.get(&dest) {
                m["Source"] = Value::String(source.clone());
            }
        }
    }
    if let Some(host) = v["HostConfig"].as_object_mut() {
        let others: Vec<Value> = host
            .get("Mounts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|m| m["Type"] != "bind")
            .cloned()
            .collect();
        let volumes: Vec<Value> = host
            .get("Binds")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|b| b.as_str().is_some_and(|b| !b.starts_with('/')))
            .cloned()
            .collect();
        let mut all: Vec<Value> = binds.into_iter().map(Value::String).collect();
        all.extend(volumes);
        host.insert("Binds".into(), Value::Array(all));
        host.insert(
            "Mounts".into(),
            if others.is_empty() {
                Value::Null
            } else {
                Value::Array(others)
            },
        );
    }
    if let Some(Value::Object(labels)) = v["Config"].get_mut("Labels") {
        labels.retain(|k, _| !k.starts_with(BIND_LABEL_PREFIX));
    }
}
