//! The project's own API (`/healthz`, `/v1/…`): acquire, release, renew, destroy and the
//! listing, answered `{"error": …}` on failure. An acquire runs in its own task: a client that
//! disconnects mid-acquire does not cut the engine steps off (they finish or roll back, and the
//! lock is released); what it acquired is then released at once, into the warm pool, so nothing
//! is left held by no one. Release and destroy run detached too.

use std::sync::Arc;

use bytes::Bytes;
use hyper::Method;
use serde_json::{json, Value};

use super::answer::{answer, detached, Answer};
use super::pool::State;
use super::provider::{Provider, ServeError};
use super::routes::Route;

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

/// Answers one request of the project's own API (`/healthz`, `/v1/…`).
pub(super) async fn dispatch(
    p: Arc<Provider>,
    route: Route<'_>,
    method: &Method,
    path: &str,
    body: Bytes,
    force: bool,
) -> Answer {
    match route {
        Route::Healthz => answer(200, &json!({ "ok": true, "owner": p.own.me })),
        // Prometheus cannot send a key: the metrics are on their own listener.
        Route::Metrics => answer(
            404,
            &json!({ "error": "GET /metrics is served on --metrics-listen, not on the API's listener" }),
        ),
        Route::List => answer(200, &list(&p)),
        Route::Acquire => match serde_json::from_slice::<AcquireBody>(&body) {
            Ok(b) => acquire(p, b).await,
            Err(e) => answer(400, &json!({ "error": format!("acquire body: {e}") })),
        },
        Route::Release(lease) => {
            let lease = lease.to_owned();
            let task = p.clone();
            let leased = lease.clone();
            match detached(async move { task.release(&leased).await }).await {
                Ok(Ok(outcome)) => answer(200, &json!({ "lease": lease, "result": outcome })),
                Ok(Err(e)) => error(&e),
                Err(r) => r,
            }
        }
        Route::Renew(lease) => match p.renew_lease(lease) {
            Ok(id) => answer(
                200,
                &json!({ "lease": lease, "sandbox_id": id, "result": "renewed" }),
            ),
            Err(e) => error(&e),
        },
        Route::Destroy(id) => {
            let id = id.to_owned();
            let task = p.clone();
            let target = id.clone();
            match detached(async move { task.destroy(&target, force).await }).await {
                Ok(Ok(outcome)) => answer(200, &json!({ "sandbox_id": id, "result": outcome })),
                Ok(Err(e)) => error(&e),
                Err(r) => r,
            }
        }
        Route::NotAllowed { allow, .. } => {
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
        // The provisioner API's routes never reach here (`http` sends them to `api_http`).
        _ => answer(
            404,
            &json!({ "error": format!("no route {method} {path}") }),
        ),
    }
}

/// `?force=true` (or `1`) on a destroy: destroy a container without a `lifecycle.scope` label.
pub(super) fn force_query(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "force=true" | "force=1"))
    })
}
