//! The log guard's memory (I/O): the time of its last stop, a file in `--state-dir` read once
//! at start and written at each stop, so a proxy killed and started again keeps the repeat
//! window (`sockproxy_policy::log_flood` says how the file is read). The directory is checked
//! once at start (`state_dir`): a real directory, the proxy's own, that no one else may write
//! in. The file is opened without following a link or waiting on a pipe, and anything but a
//! regular file holding what the proxy writes reads as a stop just now; it is replaced by a new
//! file made beside it and renamed over it, never written through.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::fcntl::OFlag;
use sockproxy_policy::log_flood::{
    memory_text, recall, window_left, Recalled, MEMORY_FILE, REPEAT_WINDOW_SECS,
};

/// A write of the memory that takes longer is given up (the guard goes on without it).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the guard keeps its last stop.
#[derive(Debug, Clone)]
pub struct Memory {
    file: PathBuf,
}

impl Memory {
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            file: dir.join(MEMORY_FILE),
        }
    }

    /// When the last stop was, as an instant of this process, if that is within the window.
    /// Blocking: call it where blocking is allowed. A file that says nothing readable, or a
    /// time past the clock, opens a whole window from now, and is replaced by a file saying
    /// now, so the next start reads a time again.
    pub fn recall(&self) -> Option<Instant> {
        let read = self.read();
        let now = unix_now();
        let recalled = match &read {
            Ok(text) => recall(text.as_deref()),
            Err(e) => {
                tracing::warn!(file = %self.file.display(), error = %e, "log guard: cannot read its memory; within the repeat window from now");
                Recalled::Unreadable
            }
        };
        let future = matches!(recalled, Recalled::At(at) if at > now.as_secs());
        if recalled == Recalled::Unreadable || future {
            if let Err(e) = self.write(now) {
                tracing::warn!(file = %self.file.display(), error = %e, "log guard: cannot replace its memory");
            }
        }
        let left = window_left(recalled, now.as_secs())?;
        tracing::info!(
            file = %self.file.display(),
            left_s = left,
            "log guard: a container of the stack was stopped for flooding before this start; any is stopped at its first second over until the window ends"
        );
        let gone = Duration::from_secs(REPEAT_WINDOW_SECS.saturating_sub(left));
        // An instant before this process's clock began is read as now: a whole window.
        Some(
            Instant::now()
                .checked_sub(gone)
                .unwrap_or_else(Instant::now),
        )
    }

    /// Keeps the time of a stop (now), off the runtime's threads, giving up after
    /// `WRITE_TIMEOUT`.
    pub async fn keep(&self) {
        let me = self.clone();
        let now = unix_now();
        let written = tokio::time::timeout(
            WRITE_TIMEOUT,
            tokio::task::spawn_blocking(move || me.write(now)),
        )
        .await;
        let failed = match written {
            Ok(Ok(Ok(()))) => return,
            Ok(Ok(Err(e))) => e.to_string(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "it took longer than 5 s".into(),
        };
        tracing::warn!(file = %self.file.display(), error = %failed, "log guard: cannot keep the stop in its memory; a restarted proxy will not know of it");
    }

    /// The file's text, at most 64 bytes of it (`None`: no file). Opened without following a
    /// link or waiting for a pipe's writer; anything but a regular file is an error.
    fn read(&self) -> std::io::Result<Option<String>> {
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
            .open(&self.file);
        let file = match opened {
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            opened => opened?,
        };
        if !file.metadata()?.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        let mut text = String::new();
        file.take(64).read_to_string(&mut text)?;
        Ok(Some(text))
    }

    /// Writes `at` whole into a new file beside (made anew, never through a link or into what
    /// another left there), then renames it over the last.
    fn write(&self, at: Duration) -> std::io::Result<()> {
        let tmp = self.file.with_extension("new");
        let mut f = create_new(&tmp)?;
        f.write_all(memory_text(at.as_secs()).as_bytes())?;
        drop(f);
        std::fs::rename(&tmp, &self.file)
    }
}

/// A new file at `path`, mode 0600, in place of whatever another left there (removed first, as
/// a name): `O_EXCL`, so never through a link or into a file that exists.
fn create_new(path: &Path) -> std::io::Result<File> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// `--state-dir`, made (0700) if missing and checked once at start: a directory, not a link,
/// owned by the proxy's user, that no one else may write in, where the proxy can make a file.
/// A stack that could remove the memory there would get a long flood again after each restart
/// of its proxy.
pub fn state_dir(dir: &Path) -> Result<PathBuf, String> {
    let fail = |e: std::io::Error| format!("{}: {e}", dir.display());
    if !dir.is_absolute() {
        return Err(format!("{}: must be an absolute path", dir.display()));
    }
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(fail)?,
        Err(e) => return Err(fail(e)),
        Ok(_) => {}
    }
    let meta = std::fs::symlink_metadata(dir).map_err(fail)?;
    if !meta.file_type().is_dir() {
        return Err(format!(
            "{}: must be a directory (not a link to one)",
            dir.display()
        ));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!(
            "{}: owned by user {}, not by the proxy's ({me}); give the proxy a directory of its own",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{}: others may write in it (mode {:04o}); `chmod go-w` it",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    let probe = dir.join(".sockproxy-probe");
    create_new(&probe).map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)?;
    Ok(dir.to_path_buf())
}

/// Now, as time since the Unix epoch (the epoch itself for a clock set before it).
fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seconds since the recalled instant (`None`: no window).
    fn ago(m: &Memory) -> Option<u64> {
        m.recall().map(|at| at.elapsed().as_secs())
    }

    fn kept(m: &Memory) -> Option<u64> {
        let text = std::fs::read_to_string(&m.file).ok()?;
        match recall(Some(&text)) {
            Recalled::At(at) => Some(at),
            _ => None,
        }
    }

    /// What a restarted proxy reads back: nothing, a stop 30 s ago, and for what it did not
    /// write (a time past the clock, a pipe, a link, a directory) a whole window from now,
    /// with the file replaced by one that says now. Reading a pipe does not wait for a writer.
    #[test]
    fn a_restarted_guard_reads_its_last_stop_or_a_whole_window() {
        let dir = tempfile::tempdir().expect("dir");
        let m = Memory::in_dir(dir.path());
        let now = unix_now().as_secs();
        assert_eq!(ago(&m), None, "no file");
        m.write(Duration::from_secs(now - 30)).expect("written");
        assert!(
            ago(&m).is_some_and(|s| (29..=32).contains(&s)),
            "{:?}",
            ago(&m)
        );
        m.write(Duration::from_secs(now - REPEAT_WINDOW_SECS - 1))
            .expect("written");
        assert_eq!(ago(&m), None, "the window has passed");

        let target = dir.path().join("elsewhere");
        std::fs::write(&target, memory_text(now - 30)).expect("target");
        let plant = |what: &str| match what {
            "a time past the clock" => m.write(Duration::from_secs(now + 3600)).expect("written"),
            "a pipe" => {
                nix::unistd::mkfifo(&m.file, nix::sys::stat::Mode::S_IRWXU).expect("fifo");
            }
            "a link to a file saying 30 s ago" => {
                std::os::unix::fs::symlink(&target, &m.file).expect("link");
            }
            _ => std::fs::create_dir(&m.file).expect("dir"),
        };
        for what in [
            "a time past the clock",
            "a pipe",
            "a link to a file saying 30 s ago",
            "a directory",
        ] {
            let _ = std::fs::remove_file(&m.file);
            plant(what);
            assert_eq!(ago(&m), Some(0), "{what}: a whole window");
            if what == "a directory" {
                // Not replaced (a rename does not go over a directory); still a whole window.
                assert!(m.file.is_dir());
                std::fs::remove_dir(&m.file).expect("rmdir");
                continue;
            }
            let meta = std::fs::symlink_metadata(&m.file).expect("replaced");
            assert!(meta.file_type().is_file(), "{what}: {meta:?}");
            assert!(kept(&m).is_some_and(|at| at.abs_diff(now) <= 2), "{what}");
        }
        assert_eq!(
            std::fs::read_to_string(&target).expect("target"),
            memory_text(now - 30),
            "the link's target untouched"
        );
    }

    /// A write never goes through what another left at the temporary name.
    #[test]
    fn a_stop_is_kept_without_writing_through_a_link() {
        let dir = tempfile::tempdir().expect("dir");
        let m = Memory::in_dir(dir.path());
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep me").expect("victim");
        std::os::unix::fs::symlink(&victim, m.file.with_extension("new")).expect("link");
        m.write(Duration::from_secs(42)).expect("written");
        assert_eq!(std::fs::read(&victim).expect("victim"), b"keep me");
        assert_eq!(kept(&m), Some(42));
    }

    /// The directory: made 0700 when missing; refused when it is a link, when others may write
    /// in it, or when it is a file.
    #[test]
    fn the_state_dir_is_the_proxys_own() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("dir");
        let made = tmp.path().join("a/b");
        assert_eq!(state_dir(&made), Ok(made.clone()));
        let mode = std::fs::metadata(&made).expect("made").mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(std::fs::read_dir(&made).expect("listed").count(), 0);

        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&made, &link).expect("link");
        assert_eq!(
            state_dir(&link),
            Err(format!(
                "{}: must be a directory (not a link to one)",
                link.display()
            ))
        );
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).expect("dir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        assert_eq!(
            state_dir(&open),
            Err(format!(
                "{}: others may write in it (mode 0777); `chmod go-w` it",
                open.display()
            ))
        );
        let file = tmp.path().join("file");
        std::fs::write(&file, b"").expect("file");
        assert_eq!(
            state_dir(&file),
            Err(format!(
                "{}: must be a directory (not a link to one)",
                file.display()
            ))
        );
        assert_eq!(
            state_dir(Path::new("state")),
            Err("state: must be an absolute path".into())
        );
    }
}
