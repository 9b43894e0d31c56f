//! Where in a container a path lands, read lexically as dockerd and runc clean it: the shared
//! rule of mounts, tmpfs targets and working directories (never at or under `/dev`, `/proc`,
//! `/sys`).

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::fields::{self, value_not_allowed, Reader};
use crate::refusal::Refusal;

/// Whether `p` is absolute and already clean, as dockerd compares mount destinations as strings
/// (a `/sys/` is not its `/sys`).
pub fn clean_absolute(p: &str) -> bool {
    let path = Path::new(p);
    let clean: PathBuf = path.components().collect();
    path.is_absolute()
        && clean.as_os_str() == path.as_os_str()
        && !path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
}

/// The components of absolute path `target` as `filepath.Clean` leaves them: `.`, `..` and
/// repeated or trailing `/` resolved (`..` stops at the root).
pub fn clean_components(target: &str) -> Vec<&str> {
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
    parts
}

/// The kernel file system a container path is at or under (`/dev`, `/proc`, `/sys`), read
/// lexically as the engine and runc clean it (`//`, `.` and `..` resolved, a trailing `/`
/// dropped).
pub fn kernel_fs(target: &str) -> Option<&'static str> {
    match clean_components(target).first() {
        Some(&"dev") => Some("/dev"),
        Some(&"proc") => Some("/proc"),
        Some(&"sys") => Some("/sys"),
        _ => None,
    }
}

/// A mount, volume or tmpfs target: never at or under `/dev`, `/proc` or `/sys` (a volume
/// there is the precondition of CVE-2025-31133 and CVE-2025-52565 on an older runc).
pub fn mount_target(op: &str, path: &str, target: &str) -> Result<(), Refusal> {
    match kernel_fs(target) {
        Some(fs) => Err(value_not_allowed(
            op,
            path,
            target,
            &format!("a mount target at or under {fs}; mounts stay out of /dev, /proc and /sys"),
        )),
        None => Ok(()),
    }
}

/// `WorkingDir` of a create or an exec: empty (the image's), or a clean absolute path outside
/// `/dev`, `/proc` and `/sys` (`/proc/self/fd/N` is CVE-2024-21626's way out of the container).
pub fn working_dir(r: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    let dir = fields::string(p, v)?;
    if dir.is_empty() {
        return Ok(Value::String(dir));
    }
    if !clean_absolute(&dir) {
        return Err(value_not_allowed(
            r.op(),
            p,
            &dir,
            "a working directory is a clean absolute path (no '..', '.', '//' or trailing '/')",
        ));
    }
    if let Some(fs) = kernel_fs(&dir) {
        return Err(value_not_allowed(
            r.op(),
            p,
            &dir,
            &format!("a working directory at or under {fs}; it stays out of /dev, /proc and /sys"),
        ));
    }
    Ok(Value::String(dir))
}
