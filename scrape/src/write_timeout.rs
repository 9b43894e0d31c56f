//! The write-stall timeout of every server in the toolkit (netproxy's `--write-timeout-ms`,
//! `lifecycle serve --write-timeout`): `WriteTimeout` wraps a connection's stream (or its write
//! half) and fails a write that has made no progress for that long, so that a client that sends
//! requests (pipelined, say) and never reads the answers, or takes nothing of a long answer,
//! cannot keep its connection, its slot and its buffers once the socket's buffer is full.
//! hyper has no write timeout of its own. `WriteStalled` is the error it fails with, which
//! `is_write_stall` finds again in hyper's error to log the close; `flagging` also sets a flag
//! the caller reads afterwards (netproxy's exchange line).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// About thirty years: the deadline of a timeout too long to add to now.
const FAR: Duration = Duration::from_secs(86400 * 365 * 30);

/// The cause inside the `io::Error` (kind `TimedOut`) a stalled write fails with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no answer bytes accepted by the client for {0:?}")]
pub struct WriteStalled(pub Duration);

/// A stream whose writes fail once they have been pending for `timeout` without progress.
///
/// The clock starts when a write or flush returns `Pending` and stops at the first one that
/// completes: it measures a stall, not an answer's whole transfer, so a slow reader that keeps
/// taking bytes is never cut off. Reads are never timed: reading a request is the header
/// timeout's business, and a request being served (an acquire waiting on the engine) writes
/// nothing, so no clock runs for it.
#[derive(Debug)]
pub struct WriteTimeout<S> {
    inner: S,
    timeout: Duration,
    /// Allocated at the first stall and reset at the next ones (a `Sleep` must stay pinned).
    sleep: Option<Pin<Box<Sleep>>>,
    /// Whether `sleep` measures the current stall; false once a write has completed.
    armed: bool,
    /// Set when a write stalled past the timeout.
    stalled: Option<Arc<AtomicBool>>,
}

impl<S> WriteTimeout<S> {
    pub fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            sleep: None,
            armed: false,
            stalled: None,
        }
    }

    /// Also sets `stalled` when a write fails for the timeout.
    pub fn flagging(mut self, stalled: Arc<AtomicBool>) -> Self {
        self.stalled = Some(stalled);
        self
    }

    pub fn into_inner(self) -> S {
        self.inner
    }

    /// Runs after a write-side call: a completed one stops the clock; a pending one starts it
    /// (if not running yet) and fails once it has run out. Polling the sleep here registers the
    /// task's waker, so the task is woken when the time is up even if the socket never is.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.armed = false;
            return polled;
        }
        let now = Instant::now();
        // A timeout too long to add is as good as none (the callers cap theirs: an hour).
        let deadline = now.checked_add(self.timeout).unwrap_or(now + FAR);
        let sleep = match (&mut self.sleep, self.armed) {
            (Some(sleep), true) => sleep,
            (Some(sleep), false) => {
                sleep.as_mut().reset(deadline);
                sleep
            }
            (None, _) => self
                .sleep
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        self.armed = true;
        ready!(sleep.as_mut().poll(cx));
        if let Some(flag) = &self.stalled {
            flag.store(true, Ordering::Relaxed);
        }
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            WriteStalled(self.timeout),
        )))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    // Forwarded so that hyper keeps choosing vectored writes for a stream that supports them.
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, polled)
    }

    // Not timed: the connection is being closed anyway, and a Unix socket's shutdown does not
    // wait on the peer.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The `WriteStalled` somewhere in `e`'s chain of causes (hyper wraps the `io::Error` the
/// stream failed with, and an `io::Error`'s `source` skips its own payload, hence the look
/// inside each one).
pub fn is_write_stall(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        let stalled = c
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .is_some_and(|inner| inner.is::<WriteStalled>());
        if stalled || c.is::<WriteStalled>() {
            return true;
        }
        cause = c.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt};

    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn a_write_the_peer_never_reads_fails_timed_out() {
        let (server, _client) = duplex(64);
        let mut w = WriteTimeout::new(server, TIMEOUT);
        // Bounded, so that a write that never fails ends the test instead of hanging it.
        let e = tokio::time::timeout(TIMEOUT * 100, w.write_all(&[b'x'; 4096]))
            .await
            .expect("the write ended")
            .expect_err("a stalled write fails");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(is_write_stall(&e), "{e}");
        assert_eq!(e.to_string(), WriteStalled(TIMEOUT).to_string());
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_taking_bytes_is_never_cut_off() {
        let (server, mut client) = duplex(64);
        let mut w = WriteTimeout::new(server, TIMEOUT);
        // 64 reads of 64 bytes, each after most of the timeout: the transfer takes far longer
        // than the timeout, but no single stall does.
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = [0u8; 64];
            while got < 4096 {
                tokio::time::sleep(TIMEOUT * 9 / 10).await;
                match client.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
            got
        });
        w.write_all(&[b'x'; 4096]).await.expect("never timed out");
        w.flush().await.expect("flushed");
        assert_eq!(reader.await.expect("reader"), 4096);
    }

    #[tokio::test(start_paused = true)]
    async fn reads_are_never_timed_even_after_a_stall() {
        let (server, mut client) = duplex(64);
        let mut w = WriteTimeout::new(server, TIMEOUT);
        // Stall a write for most of the timeout, then let it through: the clock stops.
        let mut buf = [0u8; 64];
        let write = w.write_all(&[b'x'; 128]);
        let drain = async {
            tokio::time::sleep(TIMEOUT / 2).await;
            client.read_exact(&mut buf).await.expect("read");
        };
        let (written, ()) = tokio::join!(write, drain);
        written.expect("written before the timeout");
        // A read with nothing to read waits as long as it takes.
        let mut one = [0u8; 1];
        let read = tokio::time::timeout(TIMEOUT * 10, w.read(&mut one)).await;
        assert!(read.is_err(), "still waiting, not failed: {read:?}");
        client.write_all(b"y").await.expect("client writes");
        assert_eq!(w.read(&mut one).await.expect("read"), 1);
    }

    #[test]
    fn is_write_stall_finds_only_its_own_error() {
        let stalled = io::Error::new(io::ErrorKind::TimedOut, WriteStalled(TIMEOUT));
        assert!(is_write_stall(&stalled));
        assert!(!is_write_stall(&io::Error::from(io::ErrorKind::TimedOut)));
        assert!(!is_write_stall(&io::Error::other("x")));
    }

    #[tokio::test(start_paused = true)]
    async fn progress_resets_the_clock_and_a_stall_sets_the_flag() {
        // A pipe of 64 bytes whose reader reads nothing until told.
        let (mut reader, writer) = duplex(64);
        let flag = Arc::new(AtomicBool::new(false));
        let mut w = WriteTimeout::new(writer, Duration::from_secs(5)).flagging(flag.clone());
        w.write_all(&[0u8; 64]).await.expect("fits");
        // Full: the next write waits; 4 s later the reader takes it all, and the write goes on.
        let drain = async {
            tokio::time::sleep(Duration::from_secs(4)).await;
            let mut sink = [0u8; 64];
            reader.read_exact(&mut sink).await.expect("read");
            reader
        };
        let (wrote, mut reader) = tokio::join!(w.write_all(&[1u8; 64]), drain);
        wrote.expect("progress within the limit");
        assert!(!flag.load(Ordering::Relaxed));
        // Now nobody reads: the write fails at the limit, and says so.
        let err = w.write_all(&[2u8; 1]).await.expect_err("timed out");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(flag.load(Ordering::Relaxed));
        let mut sink = [0u8; 64];
        reader
            .read_exact(&mut sink)
            .await
            .expect("the bytes before are intact");
        assert_eq!(sink, [1u8; 64]);
    }
}
