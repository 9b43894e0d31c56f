//! An address to serve on, as every listening flag reads it (`--metrics-listen` of both proxies,
//! `lifecycle serve --listen`): a Unix socket path, or `tcp://HOST:PORT` with a numeric IPv4 or
//! bracketed IPv6 address. Parsed once at start-up, and bound by `bind`: the one place a
//! listening socket's file is made (its stale-file handling, mode and group).

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
    /// A socket that answers is another process's: taking it would leave that one serving
    /// nobody.
    #[error("{0}: another process is serving on this socket; refusing to take it")]
    InUse(PathBuf),
    #[error("{0}: exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    #[error("{at}: setting its group to {gid}: {source}")]
    Group {
        at: PathBuf,
        gid: u32,
        source: io::Error,
    },
    #[error("{at}: setting its mode to {mode:o}: {source}")]
    Mode {
        at: PathBuf,
        mode: u32,
        source: io::Error,
    },
    #[error("{at}: {source}")]
    Io { at: String, source: io::Error },
}

/// A bound listener. A Unix socket's file goes with it (`SocketFile`).
#[derive(Debug)]
pub enum Listener {
    Unix(UnixListener, SocketFile),
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

/// The file of a Unix socket this process made: removed when dropped (or by `remove`, which
/// says whether it could be), unless `keep` hands its removal to the caller.
#[derive(Debug)]
pub struct SocketFile(Option<PathBuf>);

impl SocketFile {
    pub fn path(&self) -> Option<&Path> {
        self.0.as_deref()
    }

    /// Removes the file now.
    pub fn remove(mut self) -> io::Result<()> {
        match self.0.take() {
            Some(path) => std::fs::remove_file(path),
            None => Ok(()),
        }
    }

    /// The file's path; it is no longer removed on drop.
    pub fn keep(mut self) -> Option<PathBuf> {
        self.0.take()
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The metrics endpoint's socket mode: its owner and group may scrape.
pub const METRICS_MODE: u32 = 0o660;

/// Binds `at`; must run inside a tokio runtime. The toolkit's one way to make a listening
/// socket (sockproxy's and `lifecycle serve`'s sockets, every metrics endpoint).
///
/// A Unix socket: a stale socket file (nothing answers on it: a crashed process) is replaced;
/// one that answers, or a file that is not a socket, is refused. The socket is created under the
/// process umask (no group or other write with the usual 022), handed to `group` if given, then
/// opened up to `mode`, whatever the umask: the window before the chmod is never wider than
/// asked. `mode` and `group` mean nothing for TCP.
pub fn bind(at: &Listen, mode: u32, group: Option<u32>) -> Result<Listener, BindError> {
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
            let (l, file) = bind_unix(path, mode, group)?;
            Ok(Listener::Unix(l, file))
        }
    }
}

/// `bind` for a Unix socket: the listener, and its file.
pub fn bind_unix(
    path: &Path,
    mode: u32,
    group: Option<u32>,
) -> Result<(UnixListener, SocketFile), BindError> {
    let io_err = |source| BindError::Io {
        at: path.display().to_string(),
        source,
    };
    clear_stale(path).map_err(|e| match e {
        Stale::InUse => BindError::InUse(path.to_owned()),
        Stale::NotASocket => BindError::NotASocket(path.to_owned()),
        Stale::Io(e) => io_err(e),
    })?;
    let l = UnixListener::bind(path).map_err(io_err)?;
    // Made: removed again if what follows fails.
    let file = SocketFile(Some(path.to_owned()));
    if let Some(gid) = group {
        nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(gid))).map_err(|e| {
            BindError::Group {
                at: path.to_owned(),
                gid,
                source: e.into(),
            }
        })?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|source| {
        BindError::Mode {
            at: path.to_owned(),
            mode,
            source,
        }
    })?;
    Ok((l, file))
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
        let first = bind(&at, METRICS_MODE, None).expect("binds");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o660);
        assert!(matches!(
            bind(&at, METRICS_MODE, None),
            Err(BindError::InUse(_))
        ));
        // A socket file nobody listens on any more (a crashed process) is replaced.
        let std =
            std::os::unix::net::UnixListener::bind(dir.path().join("stale.sock")).expect("binds");
        drop(std);
        bind(&Listen::Unix(dir.path().join("stale.sock")), 0o600, None)
            .expect("replaces the stale file");
        drop(first);
        assert!(!path.exists());
        std::fs::write(&path, b"x").expect("file");
        assert!(matches!(
            bind(&at, METRICS_MODE, None),
            Err(BindError::NotASocket(_))
        ));
    }

    #[tokio::test]
    async fn a_unix_socket_gets_the_mode_and_group_asked_for() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.sock");
        // Our own group: handing a file to it needs no privilege.
        let gid = nix::unistd::getegid().as_raw();
        let l = bind(&Listen::Unix(path.clone()), 0o640, Some(gid)).expect("binds");
        let meta = std::fs::metadata(&path).expect("meta");
        assert_eq!(meta.permissions().mode() & 0o777, 0o640);
        assert_eq!(std::os::unix::fs::MetadataExt::gid(&meta), gid);
        let Listener::Unix(_, file) = l else {
            panic!("a Unix listener");
        };
        // Kept: the caller removes it, not the drop.
        assert_eq!(file.keep().as_deref(), Some(path.as_path()));
        assert!(path.exists());
    }
}
