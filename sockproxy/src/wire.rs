//! What both sides of the proxy carry: the body type (`Body`) of requests and answers, its
//! error (`BoxError`), and what a round trip to the engine fails with (`UpstreamError`). Below
//! both `engine` (the client) and `upstream` (the reads it bounds), so neither imports the other's.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty};

/// What a body can fail with: hyper's errors, on the client's side and toward the engine. A type of its own, not a bare
/// `Box<dyn Error>`: hyper's server must see the error convert into its box, and rustc cannot
/// prove that for a boxed trait object inside the connection futures.
#[derive(Debug)]
pub struct BoxError(Box<dyn std::error::Error + Send + Sync>);

impl BoxError {
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Box::new(e))
    }
}

impl std::fmt::Display for BoxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for BoxError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// hyper's error as a body error.
pub fn boxed_error(e: hyper::Error) -> BoxError {
    BoxError::new(e)
}

/// The body type used on both sides of the proxy.
pub type Body = BoxBody<Bytes, BoxError>;

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

impl UpstreamError {
    /// The `kind` `sockproxy_engine_errors_total` counts this under (`metrics`), or `None` for
    /// the proxy's own list budget (`Busy`), counted as a `busy` decision instead.
    pub fn engine_kind(&self) -> Option<&'static str> {
        let i = match self {
            Self::Connect { .. } => 0,
            Self::ConnectTimeout(_) => 1,
            Self::Client(_) => 2,
            Self::Timeout(_) => 3,
            Self::TooLarge(_) => 4,
            Self::Body(_) => 5,
            Self::Busy => return None,
        };
        crate::metrics::ENGINE_ERROR_KINDS.get(i).copied()
    }
}

/// A body with nothing in it.
pub fn empty() -> Body {
    Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed()
}

/// A body of these bytes, whole.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}
