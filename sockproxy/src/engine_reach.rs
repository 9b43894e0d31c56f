//! What the start-up notice says when the engine's socket does not answer: which of the three
//! usual causes it is (no socket, nothing listening, or a socket this process may not open) and
//! what to do about each. The text is decided by a pure function from what was found, so each
//! wording is tested byte for byte.

use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What was found at the engine's socket path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No file there.
    Missing,
    /// A socket nothing listens on.
    Refused,
    /// A socket this process may not open: its owner group and mode, and who this process is.
    Denied {
        group: String,
        mode: u32,
        uid: u32,
        groups: Vec<String>,
    },
    /// Another error, as the system said it.
    Other(String),
}

/// The notice for `found` at `path`; requests get 502 until the engine answers.
pub fn notice(path: &Path, found: &Found) -> String {
    let at = path.display();
    match found {
        Found::Missing => format!(
            "no Docker engine answers at unix://{at}: there is no socket there; start one (sudo systemctl start docker, or dockerd --host unix://{at}) or pass --upstream; requests get 502 until then"
        ),
        Found::Refused => format!(
            "no Docker engine answers at unix://{at}: nothing listens on the socket; start dockerd (sudo systemctl start docker) or pass --upstream; requests get 502 until then"
        ),
        Found::Denied {
            group,
            mode,
            uid,
            groups,
        } => format!(
            "permission denied on the engine's socket unix://{at} (group {group}, mode {mode:04o}): this process (uid {uid}, groups {}) is not in group {group}; add it (usermod -aG {group} USER, SupplementaryGroups={group} in the unit, or the group's number as DOCKER_GID in compose) and restart; requests get 502 until then",
            if groups.is_empty() {
                "none".to_owned()
            } else {
                groups.join(",")
            }
        ),
        Found::Other(why) => format!(
            "the engine's socket unix://{at} cannot be reached: {why}; requests get 502 until it can"
        ),
    }
}

/// What a failed connect to `path` means (I/O: reads the socket's owner and mode and this
/// process's groups).
pub fn found(path: &Path, e: &std::io::Error) -> Found {
    match e.kind() {
        ErrorKind::NotFound => Found::Missing,
        ErrorKind::ConnectionRefused => Found::Refused,
        ErrorKind::PermissionDenied => {
            let meta = std::fs::metadata(path).ok();
            let group = meta
                .as_ref()
                .map(|m| group_name(m.gid()))
                .unwrap_or_else(|| "unknown".to_owned());
            let mode = meta.as_ref().map_or(0, |m| m.mode() & 0o7777);
            let groups = nix::unistd::getgroups()
                .unwrap_or_default()
                .into_iter()
                .chain(std::iter::once(nix::unistd::getegid()))
                .map(|g| group_name(g.as_raw()))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            Found::Denied {
                group,
                mode,
                uid: nix::unistd::geteuid().as_raw(),
                groups,
            }
        }
        _ => Found::Other(e.to_string()),
    }
}

fn group_name(gid: u32) -> String {
    nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
        .ok()
        .flatten()
        .map_or_else(|| gid.to_string(), |g| g.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_says_what_to_do() {
        let p = Path::new("/var/run/docker.sock");
        assert_eq!(
            notice(p, &Found::Missing),
            "no Docker engine answers at unix:///var/run/docker.sock: there is no socket there; start one (sudo systemctl start docker, or dockerd --host unix:///var/run/docker.sock) or pass --upstream; requests get 502 until then"
        );
        assert_eq!(
            notice(p, &Found::Refused),
            "no Docker engine answers at unix:///var/run/docker.sock: nothing listens on the socket; start dockerd (sudo systemctl start docker) or pass --upstream; requests get 502 until then"
        );
        assert_eq!(
            notice(
                p,
                &Found::Denied {
                    group: "docker".into(),
                    mode: 0o660,
                    uid: 61234,
                    groups: vec!["deer-flow-gateway".into(), "nogroup".into()],
                }
            ),
            "permission denied on the engine's socket unix:///var/run/docker.sock (group docker, mode 0660): this process (uid 61234, groups deer-flow-gateway,nogroup) is not in group docker; add it (usermod -aG docker USER, SupplementaryGroups=docker in the unit, or the group's number as DOCKER_GID in compose) and restart; requests get 502 until then"
        );
        assert_eq!(
            notice(p, &Found::Other("Not a directory (os error 20)".into())),
            "the engine's socket unix:///var/run/docker.sock cannot be reached: Not a directory (os error 20); requests get 502 until it can"
        );
    }

    #[test]
    fn a_missing_and_a_refused_socket_are_told_apart() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("docker.sock");
        let e = std::os::unix::net::UnixStream::connect(&path).expect_err("no socket");
        assert_eq!(found(&path, &e), Found::Missing);
        drop(std::os::unix::net::UnixListener::bind(&path).expect("binds"));
        let e = std::os::unix::net::UnixStream::connect(&path).expect_err("nothing listens");
        assert_eq!(found(&path, &e), Found::Refused);
    }
}
