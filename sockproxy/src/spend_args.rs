//! The flags that bound what a stack may spend (`--max-*`, `--min-*`, `--allow-host-port`,
//! `--allow-log-opt`, and each container's default limits, `--default-*`): configuration,
//! read into the policy crate's `Spend` and its `Limits`; and the log guard's limit
//! (`--log-flood-*`), read into its `LogFlood`.

use sockproxy_policy::log_flood::LogFlood;
use sockproxy_policy::settings::{parse_duration, ram_in_bytes, Limits, Spend};

/// The flags that set `Spend` (each with a `SOCKPROXY_*` fallback); absent ones keep the
/// defaults above.
#[derive(Debug, Default, Clone, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct SpendArgs {
    /// Object keys a request body may hold, counted at every depth [default: 10000].
    #[arg(long, env = "SOCKPROXY_MAX_JSON_KEYS")]
    pub max_json_keys: Option<usize>,
    /// Shortest healthcheck Interval, Timeout, StartPeriod and StartInterval a container may
    /// ask for (0, the engine's default, is always allowed), e.g. 1s, 500ms [default: 1s].
    #[arg(long, env = "SOCKPROXY_MIN_HEALTHCHECK_INTERVAL")]
    pub min_healthcheck_interval: Option<String>,
    /// Largest Healthcheck.Retries [default: 100].
    #[arg(long, env = "SOCKPROXY_MAX_HEALTHCHECK_RETRIES")]
    pub max_healthcheck_retries: Option<i64>,
    /// Largest StopTimeout and stop/restart `t`, in seconds [default: 300].
    #[arg(long, env = "SOCKPROXY_MAX_STOP_TIMEOUT")]
    pub max_stop_timeout: Option<i64>,
    /// Host ports one container may publish [default: 4].
    #[arg(long, env = "SOCKPROXY_MAX_PORT_BINDINGS")]
    pub max_port_bindings: Option<usize>,
    /// Lowest host port a container may publish on, unless --allow-host-port names it
    /// [default: 1024].
    #[arg(long, env = "SOCKPROXY_MIN_HOST_PORT")]
    pub min_host_port: Option<u16>,
    /// A host port below --min-host-port containers may publish on all the same (repeatable).
    #[arg(
        long = "allow-host-port",
        env = "SOCKPROXY_ALLOW_HOST_PORT",
        value_delimiter = ','
    )]
    pub allow_host_port: Vec<u16>,
    /// Largest CpuShares a container may ask for, at create and update [default: 1024].
    #[arg(long, env = "SOCKPROXY_MAX_CPU_SHARES")]
    pub max_cpu_shares: Option<i64>,
    /// Largest BlkioWeight, at create and update [default: 500].
    #[arg(long, env = "SOCKPROXY_MAX_BLKIO_WEIGHT")]
    pub max_blkio_weight: Option<u64>,
    /// Largest PidsLimit, at create and update [default: 32768].
    #[arg(long, env = "SOCKPROXY_MAX_PIDS_LIMIT")]
    pub max_pids_limit: Option<i64>,
    /// Largest `core` ulimit (soft and hard), in bytes [default: 0, no core dumps].
    #[arg(long, env = "SOCKPROXY_MAX_CORE_ULIMIT")]
    pub max_core_ulimit: Option<i64>,
    /// Largest log `max-size` a container may give its logging driver, e.g. 100m
    /// [default: 100m].
    #[arg(long, env = "SOCKPROXY_MAX_LOG_SIZE")]
    pub max_log_size: Option<String>,
    /// Largest log `max-file` [default: 5].
    #[arg(long, env = "SOCKPROXY_MAX_LOG_FILES")]
    pub max_log_files: Option<u64>,
    /// A log option DRIVER:KEY containers may give an allowed driver, beyond json-file's and
    /// local's own (max-size, max-file, compress); tag, labels and env (and their -regex forms)
    /// need it for every driver, and an allowed tag is still a bounded template (repeatable).
    #[arg(
        long = "allow-log-opt",
        env = "SOCKPROXY_ALLOW_LOG_OPT",
        value_delimiter = ','
    )]
    pub allow_log_opt: Vec<String>,
    /// Memory limit a container that sets none is given, e.g. 2g (0 and -1, unlimited, are
    /// never passed on) [default: 2g].
    #[arg(long, env = "SOCKPROXY_DEFAULT_MEMORY")]
    pub default_memory: Option<String>,
    /// CPU limit (NanoCpus) a container that sets none is given, in CPUs, e.g. 2 or 1.5
    /// [default: 2].
    #[arg(long, env = "SOCKPROXY_DEFAULT_CPUS")]
    pub default_cpus: Option<String>,
    /// PidsLimit a container that sets none is given [default: 512].
    #[arg(long, env = "SOCKPROXY_DEFAULT_PIDS_LIMIT")]
    pub default_pids_limit: Option<i64>,
    /// Largest memory limit one container may have, at create and update [default: 8g].
    #[arg(long, env = "SOCKPROXY_MAX_CONTAINER_MEMORY")]
    pub max_container_memory: Option<String>,
    /// Largest CPU limit one container may have, in CPUs (NanoCpus, or CpuQuota over
    /// CpuPeriod) [default: 4].
    #[arg(long, env = "SOCKPROXY_MAX_CONTAINER_CPUS")]
    pub max_container_cpus: Option<String>,
    /// Containers of the stack's families (sandboxes and sidecars) the engine may hold in any
    /// state; a create past it is refused [default: 64].
    #[arg(long, env = "SOCKPROXY_MAX_CONTAINERS")]
    pub max_containers: Option<usize>,
    /// Sum of the memory limits of those containers (one without a limit counts as
    /// --default-memory); a create or update past it is refused [default: 128g].
    #[arg(long, env = "SOCKPROXY_MAX_MEMORY")]
    pub max_memory: Option<String>,
    /// Log lines a second one of the stack's running containers may write, sustained for
    /// --log-flood-seconds, before the proxy stops it (dockerd spends its own CPU on every
    /// line, whatever the logging driver); 0 turns the guard off [default: 1000].
    #[arg(long, env = "SOCKPROXY_LOG_FLOOD_LINES")]
    pub log_flood_lines: Option<u32>,
    /// Seconds in a row over --log-flood-lines that stop a container, 1 to 600 [default: 3].
    #[arg(long, env = "SOCKPROXY_LOG_FLOOD_SECONDS")]
    pub log_flood_seconds: Option<u32>,
}

impl SpendArgs {
    /// The log guard's limit, validated; `None` with `--log-flood-lines 0`.
    pub fn log_flood(&self) -> Result<Option<LogFlood>, String> {
        LogFlood::from_flags(self.log_flood_lines, self.log_flood_seconds)
    }

    /// The validated bounds; `Err` is the flag's message.
    pub fn spend(&self) -> Result<Spend, String> {
        let d = Spend::default();
        let min_healthcheck_interval_ns = match &self.min_healthcheck_interval {
            Some(raw) => parse_duration(raw)
                .and_then(|ns| {
                    (ns >= 0)
                        .then_some(ns)
                        .ok_or_else(|| format!("{raw:?}: must not be negative"))
                })
                .map_err(|e| format!("--min-healthcheck-interval {e}"))?,
            None => d.min_healthcheck_interval_ns,
        };
        let non_negative = |flag: &str, v: Option<i64>, default: i64| match v {
            Some(n) if n < 0 => Err(format!("{flag} {n}: must not be negative")),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        Ok(Spend {
            max_json_keys: self.max_json_keys.unwrap_or(d.max_json_keys),
            min_healthcheck_interval_ns,
            max_healthcheck_retries: non_negative(
                "--max-healthcheck-retries",
                self.max_healthcheck_retries,
                d.max_healthcheck_retries,
            )?,
            max_stop_timeout: non_negative(
                "--max-stop-timeout",
                self.max_stop_timeout,
                d.max_stop_timeout,
            )?,
            max_port_bindings: self.max_port_bindings.unwrap_or(d.max_port_bindings),
            min_host_port: self.min_host_port.unwrap_or(d.min_host_port),
            allow_host_ports: self.allow_host_port.clone(),
            max_cpu_shares: non_negative(
                "--max-cpu-shares",
                self.max_cpu_shares,
                d.max_cpu_shares,
            )?,
            max_blkio_weight: self.max_blkio_weight.unwrap_or(d.max_blkio_weight),
            max_pids_limit: non_negative(
                "--max-pids-limit",
                self.max_pids_limit,
                d.max_pids_limit,
            )?,
            max_core_ulimit: non_negative(
                "--max-core-ulimit",
                self.max_core_ulimit,
                d.max_core_ulimit,
            )?,
            max_log_size: match &self.max_log_size {
                Some(raw) => ram_in_bytes(raw).ok_or_else(|| {
                    format!("--max-log-size {raw:?}: expected a size such as 100m")
                })?,
                None => d.max_log_size,
            },
            max_log_files: self.max_log_files.unwrap_or(d.max_log_files),
            allow_log_opts: self
                .allow_log_opt
                .iter()
                .map(|o| match o.split_once(':') {
                    Some((d, k)) if !d.is_empty() && !k.is_empty() => Ok(o.clone()),
                    _ => Err(format!("--allow-log-opt {o:?}: expected DRIVER:KEY")),
                })
                .collect::<Result<_, _>>()?,
            limits: self.limits(d.max_pids_limit)?,
        })
    }

    /// The limits flags, validated: every default within its bound, every bound above 0.
    fn limits(&self, max_pids: i64) -> Result<Limits, String> {
        let d = Limits::default();
        let size = |flag: &str, raw: &Option<String>, default: i64| match raw {
            None => Ok(default),
            Some(raw) => ram_in_bytes(raw)
                .and_then(|n| i64::try_from(n).ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{flag} {raw:?}: expected a size above 0 such as 2g")),
        };
        let cpus = |flag: &str, raw: &Option<String>, default: i64| match raw {
            None => Ok(default),
            Some(raw) => raw
                .parse::<f64>()
                .ok()
                .map(|c| (c * 1e9).round())
                .filter(|n| *n >= 1.0 && *n < 1e18)
                .map(|n| n as i64)
                .ok_or_else(|| {
                    format!("{flag} {raw:?}: expected a number of CPUs above 0 such as 2 or 1.5")
                }),
        };
        let max_pids = self.max_pids_limit.unwrap_or(max_pids);
        let l = Limits {
            default_memory: size("--default-memory", &self.default_memory, d.default_memory)?,
            default_nano_cpus: cpus("--default-cpus", &self.default_cpus, d.default_nano_cpus)?,
            default_pids_limit: self.default_pids_limit.unwrap_or(d.default_pids_limit),
            max_container_memory: size(
                "--max-container-memory",
                &self.max_container_memory,
                d.max_container_memory,
            )?,
            max_container_nano_cpus: cpus(
                "--max-container-cpus",
                &self.max_container_cpus,
                d.max_container_nano_cpus,
            )?,
            max_containers: self.max_containers.unwrap_or(d.max_containers),
            max_memory: size("--max-memory", &self.max_memory, d.max_memory)?,
        };
        let checks = [
            (
                l.default_memory <= l.max_container_memory,
                "--default-memory must not be above --max-container-memory",
            ),
            (
                l.default_nano_cpus <= l.max_container_nano_cpus,
                "--default-cpus must not be above --max-container-cpus",
            ),
            (
                (1..=max_pids).contains(&l.default_pids_limit),
                "--default-pids-limit must be 1 to --max-pids-limit",
            ),
            (l.max_containers >= 1, "--max-containers must be at least 1"),
            (
                l.max_memory >= l.default_memory,
                "--max-memory must not be below --default-memory",
            ),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, why)) => Err((*why).to_owned()),
            None => Ok(l),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_checked_as_they_are_read() {
        let args = SpendArgs {
            min_healthcheck_interval: Some("-1s".into()),
            ..SpendArgs::default()
        };
        assert_eq!(
            args.spend(),
            Err(
                "--min-healthcheck-interval \"-1s\": expected a duration such as 1s, 500ms or 2m"
                    .into()
            )
        );
        // A negative interval that reads as a duration (a bare number of seconds) is refused by
        // the sign check, which "-1s" (no duration at all) never reached.
        let args = SpendArgs {
            min_healthcheck_interval: Some("-1".into()),
            ..SpendArgs::default()
        };
        assert_eq!(
            args.spend(),
            Err("--min-healthcheck-interval \"-1\": must not be negative".into())
        );
        let args = SpendArgs {
            max_stop_timeout: Some(-1),
            ..SpendArgs::default()
        };
        assert_eq!(
            args.spend(),
            Err("--max-stop-timeout -1: must not be negative".into())
        );
        assert_eq!(SpendArgs::default().spend(), Ok(Spend::default()));
    }
}
