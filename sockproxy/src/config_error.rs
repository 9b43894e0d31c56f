//! Why the settings do not make a `Config` (`config`): one error a flag, each saying which flag
//! and what it must be, printed as the one line the proxy stops with.

use std::path::PathBuf;

use sockproxy_policy::PrefixError;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--network-pool: {0}")]
    NetworkPool(String),
    #[error("--prefix: {0}")]
    Prefix(#[from] PrefixError),
    #[error("--upstream {0:?}: only unix:// addresses are supported")]
    Upstream(String),
    #[error("--socket-mode {0:?}: expected octal permission bits such as 0660")]
    SocketMode(String),
    #[error("--socket-group {0:?}: no such group")]
    SocketGroup(String),
    #[error("--socket-group {0:?}: {1}")]
    GroupLookup(String, String),
    #[error("--allow-bind-root {0:?}: must be an absolute path without '..'")]
    BindRoot(PathBuf),
    #[error("--allow-bind-root {0:?}: the proxy cannot see it ({1}); mount it into the proxy's container at the same path")]
    BindRootMissing(PathBuf, String),
    #[error("--allow-bind-root {0:?}: must be the directory's real path ({1:?}), with no symbolic link in it")]
    BindRootNotCanonical(PathBuf, PathBuf),
    #[error("--allow-bind-root {0:?}: must be on a mount with nosuid and nodev (its mount allows {1}): a sandbox is root in what it binds and could leave a set-user-ID program or a device node there for the host; e.g. `mount --bind {0:?} {0:?} && mount -o remount,bind,nosuid,nodev {0:?}`")]
    BindRootSuid(PathBuf, String),
    #[error("--allow-seccomp-profile {0:?}: {1}")]
    SeccompProfile(String, String),
    #[error("--allow-publish-address {0:?}: expected an IP address such as 172.30.0.1")]
    PublishAddress(String),
    #[error("--min-api-version {0:?}: expected MAJOR.MINOR, at least 1.24")]
    MinApiVersion(String),
    #[error("--policy {0:?}: {1}")]
    PolicyFile(PathBuf, String),
    #[error("--worker-threads {0}: expected 1 to {MAX_WORKER_THREADS}")]
    WorkerThreads(usize),
    #[error("{0}")]
    Spend(String),
    #[error("--metrics-listen {0}")]
    MetricsListen(#[from] scrape::ListenError),
    #[error("--pin-dir: {0}")]
    PinDir(String),
    #[error("--state-dir {0}")]
    StateDir(String),
}

/// More workers than this would only add threads: each is a whole core's worth of work.
pub const MAX_WORKER_THREADS: usize = 64;
