//! The endpoint's HTTP side: `GET /metrics` (the Prometheus text exposition) and `GET /healthz`
//! (a small JSON object, 200 when healthy and 503 when not), one request per connection. Kept
//! small on purpose: at most `MAX_CONNECTIONS` at once (more are closed unanswered), a request
//! head within `HEAD_TIMEOUT`, a whole exchange within `CONNECTION_TIMEOUT`, so a scraper that
//! stalls costs the proxy nothing it needs for its own clients.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
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

use crate::listen::Listener;

/// Scrapes served at once; a scraper needs one.
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

/// Serves `listener` until `shutdown` resolves.
pub async fn serve<E: Exposition>(
    listener: Listener,
    exposition: Arc<E>,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            a = accept(&listener) => a,
        };
        match accepted {
            Ok(io) => {
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    // Closed unanswered: the endpoint is for a scraper or two.
                    continue;
                };
                let e = exposition.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection(io, e)).await;
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

async fn connection<E: Exposition>(io: Io, exposition: Arc<E>) {
    let svc = service_fn(move |req| {
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
            let listener = crate::listen::bind(&crate::Listen::Unix(path.clone())).expect("binds");
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
}
