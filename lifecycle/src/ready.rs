//! Readiness: a sandbox is ready when anything answers HTTP at its URL. Only the URL lifecycle
//! itself computed is probed (loopback, or the sandbox's address on its own internal network).
//! `wait` is the create's poll until a deadline; `answers` is one bounded attempt, for the
//! provider's check of a warm sandbox before it hands it out again.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bound on one attempt of the create's poll (a sandbox still starting may accept and stall).
const ATTEMPT: Duration = Duration::from_secs(2);

/// `http://HOST:PORT` → `HOST:PORT`.
fn authority(url: &str) -> Option<&str> {
    url.strip_prefix("http://")
        .map(|rest| rest.split('/').next().unwrap_or(rest))
}

/// One attempt: connect, send a request, read the start of an answer, all within `within`.
async fn answers_http(addr: &str, within: Duration) -> bool {
    let attempt = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET / HTTP/1.0\r\nHost: sandbox\r\n\r\n")
            .await
            .ok()?;
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).await.ok()?;
        Some(&buf == b"HTTP/")
    };
    tokio::time::timeout(within, attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Whether anything answers HTTP at `url` now, within `within` (a hung listener counts as dead).
pub async fn answers(url: &str, within: Duration) -> bool {
    match authority(url) {
        Some(addr) => answers_http(addr, within).await,
        None => false,
    }
}

/// Polls until an HTTP answer arrives or `limit` passes.
pub async fn wait(url: &str, limit: Duration) -> bool {
    let Some(addr) = authority(url) else {
        return false;
    };
    let start = Instant::now();
    while start.elapsed() < limit {
        if answers_http(addr, ATTEMPT).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
