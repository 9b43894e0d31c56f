//! The load generator for the Unix-socket parts: hyper HTTP/1.1 clients on kept-alive
//! connections, one per concurrent client, sharing one request budget and one deadline.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

/// Every load also stops at this, whatever is left of its request budget.
pub const LOAD_TIME_LIMIT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub rps: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub answered: usize,
    /// Requests that got no answer (a broken connection ends its client).
    pub failed: usize,
    /// CPU time the proxy in the path spent per answered request (zero when direct).
    pub cpu_per_req: Duration,
}

/// `requests` requests over `concurrency` kept-alive connections to `sock`.
pub async fn load(
    sock: &Path,
    method: &'static str,
    path: &str,
    concurrency: usize,
    requests: usize,
) -> Load {
    let issued = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + LOAD_TIME_LIMIT;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (sock, path, issued) = (sock.to_owned(), path.to_owned(), issued.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let Ok(stream) = tokio::net::UnixStream::connect(&sock).await else {
                return (lat, 1);
            };
            let Ok((mut sender, conn)) =
                hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
                    .await
            else {
                return (lat, 1);
            };
            tokio::spawn(conn);
            while issued.fetch_add(1, Ordering::Relaxed) < requests && Instant::now() < deadline {
                let req = hyper::Request::builder()
                    .method(method)
                    .uri(path.as_str())
                    .header("Host", "docker")
                    .body(Empty::new())
                    .expect("a static request");
                let t = Instant::now();
                let Ok(resp) = sender.send_request(req).await else {
                    return (lat, 1);
                };
                if resp.into_body().collect().await.is_err() {
                    return (lat, 1);
                }
                lat.push(t.elapsed());
            }
            (lat, 0)
        }));
    }
    let mut all = Vec::new();
    let mut failed = 0;
    for t in tasks {
        let (lat, f) = t.await.unwrap_or_default();
        all.extend(lat);
        failed += f;
    }
    let elapsed = start.elapsed();
    all.sort();
    Load {
        rps: all.len() as f64 / elapsed.as_secs_f64(),
        answered: all.len(),
        p50: quantile(&all, 0.50),
        p99: quantile(&all, 0.99),
        failed,
        cpu_per_req: Duration::ZERO,
    }
}

/// The `q` quantile of sorted `v` (zero when empty).
pub fn quantile(v: &[Duration], q: f64) -> Duration {
    v.get(((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

pub fn median<T: Copy>(mut v: Vec<T>, key: impl Fn(&T) -> f64) -> T {
    v.sort_by(|a, b| key(a).total_cmp(&key(b)));
    v[v.len() / 2]
}

pub fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}
