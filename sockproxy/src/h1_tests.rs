use super::*;
use proptest::prelude::*;

/// The head at the start of `raw`, and how many bytes it took.
fn head(raw: &str, method: &Method) -> Result<Option<(Head, usize)>, H1Error> {
    let mut buf = BytesMut::from(raw.as_bytes());
    let h = parse_head(&mut buf, method)?;
    if h.is_none() {
        assert_eq!(buf.len(), raw.len(), "a partial head is left in place");
    }
    Ok(h.map(|h| (h, raw.len() - buf.len())))
}

fn framing(raw: &str) -> Result<(Framing, bool), H1Error> {
    let (h, _) = head(raw, &Method::GET)?.expect("whole");
    Ok((h.framing, h.reusable))
}

#[test]
fn requests_go_out_whole_with_their_own_length() {
    let req = http::Request::post("/v1.41/containers/create?name=x")
        .header("host", "docker")
        .header("content-type", "application/json")
        .header("content-length", "999")
        .header("transfer-encoding", "chunked")
        .header("expect", "100-continue")
        .header("user-agent", "Docker-Client/20.10.24")
        .body(())
        .expect("request");
    let (parts, ()) = req.into_parts();
    let encode = |parts: &http::request::Parts, body: &[u8]| {
        let mut out = BytesMut::new();
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        encode_request(
            &parts.method,
            target,
            &parts.headers,
            |_| false,
            body,
            &mut out,
        )
        .expect("encoded");
        out
    };
    let out = encode(&parts, b"{\"Image\":\"b\"}");
    assert_eq!(
        &out[..],
        b"POST /v1.41/containers/create?name=x HTTP/1.1\r\nhost: docker\r\ncontent-type: application/json\r\nuser-agent: Docker-Client/20.10.24\r\ncontent-length: 13\r\n\r\n{\"Image\":\"b\"}"
    );
    let (parts, ()) = http::Request::head("/_ping")
        .body(())
        .expect("request")
        .into_parts();
    assert_eq!(
        &encode(&parts, b"")[..],
        b"HEAD /_ping HTTP/1.1\r\nhost: docker\r\n\r\n"
    );
    let (parts, ()) = http::Request::post("/containers/x/stop")
        .header("keep-alive", "5")
        .body(())
        .expect("request")
        .into_parts();
    let mut out = BytesMut::new();
    let skip = |n: &HeaderName| n.as_str() == "keep-alive";
    encode_request(
        &parts.method,
        "/containers/x/stop",
        &parts.headers,
        skip,
        b"",
        &mut out,
    )
    .expect("encoded");
    assert_eq!(
        &out[..],
        b"POST /containers/x/stop HTTP/1.1\r\nhost: docker\r\ncontent-length: 0\r\n\r\n"
    );
    for bad in ["", "/a b", "/a\r\nX: y", "/\x7f"] {
        let e = encode_request(
            &Method::GET,
            bad,
            &HeaderMap::new(),
            |_| false,
            b"",
            &mut out,
        );
        assert_eq!(e, Err(H1Error::Target), "{bad:?}");
    }
}

#[test]
fn heads_are_read_as_dockerd_sends_them() {
    let ping = "HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nCache-Control: no-cache, no-store, must-revalidate\r\nContent-Length: 2\r\nContent-Type: text/plain; charset=utf-8\r\nDocker-Experimental: false\r\nOstype: linux\r\nPragma: no-cache\r\nServer: Docker/20.10.24+dfsg1 (linux)\r\nDate: Mon, 30 Nov 2026 23:00:00 GMT\r\n\r\nOK";
    let (h, n) = head(ping, &Method::GET).expect("parses").expect("whole");
    assert_eq!(n, ping.len() - 2);
    assert_eq!(h.status, StatusCode::OK);
    assert_eq!(h.version, Version::HTTP_11);
    assert_eq!(h.headers.len(), 9);
    assert_eq!(h.headers["api-version"], "1.41");
    assert_eq!(h.framing, Framing::Length(2));
    assert!(h.reusable);
    // Every byte short of the blank line is not yet a head.
    for cut in 0..n {
        assert!(
            head(&ping[..cut], &Method::GET).expect("partial").is_none(),
            "{cut}"
        );
    }
    // The same answer to HEAD has no body.
    let (h, _) = head(ping, &Method::HEAD).expect("parses").expect("whole");
    assert_eq!(h.framing, Framing::Empty);
}

#[test]
fn framing_table() {
    type Row<'a> = (&'a str, Result<(Framing, bool), H1Error>);
    let rows: [Row; 14] = [
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            Ok((Framing::Empty, true)),
        ),
        (
            "HTTP/1.1 204 No Content\r\n\r\n",
            Ok((Framing::Empty, true)),
        ),
        (
            "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
            Ok((Framing::Empty, true)),
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            Ok((Framing::Chunked, true)),
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            Ok((Framing::Chunked, true)),
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n",
            Ok((Framing::Length(5), false)),
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            Ok((Framing::Length(5), true)),
        ),
        // A hijacked stream, or an answer with no framing: read to the connection's end.
        (
            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n\r\n",
            Ok((Framing::Close, false)),
        ),
        (
            "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n",
            Ok((Framing::Length(1), false)),
        ),
        (
            "HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\n",
            Ok((Framing::Length(1), true)),
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            Err(H1Error::Framing("Content-Length with Transfer-Encoding")),
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            Err(H1Error::Framing("two Content-Lengths")),
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
            Err(H1Error::Framing("a Content-Length that is no number")),
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            Err(H1Error::Framing("a Transfer-Encoding other than chunked")),
        ),
    ];
    for (raw, want) in rows {
        assert_eq!(framing(raw), want, "{raw:?}");
    }
    assert_eq!(
        head(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: tcp\r\n\r\n",
            &Method::POST
        )
        .err(),
        Some(H1Error::Upgrade)
    );
    assert!(matches!(
        head("HTTP/1.1 200 OK\nX: y\r\n\r\n", &Method::GET),
        Ok(Some(_)) | Err(_)
    ));
    assert!(matches!(
        head("HTTQ/1.1 200 OK\r\n\r\n", &Method::GET),
        Err(H1Error::Head(_))
    ));
    assert!(matches!(
        head("HTTP/1.1 200 OK\r\nX: \x01\r\n\r\n", &Method::GET),
        Err(H1Error::Head(_))
    ));
    let huge = format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(MAX_HEAD));
    assert_eq!(head(&huge, &Method::GET).err(), Some(H1Error::HeadTooLarge));
    let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: 1\r\n")).collect();
    let many = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
    assert!(matches!(head(&many, &Method::GET), Err(H1Error::Head(_))));
}

fn dechunk(wire: &[u8], piece: usize) -> Result<(Vec<u8>, usize), H1Error> {
    let mut state = Chunked::Size;
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut fed = 0;
    for part in wire.chunks(piece.max(1)) {
        buf.extend_from_slice(part);
        fed += part.len();
        while let Some(data) = decode_chunked(&mut state, &mut buf)? {
            out.extend_from_slice(&data);
        }
        if state == Chunked::Done {
            break;
        }
    }
    if state != Chunked::Done {
        return Err(H1Error::Closed);
    }
    // What follows the body: left in the buffer, or not fed yet.
    Ok((out, buf.len() + wire.len() - fed))
}

#[test]
fn chunked_bodies() {
    let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\nNEXT";
    for piece in [1, 2, 3, 5, 64] {
        assert_eq!(
            dechunk(wire, piece),
            Ok((b"hello, world".to_vec(), 4)),
            "{piece}"
        );
    }
    assert_eq!(dechunk(b"0\r\n\r\n", 1), Ok((vec![], 0)));
    assert_eq!(
        dechunk(b"3\r\nabcd\r\n0\r\n\r\n", 4).err(),
        Some(H1Error::Chunk("chunk data longer than its size"))
    );
    assert_eq!(
        dechunk(b"zz\r\n", 4).err(),
        Some(H1Error::Chunk("a chunk size that is no number"))
    );
    assert_eq!(dechunk(b"5\r\nhel", 4).err(), Some(H1Error::Closed));
    let long = vec![b'1'; MAX_LINE + 2];
    assert_eq!(
        dechunk(&long, 4096).err(),
        Some(H1Error::Chunk("a chunk size that is no number"))
    );
}

proptest! {
    /// Any split of any body, chunked in any sizes, comes back whole and consumes exactly the
    /// body's bytes.
    #[test]
    fn chunked_round_trip(body in proptest::collection::vec(any::<u8>(), 0..600),
                          sizes in proptest::collection::vec(1usize..50, 1..20),
                          piece in 1usize..40) {
        let mut wire = Vec::new();
        let mut rest = &body[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = sizes[i % sizes.len()].min(rest.len());
            wire.extend_from_slice(format!("{n:x}\r\n").as_bytes());
            wire.extend_from_slice(&rest[..n]);
            wire.extend_from_slice(b"\r\n");
            rest = &rest[n..];
            i += 1;
        }
        wire.extend_from_slice(b"0\r\n\r\n");
        prop_assert_eq!(dechunk(&wire, piece), Ok((body, 0)));
    }

    /// Whatever the engine sends, the head parser answers without panicking, and a head it
    /// takes is no longer than the bytes it was given.
    #[test]
    fn any_bytes_parse_or_fail(raw in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut buf = BytesMut::from(&raw[..]);
        match parse_head(&mut buf, &Method::GET) {
            Ok(Some(_)) => prop_assert!(buf.len() <= raw.len()),
            _ => prop_assert_eq!(buf.len(), raw.len()),
        }
        let mut state = Chunked::Size;
        let mut buf = BytesMut::from(&raw[..]);
        while let Ok(Some(_)) = decode_chunked(&mut state, &mut buf) {}
    }
}
