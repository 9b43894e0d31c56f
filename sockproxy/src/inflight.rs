//! In-flight work (connections and spliced upgrade streams), so a shutdown can wait for it to
//! finish, up to a deadline, after the listener has closed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

#[derive(Debug, Clone, Default)]
pub struct Inflight(Arc<(AtomicUsize, Notify)>);

/// Held while a piece of work is in flight.
#[derive(Debug)]
pub struct Guard(Inflight);

impl Inflight {
    pub fn enter(&self) -> Guard {
        self.0 .0.fetch_add(1, Ordering::SeqCst);
        Guard(self.clone())
    }

    pub fn count(&self) -> usize {
        self.0 .0.load(Ordering::SeqCst)
    }

    /// Resolves when nothing is in flight.
    pub async fn idle(&self) {
        loop {
            let notified = self.0 .1.notified();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.0 .0 .0.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0 .0 .1.notify_waiters();
        }
    }
}
