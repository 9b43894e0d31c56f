//! The client's write side with a limit on how long one write may wait: a client that takes
//! nothing (its receive window full) for `--write-timeout-ms` gets the write failed with
//! `TimedOut`, so hyper drops the connection and the exchange ends with `write_timeout`
//! instead of holding its slot, its upstream connection and its buffers for as long as the
//! client likes. The clock runs only while a write is blocked; any progress resets it.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::time::Sleep;

#[derive(Debug)]
pub struct TimedWrite<W> {
    inner: W,
    limit: Duration,
    /// Made once, on the first write that waits, and reset for each wait after: a client
    /// under backpressure waits often, and each wait must not cost an allocation.
    timer: Option<Pin<Box<Sleep>>>,
    /// The timer runs for the write waiting now.
    running: bool,
    /// Set when a write timed out (the exchange's end line reads it).
    timed_out: Arc<AtomicBool>,
}

impl<W> TimedWrite<W> {
    pub fn new(inner: W, limit: Duration, timed_out: Arc<AtomicBool>) -> Self {
        Self {
            inner,
            limit,
            timer: None,
            running: false,
            timed_out,
        }
    }

    pub fn into_inner(self) -> W {
        self.inner
    }

    /// Whether a blocked write has waited past the limit (registers the wake-up if not).
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let limit = self.limit;
        let t = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if !std::mem::replace(&mut self.running, true) {
            t.as_mut().reset(tokio::time::Instant::now() + limit);
        }
        if t.as_mut().poll(cx).is_ready() {
            self.timed_out.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }

    fn judge<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match r {
            Poll::Ready(r) => {
                self.running = false;
                Poll::Ready(r)
            }
            Poll::Pending if self.expired(cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took nothing for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for TimedWrite<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.judge(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.judge(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.judge(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_takes_fails_at_the_limit_and_progress_resets_it() {
        // A pipe of 64 bytes whose reader reads nothing until told.
        let (mut reader, writer) = tokio::io::duplex(64);
        let flag = Arc::new(AtomicBool::new(false));
        let mut w = TimedWrite::new(writer, Duration::from_secs(5), flag.clone());
        w.write_all(&[0u8; 64]).await.expect("fits");
        // Full: the next write waits; 4 s later the reader takes it all, and the write goes on.
        let drain = async {
            tokio::time::sleep(Duration::from_secs(4)).await;
            let mut sink = [0u8; 64];
            tokio::io::AsyncReadExt::read_exact(&mut reader, &mut sink)
                .await
                .expect("read");
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
        tokio::io::AsyncReadExt::read_exact(&mut reader, &mut sink)
            .await
            .expect("the bytes before are intact");
        assert_eq!(sink, [1u8; 64]);
    }
}
