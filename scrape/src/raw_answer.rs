//! An answer written where no HTTP server runs yet: a connection over a cap (sockproxy's and
//! `lifecycle serve`'s `--max-connections`, netproxy's connection caps and descriptor limit) is
//! told 503 in the program's own shape before hyper is given the connection, then closed.
//! `bytes` is the answer (status line, the given headers, `content-length`, body); `send`
//! writes it and closes the connection, bounded in time whatever the client does.

use std::time::Duration;

use hyper::{HeaderMap, StatusCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The longest a refused connection is kept: a client that neither reads nor closes must not
/// keep the task, or its descriptor.
const WITHIN: Duration = Duration::from_secs(1);
/// What is read of a refused client's request, at most, before closing.
const DRAIN_BYTES: usize = 64 * 1024;

/// `status`, `headers` and `body` as the bytes of an HTTP/1.1 answer, with its
/// `content-length`. The headers are the caller's: `connection: close` among them, as the
/// connection is closed after it.
pub fn bytes(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .into_bytes();
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out
}

/// Writes `answer`, shuts down the write side, then reads what the client already sent (at
/// most 64 KiB, for at most `drain`) before the stream is dropped: closing on unread bytes
/// resets the connection, and the client would read the reset instead of the answer. All of it
/// within a second. `drain` zero: no wait for the client (an accept loop answering inline).
pub async fn send<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    answer: &[u8],
    drain: Duration,
) {
    let send = async {
        let _ = stream.write_all(answer).await;
        let _ = stream.shutdown().await;
        if drain.is_zero() {
            return;
        }
        let read = async {
            let mut buf = [0u8; 4096];
            let mut left = DRAIN_BYTES;
            while left > 0 {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
        };
        let _ = tokio::time::timeout(drain, read).await;
    };
    let _ = tokio::time::timeout(WITHIN, send).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE};

    fn headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(CONNECTION, HeaderValue::from_static("close"));
        h
    }

    #[test]
    fn the_answer_is_status_headers_length_and_body() {
        let raw = bytes(StatusCode::SERVICE_UNAVAILABLE, &headers(), b"{\"m\":1}\n");
        assert_eq!(
            String::from_utf8_lossy(&raw),
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 8\r\n\r\n{\"m\":1}\n"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_sent_a_request_reads_the_whole_answer() {
        let (mut server, mut client) = tokio::io::duplex(1 << 20);
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("request");
        let answer = bytes(StatusCode::SERVICE_UNAVAILABLE, &headers(), b"busy");
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let _ = client.read_to_end(&mut got).await;
            got
        });
        send(&mut server, &answer, Duration::from_millis(500)).await;
        drop(server);
        assert_eq!(reader.await.expect("reader"), answer);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_neither_reads_nor_closes_is_let_go_within_a_second() {
        // 16 bytes of room: the answer cannot be written whole.
        let (mut server, _client) = tokio::io::duplex(16);
        let answer = bytes(StatusCode::SERVICE_UNAVAILABLE, &headers(), &[b'x'; 1024]);
        let start = tokio::time::Instant::now();
        send(&mut server, &answer, Duration::from_millis(500)).await;
        assert!(start.elapsed() <= WITHIN + Duration::from_millis(1));
    }
}
