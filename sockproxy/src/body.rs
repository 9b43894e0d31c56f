//! Reading request bodies off the wire, bounded in size and time: a JSON body up to `MAX_BODY`
//! (parsed with the policy's key rule), and the nothing an endpoint without a body may carry,
//! each within `--body-timeout` (`in_time`).

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use serde_json::Value;
use sockproxy_policy::facts::parse_body;
use sockproxy_policy::Refusal;

use crate::upstream::Body;

/// Seconds a client has to send a whole JSON body (`--body-timeout`'s default): a create body
/// of a few kilobytes comes in one write; one trickled a byte at a time held a connection slot
/// for as long as it liked.
pub const DEFAULT_BODY_TIMEOUT: u64 = 30;

/// `--body-timeout`, checked: at least a second.
pub fn timeout(flag: Option<u64>) -> Result<std::time::Duration, String> {
    match flag.unwrap_or(DEFAULT_BODY_TIMEOUT) {
        0 => Err("--body-timeout 0: expected 1 or more".into()),
        secs => Ok(std::time::Duration::from_secs(secs)),
    }
}

/// Largest request body the proxy reads to decide on (docs/architecture.md: an oversized body is denied).
pub const MAX_BODY: usize = 1 << 20;

/// Reads a JSON body (at most `MAX_BODY`, else 413) and parses it with the policy's key rule
/// (`facts::parse_body`: at most `max_keys` object keys in all; an empty body is an empty
/// object, as dockerd reads it).
pub async fn read_json(body: Body, max_keys: usize) -> Result<Value, Refusal> {
    let bytes: Bytes = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Refusal::TooLarge(MAX_BODY)
            } else {
                Refusal::BadRequest(format!("reading body: {e}"))
            }
        })?
        .to_bytes();
    if bytes.len() <= PARSE_INLINE_MAX {
        return parse_body(&bytes, max_keys);
    }
    // Off the event loop: a large body takes milliseconds to parse and check, and every other
    // client on the loop would wait meanwhile.
    tokio::task::spawn_blocking(move || parse_body(&bytes, max_keys))
        .await
        .map_err(|e| Refusal::BadRequest(format!("reading body: {e}")))?
}

/// Bodies up to this size (every create the docker CLI sends) are parsed in place.
const PARSE_INLINE_MAX: usize = 128 * 1024;

/// Endpoints that take no body are forwarded with none; a body that says something is a 400
/// (below API 1.24 a start body would replace the container's HostConfig). Whitespace, `{}` and
/// `null`, which some clients send for "nothing", are accepted and not forwarded.
pub async fn no_body(body: Body) -> Result<(), Refusal> {
    // Almost every such request: nothing to read (callgrind: ~400 instructions a request).
    if http_body::Body::is_end_stream(&body) {
        return Ok(());
    }
    let bytes: Bytes = Limited::new(body, NO_BODY_MAX)
        .collect()
        .await
        .map_err(|_| Refusal::BadRequest("this endpoint takes no request body".into()))?
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    match text.trim() {
        "" | "{}" | "null" => Ok(()),
        _ => Err(Refusal::BadRequest(
            "this endpoint takes no request body".into(),
        )),
    }
}

/// `read` (a body being read) within `limit` of now, else a 408: a client trickling its body
/// would hold its connection slot as long as it liked. The body is dropped unread, and hyper
/// closes a connection whose body was not read to the end.
pub async fn in_time<T>(
    limit: std::time::Duration,
    read: impl std::future::Future<Output = Result<T, Refusal>>,
) -> Result<T, Refusal> {
    tokio::time::timeout(limit, read)
        .await
        .unwrap_or_else(|_| Err(Refusal::SlowBody(limit.as_secs())))
}

/// Enough for any "nothing" a client sends; more is refused without being read.
const NO_BODY_MAX: usize = 64;
