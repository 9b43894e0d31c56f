//! headguard: a client's HTTP/1 request stream framed a second time, before hyper. Shared by
//! netproxy and sockproxy, so that neither ever answers in hyper's own shape (a bare 400 or 431
//! with no body) and hyper never parses a head the proxy has not judged.
//!
//! Every request head is held
//! back until it is complete and judged, so hyper only ever parses heads that the proxy has
//! already found unambiguous and within limits. A head is refused outright when it has a bare
//! LF line ending or a leading empty line (hyper accepts both, and a guard that only knows CRLF
//! then frames the stream differently), repeats Content-Length, carries Content-Length with
//! Transfer-Encoding, does not parse (`httparse`, the parser hyper uses), is too large or has
//! too many headers, or is not complete in time. A refused head never reaches hyper: it gets a
//! stand-in head instead, which the service answers with the verdict's refusal in the proxy's
//! own shape (status, `X-Netproxy-Error`, JSON body), and then the stream ends. One verdict is
//! recorded per request number, before hyper can read that request.
//!
//! The scanner is linear: each byte is looked at once (the head's end is found from the bytes
//! that just arrived, never by searching the whole buffer again). The size limit applies to the
//! head itself, however its bytes arrive.

use std::future::Future as _;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::StatusCode;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Why a request head is refused before hyper sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadRefusal {
    pub status: StatusCode,
    pub reason: &'static str,
}

const fn bad(reason: &'static str) -> HeadRefusal {
    HeadRefusal {
        status: StatusCode::BAD_REQUEST,
        reason,
    }
}

pub const TOO_LARGE: HeadRefusal = HeadRefusal {
    status: StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
    reason: "request head too large",
};
pub const TOO_MANY_HEADERS: HeadRefusal = HeadRefusal {
    status: StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
    reason: "too many headers",
};
pub const TOO_SLOW: HeadRefusal = HeadRefusal {
    status: StatusCode::REQUEST_TIMEOUT,
    reason: "request head too slow",
};
pub const BARE_LF: HeadRefusal = bad("bare LF line ending");
pub const LEADING_EMPTY_LINE: HeadRefusal = bad("leading empty line");
pub const DUPLICATE_CL: HeadRefusal = bad("duplicate Content-Length");
pub const CL_WITH_TE: HeadRefusal = bad("Content-Length with Transfer-Encoding");
pub const BAD_CL: HeadRefusal = bad("malformed Content-Length");
pub const TE_NOT_CHUNKED: HeadRefusal = bad("Transfer-Encoding must end in chunked");
pub const MALFORMED: HeadRefusal = bad("malformed request head");
pub const BAD_TARGET: HeadRefusal = bad("malformed request target");
const UNKNOWN: HeadRefusal = bad("framing unknown");

/// The limits on one request head, and what an upgrade request does to the stream.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// Bytes, request line to the empty line included.
    pub max_bytes: usize,
    pub max_headers: usize,
    /// From the head's first byte (the first head: from the connection's start).
    pub timeout: Duration,
    /// Whether an HTTP/1.1 request carrying an `Upgrade` header turns the stream into a tunnel
    /// once its body has passed (sockproxy: `docker attach` and `exec start` speak raw streams
    /// after the engine's 101). Off, such a request is framed like any other, and only CONNECT
    /// tunnels (netproxy, which never upgrades).
    pub upgrades: bool,
}

/// Header slots judged on the stack; a larger `max_headers` allocates.
const STACK_HEADERS: usize = 128;

/// `d` from now; a limit too large to add (from a flag) is a year.
pub fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

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

    fn push(&self, verdict: Option<HeadRefusal>) {
        if let Ok(mut q) = self.0.lock() {
            q.pending.push_back(verdict);
        }
    }
}

/// What follows a head that was let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Head,
    Body(u64),
    ChunkSize,
    /// After CONNECT: tunnel bytes, never requests.
    Tunnel,
}

/// A judged head: what follows it, and whether the stream is a tunnel after its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judged {
    pub next: Next,
    pub then_tunnel: bool,
}

/// Judges one complete head (CRLF line endings already checked): `Ok` with what follows it.
pub fn judge(head: &[u8], limits: &HeadLimits) -> Result<Judged, HeadRefusal> {
    let max_headers = limits.max_headers.max(1);
    // Uninitialised slots: httparse writes those it fills, so none is set up per request.
    let mut on_stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    let mut on_heap = Vec::new();
    let headers: &mut [MaybeUninit<httparse::Header<'_>>] = if max_headers <= STACK_HEADERS {
        &mut on_stack[..max_headers]
    } else {
        on_heap.resize_with(max_headers, MaybeUninit::uninit);
        &mut on_heap
    };
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(head, headers) {
        Ok(httparse::Status::Complete(n)) if n == head.len() => {}
        Err(httparse::Error::TooManyHeaders) => return Err(TOO_MANY_HEADERS),
        _ => return Err(MALFORMED),
    }
    let path = req.path.unwrap_or_default();
    if http::Uri::try_from(path).is_err() {
        return Err(BAD_TARGET);
    }
    let (mut cl, mut te, mut len, mut chunked) = (0usize, 0usize, 0u64, false);
    let mut upgrade = false;
    for h in req.headers.iter() {
        upgrade |= h.name.eq_ignore_ascii_case("upgrade");
        if h.name.eq_ignore_ascii_case("content-length") {
            cl += 1;
            let v = std::str::from_utf8(h.value).map_err(|_| BAD_CL)?.trim();
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(BAD_CL);
            }
            len = v.parse().map_err(|_| BAD_CL)?;
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            te += 1;
            chunked = std::str::from_utf8(h.value).is_ok_and(|v| {
                v.rsplit(',')
                    .next()
                    .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
            });
        }
    }
    if cl > 1 {
        return Err(DUPLICATE_CL);
    }
    if cl > 0 && te > 0 {
        return Err(CL_WITH_TE);
    }
    if te > 0 && (!chunked || req.version == Some(0)) {
        return Err(TE_NOT_CHUNKED);
    }
    let next = if req.method == Some("CONNECT") {
        Next::Tunnel
    } else if te > 0 {
        Next::ChunkSize
    } else if len > 0 {
        Next::Body(len)
    } else {
        Next::Head
    };
    // hyper upgrades an HTTP/1.1 request with any `Upgrade` header if the service answers 101.
    let then_tunnel = limits.upgrades && upgrade && req.version == Some(1);
    Ok(Judged { next, then_tunnel })
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
    /// What each read from `inner` lands in: allocated (and zeroed) once per connection, not
    /// once per read.
    chunk: Vec<u8>,
}

impl<R> Scanner<R> {
    pub fn new(inner: R, verdicts: Verdicts, limits: HeadLimits) -> Self {
        Self {
            inner,
            state: State::Head,
            head: Vec::new(),
            chunk: Vec::new(),
            verdicts,
            limits,
            out: Vec::new(),
            out_at: 0,
            deadline: Some(after(limits.timeout)),
            sleep: None,
            refused: false,
            then_tunnel: false,
        }
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
        self.verdicts.push(Some(why));
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
                        let judged = judge(buf, &self.limits);
                        match judged {
                            Err(why) => return self.refuse(why),
                            Ok(judged) => {
                                self.verdicts.push(None);
                                self.out.extend_from_slice(&self.head);
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

enum ChunkLine {
    Size(u64),
    Trailer,
    End,
}

/// One CRLF-terminated line of a chunked body; `None` when it cannot be framed.
fn chunk_line(line: &[u8], trailers: bool) -> Option<ChunkLine> {
    let body = line.strip_suffix(b"\r\n")?;
    if trailers {
        return Some(if body.is_empty() {
            ChunkLine::End
        } else {
            ChunkLine::Trailer
        });
    }
    let size = body.split(|b| *b == b';').next()?;
    let size = std::str::from_utf8(size)
        .ok()?
        .trim_end_matches([' ', '\t']);
    if size.is_empty() || size.len() > 16 {
        return None;
    }
    u64::from_str_radix(size, 16).ok().map(ChunkLine::Size)
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
            let mut chunk = std::mem::take(&mut this.chunk);
            if chunk.is_empty() {
                chunk = vec![0u8; 16 * 1024];
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
            this.chunk = chunk;
            if let Some(done) = result {
                return done;
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
mod tests;
