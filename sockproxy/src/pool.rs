//! The kept-alive connections to the engine's one Unix socket. A request whose body the proxy
//! holds whole (no body, or a checked one) and that asks for no upgrade goes on an own
//! connection (`h1`, `h1conn`); an upgrade or a streamed upload goes on one of hyper's HTTP/1
//! client connections. Either goes back to the pool only once its answer has been read to the
//! end (the `Answer` body hands it back), so a stream (logs, events, wait) holds its own
//! connection and an upgraded (hijacked) one never returns. Idle connections are reused newest
//! first, and closed once idle for `IDLE_TIMEOUT`.
//!
//! This replaces hyper-util's general pool, which per request hashed a scheme-and-authority key,
//! rebuilt the URI twice, moved its request future about a dozen times and spawned a task to wait
//! for the connection's readiness: about 7,000 of a `/_ping`'s 59,000 instructions (callgrind).

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{Request, Response, StatusCode};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

use crate::h1conn::{Conn, OwnBody};
use crate::upstream::{Body, BoxError, UpstreamError};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Idle connections kept for reuse; more may be open while busy, these are what stays.
const MAX_IDLE: usize = 256;
/// An idle connection older than this is closed rather than reused.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A request a closing connection never sent is tried again on another; bounded, since each
/// failure removes a connection but a fresh one may fail the same way.
const FRESH_ATTEMPTS: usize = 2;
/// A request body at most this large is read whole and sent with its head on an own
/// connection; a larger or unsized one (an archive upload) streams through hyper's.
const MAX_WHOLE_BODY: u64 = 1 << 20;

/// Whether a request goes on an own connection (`h1`): no upgrade, and a body of known size no
/// larger than `MAX_WHOLE_BODY`, which is read whole before the request is written.
pub(crate) fn goes_whole(upgrade: bool, body: &Body) -> bool {
    !upgrade
        && body
            .size_hint()
            .exact()
            .is_some_and(|n| n <= MAX_WHOLE_BODY)
}

struct Idle {
    send: SendRequest<Body>,
    since: Instant,
}

struct OwnIdle {
    conn: Conn,
    since: Instant,
}

/// The pool of one upstream socket.
pub(crate) struct Pool {
    path: Arc<PathBuf>,
    /// Oldest first; checkout takes from the end.
    idle: Mutex<Vec<Idle>>,
    own: Mutex<Vec<OwnIdle>>,
    reaping: AtomicBool,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("path", &self.path).finish()
    }
}

impl Pool {
    pub(crate) fn new(path: Arc<PathBuf>) -> Arc<Self> {
        Arc::new(Self {
            path,
            idle: Mutex::new(Vec::new()),
            own: Mutex::new(Vec::new()),
            reaping: AtomicBool::new(false),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Sends `req` on an idle connection, or a new one, and answers with a body that returns the
    /// connection once read to the end.
    pub(crate) async fn send(
        self: &Arc<Self>,
        mut req: Request<Body>,
    ) -> Result<Response<Answer>, UpstreamError> {
        // dockerd answers an HTTP/1.1 request without Host with a 400; hyper sends the head as
        // given.
        if !req.headers().contains_key(http::header::HOST) {
            req.headers_mut()
                .insert(http::header::HOST, http::HeaderValue::from_static("docker"));
        }
        if goes_whole(
            req.headers().contains_key(http::header::UPGRADE),
            req.body(),
        ) {
            return self.send_whole(req).await;
        }
        let mut fresh_failures = 0;
        loop {
            let (mut send, reused) = match self.take_idle() {
                Some(s) => (s, true),
                None => (self.connect().await?, false),
            };
            match send.try_send_request(req).await {
                Ok(resp) => return Ok(self.answer(resp, send)),
                Err(mut e) => match e.take_message() {
                    // Never written: the connection was closing. Try another.
                    Some(unsent) if reused || fresh_failures + 1 < FRESH_ATTEMPTS => {
                        fresh_failures += usize::from(!reused);
                        req = unsent;
                    }
                    _ => return Err(hyper_error(&e.into_error())),
                },
            }
        }
    }

    /// `send` for a request with a whole body, on an own connection.
    async fn send_whole(
        self: &Arc<Self>,
        req: Request<Body>,
    ) -> Result<Response<Answer>, UpstreamError> {
        let (parts, body) = req.into_parts();
        let body = http_body_util::BodyExt::collect(body)
            .await
            .map_err(|e| UpstreamError::Body(e.to_string()))?
            .to_bytes();
        let mut wire = BytesMut::new();
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        crate::h1::encode_request(
            &parts.method,
            target,
            &parts.headers,
            |_| false,
            &body,
            &mut wire,
        )
        .map_err(|e| UpstreamError::Client(e.to_string()))?;
        self.send_wire(&parts.method, &wire).await
    }

    /// Sends a request already on the wire (`h1::encode_request`) on an own connection.
    pub(crate) async fn send_wire(
        self: &Arc<Self>,
        method: &http::Method,
        wire: &[u8],
    ) -> Result<Response<Answer>, UpstreamError> {
        let mut fresh_failures = 0;
        loop {
            let (mut conn, reused) = match self.take_own() {
                Some(c) => (c, true),
                None => (self.connect_own().await?, false),
            };
            match conn.exchange(wire, method).await {
                Ok(head) => {
                    let body = OwnBody::new(conn, &head, Arc::downgrade(self));
                    let mut resp = Response::new(Answer::own(body));
                    *resp.status_mut() = head.status;
                    *resp.version_mut() = head.version;
                    *resp.headers_mut() = head.headers;
                    return Ok(resp);
                }
                // Never written: the connection was closing. Try another.
                Err(e) if e.unsent && (reused || fresh_failures + 1 < FRESH_ATTEMPTS) => {
                    fresh_failures += usize::from(!reused);
                }
                Err(e) => return Err(UpstreamError::Client(e.error.to_string())),
            }
        }
    }

    fn take_own(&self) -> Option<Conn> {
        let mut own = lock(&self.own);
        while let Some(idle) = own.pop() {
            if idle.since.elapsed() <= IDLE_TIMEOUT {
                return Some(idle.conn);
            }
        }
        None
    }

    async fn connect_own(&self) -> Result<Conn, UpstreamError> {
        let stream = self.connect_stream().await?;
        let quiet = stream
            .into_std()
            .and_then(crate::quiet::QuietStream::new)
            .map_err(|source| UpstreamError::Connect {
                path: self.path.display().to_string(),
                source,
            })?;
        Ok(Conn::new(quiet))
    }

    pub(crate) fn put_own(self: Arc<Self>, conn: Conn) {
        {
            let mut own = lock(&self.own);
            if own.len() >= MAX_IDLE {
                own.remove(0);
            }
            own.push(OwnIdle {
                conn,
                since: Instant::now(),
            });
        }
        if !self.reaping.swap(true, Ordering::Relaxed) {
            self.start_reaper();
        }
    }

    fn answer(
        self: &Arc<Self>,
        resp: Response<Incoming>,
        send: SendRequest<Body>,
    ) -> Response<Answer> {
        // An upgraded connection belongs to the two ends it joins from now on.
        let back = (resp.status() != StatusCode::SWITCHING_PROTOCOLS).then(|| Checkin {
            send,
            pool: Arc::downgrade(self),
        });
        let (parts, inner) = resp.into_parts();
        let mut answer = Hyper { inner, back };
        if answer.inner.is_end_stream() {
            answer.give_back();
        }
        Response::from_parts(
            parts,
            Answer {
                inner: Inner::Hyper(answer),
            },
        )
    }

    /// The newest idle connection still open. Only ready connections are put back, so one that
    /// is not ready any more is closing.
    fn take_idle(&self) -> Option<SendRequest<Body>> {
        loop {
            let idle = self.lock().pop()?;
            if idle.send.is_ready() && idle.since.elapsed() <= IDLE_TIMEOUT {
                return Some(idle.send);
            }
        }
    }

    async fn connect_stream(&self) -> Result<UnixStream, UpstreamError> {
        let display = || self.path.display().to_string();
        tokio::time::timeout(CONNECT_TIMEOUT, UnixStream::connect(&*self.path))
            .await
            .map_err(|_| UpstreamError::ConnectTimeout(display()))?
            .map_err(|source| UpstreamError::Connect {
                path: display(),
                source,
            })
    }

    async fn connect(&self) -> Result<SendRequest<Body>, UpstreamError> {
        let stream = self.connect_stream().await?;
        let (send, conn) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| hyper_error(&e))?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "engine connection ended");
            }
        });
        Ok(send)
    }

    fn put(self: Arc<Self>, send: SendRequest<Body>) {
        if send.is_closed() {
            return;
        }
        // Stale ones go at checkout (`take_idle`) or with the reaper.
        {
            let mut idle = self.lock();
            if idle.len() >= MAX_IDLE {
                idle.remove(0);
            }
            idle.push(Idle {
                send,
                since: Instant::now(),
            });
        }
        if !self.reaping.swap(true, Ordering::Relaxed) {
            self.start_reaper();
        }
    }

    /// Closes connections left idle past `IDLE_TIMEOUT` even when no request comes to notice.
    fn start_reaper(self: &Arc<Self>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.reaping.store(false, Ordering::Relaxed);
            return;
        };
        let pool: Weak<Self> = Arc::downgrade(self);
        rt.spawn(async move {
            loop {
                tokio::time::sleep(IDLE_TIMEOUT / 2).await;
                let Some(pool) = pool.upgrade() else { return };
                let now = Instant::now();
                pool.lock()
                    .retain(|i| !i.send.is_closed() && now.duration_since(i.since) <= IDLE_TIMEOUT);
                lock(&pool.own).retain(|i| now.duration_since(i.since) <= IDLE_TIMEOUT);
            }
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        lock(&self.idle)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The lists hold no invariant a panic could break halfway.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// hyper's error with its causes, `: `-joined.
fn hyper_error(e: &hyper::Error) -> UpstreamError {
    let mut text = e.to_string();
    let mut next = std::error::Error::source(e);
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    UpstreamError::Client(text)
}

struct Checkin {
    send: SendRequest<Body>,
    pool: Weak<Pool>,
}

/// An engine answer's body; the connection it came on returns to the pool when the body has
/// ended, and is closed if the body is dropped before its end.
#[derive(Debug)]
pub struct Answer {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Own(OwnBody),
    Hyper(Hyper),
}

impl Answer {
    fn own(body: OwnBody) -> Self {
        Self {
            inner: Inner::Own(body),
        }
    }
}

/// An answer on one of hyper's connections.
struct Hyper {
    inner: Incoming,
    back: Option<Checkin>,
}

impl Hyper {
    /// Puts the connection back once it is ready for another request. It usually is by the time
    /// its answer has ended; when it is not (the engine answered before the request's body was
    /// all sent, say), a task waits for it, so no later request waits on this one.
    fn give_back(&mut self) {
        let Some(Checkin { mut send, pool }) = self.back.take() else {
            return;
        };
        if send.is_ready() {
            if let Some(pool) = pool.upgrade() {
                pool.put(send);
            }
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                // Bounded like an idle connection: a client that stalls its upload for longer
                // costs the connection, not a task and a socket held for as long as it stalls.
                if let Ok(Ok(())) = tokio::time::timeout(IDLE_TIMEOUT, send.ready()).await {
                    if let Some(pool) = pool.upgrade() {
                        pool.put(send);
                    }
                }
            });
        }
    }
}

impl std::fmt::Debug for Hyper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hyper").field("inner", &self.inner).finish()
    }
}

impl HttpBody for Answer {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let h = match &mut self.inner {
            Inner::Own(b) => return Pin::new(b).poll_frame(cx),
            Inner::Hyper(h) => h,
        };
        let polled = Pin::new(&mut h.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => h.give_back(),
            Poll::Ready(Some(Ok(_))) if h.inner.is_end_stream() => h.give_back(),
            Poll::Ready(Some(Err(_))) => h.back = None,
            _ => {}
        }
        polled.map(|f| f.map(|r| r.map_err(crate::upstream::boxed_error)))
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Own(b) => b.is_end_stream(),
            Inner::Hyper(h) => h.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Own(b) => b.size_hint(),
            Inner::Hyper(h) => h.inner.size_hint(),
        }
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
