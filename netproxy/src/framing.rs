//! The client's request stream framed a second time, before hyper: every request head is held
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

/// The limits on one request head.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// Bytes, request line to the empty line included.
    pub max_bytes: usize,
    pub max_headers: usize,
    /// From the head's first byte (the first head: from the connection's start).
    pub timeout: Duration,
}

/// `d` from now; a limit too large to add (from a flag) is a year.
pub(crate) fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// What hyper is given in place of a refused head: the service answers it with the verdict.
const STAND_IN: &[u8] = b"GET http://refused.invalid/ HTTP/1.1\r\nconnection: close\r\n\r\n";

/// Per request number on one connection: `Some` when its head was refused.
#[derive(Debug, Clone, Default)]
pub struct Verdicts(Arc<Mutex<Vec<Option<HeadRefusal>>>>);

impl Verdicts {
    pub fn get(&self, nth: usize) -> Option<HeadRefusal> {
        self.0
            .lock()
            .map(|v| v.get(nth).copied().flatten())
            .unwrap_or(Some(UNKNOWN))
    }

    fn push(&self, verdict: Option<HeadRefusal>) {
        if let Ok(mut v) = self.0.lock() {
            v.push(verdict);
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

/// Judges one complete head (CRLF line endings already checked): `Ok` with what follows it.
pub fn judge(head: &[u8], max_headers: usize) -> Result<Next, HeadRefusal> {
    let mut headers = vec![httparse::EMPTY_HEADER; max_headers.max(1)];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(n)) if n == head.len() => {}
        Err(httparse::Error::TooManyHeaders) => return Err(TOO_MANY_HEADERS),
        _ => return Err(MALFORMED),
    }
    let path = req.path.unwrap_or_default();
    if http::Uri::try_from(path).is_err() {
        return Err(BAD_TARGET);
    }
    let (mut cl, mut te, mut len, mut chunked) = (0usize, 0usize, 0u64, false);
    for h in req.headers.iter() {
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
    Ok(if req.method == Some("CONNECT") {
        Next::Tunnel
    } else if te > 0 {
        Next::ChunkSize
    } else if len > 0 {
        Next::Body(len)
    } else {
        Next::Head
    })
}

#[derive(Debug)]
enum State {
    /// The head so far (held back from hyper).
    Head(Vec<u8>),
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
}

impl<R> Scanner<R> {
    pub fn new(inner: R, verdicts: Verdicts, limits: HeadLimits) -> Self {
        Self {
            inner,
            state: State::Head(Vec::new()),
            verdicts,
            limits,
            out: Vec::new(),
            out_at: 0,
            deadline: Some(after(limits.timeout)),
            sleep: None,
            refused: false,
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
                State::Head(buf) => {
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
                        let head = std::mem::take(buf);
                        match judge(&head, self.limits.max_headers) {
                            Err(why) => return self.refuse(why),
                            Ok(next) => {
                                self.verdicts.push(None);
                                self.out.extend_from_slice(&head);
                                self.deadline = None;
                                self.sleep = None;
                                self.state = match next {
                                    Next::Head => State::Head(Vec::new()),
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
                            _ => State::Head(Vec::new()),
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
                        Some(ChunkLine::End) => State::Head(Vec::new()),
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
        if !matches!(self.state, State::Head(_)) {
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
                State::Ended => return Poll::Ready(Ok(())),
                // Tunnel bytes go straight through, with no copy.
                State::Tunnel => return Pin::new(&mut this.inner).poll_read(cx, buf),
                _ => {}
            }
            if this.timed_out(cx) {
                this.refuse(TOO_SLOW);
                continue;
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut rb = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                // End of input: a head not complete by now is no request.
                Poll::Ready(Ok(())) if rb.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => this.feed(rb.filled()),
            }
        }
    }
}

#[cfg(test)]
#[path = "framing_tests.rs"]
mod tests;
