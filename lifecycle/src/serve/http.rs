//! The HTTP/JSON API on a Unix socket (hyper 1): route → provider call → JSON answer. An
//! acquire runs in its own task: a client that disconnects mid-acquire does not cut the engine
//! steps off (they finish or roll back, and the lock is released); what it acquired is then
//! released at once, into the warm pool, so nothing is left held by no one. The socket's
//! `Limits` hold every client to a header timeout and a write timeout, and the connections to a
//! cap (see `serve`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use super::answer::{answer, detached, json_line, Answer};
use super::api_http;
use super::listen::{Conn, Listener};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use scrape::{is_write_stall, WriteTimeout};
use serde_json::{json, Value};
use tokio::sync::{watch, Semaphore};

use super::limits::Limits;
use super::pool::State;
use super::provider::{Provider, ServeError};

/// Connections over the cap being answered 503 at once; more are closed unanswered.
const MAX_REFUSING: usize = 16;

fn error(e: &ServeError) -> Answer {
    let mut r = answer(e.status(), &json!({ "error": e.to_string() }));
    if matches!(e, ServeError::Full { .. }) {
        r.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            hyper::header::HeaderValue::from_static("5"),
        );
    }
    r
}

/// The longest `holder` name kept with a lease (it is stored per lease and listed).
pub const MAX_HOLDER: usize = 256;

/// `/v1/` bodies are the project's own API: a field it does not know is a client's mistake
/// (a misspelt `holder`, say), refused with a 400 that names it, never ignored.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AcquireBody {
    user_id: String,
    thread_id: String,
    #[serde(default)]
    holder: Option<String>,
}

/// Acquire in a detached task; if the caller is gone when it finishes, release the lease.
async fn acquire(p: Arc<Provider>, body: AcquireBody) -> Answer {
    let holder = body.holder.unwrap_or_else(|| "anonymous".into());
    if holder.len() > MAX_HOLDER {
        return error(&ServeError::BadInput(format!(
            "holder is {} bytes; at most {MAX_HOLDER}",
            holder.len()
        )));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = p.clone();
    tokio::spawn(async move {
        let result = task.acquire(&body.user_id, &body.thread_id, &holder).await;
        if let Err(Ok(acquired)) = tx.send(result) {
            tracing::info!(sandbox_id = %acquired.sandbox_id, lease = %acquired.lease, "client left mid-acquire: releasing what it got");
            let _ = task.release(&acquired.lease).await;
        }
    });
    // Dropped unanswered when hyper drops this request, its client gone: counted, so an
    // operator (and a test) sees the acquire was abandoned and its lease is being released.
    let mut waiting = Abandoned(&p.metrics, true);
    let got = rx.await;
    waiting.1 = false;
    match got {
        Ok(Ok(a)) => answer(200, &json!(a)),
        Ok(Err(e)) => error(&e),
        Err(_) => answer(
            500,
            &json!({ "error": "acquire task ended without an answer" }),
        ),
    }
}

/// Counts an acquire as abandoned if dropped while still waiting (`.1`).
struct Abandoned<'a>(&'a super::metrics::Metrics, bool);

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.acquire_abandoned();
        }
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
            let idle = if e.holders.is_empty() {
                now.saturating_sub(e.last_used).as_secs_f64()
            } else {
                0.0
            };
            json!({
                "sandbox_id": id,
                "state": state,
                "container_id": e.container_id,
                "url": e.url,
                // Holder names only: a lease token is its holder's alone (whoever has it may
                // release or renew it), so the listing never shows one.
                "holders": e.holders.values().map(|h| json!({"holder": h})).collect::<Vec<_>>(),
                "holder_count": e.holders.len(),
                "owner": p.own.me,
                "destroy_pending": e.destroy_pending,
                "idle_seconds": idle,
            })
        })
        .collect();
    json!({ "sandboxes": items })
}

fn metrics(p: &Provider) -> String {
    let quarantined = p.lc.ledger.entries().map(|e| e.len()).unwrap_or(0);
    p.metrics.render(p.pool().sizes(), quarantined)
}

async fn route(
    p: Arc<Provider>,
    req: Request<Incoming>,
    body_timeout: Duration,
    peer: Arc<str>,
) -> Result<Answer, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let api = api_http::is_api(&path);
    if api {
        if let Some(r) = api_http::refuse_unauthorized(&p, &method, &path, &peer, req.headers()) {
            return Ok(r);
        }
    }
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let req_force = force_query(req.uri().query());
    // Bodies are small JSON objects; a bigger one is refused unread. hyper's header timeout
    // ends with the head, so a client that stalls its body would keep its connection (and a
    // slot) forever: the body, still the client's to send, gets as long as the head had.
    let read = Limited::new(req.into_body(), 64 * 1024).collect();
    let body = match tokio::time::timeout(body_timeout, read).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(_)) if api => return Ok(api_http::oversized()),
        Ok(Err(_)) => {
            return Ok(answer(
                400,
                &json!({ "error": "unreadable or oversized body" }),
            ))
        }
        Err(_) => {
            let mut r = answer(
                408,
                &json!({ "error": "request body not received within --header-timeout" }),
            );
            // The rest of that body may still come: the connection cannot carry another request.
            r.headers_mut().insert(
                hyper::header::CONNECTION,
                hyper::header::HeaderValue::from_static("close"),
            );
            return Ok(r);
        }
    };
    if api {
        return Ok(api_http::dispatch(p, &method, &path, body).await);
    }
    let force = req_force;
    let r = match (&method, segments.as_slice()) {
        (&Method::GET, ["healthz"]) => answer(200, &json!({ "ok": true, "owner": p.own.me })),
        (&Method::GET, ["metrics"]) => {
            let mut r = Response::new(Full::new(Bytes::from(metrics(&p))));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(
                    prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                ),
            );
            r
        }
        (&Method::GET, ["v1", "sandboxes"]) => answer(200, &list(&p)),
        (&Method::POST, ["v1", "acquire"]) => match serde_json::from_slice::<AcquireBody>(&body) {
            Ok(b) => acquire(p, b).await,
            Err(e) => answer(400, &json!({ "error": format!("acquire body: {e}") })),
        },
        (&Method::POST, ["v1", "leases", lease, "release"]) => {
            let lease = (*lease).to_owned();
            let task = p.clone();
            let leased = lease.clone();
            match detached(async move { task.release(&leased).await }).await {
                Ok(Ok(outcome)) => answer(200, &json!({ "lease": lease, "result": outcome })),
                Ok(Err(e)) => error(&e),
                Err(r) => r,
            }
        }
        (&Method::POST, ["v1", "leases", lease, "renew"]) => match p.renew_lease(lease) {
            Ok(id) => answer(
                200,
                &json!({ "lease": lease, "sandbox_id": id, "result": "renewed" }),
            ),
            Err(e) => error(&e),
        },
        (&Method::POST, ["v1", "sandboxes", id, "destroy"]) => {
            let id = (*id).to_owned();
            let task = p.clone();
            let target = id.clone();
            match detached(async move { task.destroy(&target, force).await }).await {
                Ok(Ok(outcome)) => answer(200, &json!({ "sandbox_id": id, "result": outcome })),
                Ok(Err(e)) => error(&e),
                Err(r) => r,
            }
        }
        (_, segs) => match allowed_methods(segs) {
            Some(allow) => {
                let mut r = answer(
                    405,
                    &json!({ "error": format!("{method} is not allowed on {path}; allowed: {allow}") }),
                );
                r.headers_mut().insert(
                    hyper::header::ALLOW,
                    hyper::header::HeaderValue::from_static(allow),
                );
                r
            }
            None => answer(
                404,
                &json!({ "error": format!("no route {method} {path}") }),
            ),
        },
    };
    Ok(r)
}

/// The methods a known path answers (the `Allow` of a 405); `None` for an unknown path.
fn allowed_methods(segments: &[&str]) -> Option<&'static str> {
    match segments {
        ["healthz"] | ["metrics"] | ["v1", "sandboxes"] => Some("GET"),
        ["v1", "acquire"]
        | ["v1", "leases", _, "release" | "renew"]
        | ["v1", "sandboxes", _, "destroy"] => Some("POST"),
        _ => None,
    }
}

/// `?force=true` (or `1`) on a destroy: destroy a container without a `lifecycle.scope` label.
fn force_query(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "force=true" | "force=1"))
    })
}

/// Serves until `stop` turns true, then stops accepting and waits for connections in flight.
/// At most `limits.max_connections` clients are served at once; the next ones are answered 503
/// and closed, so that idle or slow clients cannot take every file descriptor and task.
pub async fn serve(
    listener: impl Into<Listener>,
    p: Arc<Provider>,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let listener: Listener = listener.into();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    // Refusals in progress, each holding a descriptor for up to a second: a client reconnecting
    // in a loop would otherwise pile them up (and a warn line each) until descriptors run out.
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = async {
                // The guard `wait_for` returns must not live across the accept arm's await.
                let _ = stop.wait_for(|s| *s).await;
            } => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        let p = p.clone();
                        conns.spawn(async move {
                            serve_connection(stream, p, limits, peer.into()).await;
                            drop(slot);
                        });
                    }
                    Err(_) => match refusing.clone().try_acquire_owned() {
                        Ok(refusal) => {
                            tracing::warn!(
                                max_connections = limits.max_connections,
                                "too many connections: a client was answered 503 and closed"
                            );
                            // Its own task, bounded: the accept loop never waits on that client.
                            conns.spawn(async move {
                                refuse_busy(stream, limits.max_connections).await;
                                drop(refusal);
                            });
                        }
                        // As many refusals as that under way: this one is closed unanswered.
                        Err(_) => drop(stream),
                    },
                },
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    // Out of file descriptors and the like: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    tracing::info!(
        connections = conns.len(),
        "stopped accepting; finishing requests in flight"
    );
    // Keep-alive connections may idle up to the header timeout: bounded wait, then they are
    // closed (an acquire in flight is its own task and still finishes).
    let drain = async { while conns.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(Duration::from_secs(10), drain).await;
    conns.abort_all();
}

async fn serve_connection(stream: Conn, p: Arc<Provider>, limits: Limits, peer: Arc<str>) {
    let svc = hyper::service::service_fn(move |req| {
        route(p.clone(), req, limits.header_timeout, peer.clone())
    });
    // hyper has no write timeout: a client that sends requests (pipelined, say) and reads none
    // of the answers would hold its connection and slot for good once the socket's buffer is
    // full. The wrapper fails a write that stalls that long, which ends the connection.
    let io = TokioIo::new(WriteTimeout::new(stream, limits.write_timeout));
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        // hyper runs this clock only while it waits for a request head: from the accept, and
        // again after each answer on a kept-alive connection. It stops once a head is in, so a
        // request being served (an acquire waiting on the engine) is never cut by it; an
        // unfinished head or an idle connection is closed.
        .header_read_timeout(limits.header_timeout)
        .serve_connection(io, svc)
        .await;
    if let Err(e) = served {
        if is_write_stall(&e) {
            tracing::warn!(
                write_timeout_secs = limits.write_timeout.as_secs_f64(),
                "a client took none of its answers within --write-timeout: connection closed"
            );
        }
    }
}

/// Over `--max-connections`: a 503 in the API's error shape, then close; the request is never
/// parsed.
async fn refuse_busy(mut stream: Conn, max_connections: usize) {
    let body = json_line(&json!({
        "error": format!("too many connections (--max-connections {max_connections}); try again")
    }));
    let mut headers = hyper::HeaderMap::new();
    for (name, value) in [
        (hyper::header::CONTENT_TYPE, "application/json"),
        (hyper::header::RETRY_AFTER, "1"),
        (hyper::header::CONNECTION, "close"),
    ] {
        headers.insert(name, hyper::header::HeaderValue::from_static(value));
    }
    let answer = scrape::raw_answer::bytes(
        hyper::StatusCode::SERVICE_UNAVAILABLE,
        &headers,
        body.as_bytes(),
    );
    scrape::raw_answer::send(&mut stream, &answer, Duration::from_secs(1)).await;
}
