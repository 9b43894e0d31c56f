//! The proxy's own event subscription (I/O): one `GET /events` for the life of the proxy,
//! filtered to container and network create, rename and destroy, fed line by line to `names`.
//! The map is live only while this stream is: a drop (engine restart, socket gone, unreadable
//! answer) empties it, every request inspects meanwhile, and the subscription is made again
//! with a growing pause (100 ms to 5 s). The pause starts again from 100 ms only after a stream
//! that stayed up for the longest pause: one that ends as soon as it is answered (an engine,
//! or something in front of it, that closes the stream at once) is retried no faster than a
//! failed one.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use http::{Request, StatusCode};
use http_body_util::BodyExt;

use crate::names::{Event, Names};
use crate::upstream::{self, Upstream};
use sockproxy_policy::Scope;

/// The events that change a name or an ID; `Names` also checks each line itself.
const FILTERS: &str = r#"{"type":["container","network"],"event":["create","rename","destroy"]}"#;

/// An event line longer than this is not read: the map is emptied instead (a doubt).
const MAX_LINE: usize = 1 << 20;

/// How far back the subscription asks the engine to replay (seconds), to cover the moment
/// between the answer's head and the engine's subscription.
const REPLAY_SECS: u64 = 2;

const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// Keeps `names` coherent with the engine until the task is dropped.
pub async fn run(upstream: Upstream, names: Arc<Names>, scope: Scope) {
    let mut pause = FIRST_PAUSE;
    loop {
        let began = tokio::time::Instant::now();
        match follow(&upstream, &names, &scope).await {
            Ended::AfterEvents if began.elapsed() >= LONGEST_PAUSE => pause = FIRST_PAUSE,
            Ended::AfterEvents => {
                tracing::debug!("engine event stream ended soon after it began; requests inspect");
            }
            Ended::Failed(why) => {
                tracing::debug!(%why, "engine event subscription failed; requests inspect");
            }
        }
        if names.is_live() {
            names.set_live(false);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

enum Ended {
    /// The stream was up and then ended: try again soon if it was up for a while.
    AfterEvents,
    Failed(String),
}

/// The path and query of the subscription, before its `since` (test engines recognise it by
/// this prefix).
pub fn subscription() -> String {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("filters", FILTERS)
        .finish();
    format!("/events?{query}")
}

async fn follow(upstream: &Upstream, names: &Names, scope: &Scope) -> Ended {
    // dockerd 20.10 sends the answer's head before it subscribes (moby `getEvents` flushes,
    // then calls `SubscribeToEvents`): an event in between would be lost. Asking for the last
    // seconds' events replays that moment from the engine's buffer; a replayed event can only
    // make the map forget, so the overlap is harmless.
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs().saturating_sub(REPLAY_SECS));
    // Host is the pool's to add.
    let path = format!("{}&since={since}", subscription());
    let req = match Request::get(path).body(upstream::empty()) {
        Ok(r) => r,
        Err(e) => return Ended::Failed(e.to_string()),
    };
    let resp = match upstream.send(req).await {
        Ok(r) => r,
        Err(e) => return Ended::Failed(e.to_string()),
    };
    if resp.status() != StatusCode::OK {
        return Ended::Failed(format!("events answered {}", resp.status()));
    }
    // With `since` covering the head-to-subscription moment, no event is missed from here on.
    names.set_live(true);
    tracing::debug!("engine event subscription up; pinned names are remembered");
    let mut body = resp.into_body();
    let mut pending = BytesMut::new();
    let mut skipping = false;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            break;
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        while let Some(i) = pending.iter().position(|b| *b == b'\n') {
            let line = pending.split_to(i + 1);
            if std::mem::take(&mut skipping) {
                continue;
            }
            take_line(&line[..i], names, scope);
        }
        if pending.len() > MAX_LINE {
            names.doubt();
            pending.advance(pending.len());
            skipping = true;
        }
    }
    Ended::AfterEvents
}

fn take_line(line: &[u8], names: &Names, scope: &Scope) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    match Event::parse(line) {
        Ok(Some(ev)) => names.apply(&ev, scope),
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, "unreadable engine event; forgetting every remembered name");
            names.doubt();
        }
    }
}
