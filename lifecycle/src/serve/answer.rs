//! The API's answers: one JSON value on one line with its status, and the detached task each
//! engine-touching request runs in (shared by the `/v1/` and the provisioner routes).

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use serde_json::{json, Value};

pub(super) type Answer = Response<Full<Bytes>>;

/// Every JSON answer's body: the value on one line.
pub(super) fn json_line(body: &Value) -> String {
    format!("{body}\n")
}

pub(super) fn answer(status: u16, body: &Value) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(json_line(body))));
    *r.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// Runs `work` in its own task, so that a client that disconnects (hyper then drops this
/// request's future) cannot cut an engine step off half way: release and destroy run to their
/// end, report to the pool and let go of the sandbox's lock only then.
pub(super) async fn detached<F>(work: F) -> Result<F::Output, Answer>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(work).await.map_err(|e| {
        tracing::error!(error = %e, "a provider task ended abnormally");
        answer(
            500,
            &json!({ "error": "provider task ended without an answer" }),
        )
    })
}
