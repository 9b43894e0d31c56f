//! The state tree (quarantine ledger, locks, port reservations) is private to the user
//! lifecycle runs as: directories 0700, files 0600, asked for explicitly rather than left to
//! the umask. A lock file anyone can open is a lock anyone can hold (`flock` works on a
//! read-only descriptor), so another local user could block every operation on a sandbox; and
//! the records and reservations are lifecycle's alone to read and change.

use std::fs::{self, DirBuilder, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

pub const DIR_MODE: u32 = 0o700;
pub const FILE_MODE: u32 = 0o600;

/// `fs::create_dir_all` with every directory it makes 0700. `dir` itself is set to 0700 when it
/// exists with other bits (a tree written before this rule): its files are reachable only
/// through it, so this closes them too.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    if fs::metadata(dir)?.permissions().mode() & 0o777 != DIR_MODE {
        fs::set_permissions(dir, Permissions::from_mode(DIR_MODE))?;
    }
    Ok(())
}

/// `OpenOptions` whose newly created file is 0600 (the umask can only take bits away).
pub fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.mode(FILE_MODE);
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Ledger;
    use crate::lock::Locks;
    use crate::ports::Ports;
    use std::path::PathBuf;
    use std::time::Duration;

    const ID: &str = "aaaaaaaaaaaaaaaa";

    fn tree(root: &Path) -> Vec<(PathBuf, bool, u32)> {
        let mut out = Vec::new();
        let mut todo = vec![root.to_owned()];
        while let Some(dir) = todo.pop() {
            for e in fs::read_dir(&dir).expect("read") {
                let path = e.expect("entry").path();
                let meta = fs::symlink_metadata(&path).expect("stat");
                if meta.is_dir() {
                    todo.push(path.clone());
                }
                out.push((path, meta.is_dir(), meta.permissions().mode() & 0o777));
            }
        }
        out
    }

    #[tokio::test]
    async fn the_state_tree_is_0700_directories_and_0600_files() {
        let state = tempfile::tempdir().expect("dir");
        // A lock directory left 0755 by an older lifecycle is closed on the next lock.
        let locks = Locks::new(state.path(), "p-", Duration::from_secs(5));
        let lock_dir = locks.path(ID).parent().expect("dir").to_owned();
        fs::create_dir_all(&lock_dir).expect("mkdir");
        fs::set_permissions(&lock_dir, Permissions::from_mode(0o755)).expect("chmod");
        let held = locks.acquire(ID).await.expect("lock");
        Ledger::new(state.path(), "p-")
            .mark(ID, "gen1")
            .expect("mark");
        let ports = Ports::new(state.path());
        ports.reserve(ID).expect("reserve");
        ports.assign(ID, "gen1").expect("assign");
        ports.reserve(ID).expect("pending");
        drop(held);
        let found = tree(state.path());
        assert!(
            found.iter().filter(|(_, dir, _)| !dir).count() >= 5,
            "{found:?}"
        );
        // `locks` itself was made by the "older lifecycle" above and is left as it was: the
        // leaf below it is what keeps its files out of reach.
        let legacy = state.path().join("locks");
        for (path, dir, mode) in found.into_iter().filter(|(p, _, _)| *p != legacy) {
            let want = if dir { DIR_MODE } else { FILE_MODE };
            assert_eq!(mode, want, "{path:?} is {mode:o}");
        }
    }
}
