//! JSON shapes of the fake's answers: container inspect and list entries, networks, images,
//! `/version`, `/info` and events, with the fields the docker CLI, docker-py and bollard read.

use serde_json::{json, Map, Value};

use super::flavor::Flavor;
use super::state::{Container, Exec, Image, Network, RunState, State};

pub fn rfc3339(secs: Option<i64>) -> String {
    let Some(secs) = secs else {
        return "0001-01-01T00:00:00Z".into();
    };
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian: the days-from-civil
/// algorithm run backwards (H. Hinnant, "chrono-compatible low-level date algorithms").
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn labels(l: &std::collections::BTreeMap<String, String>) -> Value {
    Value::Object(
        l.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

fn endpoints(state: &State, c: &Container) -> Value {
    let mut nets = Map::new();
    for (name, ep) in &c.networks {
        let net_id = state
            .networks
            .iter()
            .find(|n| &n.name == name)
            .map_or(String::new(), |n| n.id.clone());
        let running = c.state == RunState::Running;
        nets.insert(
            name.clone(),
            json!({
                "IPAMConfig": null,
                "Links": null,
                "Aliases": ep.aliases,
                "NetworkID": net_id,
                "EndpointID": if running { ep.endpoint_id.clone() } else { String::new() },
                "Gateway": "",
                "IPAddress": if running { ep.ip.clone() } else { String::new() },
                "IPPrefixLen": if running && !ep.ip.is_empty() { 16 } else { 0 },
                "MacAddress": "",
            }),
        );
    }
    Value::Object(nets)
}

/// Published ports of a running container: (`8080/tcp`, host IP, host port). An empty host
/// port gets one from the ephemeral range, fixed per container.
fn published(c: &Container) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let Some(bindings) = c.host_config["PortBindings"].as_object() else {
        return out;
    };
    if c.state != RunState::Running {
        return out;
    }
    let base =
        c.id.get(..4)
            .and_then(|h| u16::from_str_radix(h, 16).ok())
            .map_or(32768, |n| 32768 + n % 20000);
    for (port, list) in bindings {
        for b in list.as_array().into_iter().flatten() {
            let ip = b["HostIp"]
                .as_str()
                .filter(|i| !i.is_empty())
                .unwrap_or("0.0.0.0");
            let host_port = match b["HostPort"].as_str().filter(|p| !p.is_empty()) {
                Some(p) => p.to_owned(),
                None => (base + u16::try_from(out.len()).unwrap_or(0)).to_string(),
            };
            out.push((port.clone(), ip.to_owned(), host_port));
        }
    }
    out
}

fn status_text(c: &Container) -> String {
    match c.state {
        RunState::Created => "Created".into(),
        RunState::Running => "Up Less than a second".into(),
        RunState::Exited => format!("Exited ({}) Less than a second ago", c.exit_code),
    }
}

pub fn container_inspect(state: &State, c: &Container) -> Value {
    let running = c.state == RunState::Running;
    let nets = endpoints(state, c);
    let mut ports = Map::new();
    for (port, ip, host_port) in published(c) {
        let entry = ports.entry(port).or_insert_with(|| json!([]));
        if let Some(a) = entry.as_array_mut() {
            a.push(json!({ "HostIp": ip, "HostPort": host_port }));
        }
    }
    let bridge_ip = c
        .networks
        .get("bridge")
        .filter(|_| running)
        .map_or(String::new(), |e| e.ip.clone());
    json!({
        "Id": c.id,
        "Created": rfc3339(Some(c.created)),
        "Path": c.cmd.first().cloned().unwrap_or_default(),
        "Args": c.cmd.get(1..).unwrap_or(&[]),
        "State": {
            "Status": c.state.as_str(),
            "Running": running,
            "Paused": false,
            "Restarting": false,
            "OOMKilled": false,
            "Dead": false,
            "Pid": if running { 4242 } else { 0 },
            "ExitCode": c.exit_code,
            "Error": "",
            "StartedAt": rfc3339(c.started_at),
            "FinishedAt": rfc3339(c.finished_at),
        },
        "Image": c.image_id,
        "Name": c.name,
        "RestartCount": 0,
        "Driver": "fake",
        "Platform": "linux",
        "HostConfig": c.host_config,
        "Config": c.config,
        "Mounts": super::mounts::points(&c.host_config),
        "NetworkSettings": {
            "Bridge": "",
            "Ports": ports,
            "IPAddress": bridge_ip,
            "Networks": nets,
        },
    })
}

pub fn container_list_entry(state: &State, c: &Container) -> Value {
    json!({
        "Id": c.id,
        "Names": state.names_of(c),
        "Image": c.image,
        "ImageID": c.image_id,
        "Command": c.cmd.join(" "),
        "Created": c.created,
        "Ports": published(c)
            .into_iter()
            .map(|(port, ip, host_port)| {
                let (number, proto) = port.split_once('/').unwrap_or((&port, "tcp"));
                json!({
                    "IP": ip,
                    "PrivatePort": number.parse::<u16>().unwrap_or(0),
                    "PublicPort": host_port.parse::<u16>().unwrap_or(0),
                    "Type": proto,
                })
            })
            .collect::<Vec<_>>(),
        "Labels": labels(&c.labels),
        "State": c.state.as_str(),
        "Status": status_text(c),
        "HostConfig": { "NetworkMode": c.network_mode },
        "NetworkSettings": { "Networks": endpoints(state, c) },
        "Mounts": super::mounts::points(&c.host_config),
    })
}

pub fn network(state: &State, n: &Network) -> Value {
    let mut containers = Map::new();
    for c in state.active_endpoints(&n.name) {
        if let Some(ep) = c.networks.get(&n.name) {
            containers.insert(
                c.id.clone(),
                json!({
                    "Name": c.name.trim_start_matches('/'),
                    "EndpointID": ep.endpoint_id,
                    "MacAddress": "",
                    "IPv4Address": if ep.ip.is_empty() { String::new() } else { format!("{}/16", ep.ip) },
                    "IPv6Address": "",
                }),
            );
        }
    }
    json!({
        "Name": n.name,
        "Id": n.id,
        "Created": rfc3339(Some(n.created)),
        "Scope": "local",
        "Driver": n.driver,
        "EnableIPv6": false,
        "IPAM": {
            "Driver": "default",
            "Options": null,
            "Config": if n.subnet.is_empty() { json!([]) } else { json!([{ "Subnet": n.subnet }]) },
        },
        "Internal": n.internal,
        "Attachable": false,
        "Ingress": false,
        "ConfigFrom": { "Network": "" },
        "ConfigOnly": false,
        "Containers": containers,
        "Options": labels(&n.options),
        "Labels": labels(&n.labels),
    })
}

pub fn image(i: &Image) -> Value {
    json!({
        "Id": i.id,
        "RepoTags": i.tags,
        "RepoDigests": [],
        "Created": rfc3339(Some(i.created)),
        "Size": 1_982_256,
        "Os": "linux",
        "Architecture": "amd64",
        "Config": { "Cmd": i.cmd, "Env": ["PATH=/bin"] },
        "RootFS": { "Type": "layers", "Layers": [] },
    })
}

pub fn exec(e: &Exec) -> Value {
    json!({
        "ID": e.id,
        "ContainerID": e.container_id,
        "Running": e.running,
        "ExitCode": e.exit_code,
        "OpenStdin": e.attach_stdin,
        "OpenStdout": true,
        "OpenStderr": true,
        "ProcessConfig": {
            "tty": e.tty,
            "entrypoint": e.cmd.first().cloned().unwrap_or_default(),
            "arguments": e.cmd.get(1..).unwrap_or(&[]),
        },
        "Pid": if e.running { 4243 } else { 0 },
    })
}

pub fn version(flavor: Flavor) -> Value {
    json!({
        "Platform": { "Name": "fake-dockerd" },
        "Version": flavor.engine_version(),
        "ApiVersion": flavor.api_version(),
        "MinAPIVersion": flavor.min_api_version(),
        "GitCommit": "fake",
        "GoVersion": "n/a",
        "Os": "linux",
        "Arch": "amd64",
        "KernelVersion": super::system::KERNEL,
        "Components": [{ "Name": "Engine", "Version": flavor.engine_version(), "Details": { "ApiVersion": flavor.api_version(), "MinAPIVersion": flavor.min_api_version(), "Os": "linux", "Arch": "amd64" } }],
    })
}

pub fn event(kind: &str, action: &str, id: &str, name: &str) -> Value {
    let now = super::state::now();
    json!({
        "status": action,
        "id": id,
        "Type": kind,
        "Action": action,
        "Actor": { "ID": id, "Attributes": { "name": name } },
        "scope": "local",
        "time": now,
        "timeNano": now * 1_000_000_000,
    })
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    /// The date counted a year and a month at a time.
    fn counted(secs: i64) -> String {
        let mut days = secs / 86_400;
        let mut year = 1970i64;
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        while days >= if leap(year) { 366 } else { 365 } {
            days -= if leap(year) { 366 } else { 365 };
            year += 1;
        }
        let feb = if leap(year) { 29 } else { 28 };
        let mut month = 1;
        for l in [31, feb, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31] {
            if days < l {
                break;
            }
            days -= l;
            month += 1;
        }
        let rem = secs % 86_400;
        format!(
            "{year:04}-{month:02}-{:02}T{:02}:{:02}:{:02}Z",
            days + 1,
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        )
    }

    #[test]
    fn dates_match_a_day_by_day_count() {
        // 1970, leap days, a century rule, the end of a year, today.
        for secs in [
            0i64,
            951_782_400,
            951_868_799,
            4_107_542_399,
            1_709_164_800,
            1_798_761_599,
            1_796_025_332,
        ] {
            assert_eq!(rfc3339(Some(secs)), counted(secs), "{secs}");
        }
        assert_eq!(rfc3339(None), "0001-01-01T00:00:00Z");
    }
}
