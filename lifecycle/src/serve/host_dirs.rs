//! The host directories a provisioner sandbox's binds need, made under `--mount-root` before
//! any engine call: never through a symbolic link, and a failure said as whose it is (the
//! request's, 400, or this server's, 500).

use std::path::{Path, PathBuf};

/// Why a sandbox's host directories could not be made: the request named a path that is not
/// a plain directory tree (a link, a file: 400), or this server could not make or read it (a
/// mount root it cannot write, say: 500, its own failure, not the client's).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DirError {
    Refused(String),
    Failed(String),
}

impl DirError {
    pub(crate) fn status(&self) -> u16 {
        match self {
            Self::Refused(_) => 400,
            Self::Failed(_) => 500,
        }
    }

    pub(crate) fn text(self) -> String {
        match self {
            Self::Refused(s) | Self::Failed(s) => s,
        }
    }
}

/// Creates the directories a sandbox mounts (empty when missing), refusing any path under the
/// root that passes through a symbolic link: the proxy would refuse the bind anyway, but a link
/// must not make this process create directories elsewhere on the host first.
pub(crate) fn prepare_dirs(root: &Path, dirs: &[PathBuf]) -> Result<(), DirError> {
    for dir in dirs {
        let rel = dir.strip_prefix(root).map_err(|_| {
            DirError::Failed(format!("{} is not under the mount root", dir.display()))
        })?;
        let mut at = root.to_path_buf();
        for part in rel.components() {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(DirError::Refused(format!(
                        "host path {}: {} is a symbolic link",
                        dir.display(),
                        at.display()
                    )))
                }
                Ok(m) if !m.is_dir() => {
                    return Err(DirError::Refused(format!(
                        "host path {}: {} is not a directory",
                        dir.display(),
                        at.display()
                    )))
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    match std::fs::create_dir(&at) {
                        Ok(()) => {}
                        // Made meanwhile by a concurrent create: a directory, checked again.
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                            let m = std::fs::symlink_metadata(&at).map_err(|e| {
                                DirError::Failed(format!("host path {}: {e}", dir.display()))
                            })?;
                            if !m.is_dir() {
                                return Err(DirError::Refused(format!(
                                    "host path {}: {} is not a directory",
                                    dir.display(),
                                    at.display()
                                )));
                            }
                        }
                        Err(e) => {
                            return Err(DirError::Failed(format!(
                                "host path {}: cannot create {} as uid {}: {e}",
                                dir.display(),
                                at.display(),
                                nix::unistd::geteuid()
                            )))
                        }
                    }
                }
                Err(e) => {
                    return Err(DirError::Failed(format!(
                        "host path {}: {e}",
                        dir.display()
                    )))
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirs_are_made_under_the_root_and_links_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let root = std::fs::canonicalize(dir.path()).expect("real path");
        let want = root.join("users/u/threads/t/user-data");
        prepare_dirs(&root, std::slice::from_ref(&want)).expect("made");
        assert!(want.is_dir());
        std::os::unix::fs::symlink("/etc", root.join("users/link")).expect("link");
        let via_link = root.join("users/link/x");
        let e = prepare_dirs(&root, &[via_link]).expect_err("refused");
        assert_eq!(e.status(), 400, "{e:?}");
        assert!(e.text().contains("is a symbolic link"));
        assert!(
            !Path::new("/etc/x").exists(),
            "nothing made through the link"
        );
        std::fs::write(root.join("file"), b"x").expect("file");
        let e = prepare_dirs(&root, &[root.join("file/x")]).expect_err("refused");
        assert_eq!(e.status(), 400, "{e:?}");
        assert!(e.text().contains("is not a directory"));
    }

    /// A directory this process cannot make is its own failure (500), not the client's: a
    /// mount root its uid cannot write (issue 51), stood for here by a path under a file in a
    /// directory that vanished, which no uid, root included, can make.
    #[test]
    fn a_directory_that_cannot_be_made_is_the_servers_failure() {
        let dir = tempfile::tempdir().expect("dir");
        let root = std::fs::canonicalize(dir.path()).expect("real path");
        let gone = root.join("gone");
        std::fs::create_dir(&gone).expect("dir");
        std::fs::remove_dir(&gone).expect("rmdir");
        let e = prepare_dirs(&root, &[root.join("elsewhere/x")]);
        assert_eq!(e, Ok(()), "a plain tree is made");
        let e = prepare_dirs(&gone, &[gone.join("users/u")]).expect_err("failed");
        assert_eq!(e.status(), 500, "{e:?}");
        let text = e.text();
        assert!(text.contains("cannot create"), "{text}");
    }
}
