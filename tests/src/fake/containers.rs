//! Container handlers that answer at once: list, create, inspect, start, stop, restart, kill,
//! remove, top, archive, exec create and inspect. Running a container's program is `streams`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use super::hostconfig::{self, Decoded};
use super::routes::{container_index, endpoint_for, flag, is_running, param, Reply};
use super::state::{self, Container, Exec, RunState};
use super::{render, streams, Shared};

pub fn list(shared: &Shared, params: &[(String, String)]) -> Reply {
    let filters = match state::parse_filters(param(params, "filters")) {
        Ok(f) => f,
        Err(e) => return Reply::Error(400, e),
    };
    let st = shared.state();
    let idx = match state::list_containers(&st, flag(params, "all"), &filters, shared.flavor) {
        Ok(i) => i,
        Err((status, msg)) => return Reply::Error(status, msg),
    };
    let limit: i64 = param(params, "limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(-1);
    let take = usize::try_from(limit)
        .ok()
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let entries: Vec<Value> = idx
        .into_iter()
        .take(take)
        .map(|i| render::container_list_entry(&st, &st.containers[i]))
        .collect();
    Reply::Json(200, Value::Array(entries))
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect(),
        Value::String(s) => vec![s.clone()],
        _ => vec![],
    }
}

fn valid_name(n: &str) -> bool {
    let b = n.as_bytes();
    b.len() >= 2
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

pub fn create(shared: &Arc<Shared>, name: Option<&str>, decoded: Decoded) -> Reply {
    let flavor = shared.flavor;
    // dockerd checks the mounts before it looks for the image.
    if let Some(missing) = decoded
        .host
        .as_ref()
        .and_then(super::mounts::missing_bind_source)
    {
        return Reply::Error(400, missing);
    }
    let body = Value::Object(decoded.config);
    let image_ref = body["Image"].as_str().unwrap_or("").to_owned();
    let mut st = shared.state();
    let Some(image) = st.image(&image_ref).cloned() else {
        return Reply::Error(404, flavor.no_such_image(&image_ref));
    };
    let name = match name
        .map(|n| n.trim_start_matches('/'))
        .filter(|n| !n.is_empty())
    {
        Some(n) if !valid_name(n) => {
            return Reply::Error(
                400,
                format!("Invalid container name ({n}), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed"),
            )
        }
        Some(n) => n.to_owned(),
        // dockerd picks `adjective_surname`; the fake picks a recognisable random-enough name.
        None => format!("fake_{}", &st.next_id()[..12]),
    };
    if let Some(other) = st.containers.iter().find(|c| c.name[1..] == *name) {
        return Reply::Error(409, flavor.name_conflict(&name, &other.id));
    }
    let host = hostconfig::with_defaults(flavor, decoded.host);
    let mut links = Vec::new();
    for link in strings(&host["Links"]) {
        let (target, alias) = link.split_once(':').unwrap_or((&link, &link));
        match st.find_container(target) {
            Ok(i) => links.push((
                st.containers[i].id.clone(),
                alias.trim_start_matches('/').to_owned(),
            )),
            Err(_) => return Reply::Error(400, format!("could not get container for {target}")),
        }
    }
    let mode = network_mode(&host);
    let mut wanted: Vec<(String, Vec<String>)> = Vec::new();
    if !mode.starts_with("container:") {
        wanted.push((mode.clone(), vec![]));
    }
    if let Some(eps) = decoded.networking["EndpointsConfig"].as_object() {
        for (net, cfg) in eps {
            let net = if net == "default" {
                "bridge".to_owned()
            } else {
                net.clone()
            };
            match wanted.iter_mut().find(|(n, _)| *n == net) {
                Some((_, aliases)) => aliases.extend(strings(&cfg["Aliases"])),
                None => wanted.push((net, strings(&cfg["Aliases"]))),
            }
        }
    }
    let mut networks = BTreeMap::new();
    for (net, aliases) in wanted {
        let Ok(i) = st.find_network(&net) else {
            return Reply::Error(404, flavor.no_such_network(&net));
        };
        let net_name = st.networks[i].name.clone();
        let ep = endpoint_for(&mut st, &net_name, aliases);
        networks.insert(net_name, ep);
    }
    let mut cmd = strings(&body["Entrypoint"]);
    let given = strings(&body["Cmd"]);
    cmd.extend(if given.is_empty() && cmd.is_empty() {
        image.cmd.clone()
    } else {
        given
    });
    let labels: BTreeMap<String, String> = body["Labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let id = st.next_id();
    let mut config = body.clone();
    if let Some(obj) = config.as_object_mut() {
        obj.insert("Hostname".into(), Value::String(id[..12].to_owned()));
        obj.insert("Labels".into(), json!(labels));
        obj.insert("Cmd".into(), json!(cmd));
    }
    st.containers.push(Container {
        id: id.clone(),
        name: format!("/{name}"),
        image: image_ref,
        image_id: image.id.clone(),
        cmd,
        labels,
        env: strings(&body["Env"]),
        tty: body["Tty"].as_bool().unwrap_or(false),
        open_stdin: body["OpenStdin"].as_bool().unwrap_or(false),
        created: state::now(),
        state: RunState::Created,
        exit_code: 0,
        started_at: None,
        finished_at: None,
        exits: 0,
        network_mode: mode,
        networks,
        links,
        host_config: host,
        config,
        logs: Vec::new(),
    });
    drop(st);
    streams::register(shared, &id);
    shared.publish(render::event("container", "create", &id, &name));
    shared.notify();
    Reply::Json(201, json!({ "Id": id, "Warnings": [] }))
}

pub fn inspect(shared: &Shared, r: &str) -> Reply {
    let st = shared.state();
    match container_index(shared, &st, r) {
        Ok(i) => Reply::Json(200, render::container_inspect(&st, &st.containers[i])),
        Err(e) => e,
    }
}

pub fn exists_then(shared: &Shared, r: &str, ok: Reply) -> Reply {
    let st = shared.state();
    container_index(shared, &st, r).map_or_else(|e| e, |_| ok)
}

/// `POST /containers/{id}/update`: each resource the body sets to something other than 0 is
/// the container's from now on (dockerd's `UpdateContainer` leaves a 0 as it was).
pub fn update(shared: &Shared, r: &str, body: &Value) -> Reply {
    let mut st = shared.state();
    let i = match container_index(shared, &st, r) {
        Ok(i) => i,
        Err(e) => return e,
    };
    if let (Some(set), Some(hc)) = (
        body.as_object(),
        st.containers[i].host_config.as_object_mut(),
    ) {
        for (k, v) in set {
            if v.is_number() && v.as_f64() != Some(0.0) {
                hc.insert(k.clone(), v.clone());
            }
        }
    }
    Reply::Json(200, json!({ "Warnings": [] }))
}

/// The network a HostConfig's `NetworkMode` attaches to (`default` is the bridge).
fn network_mode(host: &Value) -> String {
    match host["NetworkMode"].as_str().unwrap_or("") {
        "" | "default" => "bridge".to_owned(),
        m => m.to_owned(),
    }
}

/// Starts a container; `replacement` is a pre-1.24 start body's HostConfig, which 20.10's
/// `ContainerStart` puts in place of the container's own (a changed network mode drops the
/// old networks) after the state check.
pub fn start(shared: &Arc<Shared>, r: &str, replacement: Option<Value>) -> Reply {
    let id = {
        let mut st = shared.state();
        let i = match container_index(shared, &st, r) {
            Ok(i) if is_running(&st.containers[i]) => return Reply::Empty(304),
            Ok(i) => i,
            Err(e) => return e,
        };
        if let Some(hc) = replacement {
            let mode = network_mode(&hc);
            if mode != st.containers[i].network_mode {
                let mut networks = BTreeMap::new();
                if let Ok(n) = st.find_network(&mode) {
                    let name = st.networks[n].name.clone();
                    let ep = endpoint_for(&mut st, &name, vec![]);
                    networks.insert(name, ep);
                }
                st.containers[i].networks = networks;
                st.containers[i].network_mode = mode;
            }
            st.containers[i].host_config = hc;
        }
        st.containers[i].id.clone()
    };
    streams::run_container(shared, &id);
    Reply::Empty(204)
}

/// Signals the program and waits until the container has exited.
async fn halt(shared: &Arc<Shared>, id: &str, code: i64) {
    let stop = shared.stops.lock().ok().and_then(|m| m.get(id).cloned());
    if let Some(s) = stop {
        let _ = s.send(Some(code));
    }
    streams::until(shared, |st| {
        st.containers
            .iter()
            .find(|c| c.id == id)
            .is_none_or(|c| c.state != RunState::Running)
    })
    .await;
}

fn running_id(shared: &Shared, r: &str) -> Result<(String, bool), Reply> {
    let st = shared.state();
    let i = container_index(shared, &st, r)?;
    Ok((st.containers[i].id.clone(), is_running(&st.containers[i])))
}

pub async fn stop(shared: &Arc<Shared>, r: &str) -> Reply {
    match running_id(shared, r) {
        Ok((_, false)) => Reply::Empty(304),
        // busybox as PID 1 ignores SIGTERM, so dockerd ends it with SIGKILL after the timeout:
        // exit 137. The fake skips the timeout.
        Ok((id, true)) => {
            halt(shared, &id, 137).await;
            Reply::Empty(204)
        }
        Err(e) => e,
    }
}

pub async fn restart(shared: &Arc<Shared>, r: &str) -> Reply {
    match running_id(shared, r) {
        Ok((id, running)) => {
            if running {
                halt(shared, &id, 137).await;
            }
            streams::run_container(shared, &id);
            Reply::Empty(204)
        }
        Err(e) => e,
    }
}

fn signal_number(sig: Option<&str>) -> i64 {
    match sig.unwrap_or("KILL").trim_start_matches("SIG") {
        "TERM" | "15" => 15,
        "INT" | "2" => 2,
        "HUP" | "1" => 1,
        "QUIT" | "3" => 3,
        s => s.parse().unwrap_or(9),
    }
}

pub async fn kill(shared: &Arc<Shared>, r: &str, signal: Option<&str>) -> Reply {
    match running_id(shared, r) {
        Ok((id, false)) => Reply::Error(409, shared.flavor.kill_not_running(r, &id)),
        Ok((id, true)) => {
            halt(shared, &id, 128 + signal_number(signal)).await;
            Reply::Empty(204)
        }
        Err(e) => e,
    }
}

pub async fn remove(shared: &Arc<Shared>, r: &str, force: bool) -> Reply {
    let (id, running) = match running_id(shared, r) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if running && !force {
        return Reply::Error(409, shared.flavor.remove_running(r, &id));
    }
    if running {
        halt(shared, &id, 137).await;
    }
    let name = {
        let mut st = shared.state();
        let name = st
            .containers
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.name.clone())
            .unwrap_or_default();
        st.containers.retain(|c| c.id != id);
        for c in &mut st.containers {
            c.links.retain(|(target, _)| *target != id);
        }
        st.execs.retain(|e| e.container_id != id);
        name
    };
    streams::unregister(shared, &id);
    shared.publish(render::event(
        "container",
        "destroy",
        &id,
        name.trim_start_matches('/'),
    ));
    shared.notify();
    Reply::Empty(204)
}

/// `POST /containers/{id}/rename?name=NEW`: 409 if the new name is taken (`daemon/rename.go`).
pub fn rename(shared: &Shared, r: &str, new: &str) -> Reply {
    let mut st = shared.state();
    let i = match container_index(shared, &st, r) {
        Ok(i) => i,
        Err(e) => return e,
    };
    let new = new.trim_start_matches('/');
    if !valid_name(new) {
        return Reply::Error(
            400,
            format!("Invalid container name ({new}), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed"),
        );
    }
    if let Some(other) = st.containers.iter().find(|c| c.name[1..] == *new) {
        return Reply::Error(409, shared.flavor.name_conflict(new, &other.id));
    }
    let old = std::mem::replace(&mut st.containers[i].name, format!("/{new}"));
    let mut ev = render::event("container", "rename", &st.containers[i].id, new);
    ev["Actor"]["Attributes"]["oldName"] = serde_json::Value::String(old);
    shared.publish(ev);
    Reply::Empty(204)
}

pub fn top(shared: &Shared, r: &str) -> Reply {
    let st = shared.state();
    match container_index(shared, &st, r) {
        Ok(i) if is_running(&st.containers[i]) => {
            let c = &st.containers[i];
            Reply::Json(
                200,
                json!({
                    "Titles": ["UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD"],
                    "Processes": [["root", "4242", "4200", "0", "00:00", "?", "00:00:00", c.cmd.join(" ")]],
                }),
            )
        }
        Ok(i) => Reply::Error(
            409,
            format!("Container {} is not running", st.containers[i].id),
        ),
        Err(e) => e,
    }
}

/// An upload: into the host directory of the read-write bind that holds `path`, as the engine
/// unpacks it (`mounts::unpack`); anywhere else accepted and discarded (the fake keeps no
/// filesystem of its own).
pub fn archive_put(shared: &Shared, r: &str, params: &[(String, String)], tar: &[u8]) -> Reply {
    let st = shared.state();
    let i = match container_index(shared, &st, r) {
        Ok(i) => i,
        Err(e) => return e,
    };
    let path = param(params, "path").unwrap_or("/");
    match super::mounts::upload_dir(&st.containers[i].host_config, path) {
        Some(dir) => match super::mounts::unpack(&dir, tar) {
            Ok(()) => Reply::Empty(200),
            Err(e) => Reply::Error(400, e),
        },
        None => Reply::Empty(200),
    }
}

/// The fake keeps no filesystem: reads find nothing.
pub fn archive(shared: &Shared, r: &str, method: &str, params: &[(String, String)]) -> Reply {
    let st = shared.state();
    match container_index(shared, &st, r) {
        Ok(_) if method == "PUT" => Reply::Empty(200),
        Ok(i) => Reply::Error(
            404,
            format!(
                "Could not find the file {} in container {}",
                param(params, "path").unwrap_or(""),
                &st.containers[i].name[1..]
            ),
        ),
        Err(e) => e,
    }
}

pub fn exec_create(shared: &Shared, r: &str, body: &Value) -> Reply {
    let mut st = shared.state();
    let i = match container_index(shared, &st, r) {
        Ok(i) => i,
        Err(e) => return e,
    };
    if !is_running(&st.containers[i]) {
        let id = st.containers[i].id.clone();
        let msg = match shared.flavor {
            super::Flavor::Debian2010 => format!("Container {id} is not running"),
            super::Flavor::Docker29 => format!("container {id} is not running"),
        };
        return Reply::Error(409, msg);
    }
    let container_id = st.containers[i].id.clone();
    let exec_id = st.next_id();
    st.execs.push(Exec {
        id: exec_id.clone(),
        container_id,
        cmd: strings(&body["Cmd"]),
        tty: body["Tty"].as_bool().unwrap_or(false),
        attach_stdin: body["AttachStdin"].as_bool().unwrap_or(false),
        running: false,
        exit_code: None,
    });
    Reply::Json(201, json!({ "Id": exec_id }))
}

pub fn exec_inspect(shared: &Shared, id: &str) -> Reply {
    let st = shared.state();
    match st.find_exec(id) {
        Some(i) => Reply::Json(200, render::exec(&st.execs[i])),
        None => Reply::Error(404, shared.flavor.no_such_exec(id)),
    }
}

pub fn exec_exists_then(shared: &Shared, id: &str, ok: Reply) -> Reply {
    if shared.state().find_exec(id).is_some() {
        ok
    } else {
        Reply::Error(404, shared.flavor.no_such_exec(id))
    }
}
