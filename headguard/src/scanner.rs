//! The scanner itself: the client's bytes framed head by head and body by body on their way
//! to hyper, the verdict recorded per request, and the reader hyper is given (`ClientRead`),
//! which drains what a refused client is still sending.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::idle::{Answered, IdleWatch};
use crate::judge::*;

/// What hyper is given in place of a refused head: the service answers it with the verdict.
const STAND_IN: &[u8] = b"GET http://refused.invalid/ HTTP/1.1\r\nconnection: close\r\n\r\n";

/// Per request number on one connection: `Some` when its head was refused.
#[derive(Debug, Clone, Default)]
pub struct Verdicts(Arc<Mutex<Queue>>);

/// The verdicts not yet asked for; `first` is the request number of `pending[0]`. Asked in
/// order (hyper serves a connection's requests one after another), so a long-lived kept-alive
/// connection holds at most the verdicts of heads read ahead, not one per request it ever
/// carried.
#[derive(Debug, Default)]
struct Queue {
    first: usize,
    pending: std::collections::VecDeque<Option<HeadRefusal>>,
    /// What could be read of the refused head's request line (there is at most one refusal
    /// per connection: the stream ends for hyper after it).
    refused_line: Option<RequestLine>,
}

impl Verdicts {
    /// The verdict on request `nth` (counting from 0). Verdicts before `nth` are forgotten: a
    /// caller asks for request numbers in increasing order.
    pub fn get(&self, nth: usize) -> Option<HeadRefusal> {
        let Ok(mut q) = self.0.lock() else {
            return Some(UNKNOWN);
        };
        while q.first < nth && q.pending.pop_front().is_some() {
            q.first += 1;
        }
        if q.first < nth {
            q.first = nth;
        }
        match nth.checked_sub(q.first) {
            Some(i) => q.pending.get(i).copied().flatten(),
            None => Some(UNKNOWN),
        }
    }

    /// What could be read of the refused head's method and target, if a head was refused.
    pub fn refused_line(&self) -> Option<RequestLine> {
        self.0.lock().ok().and_then(|q| q.refused_line.clone())
    }

    fn refuse(&self, why: HeadRefusal, line: RequestLine) {
        if let Ok(mut q) = self.0.lock() {
            q.pending.push_back(Some(why));
            q.refused_line = Some(line);
        }
    }

    fn push(&self, verdict: Option<HeadRefusal>) {
        if let Ok(mut q) = self.0.lock() {
            q.pending.push_back(verdict);
        }
    }
}

#[derive(Debug)]
enum State {
    /// A head, held back from hyper in `Scanner::head` until it is whole and judged.
    Head,
    Body(u64),
    /// A chunk-size line, or (after the last chunk) a trailer line, so far.
    ChunkLine {
        line: Vec<u8>,
        trailers: bool,
    },
    ChunkData(u64),
    Tunnel,
    /// Nothing more reaches hyper: after a refusal, or a body that could not be framed.
    Ended,
}

/// Reads through to `inner`, framing what passes; see the module docs.
#[derive(Debug)]
pub struct Scanner<R> {
    inner: R,
    state: State,
    verdicts: Verdicts,
    limits: HeadLimits,
    /// Bytes judged and ready for hyper, from `out_at` on.
    out: Vec<u8>,
    out_at: usize,
    deadline: Option<Instant>,
    sleep: Option<Pin<Box<Sleep>>>,
    refused: bool,
    /// The request whose body is passing asked for an upgrade (see `HeadLimits::upgrades`).
    then_tunnel: bool,
    /// The head so far, while `state` is `Head`.
    head: Vec<u8>,
    /// The last head let through and its judgement: `judge` is a function of the head's bytes
    /// and `limits` alone, so a head that is the same bytes again (a kept-alive client polling
    /// `/_ping`, or inspecting the same container) has the same judgement without a second
    /// parse. Copied on a miss only, and only up to `KEEP_AT_MOST` bytes, so what a connection
    /// holds for it stays small whatever the head limit.
    last: Vec<u8>,
    last_judged: Option<Judged>,
    /// Heads let through to hyper, each answered once (`IdleWatch`).
    passed: usize,
    idle: Option<IdleWatch>,
}

/// The longest head whose judgement is kept for the next (`Scanner::last`): the heads a
/// client repeats are a few hundred bytes.
const KEEP_AT_MOST: usize = 4096;

/// Bytes read per read from a client.
const READ_SIZE: usize = 16 * 1024;

thread_local! {
    /// What each read from a client lands in before it is framed, shared by every connection on
    /// the thread: `feed` copies what it keeps before the read returns, so the bytes need not
    /// outlive it. Allocated (and zeroed) once per thread, not per connection (16 KiB each of
    /// 256 open connections) nor per read.
    static READ_INTO: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl<R> Scanner<R> {
    pub fn new(inner: R, verdicts: Verdicts, limits: HeadLimits) -> Self {
        Self {
            inner,
            state: State::Head,
            head: Vec::new(),
            last: Vec::new(),
            last_judged: None,
            verdicts,
            limits,
            out: Vec::new(),
            out_at: 0,
            deadline: Some(after(limits.timeout)),
            sleep: None,
            refused: false,
            then_tunnel: false,
            passed: 0,
            idle: None,
        }
    }

    /// Ends the stream for hyper (as a client that hung up would) once the connection has had
    /// no head begun and every request answered for `limit`; the server counts the answers in
    /// `answered`. Without this a connection may idle for ever.
    pub fn close_when_idle(mut self, limit: Duration, answered: Answered) -> Self {
        self.idle = Some(IdleWatch::new(limit, answered));
        self
    }

    /// What follows a request whose body has all passed.
    fn after_body(&self) -> State {
        if self.then_tunnel {
            State::Tunnel
        } else {
            State::Head
        }
    }

    /// The reader it wraps and the bytes read from it that hyper has not been given yet, in
    /// order. Only a head still being judged is held besides those; after a CONNECT there is
    /// none.
    pub fn into_parts(self) -> (R, Vec<u8>) {
        let pending = self.out.get(self.out_at..).unwrap_or_default().to_vec();
        (self.inner, pending)
    }

    /// Whether a head was refused (the stream then ended for hyper, while the client may still
    /// be sending).
    pub fn refused(&self) -> bool {
        matches!(self.state, State::Ended) && self.refused
    }

    fn refuse(&mut self, why: HeadRefusal) {
        self.refused = true;
        self.verdicts.refuse(why, RequestLine::read(&self.head));
        self.out.extend_from_slice(STAND_IN);
        self.state = State::Ended;
        self.deadline = None;
        self.sleep = None;
    }

    /// Frames `data`, moving what may reach hyper to `out`.
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            match &mut self.state {
                State::Ended => return,
                State::Tunnel => {
                    self.out.extend_from_slice(data);
                    return;
                }
                State::Head => {
                    let buf = &mut self.head;
                    if buf.is_empty() {
                        if matches!(data[0], b'\r' | b'\n') {
                            return self.refuse(LEADING_EMPTY_LINE);
                        }
                        self.deadline
                            .get_or_insert_with(|| after(self.limits.timeout));
                    }
                    // One line (or what has come of it) at a time; each byte is looked at once.
                    let (line, complete) = match data.iter().position(|b| *b == b'\n') {
                        Some(i) => (&data[..=i], true),
                        None => (data, false),
                    };
                    data = &data[line.len()..];
                    buf.extend_from_slice(line);
                    if buf.len() > self.limits.max_bytes {
                        return self.refuse(TOO_LARGE);
                    }
                    if !complete {
                        continue;
                    }
                    let n = buf.len();
                    if n < 2 || buf[n - 2] != b'\r' {
                        return self.refuse(BARE_LF);
                    }
                    // The head ends with a line that is only CRLF (not the first: refused above).
                    if n >= 4 && buf[n - 4..] == *b"\r\n\r\n" {
                        let kept = self.last_judged.filter(|_| *buf == self.last);
                        let judged = kept.map_or_else(|| judge(buf, &self.limits), Ok);
                        match judged {
                            Err(why) => return self.refuse(why),
                            Ok(judged) => {
                                self.verdicts.push(None);
                                self.passed += 1;
                                self.out.extend_from_slice(&self.head);
                                if kept.is_none() {
                                    self.last.clear();
                                    self.last_judged = None;
                                    if self.head.len() <= KEEP_AT_MOST {
                                        self.last.extend_from_slice(&self.head);
                                        self.last_judged = Some(judged);
                                    }
                                }
                                // Kept for the next head: no allocation per request.
                                self.head.clear();
                                self.deadline = None;
                                self.sleep = None;
                                self.then_tunnel = judged.then_tunnel;
                                self.state = match judged.next {
                                    Next::Head => self.after_body(),
                                    Next::Body(n) => State::Body(n),
                                    Next::ChunkSize => State::ChunkLine {
                                        line: Vec::new(),
                                        trailers: false,
                                    },
                                    Next::Tunnel => State::Tunnel,
                                };
                            }
                        }
                    }
                }
                State::Body(n) | State::ChunkData(n) => {
                    let take = usize::try_from(*n).unwrap_or(usize::MAX).min(data.len());
                    *n -= take as u64;
                    self.out.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if *n == 0 {
                        self.state = match self.state {
                            State::ChunkData(_) => State::ChunkLine {
                                line: Vec::new(),
                                trailers: false,
                            },
                            _ => self.after_body(),
                        };
                    }
                }
                State::ChunkLine { line, trailers } => {
                    let (part, complete) = match data.iter().position(|b| *b == b'\n') {
                        Some(i) => (&data[..=i], true),
                        None => (data, false),
                    };
                    data = &data[part.len()..];
                    line.extend_from_slice(part);
                    self.out.extend_from_slice(part);
                    if line.len() > 4096 {
                        // Framing lost: hyper gets no more bytes, so it can never read the
                        // rest as a request the scanner did not judge.
                        self.state = State::Ended;
                        return;
                    }
                    if !complete {
                        continue;
                    }
                    let text = std::mem::take(line);
                    let trailers = *trailers;
                    self.state = match chunk_line(&text, trailers) {
                        Some(ChunkLine::Size(0)) | Some(ChunkLine::Trailer) => State::ChunkLine {
                            line: Vec::new(),
                            trailers: true,
                        },
                        Some(ChunkLine::Size(n)) => State::ChunkData(n.saturating_add(2)),
                        Some(ChunkLine::End) => self.after_body(),
                        None => State::Ended,
                    };
                }
            }
        }
    }

    /// Whether the head being read has run out of time (registers the wake-up if not).
    fn timed_out(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(at) = self.deadline else {
            return false;
        };
        if !matches!(self.state, State::Head) {
            return false;
        }
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if sleep.deadline() != at {
            sleep.as_mut().reset(at);
        }
        sleep.as_mut().poll(cx).is_ready()
    }
}

impl<R> Scanner<R> {
    fn idle_over(&mut self, cx: &mut Context<'_>) -> bool {
        let between_heads = matches!(self.state, State::Head) && self.head.is_empty();
        match self.idle.as_mut() {
            Some(idle) => idle.over(between_heads, self.passed, cx),
            None => false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Scanner<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.out_at < this.out.len() {
                let n = (this.out.len() - this.out_at).min(buf.remaining());
                buf.put_slice(&this.out[this.out_at..this.out_at + n]);
                this.out_at += n;
                if this.out_at == this.out.len() {
                    this.out.clear();
                    this.out_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            match this.state {
                // After a refusal hyper is answering the stand-in (which closes the connection):
                // an end of input now would look like a client gone mid-request and abort that
                // answer. After lost framing, the end of input ends the body hyper is reading.
                State::Ended if this.refused => return Poll::Pending,
                State::Ended => return Poll::Ready(Ok(())),
                // Tunnel bytes go straight through, with no copy.
                State::Tunnel => return Pin::new(&mut this.inner).poll_read(cx, buf),
                _ => {}
            }
            if this.timed_out(cx) {
                this.refuse(TOO_SLOW);
                continue;
            }
            let result = READ_INTO.with(|cell| {
                // Taken, not borrowed, so a nested use (there is none) could never panic.
                let mut chunk = std::mem::take(&mut *cell.borrow_mut());
                if chunk.is_empty() {
                    chunk = vec![0u8; READ_SIZE];
                }
                let mut rb = ReadBuf::new(&mut chunk);
                let read = Pin::new(&mut this.inner).poll_read(cx, &mut rb);
                let n = rb.filled().len();
                let result = match read {
                    Poll::Pending => Some(Poll::Pending),
                    Poll::Ready(Err(e)) => Some(Poll::Ready(Err(e))),
                    // End of input: a head not complete by now is no request.
                    Poll::Ready(Ok(())) if n == 0 => Some(Poll::Ready(Ok(()))),
                    Poll::Ready(Ok(())) => {
                        this.feed(&chunk[..n]);
                        None
                    }
                };
                *cell.borrow_mut() = chunk;
                result
            });
            match result {
                Some(Poll::Pending) if this.idle_over(cx) => {
                    this.state = State::Ended;
                    return Poll::Ready(Ok(()));
                }
                Some(done) => return done,
                None => {}
            }
        }
    }
}

impl<R: AsyncRead + Unpin + Send + 'static> Scanner<R> {
    /// After a refused head the client may still be sending; closing a socket with unread input
    /// makes the kernel reset the connection (TCP) or fail the client's next read (Unix), which
    /// can destroy the answer in flight. So what is still coming is read and dropped (bounded:
    /// 1 MiB, 1 s) on the runtime before the reader closes. Without a refusal, or outside a
    /// runtime, the reader just closes.
    pub fn drain_if_refused(self) {
        if !self.refused() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (mut read, _) = self.into_parts();
        rt.spawn(async move {
            let drain = async {
                let mut sink = [0u8; 8192];
                let mut left: usize = 1 << 20;
                while left > 0 {
                    match tokio::io::AsyncReadExt::read(&mut read, &mut sink).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => left = left.saturating_sub(n),
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
        });
    }
}

/// The read side hyper is given: a client's stream through its `Scanner`. Dropped after a
/// refused head, it drains what the client is still sending (`Scanner::drain_if_refused`).
#[derive(Debug)]
pub struct ClientRead<R: AsyncRead + Unpin + Send + 'static>(Option<Scanner<R>>);

impl<R: AsyncRead + Unpin + Send + 'static> ClientRead<R> {
    pub fn new(scanner: Scanner<R>) -> Self {
        Self(Some(scanner))
    }

    /// The scanner back (a tunnel taking its socket); the reader then reads as at end of input.
    pub fn take(&mut self) -> Option<Scanner<R>> {
        self.0.take()
    }
}

impl<R: AsyncRead + Unpin + Send + 'static> AsyncRead for ClientRead<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.0.as_mut() {
            Some(s) => Pin::new(s).poll_read(cx, buf),
            None => Poll::Ready(Ok(())),
        }
    }
}

impl<R: AsyncRead + Unpin + Send + 'static> Drop for ClientRead<R> {
    fn drop(&mut self) {
        if let Some(scanner) = self.0.take() {
            scanner.drain_if_refused();
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
