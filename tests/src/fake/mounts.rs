//! A container's mounts as dockerd keeps them: the mount points its inspect and list entries
//! show (`Mounts`, from `HostConfig.Binds` and `HostConfig.Mounts`), the check a create's
//! `Mounts` entry of type `bind` gets (its source must exist: dockerd never makes one), the
//! list's `volume` filter (a volume's name, a bind's source or a destination), and an archive
//! upload into a bound directory, which lands in the host directory behind it (docker-29: the
//! fake has no other filesystem).

use std::path::{Component, Path, PathBuf};

use serde_json::{json, Map, Value};

/// Where dockerd keeps a local volume's data (shown as its `Source`).
const VOLUMES: &str = "/var/lib/docker/volumes";

/// `target` as dockerd cleans a destination.
fn clean(target: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in target.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The mount points of a container with `host` as its HostConfig, in the order given.
pub fn points(host: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for bind in host["Binds"].as_array().into_iter().flatten() {
        let Some(spec) = bind.as_str() else { continue };
        let mut parts = spec.splitn(3, ':');
        let (source, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let mode = parts.next().unwrap_or("");
        let rw = !mode.split(',').any(|m| m == "ro");
        out.push(if source.starts_with('/') {
            json!({ "Type": "bind", "Source": source, "Destination": clean(target),
                    "Mode": mode, "RW": rw, "Propagation": "rprivate" })
        } else {
            json!({ "Type": "volume", "Name": source, "Source": format!("{VOLUMES}/{source}/_data"),
                    "Destination": clean(target), "Driver": "local", "Mode": mode, "RW": rw,
                    "Propagation": "" })
        });
    }
    for m in host["Mounts"].as_array().into_iter().flatten() {
        let source = m["Source"].as_str().unwrap_or("");
        let target = clean(m["Target"].as_str().unwrap_or(""));
        let rw = !m["ReadOnly"].as_bool().unwrap_or(false);
        out.push(match m["Type"].as_str().unwrap_or("") {
            "bind" => {
                let propagation = m["BindOptions"]["Propagation"]
                    .as_str()
                    .filter(|p| !p.is_empty())
                    .unwrap_or("rprivate");
                json!({ "Type": "bind", "Source": source, "Destination": target, "Mode": "",
                        "RW": rw, "Propagation": propagation })
            }
            "volume" => json!({ "Type": "volume", "Name": source,
                                "Source": format!("{VOLUMES}/{source}/_data"),
                                "Destination": target, "Driver": "local", "Mode": "z", "RW": rw,
                                "Propagation": "" }),
            kind => json!({ "Type": kind, "Source": "", "Destination": target, "Mode": "",
                            "RW": rw, "Propagation": "" }),
        });
    }
    out
}

/// dockerd's refusal of a create whose `Mounts` entry of type `bind` names a source that does
/// not exist (`validateMountConfig`), checked on this machine's filesystem.
pub fn missing_bind_source(host: &Map<String, Value>) -> Option<String> {
    host.get("Mounts")?
        .as_array()?
        .iter()
        .filter(|m| m["Type"] == "bind")
        .filter_map(|m| m["Source"].as_str())
        .find(|s| std::fs::metadata(s).is_err())
        .map(|s| {
            format!("invalid mount config for type \"bind\": bind source path does not exist: {s}")
        })
}

/// The list's `volume` filter: a value matches a mount point's volume name, or a bind's
/// source, or any destination.
pub fn volume_matches(values: &[String], host: &Value) -> bool {
    points(host).iter().any(|p| {
        let key = p["Name"].as_str().or(p["Source"].as_str()).unwrap_or("");
        let dest = p["Destination"].as_str().unwrap_or("");
        values.iter().any(|v| v == key || v == dest)
    })
}

/// The host directory an archive upload to `path` in the container lands in: below the bind
/// mount whose destination holds it (the deepest), read-write; `None` elsewhere.
pub fn upload_dir(host: &Value, path: &str) -> Option<PathBuf> {
    let path = clean(path);
    points(host)
        .into_iter()
        .filter(|p| p["Type"] == "bind" && p["RW"] == true)
        .filter_map(|p| {
            let dest = p["Destination"].as_str()?.to_owned();
            let rest = Path::new(&path).strip_prefix(&dest).ok()?.to_owned();
            Some((dest.len(), PathBuf::from(p["Source"].as_str()?).join(rest)))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, dir)| dir)
}

/// Unpacks a tar stream into `dir` as the engine does for `PUT /archive`: directories, files
/// and symbolic links, each entry's path kept beneath `dir`. Nothing of an entry that is
/// already there is replaced by another kind (dockerd's `NoOverwriteDirNonDir`).
pub fn unpack(dir: &Path, tar: &[u8]) -> Result<(), String> {
    let mut at = 0;
    while at + 512 <= tar.len() {
        let head = &tar[at..at + 512];
        if head.iter().all(|b| *b == 0) {
            break;
        }
        let field = |from: usize, len: usize| {
            let raw = &head[from..from + len];
            let end = raw.iter().position(|b| *b == 0).unwrap_or(len);
            String::from_utf8_lossy(&raw[..end]).into_owned()
        };
        let name = field(0, 100);
        let size = usize::from_str_radix(field(124, 12).trim(), 8).map_err(|e| e.to_string())?;
        let kind = head[156];
        let link = field(157, 100);
        let rel = Path::new(name.trim_start_matches("./"));
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(format!("{name}: outside the destination"));
        }
        let target = dir.join(rel);
        // Never through a link an earlier entry (or anything else) left on the way.
        let mut on_way = dir.to_owned();
        for c in rel.parent().into_iter().flat_map(Path::components) {
            on_way.push(c);
            if std::fs::symlink_metadata(&on_way).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(format!("{name}: through a symbolic link"));
            }
        }
        let body = tar
            .get(at + 512..at + 512 + size)
            .ok_or_else(|| format!("{name}: truncated"))?;
        let exists = std::fs::symlink_metadata(&target).ok();
        match kind {
            b'5' => {
                if exists.as_ref().is_some_and(|m| !m.is_dir()) {
                    return Err(format!("{name}: not a directory"));
                }
                std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
            }
            b'2' => {
                if exists.as_ref().is_some_and(std::fs::Metadata::is_dir) {
                    return Err(format!(
                        "cannot overwrite directory {name} with non-directory"
                    ));
                }
                let _ = std::fs::remove_file(&target);
                std::os::unix::fs::symlink(&link, &target).map_err(|e| e.to_string())?;
            }
            b'0' | 0 => {
                if exists.as_ref().is_some_and(std::fs::Metadata::is_dir) {
                    return Err(format!(
                        "cannot overwrite directory {name} with non-directory"
                    ));
                }
                let _ = std::fs::remove_file(&target);
                std::fs::write(&target, body).map_err(|e| e.to_string())?;
            }
            other => {
                return Err(format!(
                    "{name}: entry type {} not unpacked here",
                    other as char
                ))
            }
        }
        at += 512 + size.div_ceil(512) * 512;
    }
    Ok(())
}
