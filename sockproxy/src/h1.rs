//! HTTP/1.1 toward the engine, for the requests the proxy holds whole (no body, or a checked
//! body) and that ask for no upgrade (pure): the request written as one buffer, the answer's
//! head parsed with httparse straight from the read buffer, and its body framed by
//! Content-Length, chunked coding, or the connection's end. `pool` does the I/O. An answer
//! that does not frame cleanly is an error, and its connection is never reused.
//!
//! hyper's client connection did the same work through a task of its own, channels to it, and a
//! second pass over the headers; issue 18's fourth round measures what this saves per request.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, EXPECT, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version};

/// Largest answer head (dockerd's are a few hundred bytes), and largest chunk-size or trailer
/// line.
pub const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 100;
const MAX_LINE: usize = 4096;

/// Why an answer could not be read; the connection it came on is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum H1Error {
    #[error("the engine's answer head does not parse ({0})")]
    Head(String),
    #[error("the engine's answer head is larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("the engine switched protocols on a request that asked for no upgrade")]
    Upgrade,
    #[error("the engine's answer is framed two ways ({0})")]
    Framing(&'static str),
    #[error("the engine's chunked answer does not parse ({0})")]
    Chunk(&'static str),
    #[error("the engine closed the connection before its answer was whole")]
    Closed,
    #[error("a request target with a byte a request line cannot carry")]
    Target,
}

/// How an answer's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body: a HEAD request's answer, 204, 304, or `Content-Length: 0`.
    Empty,
    Length(u64),
    Chunked,
    /// Until the engine closes the connection (a hijacked stream, an HTTP/1.0 answer).
    Close,
}

/// An answer's head.
#[derive(Debug, Clone)]
pub struct Head {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
    pub framing: Framing,
    /// Whether the connection may carry another request once this answer has ended.
    pub reusable: bool,
}

/// The request as it goes on the wire: request line, `headers` less the framing ones (written
/// for `body`) and those `skip` names, a `host` if there is none, and the body. `Err` for a
/// target with a byte a request line cannot carry (the proxy builds targets from checked
/// parts, so that is a bug caught, not a client refused).
pub fn encode_request(
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    skip: impl Fn(&HeaderName) -> bool,
    body: &[u8],
    out: &mut BytesMut,
) -> Result<(), H1Error> {
    if target.is_empty() || target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(H1Error::Target);
    }
    out.reserve(64 + target.len() + body.len() + 48 * headers.len());
    out.put_slice(method.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(target.as_bytes());
    out.put_slice(b" HTTP/1.1\r\n");
    let mut host = false;
    for (name, value) in headers {
        // The body is sent whole, with its own length; nothing waits for a 100 or an upgrade.
        if [CONTENT_LENGTH, TRANSFER_ENCODING, EXPECT, CONNECTION].contains(name) || skip(name) {
            continue;
        }
        host |= name == HOST;
        out.put_slice(name.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(value.as_bytes());
        out.put_slice(b"\r\n");
    }
    // dockerd answers an HTTP/1.1 request without Host with a 400.
    if !host {
        out.put_slice(b"host: docker\r\n");
    }
    if !body.is_empty() || matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
        out.put_slice(b"content-length: ");
        let mut digits = [0u8; 21];
        out.put_slice(crate::logfmt::decimal(false, body.len() as u64, &mut digits).as_bytes());
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"\r\n");
    out.put_slice(body);
    Ok(())
}

/// Parses the answer head at the start of `buf` and takes it out: `Ok(None)` (with `buf` as it
/// was) until the head is whole. An interim 1xx answer (other than 101, an error here) comes
/// back as a head with no body; the caller reads on. Header values share the head's bytes, as
/// hyper's did: no copy per value.
pub fn parse_head(buf: &mut BytesMut, method: &Method) -> Result<Option<Head>, H1Error> {
    let Some(parsed) = parse(buf, method)? else {
        return Ok(None);
    };
    let bytes = buf.split_to(parsed.len).freeze();
    let headers = parsed.headers_from(&bytes)?;
    Ok(Some(parsed.head(headers)))
}

/// Where a name or a value lies in a head: offset and length.
pub(crate) type Span = (usize, usize);

/// A head parsed but not yet taken out of the read buffer: everything about it but its header
/// map, and where each header's name and value lie, to build the map from whichever copy of
/// the head's bytes the caller keeps (`heads` keeps one of its own).
#[derive(Debug)]
pub(crate) struct Parsed {
    /// The head's length in bytes, blank line included.
    pub len: usize,
    pub status: StatusCode,
    pub version: Version,
    pub framing: Framing,
    pub reusable: bool,
    pub spans: Vec<(Span, Span)>,
    /// The value of the head's one Date header; `None` with none or several.
    pub date: Option<Span>,
}

impl Parsed {
    /// The header map, its names and values sharing `bytes`, which hold the head `self` was
    /// parsed from (at the same offsets).
    pub fn headers_from(&self, bytes: &Bytes) -> Result<HeaderMap, H1Error> {
        let mut headers = HeaderMap::with_capacity(self.spans.len());
        for &((ns, nl), (vs, vl)) in &self.spans {
            let name = header_name(&bytes[ns..ns + nl])?;
            let value = HeaderValue::from_maybe_shared(bytes.slice(vs..vs + vl))
                .map_err(|_| H1Error::Head(format!("value of {name}")))?;
            headers.append(name, value);
        }
        Ok(headers)
    }

    pub fn head(&self, headers: HeaderMap) -> Head {
        Head {
            status: self.status,
            version: self.version,
            headers,
            framing: self.framing,
            reusable: self.reusable,
        }
    }
}

/// Parses the answer head at the start of `buf` without taking it out: `Ok(None)` until it is
/// whole.
pub(crate) fn parse(buf: &[u8], method: &Method) -> Result<Option<Parsed>, H1Error> {
    // Uninitialised: zeroing a hundred slots per answer cost more than parsing one.
    let mut slots =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut slots);
    let len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => return Err(H1Error::HeadTooLarge),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(H1Error::Head(e.to_string())),
    };
    if len > MAX_HEAD {
        return Err(H1Error::HeadTooLarge);
    }
    let code = resp.code.ok_or_else(|| H1Error::Head("no status".into()))?;
    let status = StatusCode::from_u16(code).map_err(|e| H1Error::Head(e.to_string()))?;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err(H1Error::Upgrade);
    }
    let version = match resp.version {
        Some(1) => Version::HTTP_11,
        _ => Version::HTTP_10,
    };
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| (s.as_ptr() as usize - base, s.len());
    let mut spans = Vec::with_capacity(resp.headers.len());
    let (mut length, mut chunked, mut close, mut keep_alive) = (None, false, false, false);
    let (mut date, mut dates) = (None, 0);
    for h in resp.headers.iter() {
        spans.push((at(h.name.as_bytes()), at(h.value)));
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = content_length(h.value)?;
            if length.is_some_and(|l| l != n) {
                return Err(H1Error::Framing("two Content-Lengths"));
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Only `chunked`, last, frames a body; anything else cannot be read.
            let last = h.value.rsplit(|b| *b == b',').next().unwrap_or_default();
            if chunked || !last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Err(H1Error::Framing("a Transfer-Encoding other than chunked"));
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|b| *b == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if h.name.eq_ignore_ascii_case("date") {
            date = Some(at(h.value));
            dates += 1;
        }
    }
    let bodiless = *method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = match (bodiless, chunked, length) {
        (true, _, _) => Framing::Empty,
        (false, true, Some(_)) => {
            return Err(H1Error::Framing("Content-Length with Transfer-Encoding"))
        }
        (false, true, None) => Framing::Chunked,
        (false, false, Some(0)) => Framing::Empty,
        (false, false, Some(n)) => Framing::Length(n),
        (false, false, None) => Framing::Close,
    };
    let persistent = match version {
        Version::HTTP_11 => !close,
        _ => keep_alive && !close,
    };
    Ok(Some(Parsed {
        len,
        status,
        version,
        framing,
        reusable: persistent && framing != Framing::Close,
        spans,
        date: if dates == 1 { date } else { None },
    }))
}

/// Names dockerd sends on every answer that `http` has no constant for: reused, where
/// `HeaderName::from_bytes` would copy each into an allocation of its own.
static ENGINE_NAMES: [HeaderName; 4] = [
    HeaderName::from_static("api-version"),
    HeaderName::from_static("docker-experimental"),
    HeaderName::from_static("ostype"),
    HeaderName::from_static("builder-version"),
];

fn header_name(raw: &[u8]) -> Result<HeaderName, H1Error> {
    if let Some(known) = ENGINE_NAMES
        .iter()
        .find(|n| n.as_str().as_bytes().eq_ignore_ascii_case(raw))
    {
        return Ok(known.clone());
    }
    HeaderName::from_bytes(raw)
        .map_err(|_| H1Error::Head(format!("header name {:?}", String::from_utf8_lossy(raw))))
}

fn content_length(v: &[u8]) -> Result<u64, H1Error> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(H1Error::Framing("a Content-Length that is no number"));
    }
    // At most 19 digits: fits in a u64.
    Ok(v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// Where a chunked body's reading stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunked {
    Size,
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    Trailers,
    Done,
}

/// Takes from `buf` what it holds of a chunked body at `state`: `Ok(Some(data))` for the next
/// piece of data, `Ok(None)` when `buf` holds no more of it (or the body is `Done`). Framing
/// bytes are consumed; trailers are read and dropped, as hyper's client did for the proxy.
pub fn decode_chunked(state: &mut Chunked, buf: &mut BytesMut) -> Result<Option<Bytes>, H1Error> {
    loop {
        match *state {
            Chunked::Size => match httparse::parse_chunk_size(buf) {
                Ok(httparse::Status::Complete((used, size))) => {
                    buf.advance(used);
                    *state = if size == 0 {
                        Chunked::Trailers
                    } else {
                        Chunked::Data(size)
                    };
                }
                Ok(httparse::Status::Partial) if buf.len() > MAX_LINE => {
                    return Err(H1Error::Chunk("a chunk-size line too long"))
                }
                Ok(httparse::Status::Partial) => return Ok(None),
                Err(_) => return Err(H1Error::Chunk("a chunk size that is no number")),
            },
            Chunked::Data(left) => {
                if buf.is_empty() {
                    return Ok(None);
                }
                let n = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
                let data = buf.split_to(n).freeze();
                let left = left - n as u64;
                *state = if left == 0 {
                    Chunked::DataEnd
                } else {
                    Chunked::Data(left)
                };
                return Ok(Some(data));
            }
            Chunked::DataEnd => {
                if buf.len() < 2 {
                    return Ok(None);
                }
                if &buf[..2] != b"\r\n" {
                    return Err(H1Error::Chunk("chunk data longer than its size"));
                }
                buf.advance(2);
                *state = Chunked::Size;
            }
            Chunked::Trailers => match buf.windows(2).position(|w| w == b"\r\n") {
                Some(0) => {
                    buf.advance(2);
                    *state = Chunked::Done;
                }
                Some(end) => buf.advance(end + 2),
                None if buf.len() > MAX_LINE => {
                    return Err(H1Error::Chunk("a trailer line too long"))
                }
                None => return Ok(None),
            },
            Chunked::Done => return Ok(None),
        }
    }
}

#[cfg(test)]
#[path = "h1_tests.rs"]
mod tests;
