//! Readiness: a sandbox is ready when anything answers HTTP at its URL. Only the URL lifecycle
//! itself computed is probed (loopback, or the sandbox's address on its own internal network).

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `http://HOST:PORT` → `HOST:PORT`.
fn authority(url: &str) -> Option<&str> {
    url.strip_prefix("http://")
        .map(|rest| rest.split('/').next().unwrap_or(rest))
}

async fn answers_http(addr: &str) -> bool {
    let attempt = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET / HTTP/1.0\r\nHost: sandbox\r\n\r\n")
            .await
            .ok()?;
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).await.ok()?;
        Some(&buf == b"HTTP/")
    };
    tokio::time::timeout(Duration::from_secs(2), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Polls until an HTTP answer arrives or `limit` passes.
pub async fn wait(url: &str, limit: Duration) -> bool {
    let Some(addr) = authority(url) else {
        return false;
    };
    let start = Instant::now();
    while start.elapsed() < limit {
        if answers_http(addr).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
