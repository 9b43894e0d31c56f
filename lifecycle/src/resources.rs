//! What each container lifecycle makes may spend of the host: memory (with no swap beyond it),
//! CPUs and processes, for the sandbox and for its netproxy sidecar, from the flags
//! (`--sandbox-memory 2g --sandbox-cpus 2 --sandbox-pids-limit 512`, the sidecar's
//! `256m`, `1`, `128`: the defaults deer-flow's newer local backend uses). Without them one
//! tenant's agent code could take every other stack's memory, CPU or process table. Parsed and
//! checked once at start-up; pure.

use bollard::models::HostConfig;

/// The limits of one kind of container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    /// Bytes of memory; memory plus swap is held to the same (no swap beyond it).
    pub memory: i64,
    /// CPUs in billionths (dockerd's `NanoCpus`).
    pub nano_cpus: i64,
    /// Most processes (threads included) at once.
    pub pids: i64,
}

/// The sandbox's defaults: 2 GiB, 2 CPUs, 512 processes.
pub const SANDBOX_DEFAULTS: (&str, &str, i64) = ("2g", "2", 512);
/// The sidecar's defaults: 256 MiB, 1 CPU, 128 processes.
pub const SIDECAR_DEFAULTS: (&str, &str, i64) = ("256m", "1", 128);

/// Smallest memory a container may be given: dockerd refuses less than 6 MiB.
const MIN_MEMORY: i64 = 6 * 1024 * 1024;
/// Most processes a limit may name: the kernel's own default ceiling (`pid_max`, 2^22).
const MAX_PIDS: i64 = 1 << 22;
/// Most CPUs a limit may name.
const MAX_CPUS: f64 = 1024.0;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    #[error("{0:?}: expected a size such as 512m or 2g (b, k, m or g; at least 6m)")]
    Memory(String),
    #[error("{0:?}: expected a number of CPUs such as 1 or 0.5 (more than 0, at most 1024)")]
    Cpus(String),
    #[error("{0}: expected a number of processes from 1 to 4194304")]
    Pids(i64),
}

/// A size as docker's CLI reads `--memory`: a number and a binary unit (`b`, `k`, `m`, `g`;
/// none means bytes), case-insensitive.
pub fn parse_memory(raw: &str) -> Result<i64, ResourceError> {
    let bad = || ResourceError::Memory(raw.to_owned());
    let lower = raw.trim().to_ascii_lowercase();
    let (digits, unit) = match lower.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => lower.split_at(i),
        None => (lower.as_str(), ""),
    };
    let shift = match unit {
        "" | "b" => 0,
        "k" | "kb" => 10,
        "m" | "mb" => 20,
        "g" | "gb" => 30,
        _ => return Err(bad()),
    };
    let n: i64 = digits.parse().map_err(|_| bad())?;
    let bytes = n.checked_mul(1 << shift).ok_or_else(bad)?;
    if bytes < MIN_MEMORY {
        return Err(bad());
    }
    Ok(bytes)
}

/// A CPU count as docker's CLI reads `--cpus`, in billionths.
pub fn parse_cpus(raw: &str) -> Result<i64, ResourceError> {
    let bad = || ResourceError::Cpus(raw.to_owned());
    let cpus: f64 = raw.trim().parse().map_err(|_| bad())?;
    if !(cpus > 0.0 && cpus <= MAX_CPUS) {
        return Err(bad());
    }
    let nano = (cpus * 1e9).round() as i64;
    if nano < 1 {
        return Err(bad());
    }
    Ok(nano)
}

impl Resources {
    /// Checks the three flags' values.
    pub fn parse(memory: &str, cpus: &str, pids: i64) -> Result<Self, ResourceError> {
        if !(1..=MAX_PIDS).contains(&pids) {
            return Err(ResourceError::Pids(pids));
        }
        Ok(Self {
            memory: parse_memory(memory)?,
            nano_cpus: parse_cpus(cpus)?,
            pids,
        })
    }

    /// `host` with these limits set.
    pub fn apply(&self, host: HostConfig) -> HostConfig {
        HostConfig {
            memory: Some(self.memory),
            memory_swap: Some(self.memory),
            nano_cpus: Some(self.nano_cpus),
            pids_limit: Some(self.pids),
            ..host
        }
    }
}

impl Default for Resources {
    /// The sandbox's defaults.
    fn default() -> Self {
        let (memory, cpus, pids) = SANDBOX_DEFAULTS;
        Self {
            memory: parse_memory(memory).unwrap_or(2 << 30),
            nano_cpus: parse_cpus(cpus).unwrap_or(2_000_000_000),
            pids,
        }
    }
}

/// The flags, each with its environment variable (`lifecycle --help`, under "Limits").
#[derive(Debug, Clone, clap::Args)]
pub struct ResourceArgs {
    /// Memory of each sandbox, and its memory plus swap (b, k, m, g).
    #[arg(help_heading = "Limits", long, env = "LIFECYCLE_SANDBOX_MEMORY", default_value = SANDBOX_DEFAULTS.0)]
    pub sandbox_memory: String,
    /// CPUs of each sandbox (a decimal number, as docker run --cpus).
    #[arg(help_heading = "Limits", long, env = "LIFECYCLE_SANDBOX_CPUS", default_value = SANDBOX_DEFAULTS.1)]
    pub sandbox_cpus: String,
    /// Processes (threads included) each sandbox may hold at once.
    #[arg(help_heading = "Limits", long, env = "LIFECYCLE_SANDBOX_PIDS_LIMIT", default_value_t = SANDBOX_DEFAULTS.2)]
    pub sandbox_pids_limit: i64,
    /// Memory of each netproxy sidecar (restricted mode), and its memory plus swap.
    #[arg(help_heading = "Limits", long, env = "LIFECYCLE_SIDECAR_MEMORY", default_value = SIDECAR_DEFAULTS.0)]
    pub sidecar_memory: String,
    /// CPUs of each netproxy sidecar.
    #[arg(help_heading = "Limits", long, env = "LIFECYCLE_SIDECAR_CPUS", default_value = SIDECAR_DEFAULTS.1)]
    pub sidecar_cpus: String,
    /// Processes each netproxy sidecar may hold at once.
    #[arg(help_heading = "Limits", long, env = "LIFECYCLE_SIDECAR_PIDS_LIMIT", default_value_t = SIDECAR_DEFAULTS.2)]
    pub sidecar_pids_limit: i64,
}

impl ResourceArgs {
    /// (sandbox, sidecar) limits, or the flag that is wrong and why.
    pub fn resources(&self) -> Result<(Resources, Resources), String> {
        let sandbox = Resources::parse(
            &self.sandbox_memory,
            &self.sandbox_cpus,
            self.sandbox_pids_limit,
        )
        .map_err(|e| format!("--sandbox-{}: {e}", e.flag()))?;
        let sidecar = Resources::parse(
            &self.sidecar_memory,
            &self.sidecar_cpus,
            self.sidecar_pids_limit,
        )
        .map_err(|e| format!("--sidecar-{}: {e}", e.flag()))?;
        Ok((sandbox, sidecar))
    }
}

impl ResourceError {
    /// The flag's name after `--sandbox-` or `--sidecar-`.
    fn flag(&self) -> &'static str {
        match self {
            ResourceError::Memory(_) => "memory",
            ResourceError::Cpus(_) => "cpus",
            ResourceError::Pids(_) => "pids-limit",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_table() {
        let mib = 1 << 20;
        for (raw, want) in [
            ("2g", Ok(2 << 30)),
            ("2G", Ok(2 << 30)),
            ("256m", Ok(256 * mib)),
            ("256mb", Ok(256 * mib)),
            ("6m", Ok(6 * mib)),
            ("6291456", Ok(6 * mib)),
            ("10240k", Ok(10 * mib)),
            ("5m", Err(())),
            ("0", Err(())),
            ("", Err(())),
            ("m", Err(())),
            ("-1g", Err(())),
            ("1.5g", Err(())),
            ("2t", Err(())),
            ("9999999999g", Err(())),
        ] {
            assert_eq!(parse_memory(raw).map_err(|_| ()), want, "{raw:?}");
        }
    }

    #[test]
    fn cpus_table() {
        for (raw, want) in [
            ("2", Ok(2_000_000_000)),
            ("1", Ok(1_000_000_000)),
            ("0.5", Ok(500_000_000)),
            ("1024", Ok(1_024_000_000_000)),
            ("0", Err(())),
            ("-1", Err(())),
            ("1025", Err(())),
            ("NaN", Err(())),
            ("inf", Err(())),
            ("1e-12", Err(())),
            ("two", Err(())),
        ] {
            assert_eq!(parse_cpus(raw).map_err(|_| ()), want, "{raw:?}");
        }
    }

    #[test]
    fn the_defaults_are_deer_flows_and_are_set_whole() {
        let (memory, cpus, pids) = SANDBOX_DEFAULTS;
        let sandbox = Resources::parse(memory, cpus, pids).expect("valid");
        assert_eq!(sandbox, Resources::default());
        assert_eq!(
            (sandbox.memory, sandbox.nano_cpus, sandbox.pids),
            (2 << 30, 2_000_000_000, 512)
        );
        let (memory, cpus, pids) = SIDECAR_DEFAULTS;
        let sidecar = Resources::parse(memory, cpus, pids).expect("valid");
        assert_eq!(
            (sidecar.memory, sidecar.nano_cpus, sidecar.pids),
            (256 << 20, 1_000_000_000, 128)
        );
        let host = sidecar.apply(HostConfig {
            network_mode: Some("n".into()),
            ..Default::default()
        });
        assert_eq!(host.network_mode.as_deref(), Some("n"), "the rest is kept");
        assert_eq!(host.memory, Some(256 << 20));
        assert_eq!(
            host.memory_swap,
            Some(256 << 20),
            "no swap beyond the memory"
        );
        assert_eq!(host.nano_cpus, Some(1_000_000_000));
        assert_eq!(host.pids_limit, Some(128));
        for pids in [0, -1, (1 << 22) + 1] {
            assert_eq!(
                Resources::parse("2g", "2", pids),
                Err(ResourceError::Pids(pids))
            );
        }
    }
}
