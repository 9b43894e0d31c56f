//! The property the `engine_answer` fuzz target asserts and the stable replay test
//! (`tests/tests/tools/fuzz_corpus.rs`) checks again on every committed corpus input: takes the
//! raw fuzz input and returns `Err(why)` when the property does not hold.
//!
//! - `engine_answer`: `h1::parse_head` takes a whole head off the front of what the engine
//!   sent or leaves every byte alone; what it frames is consistent; a chunked body read from
//!   what follows yields no empty piece and no more data than it consumed; and
//!   `heads::LastHead` reads the same bytes exactly as the parse does, both before it keeps a
//!   head and from the head it kept.

use http::Method;

/// `raw` read by `h1::parse_head` and by a `LastHead`, twice (the second time from the head
/// the first kept, if it kept one): the same heads, errors and leftovers each time.
fn kept_heads_agree(raw: &[u8], method: &Method) -> Result<(), String> {
    type Seen = Result<Option<(u16, bool, String, Vec<(String, Vec<u8>)>)>, String>;
    let read = |head: Result<Option<crate::h1::Head>, crate::h1::H1Error>| -> Seen {
        head.map(|h| {
            h.map(|h| {
                let fields = h.headers.iter();
                let fields = fields.map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()));
                let shape = format!("{:?} {:?}", h.version, h.framing);
                (h.status.as_u16(), h.reusable, shape, fields.collect())
            })
        })
        .map_err(|e| e.to_string())
    };
    let mut plain = bytes::BytesMut::from(raw);
    let want = read(crate::h1::parse_head(&mut plain, method));
    let mut last = crate::heads::LastHead::default();
    for round in ["first", "second"] {
        let mut buf = bytes::BytesMut::from(raw);
        let got = read(last.parse(&mut buf, method));
        if got != want || buf != plain {
            return Err(format!(
                "the {round} read through LastHead gave {got:?} leaving {} bytes, the parse {want:?} leaving {}",
                buf.len(),
                plain.len()
            ));
        }
    }
    Ok(())
}

/// `engine_answer`: the first byte picks the request's method (`H` HEAD, anything else GET);
/// the rest is what the engine sent on the connection.
pub fn engine_answer(data: &[u8]) -> Result<(), String> {
    use crate::h1::{self, Chunked, Framing};
    let Some((&m, rest)) = data.split_first() else {
        return Ok(());
    };
    let method = if m == b'H' { Method::HEAD } else { Method::GET };
    kept_heads_agree(rest, &method)?;
    let mut buf = bytes::BytesMut::from(rest);
    let head = match h1::parse_head(&mut buf, &method) {
        Ok(Some(head)) => head,
        Ok(None) | Err(_) if buf.len() == rest.len() => return Ok(()),
        Ok(None) | Err(_) => return Err("a partial or refused head consumed bytes".into()),
    };
    if buf.len() >= rest.len() {
        return Err("a head was taken without consuming a byte".into());
    }
    if head.reusable && head.framing == Framing::Close {
        return Err("an answer that ends with the connection left it reusable".into());
    }
    if let Framing::Length(n) = head.framing {
        let lengths: Vec<Option<u64>> = head
            .headers
            .get_all(http::header::CONTENT_LENGTH)
            .iter()
            .map(|v| v.to_str().ok().and_then(|s| s.trim().parse().ok()))
            .collect();
        if lengths.is_empty() || lengths.iter().any(|l| *l != Some(n)) {
            return Err(format!("Length({n}) framed without Content-Length {n}"));
        }
    }
    if head.framing == Framing::Chunked {
        let before = buf.len();
        let mut state = Chunked::Size;
        let mut out = 0;
        while let Ok(Some(piece)) = h1::decode_chunked(&mut state, &mut buf) {
            if piece.is_empty() {
                return Err("an empty piece of a chunked body".into());
            }
            out += piece.len();
        }
        if out > before - buf.len() {
            return Err("more chunked data than bytes consumed".into());
        }
    }
    Ok(())
}
