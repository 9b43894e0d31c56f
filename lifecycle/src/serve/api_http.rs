//! The provisioner API's HTTP face (`/health`, `/api/…`): the key check, the routes, answers
//! in FastAPI's shapes, and one `lifecycle_api_requests_total{route,code}` count per request.
//! The work behind each route is `provisioner`'s; creates and deletes run in their own task
//! (`http::detached`), so a gateway that gives up cannot cut a create or teardown off.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Response};
use serde_json::json;

use super::answer::{answer, detached, Answer};
use super::hosts::Routed;
use super::provider::Provider;
use super::provisioner::ApiAnswer;
use super::routes::Route;

/// The 401 of a request without the right `X-API-Key` on a listener with a key: the same
/// answer whatever the route, and whether the key was missing, empty, wrong or a part of it
/// (deer-flow's `Unauthorized`). One warn line naming method, path and peer, never the key.
pub(super) fn unauthorized(
    p: &Provider,
    method: &Method,
    path: &str,
    peer: &str,
    key_given: bool,
) -> Answer {
    tracing::warn!(%method, path, peer, key_given, "missing or wrong X-API-Key; 401");
    p.metrics.api_request(route_name(path), 401);
    let mut r = Response::new(Full::new(Bytes::from_static(b"Unauthorized")));
    *r.status_mut() = hyper::StatusCode::UNAUTHORIZED;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    // The body (if any) is left unread: the connection cannot carry another request.
    r.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    r
}

/// The route's name in the metric (a template, never the sandbox ID).
fn route_name(path: &str) -> &'static str {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["health"] => "health",
        ["api", "capabilities"] => "capabilities",
        ["api", "sandboxes"] => "sandboxes",
        ["api", "sandboxes", _] => "sandbox",
        ["healthz"] | ["v1", ..] => "v1",
        _ => "other",
    }
}

fn to_answer(a: ApiAnswer) -> Answer {
    answer(a.status, &a.body)
}

/// A routed answer (`hosts`): the API's own, a 307 to the owner (method and body kept, as
/// deer-flow's `requests` follows it), or a 503 with `Retry-After`.
fn routed(r: Routed) -> Answer {
    let (mut a, header) = match r {
        Routed::Api(a) => return to_answer(a),
        Routed::Redirect(to) => (
            answer(
                307,
                &json!({ "detail": format!("owned by another host: {to}") }),
            ),
            (hyper::header::LOCATION, to),
        ),
        Routed::Retry { after_secs, detail } => (
            answer(503, &json!({ "detail": detail })),
            (hyper::header::RETRY_AFTER, after_secs.to_string()),
        ),
    };
    if let Ok(v) = hyper::header::HeaderValue::from_str(&header.1) {
        a.headers_mut().insert(header.0, v);
    }
    a
}

/// Answers one request of the provisioner API whose key (if one is needed) was checked.
pub(super) async fn dispatch(
    p: Arc<Provider>,
    route: Route<'_>,
    path: &str,
    body: Bytes,
) -> Answer {
    let r = match route {
        Route::Health => {
            let (status, body) = super::engine_health::answer(&p.engine_state().await);
            answer(status, &body)
        }
        Route::Capabilities => answer(
            200,
            // No Lark CLI images here: deer-flow then provisions the runtime its own way. The
            // mount contract is the layout every sandbox made here has.
            &json!({
                "lark_cli_init_image": false,
                "lark_cli_broker_image": false,
                "mount_contract_version": super::provision::MOUNT_CONTRACT_VERSION,
            }),
        ),
        Route::ApiCreate => {
            let task = p.clone();
            match detached(async move { task.routed_create(&body).await }).await {
                Ok(a) => routed(a),
                Err(r) => r,
            }
        }
        Route::ApiList => routed(p.routed_list().await),
        Route::ApiGet(id) => routed(p.routed_get(id).await),
        Route::ApiDelete(id) => {
            let task = p.clone();
            let id = id.to_owned();
            match detached(async move { task.routed_delete(&id).await }).await {
                Ok(a) => routed(a),
                Err(r) => r,
            }
        }
        Route::NotAllowed { allow, .. } => {
            let mut r = answer(405, &json!({ "detail": "Method Not Allowed" }));
            r.headers_mut().insert(
                hyper::header::ALLOW,
                hyper::header::HeaderValue::from_static(allow),
            );
            r
        }
        // The project's own routes never reach here (`http::route` keeps them).
        _ => answer(404, &json!({ "detail": "Not Found" })),
    };
    p.metrics.api_request(route_name(path), r.status().as_u16());
    r
}

/// The answer to an `/api/` body that is too big or unreadable (FastAPI's shape).
pub(super) fn oversized() -> Answer {
    let mut r = answer(
        413,
        &json!({ "detail": "request body over 64 KiB or unreadable" }),
    );
    r.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_named_by_template() {
        for (path, want) in [
            ("/health", "health"),
            ("/api/capabilities", "capabilities"),
            ("/api/sandboxes", "sandboxes"),
            ("/api/sandboxes/7d9ac0ff9b98cd06", "sandbox"),
            ("/api/sandboxes/a/b", "other"),
            ("/api", "other"),
            ("/v1/sandboxes", "v1"),
            ("/v1/leases/x/release", "v1"),
            ("/healthz", "v1"),
            ("/metrics", "other"),
            ("/v2/new", "other"),
        ] {
            assert_eq!(route_name(path), want, "{path}");
        }
    }
}
