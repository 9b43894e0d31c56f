//! Absolute-form requests: sent upstream in origin form over the vetted connection, Host
//! rewritten to the target, hop-by-hop and `Proxy-*` headers removed; `X-Netproxy-Error` is
//! stripped from the answer. Three timeouts bound it: the client's request body may stall at
//! most `body_idle` between bytes, the upstream must answer with a response head within
//! `response_head` once the request is sent whole, and the whole exchange, response body
//! included, takes at most `request`. Before the response head a timeout is a 504 with its
//! reason; after it, the response is cut off and the end line says why. The request deadline
//! and a reload that revokes the exchange are also watched on their own task (`watch`), so
//! they hold whether or not the client reads.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Sleep;

use crate::audit::Exchange;
use crate::connection::Connection;
use crate::refusal::{Body, BoxError, Reason, Refusal, ERROR_HEADER};
use crate::target::Target;
use crate::tunnel::Revoked;

/// The timeouts of an absolute-form request.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub body_idle: Duration,
    pub response_head: Duration,
    pub request: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            body_idle: Duration::from_secs(30),
            response_head: Duration::from_secs(60),
            request: Duration::from_secs(600),
        }
    }
}

pub const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
    "proxy-authorization",
];

/// What cuts an exchange off from outside hyper's polling: a reload that no longer allows
/// it, and (with `Timeouts::request`) the deadline.
pub struct Guard {
    /// Resolves when a reload no longer allows the exchange (`NetProxy::revoked`).
    pub revoked: Revoked,
    /// The client connection, to drop when the answer must be cut (none in tests that call
    /// `forward` without a server).
    pub connection: Option<Arc<Connection>>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("connection", &self.connection)
            .finish_non_exhaustive()
    }
}

/// Sends `req` to `t` over `stream`; the upstream's answer, or why there is none.
pub async fn forward(
    req: Request<Incoming>,
    stream: TcpStream,
    t: &Target,
    path: &str,
    limits: Timeouts,
    exchange: Arc<Exchange>,
    mut guard: Guard,
) -> Result<Response<Body>, Refusal> {
    let shown = t.host.to_string();
    let deadline = crate::framing::after(limits.request);
    let (parts, body) = req.into_parts();
    if body.is_end_stream() {
        exchange.request_done.notify_one();
    }
    let up = Watched {
        inner: body.map_err(BoxError::from).boxed(),
        exchange: exchange.clone(),
        up: true,
        idle: Some(limits.body_idle),
        idle_timer: None,
        deadline: None,
    };
    let mut out = Request::builder()
        .method(parts.method.clone())
        .uri(path)
        .body(up.boxed())
        .map_err(|_| Refusal::new(Reason::Target(crate::target::TargetError::BadHost), &shown))?;
    let listed = connection_listed(&parts.headers);
    for (name, value) in &parts.headers {
        let n = name.as_str();
        if HOP_BY_HOP.contains(&n)
            || n.starts_with("proxy-")
            || n == "host"
            || listed.iter().any(|c| c == n)
        {
            continue;
        }
        out.headers_mut().append(name.clone(), value.clone());
    }
    let host_value = if t.port == 80 {
        shown.clone()
    } else {
        format!("{shown}:{}", t.port)
    };
    let hv =
        HeaderValue::from_str(&host_value).map_err(|_| Refusal::new(Reason::BadHeader, &shown))?;
    out.headers_mut().insert(header::HOST, hv);
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream))
        .await
        .map_err(|_| Refusal::new(Reason::UpstreamHandshake, &shown))?;
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let head_timer = async {
        exchange.request_done.notified().await;
        tokio::time::sleep(limits.response_head).await;
    };
    let exchanged = async {
        tokio::select! {
            r = sender.send_request(out) => r.map_err(|_| {
                let why = if exchange.body_timed_out.load(Ordering::Relaxed) {
                    Reason::RequestBodyTimeout
                } else {
                    Reason::UpstreamFailed
                };
                Refusal::new(why, &shown)
            }),
            () = head_timer => Err(Refusal::new(Reason::UpstreamResponseTimeout, &shown)),
        }
    };
    // Until the answer's head, a revocation is a refusal like any other; after it, the
    // watchdog cuts the answer (`watch`).
    let exchanged = async {
        tokio::select! {
            r = exchanged => r,
            () = &mut guard.revoked => Err(Refusal::new(Reason::Revoked, &shown)),
        }
    };
    let resp = match tokio::time::timeout_at(deadline, exchanged).await {
        Ok(Ok(resp)) => resp,
        failed => {
            // Nothing more goes up or comes back on this connection.
            conn.abort();
            return Err(match failed {
                Ok(Err(r)) => r,
                _ => Refusal::new(Reason::RequestTimeout, &shown),
            });
        }
    };
    // The client's Upgrade never reaches the upstream (it is hop-by-hop), so a 101 is one
    // nobody asked for; passed on, it would leave the client's connection in a state neither
    // end agreed to.
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        conn.abort();
        return Err(Refusal::new(Reason::UpstreamFailed, &shown));
    }
    let (mut rparts, rbody) = resp.into_parts();
    rparts.headers.remove(ERROR_HEADER);
    // Names the upstream's Connection header lists are its connection's own (RFC 9110 7.6.1).
    for name in connection_listed(&rparts.headers) {
        rparts.headers.remove(name.as_str());
    }
    for h in HOP_BY_HOP {
        rparts.headers.remove(h);
    }
    exchange.status(rparts.status);
    watch(&exchange, deadline, guard, conn.abort_handle());
    let down = Watched {
        inner: rbody.map_err(BoxError::from).boxed(),
        exchange,
        up: false,
        idle: None,
        idle_timer: None,
        deadline: Some(Box::pin(tokio::time::sleep_until(deadline))),
    };
    Ok(Response::from_parts(rparts, down.boxed()))
}

/// The watchdog of one exchange, on its own task: hyper polls the answer's body only while
/// the client takes bytes, so a deadline or a revocation checked there would wait for a client
/// that reads nothing. When either comes first, the end line's word is set, the upstream
/// connection is aborted and the client connection dropped (which drops the exchange, writing
/// its end line). It stands down as soon as the exchange ends on its own.
fn watch(
    exchange: &Arc<Exchange>,
    deadline: tokio::time::Instant,
    guard: Guard,
    upstream: tokio::task::AbortHandle,
) {
    let weak = Arc::downgrade(exchange);
    let over = exchange.over.clone();
    tokio::spawn(async move {
        let why = tokio::select! {
            () = over.notified() => return,
            () = tokio::time::sleep_until(deadline) => "request_timeout",
            () = guard.revoked => "revoked",
        };
        // Gone already: it ended on its own, and its connection may carry another request.
        let Some(exchange) = weak.upgrade() else {
            return;
        };
        exchange.end(why);
        drop(exchange);
        upstream.abort();
        if let Some(c) = guard.connection {
            c.abort.notify_one();
        }
    });
}

/// The header names a `Connection` header lists, lower-cased.
fn connection_listed(headers: &http::HeaderMap) -> Vec<String> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|x| x.trim().to_ascii_lowercase()))
        .filter(|x| !x.is_empty())
        .collect()
}

/// A body on its way through: counts its bytes into the exchange, and ends it with an error
/// when it stalls past `idle` or runs past `deadline`.
struct Watched {
    inner: Body,
    exchange: Arc<Exchange>,
    up: bool,
    idle: Option<Duration>,
    idle_timer: Option<Pin<Box<Sleep>>>,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl Watched {
    fn finished(&self) {
        if self.up {
            self.exchange.request_done.notify_one();
        } else {
            self.exchange.end("complete");
        }
    }
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(d) = this.deadline.as_mut() {
            if d.as_mut().poll(cx).is_ready() {
                this.exchange.end("request_timeout");
                return Poll::Ready(Some(Err("request timeout".into())));
            }
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.exchange.count(this.up, data.len() as u64);
                }
                // The idle clock runs only while waiting on the client: time the upstream
                // spent not asking for more (backpressure) is not the client's.
                this.idle_timer = None;
                // With a known length, hyper stops polling after the last byte.
                if this.inner.is_end_stream() {
                    this.finished();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.exchange.end(if this.up {
                    "client_error"
                } else {
                    "upstream_error"
                });
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                this.finished();
                Poll::Ready(None)
            }
            Poll::Pending => {
                let Some(idle) = this.idle else {
                    return Poll::Pending;
                };
                let t = this
                    .idle_timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                if t.as_mut().poll(cx).is_ready() {
                    this.exchange.body_timed_out.store(true, Ordering::Relaxed);
                    this.exchange.end("request_body_timeout");
                    return Poll::Ready(Some(Err("request body idle".into())));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
