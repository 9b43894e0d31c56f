//! Where log lines go: stderr, written in batches. Every line is appended to one buffer, and the
//! buffer is written with one `write` when the event loop is about to sleep (the runtime's park
//! hook calls `flush`), so a busy loop that answers several requests per turn pays one system
//! call for all their decision lines. Nothing is dropped: a line also goes out at once when the
//! buffer is full, when the oldest line waiting is older than `MAX_WAIT` (a loop that never
//! sleeps), at shutdown (`flush` from `main`), and when a write fails the rest is kept for the
//! next one.

use std::io::{self, Write};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

/// Lines waiting beyond this many bytes are written at once.
const MAX_BUFFERED: usize = 64 * 1024;
/// A line waits no longer than this for the loop to sleep.
const MAX_WAIT: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    since: Option<Instant>,
}

static PENDING: Mutex<Pending> = Mutex::new(Pending {
    bytes: Vec::new(),
    since: None,
});

fn pending() -> MutexGuard<'static, Pending> {
    // A panic while appending leaves at worst a partial line; the buffer is still usable.
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

fn write_out(p: &mut Pending) {
    if p.bytes.is_empty() {
        return;
    }
    let mut err = io::stderr().lock();
    let mut done = 0;
    while done < p.bytes.len() {
        match err.write(&p.bytes[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    p.bytes.drain(..done);
    p.since = if p.bytes.is_empty() {
        None
    } else {
        Some(Instant::now())
    };
}

/// Writes every waiting line. Called when the event loop is about to sleep and at shutdown.
pub fn flush() {
    write_out(&mut pending());
}

/// The `MakeWriter` for tracing-subscriber: each event's line is appended to the batch.
#[derive(Debug, Clone, Copy, Default)]
pub struct Batched;

/// One event's writer. tracing-subscriber formats a line into its own buffer and writes it
/// with one `write_all`; it lands in the batch whole.
#[derive(Debug)]
pub struct Line;

/// Adds whole lines to the batch.
pub fn append(lines: &[u8]) {
    let mut p = pending();
    let now = Instant::now();
    let since = *p.since.get_or_insert(now);
    p.bytes.extend_from_slice(lines);
    if p.bytes.len() >= MAX_BUFFERED || now.duration_since(since) >= MAX_WAIT {
        write_out(&mut p);
    }
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        append(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Batched {
    type Writer = Line;

    fn make_writer(&'a self) -> Self::Writer {
        Line
    }
}
