//! `GET /info` and `GET /images/json` in dockerd's shapes (20.10's `types.Info` and
//! `types.ImageSummary`; 29 drops `VirtualSize` and reports cgroup v2). The values are the
//! fake's own: its containers and images, and fixed host facts (kernel, CPUs, memory), plus an
//! engine label and a root dir a proxy must not pass on, so tests can see it strip them.

use serde_json::{json, Value};

use super::flavor::Flavor;
use super::render::rfc3339;
use super::routes::{param, Reply};
use super::state::{self, RunState, State};
use super::Shared;

/// The kernel the fake claims to run on (also in `/version`).
pub const KERNEL: &str = "6.1.0-fake-amd64";
/// A host-identity label on the fake engine, so a scoped `/info` can be seen to drop it.
pub const HOST_LABEL: &str = "fake-dockerd.host=fake-host-1";

/// The default bridge's options, as dockerd reports them.
pub const BRIDGE_OPTIONS: [(&str, &str); 6] = [
    ("com.docker.network.bridge.default_bridge", "true"),
    ("com.docker.network.bridge.enable_icc", "true"),
    ("com.docker.network.bridge.enable_ip_masquerade", "true"),
    ("com.docker.network.bridge.host_binding_ipv4", "0.0.0.0"),
    ("com.docker.network.bridge.name", "docker0"),
    ("com.docker.network.driver.mtu", "1500"),
];

/// `ID`: a dockerd-shaped engine ID (12 groups of 4), fixed per engine.
fn engine_id(state: &State) -> String {
    let hex = state::new_id(0x1d, state.seed());
    let up = hex.to_ascii_uppercase();
    let groups: Vec<&str> = (0..12).filter_map(|i| up.get(i * 4..i * 4 + 4)).collect();
    groups.join(":")
}

pub fn info(state: &State, flavor: Flavor) -> Value {
    let total = state.containers.len();
    let running = state
        .containers
        .iter()
        .filter(|c| c.state == RunState::Running)
        .count();
    let (os, os_version, cgroup_driver, cgroup_version, seccomp) = match flavor {
        Flavor::Debian2010 => (
            "Debian GNU/Linux 12 (bookworm)",
            "12",
            "cgroupfs",
            "1",
            "name=seccomp,profile=default",
        ),
        Flavor::Docker29 => (
            "Debian GNU/Linux 13 (trixie)",
            "13",
            "systemd",
            "2",
            "name=seccomp,profile=builtin",
        ),
    };
    let mut security = vec![seccomp.to_owned()];
    if flavor == Flavor::Docker29 {
        security.push("name=cgroupns".into());
    }
    let mut info = json!({
        "ID": engine_id(state),
        "Containers": total,
        "ContainersRunning": running,
        "ContainersPaused": 0,
        "ContainersStopped": total - running,
        "Images": state.images.len(),
        "Driver": "fake",
        "DriverStatus": [],
        "Plugins": {
            "Volume": ["local"],
            "Network": ["bridge", "host", "ipvlan", "macvlan", "null", "overlay"],
            "Authorization": null,
            "Log": ["awslogs", "fluentd", "gcplogs", "gelf", "journald", "json-file", "local", "logentries", "splunk", "syslog"],
        },
        "MemoryLimit": true,
        "SwapLimit": true,
        "CpuCfsPeriod": true,
        "CpuCfsQuota": true,
        "CPUShares": true,
        "CPUSet": true,
        "PidsLimit": true,
        "IPv4Forwarding": true,
        "BridgeNfIptables": true,
        "BridgeNfIp6tables": true,
        "Debug": false,
        "NFd": 24,
        "OomKillDisable": flavor == Flavor::Debian2010,
        "NGoroutines": 36,
        "SystemTime": rfc3339(Some(state::now())),
    });
    let middle = json!({
        "LoggingDriver": "json-file",
        "CgroupDriver": cgroup_driver,
        "CgroupVersion": cgroup_version,
        "NEventsListener": 0,
        "KernelVersion": KERNEL,
        "OperatingSystem": os,
        "OSVersion": os_version,
        "OSType": "linux",
        "Architecture": "x86_64",
        "IndexServerAddress": "https://index.docker.io/v1/",
        "RegistryConfig": {
            "AllowNondistributableArtifactsCIDRs": [],
            "AllowNondistributableArtifactsHostnames": [],
            "InsecureRegistryCIDRs": ["127.0.0.0/8"],
            "IndexConfigs": {
                "docker.io": { "Name": "docker.io", "Mirrors": [], "Secure": true, "Official": true },
            },
            "Mirrors": [],
        },
    });
    let rest = json!({
        "NCPU": 2,
        "MemTotal": 4_294_967_296_u64,
        "GenericResources": null,
        "DockerRootDir": "/var/lib/docker",
        "HttpProxy": "",
        "HttpsProxy": "",
        "NoProxy": "",
        "Name": "fake-dockerd",
        "Labels": [HOST_LABEL],
        "ExperimentalBuild": false,
        "ServerVersion": flavor.engine_version(),
        "Runtimes": {
            "io.containerd.runc.v2": { "path": "runc" },
            "runc": { "path": "runc" },
        },
        "DefaultRuntime": "runc",
        "Swarm": {
            "NodeID": "",
            "NodeAddr": "",
            "LocalNodeState": "inactive",
            "ControlAvailable": false,
            "Error": "",
            "RemoteManagers": null,
        },
        "LiveRestoreEnabled": false,
        "Isolation": "",
        "InitBinary": "docker-init",
        "ContainerdCommit": { "ID": "fake", "Expected": "fake" },
        "RuncCommit": { "ID": "fake", "Expected": "fake" },
        "InitCommit": { "ID": "", "Expected": "" },
        "SecurityOptions": security,
        "Warnings": null,
    });
    for part in [middle, rest] {
        if let (Some(a), Value::Object(b)) = (info.as_object_mut(), part) {
            a.extend(b);
        }
    }
    info
}

/// `GET /images/json`: newest first; filters `reference` (a tag, or a repository for all its
/// tags), `dangling` and `label` as dockerd reads them for the fake's untagged-free store.
pub fn images(shared: &Shared, params: &[(String, String)]) -> Reply {
    let filters = match state::parse_filters(param(params, "filters")) {
        Ok(f) => f,
        Err(e) => return Reply::Error(400, e),
    };
    for k in filters.keys() {
        if !["reference", "dangling", "label", "before", "since"].contains(&k.as_str()) {
            return Reply::Error(400, shared.flavor.invalid_filter(k));
        }
    }
    let st = shared.state();
    let out: Vec<Value> = st
        .images
        .iter()
        .rev()
        .filter(|i| {
            filters.get("reference").is_none_or(|refs| {
                refs.iter().any(|r| {
                    let want = state::normalize_tag(r);
                    i.tags.iter().any(|t| {
                        *t == want || t.rsplit_once(':').is_some_and(|(repo, _)| repo == r)
                    })
                })
            }) && filters
                .get("dangling")
                .is_none_or(|d| d.iter().all(|v| v != "true"))
                && filters.get("label").is_none_or(Vec::is_empty)
        })
        .map(|i| {
            let mut entry = json!({
                "Containers": -1,
                "Created": i.created,
                "Id": i.id,
                "Labels": null,
                "ParentId": "",
                "RepoDigests": null,
                "RepoTags": i.tags,
                "SharedSize": -1,
                "Size": 1_982_256,
            });
            if let Some(obj) = entry.as_object_mut() {
                match shared.flavor {
                    Flavor::Debian2010 => {
                        obj.insert("VirtualSize".into(), json!(1_982_256));
                    }
                    Flavor::Docker29 => {
                        obj.insert("RepoDigests".into(), json!([]));
                    }
                }
            }
            entry
        })
        .collect();
    Reply::Json(200, Value::Array(out))
}

#[cfg(test)]
#[path = "system_tests.rs"]
mod tests;
