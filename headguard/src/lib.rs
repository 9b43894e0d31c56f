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
//! own shape (netproxy: status, `X-Netproxy-Error`, JSON body; sockproxy: dockerd's JSON
//! error), and then the stream ends. One verdict is
//! recorded per request number, before hyper can read that request.
//!
//! The scanner is linear: each byte is looked at once (the head's end is found from the bytes
//! that just arrived, never by searching the whole buffer again). The size limit applies to the
//! head itself, however its bytes arrive.
//!
//! headguard only judges heads: it refuses one or lets it through unchanged, and never decides
//! what is forwarded (the proxies' policies do). Why hyper's own limits (hyper 1,
//! `server::conn::http1::Builder`) do not do its job:
//! - Shape: hyper answers a head over `max_header_size`/`max_buf_size` or over `max_headers`
//!   with a bare "431 Request Header Fields Too Large", and one it cannot parse with a bare 400
//!   (no body, `on_error` in its h1 role), where the proxies must answer in their own shape
//!   (dockerd's JSON error for sockproxy). Its limits are set wider here, as a backstop.
//! - Time: hyper's `header_read_timeout` is armed when it starts waiting for a head, so it
//!   covers an idle kept-alive connection and a slow head as one span, and on expiry it closes
//!   the connection without an answer: there is no per-head limit apart from the idle one. The
//!   scanner times each head (the first from the connection's start, later ones from their
//!   first byte) and refuses a late one in the proxy's shape; the idle wait is `idle`'s.
//! - Framing: hyper accepts a bare LF line ending and a leading empty line, which a guard that
//!   knows only CRLF would frame differently; headguard refuses them instead.
//!
//! `judge` holds what a head is (pure), `scanner` the framing of the stream and the reader hyper
//! is given, `idle` the limit on a kept-alive connection with nothing to do.

mod idle;
mod judge;
mod scanner;

pub use idle::Answered;
pub use judge::*;
pub use scanner::*;
