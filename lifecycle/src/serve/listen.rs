//! Where `lifecycle serve` listens: a Unix socket path, or `tcp://HOST:PORT` (IPv4 or a
//! bracketed IPv6 address, for a gateway in another container that can hold no socket). Parsed
//! once at start-up; the accept loop sees one `Listener` and one `Conn` type either way, so
//! every limit (timeouts, connection cap, slow clients) is the same for both.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// A parsed `--listen`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenError {
    #[error("{0:?}: expected tcp://HOST:PORT with a numeric IPv4 address or a bracketed IPv6 one (e.g. tcp://127.0.0.1:8002, tcp://[::1]:8002)")]
    Tcp(String),
    #[error("{0:?}: expected a Unix socket path or tcp://HOST:PORT")]
    Empty(String),
}

impl Listen {
    pub fn parse(raw: &str) -> Result<Self, ListenError> {
        if let Some(rest) = raw.strip_prefix("tcp://") {
            // `SocketAddr` takes exactly `a.b.c.d:port` and `[v6]:port`: no names (a name
            // would be resolved at bind time, and an operator should see what is exposed).
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
        Ok(Listen::Unix(PathBuf::from(raw)))
    }

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

/// A bound listener of either kind.
#[derive(Debug)]
pub enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

impl Listener {
    /// The next client and how to name it in a log line (its address, or `unix`).
    pub async fn accept(&self) -> io::Result<(Conn, String)> {
        match self {
            Listener::Unix(l) => {
                let (s, _) = l.accept().await?;
                Ok((Conn::Unix(s), "unix".to_owned()))
            }
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                // Answers are small and each one is a whole request's reply: no need to wait
                // for more bytes to fill a segment.
                let _ = s.set_nodelay(true);
                Ok((Conn::Tcp(s), peer.to_string()))
            }
        }
    }

    /// The bound TCP address (with the port the system chose for port 0 in tests).
    pub fn local_tcp(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix(_) => None,
        }
    }
}

impl From<UnixListener> for Listener {
    fn from(l: UnixListener) -> Self {
        Listener::Unix(l)
    }
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Self {
        Listener::Tcp(l)
    }
}

/// One client connection of either kind.
#[derive(Debug)]
pub enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tcp(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tcp(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Unix(s) => Pin::new(s).poll_flush(cx),
            Conn::Tcp(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_table() {
        let ok = |raw: &str, want: Listen| assert_eq!(Listen::parse(raw), Ok(want), "{raw}");
        ok("/run/x.sock", Listen::Unix("/run/x.sock".into()));
        ok("rel.sock", Listen::Unix("rel.sock".into()));
        ok(
            "tcp://127.0.0.1:8002",
            Listen::Tcp("127.0.0.1:8002".parse().expect("addr")),
        );
        ok(
            "tcp://0.0.0.0:8002",
            Listen::Tcp("0.0.0.0:8002".parse().expect("addr")),
        );
        ok(
            "tcp://[::1]:8002",
            Listen::Tcp("[::1]:8002".parse().expect("addr")),
        );
        for bad in [
            "tcp://localhost:8002",
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
        assert_eq!(Listen::parse(""), Err(ListenError::Empty(String::new())));
    }
}
