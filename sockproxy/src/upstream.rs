//! The client side: requests to the engine on the one pooled HTTP/1 client (`engine`),
//! bounded reads of whole answers, and the budget that bounds list buffering. A dockerd restart
//! needs no proxy restart: closed connections leave the pool, and a request that a closing
//! connection never sent is tried again on another.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::BodyExt;

pub use crate::engine::EngineBody;
use crate::engine::EngineClient;
pub use crate::wire::{boxed_error, empty, full, Body, BoxError, UpstreamError};

/// Bounded: an inspect that does not answer within this is a failed check, not a hang.
const INSPECT_TIMEOUT: Duration = Duration::from_secs(30);

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

#[derive(Debug, Clone)]
pub struct Upstream {
    client: EngineClient,
    path: Arc<PathBuf>,
    /// Each round trip's latency or failure, and when the engine last answered.
    metrics: Arc<crate::metrics::Metrics>,
}

impl Upstream {
    /// The engine at `path`, counted in `metrics`.
    pub fn new(path: PathBuf, metrics: Arc<crate::metrics::Metrics>) -> Self {
        let path = Arc::new(path);
        Self {
            client: crate::engine::client(path.clone()),
            path,
            metrics,
        }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Sends `req`, whose URI is a path and query, to the engine.
    pub async fn send(&self, req: Request<Body>) -> Result<Response<EngineBody>, UpstreamError> {
        let started = Instant::now();
        let answered = self.round_trip(req).await;
        self.metrics.engine(
            started,
            answered.as_ref().err().map(UpstreamError::engine_kind),
        );
        answered
    }

    async fn round_trip(&self, req: Request<Body>) -> Result<Response<EngineBody>, UpstreamError> {
        let (mut parts, body) = req.into_parts();
        parts.uri = crate::engine::on_engine(parts.uri)?;
        let resp = self
            .client
            .request(Request::from_parts(parts, body))
            .await
            .map_err(|e| crate::engine::client_error(&e))?;
        Ok(resp.map(EngineBody::new))
    }

    /// A bounded GET whose whole answer is read, for inspects and lists.
    pub async fn get(&self, path_and_query: &str, cap: usize) -> Result<Buffered, UpstreamError> {
        // Host is the client's to add (`engine`).
        let req = Request::get(path_and_query)
            .body(empty())
            .map_err(|e| UpstreamError::Body(e.to_string()))?;
        tokio::time::timeout(INSPECT_TIMEOUT, async {
            let resp = self.send(req).await?;
            self.read_budgeted(resp, cap, None).await.map(|(b, _)| b)
        })
        .await
        .unwrap_or_else(|_| {
            let e = UpstreamError::Timeout(INSPECT_TIMEOUT);
            self.metrics.engine_error(e.engine_kind());
            Err(e)
        })
    }

    /// Reads a whole answer of at most `cap` bytes (`budget`: holding its blocks for every byte
    /// buffered); a failure to read it is counted as the engine's.
    pub async fn read_budgeted(
        &self,
        resp: Response<EngineBody>,
        cap: usize,
        budget: Option<&ListBudget>,
    ) -> Result<(Buffered, Held), UpstreamError> {
        let read = read_budgeted(resp, cap, budget).await;
        if let Err(e) = &read {
            self.metrics.engine_error(e.engine_kind());
        }
        read
    }
}

/// Reads a whole answer of at most `cap` bytes into one buffer, sized up front from
/// Content-Length when the engine sends one (lists run to megabytes; growing and then joining
/// chunks copied them twice), holding blocks of `budget` for every byte buffered.
pub(crate) async fn read_budgeted(
    resp: Response<EngineBody>,
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
