//! A client's connection as hyper is given it: the socket's read half through the
//! `framing::Scanner`, joined with its write half. A tunnel takes the socket back out of it
//! (`client_socket`) to splice; after a refused head, dropping it drains what the client is
//! still sending before the socket closes.

use hyper_util::rt::TokioIo;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
#[cfg(any(target_os = "linux", target_os = "android"))]
use tokio::net::TcpStream;

use crate::framing::Scanner;

/// Exactly what hyper serves a client connection on (see `server::connection`): the type a tunnel
/// downcasts its `Upgraded` to, to reach the client's socket.
pub(crate) type ClientIo = TokioIo<tokio::io::Join<ClientRead, ClientWrite>>;

/// The write side hyper is given: the client's socket with a limit on a write nobody takes.
pub(crate) type ClientWrite = scrape::WriteTimeout<OwnedWriteHalf>;

/// The read side hyper is given: the client's socket through the `Scanner`, drained on drop
/// after a refused head (see `headguard::ClientRead`).
pub(crate) type ClientRead = headguard::ClientRead<OwnedReadHalf>;

/// A client's socket taken back out of hyper: the two halves of its one `TcpStream`.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[derive(Debug)]
pub(crate) struct ClientSocket {
    read: OwnedReadHalf,
    // Held, not used: dropping it would shut the socket's write side down early.
    _write: OwnedWriteHalf,
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl ClientSocket {
    pub(crate) fn stream(&self) -> &TcpStream {
        self.read.as_ref()
    }
}

/// The client's socket back out of an upgraded connection, with every byte already read from
/// it that hyper did not consume, in order: hyper's read-ahead, then what the `Scanner` had
/// judged but hyper had not read yet (in practice nothing; taking it keeps the order from
/// depending on that). The connection comes back untouched when it is not a `ClientIo`.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn client_socket(
    upgraded: hyper::upgrade::Upgraded,
) -> Result<Option<(ClientSocket, Vec<u8>)>, hyper::upgrade::Upgraded> {
    let parts = upgraded.downcast::<ClientIo>()?;
    let (mut reader, write) = parts.io.into_inner().into_inner();
    let write = write.into_inner();
    // Always there: only a drop takes the scanner out.
    let Some((read, rest)) = reader.take().map(Scanner::into_parts) else {
        return Ok(None);
    };
    let mut pending = parts.read_buf.to_vec();
    pending.extend_from_slice(&rest);
    Ok(Some((
        ClientSocket {
            read,
            _write: write,
        },
        pending,
    )))
}
