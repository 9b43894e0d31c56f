//! `GET /info` answered for the stack alone (pure): the engine's own answer reduced to an
//! allowlist of fields that describe the engine, with the container counts of the stack's own
//! list, no images, the stack's name, no ID, swarm inactive, and nothing that names the host,
//! its paths, labels, registries, plugins or other tenants. Fields not listed are dropped:
//! this is an answer the proxy writes, not a request it forwards.

use serde_json::{json, Map, Value};

/// Fields copied from the engine's answer as they are.
const ENGINE_FIELDS: [&str; 33] = [
    "ServerVersion",
    "OSType",
    "OperatingSystem",
    "OSVersion",
    "Architecture",
    "KernelVersion",
    "NCPU",
    "MemTotal",
    "CgroupDriver",
    "CgroupVersion",
    "SecurityOptions",
    "DefaultRuntime",
    "Driver",
    "LoggingDriver",
    "Isolation",
    "ExperimentalBuild",
    "MemoryLimit",
    "SwapLimit",
    "KernelMemory",
    "KernelMemoryTCP",
    "CpuCfsPeriod",
    "CpuCfsQuota",
    "CPUShares",
    "CPUSet",
    "PidsLimit",
    "OomKillDisable",
    "IPv4Forwarding",
    "BridgeNfIptables",
    "BridgeNfIp6tables",
    "InitBinary",
    "ContainerdCommit",
    "RuncCommit",
    "InitCommit",
];

/// A listed container's state, as `GET /containers/json` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Running,
    Paused,
    Other,
}

impl State {
    pub fn parse(s: &str) -> Self {
        match s {
            "running" | "restarting" => Self::Running,
            "paused" => Self::Paused,
            _ => Self::Other,
        }
    }
}

/// The stack's `/info` from the engine's (`engine`) and the stack's own containers' states.
pub fn for_stack(engine: &Value, stack: &str, own: &[State]) -> Value {
    let mut out = Map::new();
    for f in ENGINE_FIELDS {
        if let Some(v) = engine.get(f) {
            out.insert(f.to_owned(), v.clone());
        }
    }
    let count = |s: State| own.iter().filter(|x| **x == s).count();
    let running = count(State::Running);
    let paused = count(State::Paused);
    out.insert("Containers".into(), json!(own.len()));
    out.insert("ContainersRunning".into(), json!(running));
    out.insert("ContainersPaused".into(), json!(paused));
    out.insert(
        "ContainersStopped".into(),
        json!(own.len() - running - paused),
    );
    out.insert("Images".into(), json!(0));
    out.insert("Name".into(), json!(stack));
    out.insert("ID".into(), json!(""));
    out.insert("Labels".into(), json!([]));
    out.insert("Warnings".into(), json!([]));
    out.insert("Debug".into(), json!(false));
    out.insert(
        "Plugins".into(),
        json!({ "Volume": [], "Network": [], "Authorization": null, "Log": [] }),
    );
    out.insert(
        "RegistryConfig".into(),
        json!({
            "AllowNondistributableArtifactsCIDRs": [],
            "AllowNondistributableArtifactsHostnames": [],
            "InsecureRegistryCIDRs": [],
            "IndexConfigs": {},
            "Mirrors": []
        }),
    );
    out.insert(
        "Swarm".into(),
        json!({
            "NodeID": "", "NodeAddr": "", "LocalNodeState": "inactive",
            "ControlAvailable": false, "Error": "", "RemoteManagers": null
        }),
    );
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_engine_facts_and_the_stacks_counts() {
        let engine = json!({
            "ID": "HOST:ID", "Name": "build-host-7", "DockerRootDir": "/var/lib/docker",
            "Labels": ["tenant=a"], "Containers": 41, "Images": 90, "ServerVersion": "20.10.24",
            "OperatingSystem": "Debian GNU/Linux 12", "NCPU": 2, "HttpProxy": "http://u:p@proxy:3128",
            "Swarm": { "NodeID": "n", "LocalNodeState": "active" }, "IndexServerAddress": "x",
            "RegistryConfig": { "Mirrors": ["https://mirror.internal"] }, "NFd": 200
        });
        let own = [State::Running, State::Other, State::Paused, State::Running];
        let got = for_stack(&engine, "atlas", &own);
        assert_eq!(got["ServerVersion"], "20.10.24");
        assert_eq!(got["OperatingSystem"], "Debian GNU/Linux 12");
        assert_eq!(got["Name"], "atlas");
        assert_eq!(got["ID"], "");
        assert_eq!(
            (
                got["Containers"].as_u64(),
                got["ContainersRunning"].as_u64()
            ),
            (Some(4), Some(2))
        );
        assert_eq!(
            (
                got["ContainersPaused"].as_u64(),
                got["ContainersStopped"].as_u64()
            ),
            (Some(1), Some(1))
        );
        assert_eq!(got["Images"], 0);
        assert_eq!(got["Swarm"]["LocalNodeState"], "inactive");
        let text = got.to_string();
        for secret in [
            "HOST:ID",
            "build-host-7",
            "/var/lib/docker",
            "tenant=a",
            "proxy:3128",
            "mirror.internal",
            "NFd",
        ] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
    }
}
