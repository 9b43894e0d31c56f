use super::*;
use proptest::prelude::*;

/// What a caller can tell of a parse: the head's parts, its headers in order, and what is left
/// in the buffer.
type Whole = (u16, Framing, bool, Vec<(String, Vec<u8>)>);
type Seen = Option<Whole>;

fn view(head: Option<Head>) -> Seen {
    head.map(|h| {
        let headers = h
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect();
        (h.status.as_u16(), h.framing, h.reusable, headers)
    })
}

/// What both parses gave, errors included.
type Got = (Result<Seen, String>, Vec<u8>);

/// `raw` through `last` and through a plain parse: `Err` when the two disagree.
fn both(last: &mut LastHead, raw: &[u8], method: &Method) -> Result<Got, String> {
    let mut a = BytesMut::from(raw);
    let mut b = BytesMut::from(raw);
    let kept = last
        .parse(&mut a, method)
        .map(view)
        .map_err(|e| e.to_string());
    let plain = h1::parse_head(&mut b, method)
        .map(view)
        .map_err(|e| e.to_string());
    if kept != plain || a != b {
        return Err(format!(
            "{raw:?}: kept {kept:?} / {a:?}, parsed {plain:?} / {b:?}"
        ));
    }
    Ok((kept, a.to_vec()))
}

/// A whole head that both parses agree on, and what is left after it.
fn whole(last: &mut LastHead, raw: &[u8], method: &Method) -> (Seen, Vec<u8>) {
    match both(last, raw, method) {
        Ok((Ok(seen @ Some(_)), rest)) => (seen, rest),
        other => panic!("{other:?}"),
    }
}

fn ping(date: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nCache-Control: no-cache, no-store, \
         must-revalidate\r\nContent-Length: 0\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Docker-Experimental: false\r\nOstype: linux\r\nPragma: no-cache\r\nServer: \
         Docker/20.10.24+dfsg1 (linux)\r\nDate: {date}\r\n\r\n"
    )
    .into_bytes()
}

const D1: &str = "Wed, 02 Dec 2026 08:21:31 GMT";
const D2: &str = "Wed, 02 Dec 2026 08:21:32 GMT";

/// dockerd's `/_ping` answer a second time, a second later: reused, with the new Date in the
/// old one's place, and exactly what a parse gives.
#[test]
fn the_next_ping_answer_is_the_kept_one_with_its_own_date() {
    let mut last = LastHead::default();
    let (first, _) = whole(&mut last, &ping(D1), &Method::HEAD);
    let mut buf = BytesMut::from(&ping(D2)[..]);
    assert!(
        last.reuse(&mut buf, &Method::HEAD).is_some(),
        "a head that differs only in its Date is reused"
    );
    let (second, rest) = whole(&mut last, &ping(D2), &Method::HEAD);
    assert!(rest.is_empty());
    let (first, second) = (first.expect("whole"), second.expect("whole"));
    let date = |s: &Whole| {
        s.3.iter()
            .position(|(n, _)| n == "date")
            .map(|i| s.3[i].clone())
    };
    assert_eq!(date(&second), Some(("date".into(), D2.as_bytes().to_vec())));
    assert_eq!(date(&first).map(|d| d.0), date(&second).map(|d| d.0));
    assert_eq!(first.3.len(), second.3.len());
    assert_eq!(second.3.last().map(|h| h.0.as_str()), Some("date"));
}

/// A stop's 204, with what came after it left in the buffer.
#[test]
fn bytes_after_the_head_stay_for_the_next_read() {
    let mut last = LastHead::default();
    let stop =
        |d: &str| format!("HTTP/1.1 204 No Content\r\nApi-Version: 1.41\r\nDate: {d}\r\n\r\n");
    whole(&mut last, stop(D1).as_bytes(), &Method::POST);
    let raw = format!("{}HTTP/1.1 204", stop(D2));
    let (_, rest) = whole(&mut last, raw.as_bytes(), &Method::POST);
    assert_eq!(rest, b"HTTP/1.1 204");
}

/// Heads that must be parsed afresh: they differ elsewhere, their Date would not be read as
/// it stands, or the request differs in kind. Each still agrees with a plain parse.
#[test]
fn anything_but_a_plain_new_date_is_parsed_afresh() {
    let kept = ping(D1);
    let with_body = replaced(&ping(D1), "Content-Length: 0", "Content-Length: 5");
    let cases: Vec<(&[u8], Vec<u8>, Method)> = vec![
        (
            &kept,
            replaced(&ping(D2), "Ostype: linux", "Ostype: Linux"),
            Method::HEAD,
        ),
        (&kept, ping(" ed, 02 Dec 2026 08:21:32 GMT"), Method::HEAD),
        (&kept, ping("Wed, 02 Dec 2026 08:21:32 GM "), Method::HEAD),
        (&kept, ping("Wed, 02 Dec 2026\t08:21:32 GMT"), Method::HEAD),
        (&kept, ping("Wed, 02 Dec\r\nX: 2026 08:21:32"), Method::HEAD),
        (
            &kept,
            ping("Wed, 02 Dec 2026 08:21:3\r\n\r\n"),
            Method::HEAD,
        ),
        (
            &kept,
            ping("Wed, 02 Dec 2026 08:21:32 G\u{e9}"),
            Method::HEAD,
        ),
        // The answer to a GET carries its body, whatever a HEAD's did not.
        (
            &with_body,
            replaced(&ping(D2), "Content-Length: 0", "Content-Length: 5"),
            Method::GET,
        ),
    ];
    for (primed, raw, method) in cases {
        let mut last = LastHead::default();
        whole(&mut last, primed, &Method::HEAD);
        let mut buf = BytesMut::from(&raw[..]);
        assert!(
            last.reuse(&mut buf, &method).is_none(),
            "{:?} was reused",
            String::from_utf8_lossy(&raw)
        );
        let _agreed = both(&mut last, &raw, &method).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Answers with a body are not kept: the next one is parsed whole.
#[test]
fn an_answer_with_a_body_is_not_kept() {
    let mut last = LastHead::default();
    let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nDate: x\r\n\r\n{}";
    let (_, rest) = whole(&mut last, raw, &Method::GET);
    assert_eq!(rest, b"{}");
    assert!(last.0.is_none());
}

fn replaced(raw: &[u8], from: &str, to: &str) -> Vec<u8> {
    String::from_utf8_lossy(raw).replace(from, to).into_bytes()
}

fn header_line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Content-Length: 0".to_owned()),
        Just("Content-Length: 3".to_owned()),
        Just("Connection: close".to_owned()),
        Just("Transfer-Encoding: chunked".to_owned()),
        Just("Date: Wed, 02 Dec 2026 08:21:31 GMT".to_owned()),
        "[A-Za-z-]{1,12}: [ -~]{0,20}",
    ]
}

proptest! {
    /// A head kept from one answer, then an answer of the same shape whose Date value is the
    /// old one with a few bytes changed (to bytes a head may or may not carry there), perhaps
    /// one byte longer: through the kept head or parsed, the same result.
    #[test]
    fn a_kept_head_answers_as_a_parse_would(
        status in prop_oneof![Just("200 OK"), Just("204 No Content"), Just("304 Not Modified")],
        lines in proptest::collection::vec(header_line(), 0..6),
        at in 0usize..6,
        old in "[!-~][ -~]{0,10}[!-~]",
        edits in proptest::collection::vec(
            (0usize..12, prop_oneof![
                Just(b' '), Just(b'\t'), Just(b'\r'), Just(b'\n'), Just(0xe9u8), 0x21u8..0x7f,
            ]),
            0..3,
        ),
        longer in any::<bool>(),
        head_first in any::<bool>(),
        head_then in any::<bool>(),
        tail in proptest::collection::vec(any::<u8>(), 0..8),
    ) {
        let build = |date: &[u8]| {
            let date_line = [b"Date: ", date, b"\r\n"].concat();
            let at = at.min(lines.len());
            let mut raw = format!("HTTP/1.1 {status}\r\n").into_bytes();
            for (i, l) in lines.iter().enumerate() {
                if i == at {
                    raw.extend_from_slice(&date_line);
                }
                raw.extend_from_slice(l.as_bytes());
                raw.extend_from_slice(b"\r\n");
            }
            if at == lines.len() {
                raw.extend_from_slice(&date_line);
            }
            raw.extend_from_slice(b"\r\n");
            raw
        };
        let method = |head: bool| if head { Method::HEAD } else { Method::GET };
        let mut new = old.clone().into_bytes();
        for (i, b) in edits {
            let i = i % new.len();
            new[i] = b;
        }
        if longer {
            new.push(b'x');
        }
        let mut last = LastHead::default();
        let _first = both(&mut last, &build(old.as_bytes()), &method(head_first))
            .map_err(TestCaseError::fail)?;
        let mut second = build(&new);
        second.extend_from_slice(&tail);
        let _second = both(&mut last, &second, &method(head_then)).map_err(TestCaseError::fail)?;
    }
}
