//! The pool against small engines on a temporary socket that count the connections they accept.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

use super::*;
use crate::upstream::empty;

fn get(path: &str) -> Request<Body> {
    Request::get(path)
        .header(http::header::HOST, "docker")
        .body(empty())
        .expect("request")
}

/// An engine that answers `answer` to every request head it reads, on every connection it
/// accepts, and then closes the connection if `close` says so.
fn raw_engine(dir: &Path, answer: &'static [u8], close: bool) -> (PathBuf, Arc<AtomicUsize>) {
    let path = dir.join("engine.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                loop {
                    let Ok(n) = s.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                    while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        head.drain(..end + 4);
                        if s.write_all(answer).await.is_err() || close {
                            return;
                        }
                    }
                }
            });
        }
    });
    (path, accepted)
}

async fn read_all(resp: Response<Answer>) -> Bytes {
    resp.into_body().collect().await.expect("body").to_bytes()
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK";

/// Sends `n` pings one after another, reading each answer to the end, to an engine that closes
/// each connection after answering if `close` is set; the connections it accepted.
async fn pings(n: usize, close: bool) -> usize {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, accepted) = raw_engine(dir.path(), OK, close);
    let pool = Pool::new(Arc::new(path));
    for _ in 0..n {
        let resp = pool.send(get("/_ping")).await.expect("answer");
        assert_eq!(read_all(resp).await, "OK");
    }
    accepted.load(Ordering::SeqCst)
}

#[tokio::test]
async fn answers_read_to_the_end_reuse_one_connection() {
    assert_eq!(pings(5, false).await, 1);
}

#[tokio::test]
async fn an_empty_answer_returns_its_connection_unread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, accepted) = raw_engine(dir.path(), b"HTTP/1.1 204 No Content\r\n\r\n", false);
    let pool = Pool::new(Arc::new(path));
    for _ in 0..3 {
        let resp = pool.send(get("/x")).await.expect("answer");
        assert_eq!(resp.status(), StatusCode::NO_CONTENT);
        drop(resp);
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_stream_holds_its_own_connection_and_an_unfinished_one_is_not_reused() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Chunked and never ended: a `logs -f`.
    let (path, accepted) = raw_engine(
        dir.path(),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
        false,
    );
    let pool = Pool::new(Arc::new(path));
    let mut first = pool.send(get("/logs")).await.expect("answer").into_body();
    let frame = first.frame().await.expect("a frame").expect("data");
    assert_eq!(frame.into_data().expect("data"), "abc");
    let second = pool.send(get("/logs")).await.expect("answer");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "the stream's connection is busy"
    );
    drop(first);
    drop(second);
    let _third = pool.send(get("/logs")).await.expect("answer");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        3,
        "a half-read answer's connection is closed"
    );
    assert!(pool.lock().is_empty());
}

#[tokio::test]
async fn a_connection_the_engine_closed_is_replaced() {
    // No `Connection: close`: the proxy learns of the close only from the socket.
    assert_eq!(pings(4, true).await, 4);
}

#[tokio::test]
async fn an_engine_that_is_gone_is_a_connect_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = Pool::new(Arc::new(dir.path().join("absent.sock")));
    let err = pool.send(get("/_ping")).await.expect_err("no engine");
    assert!(matches!(err, UpstreamError::Connect { .. }), "{err}");
    assert!(err.to_string().starts_with("cannot connect to "), "{err}");
}

#[tokio::test]
async fn an_upgraded_connection_never_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, accepted) = raw_engine(
        dir.path(),
        b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n",
        false,
    );
    let pool = Pool::new(Arc::new(path));
    let req = Request::post("/exec/x/start")
        .header(http::header::HOST, "docker")
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::UPGRADE, "tcp")
        .body(empty())
        .expect("request");
    let resp = pool.send(req).await.expect("answer");
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    let upgraded = hyper::upgrade::on(resp).await.expect("upgraded");
    assert!(pool.lock().is_empty());
    drop(upgraded);
    let _ = pool.send(get("/_ping")).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// A request body that never ends (an upload from a client that stalls).
struct Stalled;

impl HttpBody for Stalled {
    type Data = Bytes;
    type Error = crate::upstream::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Pending
    }
}

#[tokio::test]
async fn a_connection_still_sending_its_request_keeps_no_one_waiting() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Answers as soon as it has the head, as dockerd does when it refuses an upload.
    let (path, accepted) = raw_engine(dir.path(), OK, false);
    let pool = Pool::new(Arc::new(path));
    let upload = Request::put("/containers/x/archive?path=/")
        .header(http::header::HOST, "docker")
        .body(Stalled.boxed())
        .expect("request");
    let resp = pool.send(upload).await.expect("an early answer");
    assert_eq!(read_all(resp).await, "OK");
    let next = tokio::time::timeout(std::time::Duration::from_secs(5), pool.send(get("/_ping")))
        .await
        .expect("not held up by the stalled upload")
        .expect("answer");
    assert_eq!(read_all(next).await, "OK");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_request_without_host_is_sent_with_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("engine.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let head = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed before a whole head");
            head.extend_from_slice(&buf[..n]);
        }
        s.write_all(OK).await.expect("write");
        String::from_utf8(head).expect("text")
    });
    let pool = Pool::new(Arc::new(path));
    let req = Request::get("/_ping").body(empty()).expect("request");
    let resp = pool.send(req).await.expect("answer");
    assert_eq!(read_all(resp).await, "OK");
    let head = head.await.expect("engine").to_ascii_lowercase();
    assert!(head.contains("\r\nhost: docker\r\n"), "{head}");
}
