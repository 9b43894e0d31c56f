//! The proxy's one HTTP/1 client toward the engine: hyper-util's pooled client on connections
//! to the engine's Unix socket (`Connector`), and the body of the answers it reads (`EngineBody`).
//! Requests are framed and answers parsed by hyper alone, for plain requests, streamed uploads
//! and upgrades (attach, exec) alike. A connection goes back to the pool once its answer has
//! been read to the end, so a stream (logs, events, wait) holds its own and an upgraded one
//! never returns; hyper-util drops connections the engine closed (a dockerd restart) and sends
//! a request again when a pooled connection closed before any of it was written.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::Uri;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::UnixStream;

use crate::wire::{Body, BoxError, UpstreamError};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Idle connections kept for reuse; more may be open while busy, these are what stays.
const MAX_IDLE: usize = 256;
/// An idle connection older than this is closed rather than reused.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The authority every request is addressed to: the client needs one to key its pool (there is
/// one socket, so one key), and it is also the Host header dockerd gets when the request has
/// none (dockerd answers an HTTP/1.1 request without Host with a 400).
const AUTHORITY: &str = "docker";

/// The pooled client to the engine at one socket path.
pub(crate) type EngineClient = Client<Connector, Body>;

pub(crate) fn client(path: Arc<PathBuf>) -> EngineClient {
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(IDLE_TIMEOUT)
        .pool_max_idle_per_host(MAX_IDLE)
        .build(Connector { path })
}

/// Opens a connection to the engine's socket, whatever the URI says (it names no host).
#[derive(Debug, Clone)]
pub(crate) struct Connector {
    path: Arc<PathBuf>,
}

type Connecting = Pin<Box<dyn Future<Output = Result<TokioIo<UnixStream>, UpstreamError>> + Send>>;

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<UnixStream>;
    type Error = UpstreamError;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), UpstreamError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Connecting {
        let path = self.path.clone();
        Box::pin(async move {
            let display = || path.display().to_string();
            tokio::time::timeout(CONNECT_TIMEOUT, UnixStream::connect(&*path))
                .await
                .map_err(|_| UpstreamError::ConnectTimeout(display()))?
                .map(TokioIo::new)
                .map_err(|source| UpstreamError::Connect {
                    path: display(),
                    source,
                })
        })
    }
}

/// `uri`, a path and query, addressed to the engine as the client requires (absolute).
pub(crate) fn on_engine(uri: Uri) -> Result<Uri, UpstreamError> {
    let mut parts = uri.into_parts();
    parts.scheme = Some(Scheme::HTTP);
    parts.authority = Some(Authority::from_static(AUTHORITY));
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(PathAndQuery::from_static("/"));
    }
    Uri::from_parts(parts).map_err(|e| UpstreamError::Client(e.to_string()))
}

/// The client's error as the proxy's: a failed connect as the connector reported it, anything
/// else with its causes, `: `-joined.
pub(crate) fn client_error(e: &hyper_util::client::legacy::Error) -> UpstreamError {
    let mut next = std::error::Error::source(e);
    while let Some(cause) = next {
        if let Some(connect) = cause.downcast_ref::<UpstreamError>().and_then(again) {
            return connect;
        }
        next = cause.source();
    }
    UpstreamError::Client(with_causes(e))
}

/// A connect failure again (the client holds the first; `io::Error` is not `Clone`).
fn again(e: &UpstreamError) -> Option<UpstreamError> {
    match e {
        UpstreamError::Connect { path, source } => Some(UpstreamError::Connect {
            path: path.clone(),
            source: match source.raw_os_error() {
                Some(code) => std::io::Error::from_raw_os_error(code),
                None => std::io::Error::new(source.kind(), source.to_string()),
            },
        }),
        UpstreamError::ConnectTimeout(path) => Some(UpstreamError::ConnectTimeout(path.clone())),
        _ => None,
    }
}

fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

/// An engine answer's body, as hyper reads it.
#[derive(Debug)]
pub struct EngineBody(Incoming);

impl EngineBody {
    pub(crate) fn new(body: Incoming) -> Self {
        Self(body)
    }
}

impl HttpBody for EngineBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.0)
            .poll_frame(cx)
            .map(|f| f.map(|r| r.map_err(crate::wire::boxed_error)))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}
