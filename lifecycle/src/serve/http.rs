//! The API's server (hyper 1): the listener's accept loop, one task per connection, and the
//! request's way in: route (`routes`), the key, the body, then the project's answers
//! (`v1_http`) or deer-flow's (`api_http`). On a listener with a key every route but `/health`
//! needs it, those added later too: the check comes before any route is answered, so nothing
//! answers unkeyed unless the route table says it is open. The socket's `Limits` hold every
//! client to a header timeout and a write timeout and the connections to a cap; `gate` holds
//! connections that have not shown the key to a cap per peer and a short head deadline.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::answer::{answer, json_line, Answer};
use super::gate::{Gate, Pending, UNAUTHENTICATED_HEAD_DEADLINE};
use super::listen::{Conn, Listener, Peer};
use super::routes;
use super::{api_http, v1_http};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use scrape::{is_write_stall, WriteTimeout};
use serde_json::json;
use tokio::sync::{watch, Semaphore};

use super::limits::Limits;
use super::provider::Provider;

/// Connections over the cap being answered 503 at once; more are closed unanswered.
const MAX_REFUSING: usize = 16;

/// One connection's standing: who it is, and (on a listener with a key) its place in the count
/// of connections that have not shown the key yet.
struct Client {
    peer: Peer,
    pending: Option<Arc<Pending>>,
}

async fn route(
    p: Arc<Provider>,
    req: Request<Incoming>,
    body_timeout: Duration,
    client: Arc<Client>,
) -> Result<Answer, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let route = routes::parse(&method, &path);
    let api = route.is_api();
    if let Some(key) = p.api.api_key.as_ref().filter(|_| !route.is_open()) {
        let offered = req.headers().get("x-api-key").map(|v| v.as_bytes());
        if !offered.is_some_and(|k| key.matches(k)) {
            let given = offered.is_some();
            return Ok(api_http::unauthorized(
                &p,
                &method,
                &path,
                &client.peer.shown,
                given,
            ));
        }
        if let Some(pending) = &client.pending {
            pending.showed_key();
        }
    }
    let force = v1_http::force_query(req.uri().query());
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
        return Ok(api_http::dispatch(p, route, &path, body).await);
    }
    Ok(v1_http::dispatch(p, route, &method, &path, body, force).await)
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
    let gate = Arc::new(Gate::default());
    let mut last_warned: Option<Instant> = None;
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = async {
                // The guard `wait_for` returns must not live across the accept arm's await.
                let _ = stop.wait_for(|s| *s).await;
            } => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    // On a listener with a key, a client is nobody until it shows it.
                    let pending = match p.api.api_key.is_some() {
                        false => None,
                        true => match gate.admit(&peer.address) {
                            Some(pending) => Some(pending),
                            None => {
                                refused_unauthenticated(&p, &peer, &mut last_warned);
                                drop(stream);
                                continue;
                            }
                        },
                    };
                    let client = Arc::new(Client { peer, pending });
                    match slots.clone().try_acquire_owned() {
                        Ok(slot) => {
                            let p = p.clone();
                            conns.spawn(async move {
                                serve_connection(stream, p, limits, client).await;
                                drop(slot);
                            });
                        }
                        Err(_) => match refusing.clone().try_acquire_owned() {
                            Ok(refusal) => {
                                tracing::warn!(
                                    max_connections = limits.max_connections,
                                    "too many connections: a client was answered 503 and closed"
                                );
                                p.metrics.connection_refused("max_connections");
                                // Its own task, bounded: the accept loop never waits on that client.
                                conns.spawn(async move {
                                    refuse_busy(stream, limits.max_connections).await;
                                    drop(refusal);
                                    drop(client);
                                });
                            }
                            // As many refusals as that under way: this one is closed unanswered.
                            Err(_) => {
                                p.metrics.connection_refused("max_connections");
                                drop(stream)
                            }
                        },
                    }
                }
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

/// A peer already holds `MAX_UNAUTHENTICATED_PER_PEER` connections that showed no key: this
/// one is closed unanswered (answering would cost what the cap saves), counted, and warned
/// about at most once a second, so a flood cannot flood the log too.
fn refused_unauthenticated(p: &Provider, peer: &Peer, last_warned: &mut Option<Instant>) {
    p.metrics.connection_refused("unauthenticated_per_peer");
    if last_warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
        *last_warned = Some(Instant::now());
        tracing::warn!(
            peer = %peer.shown,
            max = super::gate::MAX_UNAUTHENTICATED_PER_PEER,
            "a peer holds as many connections as it may before showing the API key: closed unanswered"
        );
    }
}

async fn serve_connection(stream: Conn, p: Arc<Provider>, limits: Limits, client: Arc<Client>) {
    let pending = client.pending.clone();
    let svc = hyper::service::service_fn(move |req| {
        // Called as soon as hyper has the whole head: the head deadline is met.
        if let Some(pending) = &client.pending {
            pending.saw_head();
        }
        route(p.clone(), req, limits.header_timeout, client.clone())
    });
    // hyper has no write timeout: a client that sends requests (pipelined, say) and reads none
    // of the answers would hold its connection and slot for good once the socket's buffer is
    // full. The wrapper fails a write that stalls that long, which ends the connection.
    let io = TokioIo::new(WriteTimeout::new(stream, limits.write_timeout));
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        // hyper runs this clock only while it waits for a request head: from the accept, and
        // again after each answer on a kept-alive connection. It stops once a head is in, so a
        // request being served (an acquire waiting on the engine) is never cut by it; an
        // unfinished head or an idle connection is closed.
        .header_read_timeout(limits.header_timeout)
        .serve_connection(io, svc);
    tokio::pin!(conn);
    let served = match pending {
        None => conn.await,
        // A connection that has not shown the key gets a shorter deadline for its first head.
        Some(pending) => {
            let deadline = UNAUTHENTICATED_HEAD_DEADLINE.min(limits.header_timeout);
            tokio::select! {
                served = &mut conn => served,
                () = tokio::time::sleep(deadline) => {
                    if !pending.head_seen() {
                        tracing::debug!("no request head within the deadline for a connection without the key: closed");
                        return;
                    }
                    conn.await
                }
            }
        }
    };
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
