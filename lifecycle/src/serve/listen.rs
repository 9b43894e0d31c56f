//! Where `lifecycle serve` listens: a Unix socket path, or `tcp://HOST:PORT` (IPv4 or a
//! bracketed IPv6 address, for a gateway in another container that can hold no socket), parsed
//! once at start-up by `scrape::Listen` (the toolkit's one reading of a listening address); the
//! accept loop sees one `Listener` and one `Conn` type either way, so every limit (timeouts,
//! connection cap, slow clients) is the same for both.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// A parsed `--listen`: the address type every listening flag of the toolkit shares.
pub use scrape::{Listen, ListenError};

/// A bound listener of either kind.
#[derive(Debug)]
pub enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// Who is on the other end of a connection: how a log line names it, and the address the cap
/// on connections that have not shown the key counts by (`gate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// `ADDRESS:PORT`, or `unix`.
    pub shown: String,
    /// The client's IP address; on a Unix socket its user (`uid:N`, from the kernel's peer
    /// credentials), so that another local user's connections are counted apart from the
    /// gateway's.
    pub address: String,
}

impl Listener {
    /// The next client and who it is.
    pub async fn accept(&self) -> io::Result<(Conn, Peer)> {
        match self {
            Listener::Unix(l) => {
                let (s, _) = l.accept().await?;
                let address = s
                    .peer_cred()
                    .map(|c| format!("uid:{}", c.uid()))
                    .unwrap_or_else(|_| "unix".to_owned());
                let peer = Peer {
                    shown: "unix".to_owned(),
                    address,
                };
                Ok((Conn::Unix(s), peer))
            }
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                // Answers are small and each one is a whole request's reply: no need to wait
                // for more bytes to fill a segment.
                let _ = s.set_nodelay(true);
                let peer = Peer {
                    shown: peer.to_string(),
                    address: super::gate::peer_address(peer.ip()),
                };
                Ok((Conn::Tcp(s), peer))
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

/// A socket `scrape::bind` made; its file is `cmd::run`'s to remove, at the end.
impl From<scrape::Listener> for Listener {
    fn from(l: scrape::Listener) -> Self {
        match l {
            scrape::Listener::Unix(l, file) => {
                let _ = file.keep();
                Listener::Unix(l)
            }
            scrape::Listener::Tcp(l) => Listener::Tcp(l),
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
