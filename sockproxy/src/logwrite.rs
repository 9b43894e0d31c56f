//! Where log lines go: stderr, written in batches. On an event loop's thread every line is
//! appended to that loop's own buffer, and the buffer is written with one `write` once its
//! oldest line has waited `MAX_WAIT` (the loop's `write_in_batches` task keeps that time) or it
//! holds `MAX_BUFFERED` bytes. Written when the loop was about to sleep instead, the lines cost a
//! `write` for every few requests on an engine as slow as dockerd, and a `write` to a file costs
//! more than a request's two socket writes (see the commit for the measurement). Each loop has a
//! buffer and a writer task of its own, so no line waits on another loop.
//! Nothing is dropped: the lines also go out when the loop's thread ends and at shutdown (`flush`
//! from `main`), and when a write fails the rest is kept for the next one. A thread that is not
//! an event loop (start-up, the blocking pool) writes each line at once.

use std::cell::RefCell;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use tracing_subscriber::fmt::MakeWriter;

/// Lines waiting beyond this many bytes are written at once.
const MAX_BUFFERED: usize = 64 * 1024;
/// A line waits no longer than this.
const MAX_WAIT: Duration = Duration::from_millis(50);

/// One thread's lines waiting to be written.
#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    since: Option<Instant>,
    /// Told when a line arrives in an empty buffer (`write_in_batches`).
    first_line: Option<Arc<Notify>>,
}

impl Pending {
    /// Adds whole lines; writes them all to `out` once too many or too old are waiting.
    fn add(&mut self, lines: &[u8], now: Instant, out: &mut impl Write) {
        if self.bytes.is_empty() {
            if let Some(n) = &self.first_line {
                n.notify_one();
            }
        }
        let since = *self.since.get_or_insert(now);
        self.bytes.extend_from_slice(lines);
        if self.bytes.len() >= MAX_BUFFERED || now.duration_since(since) >= MAX_WAIT {
            self.write_out(out);
        }
    }

    /// Writes what `out` takes; what it does not stays for the next time.
    fn write_out(&mut self, out: &mut impl Write) {
        if self.bytes.is_empty() {
            return;
        }
        let done = write_some(out, &self.bytes);
        self.bytes.drain(..done);
        self.since = if self.bytes.is_empty() {
            None
        } else {
            Some(Instant::now())
        };
    }
}

impl Drop for Pending {
    /// A loop's thread that ends takes no line with it.
    fn drop(&mut self) {
        self.write_out(&mut io::stderr().lock());
    }
}

/// How many bytes of `bytes` went out before `out` stopped taking them.
fn write_some(out: &mut impl Write, bytes: &[u8]) -> usize {
    let mut done = 0;
    while done < bytes.len() {
        match out.write(&bytes[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    done
}

thread_local! {
    /// `Some` on an event loop's thread (`write_in_batches`).
    static PENDING: RefCell<Option<Pending>> = const { RefCell::new(None) };
}

/// Batches the lines this thread logs from now on and writes each batch once its first line has
/// waited about `MAX_WAIT` (the timer's granularity and the loop's turn come on top). Every event
/// loop runs this as a task of its own, on its single-threaded runtime (the batch is the
/// thread's); it never ends.
pub async fn write_in_batches() {
    let first_line = Arc::new(Notify::new());
    with_pending(|p| {
        p.get_or_insert_with(Pending::default).first_line = Some(first_line.clone());
    });
    loop {
        // Lines a failed write left behind are retried after another MAX_WAIT, not only once a
        // new line arrives in an empty buffer (which never comes while they wait).
        if !has_lines() {
            first_line.notified().await;
        }
        tokio::time::sleep(MAX_WAIT).await;
        flush();
    }
}

/// Whether this thread has lines waiting.
fn has_lines() -> bool {
    with_pending(|p| p.as_ref().is_some_and(|p| !p.bytes.is_empty())).unwrap_or(false)
}

/// Writes every line this thread has waiting: each batch, and from `main` at shutdown.
pub fn flush() {
    with_pending(|p| {
        if let Some(p) = p.as_mut() {
            p.write_out(&mut io::stderr().lock());
        }
    });
}

/// `f` on this thread's batch; `None` while the thread ends or when re-entered (a panic hook
/// logging while a batch is written).
fn with_pending<R>(f: impl FnOnce(&mut Option<Pending>) -> R) -> Option<R> {
    PENDING
        .try_with(|p| p.try_borrow_mut().ok().map(|mut p| f(&mut p)))
        .ok()
        .flatten()
}

/// Adds whole lines to this thread's batch, or writes them at once on a thread that has none.
pub fn append(lines: &[u8]) {
    let batched = with_pending(|p| {
        p.as_mut()
            .map(|p| p.add(lines, Instant::now(), &mut io::stderr().lock()))
            .is_some()
    });
    if batched != Some(true) {
        write_some(&mut io::stderr().lock(), lines);
    }
}

/// The `MakeWriter` for tracing-subscriber: each event's line is appended to the batch.
#[derive(Debug, Clone, Copy, Default)]
pub struct Batched;

/// One event's writer. tracing-subscriber formats a line into its own buffer and writes it
/// with one `write_all`; it lands in the batch whole.
#[derive(Debug)]
pub struct Line;

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

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that takes at most `cap` bytes per write and fails once `fail_after` are in.
    struct Sink {
        got: Vec<u8>,
        cap: usize,
        fail_after: usize,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.got.len() >= self.fail_after {
                return Err(io::Error::other("full"));
            }
            let n = buf.len().min(self.cap);
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn sink() -> Sink {
        Sink {
            got: Vec::new(),
            cap: usize::MAX,
            fail_after: usize::MAX,
        }
    }

    #[test]
    fn lines_wait_until_written_then_go_out_whole_and_in_order() {
        let (mut p, mut out, t0) = (Pending::default(), sink(), Instant::now());
        p.add(b"one\n", t0, &mut out);
        p.add(b"two\n", t0 + Duration::from_millis(1), &mut out);
        assert!(
            out.got.is_empty(),
            "nothing is written before the batch is due"
        );
        p.write_out(&mut out);
        assert_eq!(out.got, b"one\ntwo\n");
        assert!(p.bytes.is_empty() && p.since.is_none());
    }

    #[test]
    fn a_full_buffer_or_an_old_line_is_written_at_once() {
        let (mut p, mut out, t0) = (Pending::default(), sink(), Instant::now());
        let big = vec![b'x'; MAX_BUFFERED];
        p.add(&big, t0, &mut out);
        assert_eq!(out.got.len(), MAX_BUFFERED, "a full buffer goes out");
        p.add(b"a\n", t0, &mut out);
        assert_eq!(out.got.len(), MAX_BUFFERED, "a young line waits");
        p.add(b"b\n", t0 + MAX_WAIT, &mut out);
        assert!(
            out.got.ends_with(b"a\nb\n"),
            "the oldest line's age sends all"
        );
    }

    #[test]
    fn what_a_write_does_not_take_is_kept_for_the_next() {
        let (mut p, t0) = (Pending::default(), Instant::now());
        let mut out = Sink {
            got: Vec::new(),
            cap: 3,
            fail_after: 6,
        };
        p.add(b"0123456789\n", t0, &mut out);
        p.write_out(&mut out);
        assert_eq!(out.got, b"012345");
        assert_eq!(p.bytes, b"6789\n", "the rest waits");
        let mut out = sink();
        p.write_out(&mut out);
        assert_eq!(out.got, b"6789\n");
    }
}
