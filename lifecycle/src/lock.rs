//! One sandbox ID at a time (docs/architecture.md, "lifecycle", issue 15): create, discover, destroy, retire and absent
//! teardown of a sandbox ID run under its lock, so no process decides on a container another is
//! replacing. The lock is two locks: an in-process async mutex per lock file (tasks of one
//! process queue on it instead of polling) and an `flock` on
//! `{state_dir}/locks/{k(prefix)}/{k(id)}.lock` across processes.
//!
//! `flock` (not `fcntl` record locks) because it belongs to the open file description: the
//! kernel drops it when the holder exits or crashes, and it never blocks two holders in one
//! process against each other by accident. It is taken non-blocking and retried on the async
//! runtime, so a waiter that gives up (its deadline, or a SIGINT/SIGTERM the CLI turns into
//! `cancel`) simply stops polling: it holds nothing and leaves nothing behind to release.
//! The lock files are never deleted: unlinking a file someone may be about to `flock` would let
//! two processes lock two different files of the same name.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use tokio::sync::watch;

use crate::naming::k;
use crate::private;

/// How often a waiter retries an `flock` held by another process.
const POLL: Duration = Duration::from_millis(20);

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("sandbox {id}: another lifecycle operation on it still holds its lock after {secs}s; nothing was done")]
    Timeout { id: String, secs: u64 },
    #[error("sandbox {id}: interrupted while waiting for its lock; nothing was done")]
    Interrupted { id: String },
    #[error("lock file {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// Held for the length of one operation on one sandbox ID; dropping it releases both locks
/// (the `flock` first, then the in-process mutex).
#[derive(Debug)]
pub struct SandboxLock {
    _file: Flock<File>,
    _local: tokio::sync::OwnedMutexGuard<()>,
}

type LocalLocks = Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>;

/// Shared by every `Locks` of the process, so two `Lifecycle` values in one process queue too.
static LOCAL: LazyLock<LocalLocks> = LazyLock::new(|| Mutex::new(HashMap::new()));

#[derive(Debug, Clone)]
pub struct Locks {
    dir: PathBuf,
    timeout: Duration,
    cancel: Option<watch::Receiver<bool>>,
}

impl Locks {
    /// The locks of stack `prefix` under `state_dir`; waiting gives up after `timeout`.
    pub fn new(state_dir: &Path, prefix: &str, timeout: Duration) -> Self {
        Self {
            dir: state_dir.join("locks").join(k(prefix)),
            timeout,
            cancel: None,
        }
    }

    /// Waiting also gives up once `cancel` turns `true` (the CLI's signal handler).
    pub fn with_cancel(mut self, cancel: watch::Receiver<bool>) -> Self {
        self.cancel = Some(cancel);
        self
    }

    pub fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{}.lock", k(id)))
    }

    /// Waits for sandbox `id`'s lock (both parts) until the timeout or a cancel.
    pub async fn acquire(&self, id: &str) -> Result<SandboxLock, LockError> {
        let path = self.path(id);
        let wait = async {
            let local = {
                let mut map = LOCAL
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                map.entry(path.clone()).or_default().clone()
            };
            let local = local.lock_owned().await;
            let file = self.flock(&path).await?;
            Ok(SandboxLock {
                _file: file,
                _local: local,
            })
        };
        let cancelled = async {
            match self.cancel.clone() {
                Some(mut rx) => {
                    // A dropped sender can never cancel: wait for the deadline instead.
                    if rx.wait_for(|c| *c).await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = tokio::time::timeout(self.timeout, wait) => r.unwrap_or_else(|_| Err(LockError::Timeout {
                id: id.to_owned(),
                secs: self.timeout.as_secs(),
            })),
            () = cancelled => Err(LockError::Interrupted { id: id.to_owned() }),
        }
    }

    /// Sandbox `id`'s lock if no one holds it right now (in this process or another), else
    /// `None` at once: for passes that must never wait on an operation under way.
    pub fn try_acquire(&self, id: &str) -> Result<Option<SandboxLock>, LockError> {
        let path = self.path(id);
        let local = {
            let mut map = LOCAL
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            map.entry(path.clone()).or_default().clone()
        };
        let Ok(local) = local.try_lock_owned() else {
            return Ok(None);
        };
        let file = self.open(&path)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(file) => Ok(Some(SandboxLock {
                _file: file,
                _local: local,
            })),
            Err((_, Errno::EWOULDBLOCK | Errno::EINTR)) => Ok(None),
            Err((_, errno)) => Err(LockError::Io {
                path,
                source: io::Error::from(errno),
            }),
        }
    }

    fn open(&self, path: &Path) -> Result<File, LockError> {
        let io_err = |source| LockError::Io {
            path: path.to_owned(),
            source,
        };
        private::create_dir_all(&self.dir).map_err(io_err)?;
        private::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io_err)
    }

    async fn flock(&self, path: &Path) -> Result<Flock<File>, LockError> {
        let io_err = |source| LockError::Io {
            path: path.to_owned(),
            source,
        };
        let mut file = self.open(path)?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => return Ok(locked),
                Err((f, Errno::EWOULDBLOCK | Errno::EINTR)) => file = f,
                Err((_, errno)) => return Err(io_err(io::Error::from(errno))),
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "aaaaaaaaaaaaaaaa";

    #[tokio::test]
    async fn try_acquire_never_waits_and_sees_every_holder() {
        let state = tempfile::tempdir().expect("dir");
        let locks = Locks::new(state.path(), "p-", Duration::from_secs(60));
        let held = locks.try_acquire(ID).expect("io").expect("free");
        assert!(locks.try_acquire(ID).expect("io").is_none(), "held here");
        drop(held);
        // Held by another open file description, as another process would hold it.
        let other = File::open(locks.path(ID)).expect("open");
        let other = Flock::lock(other, FlockArg::LockExclusiveNonblock).expect("lock");
        assert!(
            locks.try_acquire(ID).expect("io").is_none(),
            "held elsewhere"
        );
        drop(other);
        assert!(locks.try_acquire(ID).expect("io").is_some(), "free again");
    }

    #[tokio::test]
    async fn one_holder_at_a_time_and_a_waiter_that_gives_up_leaves_nothing_held() {
        let state = tempfile::tempdir().expect("dir");
        let locks = Locks::new(state.path(), "p-", Duration::from_millis(200));
        let held = locks.acquire(ID).await.expect("first");
        // Another ID is independent.
        drop(locks.acquire("bbbbbbbbbbbbbbbb").await.expect("other id"));
        assert_eq!(
            locks.acquire(ID).await.map(drop).map_err(|e| e.to_string()),
            Err(format!("sandbox {ID}: another lifecycle operation on it still holds its lock after 0s; nothing was done"))
        );
        // A second file description (as another process would open) is refused too.
        let other = File::open(locks.path(ID)).expect("open");
        assert_eq!(
            Flock::lock(other, FlockArg::LockExclusiveNonblock)
                .map(drop)
                .map_err(|(_, e)| e),
            Err(Errno::EWOULDBLOCK)
        );
        drop(held);
        drop(
            locks
                .acquire(ID)
                .await
                .expect("free after the waiter gave up"),
        );

        let (tx, rx) = watch::channel(false);
        let cancellable = Locks::new(state.path(), "p-", Duration::from_secs(600)).with_cancel(rx);
        let held = locks.acquire(ID).await.expect("held again");
        let waiter = tokio::spawn(async move { cancellable.acquire(ID).await.map(drop) });
        tx.send(true).expect("send");
        assert_eq!(
            waiter.await.expect("join").map_err(|e| e.to_string()),
            Err(format!(
                "sandbox {ID}: interrupted while waiting for its lock; nothing was done"
            ))
        );
        drop(held);
        drop(
            locks
                .acquire(ID)
                .await
                .expect("not leaked by the interrupted waiter"),
        );
    }
}
