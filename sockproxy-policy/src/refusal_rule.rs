//! The rule a refusal names, as a metric label from a fixed set: the body field a setting
//! refusal is about (`HostConfig.Privileged`), the stack total it is past (`max-containers`),
//! or the refusal's reason word for the rest. A refusal's message is free text; this reads the
//! field path that messages begin with and keeps it only when it is one the policy judges, so
//! a client cannot mint label values.

use crate::refusal::Refusal;

/// Every body field a setting refusal may name, as its label. Sorted: looked up by binary
/// search.
const FIELDS: &[&str] = &[
    "AttachStderr",
    "AttachStdin",
    "AttachStdout",
    "Cmd",
    "Domainname",
    "Entrypoint",
    "Env",
    "ExposedPorts",
    "Healthcheck",
    "HostConfig",
    "HostConfig.Annotations",
    "HostConfig.AutoRemove",
    "HostConfig.Binds",
    "HostConfig.BlkioDeviceReadBps",
    "HostConfig.BlkioDeviceReadIOps",
    "HostConfig.BlkioDeviceWriteBps",
    "HostConfig.BlkioDeviceWriteIOps",
    "HostConfig.BlkioWeight",
    "HostConfig.BlkioWeightDevice",
    "HostConfig.CapAdd",
    "HostConfig.CapDrop",
    "HostConfig.Cgroup",
    "HostConfig.CgroupParent",
    "HostConfig.CgroupnsMode",
    "HostConfig.ConsoleSize",
    "HostConfig.ContainerIDFile",
    "HostConfig.CpuCount",
    "HostConfig.CpuPercent",
    "HostConfig.CpuPeriod",
    "HostConfig.CpuQuota",
    "HostConfig.CpuRealtimePeriod",
    "HostConfig.CpuRealtimeRuntime",
    "HostConfig.CpuShares",
    "HostConfig.CpusetCpus",
    "HostConfig.CpusetMems",
    "HostConfig.DeviceCgroupRules",
    "HostConfig.DeviceRequests",
    "HostConfig.Devices",
    "HostConfig.Dns",
    "HostConfig.DnsOptions",
    "HostConfig.DnsSearch",
    "HostConfig.ExtraHosts",
    "HostConfig.GroupAdd",
    "HostConfig.IOMaximumBandwidth",
    "HostConfig.IOMaximumIOps",
    "HostConfig.Init",
    "HostConfig.IpcMode",
    "HostConfig.Isolation",
    "HostConfig.KernelMemory",
    "HostConfig.KernelMemoryTCP",
    "HostConfig.Links",
    "HostConfig.LogConfig",
    "HostConfig.MaskedPaths",
    "HostConfig.Memory",
    "HostConfig.MemoryReservation",
    "HostConfig.MemorySwap",
    "HostConfig.MemorySwappiness",
    "HostConfig.Mounts",
    "HostConfig.NanoCpus",
    "HostConfig.NetworkMode",
    "HostConfig.OomKillDisable",
    "HostConfig.OomScoreAdj",
    "HostConfig.PidMode",
    "HostConfig.PidsLimit",
    "HostConfig.PortBindings",
    "HostConfig.Privileged",
    "HostConfig.PublishAllPorts",
    "HostConfig.ReadonlyPaths",
    "HostConfig.ReadonlyRootfs",
    "HostConfig.RestartPolicy",
    "HostConfig.Runtime",
    "HostConfig.SecurityOpt",
    "HostConfig.ShmSize",
    "HostConfig.StorageOpt",
    "HostConfig.Sysctls",
    "HostConfig.Tmpfs",
    "HostConfig.UTSMode",
    "HostConfig.Ulimits",
    "HostConfig.UsernsMode",
    "HostConfig.VolumeDriver",
    "HostConfig.VolumesFrom",
    "Hostname",
    "Image",
    "Labels",
    "MacAddress",
    "NetworkDisabled",
    "NetworkingConfig",
    "OnBuild",
    "OpenStdin",
    "Shell",
    "StdinOnce",
    "StopSignal",
    "StopTimeout",
    "Tty",
    "User",
    "Volumes",
    "WorkingDir",
];

/// The stack totals a refusal may be past, by the flag that sets each.
const TOTALS: &[&str] = &["max-containers", "max-memory"];

impl Refusal {
    /// The rule this refusal applied, from a fixed set: for a setting, the body field it is
    /// about (`setting` when its message names none the policy knows); for a total, its flag;
    /// otherwise the reason word.
    pub fn rule(&self) -> &'static str {
        match self {
            Self::Setting { why, .. } => field(why).unwrap_or("setting"),
            Self::OverTotal { why, .. } => TOTALS
                .iter()
                .find(|t| why.contains(&format!("--{t}")))
                .copied()
                .unwrap_or("stack_total"),
            other => other.reason(),
        }
    }
}

/// The known field a message begins with: its first word, array indices and deeper segments
/// dropped (`HostConfig.Binds[2]` and `HostConfig.LogConfig.Config` read as
/// `HostConfig.Binds` and `HostConfig.LogConfig`).
fn field(why: &str) -> Option<&'static str> {
    let word = why.split_whitespace().next()?;
    let mut segments = word
        .split('.')
        .map(|s| s.split('[').next().unwrap_or(s))
        .take(2);
    let first = segments.next()?;
    let candidates = match segments.next() {
        Some(second) => [format!("{first}.{second}"), first.to_owned()],
        None => [first.to_owned(), first.to_owned()],
    };
    candidates.iter().find_map(|c| {
        FIELDS
            .binary_search_by(|f| f.cmp(&c.as_str()))
            .ok()
            .map(|i| FIELDS[i])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_table_is_sorted_and_unique() {
        assert!(FIELDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn rules_come_from_the_fixed_set() {
        let setting = |why: &str| Refusal::Setting {
            op: "containers.create".into(),
            why: why.into(),
        };
        let total = |why: &str| Refusal::OverTotal {
            op: "containers.create".into(),
            why: why.into(),
        };
        for (refusal, rule) in [
            (
                setting("HostConfig.Privileged true is not allowed for this stack"),
                "HostConfig.Privileged",
            ),
            (
                setting("HostConfig.Binds[2] /etc is not under an allowed bind root"),
                "HostConfig.Binds",
            ),
            (
                setting("HostConfig.LogConfig.Config is not allowed for this stack without"),
                "HostConfig.LogConfig",
            ),
            (setting("Entrypoint is not allowed"), "Entrypoint"),
            (
                setting("HostConfig.Evil\u{0}{} is not allowed for this stack"),
                "HostConfig",
            ),
            (setting("Whatever a client sent"), "setting"),
            (setting(""), "setting"),
            (
                total("the stack holds 64 containers (--max-containers 64)"),
                "max-containers",
            ),
            (
                total("the stack's memory limits would reach 130g (--max-memory 128g)"),
                "max-memory",
            ),
            (total("something else"), "stack_total"),
            (
                Refusal::NotAllowed {
                    op: "system.info".into(),
                },
                "endpoint_not_allowed",
            ),
        ] {
            assert_eq!(refusal.rule(), rule, "{refusal}");
        }
    }
}
