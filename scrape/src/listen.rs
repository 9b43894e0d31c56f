//! An address to serve on, as every listening flag reads it (`--metrics-listen` of both proxies,
//! `lifecycle serve --listen`): a Unix socket path, or `tcp://HOST:PORT` with a numeric IPv4 or
//! bracketed IPv6 address. Parsed once at start-up; the metrics endpoint is bound by `bind`.

use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener};

/// A parsed listening address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenError {
    #[error("{0:?}: expected tcp://HOST:PORT with a numeric IPv4 address or a bracketed IPv6 one (e.g. tcp://127.0.0.1:8002, tcp://[::1]:8002)")]
    Tcp(String),
    #[error("{0:?}: a TCP address is written tcp://{0}; without tcp:// it would be a Unix socket's file name")]
    BareTcp(String),
    #[error("{0:?}: expected a Unix socket path or tcp://HOST:PORT")]
    Empty(String),
}

impl Listen {
    pub fn parse(raw: &str) -> Result<Self, ListenError> {
        if let Some(rest) = raw.strip_prefix("tcp://") {
            // Exactly `a.b.c.d:port` and `[v6]:port`: no names (a name would be resolved at
            // bind time, and an operator should see what is exposed), no port 0.
            return rest
                .parse::<SocketAddr>()
                .ok()
                .filter(|a| a.port() != 0)
                .map(Listen::Tcp)
                .ok_or_else(|| ListenError::Tcp(raw.to_owned()));
        }
        if raw.is_empty() {
            return Err(ListenError::Empty(raw.to_owned()));
        }
        if raw.parse::<SocketAddr>().is_ok() {
            // `127.0.0.1:9101` is a legal file name, and surely not what was meant.
            return Err(ListenError::BareTcp(raw.to_owned()));
        }
        Ok(Listen::Unix(PathBuf::from(raw)))
    }
}

impl Listen {
    pub fn is_tcp(&self) -> bool {
        matches!(self, Listen::Tcp(_))
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Unix(p) => write!(f, "{}", p.display()),
            Listen::Tcp(a) => write!(f, "tcp://{a}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("{0}: something is already listening there")]
    InUse(PathBuf),
    #[error("{0}: exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    #[error("{at}: {source}")]
    Io { at: String, source: io::Error },
}

/// A bound metrics listener. A Unix socket's file is removed when it is dropped.
#[derive(Debug)]
pub enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

impl Listener {
    /// The bound TCP address (the port the system chose for port 0, in tests).
    pub fn local_tcp(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix(..) => None,
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Binds `at`; must run inside a tokio runtime. A stale socket file is replaced only if nothing
/// answers on it; the socket's mode is 0660 (owner and group may scrape), whatever the umask.
pub fn bind(at: &Listen) -> Result<Listener, BindError> {
    let io_err = |source| BindError::Io {
        at: at.to_string(),
        source,
    };
    match at {
        Listen::Tcp(addr) => {
            let std = std::net::TcpListener::bind(addr).map_err(io_err)?;
            std.set_nonblocking(true).map_err(io_err)?;
            Ok(Listener::Tcp(TcpListener::from_std(std).map_err(io_err)?))
        }
        Listen::Unix(path) => {
            clear_stale(path).map_err(|e| match e {
                Stale::InUse => BindError::InUse(path.clone()),
                Stale::NotASocket => BindError::NotASocket(path.clone()),
                Stale::Io(e) => io_err(e),
            })?;
            let l = UnixListener::bind(path).map_err(io_err)?;
            let listener = Listener::Unix(l, path.clone());
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
                .map_err(io_err)?;
            Ok(listener)
        }
    }
}

enum Stale {
    InUse,
    NotASocket,
    Io(io::Error),
}

fn clear_stale(path: &Path) -> Result<(), Stale> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => Err(Stale::InUse),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    std::fs::remove_file(path).map_err(Stale::Io)
                }
                Err(e) => Err(Stale::Io(e)),
            }
        }
        Ok(_) => Err(Stale::NotASocket),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Stale::Io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_table() {
        let ok = |raw: &str, want: Listen| assert_eq!(Listen::parse(raw), Ok(want), "{raw}");
        ok("/run/m.sock", Listen::Unix("/run/m.sock".into()));
        ok("rel.sock", Listen::Unix("rel.sock".into()));
        ok(
            "tcp://127.0.0.1:9101",
            Listen::Tcp("127.0.0.1:9101".parse().expect("addr")),
        );
        ok(
            "tcp://[::1]:9101",
            Listen::Tcp("[::1]:9101".parse().expect("addr")),
        );
        ok(
            "tcp://0.0.0.0:8002",
            Listen::Tcp("0.0.0.0:8002".parse().expect("addr")),
        );
        for bad in [
            "tcp://localhost:9101",
            "tcp://::1:8002",
            "tcp://127.0.0.1",
            "tcp://127.0.0.1:0",
            "tcp://127.0.0.1:99999",
            "tcp://",
            "tcp://[::1]",
        ] {
            assert_eq!(
                Listen::parse(bad),
                Err(ListenError::Tcp(bad.to_owned())),
                "{bad}"
            );
        }
        assert_eq!(
            Listen::parse("127.0.0.1:9101"),
            Err(ListenError::BareTcp("127.0.0.1:9101".into()))
        );
        assert_eq!(Listen::parse(""), Err(ListenError::Empty(String::new())));
    }

    #[tokio::test]
    async fn a_unix_socket_is_replaced_only_when_stale_and_removed_on_drop() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("m.sock");
        let at = Listen::Unix(path.clone());
        let first = bind(&at).expect("binds");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o660);
        assert!(matches!(bind(&at), Err(BindError::InUse(_))));
        // A socket file nobody listens on any more (a crashed process) is replaced.
        let std =
            std::os::unix::net::UnixListener::bind(dir.path().join("stale.sock")).expect("binds");
        drop(std);
        bind(&Listen::Unix(dir.path().join("stale.sock"))).expect("replaces the stale file");
        drop(first);
        assert!(!path.exists());
        std::fs::write(&path, b"x").expect("file");
        assert!(matches!(bind(&at), Err(BindError::NotASocket(_))));
    }
}
