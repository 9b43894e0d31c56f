//! The checks a `--allow-bind-root` directory passes at start-up: an absolute, real path to a
//! directory the proxy sees, on a mount with `nosuid` and `nodev`.

use crate::config::ConfigError;

/// A bind root must be a directory the proxy sees, named by its real path: bind sources are
/// checked component by component on the proxy's own view (`mounts::bind_source`).
pub(crate) fn check_bind_root(root: &std::path::Path) -> Result<(), ConfigError> {
    let ok = root.is_absolute()
        && !root
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir));
    if !ok {
        return Err(ConfigError::BindRoot(root.to_owned()));
    }
    let real = std::fs::canonicalize(root)
        .map_err(|e| ConfigError::BindRootMissing(root.to_owned(), e.to_string()))?;
    if !real.is_dir() {
        return Err(ConfigError::BindRootMissing(
            root.to_owned(),
            "not a directory".into(),
        ));
    }
    if real != root {
        return Err(ConfigError::BindRootNotCanonical(root.to_owned(), real));
    }
    let flags = nix::sys::statvfs::statvfs(root)
        .map_err(|e| ConfigError::BindRootMissing(root.to_owned(), e.to_string()))?
        .flags();
    bind_root_mount(flags).map_err(|has| ConfigError::BindRootSuid(root.to_owned(), has))
}

/// A bind root's mount must keep set-user-ID bits and device nodes inert: a sandbox is root
/// in what it binds (default capabilities include `MKNOD`, `FOWNER` and `SETUID`), and dockerd
/// unpacks `docker cp` uploads as root, so either could otherwise leave a root shell or a disk
/// device node for any host user who can reach the directory. `Err` names what is missing.
pub(crate) fn bind_root_mount(flags: nix::sys::statvfs::FsFlags) -> Result<(), String> {
    use nix::sys::statvfs::FsFlags;
    let missing: Vec<&str> = [(FsFlags::ST_NOSUID, "suid"), (FsFlags::ST_NODEV, "dev")]
        .into_iter()
        .filter(|(f, _)| !flags.contains(*f))
        .map(|(_, name)| name)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join(","))
    }
}
