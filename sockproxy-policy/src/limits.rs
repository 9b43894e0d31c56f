//! What each of a stack's containers may use (memory, CPU time, processes) and what all of
//! them may hold together. A create that sets no limit gets the operator's default, one that
//! sets a limit is held to the operator's bound, and "unlimited" is never a value a stack may
//! choose (0 and -1 included): one tenant's agent code must not starve every other stack on
//! the host. The per-stack totals (`totals`) are counted from the engine over every container
//! of the stack's families, in any state, sidecars included (`Fact::Usage`), under the stack's
//! lock (the transport's), so concurrent creates cannot pass them together.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::fields::{self, value_not_allowed, Reader};
use crate::refusal::Refusal;
use crate::scope::{Kind, Prefix};
use crate::spend::Spend;

/// `--default-memory`'s default: 2 GiB (deer-flow's local backend's `--memory 2g`).
pub const DEFAULT_MEMORY: i64 = 2 << 30;
/// `--default-cpus`' default: 2 CPUs, in billionths (`NanoCpus`).
pub const DEFAULT_NANO_CPUS: i64 = 2_000_000_000;
/// `--default-pids-limit`'s default.
pub const DEFAULT_PIDS_LIMIT: i64 = 512;
/// `--max-container-memory`'s default: 8 GiB.
pub const DEFAULT_MAX_CONTAINER_MEMORY: i64 = 8 << 30;
/// `--max-container-cpus`' default: 4 CPUs, in billionths.
pub const DEFAULT_MAX_CONTAINER_NANO_CPUS: i64 = 4_000_000_000;
/// `--max-containers`' default: 64 containers (32 restricted sandboxes with their sidecars).
pub const DEFAULT_MAX_CONTAINERS: usize = 64;
/// `--max-memory`'s default: 128 GiB of memory limits in all (64 containers at the default).
pub const DEFAULT_MAX_MEMORY: i64 = 128 << 30;

/// dockerd's CPU period when a quota is given without one (`CpuPeriod: 0`), in microseconds.
const DEFAULT_CPU_PERIOD: i64 = 100_000;

/// The operator's defaults and bounds (the pids bound is `Spend::max_pids_limit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `HostConfig.Memory` given to a create that sets none, in bytes (`--default-memory`).
    pub default_memory: i64,
    /// `HostConfig.NanoCpus` given to a create that sets no CPU limit (`--default-cpus`).
    pub default_nano_cpus: i64,
    /// `HostConfig.PidsLimit` given to a create that sets none (`--default-pids-limit`).
    pub default_pids_limit: i64,
    /// Largest `Memory` one container may have, in bytes (`--max-container-memory`).
    pub max_container_memory: i64,
    /// Largest CPU limit one container may have, in billionths of a CPU
    /// (`--max-container-cpus`): `NanoCpus`, or `CpuQuota` over `CpuPeriod`.
    pub max_container_nano_cpus: i64,
    /// Containers of the stack's families the engine may hold, in any state (`--max-containers`).
    pub max_containers: usize,
    /// Sum of the memory limits of those containers, in bytes (`--max-memory`).
    pub max_memory: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            default_memory: DEFAULT_MEMORY,
            default_nano_cpus: DEFAULT_NANO_CPUS,
            default_pids_limit: DEFAULT_PIDS_LIMIT,
            max_container_memory: DEFAULT_MAX_CONTAINER_MEMORY,
            max_container_nano_cpus: DEFAULT_MAX_CONTAINER_NANO_CPUS,
            max_containers: DEFAULT_MAX_CONTAINERS,
            max_memory: DEFAULT_MAX_MEMORY,
        }
    }
}

/// Which request the limits are read in: dockerd gives 0 a different meaning in each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// A create: a limit not set (absent, `null` or 0, what the docker CLI sends) gets the
    /// operator's default.
    Create,
    /// An update (`POST /containers/{id}/update`) from API 1.40 on: 0 leaves `Memory`,
    /// `NanoCpus` and `CpuQuota` as they are, but sets `PidsLimit` to "unlimited".
    Update,
    /// An update below API 1.40: dockerd drops `PidsLimit`, and clients of that age send 0 with
    /// every update, so 0 is "not set" there.
    OldUpdate,
}

/// The limit fields of `container.Resources`, each within its bound; at create, the defaults
/// for those not set. Called by `host_config::resources` for create and update.
pub fn keep(
    r: &mut Reader,
    o: &mut Map<String, Value>,
    at: At,
    spend: &Spend,
) -> Result<(), Refusal> {
    let l = &spend.limits;
    r.keep(o, "Memory", |r, p, v| {
        within(
            r,
            p,
            &v,
            0,
            l.max_container_memory,
            "--max-container-memory",
        )
    })?;
    // -1 is unlimited swap; 0 is the engine's default (twice `Memory`).
    r.keep(o, "MemorySwap", |r, p, v| {
        let most = l.max_container_memory.saturating_mul(2);
        within(r, p, &v, 0, most, "twice --max-container-memory")
    })?;
    r.keep(o, "NanoCpus", |r, p, v| {
        within(
            r,
            p,
            &v,
            0,
            l.max_container_nano_cpus,
            "--max-container-cpus",
        )
    })?;
    r.keep(o, "CpuQuota", |r, p, v| {
        let n = fields::int(p, &v)?;
        if n < 0 {
            return Err(value_not_allowed(
                r.op(),
                p,
                &n.to_string(),
                "that is no quota at all",
            ));
        }
        Ok(Value::from(n))
    })?;
    // dockerd's own range for a period: 1 ms to 1 s, in microseconds.
    r.keep(o, "CpuPeriod", |r, p, v| {
        let n = fields::int(p, &v)?;
        if n == 0 || (1_000..=1_000_000).contains(&n) {
            Ok(Value::from(n))
        } else {
            Err(value_not_allowed(
                r.op(),
                p,
                &n.to_string(),
                "0 or 1000..=1000000",
            ))
        }
    })?;
    // -1 asks for "unlimited" outright, at create and update alike; at update (API 1.40 on)
    // dockerd reads 0 as "unlimited" too.
    let least = match at {
        At::Create | At::OldUpdate => 0,
        At::Update => 1,
    };
    r.keep(o, "PidsLimit", |r, p, v| {
        crate::spend_host::pids_limit(spend, least, r, p, v)
    })?;
    cpu_quota(r.op(), o, at, l)?;
    if at == At::Create {
        fill_defaults(o, l);
    }
    Ok(())
}

/// A value that is not set (absent, `null` or 0).
fn unset(o: &Map<String, Value>, key: &str) -> bool {
    o.get(key).is_none_or(fields::is_zero)
}

/// A CPU quota is bounded by what it comes to over its period. A period alone sets no limit
/// at create, and at update would scale the quota the container already has: refused.
fn cpu_quota(op: &str, o: &Map<String, Value>, at: At, l: &Limits) -> Result<(), Refusal> {
    let int = |k: &str| o.get(k).and_then(Value::as_i64).unwrap_or(0);
    let (quota, period) = (int("CpuQuota"), int("CpuPeriod"));
    if quota == 0 {
        if period != 0 && (at != At::Create || unset(o, "NanoCpus")) {
            return Err(Refusal::Setting {
                op: op.to_owned(),
                why: "HostConfig.CpuPeriod without a CpuQuota is not allowed for this stack (it sets no CPU limit, or scales the one the container has)".into(),
            });
        }
        return Ok(());
    }
    let period = if period == 0 {
        DEFAULT_CPU_PERIOD
    } else {
        period
    };
    let nano = i128::from(quota) * 1_000_000_000 / i128::from(period);
    if nano > i128::from(l.max_container_nano_cpus) {
        return Err(value_not_allowed(
            op,
            "HostConfig.CpuQuota",
            &format!("{quota} over a period of {period}"),
            &format!(
                "at most {}; --max-container-cpus",
                cpus(l.max_container_nano_cpus)
            ),
        ));
    }
    Ok(())
}

/// At create: the operator's default for each limit not set.
fn fill_defaults(o: &mut Map<String, Value>, l: &Limits) {
    if unset(o, "Memory") {
        o.insert("Memory".into(), Value::from(l.default_memory));
    }
    // `cpu_quota` refused a period alone, which dockerd would refuse beside `NanoCpus`.
    if unset(o, "NanoCpus") && unset(o, "CpuQuota") {
        o.insert("NanoCpus".into(), Value::from(l.default_nano_cpus));
    }
    if unset(o, "PidsLimit") {
        o.insert("PidsLimit".into(), Value::from(l.default_pids_limit));
    }
}

fn within(
    r: &Reader,
    p: &str,
    v: &Value,
    min: i64,
    max: i64,
    flag: &str,
) -> Result<Value, Refusal> {
    let n = fields::int(p, v)?;
    if (min..=max).contains(&n) {
        Ok(Value::from(n))
    } else {
        Err(value_not_allowed(
            r.op(),
            p,
            &n.to_string(),
            &format!("allowed: {min}..={max}; {flag}"),
        ))
    }
}

/// A number of billionths of a CPU as a number of CPUs (`2`, `1.5`).
pub fn cpus(nano: i64) -> String {
    let whole = nano / 1_000_000_000;
    let rest = nano % 1_000_000_000;
    if rest == 0 {
        return whole.to_string();
    }
    let frac = format!("{rest:09}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// One of the stack's containers as the totals count it: the engine's inspect, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    pub id: String,
    /// As the inspect answered it (with the leading `/`).
    pub name: String,
    /// `HostConfig.Memory`: 0 when it has no limit (made on the engine, past the proxy).
    pub memory: i64,
}

#[derive(Deserialize)]
struct UsageAnswer {
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "HostConfig", default)]
    host: Option<UsageHost>,
}

#[derive(Deserialize)]
struct UsageHost {
    #[serde(rename = "Memory", default)]
    memory: Option<i64>,
}

impl Usage {
    /// A container inspect answer.
    pub fn read(body: &[u8]) -> Result<Self, Refusal> {
        let a: UsageAnswer = serde_json::from_slice(body)
            .map_err(|e| Refusal::Upstream(format!("unreadable inspect answer: {e}")))?;
        Ok(Self {
            id: a.id,
            name: a.name,
            memory: a.host.and_then(|h| h.memory).unwrap_or(0),
        })
    }
}

/// What a request adds to the stack's totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adds<'a> {
    /// A new container with this memory limit.
    Container { memory: i64 },
    /// The container with this ID gets this memory limit in place of its own.
    Memory { id: &'a str, memory: i64 },
}

/// The per-stack totals with `adds` counted: at most `max_containers` containers of the
/// stack's families, in any state, and at most `max_memory` bytes of memory limits among them
/// (a container without a limit counts as the default, as a create through the proxy gets).
pub fn totals(
    op: &str,
    l: &Limits,
    prefix: &Prefix,
    usage: &[Usage],
    adds: Adds,
) -> Result<(), Refusal> {
    let ours: Vec<&Usage> = usage
        .iter()
        .filter(|u| {
            let name = u.name.strip_prefix('/').unwrap_or(&u.name);
            stackmodel::family_of(prefix, Kind::Container, name).is_some()
        })
        .collect();
    let counted = |u: &Usage| {
        if u.memory > 0 {
            u.memory
        } else {
            l.default_memory
        }
    };
    let (others, added): (Vec<&&Usage>, i64) = match adds {
        Adds::Container { memory } => {
            if ours.len() >= l.max_containers {
                return Err(Refusal::OverTotal {
                    op: op.to_owned(),
                    why: format!(
                        "this stack has {} containers, the most it may have (--max-containers {})",
                        ours.len(),
                        l.max_containers
                    ),
                });
            }
            (ours.iter().collect(), memory)
        }
        Adds::Memory { id, memory } => (ours.iter().filter(|u| u.id != id).collect(), memory),
    };
    let total =
        others.iter().map(|u| i128::from(counted(u))).sum::<i128>() + i128::from(added.max(0));
    if total > i128::from(l.max_memory) {
        return Err(Refusal::OverTotal {
            op: op.to_owned(),
            why: format!(
                "this stack's containers would hold {total} bytes of memory limits in all, more than it may (--max-memory {})",
                l.max_memory
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "limits_tests.rs"]
mod tests;
