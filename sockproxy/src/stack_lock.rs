//! The stack's lock: what a create's checks against the engine's state (the stack's network,
//! made when the engine holds none; the stack's totals) are gathered under, and held until the
//! create is answered, so two creates never both make the network nor both pass a total. The
//! engine does not serialize them itself: twelve concurrent creates of one network name with
//! `CheckDuplicate: true` made twelve networks of that name on dockerd 20.10.
//!
//! Two locks: an in-process async mutex, which every request of this proxy queues on, and an
//! `flock(2)` on a lock file (`--stack-lock`, by default beside the listening socket), which a
//! second proxy of the same stack given the same file queues on too. `flock` belongs to the
//! open file description, so the kernel drops it when a proxy exits or crashes; it is taken
//! non-blocking and retried, so a waiter that gives up holds nothing. The file is never
//! removed: unlinking a file someone may be about to lock would let two processes lock two
//! files of one name.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag};
use sockproxy_policy::Refusal;

/// How long a create waits for the lock before it is answered busy.
const WAIT: Duration = Duration::from_secs(60);
/// How often a waiter retries an `flock` another process holds.
const POLL: Duration = Duration::from_millis(20);

/// The lock; one per proxy.
#[derive(Debug, Default)]
pub struct StackLock {
    local: Arc<tokio::sync::Mutex<()>>,
    file: Option<PathBuf>,
}

/// Held while a request that gathered under the lock is on its way; dropping it releases both
/// locks (the file's first).
#[derive(Debug)]
pub struct Held {
    _file: Option<Flock<File>>,
    _local: tokio::sync::OwnedMutexGuard<()>,
}

/// The default lock file: `.sockproxy-HASH.lock` in the directory of the listening socket,
/// `HASH` the first 16 hex of SHA-256 of the stack's name.
pub fn beside(listen: &std::path::Path, stack: &str) -> Option<PathBuf> {
    let dir = listen.parent()?;
    Some(dir.join(format!(".sockproxy-{}.lock", stackmodel::k(stack))))
}

impl StackLock {
    /// The in-process lock, and the `flock` on `file` when one is given.
    pub fn new(file: Option<PathBuf>) -> Self {
        Self {
            local: Arc::default(),
            file,
        }
    }

    pub async fn lock(&self) -> Result<Held, Refusal> {
        let busy = || Refusal::Busy(format!("the stack's lock was held for {}s", WAIT.as_secs()));
        let started = Instant::now();
        let local = tokio::time::timeout(WAIT, self.local.clone().lock_owned())
            .await
            .map_err(|_| busy())?;
        let file = match &self.file {
            None => None,
            Some(path) => Some(flock(path, started).await.map_err(|e| match e {
                Some(e) => {
                    Refusal::Upstream(format!("the stack's lock file {}: {e}", path.display()))
                }
                None => busy(),
            })?),
        };
        Ok(Held {
            _file: file,
            _local: local,
        })
    }
}

/// The lock file, locked; `Err(None)` when another process held it past `WAIT`.
async fn flock(path: &PathBuf, started: Instant) -> Result<Flock<File>, Option<std::io::Error>> {
    // Never through a link: the directory may be shared with the stack's gateway (compose).
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
        .open(path)
        .map_err(Some)?;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => return Ok(locked),
            Err((back, Errno::EWOULDBLOCK)) => {
                if started.elapsed() >= WAIT {
                    return Err(None);
                }
                file = back;
                tokio::time::sleep(POLL).await;
            }
            Err((_, e)) => return Err(Some(std::io::Error::from(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second holder of the file (another proxy of the stack) waits until the first lets go.
    #[test]
    fn the_file_serializes_two_proxies() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("stack.lock");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (a, b) = (
                StackLock::new(Some(path.clone())),
                StackLock::new(Some(path)),
            );
            let held = a.lock().await.expect("first");
            let waiting = tokio::time::timeout(Duration::from_millis(200), b.lock()).await;
            assert!(
                waiting.is_err(),
                "the second got the lock while the first held it"
            );
            drop(held);
            let second = tokio::time::timeout(Duration::from_secs(5), b.lock()).await;
            assert!(matches!(second, Ok(Ok(_))), "the second never got it");
        });
    }

    /// A link where the lock file should be is not followed.
    #[test]
    fn a_link_in_its_place_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("stack.lock");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &path).expect("link");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let got = rt.block_on(StackLock::new(Some(path)).lock());
        assert!(matches!(got, Err(Refusal::Upstream(_))), "{got:?}");
        assert!(!dir.path().join("elsewhere").exists());
    }
}
