//! Host-port reservations for open-mode sandboxes: `{state_dir}/ports/{k(id)}` holds the port a
//! sandbox was given. A reservation outlives the process (a later teardown releases it), is
//! kept when a teardown fails, and is released exactly once even when two teardowns race.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};

use crate::naming::k;

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

impl Ports {
    pub fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("ports"),
        }
    }

    fn file(&self, id: &str) -> PathBuf {
        self.dir.join(k(id))
    }

    fn e(&self, source: io::Error) -> PortError {
        PortError {
            path: self.dir.clone(),
            source,
        }
    }

    /// The sandbox's reserved port, if any.
    pub fn get(&self, id: &str) -> Result<Option<u16>, PortError> {
        match fs::read_to_string(self.file(id)) {
            Ok(s) => Ok(s.trim().parse().ok()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.e(e)),
        }
    }

    /// Reserves a free loopback port for sandbox `id` (its existing one, if it has one).
    pub fn reserve(&self, id: &str) -> Result<u16, PortError> {
        if let Some(p) = self.get(id)? {
            return Ok(p);
        }
        fs::create_dir_all(&self.dir).map_err(|e| self.e(e))?;
        let taken = self.all()?;
        for _ in 0..64 {
            // The kernel's pick of a free port; the listener closes before the engine binds it.
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())
                .map_err(|e| self.e(e))?
                .port();
            if taken.contains(&port) {
                continue;
            }
            let mut f = match OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(self.file(id))
            {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    return self.get(id)?.ok_or_else(|| self.e(e));
                }
                Err(e) => return Err(self.e(e)),
            };
            f.write_all(port.to_string().as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| self.e(e))?;
            return Ok(port);
        }
        Err(self.e(io::Error::other("no free port found")))
    }

    /// Releases the sandbox's port; `Some(port)` only for the one call that released it.
    pub fn release(&self, id: &str) -> Result<Option<u16>, PortError> {
        let port = self.get(id)?;
        match fs::remove_file(self.file(id)) {
            Ok(()) => Ok(port),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.e(e)),
        }
    }

    fn all(&self) -> Result<Vec<u16>, PortError> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(|e| self.e(e))? {
            let path = entry.map_err(|e| self.e(e))?.path();
            if let Ok(s) = fs::read_to_string(&path) {
                if let Ok(p) = s.trim().parse() {
                    out.push(p);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_is_stable_and_release_happens_once_under_a_race() {
        let state = tempfile::tempdir().expect("dir");
        let ports = Ports::new(state.path());
        let p = ports.reserve("aaaaaaaaaaaaaaaa").expect("reserve");
        assert_eq!(ports.reserve("aaaaaaaaaaaaaaaa").expect("again"), p);
        assert_ne!(ports.reserve("bbbbbbbbbbbbbbbb").expect("other"), p);
        let releases: Vec<Option<u16>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| ports.release("aaaaaaaaaaaaaaaa").expect("release")))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("join"))
                .collect()
        });
        assert_eq!(
            releases.iter().filter(|r| r.is_some()).count(),
            1,
            "{releases:?}"
        );
        assert_eq!(ports.get("aaaaaaaaaaaaaaaa").expect("read"), None);
    }
}
