//! The one log line per decision. In the plain format written to a file or the journal (how the
//! proxy is deployed) it is formatted here, straight into a reused buffer and onto the batch
//! (`logwrite`), with the same text tracing-subscriber writes: the event dispatch, the filter
//! check and the field visitors were a sixth of the instructions of a `/_ping` (callgrind).
//! JSON, a terminal, or a filter that leaves the line out: `tracing` as for every other line.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use http::StatusCode;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

use crate::proxy::Peer;

/// The fields of a decision's line besides the stack and the peer.
#[derive(Debug, Clone, Copy)]
pub struct Decided<'a> {
    pub method: &'a str,
    pub op: &'a str,
    pub target: &'a str,
    pub decision: &'static str,
    pub reason: &'static str,
    pub status: StatusCode,
    /// Whole microseconds, in milliseconds (`millis`).
    pub duration_ms: f64,
}

/// `d` in milliseconds, to the microsecond: finer is noise in a log line, and a value of this
/// form is written without float formatting (`milliseconds`).
pub fn millis(d: std::time::Duration) -> f64 {
    // Below 2^53 µs (285 years) the count is exact as an f64.
    d.as_micros() as f64 / 1000.0
}

/// Set once at start-up when lines are plain text for a file and the filter lets the decision
/// line through (`main`).
static DIRECT: AtomicBool = AtomicBool::new(false);

pub fn write_directly(on: bool) {
    DIRECT.store(on, Ordering::Relaxed);
}

thread_local! {
    static LINE: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Writes the line of one decision.
pub fn log(stack: &str, peer: Peer, d: &Decided<'_>) {
    if DIRECT.load(Ordering::Relaxed) {
        LINE.with(|line| {
            let mut line = line.borrow_mut();
            line.clear();
            if format(&mut line, stack, peer, d).is_ok() {
                crate::logwrite::append(line.as_bytes());
            }
        });
        return;
    }
    tracing::info!(
        target: "sockproxy::proxy",
        stack = stack,
        peer_uid = peer.uid,
        peer_pid = peer.pid,
        method = d.method,
        op = d.op,
        target = d.target,
        decision = d.decision,
        reason = d.reason,
        status = d.status.as_u16(),
        duration_ms = d.duration_ms,
        "decision"
    );
}

/// The line as tracing-subscriber's default plain format writes the event above (no target, no
/// colours): time, level padded to five, the message, then `name=value` with strings quoted
/// and escaped as `{:?}` does, and an absent peer field left out.
pub fn format(out: &mut String, stack: &str, peer: Peer, d: &Decided<'_>) -> std::fmt::Result {
    crate::logfmt::Timestamp.format_time(&mut Writer::new(out))?;
    out.push_str("  INFO decision");
    // ` name=` in one piece: a push costs a capacity check of its own.
    let text = |out: &mut String, name: &str, v: &str| {
        out.push_str(name);
        quoted(out, v)
    };
    text(out, " stack=", stack)?;
    if let Some(uid) = peer.uid {
        out.push_str(" peer_uid=");
        decimal(out, uid.into());
    }
    if let Some(pid) = peer.pid {
        out.push_str(" peer_pid=");
        decimal(out, pid.into());
    }
    text(out, " method=", d.method)?;
    text(out, " op=", d.op)?;
    text(out, " target=", d.target)?;
    text(out, " decision=", d.decision)?;
    text(out, " reason=", d.reason)?;
    out.push_str(" status=");
    decimal(out, d.status.as_u16().into());
    out.push_str(" duration_ms=");
    milliseconds(out, d.duration_ms)?;
    out.push('\n');
    Ok(())
}

/// `ms` as `{:?}` writes it. A whole number of microseconds (what `millis` gives) is its
/// decimal digits: `{:?}` writes the shortest decimal that reads back as the same f64, and with
/// at most 15 significant digits no other decimal does. Anything else takes `{:?}` itself.
fn milliseconds(out: &mut String, ms: f64) -> std::fmt::Result {
    let micros = (ms * 1000.0).round();
    // 10^15: the largest count whose decimal has at most 15 significant digits.
    if ms.is_sign_negative() || !(0.0..1e15).contains(&micros) || micros / 1000.0 != ms {
        return write!(out, "{ms:?}");
    }
    let micros = micros as u64;
    decimal(out, (micros / 1000) as i64);
    out.push('.');
    let frac = micros % 1000;
    let digits = [frac / 100, frac / 10 % 10, frac % 10];
    let keep = digits.iter().rposition(|&d| d != 0).map_or(1, |i| i + 1);
    for d in &digits[..keep] {
        out.push(char::from(b'0' + *d as u8));
    }
    Ok(())
}

/// `v` as `{:?}` writes it. That leaves printable ASCII other than `"` and `\\` as it is, which
/// is every field of almost every line, so those are copied without the formatting machinery
/// (a quarter of the line's cost, callgrind).
fn quoted(out: &mut String, v: &str) -> std::fmt::Result {
    if crate::logfmt::plain(v) {
        out.push('"');
        out.push_str(v);
        out.push('"');
        Ok(())
    } else {
        write!(out, "{v:?}")
    }
}

/// `n` in decimal, as `{}` writes it (itoa: two digits per step, no UTF-8 check).
fn decimal(out: &mut String, n: i64) {
    out.push_str(itoa::Buffer::new().format(n));
}

#[cfg(test)]
#[path = "decision_line_tests.rs"]
mod tests;
