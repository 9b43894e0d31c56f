//! The audit trail of a request: one `decision` line when the decision is made (a refusal, or
//! an allow after the name and every answer were vetted, before anything is dialed or any byte
//! goes upstream), and one line when it ends (`request ended`; a tunnel's is `tunnel closed`):
//! the address that won, bytes each way, duration and how it ended. The end line is written
//! when the last holder of the `Exchange` lets go (the pipeline, the request body going up, the
//! response body going down), so a client that leaves early still produces it.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::refusal::Refusal;

/// The most a log line or a refusal's body shows of a host or method the client wrote: a
/// canonical name is at most 253 bytes, so only a refused target is ever cut (a 5 KB one was
/// written whole, once per refusal). The same bound as a refused head's request line
/// (`headguard::RequestLine`).
pub const SHOWN_AT_MOST: usize = 256;

/// `s` cut to `SHOWN_AT_MOST` bytes (on a character boundary).
pub fn shown(s: &str) -> &str {
    if s.len() <= SHOWN_AT_MOST {
        return s;
    }
    let mut end = SHOWN_AT_MOST;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// What is known of a request at decision time.
#[derive(Debug, Default)]
pub struct Trace {
    pub client: Option<SocketAddr>,
    pub method: String,
    pub raw_host: String,
    pub host: String,
    pub port: u16,
    pub rule: Option<String>,
    pub resolved: Vec<IpAddr>,
    /// The decision line is written (once).
    pub decided: bool,
}

impl Trace {
    fn client(&self) -> String {
        self.client.map(|c| c.to_string()).unwrap_or_default()
    }

    /// The allow decision, before the dial.
    pub fn allow(&mut self) {
        self.decided = true;
        tracing::info!(
            client = %self.client(),
            method = %shown(&self.method),
            raw_host = %shown(&self.raw_host),
            host = %shown(&self.host),
            port = self.port,
            rule = self.rule.as_deref().unwrap_or(""),
            resolved = ?self.resolved,
            decision = "allow",
            reason = "allowed",
            "decision"
        );
    }

    /// A refusal. Made after an allow (the dial or the upstream failed), it is the end line's
    /// to say, not a second decision.
    pub fn deny(&mut self, r: &Refusal) {
        if std::mem::replace(&mut self.decided, true) {
            return;
        }
        tracing::info!(
            client = %self.client(),
            method = %shown(&self.method),
            raw_host = %shown(&self.raw_host),
            host = %shown(&self.host),
            port = self.port,
            rule = self.rule.as_deref().unwrap_or(""),
            resolved = ?self.resolved,
            decision = "deny",
            reason = %r.reason.text(),
            // The bounded word (`X-Netproxy-Error`'s): what lifecycle counts refusals by.
            kind = r.reason.kind(),
            status = r.status().as_u16(),
            "decision"
        );
    }
}

/// An allowed request from its decision to its end; writes the end line when dropped.
#[derive(Debug)]
pub struct Exchange {
    client: String,
    method: String,
    host: String,
    start: Instant,
    chosen: Mutex<Option<SocketAddr>>,
    up: AtomicU64,
    down: AtomicU64,
    status: AtomicU16,
    ended: Mutex<Option<String>>,
    armed: AtomicBool,
    /// The request body stalled past its idle timeout.
    pub body_timed_out: AtomicBool,
    /// The request body has been sent whole (or there is none).
    pub request_done: tokio::sync::Notify,
    /// The client connection's write-timeout flag (`scrape::write_timeout`), if it has one.
    write_timed_out: std::sync::OnceLock<std::sync::Arc<AtomicBool>>,
    /// Told when the exchange is dropped (its end line written): its watchdog stands down.
    pub over: std::sync::Arc<tokio::sync::Notify>,
}

impl Exchange {
    pub fn new(trace: &Trace) -> Self {
        Self {
            client: trace.client(),
            method: shown(&trace.method).to_owned(),
            host: shown(&trace.host).to_owned(),
            start: Instant::now(),
            chosen: Mutex::new(None),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            status: AtomicU16::new(0),
            ended: Mutex::new(None),
            armed: AtomicBool::new(true),
            body_timed_out: AtomicBool::new(false),
            request_done: tokio::sync::Notify::new(),
            over: std::sync::Arc::default(),
            write_timed_out: std::sync::OnceLock::new(),
        }
    }

    /// When this flag is set (a write to the client timed out), the end line says so.
    pub fn cut_by_writes(&self, flag: std::sync::Arc<AtomicBool>) {
        let _ = self.write_timed_out.set(flag);
    }

    /// The client's address, as its dial budget is kept (`dial::Budget`).
    pub fn client_ip(&self) -> Option<IpAddr> {
        self.client.parse::<SocketAddr>().ok().map(|a| a.ip())
    }

    pub fn chosen(&self, addr: SocketAddr) {
        if let Ok(mut c) = self.chosen.lock() {
            *c = Some(addr);
        }
    }

    pub fn status(&self, status: http::StatusCode) {
        self.status.store(status.as_u16(), Ordering::Relaxed);
    }

    /// How it ended; the first word stays.
    pub fn end(&self, how: impl Into<String>) {
        if let Ok(mut e) = self.ended.lock() {
            e.get_or_insert_with(|| how.into());
        }
    }

    pub fn count(&self, up: bool, n: u64) {
        let c = if up { &self.up } else { &self.down };
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// The end line is someone else's (a tunnel writes `tunnel closed`).
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::Relaxed);
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        // A stored permit if the watchdog is not waiting yet: it stands down either way.
        self.over.notify_one();
        if !self.armed.load(Ordering::Relaxed) {
            return;
        }
        let chosen = self
            .chosen
            .lock()
            .ok()
            .and_then(|c| *c)
            .map(|a| a.to_string())
            .unwrap_or_default();
        let ended = self
            .ended
            .lock()
            .ok()
            .and_then(|e| e.clone())
            .unwrap_or_else(|| {
                let stalled = self
                    .write_timed_out
                    .get()
                    .is_some_and(|f| f.load(Ordering::Relaxed));
                // Nobody said how: the client took nothing for the write timeout, or went
                // away before the answer was through.
                if stalled {
                    "write_timeout"
                } else {
                    "client_gone"
                }
                .to_owned()
            });
        tracing::info!(
            client = %self.client,
            method = %self.method,
            host = %self.host,
            chosen = %chosen,
            status = self.status.load(Ordering::Relaxed),
            bytes_up = self.up.load(Ordering::Relaxed),
            bytes_down = self.down.load(Ordering::Relaxed),
            ended = %ended,
            duration_ms = self.start.elapsed().as_secs_f64() * 1000.0,
            "request ended"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_cuts_at_the_bound_on_a_character_boundary() {
        let at = SHOWN_AT_MOST;
        for (s, want) in [
            ("a.test".to_owned(), 6),
            ("a".repeat(at), at),
            ("a".repeat(at + 1), at),
            ("a".repeat(5000), at),
            // A two-byte character across the bound is left out whole.
            (format!("{}é", "a".repeat(at - 1)), at - 1),
        ] {
            assert_eq!(shown(&s).len(), want, "{} bytes", s.len());
            assert!(s.starts_with(shown(&s)));
        }
    }
}
