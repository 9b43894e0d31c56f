//! The HTTP/JSON API on a Unix socket (hyper 1): route → provider call → JSON answer. An
//! acquire runs in its own task: a client that disconnects mid-acquire does not cut the engine
//! steps off (they finish or roll back, and the lock is released); what it acquired is then
//! released at once, into the warm pool, so nothing is left held by no one.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::UnixListener;
use tokio::sync::watch;

use super::pool::State;
use super::provider::{Provider, ServeError};

type Answer = Response<Full<Bytes>>;

fn answer(status: u16, body: &Value) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(format!("{body}\n"))));
    *r.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn error(e: &ServeError) -> Answer {
    answer(e.status(), &json!({ "error": e.to_string() }))
}

#[derive(Debug, serde::Deserialize)]
struct AcquireBody {
    user_id: String,
    thread_id: String,
    #[serde(default)]
    holder: Option<String>,
}

/// Acquire in a detached task; if the caller is gone when it finishes, release the lease.
async fn acquire(p: Arc<Provider>, body: AcquireBody) -> Answer {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = p.clone();
    tokio::spawn(async move {
        let holder = body.holder.unwrap_or_else(|| "anonymous".into());
        let result = task.acquire(&body.user_id, &body.thread_id, &holder).await;
        if let Err(Ok(acquired)) = tx.send(result) {
            tracing::info!(sandbox_id = %acquired.sandbox_id, lease = %acquired.lease, "client left mid-acquire: releasing what it got");
            let _ = task.release(&acquired.lease).await;
        }
    });
    match rx.await {
        Ok(Ok(a)) => answer(200, &json!(a)),
        Ok(Err(e)) => error(&e),
        Err(_) => answer(
            500,
            &json!({ "error": "acquire task ended without an answer" }),
        ),
    }
}

fn list(p: &Provider) -> Value {
    let now = p.now();
    let pool = p.pool();
    let items: Vec<Value> = pool
        .entries()
        .map(|(id, e)| {
            let state = match e.state {
                State::Active => "active",
                State::Warm { .. } => "warm",
                State::Destroying => "destroying",
            };
            let idle = if e.holders.is_empty() { now.saturating_sub(e.last_used).as_secs_f64() } else { 0.0 };
            json!({
                "sandbox_id": id,
                "state": state,
                "container_id": e.container_id,
                "url": e.url,
                "holders": e.holders.iter().map(|(l, h)| json!({"lease": l, "holder": h})).collect::<Vec<_>>(),
                "owner": p.own.me,
                "destroy_pending": e.destroy_pending,
                "idle_seconds": idle,
            })
        })
        .collect();
    json!({ "sandboxes": items })
}

fn metrics(p: &Provider) -> String {
    let (active, warm, destroying) = p.pool().sizes();
    let quarantined = p.lc.ledger.entries().map(|e| e.len() as u64).unwrap_or(0);
    p.metrics.render(&[
        (
            "lifecycle_pool_sandboxes",
            "state=\"active\"",
            active as u64,
        ),
        ("lifecycle_pool_sandboxes", "state=\"warm\"", warm as u64),
        (
            "lifecycle_pool_sandboxes",
            "state=\"destroying\"",
            destroying as u64,
        ),
        ("lifecycle_quarantine_records", "", quarantined),
    ])
}

async fn route(p: Arc<Provider>, req: Request<Incoming>) -> Result<Answer, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // Bodies are small JSON objects; a bigger one is refused unread.
    let body = match Limited::new(req.into_body(), 64 * 1024).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return Ok(answer(
                400,
                &json!({ "error": "unreadable or oversized body" }),
            ))
        }
    };
    let r = match (&method, segments.as_slice()) {
        (&Method::GET, ["healthz"]) => answer(200, &json!({ "ok": true, "owner": p.own.me })),
        (&Method::GET, ["metrics"]) => {
            let mut r = Response::new(Full::new(Bytes::from(metrics(&p))));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        (&Method::GET, ["v1", "sandboxes"]) => answer(200, &list(&p)),
        (&Method::POST, ["v1", "acquire"]) => match serde_json::from_slice::<AcquireBody>(&body) {
            Ok(b) => acquire(p, b).await,
            Err(e) => answer(400, &json!({ "error": format!("acquire body: {e}") })),
        },
        (&Method::POST, ["v1", "leases", lease, "release"]) => match p.release(lease).await {
            Ok(outcome) => answer(200, &json!({ "lease": lease, "result": outcome })),
            Err(e) => error(&e),
        },
        (&Method::POST, ["v1", "sandboxes", id, "destroy"]) => match p.destroy(id).await {
            Ok(outcome) => answer(200, &json!({ "sandbox_id": id, "result": outcome })),
            Err(e) => error(&e),
        },
        _ => answer(
            404,
            &json!({ "error": format!("no route {method} {path}") }),
        ),
    };
    Ok(r)
}

/// Serves until `stop` turns true, then stops accepting and waits for connections in flight.
pub async fn serve(listener: UnixListener, p: Arc<Provider>, mut stop: watch::Receiver<bool>) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let p = p.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| route(p.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    tracing::info!(
        connections = conns.len(),
        "stopped accepting; finishing requests in flight"
    );
    // Keep-alive connections may idle forever: bounded wait, then they are closed (an acquire
    // in flight is its own task and still finishes).
    let drain = async { while conns.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), drain).await;
    conns.abort_all();
}
