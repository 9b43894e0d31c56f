//! The pin directory (`--pin-dir`), where pinned bind sources are mounted (I/O at start-up):
//! a small tmpfs of the proxy's own mounted on it, so that a staging path exists only where
//! the proxy's mounts reach (an engine that cannot see them finds no such path and refuses the
//! create, rather than mounting something else); reused when an earlier proxy's is there, and
//! never mounted over other mounts, which it would hide. It holds `lock` (locked while the
//! proxy runs: one proxy per directory) and `p/`, one staging directory or file per pin.
//! Also what says whether this process can pin at all (`CAP_SYS_ADMIN`), and the reading of
//! `/proc/self/mountinfo` both need.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, Mode, OFlags};
use rustix::mount::{MountFlags, UnmountFlags};

/// The source name the proxy's tmpfs carries in `/proc/self/mountinfo`: how a restarted proxy
/// knows the mount on its pin directory as one to reuse.
pub const TMPFS_SOURCE: &str = "sockproxy-pins";

/// Why bind sources cannot be pinned here; the proxy does not start (one line each).
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("--allow-bind-root needs CAP_SYS_ADMIN to pin bind sources (the proxy mounts each checked source where only it writes; docs/sockproxy.md, \"Pinned bind sources\"){0}")]
    NoCapability(String),
    #[error("--pin-dir {0:?}: must be an absolute path without '.' or '..', outside every bind root and holding none")]
    BadDir(PathBuf),
    #[error("--pin-dir {0:?}: {1}")]
    Dir(PathBuf, String),
    #[error("--pin-dir {0:?}: another sockproxy pins bind sources there; give each stack its own")]
    InUse(PathBuf),
    #[error("--allow-bind-root {0:?}: {1}")]
    Root(PathBuf, String),
    #[error("--allow-bind-root: cannot pin bind sources: {0}")]
    Probe(String),
    #[error("--pin-dir {0:?}: the engine does not see the proxy's mounts there (the proxy runs in a mount namespace whose mounts do not reach the engine's: with systemd, install deploy/systemd/sockproxy-pins.conf; in compose, mount the directory with rshared propagation)")]
    Unseen(PathBuf),
}

/// One line of `/proc/self/mountinfo`: where, what file system, from what source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountLine {
    pub point: PathBuf,
    pub fstype: String,
    pub source: String,
}

/// Reads mountinfo text (man 5 proc): field 5 is the mount point, and after the ` - `
/// separator come the file system type and the source; spaces, tabs, newlines and
/// backslashes are written as octal escapes.
pub fn mount_lines(text: &str) -> Vec<MountLine> {
    text.lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let point = head.split(' ').nth(4)?;
            let mut tail = tail.split(' ');
            Some(MountLine {
                point: PathBuf::from(unescape(point)),
                fstype: unescape(tail.next()?),
                source: unescape(tail.next()?),
            })
        })
        .collect()
}

fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |n, c| n.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This process's mounts, in mount order.
pub fn mounts() -> std::io::Result<Vec<MountLine>> {
    std::fs::read_to_string("/proc/self/mountinfo").map(|t| mount_lines(&t))
}

/// Whether the effective capabilities hold `CAP_SYS_ADMIN`, which `mount(2)` asks for;
/// `Err` says what is missing for the start-up line.
pub fn can_mount() -> Result<(), PinError> {
    let caps = rustix::thread::capabilities(None)
        .map_err(|e| PinError::NoCapability(format!(": cannot read its capabilities ({e})")))?;
    if caps
        .effective
        .contains(rustix::thread::CapabilitySet::SYS_ADMIN)
    {
        Ok(())
    } else {
        Err(PinError::NoCapability(String::new()))
    }
}

/// The pin directory, set up and locked for this process.
#[derive(Debug)]
pub struct PinDir {
    pub dir: PathBuf,
    /// `dir/p`: the staging paths.
    pub staging: PathBuf,
    /// Held locked (`flock`) for the life of the proxy.
    _lock: OwnedFd,
}

/// `dir` must be absolute and clean, and neither inside a bind root (a stack could name a
/// staging path as a source) nor holding one (the proxy's tmpfs would hide it).
pub fn check_dir(dir: &Path, roots: &[PathBuf]) -> Result<(), PinError> {
    let clean = dir
        .to_str()
        .is_some_and(sockproxy_policy::settings::clean_absolute)
        && dir != Path::new("/");
    let apart = roots
        .iter()
        .all(|r| !dir.starts_with(r) && !r.starts_with(dir));
    if clean && apart {
        Ok(())
    } else {
        Err(PinError::BadDir(dir.to_owned()))
    }
}

impl PinDir {
    /// Mounts the proxy's tmpfs on `dir` (or finds an earlier proxy's there), makes `p/` and
    /// takes the lock. `max` pins bound the tmpfs's inodes.
    pub fn open(dir: &Path, max: usize) -> Result<Self, PinError> {
        let fail = |why: String| PinError::Dir(dir.to_owned(), why);
        let lines = mounts().map_err(|e| fail(format!("cannot read /proc/self/mountinfo: {e}")))?;
        // The last mount on a path is the one a lookup sees. Another mount there (compose's
        // bind of the host's directory) is mounted over, as long as nothing is hidden.
        match lines.iter().rev().find(|m| m.point == dir) {
            Some(m) if m.fstype == "tmpfs" && m.source == TMPFS_SOURCE => {
                tracing::info!(pin_dir = %dir.display(), "reusing the pin directory an earlier sockproxy mounted");
            }
            _ => {
                if let Some(under) = lines
                    .iter()
                    .find(|m| m.point.starts_with(dir) && m.point != dir)
                {
                    return Err(fail(format!(
                        "{} is mounted beneath it, which the proxy's tmpfs would hide",
                        under.point.display()
                    )));
                }
                std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
                let held = std::fs::read_dir(dir)
                    .map_err(|e| fail(e.to_string()))?
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .next();
                if let Some(name) = held {
                    return Err(fail(format!(
                        "is not empty (it holds {name:?}), and the proxy's tmpfs would hide what is there; give the proxy a directory of its own"
                    )));
                }
                // Each staging entry is an inode; a few more for `p/`, `lock` and the root.
                let data = format!("mode=0700,size=256k,nr_inodes={}", max.saturating_add(16));
                let data = std::ffi::CString::new(data).map_err(|e| fail(e.to_string()))?;
                rustix::mount::mount(
                    TMPFS_SOURCE,
                    dir,
                    "tmpfs",
                    MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                    data.as_c_str(),
                )
                .map_err(|e| fail(format!("cannot mount the proxy's tmpfs on it: {e}")))?;
            }
        }
        let staging = dir.join("p");
        match rustix::fs::mkdir(&staging, Mode::RWXU) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(fail(format!("cannot make p/: {e}"))),
        }
        let lock = rustix::fs::open(
            dir.join("lock"),
            OFlags::CREATE | OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::RUSR | Mode::WUSR,
        )
        .map_err(|e| fail(format!("cannot open its lock: {e}")))?;
        rustix::fs::flock(lock.as_fd(), FlockOperation::NonBlockingLockExclusive).map_err(|e| {
            match e {
                rustix::io::Errno::WOULDBLOCK => PinError::InUse(dir.to_owned()),
                e => fail(format!("cannot lock it: {e}")),
            }
        })?;
        Ok(Self {
            dir: dir.to_owned(),
            staging,
            _lock: lock,
        })
    }
}

/// Undoes one pin: the mount (detached, so a lookup in progress does not keep it), then its
/// mount point. A mount point left behind is empty and in the proxy's directory: harmless, and
/// removed at the next start.
pub fn unpin(point: &Path) -> std::io::Result<()> {
    match rustix::mount::unmount(point, UnmountFlags::DETACH) {
        Ok(()) | Err(rustix::io::Errno::INVAL) => {}
        Err(e) => return Err(e.into()),
    }
    match std::fs::symlink_metadata(point) {
        Ok(m) if m.is_dir() => std::fs::remove_dir(point),
        Ok(_) => std::fs::remove_file(point),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_read_with_their_escapes() {
        let text = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
            52 27 0:40 / /run/sockproxy-pins/deer\\040flow rw,nosuid - tmpfs sockproxy-pins rw,size=256k\n\
            53 52 254:0 /srv/a /run/x/p/ab rw shared:5 master:1 - ext4 /dev/vda rw\n\
            garbage\n";
        assert_eq!(
            mount_lines(text),
            vec![
                MountLine {
                    point: "/proc".into(),
                    fstype: "proc".into(),
                    source: "proc".into()
                },
                MountLine {
                    point: "/run/sockproxy-pins/deer flow".into(),
                    fstype: "tmpfs".into(),
                    source: TMPFS_SOURCE.into()
                },
                MountLine {
                    point: "/run/x/p/ab".into(),
                    fstype: "ext4".into(),
                    source: "/dev/vda".into()
                },
            ]
        );
        assert_eq!(unescape("a\\134b\\011c\\012"), "a\\b\tc\n");
        assert_eq!(unescape("end\\04"), "end\\04");
    }

    #[test]
    fn the_pin_dir_stays_apart_from_the_bind_roots() {
        let roots = [PathBuf::from("/srv/df")];
        for ok in ["/run/sockproxy-pins/df", "/srv/dfx"] {
            assert!(check_dir(Path::new(ok), &roots).is_ok(), "{ok}");
        }
        for bad in [
            "/srv/df/pins",
            "/srv/df",
            "/srv",
            "/",
            "run/pins",
            "/run/../srv/pins",
            "/run/./pins",
        ] {
            assert!(check_dir(Path::new(bad), &roots).is_err(), "{bad}");
        }
    }
}
