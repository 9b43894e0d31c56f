//! Closing a kept-alive connection that has sat idle: no head begun and every request it carried
//! answered, for a set time. The scanner sees the first half (it frames every head); the
//! server sees the second (it knows when an answer has ended) and reports it through
//! `Answered`.
//!
//! Why here and not hyper's `header_read_timeout`: hyper arms a fresh timer for every head and
//! drops it when the head has come, a registration in tokio's timer wheel and an allocation per
//! request. One sleep per connection, moved on only when it fires, gives the same limit without
//! either; a busy connection's sleep fires about once per limit and is set again from the
//! latest answer's end.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::judge::after;

/// Requests of one connection whose answers have ended, counted by the server as each one's
/// body is dropped (sent whole, or given up), and when the last one ended. hyper reads the
/// next head only when the client sends one, so the end of an answer is when idleness starts,
/// not the scanner's next read.
#[derive(Debug, Clone)]
pub struct Answered(Arc<Counts>);

#[derive(Debug)]
struct Counts {
    answers: AtomicUsize,
    /// Microseconds from `base` to the end of the latest answer.
    last_end: AtomicU64,
    base: Instant,
}

impl Default for Answered {
    fn default() -> Self {
        Self(Arc::new(Counts {
            answers: AtomicUsize::new(0),
            last_end: AtomicU64::new(0),
            base: Instant::now(),
        }))
    }
}

impl Answered {
    pub fn one(&self) {
        let c = &self.0;
        let us = u64::try_from(c.base.elapsed().as_micros()).unwrap_or(u64::MAX);
        c.last_end.store(us, Ordering::Relaxed);
        // Release: whoever reads this count reads the end time stored before it.
        c.answers.fetch_add(1, Ordering::Release);
    }

    /// How many answers have ended, and when the latest did (the connection's start if none).
    fn latest(&self) -> (usize, Instant) {
        let c = &self.0;
        let n = c.answers.load(Ordering::Acquire);
        let us = c.last_end.load(Ordering::Relaxed);
        (n, c.base + Duration::from_micros(us))
    }
}

/// The idle limit of one connection.
#[derive(Debug)]
pub(crate) struct IdleWatch {
    answered: Answered,
    limit: Duration,
    /// Set for when the connection could next have been idle for the limit, as known when it
    /// was last set: it may wake early (an answer ended since, or one was still under way),
    /// and is then moved on, never per request.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The sleep was polled and is waiting: its wake-up stands until it fires (one task, the
    /// connection's, reads between heads), so a read need not poll it again.
    armed: bool,
}

impl IdleWatch {
    pub(crate) fn new(limit: Duration, answered: Answered) -> Self {
        Self {
            answered,
            limit,
            sleep: None,
            armed: false,
        }
    }

    /// Whether the connection has been idle for the limit, given whether the scanner is between
    /// heads and how many heads it let through. Registers the wake-up if not. Called when a
    /// read found nothing to read.
    pub(crate) fn over(
        &mut self,
        between_heads: bool,
        passed: usize,
        cx: &mut Context<'_>,
    ) -> bool {
        let limit = self.limit;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(after(limit))));
        if self.armed && !sleep.is_elapsed() {
            return false;
        }
        self.armed = false;
        while sleep.as_mut().poll(cx).is_ready() {
            let (answers, ended) = self.answered.latest();
            let next = if between_heads && answers == passed {
                let at = ended.checked_add(limit).unwrap_or_else(|| after(limit));
                if Instant::now() >= at {
                    return true;
                }
                at
            } else {
                // A head begun, or an answer under way: look again a limit from now.
                after(limit)
            };
            sleep.as_mut().reset(next);
        }
        self.armed = true;
        false
    }
}

#[cfg(test)]
#[path = "idle_tests.rs"]
mod tests;
