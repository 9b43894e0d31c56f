//! A listening socket handed over by systemd (socket activation, e.g.
//! `deploy/systemd/sockproxy@.socket`): systemd creates the socket with the unit's
//! `SocketMode=`/`SocketGroup=`, so the program needs no `chown` and its syscall filter can stay
//! tight, and the socket outlives a restart of the program. `listenfd` reads
//! `LISTEN_FDS`/`LISTEN_PID` (and clears them, so no child inherits them). One check for every
//! program that listens (sockproxy, `lifecycle serve`).

use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixListener;

use crate::Listen;

#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    #[error(
        "systemd passed {0} sockets; one is listened on (one ListenStream= in the .socket unit)"
    )]
    Many(usize),
    #[error("systemd passed a socket that cannot be used here: {0}")]
    Unusable(std::io::Error),
    #[error("systemd passed the socket at {inherited}, but --listen is {listen}: make them the same path")]
    Elsewhere { listen: String, inherited: String },
}

impl ActivationError {
    /// Whether the flags and the unit disagree (bad configuration), rather than the socket
    /// failing at run time.
    pub fn is_configuration(&self) -> bool {
        !matches!(self, Self::Unusable(_))
    }
}

/// A socket systemd passed, non-blocking, of the kind `--listen` names.
#[derive(Debug)]
pub enum Inherited {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// The socket systemd passed, if it passed one: it must be a listening socket of the kind and
/// at the address `at` names, so the flag and the unit cannot name two places.
pub fn inherited(at: &Listen) -> Result<Option<Inherited>, ActivationError> {
    let mut fds = listenfd::ListenFd::from_env();
    match fds.len() {
        0 => return Ok(None),
        1 => {}
        n => return Err(ActivationError::Many(n)),
    }
    let elsewhere = |inherited: String| ActivationError::Elsewhere {
        listen: at.to_string(),
        inherited,
    };
    let unusable = ActivationError::Unusable;
    let wrong_kind = || elsewhere("a socket of another kind".into());
    let socket = match at {
        Listen::Unix(path) => {
            let l = fds
                .take_unix_listener(0)
                .map_err(unusable)?
                .ok_or_else(wrong_kind)?;
            let got = l.local_addr().map_err(unusable)?;
            match got.as_pathname() {
                Some(p) if p == path => {}
                Some(p) => return Err(elsewhere(p.display().to_string())),
                None => return Err(elsewhere("an unnamed socket".into())),
            }
            l.set_nonblocking(true).map_err(unusable)?;
            Inherited::Unix(l)
        }
        Listen::Tcp(addr) => {
            let l = fds
                .take_tcp_listener(0)
                .map_err(unusable)?
                .ok_or_else(wrong_kind)?;
            let got: SocketAddr = l.local_addr().map_err(unusable)?;
            if got != *addr {
                return Err(elsewhere(format!("tcp://{got}")));
            }
            l.set_nonblocking(true).map_err(unusable)?;
            Inherited::Tcp(l)
        }
    };
    Ok(Some(socket))
}
