//! The provider's clock. Idle expiry is measured on a monotonic clock only, so a step of the
//! wall clock (NTP, an operator) neither reaps fresh warm entries nor keeps expired ones. Tests
//! inject `FakeClock` and step its wall and monotonic parts independently.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Monotonic time since the clock's start; the only time decisions use.
    fn monotonic(&self) -> Duration;
    /// Wall time, for what is shown to people only.
    fn wall(&self) -> SystemTime;
}

#[derive(Debug)]
pub struct SystemClock {
    start: Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        Self {
            start: Instant::now(),
        }
    }
}

impl Clock for SystemClock {
    fn monotonic(&self) -> Duration {
        self.start.elapsed()
    }
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock a test steps by hand.
#[derive(Debug)]
pub struct FakeClock {
    inner: Mutex<(Duration, SystemTime)>,
}

impl Default for FakeClock {
    fn default() -> Self {
        Self {
            inner: Mutex::new((
                Duration::ZERO,
                SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 30),
            )),
        }
    }
}

impl FakeClock {
    pub fn advance(&self, d: Duration) {
        if let Ok(mut g) = self.inner.lock() {
            g.0 += d;
            g.1 += d;
        }
    }
    /// Steps the wall clock only (forward, or back when `back`).
    pub fn step_wall(&self, d: Duration, back: bool) {
        if let Ok(mut g) = self.inner.lock() {
            g.1 = if back { g.1 - d } else { g.1 + d };
        }
    }
}

impl Clock for FakeClock {
    fn monotonic(&self) -> Duration {
        self.inner.lock().map(|g| g.0).unwrap_or_default()
    }
    fn wall(&self) -> SystemTime {
        self.inner
            .lock()
            .map(|g| g.1)
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }
}
