//! What a request head is: the refusals and limits, `judge` (one complete head, parsed with
//! `httparse` as hyper parses it, and what follows it), and the chunk-size and trailer lines of
//! a chunked body. Pure: no I/O.

use std::mem::MaybeUninit;
use std::time::Duration;

use http::StatusCode;
use tokio::time::Instant;

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
pub const CONNECT_BODY: HeadRefusal = bad("CONNECT with a body");
pub const MALFORMED: HeadRefusal = bad("malformed request head");
pub const BAD_TARGET: HeadRefusal = bad("malformed request target");
pub(crate) const UNKNOWN: HeadRefusal = bad("framing unknown");

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
    let connect = req.method == Some("CONNECT");
    // A CONNECT has no content (RFC 9110 9.3.6), but hyper reads one it is framed for, so the
    // first tunnel bytes would be eaten as a body this scanner never framed.
    if connect && (te > 0 || len > 0) {
        return Err(CONNECT_BODY);
    }
    let next = if connect {
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

pub(crate) enum ChunkLine {
    Size(u64),
    Trailer,
    End,
}

/// One CRLF-terminated line of a chunked body; `None` when it cannot be framed.
pub(crate) fn chunk_line(line: &[u8], trailers: bool) -> Option<ChunkLine> {
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

/// The method and target of a refused head as far as they could be read, for its decision
/// line: printable ASCII only (anything else is `?`), each at most `SHOWN_AT_MOST` bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestLine {
    pub method: String,
    pub target: String,
}

/// How much of a refused head's method or target a log line shows.
const SHOWN_AT_MOST: usize = 256;

impl RequestLine {
    /// The first line of `head` (or what has arrived of it), split on spaces.
    pub fn read(head: &[u8]) -> Self {
        let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
        let mut words = line
            .split(|b| *b == b' ')
            .filter(|w| !w.is_empty())
            .map(|w| {
                w.iter()
                    .take(SHOWN_AT_MOST)
                    .filter(|b| **b != b'\r')
                    .map(|b| {
                        if b.is_ascii_graphic() {
                            char::from(*b)
                        } else {
                            '?'
                        }
                    })
                    .collect::<String>()
            });
        Self {
            method: words.next().unwrap_or_default(),
            target: words.next().unwrap_or_default(),
        }
    }
}
