//! The scanner's table: what hyper is given and which verdicts are recorded, for streams fed
//! whole, in pieces, and a byte at a time.

use super::*;

const LIMITS: HeadLimits = HeadLimits {
    max_bytes: 16384,
    max_headers: 100,
    timeout: Duration::from_secs(10),
    upgrades: false,
};

/// Feeds `stream` in pieces of `piece` bytes: the verdicts, and what reached hyper.
fn scan_with(
    stream: &[u8],
    piece: usize,
    limits: HeadLimits,
) -> (Vec<Option<&'static str>>, Vec<u8>) {
    let v = Verdicts::default();
    let mut s = Scanner::new(tokio::io::empty(), v.clone(), limits);
    for chunk in stream.chunks(piece) {
        s.feed(chunk);
    }
    let out =
        v.0.lock()
            .expect("lock")
            .pending
            .iter()
            .map(|x| x.map(|r| r.reason))
            .collect();
    (out, s.out)
}

fn scan(stream: &[u8], piece: usize) -> Vec<Option<&'static str>> {
    scan_with(stream, piece, LIMITS).0
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
    // A CONNECT framed with a body is refused: hyper would read the tunnel's first bytes as it.
    for framing in ["Content-Length: 5", "Transfer-Encoding: chunked"] {
        let s = format!("CONNECT a.test:443 HTTP/1.1\r\n{framing}\r\n\r\nGET /x HTTP/1.1\r\n\r\n");
        assert_eq!(
            scan(s.as_bytes(), 4),
            [Some("CONNECT with a body")],
            "{framing}"
        );
    }
    assert_eq!(
        scan(
            b"CONNECT a.test:443 HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            4
        ),
        [None]
    );
}

/// Case 5 of issue 14: hyper reads bare-LF heads and skips leading empty lines; the scanner
/// refuses both outright, first request or kept-alive, and hyper only ever gets the stand-in.
#[test]
fn bare_lf_and_leading_empty_lines_are_refused() {
    let ok = "GET http://a.test/ HTTP/1.1\r\nHost: a\r\n\r\n";
    let cases: [(&str, &str); 6] = [
        (
            "POST http://a.test/ HTTP/1.1\nContent-Length: 3\nContent-Length: 3\n\nabc",
            "bare LF line ending",
        ),
        (
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\nTransfer-Encoding: chunked\r\n\r\n",
            "bare LF line ending",
        ),
        (
            "GET http://a.test/ HTTP/1.1\r\nHost: a\r\n\n",
            "bare LF line ending",
        ),
        (
            "\r\nPOST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
            "leading empty line",
        ),
        (
            "\r\n\r\nGET http://a.test/ HTTP/1.1\r\n\r\n",
            "leading empty line",
        ),
        (
            "\nGET http://a.test/ HTTP/1.1\r\n\r\n",
            "leading empty line",
        ),
    ];
    for (bad, why) in cases {
        for first in [true, false] {
            let stream = if first {
                bad.to_owned()
            } else {
                format!("{ok}{bad}")
            };
            for piece in [1, 2, 5, 4096] {
                let (verdicts, out) = scan_with(stream.as_bytes(), piece, LIMITS);
                let want: Vec<Option<&str>> = if first {
                    vec![Some(why)]
                } else {
                    vec![None, Some(why)]
                };
                assert_eq!(verdicts, want, "{bad:?} first={first} piece={piece}");
                let given = if first { String::new() } else { ok.to_owned() };
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    format!("{given}{}", String::from_utf8_lossy(STAND_IN)),
                    "hyper never sees the refused head"
                );
            }
        }
    }
}

/// Case 11 of issue 14: one head-size limit however the bytes arrive, and the judging does
/// not depend on the pieces.
#[test]
fn the_size_limit_is_the_same_in_any_pieces() {
    let limits = HeadLimits {
        max_bytes: 200,
        ..LIMITS
    };
    let head = |len: usize| {
        let fixed = "GET http://a.test/ HTTP/1.1\r\nX: \r\n\r\n".len();
        format!(
            "GET http://a.test/ HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(len - fixed)
        )
    };
    for piece in [1, 3, 64, 199, 200, 201, 10_000] {
        let at = head(200);
        let over = head(201);
        assert_eq!(scan_with(at.as_bytes(), piece, limits).0, [None], "{piece}");
        assert_eq!(
            scan_with(over.as_bytes(), piece, limits).0,
            [Some("request head too large")],
            "{piece}"
        );
        // Pipelined behind a body, too.
        let two = format!("POST http://a.test/ HTTP/1.1\r\nContent-Length: 2\r\n\r\nab{over}");
        assert_eq!(
            scan_with(two.as_bytes(), piece, limits).0,
            [None, Some("request head too large")],
            "{piece}"
        );
    }
    let many: String = (0..101).map(|i| format!("X-{i}: 1\r\n")).collect();
    let many = format!("GET http://a.test/ HTTP/1.1\r\n{many}\r\n");
    assert_eq!(scan(many.as_bytes(), 7), [Some("too many headers")]);
}

#[test]
fn what_hyper_would_refuse_is_refused_here_first() {
    for (head, why) in [
        (
            "GET http://a.test/ HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
            "malformed Content-Length",
        ),
        (
            "GET http://a.test/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "malformed Content-Length",
        ),
        (
            "POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            "Transfer-Encoding must end in chunked",
        ),
        (
            "POST http://a.test/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "Transfer-Encoding must end in chunked",
        ),
        (
            "GET http://a.test/ HTTP/2.0\r\n\r\n",
            "malformed request head",
        ),
        (
            "G@T http://a.test/ HTTP/1.1\r\n\r\n",
            "malformed request head",
        ),
        (
            "GET http://a.test/ HTTP/1.1\r\nBad Name: x\r\n\r\n",
            "malformed request head",
        ),
        (
            "GET http://a.test/ HTTP/1.1\r\nX: a\rb\r\n\r\n",
            "malformed request head",
        ),
        ("\x00\x01garbage\r\n\r\n", "malformed request head"),
        (
            "GET http://a .test/ HTTP/1.1\r\n\r\n",
            "malformed request head",
        ),
    ] {
        assert_eq!(scan(head.as_bytes(), 3), [Some(why)], "{head:?}");
    }
}

#[test]
fn an_unframeable_chunked_body_ends_the_stream() {
    let stream = b"POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nGET http://b.test/ HTTP/1.1\r\n\r\n";
    let (verdicts, out) = scan_with(stream, 4, LIMITS);
    assert_eq!(verdicts, [None]);
    assert!(
        out.ends_with(b"zz\r\n"),
        "nothing after the bad chunk line reaches hyper"
    );
    // A bare LF in a chunk line or trailer is not framed either.
    let stream = b"POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\nGET http://b.test/ HTTP/1.1\r\n\r\n";
    assert_eq!(scan_with(stream, 4, LIMITS).0, [None]);
}

/// 64 heads of 16 KiB fed a byte at a time: each byte is looked at once (this used to search
/// the whole buffer again after every read, seconds of CPU).
#[test]
fn a_head_fed_a_byte_at_a_time_is_scanned_once() {
    let limits = HeadLimits {
        max_bytes: 17_000,
        ..LIMITS
    };
    let one = format!(
        "GET http://a.test/ HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(16_000)
    );
    let stream = one.repeat(64);
    let (verdicts, out) = scan_with(stream.as_bytes(), 1, limits);
    assert_eq!(verdicts.len(), 64);
    assert!(verdicts.iter().all(Option::is_none));
    assert_eq!(out, stream.as_bytes());
}

#[test]
fn verdicts_are_asked_in_order_and_forgotten_once_passed() {
    let v = Verdicts::default();
    v.push(None);
    v.push(Some(TOO_LARGE));
    v.push(None);
    assert_eq!(v.get(0), None);
    assert_eq!(v.get(1), Some(TOO_LARGE));
    assert_eq!(v.get(2), None);
    // Nothing recorded for a later request: no verdict, and the queue is empty again.
    assert_eq!(v.get(7), None);
    assert!(v.0.lock().expect("lock").pending.is_empty());
    // A request number already passed cannot be judged again.
    assert_eq!(v.get(1), Some(UNKNOWN));
}

#[test]
fn an_upgrade_request_makes_a_tunnel_after_its_body_only_when_asked_for() {
    let stream = b"POST /exec/ab/start HTTP/1.1\r\nUpgrade: tcp\r\nConnection: Upgrade\r\nContent-Length: 4\r\n\r\n{}\r\n\
raw \x01\x02 not a request\r\n\r\n";
    let with = HeadLimits {
        upgrades: true,
        ..LIMITS
    };
    for piece in [1, 3, stream.len()] {
        let (verdicts, out) = scan_with(stream, piece, with);
        assert_eq!(verdicts, [None], "piece {piece}");
        assert_eq!(out, stream, "piece {piece}: tunnel bytes pass untouched");
        // Without the option the raw bytes are judged as the next head, and refused.
        let (verdicts, _) = scan_with(stream, piece, LIMITS);
        assert_eq!(verdicts.len(), 2, "piece {piece}");
        assert!(verdicts[1].is_some(), "piece {piece}");
    }
    // HTTP/1.0 never upgrades (hyper does not either).
    let old = b"GET /attach HTTP/1.0\r\nUpgrade: tcp\r\n\r\nGET /x y z\r\n\r\n";
    assert_eq!(scan_with(old, 5, with).0.len(), 2);
}

/// A head seen again is let through or refused, and its body framed, exactly as the first
/// time, and one that differs in any byte is judged afresh: every sequence of three from
/// heads that differ only in a length, a duplicate header or a body that is itself a head.
#[test]
fn a_head_seen_again_is_judged_as_it_was_the_first_time() {
    let get = "GET http://a.test/ HTTP/1.1\r\n\r\n";
    let requests = [
        get.to_owned(),
        "POST http://a.test/ HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello".to_owned(),
        "POST http://a.test/ HTTP/1.1\r\nContent-Length: 6\r\n\r\nhello!".to_owned(),
        "POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            .to_owned(),
        "POST http://a.test/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"
            .to_owned(),
        format!(
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: {}\r\n\r\n{get}",
            get.len()
        ),
    ];
    let alone: Vec<Option<&str>> = requests
        .iter()
        .map(|r| match scan(r.as_bytes(), r.len())[..] {
            [v] => v,
            ref other => panic!("{r:?}: {other:?}"),
        })
        .collect();
    assert_eq!(alone.iter().filter(|v| v.is_some()).count(), 1);
    let n = requests.len();
    for i in 0..n * n * n {
        let seq = [i / (n * n), i / n % n, i % n];
        let stream: String = seq.iter().map(|&k| requests[k].as_str()).collect();
        let mut verdicts = Vec::new();
        let mut out = Vec::new();
        for &k in &seq {
            verdicts.push(alone[k]);
            if alone[k].is_some() {
                out.extend_from_slice(STAND_IN);
                break;
            }
            out.extend_from_slice(requests[k].as_bytes());
        }
        for piece in [1, 7, stream.len()] {
            let got = scan_with(stream.as_bytes(), piece, LIMITS);
            assert_eq!(
                got,
                (verdicts.clone(), out.clone()),
                "{seq:?}, piece {piece}"
            );
        }
    }
}

/// Only a short head is kept for the next: a connection sending long heads holds no copy of
/// them, and they are judged each time.
#[test]
fn a_long_head_is_not_kept() {
    let long = format!(
        "GET http://a.test/ HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(KEEP_AT_MOST)
    );
    let short = "GET http://a.test/ HTTP/1.1\r\n\r\n";
    let mut s = Scanner::new(tokio::io::empty(), Verdicts::default(), LIMITS);
    s.feed(short.as_bytes());
    assert_eq!(
        (s.last.as_slice(), s.last_judged.is_some()),
        (short.as_bytes(), true)
    );
    for _ in 0..3 {
        s.feed(long.as_bytes());
        assert!(s.last.is_empty() && s.last_judged.is_none());
        assert!(s.last.capacity() <= 2 * KEEP_AT_MOST);
    }
    s.feed(short.as_bytes());
    assert_eq!(s.last, short.as_bytes());
    assert_eq!(
        s.out,
        [short, &long, &long, &long, short].concat().as_bytes()
    );
}

/// A refused head's decision line shows what could be read of its request line: printable
/// ASCII, bounded, whatever the client sent.
#[test]
fn a_refused_heads_request_line_is_read_as_far_as_it_goes() {
    let long = format!("GET http://{}/ HTTP/1.1\r\n", "a".repeat(1000));
    let cases: &[(&[u8], &str, &str)] = &[
        (
            b"GET http://x.test/ HTTP/1.1\r\nHost: x\n",
            "GET",
            "http://x.test/",
        ),
        (b"CONNECT a.test:443", "CONNECT", "a.test:443"),
        (b"PO\x01ST /\xff HTTP/1.1\r\n", "PO?ST", "/?"),
        (b"", "", ""),
        (long.as_bytes(), "GET", ""),
    ];
    for (head, method, target) in cases {
        let got = RequestLine::read(head);
        assert_eq!(got.method, *method, "{head:?}");
        if target.is_empty() && !head.is_empty() {
            assert_eq!(got.target.len(), 256, "bounded");
        } else {
            assert_eq!(got.target, *target, "{head:?}");
        }
    }
}
