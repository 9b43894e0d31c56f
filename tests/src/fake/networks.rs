//! Network, image and ping handlers of the fake engine.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response};
use serde_json::{json, Value};

use super::flavor::Flavor;
use super::routes::{container_index, endpoint_for, full, param, Reply};
use super::state::{self, Lookup, Network};
use super::{render, Shared};

/// `GET`/`HEAD /_ping` (`…/router/system/system_routes.go`): `OK`, no-cache headers; 29 adds
/// `Builder-Version` and `Swarm`.
pub fn ping(shared: &Shared, head: bool) -> Reply {
    let mut resp = Response::new(full(if head {
        Bytes::new()
    } else {
        Bytes::from_static(b"OK")
    }));
    let h = resp.headers_mut();
    h.insert(
        "Content-Type",
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        "Cache-Control",
        HeaderValue::from_static("no-cache, no-store, must-revalidate"),
    );
    h.insert("Pragma", HeaderValue::from_static("no-cache"));
    if shared.flavor == Flavor::Docker29 {
        h.insert("Builder-Version", HeaderValue::from_static("2"));
        h.insert("Swarm", HeaderValue::from_static("inactive"));
    }
    Reply::Raw(Box::new(resp))
}

fn network_index(shared: &Shared, st: &state::State, r: &str) -> Result<usize, Reply> {
    // An ambiguous ID prefix is reported as not found here; the contract cases do not rely on
    // libnetwork's ambiguity wording.
    st.find_network(r)
        .map_err(|_: Lookup| Reply::Error(404, shared.flavor.no_such_network(r)))
}

pub fn list(shared: &Shared, params: &[(String, String)]) -> Reply {
    let filters = match state::parse_filters(param(params, "filters")) {
        Ok(f) => f,
        Err(e) => return Reply::Error(400, e),
    };
    for k in filters.keys() {
        if !["name", "id", "label", "driver", "type", "scope", "dangling"].contains(&k.as_str()) {
            return Reply::Error(400, shared.flavor.invalid_filter(k));
        }
    }
    let st = shared.state();
    let out: Vec<Value> = st
        .networks
        .iter()
        .filter(|n| {
            filters
                .get("name")
                .is_none_or(|v| state::any_regex_matches(v, std::slice::from_ref(&n.name)))
                && filters
                    .get("id")
                    .is_none_or(|v| state::any_regex_matches(v, std::slice::from_ref(&n.id)))
                && filters
                    .get("label")
                    .is_none_or(|v| state::labels_match(v, &n.labels))
                && filters.get("driver").is_none_or(|v| v.contains(&n.driver))
                && filters
                    .get("type")
                    .is_none_or(|v| v.iter().any(|t| (t == "builtin") == n.predefined))
        })
        .map(|n| render::network(&st, n))
        .collect();
    Reply::Json(200, Value::Array(out))
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

pub fn create(shared: &Arc<Shared>, body: &Value) -> Reply {
    let Some(name) = body["Name"].as_str().filter(|n| !n.is_empty()) else {
        return Reply::Error(400, "network name is required".into());
    };
    let mut st = shared.state();
    if let Some(existing) = st.networks.iter().find(|n| n.name == name) {
        // 20.10 only refuses when the client asks it to (the docker CLI always does); 29
        // always refuses (`daemon/libnetwork/controller.go`).
        let check = body["CheckDuplicate"].as_bool().unwrap_or(false);
        if shared.flavor == Flavor::Docker29 || check {
            return Reply::Error(409, shared.flavor.network_exists(name));
        }
        let warning = format!(
            "Network with name {name} (id : {}) already exists",
            existing.id
        );
        let id = st.next_id();
        let n = new_network(id.clone(), name, body, st.networks.len());
        st.networks.push(n);
        return Reply::Json(201, json!({ "Id": id, "Warning": warning }));
    }
    let id = st.next_id();
    let n = new_network(id.clone(), name, body, st.networks.len());
    st.networks.push(n);
    drop(st);
    shared.publish(render::event("network", "create", &id, name));
    Reply::Json(201, json!({ "Id": id, "Warning": "" }))
}

fn new_network(id: String, name: &str, body: &Value, n: usize) -> Network {
    Network {
        id,
        name: name.to_owned(),
        driver: body["Driver"]
            .as_str()
            .filter(|d| !d.is_empty())
            .unwrap_or("bridge")
            .to_owned(),
        internal: body["Internal"].as_bool().unwrap_or(false),
        labels: string_map(&body["Labels"]),
        options: string_map(&body["Options"]),
        subnet: format!("172.{}.0.0/16", 17 + n),
        created: state::now(),
        predefined: false,
    }
}

pub fn inspect(shared: &Shared, r: &str) -> Reply {
    let st = shared.state();
    match network_index(shared, &st, r) {
        Ok(i) => Reply::Json(200, render::network(&st, &st.networks[i])),
        Err(e) => e,
    }
}

pub fn remove(shared: &Arc<Shared>, r: &str) -> Reply {
    let mut st = shared.state();
    let i = match network_index(shared, &st, r) {
        Ok(i) => i,
        Err(e) => return e,
    };
    let n = st.networks[i].clone();
    if n.predefined {
        return Reply::Error(403, shared.flavor.predefined_network(&n.name));
    }
    let active: Vec<(String, String)> = st
        .active_endpoints(&n.name)
        .iter()
        .map(|c| {
            let ep = c
                .networks
                .get(&n.name)
                .map_or(String::new(), |e| e.endpoint_id.clone());
            (c.name.trim_start_matches('/').to_owned(), ep)
        })
        .collect();
    if !active.is_empty() {
        return Reply::Error(
            403,
            shared
                .flavor
                .network_active_endpoints(&n.name, &n.id, &active),
        );
    }
    st.networks.remove(i);
    for c in &mut st.containers {
        c.networks.remove(&n.name);
    }
    drop(st);
    shared.publish(render::event("network", "destroy", &n.id, &n.name));
    Reply::Empty(204)
}

/// Network connect (`connect`) and disconnect.
pub fn attach(shared: &Arc<Shared>, r: &str, body: &Value, connect: bool) -> Reply {
    let mut st = shared.state();
    let ni = match network_index(shared, &st, r) {
        Ok(i) => i,
        Err(e) => return e,
    };
    let net = st.networks[ni].name.clone();
    let cref = body["Container"].as_str().unwrap_or("");
    let ci = match container_index(shared, &st, cref) {
        Ok(i) => i,
        Err(e) => return e,
    };
    let has = st.containers[ci].networks.contains_key(&net);
    let cname = st.containers[ci].name[1..].to_owned();
    if connect {
        if has {
            return Reply::Error(
                403,
                format!("endpoint with name {cname} already exists in network {net}"),
            );
        }
        let aliases = body["EndpointConfig"]["Aliases"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let ep = endpoint_for(&mut st, &net, aliases);
        st.containers[ci].networks.insert(net.clone(), ep);
    } else {
        if !has {
            return Reply::Error(
                403,
                format!(
                    "container {} is not connected to network {net}",
                    st.containers[ci].id
                ),
            );
        }
        st.containers[ci].networks.remove(&net);
    }
    let id = st.networks[ni].id.clone();
    drop(st);
    let action = if connect { "connect" } else { "disconnect" };
    shared.publish(render::event("network", action, &id, &net));
    Reply::Empty(200)
}

pub fn image_inspect(shared: &Shared, r: &str) -> Reply {
    let st = shared.state();
    match st.image(r) {
        Some(i) => Reply::Json(200, render::image(i)),
        // 20.10 wraps the lookup error (`daemon/images/image_inspect.go`).
        None => Reply::Error(
            404,
            match shared.flavor {
                Flavor::Debian2010 => {
                    format!("no such image: {r}: {}", shared.flavor.no_such_image(r))
                }
                Flavor::Docker29 => shared.flavor.no_such_image(r),
            },
        ),
    }
}

/// No registry is reachable from a fake: an image it has is "up to date", any other fails.
pub fn pull(shared: &Shared, params: &[(String, String)]) -> Reply {
    let from = param(params, "fromImage").unwrap_or("");
    let reference = match param(params, "tag").filter(|t| !t.is_empty()) {
        Some(tag) => format!("{from}:{tag}"),
        None => from.to_owned(),
    };
    if shared.state().image(&reference).is_some() {
        Reply::Json(
            200,
            json!({ "status": format!("Status: Image is up to date for {reference}") }),
        )
    } else {
        Reply::Error(
            404,
            format!("pull access denied for {from}: fake-dockerd has no registry"),
        )
    }
}
