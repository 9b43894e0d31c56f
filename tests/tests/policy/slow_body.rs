//! A JSON body has a deadline as a head has (issue 50, point 5): a create body trickled one
//! byte every 2.5 s is answered 408 in dockerd's shape once `--body-timeout` has passed, its
//! connection is closed and its slot freed, other clients are served meanwhile, and nothing of
//! it reaches the engine.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;

use crate::offline::{assert_refusal, engine};

const TRICKLE: Duration = Duration::from_millis(2500);

#[test]
fn a_trickled_body_is_cut_off_and_its_slot_freed() {
    let up = engine("deer-flow-");
    let p = StackProxy::start_with(up.socket(), "deer-flow-", false, |c| {
        c.body_timeout = Duration::from_secs(5);
        c.max_connections = 2;
    });
    let body = br#"{"Image":"busybox","Cmd":["sleep","600"],"Labels":{"a":"b"}}"#;
    let head = format!(
        "POST /containers/create?name=deer-flow-sandbox-1 HTTP/1.1\r\nHost: docker\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut slow = UnixStream::connect(p.socket()).expect("connect");
    slow.write_all(head.as_bytes()).expect("head");
    slow.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    // One byte every 2.5 s, until the proxy answers (bounded by the body's length).
    let answered = Arc::new(AtomicBool::new(false));
    let mut writer = slow.try_clone().expect("writer");
    let done = answered.clone();
    let trickler = std::thread::spawn(move || {
        for b in body {
            if done.load(Ordering::Relaxed) || writer.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(TRICKLE);
        }
    });
    // Served while the slow body holds its slot.
    assert_eq!(raw::get(p.socket(), "/_ping").expect("answer").status, 200);
    let mut answer = Vec::new();
    slow.read_to_end(&mut answer)
        .expect("answered and closed by the proxy");
    answered.store(true, Ordering::Relaxed);
    let r = raw::parse(&answer).expect("an answer");
    assert_refusal(
        &r,
        408,
        "sockproxy: bad request: request body not complete within 5 s",
    );
    let _ = trickler.join();
    // Both slots are free again: two clients at once are served, neither answered busy.
    let mut a = UnixStream::connect(p.socket()).expect("connect");
    let mut b = UnixStream::connect(p.socket()).expect("connect");
    for s in [&mut a, &mut b] {
        s.write_all(b"GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
            .expect("ping");
    }
    for s in [&mut a, &mut b] {
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("answer");
        let r = raw::parse(&got).expect("an answer");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert!(
        up.requests().iter().all(|r| r.contains("_ping")),
        "{:?}",
        up.requests()
    );
}
