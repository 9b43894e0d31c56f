//! The endpoint's HTTP side: `GET /metrics` (the Prometheus text exposition) and `GET /healthz`
//! (a small JSON object, 200 when healthy and 503 when not), one request per connection. Kept
//! small on purpose: at most `MAX_CONNECTIONS` at once, a request head within `HEAD_TIMEOUT`, a
//! whole exchange within `CONNECTION_TIMEOUT`, so a scraper that stalls costs the proxy nothing
//! it needs for its own clients. A scraper is always answered: when every slot is taken, the
//! oldest connection that has not yet sent a request head gives its slot to the new one (16
//! idle connections once kept every scrape out for 10 s, renewable at will); a new connection
//! is closed unanswered only when all the slots are answering requests.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

use crate::listen::Listener;

/// Connections served at once; a scraper needs one.
const MAX_CONNECTIONS: usize = 16;
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// What `/healthz` answers: 200 when `ok`, else 503; `body` either way.
#[derive(Debug, Clone)]
pub struct Health {
    pub ok: bool,
    pub body: serde_json::Value,
}

/// What a process exposes.
pub trait Exposition: Send + Sync + 'static {
    /// The Prometheus text exposition (`crate::encode`), read at scrape time.
    fn metrics(&self) -> String;
    /// The process's health, which may ask what it depends on (the engine, the resolver).
    fn health(&self) -> impl Future<Output = Health> + Send;
}

/// The connections that hold a slot and have not yet sent a request head, oldest first: each
/// with the sender that closes it, and its number (a connection leaves the queue by number
/// when its head arrives, or when it ends).
#[derive(Debug, Default)]
struct Waiting {
    queue: VecDeque<(u64, oneshot::Sender<()>)>,
    next: u64,
}

impl Waiting {
    fn enter(&mut self) -> (u64, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let n = self.next;
        self.next += 1;
        self.queue.push_back((n, tx));
        (n, rx)
    }

    fn leave(&mut self, n: u64) {
        self.queue.retain(|(m, _)| *m != n);
    }

    /// Closes the oldest connection still waiting for its head; `false` when there is none.
    fn evict_oldest(&mut self) -> bool {
        match self.queue.pop_front() {
            Some((_, close)) => {
                let _ = close.send(());
                true
            }
            None => false,
        }
    }
}

/// Serves `listener` until `shutdown` resolves, then closes it (a socket file goes with it).
pub async fn serve<E: Exposition>(
    listener: Listener,
    exposition: Arc<E>,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let waiting = Arc::new(Mutex::new(Waiting::default()));
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            a = accept(&listener) => a,
        };
        match accepted {
            Ok(io) => {
                let slot = match slots.clone().try_acquire_owned() {
                    Ok(slot) => slot,
                    Err(_) => {
                        let evicted = waiting.lock().is_ok_and(|mut w| w.evict_oldest());
                        if !evicted {
                            // Every slot is answering: this one is closed unanswered.
                            continue;
                        }
                        // The evicted connection's task frees its slot as it ends.
                        match slots.clone().acquire_owned().await {
                            Ok(slot) => slot,
                            Err(_) => continue,
                        }
                    }
                };
                let Ok((n, closed)) = waiting.lock().map(|mut w| w.enter()) else {
                    continue;
                };
                let e = exposition.clone();
                let w = waiting.clone();
                tokio::spawn(async move {
                    let served = connection(io, e, w.clone(), n);
                    tokio::select! {
                        _ = tokio::time::timeout(CONNECTION_TIMEOUT, served) => {}
                        // `Err`: the sender went with the head's arrival; only `Ok` closes.
                        Ok(()) = closed => {}
                    }
                    if let Ok(mut w) = w.lock() {
                        w.leave(n);
                    }
                    drop(slot);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                // Out of file descriptors and the like: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

type Io = Box<dyn Stream>;
trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

async fn accept(listener: &Listener) -> std::io::Result<Io> {
    Ok(match listener {
        Listener::Unix(l, _) => Box::new(l.accept().await?.0),
        Listener::Tcp(l) => {
            let (s, _) = l.accept().await?;
            let _ = s.set_nodelay(true);
            Box::new(s)
        }
    })
}

async fn connection<E: Exposition>(
    io: Io,
    exposition: Arc<E>,
    waiting: Arc<Mutex<Waiting>>,
    n: u64,
) {
    let svc = service_fn(move |req| {
        // A head arrived: this connection is being answered and is no longer evicted.
        if let Ok(mut w) = waiting.lock() {
            w.leave(n);
        }
        let e = exposition.clone();
        async move { Ok::<_, Infallible>(answer(&*e, &req).await) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .keep_alive(false)
        .serve_connection(TokioIo::new(io), svc);
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "metrics endpoint: connection ended with an error");
    }
}

async fn answer<E: Exposition>(e: &E, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let known = matches!(path, "/metrics" | "/healthz");
    if known && req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return r;
    }
    match path {
        "/metrics" => {
            let mut r = Response::new(Full::new(Bytes::from(e.metrics())));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(
                    prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                ),
            );
            r
        }
        "/healthz" => {
            let h = e.health().await;
            let mut body = serde_json::to_vec(&h.body).unwrap_or_default();
            body.push(b'\n');
            let mut r = Response::new(Full::new(Bytes::from(body)));
            if !h.ok {
                *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            }
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: this endpoint serves GET /metrics and GET /healthz\n",
        ),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Fixed(bool);

    impl Exposition for Fixed {
        fn metrics(&self) -> String {
            "# TYPE x_total counter\nx_total 1\n".to_owned()
        }
        async fn health(&self) -> Health {
            Health {
                ok: self.0,
                body: serde_json::json!({ "status": if self.0 { "ok" } else { "down" } }),
            }
        }
    }

    async fn ask(path: &std::path::Path, head: &str) -> String {
        let mut s = tokio::net::UnixStream::connect(path)
            .await
            .expect("connects");
        s.write_all(head.as_bytes()).await.expect("writes");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("reads");
        out
    }

    #[tokio::test]
    async fn answers_metrics_health_and_nothing_else() {
        for healthy in [true, false] {
            let dir = tempfile::tempdir().expect("dir");
            let path = dir.path().join("m.sock");
            let listener = crate::listen::bind(
                &crate::Listen::Unix(path.clone()),
                crate::METRICS_MODE,
                None,
            )
            .expect("binds");
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let server = tokio::spawn(serve(listener, Arc::new(Fixed(healthy)), async {
                let _ = stopped.await;
            }));
            let m = ask(&path, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
            assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
            assert!(m.contains("content-type: text/plain; version=0.0.4"), "{m}");
            assert!(m.ends_with("x_total 1\n"), "{m}");
            let h = ask(&path, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
            let want = if healthy {
                "HTTP/1.1 200"
            } else {
                "HTTP/1.1 503"
            };
            assert!(h.starts_with(want), "{h}");
            assert!(h.contains("application/json"), "{h}");
            let other = ask(&path, "GET /other HTTP/1.1\r\nHost: x\r\n\r\n").await;
            assert!(other.starts_with("HTTP/1.1 404"), "{other}");
            let post = ask(
                &path,
                "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
            )
            .await;
            assert!(post.starts_with("HTTP/1.1 405"), "{post}");
            assert!(post.contains("allow: GET"), "{post}");
            let _ = stop.send(());
            server.await.expect("stops");
            assert!(!path.exists(), "the socket file goes with the server");
        }
    }

    /// Idle connections holding every slot do not keep a scraper out: each new connection
    /// takes the slot of the oldest one that has sent no head, and is answered; a connection
    /// that is being answered keeps its slot.
    #[tokio::test]
    async fn idle_connections_do_not_keep_a_scraper_out() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("m.sock");
        let listener = crate::listen::bind(
            &crate::Listen::Unix(path.clone()),
            crate::METRICS_MODE,
            None,
        )
        .expect("binds");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, Arc::new(Fixed(true)), async {
            let _ = stopped.await;
        }));
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS * 2 {
            idle.push(
                tokio::net::UnixStream::connect(&path)
                    .await
                    .expect("connects"),
            );
        }
        for _ in 0..3 {
            let m = tokio::time::timeout(
                Duration::from_secs(5),
                ask(&path, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            )
            .await
            .expect("answered while idle connections are open");
            assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
            idle.push(
                tokio::net::UnixStream::connect(&path)
                    .await
                    .expect("connects"),
            );
        }
        // The oldest idle ones were closed to make room.
        let mut first = idle.remove(0);
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(5), first.read(&mut buf))
            .await
            .expect("closed, not left waiting")
            .unwrap_or(0);
        assert_eq!(n, 0, "closed unanswered");
        let _ = stop.send(());
        server.await.expect("stops");
    }

    #[test]
    fn the_oldest_waiting_connection_is_evicted_first() {
        let mut w = Waiting::default();
        let (a, mut ra) = w.enter();
        let (_b, mut rb) = w.enter();
        let (c, mut rc) = w.enter();
        w.leave(a);
        assert!(w.evict_oldest());
        assert!(
            rb.try_recv().is_ok(),
            "b, the oldest still waiting, is closed"
        );
        assert!(ra.try_recv().is_err() && rc.try_recv().is_err());
        w.leave(c);
        assert!(!w.evict_oldest(), "nothing left waiting");
    }
}
