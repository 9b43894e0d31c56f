//! What a container may mount (`HostConfig.Binds`, `HostConfig.Mounts`): host paths only from
//! beneath an allowed bind root, checked on the proxy's own view of the filesystem with no
//! symbolic link in any component; named volumes only with the stack's prefix (the stack lists
//! and removes them as its own); no anonymous volume (the stack could neither list nor remove
//! it, so each would outlive its sandbox on the host); tmpfs at clean paths with plain tmpfs
//! options (`HostConfig.Tmpfs`, `TmpfsOptions.Options`). The engine's socket is never mountable.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::create_rules::{Ctx, HostPaths};
use crate::fields::{self, value_not_allowed, Reader};
use crate::paths::{clean_absolute, clean_components};
use crate::refusal::Refusal;

/// Bind options dockerd's Linux parser accepts that do not reach beyond the container:
/// access mode, SELinux relabel, no-copy, consistency, and propagation that does not flow back
/// to the host (`shared`/`rshared` would).
const BIND_MODES: [&str; 12] = [
    "ro",
    "rw",
    "z",
    "Z",
    "nocopy",
    "private",
    "rprivate",
    "slave",
    "rslave",
    "consistent",
    "cached",
    "delegated",
];

const PROPAGATIONS: [&str; 5] = ["", "private", "rprivate", "slave", "rslave"];

/// Flags a tmpfs may carry. dockerd hands any mount flag it knows to the runtime, including
/// `remount`, `bind` and `shared`: `remount` on `/sys/` (a path the engine does not see as its
/// own `/sys`) turned the container's read-only sysfs writable.
const TMPFS_FLAGS: [&str; 10] = [
    "ro",
    "rw",
    "exec",
    "noexec",
    "nosuid",
    "nodev",
    "noatime",
    "relatime",
    "tmpcopyup",
    "notmpcopyup",
];

/// `key=value` options of the tmpfs filesystem itself.
const TMPFS_KEYS: [&str; 6] = ["size", "mode", "uid", "gid", "nr_inodes", "nr_blocks"];

/// Whether one tmpfs option (`flag` or `key=value`) is one a stack may use.
fn tmpfs_option_ok(option: &str) -> bool {
    match option.split_once('=') {
        Some((key, value)) => TMPFS_KEYS.contains(&key) && !value.is_empty(),
        None => TMPFS_FLAGS.contains(&option),
    }
}

/// `HostConfig.Tmpfs`: destination → comma-separated options.
pub fn tmpfs(ctx: &Ctx, path: &str, v: Value) -> Result<Value, Refusal> {
    let m = fields::str_map(path, v)?;
    for (dest, opts) in &m {
        let at = format!("{path}.{dest}");
        if !clean_absolute(dest) {
            return Err(Refusal::Setting {
                op: ctx.op.to_owned(),
                why: format!(
                    "{at} is not a clean absolute path (no '..', '.', '//' or trailing '/')"
                ),
            });
        }
        let opts = opts.as_str().unwrap_or_default();
        if opts.is_empty() {
            continue;
        }
        if let Some(bad) = opts.split(',').find(|o| !tmpfs_option_ok(o)) {
            return Err(value_not_allowed(ctx.op, &at, bad, ""));
        }
    }
    for dest in m.keys() {
        crate::paths::mount_target(ctx.op, path, dest)?;
    }
    Ok(Value::Object(m))
}

/// Checks a host path that would be bound into a container.
pub fn bind_source(ctx: &Ctx, path: &str, source: &str) -> Result<(), Refusal> {
    let refuse = |why: &str| Refusal::Setting {
        op: ctx.op.to_owned(),
        why: format!("{path} {source} {why}"),
    };
    let p = Path::new(source);
    if !p.is_absolute() {
        return Err(refuse("is not an absolute path"));
    }
    // dockerd cleans the path; a source that is not already clean could be read two ways.
    if !clean_absolute(source) {
        return Err(refuse(
            "is not a clean path (no '..', '.', '//' or trailing '/')",
        ));
    }
    let sockets = [
        ctx.engine_socket,
        Path::new("/var/run/docker.sock"),
        Path::new("/run/docker.sock"),
    ];
    if sockets.iter().any(|s| p.starts_with(s)) {
        return Err(refuse("is the engine's socket"));
    }
    // `Path::starts_with` compares whole components: /srv/a does not admit /srv/ab.
    if !ctx.rules.bind_roots.iter().any(|root| p.starts_with(root)) {
        return Err(refuse(
            "is not under an allowed bind root (--allow-bind-root)",
        ));
    }
    no_symlinks(ctx.host, p).map_err(|why| refuse(&why))
}

/// Walks `path` from `/`, one component at a time without following links: every component
/// must exist and none may be a symbolic link (a sandbox that can write beneath a bind root
/// could otherwise plant `escape -> /` and have it bound). The remaining window between this
/// walk and the engine's own mount is documented in deploy/README.md.
fn no_symlinks(host: &dyn HostPaths, path: &Path) -> Result<(), String> {
    let mut at = PathBuf::from("/");
    for c in path.components().skip(1) {
        at.push(c);
        let link = host.is_symlink(&at).map_err(|e| {
            format!(
                "cannot be checked on the proxy's view ({}: {e})",
                at.display()
            )
        })?;
        if link {
            return Err(format!(
                "goes through a symbolic link ({}), which is not allowed",
                at.display()
            ));
        }
    }
    Ok(())
}

/// A named volume is the stack's when its name carries the stack prefix. Under
/// `--require-stack-label` a name is not enough, and a volume a create makes on the way has no
/// labels to check, so no named volume may be used at all (binds, tmpfs and anonymous volumes
/// still may).
fn volume_name(ctx: &Ctx, path: &str, name: &str) -> Result<(), Refusal> {
    if ctx.rules.require_stack_label {
        return Err(Refusal::Setting {
            op: ctx.op.to_owned(),
            why: format!(
                "{path} names volume {name}, which --require-stack-label does not allow (a volume carries no stack label)"
            ),
        });
    }
    if name.starts_with(ctx.scope.prefix().as_str()) {
        Ok(())
    } else {
        Err(value_not_allowed(
            ctx.op,
            path,
            name,
            "a named volume must start with the stack's prefix",
        ))
    }
}

/// `HostConfig.Binds`: `SOURCE:TARGET[:MODES]`, a host path or a named volume.
pub fn binds(ctx: &Ctx, path: &str, v: Value) -> Result<Value, Refusal> {
    let list = fields::str_list(path, v)?;
    for bind in &list {
        let parts: Vec<&str> = bind.split(':').collect();
        let (source, target, modes) = match parts.as_slice() {
            [s, t] => (*s, *t, ""),
            [s, t, m] => (*s, *t, *m),
            _ => {
                return Err(value_not_allowed(
                    ctx.op,
                    path,
                    bind,
                    "expected SOURCE:TARGET[:MODES]",
                ))
            }
        };
        for m in modes.split(',').filter(|m| !m.is_empty()) {
            if !BIND_MODES.contains(&m) {
                return Err(value_not_allowed(ctx.op, path, bind, &format!("mode {m}")));
            }
        }
        if source.starts_with('/') {
            bind_source(ctx, path, source)?;
        } else {
            volume_name(ctx, path, source)?;
        }
        crate::paths::mount_target(ctx.op, path, target)?;
    }
    Ok(Value::from(list))
}

/// `HostConfig.Mounts`: bind (as binds), volume (the stack's named ones, local driver, no
/// driver options) and tmpfs; every other type is refused.
pub fn mounts(ctx: &Ctx, path: &str, v: Value) -> Result<Value, Refusal> {
    let Value::Array(list) = v else {
        return Err(Refusal::BadRequest(format!("{path} must be a list")));
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.into_iter().enumerate() {
        let at = format!("{path}[{i}]");
        let mut r = Reader::new(ctx.op, &at, m)?;
        let mut o = Map::new();
        let kind = r
            .take("Type")
            .map(|t| fields::string(&r.path("Type"), t))
            .transpose()?
            .unwrap_or_default();
        o.insert("Type".into(), Value::String(kind.clone()));
        let source = r
            .take("Source")
            .map(|s| fields::string(&r.path("Source"), s))
            .transpose()?
            .unwrap_or_default();
        r.keep(&mut o, "Target", fields::any_string)?;
        r.keep(&mut o, "ReadOnly", fields::any_bool)?;
        r.keep(&mut o, "Consistency", fields::any_string)?;
        match kind.as_str() {
            "bind" => {
                bind_source(ctx, &r.path("Source"), &source)?;
                r.keep(&mut o, "BindOptions", bind_options)?;
                r.zero_kept(&mut o, &["VolumeOptions", "TmpfsOptions"])?;
            }
            "volume" => {
                if source.is_empty() {
                    let target = o.get("Target").and_then(Value::as_str).unwrap_or_default();
                    return Err(anonymous(ctx.op, &format!("{at}.Target"), target));
                }
                volume_name(ctx, &r.path("Source"), &source)?;
                r.keep(&mut o, "VolumeOptions", volume_options)?;
                r.zero_kept(&mut o, &["BindOptions", "TmpfsOptions"])?;
            }
            "tmpfs" => {
                if !source.is_empty() {
                    return Err(r.not_allowed("Source"));
                }
                r.keep(&mut o, "TmpfsOptions", tmpfs_options)?;
                r.zero_kept(&mut o, &["BindOptions", "VolumeOptions"])?;
            }
            other => {
                return Err(value_not_allowed(ctx.op, &r.path("Type"), other, ""));
            }
        }
        if !source.is_empty() {
            o.insert("Source".into(), Value::String(source));
        }
        r.finish()?;
        let target = o.get("Target").and_then(Value::as_str).unwrap_or_default();
        crate::paths::mount_target(ctx.op, &format!("{at}.Target"), target)?;
        out.push(Value::Object(o));
    }
    Ok(Value::Array(out))
}

fn bind_options(parent: &Reader, path: &str, v: Value) -> Result<Value, Refusal> {
    let mut r = Reader::new(parent.op(), path, v)?;
    let mut o = Map::new();
    r.keep(&mut o, "Propagation", fields::one_of(&PROPAGATIONS))?;
    r.keep(&mut o, "NonRecursive", fields::any_bool)?;
    r.keep(&mut o, "ReadOnlyNonRecursive", fields::any_bool)?;
    r.keep(&mut o, "ReadOnlyForceRecursive", fields::any_bool)?;
    // Creating a missing host path would create it where the check found nothing.
    r.keep(&mut o, "CreateMountpoint", fields::false_only)?;
    r.finish()?;
    Ok(Value::Object(o))
}

fn volume_options(parent: &Reader, path: &str, v: Value) -> Result<Value, Refusal> {
    let mut r = Reader::new(parent.op(), path, v)?;
    let mut o = Map::new();
    r.keep(&mut o, "NoCopy", fields::any_bool)?;
    r.keep(&mut o, "Labels", |r, p, v| {
        let labels = fields::any_str_map(r, p, v)?;
        if let Value::Object(m) = &labels {
            crate::deployment::no_compose_label(r.op(), p, m.keys())?;
        }
        Ok(labels)
    })?;
    r.keep(&mut o, "Subpath", fields::any_string)?;
    // A driver or driver options can bind any host device or path (`local` with `o=bind`).
    if let Some(d) = r.take("DriverConfig") {
        let mut dr = Reader::new(parent.op(), &r.path("DriverConfig"), d)?;
        let mut dc = Map::new();
        dr.keep(&mut dc, "Name", fields::one_of(&["", "local"]))?;
        dr.zero_kept(&mut dc, &["Options"])?;
        dr.finish()?;
        o.insert("DriverConfig".into(), Value::Object(dc));
    }
    r.finish()?;
    Ok(Value::Object(o))
}

fn tmpfs_options(parent: &Reader, path: &str, v: Value) -> Result<Value, Refusal> {
    let mut r = Reader::new(parent.op(), path, v)?;
    let mut o = Map::new();
    r.keep(&mut o, "SizeBytes", fields::any_int)?;
    r.keep(&mut o, "Mode", fields::any_uint)?;
    // `[["flag"], ["key", "value"]]`, held to the same options as `HostConfig.Tmpfs`.
    r.keep(&mut o, "Options", |r, p, v| match v {
        Value::Array(opts) => opts
            .into_iter()
            .map(|o| {
                let pair = fields::str_list(p, o)?;
                let option = match pair.as_slice() {
                    [flag] => flag.clone(),
                    // A comma would start another option when the pair is joined for mount(2).
                    [_, value] if value.contains(',') => {
                        return Err(value_not_allowed(r.op(), p, value, ""))
                    }
                    [key, value] => format!("{key}={value}"),
                    _ => {
                        return Err(Refusal::BadRequest(format!(
                            "{p} entries are [flag] or [key, value]"
                        )))
                    }
                };
                if tmpfs_option_ok(&option) {
                    Ok(Value::from(pair))
                } else {
                    Err(value_not_allowed(r.op(), p, &option, ""))
                }
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        _ => Err(Refusal::BadRequest(format!("{p} must be a list"))),
    })?;
    r.finish()?;
    Ok(Value::Object(o))
}

/// The refusal of an anonymous volume at `target`. Nothing allows one: the engine names it by a
/// random ID that carries no prefix and no label, so the stack could never list or remove it.
fn anonymous(op: &str, path: &str, target: &str) -> Refusal {
    value_not_allowed(
        op,
        path,
        target,
        "an anonymous volume, which the stack could not list or remove; no flag allows one: \
         name a volume that starts with the stack's prefix, or use a tmpfs",
    )
}

/// `target` as dockerd compares mount destinations (`filepath.Clean`).
pub(crate) fn clean_target(target: &str) -> String {
    format!("/{}", clean_components(target).join("/"))
}

/// A checked create body's `Volumes` (config): dockerd makes an anonymous volume for each path
/// no bind or mount of `HostConfig` covers (docker-py lists its binds' targets there; the docker
/// CLI puts `-v /path` there), so each path must be the target of a `Binds` or `Mounts` entry.
pub fn no_anonymous_volumes(op: &str, out: &Map<String, Value>) -> Result<(), Refusal> {
    let Some(paths) = out.get("Volumes").and_then(Value::as_object) else {
        return Ok(());
    };
    let host = out.get("HostConfig");
    let list = |key: &str| {
        host.and_then(|h| h.get(key))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    };
    let binds = list("Binds")
        .filter_map(Value::as_str)
        .filter_map(|b| b.split(':').nth(1));
    let mounts = list("Mounts").filter_map(|m| m.get("Target").and_then(Value::as_str));
    let covered: Vec<String> = binds.chain(mounts).map(clean_target).collect();
    match paths.keys().find(|p| !covered.contains(&clean_target(p))) {
        Some(p) => Err(anonymous(op, "Volumes", p)),
        None => Ok(()),
    }
}
