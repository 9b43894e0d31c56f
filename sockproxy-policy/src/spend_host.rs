//! The rest of what a stack may spend (issue 37, docs/architecture.md, "What a stack may spend"), field by field: log options of an
//! allowed driver (a `max-size` of its own overrides the operator's log limits), CPU and block
//! I/O weight, real-time CPU time, the pids limit, core-dump size; and where a container's
//! working directory and mounts may be (never `/dev`, `/proc`, `/sys` or below them, the
//! precondition of CVE-2024-21626 and CVE-2025-31133 on an older runc).

use serde_json::{Map, Value};

use crate::fields::{self, value_not_allowed, Reader};
use crate::refusal::Refusal;
use crate::spend::Spend;

/// Log options each built-in driver may be given without the operator's word: the file
/// drivers' size, count and compression, which bound what the engine writes. The options the
/// engine expands or copies into every line it writes (`tag`, a Go template dockerd runs;
/// `labels`, `labels-regex`, `env`, `env-regex`, which copy the container's own labels and
/// environment) are not among them for any driver: a 10 KB `tag` took dockerd to gigabytes
/// and turned a 2-byte line into hundreds of megabytes. `--allow-log-opt DRIVER:KEY` adds to
/// these; an allowed `tag` is still held to `tag_template`.
const LOG_OPTS: [(&str, &[&str]); 3] = [
    ("json-file", &["max-size", "max-file", "compress"]),
    ("local", &["max-size", "max-file", "compress"]),
    ("none", &[]),
];

/// What a `tag` may add to each log line, at most, with every placeholder at its longest.
pub const MAX_TAG_BYTES: usize = 256;

/// The placeholders a `tag` may hold, each with the most it expands to: dockerd's
/// `logger.Info` values that describe the container and nothing of the host (`{{.Hostname}}`
/// would print the host's name, `{{.Command}}` and the `Container*` fields are as long as the
/// stack makes them). `{{.Name}}` is bounded by `MAX_NAME_BYTES`.
const TAG_PLACEHOLDERS: [(&str, usize); 6] = [
    ("ID", 12),
    ("FullID", 64),
    ("Name", crate::policy::MAX_NAME_BYTES),
    ("ImageID", 12),
    ("ImageFullID", 71),
    ("DaemonName", 6),
];

/// The most `tag` adds to a line: literal text plus placeholders from `TAG_PLACEHOLDERS`
/// (`{{.ID}}`, or `{{ .ID }}`), with no function, pipeline, definition, width or range; `Err`
/// says what is not allowed.
pub fn tag_template(tag: &str) -> Result<usize, String> {
    let mut total = 0usize;
    let mut rest = tag;
    while let Some(open) = rest.find("{{") {
        total += literal(&rest[..open])?;
        let after = &rest[open + 2..];
        let close = after
            .find("}}")
            .ok_or_else(|| "an unclosed {{".to_owned())?;
        let action = after[..close].trim_matches(' ');
        let field = action.strip_prefix('.').unwrap_or("");
        let (_, most) = TAG_PLACEHOLDERS
            .iter()
            .find(|(name, _)| *name == field)
            .ok_or_else(|| {
                format!(
                    "{{{{{action}}}}} is not a placeholder a tag may hold (only {})",
                    TAG_PLACEHOLDERS
                        .iter()
                        .map(|(name, _)| format!("{{{{.{name}}}}}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
        total += most;
        rest = &after[close + 2..];
    }
    total += literal(rest)?;
    if total > MAX_TAG_BYTES {
        return Err(format!(
            "it may add up to {total} bytes to each log line; at most {MAX_TAG_BYTES}"
        ));
    }
    Ok(total)
}

/// Literal tag text: no braces outside a placeholder (the template parser would read them).
fn literal(text: &str) -> Result<usize, String> {
    if text.contains(['{', '}']) {
        return Err("a brace outside a placeholder".to_owned());
    }
    Ok(text.len())
}

fn bounded(r: &Reader, p: &str, n: i64, min: i64, max: i64, flag: &str) -> Result<i64, Refusal> {
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(value_not_allowed(
            r.op(),
            p,
            &n.to_string(),
            &format!("allowed: {min}..={max}; {flag}"),
        ))
    }
}

/// `CpuShares`: 0 (the engine's default weight) to `--max-cpu-shares`.
pub fn cpu_shares(spend: &Spend, r: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    let n = fields::int(p, &v)?;
    bounded(r, p, n, 0, spend.max_cpu_shares, "--max-cpu-shares").map(Value::from)
}

/// `BlkioWeight`: 0 (the default) to `--max-blkio-weight`.
pub fn blkio_weight(spend: &Spend, r: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    let n = fields::uint(p, &v)?;
    let max = i64::try_from(spend.max_blkio_weight).unwrap_or(i64::MAX);
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    bounded(r, p, n, 0, max, "--max-blkio-weight").map(Value::from)
}

/// `PidsLimit` from `least` (0 at create: "not set"; 1 at update, where 0 is "unlimited") to
/// `--max-pids-limit`.
pub fn pids_limit(
    spend: &Spend,
    least: i64,
    r: &Reader,
    p: &str,
    v: Value,
) -> Result<Value, Refusal> {
    let n = fields::int(p, &v)?;
    bounded(r, p, n, least, spend.max_pids_limit, "--max-pids-limit").map(Value::from)
}

/// One `Ulimits` entry's `Soft` or `Hard` once its `Name` is known: `core` from 0 to
/// `--max-core-ulimit` (-1, unlimited, is refused); other limits as given.
pub fn ulimit_value(
    spend: &Spend,
    name: &str,
    r: &Reader,
    p: &str,
    v: Value,
) -> Result<Value, Refusal> {
    let n = fields::int(p, &v)?;
    if name == "core" {
        bounded(r, p, n, 0, spend.max_core_ulimit, "--max-core-ulimit")?;
    }
    Ok(Value::from(n))
}

/// A size as dockerd's log drivers read `max-size` (go-units `RAMInBytes`: a decimal number,
/// an optional space, an optional binary unit `k`/`m`/`g`/`t`/`p` in either case, then an
/// optional `i` and `b`).
pub fn ram_in_bytes(raw: &str) -> Option<u64> {
    let num_len = raw
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'.')
        .count();
    let (num, rest) = raw.split_at(num_len);
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') {
        return None;
    }
    let value: f64 = num.parse().ok()?;
    let rest = rest.strip_prefix(' ').unwrap_or(rest).to_ascii_lowercase();
    let (unit, tail) = match rest.chars().next() {
        Some(c @ ('k' | 'm' | 'g' | 't' | 'p')) => (Some(c), &rest[1..]),
        _ => (None, rest.as_str()),
    };
    if !matches!(tail, "" | "b" | "i" | "ib") {
        return None;
    }
    let power = match unit {
        None => 0,
        Some('k') => 1,
        Some('m') => 2,
        Some('g') => 3,
        Some('t') => 4,
        _ => 5,
    };
    let bytes = value * 1024f64.powi(power);
    (bytes.is_finite() && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// `LogConfig.Config` of `driver` (already allowed): only the keys that driver may be given
/// (`LOG_OPTS`, `--allow-log-opt DRIVER:KEY`), `max-size` from 1 byte to `--max-log-size`,
/// `max-file` from 1 to `--max-log-files`.
pub fn log_options(
    spend: &Spend,
    op: &str,
    path: &str,
    driver: &str,
    config: &Map<String, Value>,
) -> Result<(), Refusal> {
    let builtin = LOG_OPTS
        .iter()
        .find(|(d, _)| *d == driver)
        .map_or(&[][..], |(_, keys)| *keys);
    for (key, value) in config {
        let at = format!("{path}.{key}");
        let named = spend
            .allow_log_opts
            .iter()
            .any(|o| o.split_once(':') == Some((driver, key.as_str())));
        if !builtin.contains(&key.as_str()) && !named {
            return Err(value_not_allowed(
                op,
                path,
                key,
                &format!(
                    "not an option {driver} may be given here; --allow-log-opt {driver}:{key}"
                ),
            ));
        }
        let value = value.as_str().unwrap_or_default();
        match key.as_str() {
            "tag" => {
                if let Err(why) = tag_template(value) {
                    return Err(value_not_allowed(
                        op,
                        &at,
                        &cut(value),
                        &format!("a tag is expanded at every log line: {why}"),
                    ));
                }
            }
            "max-size" => match ram_in_bytes(value) {
                Some(n) if (1..=spend.max_log_size).contains(&n) => {}
                _ => {
                    return Err(value_not_allowed(
                        op,
                        &at,
                        value,
                        &format!("allowed: 1 to {} bytes; --max-log-size", spend.max_log_size),
                    ))
                }
            },
            "max-file" => match value.parse::<u64>() {
                Ok(n) if (1..=spend.max_log_files).contains(&n) => {}
                _ => {
                    return Err(value_not_allowed(
                        op,
                        &at,
                        value,
                        &format!("allowed: 1..={}; --max-log-files", spend.max_log_files),
                    ))
                }
            },
            _ => {}
        }
    }
    Ok(())
}

/// A refused value as the refusal quotes it: at most 64 bytes of it.
fn cut(value: &str) -> String {
    const SHOWN: usize = 64;
    if value.len() <= SHOWN {
        return value.to_owned();
    }
    let mut end = SHOWN;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &value[..end], value.len())
}

#[cfg(test)]
#[path = "spend_host_tests.rs"]
mod tests;
