//! `HostConfig` and its `Resources` as the stack may set them: an allowlist of every field
//! dockerd's `container.HostConfig` has (20.10 and current), each with the values a stack may
//! use. Fields the toolkit has no use for are accepted only with their zero value; a field that
//! is not listed is refused by name (`fields::Reader::finish`).

use serde_json::{Map, Value};

use crate::create_rules::Ctx;
use crate::fields::{self, value_not_allowed, Reader};
use crate::host_refs::{namespace, network_mode, own_containers};
use crate::limits::At;
use crate::mounts;
use crate::refusal::Refusal;

/// Every `HostConfig` field name, for reading 20.10's legacy top-level fields.
pub const FIELDS: &[&str] = &[
    "Binds",
    "ContainerIDFile",
    "LogConfig",
    "NetworkMode",
    "PortBindings",
    "RestartPolicy",
    "AutoRemove",
    "VolumeDriver",
    "VolumesFrom",
    "ConsoleSize",
    "Annotations",
    "CapAdd",
    "CapDrop",
    "CgroupnsMode",
    "Dns",
    "DnsOptions",
    "DnsSearch",
    "ExtraHosts",
    "GroupAdd",
    "IpcMode",
    "Cgroup",
    "Links",
    "OomScoreAdj",
    "PidMode",
    "Privileged",
    "PublishAllPorts",
    "ReadonlyRootfs",
    "SecurityOpt",
    "StorageOpt",
    "Tmpfs",
    "UTSMode",
    "UsernsMode",
    "ShmSize",
    "Sysctls",
    "Runtime",
    "Isolation",
    "Mounts",
    "MaskedPaths",
    "ReadonlyPaths",
    "Init",
    "Capabilities",
    "CpuShares",
    "Memory",
    "NanoCpus",
    "CgroupParent",
    "BlkioWeight",
    "BlkioWeightDevice",
    "BlkioDeviceReadBps",
    "BlkioDeviceWriteBps",
    "BlkioDeviceReadIOps",
    "BlkioDeviceWriteIOps",
    "CpuPeriod",
    "CpuQuota",
    "CpuRealtimePeriod",
    "CpuRealtimeRuntime",
    "CpusetCpus",
    "CpusetMems",
    "Devices",
    "DeviceCgroupRules",
    "DeviceRequests",
    "KernelMemory",
    "KernelMemoryTCP",
    "MemoryReservation",
    "MemorySwap",
    "MemorySwappiness",
    "OomKillDisable",
    "PidsLimit",
    "Ulimits",
    "CpuCount",
    "CpuPercent",
    "IOMaximumIOps",
    "IOMaximumBandwidth",
    "Cpuset",
];

/// Reads a whole `HostConfig` into the value forwarded.
pub fn host_config(ctx: &Ctx, v: Value) -> Result<Value, Refusal> {
    let mut r = Reader::new(ctx.op, "HostConfig", v)?;
    let mut o = Map::new();
    r.keep(&mut o, "Binds", |_, p, v| mounts::binds(ctx, p, v))?;
    r.keep(&mut o, "Mounts", |_, p, v| mounts::mounts(ctx, p, v))?;
    r.keep(&mut o, "LogConfig", |_, p, v| log_config(ctx, p, v))?;
    r.keep(&mut o, "NetworkMode", |_, p, v| network_mode(ctx, p, v))?;
    r.keep(&mut o, "PortBindings", |_, p, v| port_bindings(ctx, p, v))?;
    r.keep(&mut o, "RestartPolicy", restart_policy)?;
    r.keep(&mut o, "AutoRemove", fields::any_bool)?;
    r.keep(&mut o, "VolumesFrom", |_, p, v| {
        let list = own_containers(ctx, p, v, true)?;
        crate::bind_pins::volumes_from(ctx, p, &list)?;
        Ok(list)
    })?;
    r.keep(&mut o, "Links", |_, p, v| own_containers(ctx, p, v, false))?;
    r.keep(&mut o, "ConsoleSize", console_size)?;
    r.keep(&mut o, "CapAdd", |_, p, v| cap_add(ctx, p, v))?;
    r.keep(&mut o, "CapDrop", fields::any_str_list)?;
    crate::stack_net::drop_net_raw(ctx, &mut o);
    r.keep(&mut o, "CgroupnsMode", fields::one_of(&["", "private"]))?;
    // Left empty, the engine picks: the host's cgroup namespace on a cgroup v1 host (for every
    // client below API 1.41, and above it unless dockerd is set otherwise), where the sandbox
    // then sees the host's cgroup tree and its own container ID. Always a namespace of its own.
    o.insert("CgroupnsMode".into(), Value::from("private"));
    for f in ["Dns", "DnsOptions", "DnsSearch", "ExtraHosts", "GroupAdd"] {
        r.keep(&mut o, f, fields::any_str_list)?;
    }
    r.keep(&mut o, "IpcMode", |_, p, v| {
        namespace(ctx, p, v, &["", "none", "private", "shareable"])
    })?;
    r.keep(&mut o, "PidMode", |_, p, v| namespace(ctx, p, v, &[""]))?;
    r.keep(&mut o, "UTSMode", fields::one_of(&[""]))?;
    r.keep(&mut o, "UsernsMode", fields::one_of(&[""]))?;
    r.keep(&mut o, "OomScoreAdj", |r, p, v| {
        int_in(r, p, &v, 0, 1000).map(Value::from)
    })?;
    r.keep(&mut o, "Privileged", fields::false_only)?;
    r.keep(&mut o, "PublishAllPorts", |r, p, v| {
        if fields::boolean(p, &v)? && !ctx.rules.public_ports {
            Err(value_not_allowed(r.op(), p, "true", "--allow-public-ports"))
        } else {
            Ok(v)
        }
    })?;
    r.keep(&mut o, "ReadonlyRootfs", fields::any_bool)?;
    r.keep(&mut o, "SecurityOpt", |_, p, v| security_opt(ctx, p, v))?;
    r.keep(&mut o, "Tmpfs", |_, p, v| mounts::tmpfs(ctx, p, v))?;
    r.keep(&mut o, "ShmSize", |r, p, v| {
        let max = i64::try_from(ctx.rules.max_shm_size).unwrap_or(i64::MAX);
        int_in(r, p, &v, 0, max).map(Value::from)
    })?;
    r.keep(&mut o, "Sysctls", |r, p, v| sysctls(ctx, r, p, v))?;
    r.keep(&mut o, "Runtime", fields::one_of(&["", "runc"]))?;
    r.keep(&mut o, "Isolation", fields::one_of(&["", "default"]))?;
    r.keep(&mut o, "Init", fields::any_bool)?;
    // `[]` here turns off the engine's masking of /proc and /sys paths; only the default.
    for f in ["MaskedPaths", "ReadonlyPaths", "Capabilities"] {
        if r.take_null(f) {
            o.insert(f.to_owned(), Value::Null);
        } else if r.take(f).is_some() {
            return Err(r.not_allowed(f));
        }
    }
    r.zero_kept(
        &mut o,
        &[
            "ContainerIDFile",
            "VolumeDriver",
            "Annotations",
            "Cgroup",
            "StorageOpt",
            "Cpuset",
        ],
    )?;
    resources(&mut r, &mut o, At::Create, &ctx.rules.spend)?;
    r.finish()?;
    Ok(Value::Object(o))
}

/// `container.Resources`: limits are the stack's to set within the operator's bounds (`limits`:
/// memory, CPU and pids, with defaults at create); devices, cgroup parents, block-device
/// throttles (they name host devices) and switching the OOM killer off are not. Shared by
/// create and `POST /containers/{id}/update`.
pub fn resources(
    r: &mut Reader,
    o: &mut Map<String, Value>,
    at: At,
    spend: &crate::spend::Spend,
) -> Result<(), Refusal> {
    use crate::spend_host;
    r.keep(o, "CpuShares", |r, p, v| {
        spend_host::cpu_shares(spend, r, p, v)
    })?;
    for f in ["KernelMemory", "KernelMemoryTCP", "MemoryReservation"] {
        r.keep(o, f, fields::any_int)?;
    }
    crate::limits::keep(r, o, at, spend)?;
    r.keep(o, "BlkioWeight", |r, p, v| {
        spend_host::blkio_weight(spend, r, p, v)
    })?;
    r.keep(o, "CpusetCpus", fields::any_string)?;
    r.keep(o, "CpusetMems", fields::any_string)?;
    r.keep(o, "MemorySwappiness", fields::any_int)?;
    r.keep(o, "OomKillDisable", fields::false_only)?;
    r.keep(o, "Ulimits", |r, p, v| ulimits(spend, r, p, v))?;
    r.zero_kept(
        o,
        &[
            "CgroupParent",
            "BlkioWeightDevice",
            "BlkioDeviceReadBps",
            "BlkioDeviceWriteBps",
            "BlkioDeviceReadIOps",
            "BlkioDeviceWriteIOps",
            "Devices",
            "DeviceCgroupRules",
            "DeviceRequests",
            "CpuCount",
            "CpuPercent",
            // Real-time CPU time runs ahead of every other process on the host.
            "CpuRealtimePeriod",
            "CpuRealtimeRuntime",
            "IOMaximumIOps",
            "IOMaximumBandwidth",
        ],
    )
}

/// Only the sysctls `--allow-sysctl` names; for a restricted stack never `net.ipv6.*`: with
/// IPv6 turned on in its namespace, a sandbox on an internal network reached the host through
/// the bridge's link-local address (dockerd 20.10 turns IPv6 off in a container whose networks
/// have none).
fn sysctls(ctx: &Ctx, r: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    let m = fields::str_map(p, v)?;
    if let Some(k) = m
        .keys()
        .find(|k| ctx.scope.restricted() && k.starts_with("net.ipv6."))
    {
        return Err(value_not_allowed(
            r.op(),
            p,
            k,
            "a restricted stack's sandboxes stay off IPv6, whatever --allow-sysctl says",
        ));
    }
    match m.keys().find(|k| !ctx.rules.allow_sysctls.contains(k)) {
        Some(k) => Err(value_not_allowed(r.op(), p, k, "--allow-sysctl")),
        None => Ok(Value::Object(m)),
    }
}

fn int_in(r: &Reader, path: &str, v: &Value, min: i64, max: i64) -> Result<i64, Refusal> {
    let n = fields::int(path, v)?;
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(value_not_allowed(
            r.op(),
            path,
            &n.to_string(),
            &format!("allowed: {min}..={max}"),
        ))
    }
}

/// Resource limits a stack may set on its processes. `rtprio` and `nice` would let them raise
/// their scheduling priority above the host's other work, `memlock` pin host memory.
const ULIMITS: [&str; 12] = [
    "as",
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "msgqueue",
    "nofile",
    "nproc",
    "rss",
    "sigpending",
    "stack",
];

fn ulimits(
    spend: &crate::spend::Spend,
    parent: &Reader,
    path: &str,
    v: Value,
) -> Result<Value, Refusal> {
    let Value::Array(list) = v else {
        return Err(Refusal::BadRequest(format!("{path} must be a list")));
    };
    let mut out = Vec::new();
    for (i, u) in list.into_iter().enumerate() {
        let mut r = Reader::new(parent.op(), &format!("{path}[{i}]"), u)?;
        let mut o = Map::new();
        r.keep(&mut o, "Name", fields::one_of(&ULIMITS))?;
        let name = o
            .get("Name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        for f in ["Hard", "Soft"] {
            r.keep(&mut o, f, |r, p, v| {
                crate::spend_host::ulimit_value(spend, &name, r, p, v)
            })?;
        }
        r.finish()?;
        out.push(Value::Object(o));
    }
    Ok(Value::Array(out))
}

fn restart_policy(parent: &Reader, path: &str, v: Value) -> Result<Value, Refusal> {
    let mut r = Reader::new(parent.op(), path, v)?;
    let mut o = Map::new();
    r.keep(
        &mut o,
        "Name",
        fields::one_of(&["", "no", "always", "unless-stopped", "on-failure"]),
    )?;
    r.keep(&mut o, "MaximumRetryCount", fields::any_int)?;
    r.finish()?;
    Ok(Value::Object(o))
}

fn console_size(_: &Reader, path: &str, v: Value) -> Result<Value, Refusal> {
    match &v {
        Value::Array(a) if a.len() == 2 && a.iter().all(|x| x.as_u64().is_some()) => Ok(v),
        _ => Err(Refusal::BadRequest(format!(
            "{path} must be two non-negative integers"
        ))),
    }
}

/// `LogConfig`: only drivers in `--allow-log-driver`; a remote driver would ship the
/// container's output from the host's network, past the egress sidecar.
fn log_config(ctx: &Ctx, path: &str, v: Value) -> Result<Value, Refusal> {
    let mut r = Reader::new(ctx.op, path, v)?;
    let mut o = Map::new();
    r.keep(&mut o, "Type", |r, p, v| {
        let kind = fields::string(p, v)?;
        if !kind.is_empty() && !ctx.rules.allow_log_drivers.contains(&kind) {
            return Err(value_not_allowed(r.op(), p, &kind, "--allow-log-driver"));
        }
        Ok(Value::String(kind))
    })?;
    r.keep(&mut o, "Config", fields::any_str_map)?;
    r.finish()?;
    // The engine's own default driver is the operator's choice; no options are given with it.
    let default_driver = o
        .get("Type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty();
    let has_options = o
        .get("Config")
        .and_then(Value::as_object)
        .is_some_and(|c| !c.is_empty());
    if default_driver && has_options {
        // `docker run --log-opt` without `--log-driver`: options are read by the driver they
        // are for, so they go with it.
        return Err(Refusal::Setting {
            op: ctx.op.to_owned(),
            why: format!(
                "{path}.Config is not allowed for this stack without {path}.Type: name the driver the options are for (docker run --log-driver json-file --log-opt …)"
            ),
        });
    }
    if let (Some(driver), Some(config)) = (
        o.get("Type").and_then(Value::as_str),
        o.get("Config").and_then(Value::as_object),
    ) {
        crate::spend_host::log_options(
            &ctx.rules.spend,
            ctx.op,
            &format!("{path}.Config"),
            driver,
            config,
        )?;
    }
    Ok(Value::Object(o))
}

fn cap_add(ctx: &Ctx, path: &str, v: Value) -> Result<Value, Refusal> {
    let caps = fields::str_list(path, v)?;
    if let Some(cap) = caps.iter().find(|c| !ctx.rules.allows_cap(c)) {
        return Err(value_not_allowed(ctx.op, path, cap, "--allow-cap"));
    }
    Ok(Value::from(caps))
}

/// Loopback and `--allow-publish-address` only, unless `--allow-public-ports`; how many and which host ports: `spend`.
fn port_bindings(ctx: &Ctx, path: &str, v: Value) -> Result<Value, Refusal> {
    let Value::Object(map) = v else {
        return Err(Refusal::BadRequest(format!("{path} must be an object")));
    };
    let mut out = Map::new();
    for (port, list) in map {
        let at = format!("{path}.{port}");
        let list = match list {
            Value::Null => Vec::new(),
            Value::Array(a) => a,
            _ => return Err(Refusal::BadRequest(format!("{at} must be a list"))),
        };
        let mut bindings = Vec::new();
        for b in list {
            let mut r = Reader::new(ctx.op, &at, b)?;
            let mut o = Map::new();
            r.keep(&mut o, "HostIp", fields::any_string)?;
            r.keep(&mut o, "HostPort", fields::any_string)?;
            r.finish()?;
            let ip = o.get("HostIp").and_then(Value::as_str).unwrap_or("");
            if !crate::create_rules::may_publish_on(ctx.rules, ip) {
                let shown = if ip.is_empty() { "every address" } else { ip };
                let allowed: Vec<String> = ["loopback".to_owned()]
                    .into_iter()
                    .chain(ctx.rules.publish_addresses.iter().map(|a| a.to_string()))
                    .collect();
                return Err(Refusal::Setting {
                    op: ctx.op.to_owned(),
                    why: format!(
                        "{at} published on {shown} is not allowed for this stack ({} only; --allow-public-ports)",
                        allowed.join(", ")
                    ),
                });
            }
            bindings.push(Value::Object(o));
        }
        out.insert(port, Value::Array(bindings));
    }
    crate::spend::port_bindings(&ctx.rules.spend, ctx.op, path, &out)?;
    Ok(Value::Object(out))
}

/// `SecurityOpt`, read as dockerd's `parseSecurityOpt` reads it: `KEY=VALUE` (or the deprecated
/// `KEY:VALUE`), keys compared exactly. Only confinement the engine applies by default, or more.
fn security_opt(ctx: &Ctx, path: &str, v: Value) -> Result<Value, Refusal> {
    let opts = fields::str_list(path, v)?;
    let mut out = Vec::with_capacity(opts.len());
    for opt in opts {
        out.push(security_opt_one(ctx, path, opt)?);
    }
    Ok(Value::from(out))
}

/// One option as it is forwarded: as sent, or for a custom seccomp profile the canonical JSON
/// that was decided on (`seccomp`).
fn security_opt_one(ctx: &Ctx, path: &str, opt: String) -> Result<String, Refusal> {
    let refuse = |hint: &str| value_not_allowed(ctx.op, path, &opt, hint);
    if opt == "no-new-privileges" {
        return Ok(opt);
    }
    let split = if opt.contains('=') {
        opt.split_once('=')
    } else {
        opt.split_once(':')
    };
    let Some((key, value)) = split else {
        // `disable` alone turns SELinux labelling off; anything else the engine refuses.
        return Err(refuse(""));
    };
    let checked = match key {
        "no-new-privileges" => match value {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(()),
            _ => Err(refuse("")),
        },
        "seccomp" if value == "unconfined" => {
            if ctx.rules.allow_seccomp_unconfined {
                Ok(())
            } else {
                Err(refuse("--allow-seccomp-unconfined"))
            }
        }
        // Docker's built-in profile in place of the one the operator gave the engine
        // (`--seccomp-profile`, engine 25 and later), which may be stricter.
        "seccomp" if value == "builtin" => Err(refuse("")),
        "seccomp" => {
            let profile = crate::seccomp::canonical(value).map_err(|why| Refusal::Setting {
                op: ctx.op.to_owned(),
                why: format!("{path} seccomp: {why}"),
            })?;
            if ctx.rules.seccomp_profiles.contains(&profile.sha256) {
                return Ok(format!("seccomp={}", profile.json));
            }
            Err(value_not_allowed(
                ctx.op,
                path,
                &format!("seccomp profile sha256:{}", profile.sha256),
                "--allow-seccomp-profile",
            ))
        }
        "apparmor" if value == "docker-default" => Ok(()),
        _ => Err(refuse("")),
    };
    checked.map(|()| opt.clone())
}
