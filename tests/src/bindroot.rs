//! Bind roots as a test needs them: a proxy with `--allow-bind-root` pins every bind source
//! with `mount(2)` (`sockproxy::pins`), so it needs `CAP_SYS_ADMIN` (`can_pin`: a notice
//! without it, a failure under CI); and a root must be on a `nosuid,nodev` mount, as in
//! production (`BindRootDir`: a temporary directory bind-mounted onto itself with those flags,
//! detached again when dropped).

use std::path::{Path, PathBuf};

use rustix::mount::{MountFlags, UnmountFlags};

use crate::skip::skip;

/// Whether this process may mount, which pinning asks; `false` after a skip notice for `test`.
pub fn can_pin(test: &str) -> bool {
    let ok = rustix::thread::capabilities(None).is_ok_and(|c| {
        c.effective
            .contains(rustix::thread::CapabilitySet::SYS_ADMIN)
    });
    if !ok {
        skip(
            test,
            "pinning bind sources needs CAP_SYS_ADMIN (mount(2))",
            "run the tests as root, as .ci/run does",
        );
    }
    ok
}

/// A temporary bind root on a `nosuid,nodev` mount of its own, under its real path.
#[derive(Debug)]
pub struct BindRootDir {
    dir: Option<tempfile::TempDir>,
    /// The real path, mounted `nosuid,nodev`.
    pub path: PathBuf,
}

impl BindRootDir {
    /// Panics where the process cannot mount (check `can_pin` first).
    pub fn new(prefix: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .expect("temp dir");
        let path = std::fs::canonicalize(dir.path()).expect("real path");
        rustix::mount::mount_bind(&path, &path).expect("bind the root onto itself");
        rustix::mount::mount_remount(
            &path,
            MountFlags::BIND | MountFlags::NOSUID | MountFlags::NODEV,
            "",
        )
        .expect("remount nosuid,nodev");
        Self {
            dir: Some(dir),
            path,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for BindRootDir {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.path, UnmountFlags::DETACH);
        drop(self.dir.take());
    }
}
