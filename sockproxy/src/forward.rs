//! The mechanics of forwarding, shared by every plan: building the upstream request (hop-by-hop
//! headers dropped, upgrades kept only where allowed), shaping answers (streamed or buffered),
//! path pinning, the engine's errors put back in the client's words, draining refused bodies,
//! and splicing upgraded connections.

use http::request::Parts;
use http::{header, HeaderMap, HeaderValue, Request, Response};
use http_body_util::BodyExt;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use crate::refused::IntoResponse;
use crate::upstream::{self, Body, Buffered};
use sockproxy_policy::{Pinned, Refusal, Target};

/// Most a refusal reads of a body it will never forward, and for how long.
const DRAIN_CAP: usize = 1 << 20;
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads and discards an unread request body (bounded), so the client's write completes and it
/// reads the refusal instead of failing with a broken pipe.
pub(crate) async fn drain(body: Body) {
    let limited = http_body_util::Limited::new(body, DRAIN_CAP);
    let _ = tokio::time::timeout(DRAIN_TIME, limited.collect()).await;
}

pub(crate) fn vprefix(version: Option<&str>) -> String {
    version.map(|v| format!("/{v}")).unwrap_or_default()
}

pub(crate) fn with_query(path: String, query: &str) -> String {
    if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    }
}

/// The target's path with segment `index` replaced by the full ID a decision was made on.
pub(crate) fn pinned(target: &Target, index: usize, pin: &Pinned) -> String {
    let mut segs: Vec<&str> = target.segments.iter().map(String::as_str).collect();
    if let Some(s) = segs.get_mut(index) {
        *s = pin.id();
    }
    target.path_with(&segs)
}

pub(crate) const HOP_BY_HOP: [header::HeaderName; 7] = [
    header::CONNECTION,
    header::UPGRADE,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
];

pub(crate) fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Hop-by-hop in an answer: the connection's own, never passed on.
fn answer_hop(name: &header::HeaderName) -> bool {
    HOP_BY_HOP.contains(name) || name.as_str() == "keep-alive"
}

/// A client's header the engine does not get: the connection's own (kept for an upgrade the
/// proxy passes on).
pub(crate) fn request_hop(name: &header::HeaderName, upgrade: bool) -> bool {
    let keep_for_upgrade = upgrade && (name == header::CONNECTION || name == header::UPGRADE);
    (answer_hop(name) || name.as_str() == "proxy-connection") && !keep_for_upgrade
}

pub(crate) fn upstream_request(
    parts: &Parts,
    path_and_query: String,
    body: Body,
    upgrade: bool,
) -> Result<Request<Body>, Refusal> {
    let mut req = Request::new(body);
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = http::Uri::try_from(path_and_query)
        .map_err(|e| Refusal::BadRequest(http::Error::from(e).to_string()))?;
    // A copy of the map, then the few names to drop: cheaper than re-inserting every header.
    let mut headers = parts.headers.clone();
    let hop = |name: &header::HeaderName| request_hop(name, upgrade);
    let hops: Vec<header::HeaderName> = headers.keys().filter(|n| hop(n)).cloned().collect();
    for name in hops {
        headers.remove(name);
    }
    // The length is the body's, not the client's: hyper writes it from the body it is given
    // (the client's stream keeps its exact length; an attach's empty body has none), so the
    // engine is never told of bytes that are not sent.
    headers.remove(header::CONTENT_LENGTH);
    if !headers.contains_key(header::HOST) {
        headers.insert(header::HOST, HeaderValue::from_static("docker"));
    }
    *req.headers_mut() = headers;
    Ok(req)
}

/// Drops an answer's hop-by-hop headers, looking them up only when there is one.
fn drop_answer_hops(headers: &mut HeaderMap) {
    if headers.keys().any(answer_hop) {
        for name in HOP_BY_HOP {
            headers.remove(name);
        }
        headers.remove("keep-alive");
    }
}

pub(crate) fn stream_response(resp: Response<upstream::EngineBody>) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    drop_answer_hops(&mut parts.headers);
    Response::from_parts(parts, body.boxed())
}

pub(crate) fn buffered_response(answer: Buffered) -> Response<Body> {
    let mut resp = Response::new(upstream::full(answer.body));
    *resp.status_mut() = answer.status;
    let mut headers = answer.headers;
    drop_answer_hops(&mut headers);
    headers.remove(header::CONTENT_LENGTH);
    *resp.headers_mut() = headers;
    resp
}

/// Joins the client's and the engine's upgraded connections. `copy_bidirectional` shuts down
/// each write side when the other side's read ends, so half-close travels both ways.
pub(crate) async fn splice(client: OnUpgrade, engine: OnUpgrade) {
    let (client, engine) = match tokio::try_join!(client, engine) {
        Ok(pair) => pair,
        Err(e) => {
            tracing::warn!(error = %e, "upgrade failed");
            return;
        }
    };
    let mut client = TokioIo::new(client);
    let mut engine = TokioIo::new(engine);
    match tokio::io::copy_bidirectional(&mut client, &mut engine).await {
        Ok((up, down)) => tracing::debug!(
            bytes_to_engine = up,
            bytes_to_client = down,
            "stream closed"
        ),
        Err(e) => tracing::debug!(error = %e, "stream ended with an error"),
    }
}

/// dockerd's messages that repeat the reference they were asked about (moby `errdefs`
/// wordings of 20.10 and 29: containers, networks).
const ECHOED: [(&str, &str); 4] = [
    ("No such container: ", ""),
    ("no such container: ", ""),
    ("network ", " not found"),
    ("No such network: ", ""),
];

/// The engine names the pinned full ID in its errors (`No such container: 3fa9…`) where the
/// client named something else; the client's reference is put back so callers that match on
/// the name they used still recognise the answer.
pub(crate) async fn in_client_words(
    resp: Response<Body>,
    pin: &Pinned,
    reference: &str,
) -> Response<Body> {
    if resp.status().as_u16() < 400 || pin.id() == reference {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let bytes = match error_answer(body).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    // Only where dockerd echoes the reference it was given; elsewhere it names the ID itself
    // ("You cannot remove a running container ID"), and so does the proxied answer.
    for (before, after) in ECHOED {
        text = text.replace(
            &format!("{before}{}{after}", pin.id()),
            &format!("{before}{reference}{after}"),
        );
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, upstream::full(text))
}

/// An engine's error answer read whole, to be rewritten: an error is a short JSON message, so
/// more than 64 KiB, or a body that cannot be read, is answered as the proxy's own 502.
pub(crate) async fn error_answer(body: Body) -> Result<bytes::Bytes, Response<Body>> {
    match http_body_util::Limited::new(body, 64 * 1024)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(_) => Err(Refusal::Upstream("unreadable error answer".into()).into_response()),
    }
}

#[cfg(test)]
#[path = "forward_tests.rs"]
mod tests;
