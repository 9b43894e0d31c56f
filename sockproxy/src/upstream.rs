//! The client side: one fresh connection to the engine's Unix socket per request, so a dockerd
//! restart needs no proxy restart, and upgraded (hijacked) connections are never shared.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

/// The body type used on both sides of the proxy.
pub type Body = BoxBody<Bytes, hyper::Error>;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bounded: an inspect that does not answer within this is a failed check, not a hang.
const INSPECT_TIMEOUT: Duration = Duration::from_secs(30);

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
    Http(#[from] hyper::Error),
    #[error("answer larger than {0} bytes")]
    TooLarge(usize),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("reading the answer: {0}")]
    Body(String),
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
    path: PathBuf,
}

impl Upstream {
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    pub async fn send(&self, req: Request<Body>) -> Result<Response<Incoming>, UpstreamError> {
        let display = self.path.display().to_string();
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, UnixStream::connect(&self.path))
            .await
            .map_err(|_| UpstreamError::ConnectTimeout(display.clone()))?
            .map_err(|source| UpstreamError::Connect {
                path: display,
                source,
            })?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(sender.send_request(req).await?)
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

pub async fn read_capped(resp: Response<Incoming>, cap: usize) -> Result<Buffered, UpstreamError> {
    let (parts, body) = resp.into_parts();
    let body = Limited::new(body, cap)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                UpstreamError::TooLarge(cap)
            } else {
                UpstreamError::Body(e.to_string())
            }
        })?
        .to_bytes();
    Ok(Buffered {
        status: parts.status,
        headers: parts.headers,
        body,
    })
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
