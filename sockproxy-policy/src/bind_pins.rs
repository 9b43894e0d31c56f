//! Pinned bind sources (no I/O): which host paths a checked create body binds (`sources`, the
//! facts a create still needs: `Need::BindPins`), and the body forwarded once the transport has
//! pinned each of them on a staging path (`rewrite`).
//!
//! dockerd resolves a bind source with `mount(2)` at every start and restart, long after the
//! check: a stack that can write above a checked directory could swap it for a link to `/`.
//! So the transport opens each source itself, beneath its bind root with no symbolic link
//! followed, bind-mounts what it opened onto a staging path only the proxy writes, and the
//! engine is sent the staging path: the kernel then mounts the directory that was checked,
//! whatever is renamed later. Every host-path bind is forwarded as a `HostConfig.Mounts` entry
//! of type `bind`, never as `Binds`: dockerd recreates a missing `Binds` source as an empty
//! directory at start (after a reboot, a lost staging mount), while a missing `Mounts` source
//! fails the start. Each pinned bind carries the path the client named in a label,
//! `sockproxy.bind.<target>`, so the operator finds it beside the staging path `docker inspect`
//! shows. An inherited bind would not keep its pin, so with bind roots a create may not name
//! `VolumesFrom` (`volumes_from`, read by `host_config`).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::create_rules::{CreateRules, Ctx};
use crate::fields::value_not_allowed;
use crate::mounts::clean_target;
use crate::refusal::Refusal;

/// Labels the proxy sets on a container with pinned binds: `sockproxy.bind.<target>` = the path
/// the client named. A client may not set one.
pub const BIND_LABEL_PREFIX: &str = "sockproxy.bind.";

const OP: &str = "containers.create";

/// One host path a checked body binds, to be pinned before the body is forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindSource {
    /// As the client named it (checked clean and absolute, under `root`).
    pub path: PathBuf,
    /// The bind root it is under: the deepest one, if roots nest.
    pub root: PathBuf,
    /// `path` below `root`; empty for the root itself.
    pub beneath: PathBuf,
    /// Where it lands in the container, cleaned as dockerd compares it.
    pub target: String,
    /// The field that named it (`HostConfig.Binds`, `HostConfig.Mounts[1].Source`), for a
    /// refusal's words.
    pub field: String,
}

/// Where a host-path bind sits in a checked body.
enum At<'a> {
    /// `HostConfig.Binds[i]`: `SOURCE:TARGET[:MODES]`.
    Bind {
        source: &'a str,
        target: &'a str,
        modes: &'a str,
    },
    /// `HostConfig.Mounts[i]` of type `bind`.
    Mount {
        i: usize,
        source: &'a str,
        target: &'a str,
    },
}

/// The host-path binds of a checked body, `Binds` first, each in order: the order `rewrite`
/// expects its pins in.
fn host_binds(body: &Value) -> Vec<At<'_>> {
    let host = body.get("HostConfig");
    let list = |key: &str| {
        host.and_then(|h| h.get(key))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    };
    let binds = list("Binds").filter_map(Value::as_str).filter_map(|b| {
        let mut parts = b.splitn(3, ':');
        let (source, target) = (parts.next()?, parts.next()?);
        source.starts_with('/').then_some(At::Bind {
            source,
            target,
            modes: parts.next().unwrap_or(""),
        })
    });
    let mounts = list("Mounts")
        .enumerate()
        .filter(|(_, m)| m.get("Type").and_then(Value::as_str) == Some("bind"))
        .map(|(i, m)| At::Mount {
            i,
            source: m.get("Source").and_then(Value::as_str).unwrap_or(""),
            target: m.get("Target").and_then(Value::as_str).unwrap_or(""),
        });
    binds.chain(mounts).collect()
}

/// The sources of a body `create_body::check` allowed, each with the bind root it is pinned
/// from. Refuses what a pinned bind cannot keep: SELinux relabelling (`z`, `Z`: a `Mounts`
/// entry has no such option, and a relabel would change the host directory's label) and
/// `nocopy` (a volume option dockerd refuses on a bind).
pub(crate) fn sources(body: &Value, rules: &CreateRules) -> Result<Vec<BindSource>, Refusal> {
    let mut out = Vec::new();
    for at in host_binds(body) {
        let (path, target, field) = match at {
            At::Bind {
                source,
                target,
                modes,
            } => {
                for m in modes.split(',') {
                    let why = match m {
                        "z" | "Z" => "SELinux relabelling is not kept for a pinned bind source",
                        "nocopy" => "nocopy is a volume option, not a bind's",
                        _ => continue,
                    };
                    let bind = format!("{source}:{target}:{modes}");
                    return Err(value_not_allowed(OP, "HostConfig.Binds", &bind, why));
                }
                (source, target, "HostConfig.Binds".to_owned())
            }
            At::Mount { i, source, target } => {
                (source, target, format!("HostConfig.Mounts[{i}].Source"))
            }
        };
        let path = PathBuf::from(path);
        let Some(root) = deepest_root(&path, &rules.bind_roots) else {
            // `mounts::bind_source` refused it already; here only as a guard.
            return Err(Refusal::Setting {
                op: OP.into(),
                why: format!("{} is not under an allowed bind root", path.display()),
            });
        };
        let beneath = path.strip_prefix(root).unwrap_or(Path::new("")).to_owned();
        out.push(BindSource {
            root: root.to_owned(),
            beneath,
            target: clean_target(target),
            path,
            field,
        });
    }
    Ok(out)
}

fn deepest_root<'a>(path: &Path, roots: &'a [PathBuf]) -> Option<&'a PathBuf> {
    roots
        .iter()
        .filter(|r| path.starts_with(r))
        .max_by_key(|r| r.components().count())
}

/// The body to forward: every host-path bind as a `Mounts` entry of type `bind` on its
/// staging path (read-only, propagation and consistency kept), volume entries left in
/// `Binds`, and a `sockproxy.bind.<target>` label per pin. `sources` are `sources(body)` and
/// `staging` the path each was pinned on, in the same order; anything else is refused rather
/// than forwarded unpinned.
pub(crate) fn rewrite(
    mut body: Value,
    sources: &[BindSource],
    staging: &[PathBuf],
) -> Result<Value, Refusal> {
    let found: Vec<(PathBuf, String)> = host_binds(&body)
        .into_iter()
        .map(|at| match at {
            At::Bind { source, target, .. } | At::Mount { source, target, .. } => {
                (source.into(), clean_target(target))
            }
        })
        .collect();
    let matches = found.len() == sources.len()
        && staging.len() == sources.len()
        && found
            .iter()
            .zip(sources)
            .all(|((path, target), s)| s.path == *path && s.target == *target);
    if !matches {
        return Err(Refusal::Upstream(
            "the pinned bind sources are not the body's: nothing was forwarded".into(),
        ));
    }
    let Some(host) = body.get_mut("HostConfig").and_then(Value::as_object_mut) else {
        return Ok(body);
    };
    let mut pins = staging.iter();
    let mut converted = Vec::new();
    if let Some(Value::Array(binds)) = host.get_mut("Binds") {
        binds.retain(|b| {
            let Some(spec) = b.as_str().filter(|s| s.starts_with('/')) else {
                return true;
            };
            if let Some(pin) = pins.next() {
                converted.push(bind_as_mount(spec, pin));
            }
            false
        });
        if binds.is_empty() {
            host.remove("Binds");
        }
    }
    if let Value::Array(list) = host
        .entry("Mounts")
        .or_insert_with(|| Value::Array(Vec::new()))
    {
        for m in list.iter_mut() {
            if m.get("Type").and_then(Value::as_str) != Some("bind") {
                continue;
            }
            if let Some(pin) = pins.next() {
                m["Source"] = Value::String(pin.display().to_string());
            }
        }
        list.extend(converted);
        if list.is_empty() {
            host.remove("Mounts");
        }
    }
    let labels = body.as_object_mut().map(|o| {
        o.entry("Labels")
            .or_insert_with(|| Value::Object(Map::new()))
    });
    if let Some(Value::Object(labels)) = labels {
        for s in sources {
            labels.insert(
                format!("{BIND_LABEL_PREFIX}{}", s.target),
                Value::String(s.path.display().to_string()),
            );
        }
    }
    Ok(body)
}

/// A checked `Binds` entry (`SOURCE:TARGET[:MODES]`, modes from `mounts::BIND_MODES` less the
/// ones `sources` refuses) as the `Mounts` entry dockerd reads the same way.
fn bind_as_mount(spec: &str, staging: &Path) -> Value {
    let mut parts = spec.splitn(3, ':');
    let _source = parts.next();
    let target = parts.next().unwrap_or("");
    let mut m = Map::new();
    m.insert("Type".into(), "bind".into());
    m.insert(
        "Source".into(),
        Value::String(staging.display().to_string()),
    );
    m.insert("Target".into(), target.into());
    for mode in parts.next().unwrap_or("").split(',') {
        match mode {
            "ro" => {
                m.insert("ReadOnly".into(), true.into());
            }
            "consistent" | "cached" | "delegated" => {
                m.insert("Consistency".into(), mode.into());
            }
            "private" | "rprivate" | "slave" | "rslave" => {
                m.insert(
                    "BindOptions".into(),
                    serde_json::json!({ "Propagation": mode }),
                );
            }
            // `rw` is the default; `z`, `Z` and `nocopy` were refused by `sources`.
            _ => {}
        }
    }
    Value::Object(m)
}

/// With `--allow-bind-root`, no `VolumesFrom`: the copy of a pinned bind that dockerd (20.10)
/// makes for the inheriting container loses what makes a missing `Mounts` source fail the
/// start, so once the pin is gone (a reboot) the engine would recreate the staging path as an
/// empty directory and start the sandbox on it (docs/security-model.md).
pub(crate) fn volumes_from(ctx: &Ctx, path: &str, list: &Value) -> Result<(), Refusal> {
    let named = list.as_array().is_some_and(|l| !l.is_empty());
    if named && !ctx.rules.bind_roots.is_empty() {
        return Err(Refusal::Setting {
            op: ctx.op.to_owned(),
            why: format!(
                "{path} is not allowed with --allow-bind-root (an inherited bind would lose its pin); name the volumes or binds in this container"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "bind_pins_tests.rs"]
mod tests;
