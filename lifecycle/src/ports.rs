//! Host-port reservations for sandboxes (an open-mode sandbox's own port, a restricted one's
//! sidecar relay), keyed by generation (issue 15):
//! `{state_dir}/ports/{k(id)}/{k(generation)}` holds the port a generation (container ID) was
//! given; `{k(id)}/pending` a port reserved for a create that has no container ID yet. Releasing
//! one generation's port never frees another's, so a stale teardown of generation G1 cannot free
//! the port of a newer G2. A reservation outlives the process, is kept when a teardown fails,
//! and is released exactly once even when two releases race (the file removal decides).
//! A per-ID file from before generations existed is read as generation `unknown`.

use std::fs;
use std::io::{self, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};

use crate::ledger::UNKNOWN_GENERATION;
use crate::naming::k;
use crate::private;

const PENDING: &str = "pending";

#[derive(Debug, thiserror::Error)]
#[error("port reservations at {path}: {source}")]
pub struct PortError {
    pub path: PathBuf,
    pub source: io::Error,
}

#[derive(Debug, Clone)]
pub struct Ports {
    dir: PathBuf,
}

fn not_found(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
}

impl Ports {
    pub fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("ports"),
        }
    }

    fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.dir.join(k(id))
    }

    fn e(path: &Path) -> impl FnOnce(io::Error) -> PortError + '_ {
        move |source| PortError {
            path: path.to_owned(),
            source,
        }
    }

    /// Moves a per-ID file of the old layout into `{k(id)}/` as generation `unknown`.
    fn migrate(&self, id: &str) -> Result<PathBuf, PortError> {
        let dir = self.sandbox_dir(id);
        if dir.is_file() {
            let port = fs::read_to_string(&dir).map_err(Self::e(&dir))?;
            fs::remove_file(&dir).map_err(Self::e(&dir))?;
            private::create_dir_all(&dir).map_err(Self::e(&dir))?;
            write_new(&dir.join(k(UNKNOWN_GENERATION)), port.trim())?;
        }
        Ok(dir)
    }

    /// Makes `{k(id)}/` (after `migrate`).
    fn ensure_dir(&self, id: &str) -> Result<PathBuf, PortError> {
        let dir = self.migrate(id)?;
        private::create_dir_all(&dir).map_err(Self::e(&dir))?;
        Ok(dir)
    }

    fn read(path: &Path) -> Result<Option<u16>, PortError> {
        match fs::read_to_string(path) {
            Ok(s) => Ok(s.trim().parse().ok()),
            Err(e) if not_found(&e) || e.kind() == io::ErrorKind::NotADirectory => Ok(None),
            Err(e) => Err(Self::e(path)(e)),
        }
    }

    /// The port reserved for `generation` of sandbox `id`, if any.
    pub fn get(&self, id: &str, generation: &str) -> Result<Option<u16>, PortError> {
        Self::read(&self.sandbox_dir(id).join(k(generation)))
    }

    /// The port reserved for a create that has no container yet.
    pub fn pending(&self, id: &str) -> Result<Option<u16>, PortError> {
        Self::read(&self.sandbox_dir(id).join(PENDING))
    }

    /// Reserves a free loopback port for the next create of sandbox `id` (a pending one left by
    /// an interrupted create is reused: no container was made with it, or it would be bound).
    pub fn reserve(&self, id: &str) -> Result<u16, PortError> {
        if let Some(p) = self.pending(id)? {
            return Ok(p);
        }
        let dir = self.ensure_dir(id)?;
        let taken = self.all()?;
        for _ in 0..64 {
            // The kernel's pick of a free port; the listener closes before the engine binds it.
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())
                .map_err(Self::e(&self.dir))?
                .port();
            if taken.contains(&port) {
                continue;
            }
            let path = dir.join(PENDING);
            return match write_new(&path, &port.to_string()) {
                Ok(()) => Ok(port),
                Err(e) if e.source.kind() == io::ErrorKind::AlreadyExists => {
                    match self.pending(id)? {
                        Some(p) => Ok(p),
                        // An empty `pending` left by an older lifecycle killed mid-write (its
                        // writes were not atomic); the sandbox's lock is held, so it is ours
                        // to replace.
                        None => {
                            fs::remove_file(&path).map_err(Self::e(&path))?;
                            write_new(&path, &port.to_string()).map(|()| port)
                        }
                    }
                }
                Err(e) => Err(e),
            };
        }
        Err(Self::e(&self.dir)(io::Error::other("no free port found")))
    }

    /// The pending reservation now belongs to `generation` (the container that was created).
    pub fn assign(&self, id: &str, generation: &str) -> Result<(), PortError> {
        let dir = self.sandbox_dir(id);
        let to = dir.join(k(generation));
        fs::rename(dir.join(PENDING), &to).map_err(Self::e(&to))
    }

    /// Releases the pending reservation (its create made no container).
    pub fn release_pending(&self, id: &str) -> Result<Option<u16>, PortError> {
        Self::remove(&self.sandbox_dir(id).join(PENDING))
    }

    /// Releases `generation`'s port; `Some(port)` only for the one call that released it.
    pub fn release(&self, id: &str, generation: &str) -> Result<Option<u16>, PortError> {
        self.release_key(id, &k(generation))
    }

    /// Releases the port of the generation whose key (`k(generation)`, as the ledger stores
    /// it) is `key`.
    pub fn release_key(&self, id: &str, key: &str) -> Result<Option<u16>, PortError> {
        // Keys come from file names; anything else could walk out of the directory.
        if !(key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit())) {
            return Ok(None);
        }
        Self::remove(&self.migrate(id)?.join(key))
    }

    /// Releases every reservation of sandbox `id` (when its generation is `unknown`).
    pub fn release_all(&self, id: &str) -> Result<Vec<u16>, PortError> {
        let dir = self.migrate(id)?;
        let read = match fs::read_dir(&dir) {
            Ok(r) => r,
            Err(e) if not_found(&e) => return Ok(Vec::new()),
            Err(e) => return Err(Self::e(&dir)(e)),
        };
        let mut out = Vec::new();
        for entry in read {
            let path = entry.map_err(Self::e(&dir))?.path();
            out.extend(Self::remove(&path)?);
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Every port reserved for sandbox `id` (any generation, or pending).
    pub fn held(&self, id: &str) -> Result<Vec<u16>, PortError> {
        let dir = self.sandbox_dir(id);
        let read = match fs::read_dir(&dir) {
            Ok(r) => r,
            Err(e) if not_found(&e) || e.kind() == io::ErrorKind::NotADirectory => {
                return Ok(Self::read(&dir)?.into_iter().collect())
            }
            Err(e) => return Err(Self::e(&dir)(e)),
        };
        let mut out = Vec::new();
        for entry in read {
            let path = entry.map_err(Self::e(&dir))?.path();
            if !is_temp(&path) {
                out.extend(Self::read(&path)?);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    fn remove(path: &Path) -> Result<Option<u16>, PortError> {
        let port = Self::read(path)?;
        match fs::remove_file(path) {
            Ok(()) => Ok(port),
            Err(e) if not_found(&e) || e.kind() == io::ErrorKind::NotADirectory => Ok(None),
            Err(e) => Err(Self::e(path)(e)),
        }
    }

    /// Every reserved port, of every sandbox and generation (and old per-ID files).
    fn all(&self) -> Result<Vec<u16>, PortError> {
        let mut out = Vec::new();
        let read = match fs::read_dir(&self.dir) {
            Ok(r) => r,
            Err(e) if not_found(&e) => return Ok(out),
            Err(e) => return Err(Self::e(&self.dir)(e)),
        };
        for entry in read {
            let path = entry.map_err(Self::e(&self.dir))?.path();
            if path.is_dir() {
                for inner in fs::read_dir(&path).map_err(Self::e(&path))? {
                    let inner = inner.map_err(Self::e(&path))?.path();
                    if !is_temp(&inner) {
                        out.extend(Self::read(&inner)?);
                    }
                }
            } else if !is_temp(&path) {
                out.extend(Self::read(&path)?);
            }
        }
        Ok(out)
    }
}

/// A temp file of an interrupted `write_new` (its name starts with a dot): never a reservation.
fn is_temp(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
}

/// Creates `path` with `data`, or fails if it exists, never leaving it empty or torn: the
/// data goes to a temp file first, which is then hard-linked into place (a link, unlike a
/// rename, refuses an existing name) and removed. A kill leaves at most a temp file, which
/// no reader takes for a reservation.
fn write_new(path: &Path, data: &str) -> Result<(), PortError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp.{}.{nanos}", std::process::id()));
    let written = private::options()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(data.as_bytes()).and_then(|()| f.sync_all()))
        .and_then(|()| fs::hard_link(&tmp, path));
    let _ = fs::remove_file(&tmp);
    written.map_err(Ports::e(path))?;
    if let Some(dir) = path.parent() {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(Ports::e(dir))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaa";

    #[test]
    fn reservations_are_per_generation_and_release_happens_once_under_a_race() {
        let state = tempfile::tempdir().expect("dir");
        let ports = Ports::new(state.path());
        let p1 = ports.reserve(A).expect("reserve");
        assert_eq!(ports.reserve(A).expect("pending reused"), p1);
        ports.assign(A, "gen1").expect("assign");
        let p2 = ports.reserve(A).expect("reserve for the next generation");
        assert_ne!(p1, p2);
        ports.assign(A, "gen2").expect("assign");
        assert_ne!(ports.reserve("bbbbbbbbbbbbbbbb").expect("other"), p1);
        let releases: Vec<Option<u16>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| ports.release(A, "gen1").expect("release")))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("join"))
                .collect()
        });
        assert_eq!(
            releases.iter().flatten().collect::<Vec<_>>(),
            [&p1],
            "{releases:?}"
        );
        assert_eq!(ports.get(A, "gen1").expect("read"), None);
        assert_eq!(
            ports.get(A, "gen2").expect("read"),
            Some(p2),
            "a stale generation's release never frees a newer one's port"
        );
        assert_eq!(ports.release_all(A).expect("all"), vec![p2]);
    }

    #[test]
    fn an_old_per_id_file_reads_as_generation_unknown() {
        let state = tempfile::tempdir().expect("dir");
        let ports = Ports::new(state.path());
        fs::create_dir_all(state.path().join("ports")).expect("mkdir");
        fs::write(state.path().join("ports").join(k(A)), "4242").expect("write");
        assert_ne!(ports.reserve(A).expect("reserve"), 4242, "still taken");
        assert_eq!(ports.get(A, UNKNOWN_GENERATION).expect("read"), Some(4242));
        assert_eq!(
            ports.release_key(A, &k(UNKNOWN_GENERATION)).expect("rel"),
            Some(4242)
        );
    }
}
