//! Zero-copy tunnel relay (Linux): the bytes of a CONNECT tunnel go socket → pipe → socket with
//! `splice(2)`, one pipe per direction, so they never enter this process's memory. This module
//! owns the pipes, the readiness loop around `splice` (every `EAGAIN` waits on tokio's readiness
//! of the socket that caused it, never spins), and the half-close: when one side's read ends,
//! the other side's write is shut down and the other direction runs on until it ends too.
//!
//! It only moves bytes. Which tunnels it gets, the idle timeout that races it and the log line
//! are `tunnel`'s; it reports progress through `Clock` (activity) and `Moved` (counts),
//! which stay readable after the relay future is dropped by the idle timer.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use nix::sys::socket::{shutdown, Shutdown};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::idle::Clock;

/// What a pipe grows to once a tunnel turns out to carry bulk data (a fill took at least half
/// of it). Every `splice` moves at most one pipe's worth, so a larger pipe means fewer system
/// calls per byte; 1 MiB is Linux's default `fs/pipe-max-size`. Pipes start at the kernel's
/// default (16 pages) because their capacity counts against a per-user budget
/// (`fs/pipe-user-pages-soft`, 64 MiB by default, shared by every process of the user, e.g.
/// `nobody` in containers): past it the kernel refuses to grow a pipe and makes new ones with
/// two pages. Either way the pipe still works, only with more calls.
const GROWN: i32 = 1 << 20;

/// One direction's kernel buffer: the read and write ends of a non-blocking pipe.
#[derive(Debug)]
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Its capacity in bytes: the most one `splice` into it can move.
    size: usize,
    /// Growing is tried once.
    grown: bool,
}

impl Pipe {
    fn new() -> io::Result<Self> {
        // Non-blocking ends: a `splice` must never park a runtime thread in the kernel.
        let (read, write) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        let size = fcntl(write.as_raw_fd(), FcntlArg::F_GETPIPE_SZ)?;
        Ok(Self {
            read,
            write,
            size: usize::try_from(size).unwrap_or(0).max(4096),
            grown: false,
        })
    }

    /// Called with the pipe empty, after a fill of `got` bytes.
    fn fitted(&mut self, got: usize) {
        if self.grown || got < self.size / 2 {
            return;
        }
        self.grown = true;
        if let Ok(size) = fcntl(self.write.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(GROWN)) {
            self.size = usize::try_from(size).unwrap_or(self.size).max(self.size);
        }
    }
}

/// The two pipes of one tunnel. Made before the client's connection is taken out of hyper, so
/// running out of descriptors leaves the tunnel on the copying path instead of failing it.
#[derive(Debug)]
pub struct Pipes {
    up: Pipe,
    down: Pipe,
}

impl Pipes {
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            up: Pipe::new()?,
            down: Pipe::new()?,
        })
    }
}

/// Bytes delivered so far, per direction (`up`: client → upstream).
#[derive(Debug, Default)]
pub struct Moved {
    pub up: AtomicU64,
    pub down: AtomicU64,
}

/// Relays between `client` and `upstream` until both directions have ended (or either fails).
/// `pending`: bytes the client sent that were already read from its socket (past the CONNECT
/// head); they go upstream before anything else.
pub async fn relay(
    client: &TcpStream,
    pending: &[u8],
    upstream: &TcpStream,
    pipes: &mut Pipes,
    clock: &Clock,
    moved: &Moved,
) -> io::Result<()> {
    let Pipes {
        up: up_pipe,
        down: down_pipe,
    } = pipes;
    let up = async {
        send_all(upstream, pending).await?;
        moved.up.fetch_add(pending.len() as u64, Ordering::Relaxed);
        pump(client, upstream, up_pipe, clock, &moved.up).await
    };
    let down = pump(upstream, client, down_pipe, clock, &moved.down);
    // An error either way ends the whole tunnel, as `copy_bidirectional` does.
    tokio::try_join!(up, down).map(|_| ())
}

/// Writes `data` to `to` in full (only the few bytes hyper read ahead: no pipe needed).
async fn send_all(to: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        to.writable().await?;
        match to.try_write(data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One direction: fill the pipe from `from`, drain it into `to`, until `from` ends; then shut
/// down `to`'s write side so its peer sees the end too.
///
/// The pipe is only filled when empty, so an `EAGAIN` while filling can only mean `from` has
/// nothing to read, and one while draining only that `to` cannot take more: each is answered by
/// waiting on that socket's readiness (`async_io` clears it and waits; it also counts against
/// tokio's cooperative budget, so a fast tunnel cannot starve other tasks on its thread).
///
/// Unlike `send`, `splice` into a socket whose peer is gone raises `SIGPIPE`; Rust programs
/// ignore it from the start, so it comes back as an `EPIPE` error and ends the tunnel.
async fn pump(
    from: &TcpStream,
    to: &TcpStream,
    pipe: &mut Pipe,
    clock: &Clock,
    moved: &AtomicU64,
) -> io::Result<()> {
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    loop {
        let got = from
            .async_io(Interest::READABLE, || {
                splice(
                    from.as_fd(),
                    None,
                    pipe.write.as_fd(),
                    None,
                    pipe.size,
                    flags,
                )
                .map_err(io::Error::from)
            })
            .await?;
        if got == 0 {
            break;
        }
        clock.touch();
        let mut left = got;
        while left > 0 {
            let sent = to
                .async_io(Interest::WRITABLE, || {
                    splice(pipe.read.as_fd(), None, to.as_fd(), None, left, flags)
                        .map_err(io::Error::from)
                })
                .await?;
            if sent == 0 {
                // Cannot happen with bytes in the pipe; never loop on it.
                return Err(io::ErrorKind::WriteZero.into());
            }
            left -= sent;
            moved.fetch_add(sent as u64, Ordering::Relaxed);
            // A slow reader draining a full pipe is activity too: a pipe can hold 16 times
            // what the copying path buffers, so fills alone could be further apart than the
            // idle limit while bytes are still moving.
            clock.touch();
        }
        pipe.fitted(got);
    }
    shutdown(to.as_raw_fd(), Shutdown::Write)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A connected loopback pair.
    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let a = TcpStream::connect(l.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (b, _) = l.accept().await.expect("accept");
        (a, b)
    }

    #[test]
    fn a_pipe_grows_once_a_fill_takes_half_of_it() {
        let mut p = Pipe::new().expect("pipe");
        let start = p.size;
        assert!(start >= 4096, "{start}");
        p.fitted(start / 2 - 1);
        assert_eq!(p.size, start, "small fills leave it alone");
        p.fitted(start / 2);
        // The kernel may refuse (a user past its pipe budget); then it keeps working as it was.
        assert!(p.grown && p.size >= start, "{} from {start}", p.size);
        p.fitted(p.size);
        assert!(p.size <= GROWN as usize, "grows once, to at most {GROWN}");
    }

    #[tokio::test]
    async fn pending_bytes_go_first_and_both_directions_half_close() {
        // client_peer ⇄ [client | relay | upstream] ⇄ upstream_peer
        let (mut client_peer, client) = pair().await;
        let (upstream, mut upstream_peer) = pair().await;
        let mut pipes = Pipes::new().expect("pipes");
        let (clock, moved) = (Clock::new(), Moved::default());
        let relay = relay(&client, b"early:", &upstream, &mut pipes, &clock, &moved);
        let peers = async {
            client_peer.write_all(b"late").await.expect("write");
            client_peer.shutdown().await.expect("shutdown");
            let mut got = Vec::new();
            upstream_peer.read_to_end(&mut got).await.expect("read");
            assert_eq!(got, b"early:late");
            // The client's end is half-closed only: the answer still reaches it.
            upstream_peer.write_all(b"answer").await.expect("write");
            upstream_peer.shutdown().await.expect("shutdown");
            let mut back = Vec::new();
            client_peer.read_to_end(&mut back).await.expect("read");
            assert_eq!(back, b"answer");
        };
        let (r, ()) = tokio::join!(relay, peers);
        r.expect("relay ends cleanly");
        assert_eq!(moved.up.load(Ordering::Relaxed), 10);
        assert_eq!(moved.down.load(Ordering::Relaxed), 6);
    }
}
