//! Container lists through sockproxy against a recording stand-in upstream: filtered to the
//! stack and limited after filtering, small, large and streamed alike; capped one by one
//! (`--max-list-bytes`) and all together (`--max-list-bytes-total`); and an answer that cannot
//! be read fails closed; a list asking for sizes is refused. Upstreams and refusal checks are
//! `offline`'s.

use sockproxy_tests::raw;
use sockproxy_tests::recorder::Recorder;
use sockproxy_tests::stack::StackProxy;

use crate::offline::{assert_refusal, engine};

/// `{"name":{"^/?deer-flow-":true}}`, form-encoded: the filter a list without a name filter of
/// its own is sent to the engine with.
const OWN_NAME_FILTER: &str = "%7B%22name%22%3A%7B%22%5E%2F%3Fdeer-flow-%22%3Atrue%7D%7D";

#[test]
fn lists_are_filtered_and_limited_after_filtering() {
    let prefix = "deer-flow-";
    let up = engine(prefix);
    let p = StackProxy::start(up.socket(), prefix, false);
    let r = raw::get(p.socket(), "/v1.41/containers/json?all=1&limit=1").expect("answer");
    assert_eq!(r.status, 200);
    let names: Vec<String> = r
        .json()
        .as_array()
        .expect("array")
        .iter()
        .map(|e| e["Names"][0].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(names, ["/deer-flow-sandbox-a"]);
    let r = raw::get(p.socket(), "/v1.41/containers/json?all=1").expect("answer");
    // `//P…` keeps an inner '/' after one is stripped, so it is not the container's own name.
    let body = r.json();
    let ids: Vec<&str> = body
        .as_array()
        .expect("array")
        .iter()
        .map(|e| e["Id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids, ["b", "d"], "{}", r.text());
    // The engine is asked for the stack's containers only (issue 37): an anchored name filter
    // for the prefix, `{"name":{"^/?deer-flow-":true}}`; `limit` is not forwarded.
    assert_eq!(
        up.requests()[0],
        format!("GET /v1.41/containers/json?all=1&filters={OWN_NAME_FILTER}"),
        "limit is not forwarded"
    );
}

/// dockerd sizes every container a list's filters match, the host's, before the proxy keeps the
/// stack's own: a list asking for sizes is refused and never reaches the engine; one saying no
/// (as docker-py and bollard always do) is forwarded as it was sent.
#[test]
fn a_list_asking_for_sizes_is_refused_before_the_engine() {
    let prefix = "deer-flow-";
    let up = engine(prefix);
    let p = StackProxy::start(up.socket(), prefix, false);
    for q in ["size=1", "all=1&size=true", "size=Yes"] {
        let r = raw::get(p.socket(), &format!("/v1.41/containers/json?{q}")).expect("answer");
        let v = q.rsplit('=').next().unwrap_or_default();
        assert_refusal(
            &r,
            403,
            &format!("sockproxy: containers.list: query parameter size={v} is not allowed for this stack (the engine would size every container on the host)"),
        );
    }
    assert_eq!(up.requests(), Vec::<String>::new(), "nothing forwarded");
    let r = raw::get(
        p.socket(),
        "/v1.41/containers/json?all=1&size=False&limit=-1",
    )
    .expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        up.requests(),
        [format!(
            "GET /v1.41/containers/json?all=1&size=False&filters={OWN_NAME_FILTER}"
        )]
    );
}

#[test]
fn unreadable_answers_fail_closed() {
    for body in ["{}", "[", "not json", r#"[{"Names":"/x"}]"#] {
        let up = Recorder::fixed(body);
        let p = StackProxy::start(up.socket(), "deer-flow-", false);
        let r = raw::get(p.socket(), "/containers/json").expect("answer");
        assert_eq!(r.status, 502, "{body}: {}", r.text());
        assert!(r.message().starts_with("sockproxy: upstream unavailable: "));
        // An inspect that cannot be read decides nothing: the stop is never sent.
        let r = raw::request(p.socket(), "POST", "/containers/abcdef/stop", None).expect("answer");
        assert_eq!(r.status, 502, "{body}: {}", r.text());
        assert!(
            up.requests().iter().all(|l| l.starts_with("GET ")),
            "{:?}",
            up.requests()
        );
    }
}

/// A list of 50 of the stack's containers, as the engine would send it.
fn fifty_own_containers() -> String {
    let entries: Vec<String> = (0..50)
        .map(|i| format!(r#"{{"Names":["/deer-flow-{i}"]}}"#))
        .collect();
    format!("[{}]", entries.join(","))
}

/// With the engine at `engine` answering a list of `size` bytes: a cap one byte short is a 502
/// naming the cap, a cap of exactly `size` passes the whole list.
fn assert_list_cap(engine: &std::path::Path, size: usize) {
    let tight = StackProxy::start_with(engine, "deer-flow-", false, |c| {
        c.max_list_bytes = size - 1;
    });
    let r = raw::get(tight.socket(), "/containers/json").expect("answer");
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(
        r.message(),
        format!(
            "sockproxy: upstream unavailable: answer larger than {} bytes",
            size - 1
        )
    );
    let exact = StackProxy::start_with(engine, "deer-flow-", false, |c| {
        c.max_list_bytes = size;
    });
    let r = raw::get(exact.socket(), "/containers/json").expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json().as_array().map(Vec::len), Some(50));
}

#[test]
fn a_list_larger_than_the_cap_fails_closed_and_one_at_the_cap_passes() {
    let big = fifty_own_containers();
    let size = big.len();
    let up = Recorder::start(move |_, _| (200, big.clone()));
    assert_list_cap(up.socket(), size);
}

/// An engine that answers every request with `body` in chunks (no Content-Length), as dockerd
/// does for large answers; one thread, one connection per answer.
fn chunked_engine(body: String) -> (tempfile::TempDir, std::path::PathBuf) {
    use std::io::{BufRead, BufReader, Write};
    let dir = tempfile::tempdir().expect("dir");
    let sock = dir.path().join("engine.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    std::thread::spawn(move || {
        for conn in listener.incoming().take(16).flatten() {
            let mut reader = BufReader::new(conn);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let mut conn = reader.into_inner();
            let mut out = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
            for piece in body.as_bytes().chunks(100) {
                out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                out.extend_from_slice(piece);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
            let _ = conn.write_all(&out);
        }
    });
    (dir, sock)
}

#[test]
fn a_streamed_list_larger_than_the_cap_fails_closed_too() {
    let big = fifty_own_containers();
    let size = big.len();
    let (_dir, engine) = chunked_engine(big);
    assert_list_cap(&engine, size);
}

#[test]
fn a_large_list_is_filtered_like_a_small_one() {
    // Over 128 KiB, so sockproxy filters it off its event loop.
    let entries: Vec<String> = (0..600)
        .map(|i| {
            let owner = if i % 2 == 0 {
                "deer-flow-sandbox"
            } else {
                "other"
            };
            format!(
                r#"{{"Names":["/{owner}-{i}"],"Labels":{{"pad":"{}"}}}}"#,
                "x".repeat(300)
            )
        })
        .collect();
    let big = format!("[{}]", entries.join(","));
    assert!(big.len() > 128 * 1024);
    let up = Recorder::start(move |_, _| (200, big.clone()));
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    let r = raw::get(p.socket(), "/containers/json?all=1&limit=250").expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    let names: Vec<String> = r
        .json()
        .as_array()
        .expect("a list")
        .iter()
        .map(|e| e["Names"][0].as_str().unwrap_or_default().to_owned())
        .collect();
    let expected: Vec<String> = (0..500)
        .step_by(2)
        .map(|i| format!("/deer-flow-sandbox-{i}"))
        .collect();
    assert_eq!(
        names, expected,
        "the stack's entries, in order, limit after filtering"
    );
}

/// Lists buffered at once are bounded all together (`--max-list-bytes-total`), not only one by
/// one: a list that would take the proxy past it is a 503 in dockerd's shape, and a list that
/// fits is filtered as usual. Both with a Content-Length answer and a chunked one.
#[test]
fn buffered_lists_share_one_budget() {
    // Over 200 KiB: the budget is kept in 64 KiB blocks.
    let entries: Vec<String> = (0..3000)
        .map(|i| format!(r#"{{"Id":"{i:064x}","Names":["/deer-flow-sandbox-{i}"]}}"#))
        .collect();
    let big = format!("[{}]", entries.join(","));
    let size = big.len();
    assert!(size > 200 * 1024);
    let (_dir, chunked) = chunked_engine(big.clone());
    let fixed = Recorder::start(move |_, _| (200, big.clone()));
    for sock in [fixed.socket(), chunked.as_path()] {
        // Room for less than one list: refused before it grows past the budget.
        let tight = StackProxy::start_with(sock, "deer-flow-", false, |c| {
            c.max_list_bytes_total = 64 * 1024;
        });
        let r = raw::get(tight.socket(), "/containers/json?all=1").expect("answer");
        assert_refusal(
            &r,
            503,
            "sockproxy: busy: the proxy is buffering as many lists as it may (--max-list-bytes-total)",
        );
        // Room for it: the same list passes, filtered.
        let roomy = StackProxy::start_with(sock, "deer-flow-", false, |c| {
            c.max_list_bytes_total = 4 * size;
        });
        let r = raw::get(roomy.socket(), "/containers/json?all=1").expect("answer");
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.json().as_array().is_some_and(|a| !a.is_empty()));
    }
}
