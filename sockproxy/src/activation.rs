//! A listening socket handed over by systemd (`deploy/systemd/sockproxy@.socket`): systemd
//! creates the socket with the unit's `SocketMode=`/`SocketGroup=`, so the proxy needs no
//! `chown` and its syscall filter can stay tight, and the socket outlives a restart of the proxy.
//! `listenfd` reads `LISTEN_FDS`/`LISTEN_PID` (and clears them, so no child inherits them).

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    #[error("systemd passed {0} sockets; sockproxy listens on one (one ListenStream= in the .socket unit)")]
    Many(usize),
    #[error("systemd passed a socket that is not a listening Unix stream socket: {0}")]
    NotUnix(std::io::Error),
    #[error("systemd passed the socket at {inherited}, but --listen is {listen}: make them the same path")]
    Elsewhere { listen: PathBuf, inherited: String },
}

/// The socket systemd passed, if it passed one; it must be a listening Unix socket bound at
/// `listen`, so the flag and the unit cannot name two places.
pub fn inherited(listen: &Path) -> Result<Option<UnixListener>, ActivationError> {
    let mut fds = listenfd::ListenFd::from_env();
    match fds.len() {
        0 => return Ok(None),
        1 => {}
        n => return Err(ActivationError::Many(n)),
    }
    let listener = fds
        .take_unix_listener(0)
        .map_err(ActivationError::NotUnix)?
        .ok_or_else(|| ActivationError::NotUnix(std::io::ErrorKind::InvalidInput.into()))?;
    let at = listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_owned));
    if at.as_deref() != Some(listen) {
        return Err(ActivationError::Elsewhere {
            listen: listen.to_owned(),
            inherited: at.map_or_else(
                || "an unnamed socket".to_owned(),
                |p| p.display().to_string(),
            ),
        });
    }
    Ok(Some(listener))
}
