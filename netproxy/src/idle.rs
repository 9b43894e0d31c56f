//! Tunnel idleness: both directions of a tunnel bump one activity clock; a watchdog ends the
//! tunnel when neither side has moved a byte for the idle limit.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Milliseconds since `epoch` of the last byte seen.
#[derive(Debug, Clone)]
pub struct Clock {
    epoch: Instant,
    last: Arc<AtomicU64>,
}

impl Clock {
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records activity now (for relays that move bytes without `Tracked`).
    pub(crate) fn touch(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(now, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(now.saturating_sub(self.last.load(Ordering::Relaxed)))
    }

    /// Resolves once nothing has moved for `limit`.
    pub async fn expired(&self, limit: Duration) {
        loop {
            let idle = self.idle_for();
            if idle >= limit {
                return;
            }
            tokio::time::sleep(limit - idle).await;
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// An I/O object whose reads bump the clock.
#[derive(Debug)]
pub struct Tracked<T> {
    inner: T,
    clock: Clock,
}

impl<T> Tracked<T> {
    pub fn new(inner: T, clock: Clock) -> Self {
        Self { inner, clock }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.clock.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
