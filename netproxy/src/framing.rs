//! The client's request stream framed a second time, independently of hyper: every request head
//! is read as sent, before hyper resolves what it would (it drops a Content-Length that comes
//! with Transfer-Encoding and collapses repeated Content-Lengths), and a verdict is recorded per
//! request number. hyper reads through this scanner, so request *n*'s verdict exists before
//! request *n* reaches the service, which refuses the ambiguous ones.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// Per request number on one connection: `Some(reason)` when its framing is ambiguous.
#[derive(Debug, Clone, Default)]
pub struct Verdicts(Arc<Mutex<Vec<Option<&'static str>>>>);

impl Verdicts {
    pub fn get(&self, nth: usize) -> Option<&'static str> {
        self.0
            .lock()
            .map(|v| v.get(nth).copied().flatten())
            .unwrap_or(Some("framing unknown"))
    }

    fn push(&self, verdict: Option<&'static str>) {
        if let Ok(mut v) = self.0.lock() {
            v.push(verdict);
        }
    }
}

/// What the framing of one head says comes next.
pub fn judge(head: &[u8]) -> (Option<&'static str>, Next) {
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    let mut lines = text.split("\r\n");
    let connect = lines.next().is_some_and(|l| l.starts_with("connect "));
    let (mut cl, mut te, mut chunked, mut len) = (0usize, 0usize, false, 0u64);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        match name.trim() {
            "content-length" => {
                cl += 1;
                len = value.trim().parse().unwrap_or(0);
            }
            "transfer-encoding" => {
                te += 1;
                chunked = value
                    .split(',')
                    .next_back()
                    .is_some_and(|v| v.trim() == "chunked");
            }
            _ => {}
        }
    }
    if cl > 1 {
        return (Some("duplicate Content-Length"), Next::Stop);
    }
    if cl > 0 && te > 0 {
        return (Some("Content-Length with Transfer-Encoding"), Next::Stop);
    }
    let next = if connect {
        // A tunnel follows: its bytes are not requests.
        Next::Stop
    } else if te > 0 {
        if chunked {
            Next::ChunkSize
        } else {
            Next::Stop
        }
    } else if len > 0 {
        Next::Body(len)
    } else {
        Next::Head
    };
    (None, next)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Head,
    Body(u64),
    ChunkSize,
    Stop,
}

#[derive(Debug)]
enum State {
    Head(Vec<u8>),
    Body(u64),
    ChunkSize(Vec<u8>),
    ChunkData(u64),
    Trailers(Vec<u8>),
    Stop,
}

/// Reads through to `inner`, framing what passes.
#[derive(Debug)]
pub struct Scanner<R> {
    inner: R,
    state: State,
    verdicts: Verdicts,
    max_head: usize,
}

impl<R> Scanner<R> {
    pub fn new(inner: R, verdicts: Verdicts, max_head: usize) -> Self {
        Self {
            inner,
            state: State::Head(Vec::new()),
            verdicts,
            max_head,
        }
    }

    /// The reader it wraps. Nothing is lost: the scanner keeps no bytes of the stream, only
    /// copies of heads it is still judging.
    pub fn into_inner(self) -> R {
        self.inner
    }

    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            match &mut self.state {
                State::Stop => return,
                State::Head(buf) => {
                    let before = buf.len();
                    buf.extend_from_slice(data);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        if buf.len() > self.max_head {
                            self.state = State::Stop;
                        }
                        return;
                    };
                    let used = end + 4 - before;
                    let (verdict, next) = judge(&buf[..end]);
                    self.verdicts.push(verdict);
                    self.state = match next {
                        Next::Head => State::Head(Vec::new()),
                        Next::Body(n) => State::Body(n),
                        Next::ChunkSize => State::ChunkSize(Vec::new()),
                        Next::Stop => State::Stop,
                    };
                    data = &data[used..];
                }
                State::Body(n) => {
                    let take = usize::try_from(*n).unwrap_or(usize::MAX).min(data.len());
                    *n -= take as u64;
                    data = &data[take..];
                    if *n == 0 {
                        self.state = State::Head(Vec::new());
                    }
                }
                State::ChunkSize(line) => {
                    let Some(pos) = data.iter().position(|b| *b == b'\n') else {
                        line.extend_from_slice(data);
                        return;
                    };
                    line.extend_from_slice(&data[..=pos]);
                    data = &data[pos + 1..];
                    let text = String::from_utf8_lossy(line);
                    let size = text
                        .split(';')
                        .next()
                        .map(str::trim)
                        .and_then(|h| u64::from_str_radix(h, 16).ok());
                    self.state = match size {
                        Some(0) => State::Trailers(Vec::new()),
                        Some(n) => State::ChunkData(n + 2),
                        None => State::Stop,
                    };
                }
                State::ChunkData(n) => {
                    let take = usize::try_from(*n).unwrap_or(usize::MAX).min(data.len());
                    *n -= take as u64;
                    data = &data[take..];
                    if *n == 0 {
                        self.state = State::ChunkSize(Vec::new());
                    }
                }
                State::Trailers(buf) => {
                    let Some(pos) = data.iter().position(|b| *b == b'\n') else {
                        buf.extend_from_slice(data);
                        return;
                    };
                    buf.extend_from_slice(&data[..=pos]);
                    data = &data[pos + 1..];
                    if buf == b"\r\n" {
                        self.state = State::Head(Vec::new());
                    } else {
                        buf.clear();
                    }
                }
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Scanner<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) {
            let fresh = buf.filled()[before..].to_vec();
            self.feed(&fresh);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(stream: &[u8], piece: usize) -> Vec<Option<&'static str>> {
        let v = Verdicts::default();
        let mut s = Scanner::new(tokio::io::empty(), v.clone(), 16384);
        for chunk in stream.chunks(piece) {
            s.feed(chunk);
        }
        let out = v.0.lock().expect("lock").clone();
        out
    }

    #[test]
    fn every_request_on_a_connection_is_judged() {
        let stream = b"GET http://a.test/ HTTP/1.1\r\nHost: a\r\n\r\n\
POST http://a.test/ HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello\
POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n\
POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc";
        for piece in [1, 3, 7, 1000] {
            assert_eq!(
                scan(stream, piece),
                [None, None, None, Some("duplicate Content-Length")],
                "fed {piece} bytes at a time"
            );
        }
        let smuggle = b"GET http://a.test/ HTTP/1.1\r\n\r\nPOST http://a.test/ HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        assert_eq!(
            scan(smuggle, 5),
            [None, Some("Content-Length with Transfer-Encoding")]
        );
        // A body that looks like a request head is a body.
        let inner = "GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        let body = format!(
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: {}\r\n\r\n{inner}GET http://a.test/ HTTP/1.1\r\n\r\n",
            inner.len()
        );
        assert_eq!(scan(body.as_bytes(), 9), [None, None]);
        // After CONNECT, tunnel bytes are not judged.
        assert_eq!(scan(b"CONNECT a.test:443 HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 4), [None]);
    }
}
