//! The client side: a pool of kept-alive connections to the engine's Unix socket. A connection
//! goes back to the pool only once its answer is fully read, so a stream (logs, events, wait)
//! holds its own connection, and an upgraded (hijacked) connection never returns to the pool.
//! A dockerd restart needs no proxy restart: closed connections leave the pool, and a request
//! that a closing connection never sent is retried on a fresh one.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::UnixStream;

/// The body type used on both sides of the proxy.
pub type Body = BoxBody<Bytes, hyper::Error>;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bounded: an inspect that does not answer within this is a failed check, not a hang.
const INSPECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Idle connections kept for reuse; more may be open while busy, these are what stays.
const POOL_MAX_IDLE: usize = 256;
/// An idle connection older than this is closed rather than reused.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot connect to {path}: {source}")]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error("connecting to {0} timed out")]
    ConnectTimeout(String),
    #[error("{0}")]
    Client(String),
    #[error("answer larger than {0} bytes")]
    TooLarge(usize),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("reading the answer: {0}")]
    Body(String),
    #[error("the proxy is buffering as many lists as it may (--max-list-bytes-total)")]
    Busy,
}

/// The bytes of list answers all requests may hold at once (`--max-list-bytes-total`), in
/// 64 KiB blocks: a list that would go over is refused instead of growing the proxy's memory.
#[derive(Debug)]
pub struct ListBudget {
    blocks: Arc<tokio::sync::Semaphore>,
}

const BLOCK: usize = 64 * 1024;

impl ListBudget {
    pub fn new(total_bytes: usize) -> Self {
        let blocks = (total_bytes / BLOCK).clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        Self {
            blocks: Arc::new(tokio::sync::Semaphore::new(blocks)),
        }
    }
}

/// Blocks held for one buffered answer; returned when dropped.
#[derive(Debug, Default)]
pub struct Held(Vec<tokio::sync::OwnedSemaphorePermit>);

impl Held {
    fn grow_to(&mut self, budget: &ListBudget, bytes: usize) -> Result<(), UpstreamError> {
        let have: usize = self.0.iter().map(|p| p.num_permits()).sum();
        let want = bytes.div_ceil(BLOCK);
        if want > have {
            let more = u32::try_from(want - have).map_err(|_| UpstreamError::Busy)?;
            let p = budget
                .blocks
                .clone()
                .try_acquire_many_owned(more)
                .map_err(|_| UpstreamError::Busy)?;
            self.0.push(p);
        }
        Ok(())
    }
}

/// A buffered upstream answer.
#[derive(Debug)]
pub struct Buffered {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Opens connections to one Unix socket, whatever the request URI says.
#[derive(Debug, Clone)]
struct Connector {
    path: Arc<PathBuf>,
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<UnixStream>;
    type Error = UpstreamError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let path = self.path.clone();
        Box::pin(async move {
            let display = path.display().to_string();
            let stream = tokio::time::timeout(CONNECT_TIMEOUT, UnixStream::connect(&*path))
                .await
                .map_err(|_| UpstreamError::ConnectTimeout(display.clone()))?
                .map_err(|source| UpstreamError::Connect {
                    path: display,
                    source,
                })?;
            Ok(TokioIo::new(stream))
        })
    }
}

#[derive(Debug, Clone)]
pub struct Upstream {
    path: Arc<PathBuf>,
    client: Client<Connector, Body>,
}

impl Upstream {
    pub fn new(path: PathBuf) -> Self {
        let path = Arc::new(path);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(POOL_MAX_IDLE)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(Connector { path: path.clone() });
        Self { path, client }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Sends `req`, whose URI is a path and query, to the engine.
    pub async fn send(&self, mut req: Request<Body>) -> Result<Response<Incoming>, UpstreamError> {
        // The pool keys connections by scheme and authority; one fixed key, since every
        // connection goes to the same socket. HTTP/1 sends only the path and query.
        let target = req
            .uri()
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str);
        *req.uri_mut() = Uri::builder()
            .scheme("http")
            .authority("docker")
            .path_and_query(target)
            .build()
            .map_err(|e| UpstreamError::Client(e.to_string()))?;
        self.client.request(req).await.map_err(client_error)
    }

    /// A bounded GET whose whole answer is read, for inspects and lists.
    pub async fn get(&self, path_and_query: &str, cap: usize) -> Result<Buffered, UpstreamError> {
        let req = Request::get(path_and_query)
            .header(http::header::HOST, "docker")
            .body(empty())
            .map_err(|e| UpstreamError::Body(e.to_string()))?;
        tokio::time::timeout(INSPECT_TIMEOUT, async {
            let resp = self.send(req).await?;
            read_capped(resp, cap).await
        })
        .await
        .map_err(|_| UpstreamError::Timeout(INSPECT_TIMEOUT))?
    }
}

/// The client's error with its causes; a failed connect reads as the connector's own message.
fn client_error(e: hyper_util::client::legacy::Error) -> UpstreamError {
    let mut causes = Vec::new();
    let mut next = std::error::Error::source(&e);
    while let Some(cause) = next {
        if let Some(own) = cause.downcast_ref::<UpstreamError>() {
            return UpstreamError::Client(own.to_string());
        }
        causes.push(cause.to_string());
        next = cause.source();
    }
    if causes.is_empty() {
        UpstreamError::Client(e.to_string())
    } else {
        UpstreamError::Client(causes.join(": "))
    }
}

/// Reads a whole answer of at most `cap` bytes into one buffer, sized up front from
/// Content-Length when the engine sends one (lists run to megabytes; growing and then joining
/// chunks copied them twice).
pub async fn read_capped(resp: Response<Incoming>, cap: usize) -> Result<Buffered, UpstreamError> {
    read_budgeted(resp, cap, None).await.map(|(b, _)| b)
}

/// Like `read_capped`, holding blocks of `budget` for every byte buffered.
pub async fn read_budgeted(
    resp: Response<Incoming>,
    cap: usize,
    budget: Option<&ListBudget>,
) -> Result<(Buffered, Held), UpstreamError> {
    let mut held = Held::default();
    let (parts, mut body) = resp.into_parts();
    let announced = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if announced.is_some_and(|n| n > cap) {
        return Err(UpstreamError::TooLarge(cap));
    }
    if let (Some(b), Some(n)) = (budget, announced) {
        held.grow_to(b, n)?;
    }
    let mut buf = Vec::with_capacity(announced.unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| UpstreamError::Body(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > cap {
                return Err(UpstreamError::TooLarge(cap));
            }
            if let Some(b) = budget {
                held.grow_to(b, buf.len() + data.len())?;
            }
            buf.extend_from_slice(&data);
        }
    }
    let answer = Buffered {
        status: parts.status,
        headers: parts.headers,
        body: Bytes::from(buf),
    };
    Ok((answer, held))
}

pub fn empty() -> Body {
    Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed()
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}
