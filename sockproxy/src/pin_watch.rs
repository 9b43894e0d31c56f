//! The engine's side of pinned bind sources (I/O): which pins a container still refers to,
//! asked after each of the stack's containers goes (its `destroy` event, on a subscription of
//! the proxy's own, made again with a growing pause when it drops), after a create whose
//! answer was lost, and each time the subscription comes up (start-up included, so a restarted
//! proxy releases what went while it was away); and whether the engine sees the proxy's
//! mounts at all (`probe`, at start-up).
//!
//! One list per pass, however many containers went: `GET /containers/json?all=1` with a
//! `volume` filter naming the staging paths, which dockerd matches against every container's
//! bind sources, another stack's or the operator's included, and against inherited ones.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};

use crate::pin_dir::PinError;
use crate::pins::Pins;
use crate::upstream::{self, Upstream};

/// Staging paths named in one list's filter.
const PER_LIST: usize = 64;

const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// Keeps the pins to those a container refers to, until dropped.
pub async fn run(upstream: Upstream, pins: Arc<Pins>, stack: String, max_answer: usize) {
    let follow = async {
        let mut pause = FIRST_PAUSE;
        loop {
            let began = tokio::time::Instant::now();
            if let Err(why) = follow(&upstream, &pins, &stack).await {
                tracing::debug!(%why, "pin release subscription failed");
            }
            if began.elapsed() >= LONGEST_PAUSE {
                pause = FIRST_PAUSE;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    };
    let release = async {
        loop {
            pins.woken().await;
            match release_pass(&upstream, &pins, max_answer).await {
                Ok(0) => {}
                Ok(released) => {
                    tracing::info!(
                        released,
                        held = pins.count(),
                        "released pinned bind sources no container refers to"
                    );
                }
                // Kept, all of them: the next event or subscription asks again.
                Err(why) => {
                    tracing::warn!(%why, "could not ask the engine which pinned bind sources are in use; keeping them")
                }
            }
        }
    };
    tokio::join!(follow, release);
}

/// One subscription to the stack's containers' `destroy` events: a pass when it comes up and
/// after each event (passes coalesce while one runs).
async fn follow(upstream: &Upstream, pins: &Pins, stack: &str) -> Result<(), String> {
    let filters = json!({
        "type": ["container"],
        "event": ["destroy"],
        "label": [format!("{}={stack}", sockproxy_policy::STACK_LABEL)],
    })
    .to_string();
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("filters", &filters)
        .finish();
    let req = Request::get(format!("/events?{query}"))
        .body(upstream::empty())
        .map_err(|e| e.to_string())?;
    let resp = upstream.send(req).await.map_err(|e| e.to_string())?;
    if resp.status() != StatusCode::OK {
        return Err(format!("events answered {}", resp.status()));
    }
    // Whatever went while there was no subscription.
    pins.wake();
    let mut body = resp.into_body();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string())?;
        if frame.data_ref().is_some_and(|d| !d.is_empty()) {
            pins.wake();
        }
    }
    Ok(())
}

/// Releases the settled pins no container refers to; how many went. An answer that cannot be
/// read releases nothing.
pub async fn release_pass(
    upstream: &Upstream,
    pins: &Pins,
    max_answer: usize,
) -> Result<usize, String> {
    let candidates = pins.settled();
    let mut referenced = HashSet::new();
    for chunk in candidates.chunks(PER_LIST) {
        let paths: Vec<String> = chunk.iter().map(|(_, p)| p.display().to_string()).collect();
        let filters = json!({ "volume": paths }).to_string();
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("all", "1")
            .append_pair("filters", &filters)
            .finish();
        let answer = upstream
            .get(&format!("/containers/json?{query}"), max_answer)
            .await
            .map_err(|e| e.to_string())?;
        if answer.status != StatusCode::OK {
            return Err(format!("the container list answered {}", answer.status));
        }
        let list: Vec<Value> = serde_json::from_slice(&answer.body)
            .map_err(|e| format!("unreadable container list: {e}"))?;
        for c in &list {
            let Some(mounts) = c.get("Mounts").and_then(Value::as_array) else {
                return Err("a listed container has no Mounts".into());
            };
            referenced.extend(
                mounts
                    .iter()
                    .filter_map(|m| m.get("Source").and_then(Value::as_str))
                    .map(std::path::PathBuf::from),
            );
        }
    }
    Ok(pins.release_unreferenced(&candidates, &referenced))
}

/// Whether the engine sees the proxy's mounts: a create that names a pinned path and an image
/// reference no engine accepts. dockerd checks a bind's source before it looks for the
/// image, so "bind source path does not exist" means the pin directory it sees is not the
/// proxy's; anything else (the image refused) means it is. No container is ever made. An
/// engine that does not answer is not a failure: creates then fail closed on their own.
pub async fn probe(upstream: &Upstream, pins: &Pins) -> Result<(), PinError> {
    let set = pins
        .pin(&[pins.probe_source()])
        .map_err(|r| PinError::Probe(r.to_string()))?;
    let staging = set
        .staging
        .first()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let body = json!({
        "Image": "sockproxy pin probe",
        "HostConfig": { "Mounts": [
            { "Type": "bind", "Source": staging, "Target": "/probe", "ReadOnly": true }
        ] },
    });
    let answered = async {
        let req = Request::post("/containers/create")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(upstream::full(body.to_string()))
            .map_err(|e| e.to_string())?;
        let resp = upstream.send(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok::<_, String>((status, String::from_utf8_lossy(&bytes).into_owned()))
    };
    let result = match tokio::time::timeout(Duration::from_secs(10), answered).await {
        Ok(Ok((status, text))) if status == StatusCode::CREATED => {
            // Only if an engine ever took that reference: the container goes at once.
            tracing::warn!(%text, "the pin probe's create was accepted; removing it");
            if let Some(id) = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["Id"].as_str().map(str::to_owned))
            {
                let req =
                    Request::delete(format!("/containers/{id}?force=1")).body(upstream::empty());
                if let Ok(req) = req {
                    let _ = upstream.send(req).await;
                }
            }
            Ok(())
        }
        Ok(Ok((_, text))) if text.contains("bind source path does not exist") => {
            Err(PinError::Unseen(pins.dir().to_owned()))
        }
        Ok(Ok(_)) => Ok(()),
        Ok(Err(why)) => {
            tracing::warn!(%why, "could not ask the engine whether it sees the pin directory; a create with binds fails if it does not");
            Ok(())
        }
        Err(_) => {
            tracing::warn!("the engine did not answer the pin probe; a create with binds fails if it does not see the pin directory");
            Ok(())
        }
    };
    set.answered(false);
    result
}
