//! The log guard (I/O): once a second, the stack's running containers (those it may change,
//! listed as `answers::own_list_path` asks) and, for each, a sample of what it logged in the
//! last second, judged by `sockproxy_policy::log_flood`. A container over `--log-flood-lines`
//! for `--log-flood-seconds` in a row is stopped (`POST /containers/{id}/stop?t=0`, a manual
//! stop, so no restart policy brings it back); the stop is a decision line (`decision="stop"`,
//! `rule="log_flood"`), counted in `sockproxy_decisions_total` like every other. For
//! `REPEAT_WINDOW_SECS` after a stop, any of the stack's containers is stopped at its first
//! second over, and the stack is sampled every `REPEAT_PERIOD_MS` (each sample still reaching
//! back a second): a tenant gets one long flood, not one per start or per new sandbox, and a
//! repeat is seen within a quarter second. With `--state-dir` the time of the last stop is
//! also kept in a file there (`guard_memory`), so a proxy that is killed and started again is
//! still within the window. Nothing here forwards a client's request; an engine that does not answer
//! only skips a second (no container is stopped on a doubt).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use sockproxy_policy::facts::{own_list_path, own_objects};
use sockproxy_policy::log_flood::{
    period_ms, stop_message, Lines, LogFlood, Sample, Streak, Verdict, REPEAT_WINDOW_SECS,
};
use sockproxy_policy::{Access, Kind, Policy};

use crate::guard_memory::Memory;
use crate::metrics::Metrics;
use crate::upstream::{self, Upstream};

/// How far back a sample reaches.
const REACH: Duration = Duration::from_secs(1);
/// An engine call of the guard that takes longer is given up (the second is skipped).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The most of a list or an inspect the guard reads.
const MAX_ANSWER: usize = 16 << 20;

/// What the guard keeps of one running container.
#[derive(Debug, Default)]
struct Watched {
    /// From its inspect, once: a TTY container's log is not framed.
    tty: Option<bool>,
    streak: Streak,
}

/// Runs the guard until dropped; `memory`: where the last stop is kept (`--state-dir`).
pub async fn run(
    upstream: Upstream,
    policy: Policy,
    limit: LogFlood,
    max_list: usize,
    metrics: Arc<Metrics>,
    memory: Option<Memory>,
) {
    let mut watched: HashMap<String, Watched> = HashMap::new();
    // When one of the stack's containers was last stopped for flooding.
    let mut last_stop: Option<Instant> = match memory.clone() {
        Some(m) => tokio::task::spawn_blocking(move || m.recall())
            .await
            .ok()
            .flatten(),
        None => None,
    };
    let mut next = tokio::time::Instant::now();
    loop {
        let repeat =
            last_stop.is_some_and(|at| at.elapsed() < Duration::from_secs(REPEAT_WINDOW_SECS));
        let period = Duration::from_millis(period_ms(repeat));
        // A round that ran long is followed by a whole period, not a burst of catching up.
        next += period;
        let now = tokio::time::Instant::now();
        if next <= now {
            next = now + period;
        }
        tokio::time::sleep_until(next).await;
        let running = match running(&upstream, &policy, max_list.min(MAX_ANSWER)).await {
            Ok(r) => r,
            Err(why) => {
                // Streaks start again: a gap is not a second over the limit.
                tracing::debug!(%why, "log guard: could not list the stack's containers");
                watched.clear();
                continue;
            }
        };
        watched.retain(|id, _| running.iter().any(|(i, _)| i == id));
        for (id, name) in running {
            let w = watched.entry(id.clone()).or_default();
            let sample = match sample(&upstream, &id, w, &limit).await {
                Ok(s) => s,
                Err(why) => {
                    tracing::debug!(%why, container = %name, "log guard: no sample this second");
                    w.streak = Streak::default();
                    continue;
                }
            };
            let repeat =
                last_stop.is_some_and(|at| at.elapsed() < Duration::from_secs(REPEAT_WINDOW_SECS));
            if let Verdict::Stop { seconds } = w.streak.judge(&limit, sample, repeat) {
                stop(&upstream, &policy.stack, &id, &name, &limit, seconds).await;
                metrics.decision("containers.stop", "stop", "log_flood", "log_flood");
                last_stop = Some(Instant::now());
                if let Some(m) = &memory {
                    m.keep().await;
                }
                watched.remove(&id);
            }
        }
    }
}

/// The stack's running containers it may change, as (ID, name).
async fn running(
    upstream: &Upstream,
    policy: &Policy,
    cap: usize,
) -> Result<Vec<(String, String)>, String> {
    let path = own_list_path("", Kind::Container, policy);
    let answer = tokio::time::timeout(CALL_TIMEOUT, upstream.get(&path, cap))
        .await
        .map_err(|_| "the list did not answer".to_owned())?
        .map_err(|e| e.to_string())?;
    if answer.status != StatusCode::OK {
        return Err(format!("the list answered {}", answer.status));
    }
    let own =
        own_objects(Kind::Container, &answer.body, &policy.scope).map_err(|r| r.to_string())?;
    Ok(own
        .into_iter()
        .filter(|o| o.state == "running")
        .filter(|o| {
            policy
                .scope
                .allows(Kind::Container, Access::Change, &o.name)
        })
        .map(|o| (o.id, o.name))
        .collect())
}

/// What `id` logged in the last second. First its last line, if it is from that second (most
/// containers are quiet most seconds, and dockerd decodes every line a `tail` reaches); only
/// then its last `limit.lines` lines since then, counted as they arrive and no further than
/// `SAMPLE_BYTES`.
async fn sample(
    upstream: &Upstream,
    id: &str,
    w: &mut Watched,
    limit: &LogFlood,
) -> Result<Sample, String> {
    let tty = match w.tty {
        Some(t) => t,
        None => {
            let t = tty(upstream, id).await?;
            w.tty = Some(t);
            t
        }
    };
    let since = SystemTime::now()
        .checked_sub(REACH)
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .ok_or("the clock is before 1970")?;
    let last = logs(upstream, id, tty, 1, since).await?;
    if last == Sample::default() {
        return Ok(last);
    }
    logs(upstream, id, tty, limit.lines, since).await
}

/// `id`'s last `tail` lines logged since `since`, counted.
async fn logs(
    upstream: &Upstream,
    id: &str,
    tty: bool,
    tail: u32,
    since: Duration,
) -> Result<Sample, String> {
    let path = format!(
        "/containers/{id}/logs?stdout=1&stderr=1&tail={tail}&since={}.{:09}",
        since.as_secs(),
        since.subsec_nanos()
    );
    let req = Request::get(path)
        .body(upstream::empty())
        .map_err(|e| e.to_string())?;
    let read = async {
        let resp = upstream.send(req).await.map_err(|e| e.to_string())?;
        if resp.status() != StatusCode::OK {
            return Err(format!("the logs answered {}", resp.status()));
        }
        let mut lines = Lines::new(tty);
        let mut body = resp.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| e.to_string())?;
            // Past `SAMPLE_BYTES` the rest is dropped with the connection.
            if frame.data_ref().is_some_and(|d| !lines.feed(d)) {
                break;
            }
        }
        Ok(lines.sample())
    };
    tokio::time::timeout(CALL_TIMEOUT, read)
        .await
        .map_err(|_| "the logs did not answer".to_owned())?
}

/// Whether `id` has a TTY, from its inspect.
async fn tty(upstream: &Upstream, id: &str) -> Result<bool, String> {
    let answer = tokio::time::timeout(
        CALL_TIMEOUT,
        upstream.get(&format!("/containers/{id}/json"), MAX_ANSWER),
    )
    .await
    .map_err(|_| "the inspect did not answer".to_owned())?
    .map_err(|e| e.to_string())?;
    if answer.status != StatusCode::OK {
        return Err(format!("the inspect answered {}", answer.status));
    }
    let v: Value =
        serde_json::from_slice(&answer.body).map_err(|e| format!("unreadable inspect: {e}"))?;
    v["Config"]["Tty"]
        .as_bool()
        .ok_or_else(|| "the inspect has no Config.Tty".to_owned())
}

/// Stops `id` at once and says so in a decision line.
async fn stop(
    upstream: &Upstream,
    stack: &str,
    id: &str,
    name: &str,
    limit: &LogFlood,
    seconds: u32,
) {
    let started = Instant::now();
    let target = format!("/containers/{id}/stop?t=0");
    let status = match Request::post(&target).body(upstream::empty()) {
        Ok(req) => match tokio::time::timeout(CALL_TIMEOUT * 6, upstream.send(req)).await {
            Ok(Ok(resp)) => {
                let status = resp.status();
                let _ = resp.into_body().collect().await;
                status
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, container = %name, "log guard: the stop failed");
                StatusCode::BAD_GATEWAY
            }
            Err(_) => StatusCode::GATEWAY_TIMEOUT,
        },
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let message = stop_message(name, limit, seconds);
    crate::decision_line::log(
        stack,
        None,
        None,
        &crate::decision_line::Decided {
            method: "POST",
            op: "containers.stop",
            target: &target,
            decision: "stop",
            reason: "log_flood",
            rule: "log_flood",
            name: Some(name),
            message: Some(&message),
            status,
            duration_ms: crate::decision_line::millis(started.elapsed()),
        },
    );
}
