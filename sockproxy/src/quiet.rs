//! A Unix stream its event loop is woken for only when there is something to read (or the other
//! end has gone), and watched for room to write only once a write would have blocked.
//!
//! Why not tokio's `UnixStream`: it asks epoll for readability and writability from the start,
//! and on a Unix stream socket the kernel reports "writable" again every time the other end
//! reads what was written. So each answer a client read, and each request the engine read,
//! woke the loop with nothing to do: strace of a proxied `HEAD /_ping` showed three `epoll_wait`
//! returns where two carried work (the third only `EPOLLOUT` on the client's socket), four when
//! the engine read the request well before answering. A wake-up while the loop sleeps is a
//! context switch and a system call, several µs against a request's 12-23 µs of CPU.
//!
//! Writes go straight to the socket. Only when one would block is writability watched, through
//! a second descriptor of the same socket (`dup`: epoll keys a watch by descriptor, and tokio
//! cannot change a registration's interest), kept for the rest of the stream: a stream that
//! filled its socket buffer once is the streaming kind, and a watch set up and torn down per
//! blocked write would cost four system calls each time.
//!
//! Reads go through a per-thread buffer that is zeroed once, then copied into the caller's: a
//! safe read into uninitialised memory would zero the caller's whole free space on every read
//! (8 KiB or more), where the copy is of the bytes read.

use std::cell::RefCell;
use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

#[cfg(test)]
use bytes::BytesMut;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// Bytes read per system call at most (the engine connection's read size).
const SCRATCH: usize = 64 * 1024;

thread_local! {
    static BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH].into_boxed_slice());
}

/// A whole stream, split into its halves by the connections `server` serves.
#[derive(Debug)]
pub struct QuietStream {
    fd: Arc<AsyncFd<UnixStream>>,
    room: Room,
}

/// The reading half of a split stream.
#[derive(Debug)]
pub struct QuietRead {
    fd: Arc<AsyncFd<UnixStream>>,
}

/// The writing half of a split stream. As tokio's own write half, dropping it shuts the
/// stream's writing direction down, so the other end reads its end even while the reading half
/// lives on.
#[derive(Debug)]
pub struct QuietWrite {
    fd: Arc<AsyncFd<UnixStream>>,
    room: Room,
}

/// The watch for room to write, once a write has blocked.
#[derive(Debug, Default)]
struct Room(Option<AsyncFd<OwnedFd>>);

impl QuietStream {
    /// Watches `stream`, which must be in non-blocking mode (as `tokio::net::UnixStream::
    /// into_std` leaves it), on the current event loop.
    pub fn new(stream: UnixStream) -> io::Result<Self> {
        Ok(Self {
            fd: Arc::new(watch(stream, Interest::READABLE)?),
            room: Room::default(),
        })
    }

    pub fn into_split(self) -> (QuietRead, QuietWrite) {
        let read = QuietRead {
            fd: self.fd.clone(),
        };
        (
            read,
            QuietWrite {
                fd: self.fd,
                room: self.room,
            },
        )
    }

    /// Appends what the socket has to `buf` (up to 64 KiB); `Ok(0)` at its end. Only the tests
    /// read a whole stream now that engine connections are hyper's.
    #[cfg(test)]
    pub fn poll_fill(&self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<usize>> {
        // Room for a whole read first, as the connection's reads into `buf` itself reserved
        // before: a long answer then lands in one region per read, not regrown piece by piece.
        buf.reserve(SCRATCH);
        poll_read_with(&self.fd, cx, SCRATCH, |got| buf.extend_from_slice(got))
    }
}

/// Registers `inner` with the current loop for `interest`. tokio 1.54 deprecated the safe
/// constructor in favour of an `unsafe` one (tokio#8587), whose contract is that the descriptor
/// stays open and the same for as long as the `AsyncFd` lives: a type whose `as_raw_fd` could
/// change, or whose descriptor could be closed through `get_mut`, would break it. Here the
/// `AsyncFd` owns a `UnixStream` or an `OwnedFd`, whose descriptor is fixed and closed only
/// when it is dropped, after the `AsyncFd` has deregistered it; nothing here calls `get_mut`.
/// So the contract holds, and the safe call is kept (the workspace forbids `unsafe`).
fn watch<T: std::os::fd::AsRawFd>(inner: T, interest: Interest) -> io::Result<AsyncFd<T>> {
    #[allow(deprecated)]
    AsyncFd::with_interest(inner, interest)
}

/// Reads at most `max` bytes once the socket is readable and hands them to `put`.
fn poll_read_with(
    fd: &AsyncFd<UnixStream>,
    cx: &mut Context<'_>,
    max: usize,
    mut put: impl FnMut(&[u8]),
) -> Poll<io::Result<usize>> {
    if max == 0 {
        return Poll::Ready(Ok(0));
    }
    loop {
        let mut ready = ready!(fd.poll_read_ready(cx))?;
        let read = BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            let n = max.min(buf.len());
            let scratch = &mut buf[..n];
            // `try_io` forgets the readiness on `WouldBlock`, so the next poll waits for epoll.
            match ready.try_io(|s| s.get_ref().read(scratch)) {
                Ok(Ok(got)) => {
                    // Less than asked for: the socket is drained, as tokio's own streams also
                    // assume, which saves the read that would only say so. Bytes that arrive
                    // meanwhile are a newer event, which this does not clear.
                    if got > 0 && got < n {
                        ready.clear_ready();
                    }
                    put(&scratch[..got]);
                    Some(Ok(got))
                }
                Ok(Err(e)) => Some(Err(e)),
                Err(_would_block) => None,
            }
        });
        if let Some(result) = read {
            return Poll::Ready(result);
        }
    }
}

impl Room {
    /// Writes with `write`, straight away; after a write that would block, once epoll says
    /// there is room.
    fn poll_write(
        &mut self,
        fd: &AsyncFd<UnixStream>,
        cx: &mut Context<'_>,
        mut write: impl FnMut(&UnixStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            if let Some(watch) = &self.0 {
                let mut ready = ready!(watch.poll_write_ready(cx))?;
                match ready.try_io(|_| write(fd.get_ref())) {
                    Ok(result) => return Poll::Ready(result),
                    Err(_would_block) => continue,
                }
            }
            match write(fd.get_ref()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let dup = fd.get_ref().as_fd().try_clone_to_owned()?;
                    // Added to epoll with room already there, the watch reports it at once.
                    self.0 = Some(watch(dup, Interest::WRITABLE)?);
                }
                result => return Poll::Ready(result),
            }
        }
    }
}

fn shutdown(fd: &AsyncFd<UnixStream>) -> Poll<io::Result<()>> {
    match fd.get_ref().shutdown(Shutdown::Write) {
        // Already gone: nothing more can be written either way.
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Poll::Ready(Ok(())),
        result => Poll::Ready(result),
    }
}

impl AsyncRead for QuietRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let max = buf.remaining();
        ready!(poll_read_with(&self.fd, cx, max, |got| buf.put_slice(got)))?;
        Poll::Ready(Ok(()))
    }
}

/// The same writes for the whole stream and its writing half.
macro_rules! quiet_write {
    ($t:ty) => {
        impl AsyncWrite for $t {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                let this = self.get_mut();
                this.room.poll_write(&this.fd, cx, |mut s| s.write(buf))
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                let this = self.get_mut();
                this.room
                    .poll_write(&this.fd, cx, |mut s| s.write_vectored(bufs))
            }

            fn is_write_vectored(&self) -> bool {
                true
            }

            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }

            fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                shutdown(&self.fd)
            }
        }
    };
}
quiet_write!(QuietStream);
quiet_write!(QuietWrite);

impl Drop for QuietWrite {
    fn drop(&mut self) {
        let _ = shutdown(&self.fd);
    }
}

#[cfg(test)]
#[path = "quiet_tests.rs"]
mod tests;
