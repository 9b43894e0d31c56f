use super::*;

fn parts(headers: &[(&str, &str)]) -> Parts {
    let mut b = Request::post("/containers/x/attach");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).expect("request").into_parts().0
}

fn names(h: &HeaderMap) -> Vec<String> {
    let mut v: Vec<String> = h.keys().map(|n| n.as_str().to_owned()).collect();
    v.sort();
    v
}

const HOPS: [(&str, &str); 7] = [
    ("Connection", "Upgrade, Keep-Alive"),
    ("Upgrade", "tcp"),
    ("Keep-Alive", "timeout=5"),
    ("Proxy-Connection", "keep-alive"),
    ("TE", "trailers"),
    ("Proxy-Authorization", "Basic eA=="),
    ("Trailer", "X-Sum"),
];

#[test]
fn a_forwarded_request_keeps_its_own_headers_and_drops_the_connections() {
    let mut all = HOPS.to_vec();
    all.extend([
        ("Content-Type", "application/json"),
        ("X-Registry-Auth", "e30="),
        // The client's length goes: the body sent here is empty (an attach), and hyper writes
        // the length of whatever body it is given.
        ("Content-Length", "5"),
    ]);
    let p = parts(&all);
    let req = upstream_request(
        &p,
        "/v1.41/containers/x/attach?stream=1".into(),
        upstream::empty(),
        false,
    )
    .expect("built");
    assert_eq!(req.method(), http::Method::POST);
    assert_eq!(req.uri(), "/v1.41/containers/x/attach?stream=1");
    assert_eq!(
        names(req.headers()),
        ["content-type", "host", "x-registry-auth"]
    );
    assert_eq!(req.headers()[header::HOST], "docker");

    // An allowed upgrade keeps what asks for it, and the client's Host is passed on.
    let mut all = HOPS.to_vec();
    all.push(("Host", "api"));
    let req = upstream_request(&parts(&all), "/x".into(), upstream::empty(), true).expect("built");
    assert_eq!(names(req.headers()), ["connection", "host", "upgrade"]);
    assert_eq!(req.headers()[header::HOST], "api");
}

#[test]
fn an_answer_passed_on_drops_the_connections_headers_only() {
    let mut h = HeaderMap::new();
    for (k, v) in [
        ("Connection", "close"),
        ("Keep-Alive", "timeout=5"),
        ("Transfer-Encoding", "chunked"),
        ("Api-Version", "1.41"),
        ("Content-Length", "2"),
    ] {
        h.append(
            header::HeaderName::from_static(k.to_ascii_lowercase().leak()),
            HeaderValue::from_static(v),
        );
    }
    let answer = Buffered {
        status: http::StatusCode::OK,
        headers: h.clone(),
        body: bytes::Bytes::from_static(b"OK"),
    };
    assert_eq!(names(buffered_response(answer).headers()), ["api-version"]);

    let mut kept = h;
    drop_answer_hops(&mut kept);
    assert_eq!(names(&kept), ["api-version", "content-length"]);
    let mut none = HeaderMap::new();
    none.insert("api-version", HeaderValue::from_static("1.41"));
    drop_answer_hops(&mut none);
    assert_eq!(names(&none), ["api-version"]);
}
