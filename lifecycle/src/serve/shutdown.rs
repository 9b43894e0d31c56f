//! Shutdown: every lease is released, then what this process owns is destroyed (at most
//! `--shutdown-parallel` teardowns at once) or kept and handed back (`--on-shutdown`; the
//! provisioner API's sandboxes are always kept); one line per sandbox says which, failures are
//! reported.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::pool::State;
use super::provider::Provider;

/// What shutdown did with one sandbox.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShutdownLine {
    pub sandbox_id: String,
    /// The container ID it had (the generation its quarantine record and port are keyed by).
    pub generation: String,
    /// `destroyed`, `kept` (…), or `failed: <why>`.
    pub result: String,
}

impl ShutdownLine {
    /// The one-line error for stderr when its teardown failed (the sandbox is kept): the
    /// stdout line is for machines, this is what an operator reading the exit sees.
    pub fn failure(&self) -> Option<String> {
        let why = self.result.strip_prefix("failed: ")?;
        Some(format!(
            "lifecycle serve: sandbox {} (generation {}) was not torn down at shutdown and is kept: {why}",
            self.sandbox_id, self.generation
        ))
    }
}

/// What shutdown does with one tracked sandbox (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtShutdown {
    /// Left running, our claim dropped so the next provider adopts it.
    Keep,
    /// Torn down.
    Destroy,
}

/// A sandbox made through the provisioner API is deer-flow's: never destroyed by a shutdown
/// whatever `--on-shutdown` says (deer-flow's own provisioner never deletes them on restart),
/// unless deer-flow's `DELETE` of it is the teardown still to be finished (`fenced`). A `/v1/`
/// one is destroyed, or kept with `keep_warm`; a fenced one is always destroyed.
pub fn at_shutdown(provisioned: bool, fenced: bool, keep_warm: bool) -> AtShutdown {
    match (fenced, provisioned || keep_warm) {
        (true, _) => AtShutdown::Destroy,
        (false, true) => AtShutdown::Keep,
        (false, false) => AtShutdown::Destroy,
    }
}

/// Seconds of stop grace a service manager must give `lifecycle serve` (systemd's
/// `TimeoutStopSec`, compose's `stop_grace_period`) so its shutdown is never cut short by a
/// SIGKILL: `ceil(max_replicas / shutdown_parallel)` rounds of teardowns, each a sandbox's and a
/// sidecar's stop (`--stop-timeout` each) and 5 s for removals and networks, and 30 s for
/// the requests in flight to finish. `None` without a replica cap (no bound).
pub fn stop_grace_secs(
    stop_timeout: u64,
    max_replicas: usize,
    shutdown_parallel: usize,
) -> Option<u64> {
    if max_replicas == 0 {
        return None;
    }
    let rounds = max_replicas.div_ceil(shutdown_parallel.max(1)) as u64;
    Some(rounds * (2 * stop_timeout + 5) + 30)
}

/// Releases every lease; then, per `at_shutdown`, destroys each tracked sandbox (at most
/// `--shutdown-parallel` at once) or leaves it running and drops our claim so another provider,
/// or this one restarted, adopts it. One line per sandbox, in sandbox ID order.
pub async fn shutdown(p: &Arc<Provider>, keep_warm: bool) -> Vec<ShutdownLine> {
    // Acquires under way finish first (their engine steps are never cut off), so what they
    // made is tracked and torn down here too.
    let _quiet = p.inflight.write().await;
    // Several hosts: calls for this host's IDs stop being sent here at once.
    super::hosts::withdraw(p).await;
    let leases = p.pool().all_leases();
    for lease in leases {
        let now = p.now();
        let _ = p.pool().release(&lease, now);
    }
    let ids: Vec<(String, String, AtShutdown)> = p
        .pool()
        .entries()
        .map(|(id, e)| {
            let fenced = e.destroy_pending || e.state == State::Destroying;
            (
                id.clone(),
                e.container_id.clone(),
                at_shutdown(e.provisioned, fenced, keep_warm),
            )
        })
        .collect();
    let slots = Arc::new(Semaphore::new(p.config().shutdown_parallel.max(1)));
    let mut teardowns = JoinSet::new();
    let mut lines = Vec::new();
    for (id, generation, what) in ids {
        if what == AtShutdown::Keep {
            let result = match p.own.release(&id).await {
                Ok(_) => "kept".to_owned(),
                Err(e) => format!("kept; claim not released: {e}"),
            };
            tracing::info!(sandbox_id = %id, result, "shutdown");
            lines.push(ShutdownLine {
                sandbox_id: id,
                generation,
                result,
            });
            continue;
        }
        let (p, slots) = (p.clone(), slots.clone());
        teardowns.spawn(async move {
            let _slot = slots.acquire_owned().await;
            let serial = p.serial(&id);
            let _serial = serial.lock().await;
            p.pool().begin_destroy(&id);
            let result = match p.destroy_fenced(&id).await {
                Ok(torn) => torn.as_str().to_owned(),
                Err(e) => format!("failed: {e}"),
            };
            tracing::info!(sandbox_id = %id, result, "shutdown");
            ShutdownLine {
                sandbox_id: id,
                generation,
                result,
            }
        });
    }
    while let Some(done) = teardowns.join_next().await {
        match done {
            Ok(line) => lines.push(line),
            Err(e) => tracing::error!(error = %e, "a shutdown teardown ended abnormally"),
        }
    }
    lines.sort_by(|a, b| a.sandbox_id.cmp(&b.sandbox_id));
    lines
}

#[cfg(test)]
mod tests {
    use super::{at_shutdown, AtShutdown, ShutdownLine};

    #[test]
    fn stop_grace_table() {
        use super::stop_grace_secs;
        assert_eq!(stop_grace_secs(5, 32, 8), Some(90), "the shipped units'");
        assert_eq!(stop_grace_secs(5, 33, 8), Some(105));
        assert_eq!(stop_grace_secs(10, 8, 8), Some(55));
        assert_eq!(stop_grace_secs(5, 1, 64), Some(45));
        assert_eq!(stop_grace_secs(5, 0, 8), None, "no cap, no bound");
    }

    #[test]
    fn at_shutdown_table() {
        use AtShutdown::{Destroy, Keep};
        // (provisioned, fenced, keep_warm)
        for (provisioned, fenced, keep_warm, want) in [
            (false, false, false, Destroy),
            (false, false, true, Keep),
            (true, false, false, Keep),
            (true, false, true, Keep),
            (false, true, false, Destroy),
            (false, true, true, Destroy),
            (true, true, false, Destroy),
            (true, true, true, Destroy),
        ] {
            assert_eq!(
                at_shutdown(provisioned, fenced, keep_warm),
                want,
                "{provisioned} {fenced} {keep_warm}"
            );
        }
    }

    #[test]
    fn only_a_failed_teardown_is_reported_on_stderr() {
        let line = |result: &str| ShutdownLine {
            sandbox_id: "i".into(),
            generation: "c".into(),
            result: result.into(),
        };
        let cases = [
            ("destroyed", None),
            ("kept", None),
            ("kept; claim not released: store down", None),
            (
                "failed: stop refused",
                Some("lifecycle serve: sandbox i (generation c) was not torn down at shutdown and is kept: stop refused"),
            ),
        ];
        for (result, want) in cases {
            assert_eq!(line(result).failure().as_deref(), want, "{result}");
        }
    }
}
