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
    /// Answers with an error status (4xx, 5xx).
    pub refused: usize,
    /// CPU time the proxy in the path spent per answered request (zero when direct).
    pub cpu_per_req: Duration,
    /// How much of the machine's CPU time went idle over the load, in percent.
    pub idle_pct: f64,
    /// CPU time the load generator (this process's own threads) spent per answered request.
    pub client_cpu_per_req: Duration,
    /// CPU time the engine's process spent per answered request.
    pub engine_cpu_per_req: Duration,
}

/// The request a client sends: (client number, its request number) → (method, path).
pub type Requests = Arc<dyn Fn(usize, usize) -> (&'static str, String) + Send + Sync>;

/// The same request every time.
pub fn same(method: &'static str, path: &str) -> Requests {
    let path = path.to_owned();
    Arc::new(move |_, _| (method, path.clone()))
}

/// `requests` requests over `concurrency` kept-alive connections to `sock`.
pub async fn load(
    sock: &Path,
    method: &'static str,
    path: &str,
    concurrency: usize,
    requests: usize,
) -> Load {
    load_with(sock, &same(method, path), concurrency, requests).await
}

/// Like `load`, each client sending what `next` says.
pub async fn load_with(sock: &Path, next: &Requests, concurrency: usize, requests: usize) -> Load {
    let issued = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + LOAD_TIME_LIMIT;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..concurrency {
        let (sock, next, issued) = (sock.to_owned(), next.clone(), issued.clone());
        tasks.push(tokio::spawn(async move {
            let (mut lat, mut refused) = (Vec::new(), 0);
            let Ok(stream) = tokio::net::UnixStream::connect(&sock).await else {
                return (lat, 1, refused);
            };
            let Ok((mut sender, conn)) =
                hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
                    .await
            else {
                return (lat, 1, refused);
            };
            tokio::spawn(conn);
            let mut nth = 0;
            while issued.fetch_add(1, Ordering::Relaxed) < requests && Instant::now() < deadline {
                let (method, path) = next(client, nth);
                nth += 1;
                let req = hyper::Request::builder()
                    .method(method)
                    .uri(path.as_str())
                    .header("Host", "docker")
                    .body(Empty::new())
                    .expect("a well-formed request");
                let t = Instant::now();
                let Ok(resp) = sender.send_request(req).await else {
                    return (lat, 1, refused);
                };
                refused += usize::from(resp.status().as_u16() >= 400);
                if resp.into_body().collect().await.is_err() {
                    return (lat, 1, refused);
                }
                lat.push(t.elapsed());
            }
            (lat, 0, refused)
        }));
    }
    let mut all = Vec::new();
    let (mut failed, mut refused) = (0, 0);
    for t in tasks {
        let (lat, f, r) = t.await.unwrap_or_default();
        all.extend(lat);
        failed += f;
        refused += r;
    }
    let elapsed = start.elapsed();
    all.sort();
    Load {
        rps: all.len() as f64 / elapsed.as_secs_f64(),
        answered: all.len(),
        p50: quantile(&all, 0.50),
        p99: quantile(&all, 0.99),
        failed,
        refused,
        cpu_per_req: Duration::ZERO,
        idle_pct: 0.0,
        client_cpu_per_req: Duration::ZERO,
        engine_cpu_per_req: Duration::ZERO,
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
