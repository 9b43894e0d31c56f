//! A connection's first request line, checked before hyper parses it. hyper answers a request
//! line it cannot parse (a space or control byte in the target, say) with a bare 400 and no
//! body; checking the line first lets such a client see a `sockproxy: bad request` message in
//! dockerd's shape. Later requests on a kept-alive connection still get hyper's bare 400 for an
//! unparsable line: the request is refused either way, only the wording differs.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// Longest request line read before deciding (dockerd's own header limit is larger, but no
/// Engine API target comes near this).
pub const MAX_LINE: usize = 16 * 1024;

/// What the first bytes of a connection are.
#[derive(Debug, PartialEq, Eq)]
pub enum FirstLine {
    /// A well-formed request line; the bytes read so far must be replayed to the parser.
    Ok,
    /// Not a request line hyper would accept, with the reason for the client.
    Bad(&'static str),
    /// The client closed before sending a whole line.
    Closed,
}

/// Reads up to the end of the first line; returns the verdict and every byte read.
pub async fn read_first_line<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> io::Result<(FirstLine, Bytes)> {
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        if let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let verdict = check(&buf[..end]);
            return Ok((verdict, buf.freeze()));
        }
        if buf.len() >= MAX_LINE {
            return Ok((FirstLine::Bad("request line too long"), buf.freeze()));
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Ok((FirstLine::Closed, buf.freeze()));
        }
    }
}

/// `METHOD SP TARGET SP HTTP/1.x` with a visible-ASCII target.
pub fn check(line: &[u8]) -> FirstLine {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|b| *b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return FirstLine::Bad(
            "malformed request line (a space or control character in the target?)",
        );
    };
    if method.is_empty() || !method.iter().all(u8::is_ascii_alphabetic) {
        return FirstLine::Bad("malformed request method");
    }
    if target.is_empty() || !target.iter().all(|b| (0x21..0x7f).contains(b)) {
        return FirstLine::Bad("control character, space or non-ASCII byte in request target");
    }
    if version != b"HTTP/1.1" && version != b"HTTP/1.0" {
        return FirstLine::Bad("only HTTP/1.0 and HTTP/1.1 are spoken here");
    }
    FirstLine::Ok
}

/// A stream with bytes already read put back in front.
#[derive(Debug)]
pub struct Rewound<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Rewound<S> {
    pub fn new(prefix: Bytes, inner: S) -> Self {
        Self { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewound<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewound<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_line_table() {
        let ok = [
            &b"GET /_ping HTTP/1.1\r"[..],
            b"HEAD /v1.41/_ping HTTP/1.1",
            b"POST /containers/create?name=x HTTP/1.0\r",
        ];
        for l in ok {
            assert_eq!(check(l), FirstLine::Ok, "{l:?}");
        }
        let bad = [
            &b"GET /a b HTTP/1.1\r"[..],
            b"GET /a\x01 HTTP/1.1\r",
            b"GET /a\x7f HTTP/1.1\r",
            b"GET /\xc3\xa9 HTTP/1.1\r",
            b"GET  /a HTTP/1.1\r",
            b"GET /a HTTP/2.0\r",
            b"G@T /a HTTP/1.1\r",
            b"\r",
            b"GET /a\tHTTP/1.1\r",
        ];
        for l in bad {
            assert!(matches!(check(l), FirstLine::Bad(_)), "{l:?}");
        }
    }

    #[tokio::test]
    async fn rewound_replays_then_reads_on() {
        let (mut a, b) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut a, b"GET / HTTP/1.1\r\nrest")
            .await
            .expect("write");
        drop(a);
        let mut b = b;
        let (verdict, read) = read_first_line(&mut b).await.expect("read");
        assert_eq!(verdict, FirstLine::Ok);
        let mut all = Vec::new();
        Rewound::new(read, b)
            .read_to_end(&mut all)
            .await
            .expect("read");
        assert_eq!(all, b"GET / HTTP/1.1\r\nrest");
    }
}
