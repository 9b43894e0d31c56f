//! Where a sandbox handed out came from (`Source`), and whether a reclaim probes it over HTTP
//! first, and for how long (pure).

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Already active (held) in this process.
    Cached,
    /// Reclaimed from the warm pool.
    Warm,
    /// Found on the engine (made earlier, or by another process).
    Discovered,
    Created,
}

impl Source {
    pub fn as_str(&self) -> &'static str {
        match self {
            Source::Cached => "cached",
            Source::Warm => "warm",
            Source::Discovered => "discovered",
            Source::Created => "created",
        }
    }
}

/// Longest a warm reclaim waits for the sandbox's HTTP answer: a fresh create is cheaper than
/// a long wait on a sandbox that has stopped answering.
pub const RECLAIM_PROBE: Duration = Duration::from_secs(1);

/// Whether a sandbox handed out again as `source` is first probed over HTTP, and for how long:
/// a warm one is (it sat unused, its server may have died inside a running container); one
/// held right now is in use and not second-guessed; a `ready_timeout` of zero means the
/// operator turned readiness off (the sandbox may serve no HTTP), so nothing is probed.
pub fn reclaim_probe(source: &Source, ready_timeout: Duration) -> Option<Duration> {
    match source {
        Source::Warm if !ready_timeout.is_zero() => Some(ready_timeout.min(RECLAIM_PROBE)),
        _ => None,
    }
}
