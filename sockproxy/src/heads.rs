//! The last bodiless answer head an engine connection read, kept with its header map, so that
//! the next head that is the same bytes but for its Date value is answered from it instead of
//! being parsed again. dockerd's answers to `/_ping`, to a stop or start (204) and to any HEAD
//! request differ from one to the next only in their Date; parsing such a head and building its
//! header map was a fifth of the instructions of a proxied `HEAD /_ping` (callgrind).
//!
//! Why the answer is the one a parse would give: the bytes outside the Date value are the
//! cached head's own, and the new Date value holds only printable ASCII and spaces, neither
//! first nor last. Such a value holds no line break, so it cannot end a line or the head, and
//! httparse reads every other line as it read them before; with no space at either end, it
//! trims nothing from it either. So the head has the same length, status, version, headers and
//! framing, and the Date value is exactly those bytes. The request's method takes part (a HEAD
//! request's answer has no body whatever it says), so a hit also needs the same kind of
//! request. Anything else is parsed as it comes. Answers with a body are never kept: their
//! Content-Length differs from one to the next, and keeping them would cost a copy for nothing.

use bytes::{Buf, Bytes, BytesMut};
use http::header::DATE;
use http::{HeaderValue, Method};

use crate::h1::{self, Framing, H1Error, Head, Span};

/// One connection's last bodiless head (none at first). Boxed: a connection moves in and out
/// of its pool and the request futures by value, and an inline head made each inspect copy
/// some 850 more bytes (callgrind).
#[derive(Debug, Default)]
pub struct LastHead(Option<Box<Seen>>);

#[derive(Debug)]
struct Seen {
    /// The head's bytes, a copy of its own: the read buffer is not held (it would stay
    /// allocated, and could not be reused for the next read).
    bytes: Bytes,
    date: Option<Span>,
    head_request: bool,
    head: Head,
}

impl LastHead {
    /// As `h1::parse_head`: takes the answer head at the start of `buf` out, or `Ok(None)` with
    /// `buf` as it was until the head is whole.
    pub fn parse(&mut self, buf: &mut BytesMut, method: &Method) -> Result<Option<Head>, H1Error> {
        if let Some(head) = self.reuse(buf, method) {
            return Ok(Some(head));
        }
        let Some(parsed) = h1::parse(buf, method)? else {
            return Ok(None);
        };
        if parsed.framing != Framing::Empty {
            let bytes = buf.split_to(parsed.len).freeze();
            let headers = parsed.headers_from(&bytes)?;
            return Ok(Some(parsed.head(headers)));
        }
        let bytes = Bytes::copy_from_slice(&buf[..parsed.len]);
        let head = parsed.head(parsed.headers_from(&bytes)?);
        buf.advance(parsed.len);
        let seen = Seen {
            bytes,
            date: parsed.date,
            head_request: *method == Method::HEAD,
            head: head.clone(),
        };
        match &mut self.0 {
            Some(kept) => **kept = seen,
            None => self.0 = Some(Box::new(seen)),
        }
        Ok(Some(head))
    }

    /// The kept head again, with this answer's Date, if `buf` starts with the same head but
    /// for its Date value.
    fn reuse(&self, buf: &mut BytesMut, method: &Method) -> Option<Head> {
        let seen = self.0.as_ref()?;
        if seen.head_request != (*method == Method::HEAD) {
            return None;
        }
        let new = buf.get(..seen.bytes.len())?;
        let date = match seen.date {
            None if new == &seen.bytes[..] => None,
            None => return None,
            Some((at, len)) => {
                let (value, old) = (&new[at..at + len], &seen.bytes[..]);
                let same = new[..at] == old[..at] && new[at + len..] == old[at + len..];
                if !same || !plain_value(value) {
                    return None;
                }
                Some(HeaderValue::from_bytes(value).ok()?)
            }
        };
        buf.advance(seen.bytes.len());
        let mut head = seen.head.clone();
        if let Some(date) = date {
            // Replaces the one Date in place: the headers keep their order.
            head.headers.insert(DATE, date);
        }
        Some(head)
    }
}

/// A value httparse reads whole and as it is: printable ASCII and spaces, not empty, no space
/// at either end.
fn plain_value(v: &[u8]) -> bool {
    match (v.first(), v.last()) {
        (Some(&first), Some(&last)) => {
            first != b' ' && last != b' ' && v.iter().all(|b| (0x20..0x7f).contains(b))
        }
        _ => false,
    }
}

#[cfg(test)]
#[path = "heads_tests.rs"]
mod tests;
