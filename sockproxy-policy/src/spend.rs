//! What a stack may make the engine spend outside the sandbox's cgroup (docs/architecture.md, "What a stack may spend"): operator
//! bounds with safe defaults, and the pure rules that apply them. A healthcheck runs one
//! `runc exec` per interval in the engine; a published port starts one `docker-proxy` process
//! on the host; a stop timeout of -1 makes `docker stop` wait forever; a body with many keys
//! costs the proxy's own CPU. Each refusal names the field and the flag that would allow it.

use serde_json::{Map, Value};

use crate::fields::{self, value_not_allowed, Reader};
use crate::refusal::Refusal;

/// `--min-healthcheck-interval`'s default: 1 s, in nanoseconds (Go's `time.Duration`).
pub const DEFAULT_MIN_HEALTHCHECK_INTERVAL_NS: i64 = 1_000_000_000;
/// `--max-healthcheck-retries`'s default.
pub const DEFAULT_MAX_HEALTHCHECK_RETRIES: i64 = 100;
/// `--max-stop-timeout`'s default, in seconds.
pub const DEFAULT_MAX_STOP_TIMEOUT: i64 = 300;
/// `--max-port-bindings`'s default.
pub const DEFAULT_MAX_PORT_BINDINGS: usize = 4;
/// `--min-host-port`'s default: the first port an unprivileged host service can hold.
pub const DEFAULT_MIN_HOST_PORT: u16 = 1024;

/// The operator's bounds on what one request may make the engine (or the proxy) spend.
/// `--max-cpu-shares`'s default: the engine's default weight (a stack may lower its share,
/// not raise it above another stack's).
pub const DEFAULT_MAX_CPU_SHARES: i64 = 1024;
/// `--max-blkio-weight`'s default: the engine's default block I/O weight.
pub const DEFAULT_MAX_BLKIO_WEIGHT: u64 = 500;
/// `--max-pids-limit`'s default.
pub const DEFAULT_MAX_PIDS_LIMIT: i64 = 32_768;
/// `--max-core-ulimit`'s default: no core dumps (each one is written into the container's
/// writable layer, on the host's disk).
pub const DEFAULT_MAX_CORE_ULIMIT: i64 = 0;
/// `--max-log-size`'s default: 100 MiB a log file.
pub const DEFAULT_MAX_LOG_SIZE: u64 = 100 << 20;
/// `--max-log-files`'s default.
pub const DEFAULT_MAX_LOG_FILES: u64 = 5;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spend {
    /// Object keys a request body may hold, at every depth (`--max-json-keys`).
    pub max_json_keys: usize,
    /// Shortest healthcheck interval, timeout, start period and start interval, in
    /// nanoseconds; 0 (the engine's default) is always allowed (`--min-healthcheck-interval`).
    pub min_healthcheck_interval_ns: i64,
    /// Largest `Healthcheck.Retries` (`--max-healthcheck-retries`).
    pub max_healthcheck_retries: i64,
    /// Largest `StopTimeout` and stop/restart `t`, in seconds (`--max-stop-timeout`).
    pub max_stop_timeout: i64,
    /// Host ports one container may publish (`--max-port-bindings`).
    pub max_port_bindings: usize,
    /// Lowest host port a binding may name; 0 or empty (the engine picks) is always allowed
    /// (`--min-host-port`).
    pub min_host_port: u16,
    /// Host ports below `min_host_port` a binding may name all the same (`--allow-host-port`).
    pub allow_host_ports: Vec<u16>,
    /// Largest `CpuShares`, create and update (`--max-cpu-shares`).
    pub max_cpu_shares: i64,
    /// Largest `BlkioWeight`, create and update (`--max-blkio-weight`).
    pub max_blkio_weight: u64,
    /// Largest `PidsLimit`, create and update (`--max-pids-limit`).
    pub max_pids_limit: i64,
    /// Largest `core` ulimit, soft and hard, in bytes (`--max-core-ulimit`).
    pub max_core_ulimit: i64,
    /// Largest log `max-size`, in bytes (`--max-log-size`).
    pub max_log_size: u64,
    /// Largest log `max-file` (`--max-log-files`).
    pub max_log_files: u64,
    /// `DRIVER:KEY` log options allowed beyond the built-in ones (`--allow-log-opt`).
    pub allow_log_opts: Vec<String>,
    /// Each container's memory, CPU and pids defaults and bounds, and the stack's totals.
    pub limits: crate::limits::Limits,
}

impl Default for Spend {
    fn default() -> Self {
        Self {
            max_json_keys: crate::json::DEFAULT_MAX_JSON_KEYS,
            min_healthcheck_interval_ns: DEFAULT_MIN_HEALTHCHECK_INTERVAL_NS,
            max_healthcheck_retries: DEFAULT_MAX_HEALTHCHECK_RETRIES,
            max_stop_timeout: DEFAULT_MAX_STOP_TIMEOUT,
            max_port_bindings: DEFAULT_MAX_PORT_BINDINGS,
            min_host_port: DEFAULT_MIN_HOST_PORT,
            allow_host_ports: vec![],
            max_cpu_shares: DEFAULT_MAX_CPU_SHARES,
            max_blkio_weight: DEFAULT_MAX_BLKIO_WEIGHT,
            max_pids_limit: DEFAULT_MAX_PIDS_LIMIT,
            max_core_ulimit: DEFAULT_MAX_CORE_ULIMIT,
            max_log_size: DEFAULT_MAX_LOG_SIZE,
            max_log_files: DEFAULT_MAX_LOG_FILES,
            allow_log_opts: vec![],
            limits: crate::limits::Limits::default(),
        }
    }
}

/// A duration flag as Go writes one (`1s`, `500ms`, `1m30s`, `2h`) or a bare number of seconds,
/// in nanoseconds.
pub fn parse_duration(raw: &str) -> Result<i64, String> {
    let bad = || format!("{raw:?}: expected a duration such as 1s, 500ms or 2m");
    if let Ok(secs) = raw.parse::<i64>() {
        return secs.checked_mul(1_000_000_000).ok_or_else(bad);
    }
    let mut rest = raw;
    let mut total: i64 = 0;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let n: i64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(|b| !b.is_ascii_digit()).count();
        let scale: i64 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = n
            .checked_mul(scale)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

/// A duration in nanoseconds as Go prints it, for refusals and `--print-policy`.
pub fn show_duration(ns: i64) -> String {
    match ns {
        0 => "0s".into(),
        n if n % 1_000_000_000 == 0 => format!("{}s", n / 1_000_000_000),
        n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

/// `Healthcheck`: every duration 0 (the engine's default) or at least the operator's minimum,
/// `Retries` from 0 to the operator's maximum. dockerd reads the durations as Go
/// `time.Duration`, nanoseconds in JSON; `StartInterval` is read from API 1.44 on (an older
/// engine ignores it, and it is bounded all the same).
pub fn healthcheck(spend: &Spend, parent: &Reader, path: &str, v: Value) -> Result<Value, Refusal> {
    let mut r = Reader::new(parent.op(), path, v)?;
    let mut o = Map::new();
    r.keep(&mut o, "Test", fields::any_str_list)?;
    let min = spend.min_healthcheck_interval_ns;
    for f in ["Interval", "Timeout", "StartPeriod", "StartInterval"] {
        r.keep(&mut o, f, |r, p, v| {
            let n = fields::int(p, &v)?;
            if n == 0 || n >= min {
                Ok(Value::from(n))
            } else {
                Err(value_not_allowed(
                    r.op(),
                    p,
                    &show_duration(n),
                    &format!(
                        "0 or at least {}; --min-healthcheck-interval",
                        show_duration(min)
                    ),
                ))
            }
        })?;
    }
    r.keep(&mut o, "Retries", |r, p, v| {
        let n = fields::int(p, &v)?;
        let max = spend.max_healthcheck_retries;
        if (0..=max).contains(&n) {
            Ok(Value::from(n))
        } else {
            Err(value_not_allowed(
                r.op(),
                p,
                &n.to_string(),
                &format!("allowed: 0..={max}; --max-healthcheck-retries"),
            ))
        }
    })?;
    r.finish()?;
    Ok(Value::Object(o))
}

/// `StopTimeout` (seconds, a Go `*int`): 0 to the operator's maximum. -1 would make a stop wait
/// for the process forever, the engine's own work with it.
pub fn stop_timeout(spend: &Spend, r: &Reader, path: &str, v: Value) -> Result<Value, Refusal> {
    let n = fields::int(path, &v)?;
    check_stop_timeout(spend, r.op(), path, n).map(|()| Value::from(n))
}

fn check_stop_timeout(spend: &Spend, op: &str, what: &str, n: i64) -> Result<(), Refusal> {
    let max = spend.max_stop_timeout;
    if (0..=max).contains(&n) {
        Ok(())
    } else {
        Err(value_not_allowed(
            op,
            what,
            &n.to_string(),
            &format!("allowed: 0..={max}; --max-stop-timeout"),
        ))
    }
}

/// Signals whose default action ends a process, by number (Linux), with the names dockerd's
/// `signal.ParseSignal` reads for them. A stop signal that does not end the process
/// (`SIGCONT`, `SIGSTOP`, `SIGCHLD`, `SIGWINCH`…) leaves every stop to the timeout.
const STOP_SIGNALS: [(u32, &[&str]); 12] = [
    (1, &["HUP"]),
    (2, &["INT"]),
    (3, &["QUIT"]),
    (6, &["ABRT", "IOT"]),
    (9, &["KILL"]),
    (10, &["USR1"]),
    (12, &["USR2"]),
    (13, &["PIPE"]),
    (14, &["ALRM"]),
    (15, &["TERM"]),
    (24, &["XCPU"]),
    (26, &["VTALRM"]),
];

/// Whether `raw` names a signal that ends a process, read as dockerd's `signal.ParseSignal`
/// reads it: a decimal number, or a name in any case with or without `SIG`. Empty is the
/// engine's default, `SIGTERM`.
pub fn ends_a_process(raw: &str) -> bool {
    if raw.is_empty() {
        return true;
    }
    if raw.bytes().all(|b| b.is_ascii_digit()) {
        return raw
            .parse::<u32>()
            .is_ok_and(|n| STOP_SIGNALS.iter().any(|(num, _)| *num == n));
    }
    let upper = raw.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    STOP_SIGNALS.iter().any(|(_, names)| names.contains(&name))
}

/// `StopSignal` (create) and stop/restart's `signal` query.
pub fn stop_signal(r: &Reader, path: &str, v: Value) -> Result<Value, Refusal> {
    let s = fields::string(path, v)?;
    check_stop_signal(r.op(), path, &s).map(|()| Value::String(s))
}

fn check_stop_signal(op: &str, what: &str, s: &str) -> Result<(), Refusal> {
    if ends_a_process(s) {
        Ok(())
    } else {
        Err(value_not_allowed(
            op,
            what,
            s,
            "a stop signal must end the process: HUP, INT, QUIT, ABRT, KILL, USR1, USR2, PIPE, ALRM, TERM, XCPU, VTALRM",
        ))
    }
}

/// `POST /containers/{id}/stop` and `/restart`: `t` (seconds; dockerd's `strconv.Atoi`, -1
/// waits forever) within `--max-stop-timeout`, `signal` one that ends a process.
pub fn stop_query(spend: &Spend, op: &str, query: &crate::canon::Query) -> Result<(), Refusal> {
    if let Some(t) = query.get("t").filter(|t| !t.is_empty()) {
        match t.parse::<i64>() {
            Ok(n) => check_stop_timeout(spend, op, "query parameter t", n)?,
            Err(_) => {
                return Err(Refusal::BadRequest(format!(
                    "{op}: query parameter t {t:?} is not a number of seconds"
                )))
            }
        }
    }
    if let Some(s) = query.get("signal") {
        check_stop_signal(op, "query parameter signal", s)?;
    }
    Ok(())
}

/// The query rules of an allowed plan: stop and restart's (`stop_query`), and a list's
/// filters, which must be ones the proxy can read, with a bounded number of `name` values
/// (`list_query::read_filters`), before anything is asked of the engine.
pub fn plan_query(
    spend: &Spend,
    plan: &crate::policy::Route,
    op: &str,
    query: &crate::canon::Query,
) -> Result<(), Refusal> {
    use crate::api::ContainerOp;
    use crate::policy::Route;
    match plan {
        Route::Container {
            op: ContainerOp::Stop | ContainerOp::Restart,
            ..
        } => stop_query(spend, op, query),
        Route::List(_) | Route::VolumeList => {
            crate::list_query::read_filters(query.get("filters")).map(drop)
        }
        _ => Ok(()),
    }
}

/// The host port a binding asks for, as dockerd reads `HostPort` (`nat.ParsePortRange`: a port
/// or a range `LOW-HIGH`); empty is "the engine picks".
fn host_ports(raw: &str) -> Option<(u16, u16)> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Some((0, 0));
    }
    let (lo, hi) = raw.split_once('-').unwrap_or((raw, raw));
    let lo: u16 = lo.parse().ok()?;
    let hi: u16 = hi.parse().ok()?;
    (lo <= hi).then_some((lo, hi))
}

/// `PortBindings` after the per-binding checks: at most `--max-port-bindings` bindings in all,
/// none on a host port below `--min-host-port` unless `--allow-host-port` names it. A range
/// `LOW-HIGH` is one binding to the engine (it takes one free port of it), so every port of it
/// below the floor must be named.
pub fn port_bindings(
    spend: &Spend,
    op: &str,
    path: &str,
    out: &Map<String, Value>,
) -> Result<(), Refusal> {
    let mut count = 0usize;
    for (port, list) in out {
        let at = format!("{path}.{port}");
        for b in list.as_array().into_iter().flatten() {
            count += 1;
            let raw = b.get("HostPort").and_then(Value::as_str).unwrap_or("");
            let Some((lo, hi)) = host_ports(raw) else {
                return Err(Refusal::BadRequest(format!(
                    "{at}: HostPort {raw:?} is not a port or a port range"
                )));
            };
            // The engine may take any free port of a range: each one below the floor must be
            // named, not only the range's low end.
            let below_unnamed = (lo.max(1)..=hi.min(spend.min_host_port.saturating_sub(1)))
                .any(|p| !spend.allow_host_ports.contains(&p));
            if lo != 0 && below_unnamed {
                return Err(value_not_allowed(
                    op,
                    &format!("{at}.HostPort"),
                    raw,
                    &format!(
                        "host ports below {} only when named; --min-host-port, --allow-host-port",
                        spend.min_host_port
                    ),
                ));
            }
        }
    }
    if count > spend.max_port_bindings {
        return Err(Refusal::Setting {
            op: op.to_owned(),
            why: format!(
                "{path} publishes {count} host ports, more than this stack may (at most {}; --max-port-bindings)",
                spend.max_port_bindings
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "spend_tests.rs"]
pub(crate) mod tests;
