//! deer-flow's `GET /health` answers for the engine too: HAProxy health-checks every host's
//! `/health`, and a serve whose engine (or the stack's proxy in front of it) is gone must drop
//! out of the rotation instead of taking creates it cannot make. The check is one `/_ping`
//! through the proxy, bounded by `PING_TIMEOUT`; its result stands for `CACHED_FOR`, and
//! checks arriving while one is under way wait for that one, so a flood of health checks is
//! never a flood of pings. `answer` (pure, table-tested) turns the result into the route's
//! status and body.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::provider::Provider;

/// How long one `/_ping` through the proxy may take before the engine counts as not answering.
pub const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a ping's result answers `/health` before the engine is asked again.
pub const CACHED_FOR: Duration = Duration::from_millis(1500);

/// The engine's last known state: `Ok`, or why it does not answer.
pub type EngineState = Result<(), String>;

/// The last ping's result and when it was read; one ping at a time.
#[derive(Debug, Default)]
pub struct EngineHealth {
    last: Mutex<Option<(Instant, EngineState)>>,
    probing: tokio::sync::Mutex<()>,
}

/// Whether a result read at `at` still answers at `now`.
pub fn still_fresh(at: Instant, now: Instant) -> bool {
    now.saturating_duration_since(at) < CACHED_FOR
}

/// `/health`'s status and body for the engine's state: deer-flow's `{"status":"ok"}` as it
/// was, or 503 with the reason.
pub fn answer(state: &EngineState) -> (u16, Value) {
    match state {
        Ok(()) => (200, json!({ "status": "ok" })),
        Err(why) => (
            503,
            json!({
                "status": "unavailable",
                "detail": format!("the Docker engine behind this host's stack proxy does not answer: {why}"),
            }),
        ),
    }
}

impl EngineHealth {
    fn cached(&self, now: Instant) -> Option<EngineState> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref()
            .filter(|(at, _)| still_fresh(*at, now))
            .map(|(_, s)| s.clone())
    }

    fn store(&self, state: &EngineState) -> Option<EngineState> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let before = last.take().map(|(_, s)| s);
        *last = Some((Instant::now(), state.clone()));
        before
    }
}

impl Provider {
    /// The engine's state for `/health`: the cached result, or one bounded `/_ping` through
    /// the proxy. A change of state logs one line.
    pub async fn engine_state(&self) -> EngineState {
        let h = &self.engine_health;
        if let Some(s) = h.cached(Instant::now()) {
            return s;
        }
        let _one = h.probing.lock().await;
        // Another check may have pinged while this one waited.
        if let Some(s) = h.cached(Instant::now()) {
            return s;
        }
        let state = match tokio::time::timeout(PING_TIMEOUT, self.lc.engine.ping()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer to /_ping within {PING_TIMEOUT:?}")),
        };
        let before = h.store(&state);
        match (&before, &state) {
            (Some(Ok(())) | None, Err(why)) => {
                tracing::warn!(engine = self.lc.engine.address(), reason = %why, "the engine does not answer /_ping: /health answers 503 until it does")
            }
            (Some(Err(_)), Ok(())) => {
                tracing::info!(
                    engine = self.lc.engine.address(),
                    "the engine answers /_ping again: /health answers 200"
                )
            }
            _ => {}
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_answers_ok_as_before_and_503_with_the_reason() {
        assert_eq!(answer(&Ok(())), (200, json!({ "status": "ok" })));
        let (status, body) = answer(&Err("connection refused".into()));
        assert_eq!(status, 503);
        assert_eq!(body["status"], "unavailable");
        let detail = body["detail"].as_str().unwrap_or("");
        assert!(
            detail.contains("does not answer") && detail.ends_with("connection refused"),
            "{detail}"
        );
    }

    #[test]
    fn a_result_stands_for_its_cache_time_only() {
        let at = Instant::now();
        for (after, fresh) in [
            (Duration::ZERO, true),
            (CACHED_FOR - Duration::from_millis(1), true),
            (CACHED_FOR, false),
            (CACHED_FOR * 10, false),
        ] {
            assert_eq!(still_fresh(at, at + after), fresh, "{after:?}");
        }
        // A clock that steps back does not make a result stand forever: it is fresh (as read
        // just now) and expires CACHED_FOR later as usual.
        assert!(still_fresh(at + Duration::from_secs(1), at));
    }

    #[test]
    fn the_cache_keeps_the_last_result_and_says_what_it_replaced() {
        let h = EngineHealth::default();
        assert_eq!(h.cached(Instant::now()), None);
        assert_eq!(h.store(&Err("gone".into())), None);
        assert_eq!(h.cached(Instant::now()), Some(Err("gone".into())));
        assert_eq!(h.store(&Ok(())), Some(Err("gone".into())));
        assert_eq!(h.cached(Instant::now() + CACHED_FOR), None);
    }
}
