//! The provider's periodic work: the ownership heartbeat (on its own task), the idle reaper and
//! the release of lapsed leases (`--lease-timeout`), orphan reconciliation at start-up and
//! every tick (adopt a running stack sandbox nobody tracks: at once with the memory store, after
//! the grace period with a shared one, never one another process still renews, nothing while
//! the store cannot answer), and
//! shutdown (destroy, or keep warm and hand back, what this process owns; report failures).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::claims::{Claim, Renew};
use super::error::renew_word;
use super::pool::State;
use super::provider::{Provider, ServeError};
use crate::naming;

/// Runs the ownership heartbeat on its own task, and the reaper and reconciliation every
/// `every`, until `stop` turns true. The heartbeat never waits behind them: a reap or a
/// reconcile can take a stop timeout, a removal wait or a lock wait, longer than the ownership
/// TTL, and a claim left unrenewed past its TTL is a peer's to adopt and destroy while this
/// process still has it leased.
pub async fn run(p: Arc<Provider>, every: Duration, stop: watch::Receiver<bool>) {
    let period = heartbeat_period(every, p.own.ttl);
    let beat = tokio::spawn(heartbeat_loop(p.clone(), period, stop.clone()));
    maintenance_loop(&p, every, stop).await;
    if let Err(e) = beat.await {
        tracing::error!(error = %e, "the heartbeat task ended abnormally");
    }
}

/// Renewals every `every`, but at least three per TTL, so one late or cut-short pass still
/// leaves two before the claim lapses.
pub fn heartbeat_period(every: Duration, ttl: Duration) -> Duration {
    every.min(ttl / 3).max(Duration::from_millis(10))
}

/// One renewal pass per `period`, each cut short after `period` (a third of the TTL at most):
/// a store that stalls must not hold the loop past the point where the next pass is due.
/// Each store call has its own timeout too; what a cut pass did not renew, the next one does.
async fn heartbeat_loop(p: Arc<Provider>, period: Duration, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tick.tick() => {}
        }
        if tokio::time::timeout(period, p.heartbeat()).await.is_err() {
            tracing::warn!(
                bound = ?period,
                "heartbeat: a renewal pass outlasted its bound and was cut short"
            );
        }
    }
}

async fn maintenance_loop(p: &Provider, every: Duration, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tick.tick() => {}
            // A sandbox was found not running: reconcile now.
            () = p.wake.notified() => {}
        }
        p.reap().await;
        reconcile(p).await;
    }
}

impl Provider {
    /// Renews ownership of every tracked sandbox and of every one an acquire is working on
    /// (`renew_ownership`).
    pub async fn heartbeat(&self) {
        renew_ownership(self).await;
    }
}

/// Renews ownership of every tracked sandbox, and of every one an acquire is working on
/// (a create's readiness wait can outlast the claim's TTL); a lost one is forgotten (never
/// re-taken, never destroyed). A store error changes nothing: what we own we keep serving.
pub(crate) async fn renew_ownership(p: &Provider) {
    let mut ids: Vec<String> = p.pool().entries().map(|(id, _)| id.clone()).collect();
    // Per-ID mutexes of sandboxes no longer tracked and not in use go (else one per ID ever).
    {
        let pool = p.pool();
        let mut serial = p.serial.lock().unwrap_or_else(|p| p.into_inner());
        serial.retain(|id, m| pool.get(id).is_some() || Arc::strong_count(m) > 1);
        // What is left and not tracked is in use: an acquire creating it.
        ids.extend(
            serial
                .keys()
                .filter(|id| pool.get(id.as_str()).is_none())
                .cloned(),
        );
    }
    for id in ids {
        // The list is a snapshot and renewing takes a store round trip per ID: one
        // destroyed (and its claim released) since would get its key back, blocking peers
        // for a TTL. Only what is still tracked or still being acquired is renewed.
        if !still_ours(p, &id) {
            continue;
        }
        // A sandbox on its way out keeps (or, lapsed, gets back) `del:`, never `own:`; so does
        // one whose teardown holds `del:` without the pool showing it (`Ownership::renew`).
        let fenced = p
            .pool()
            .get(&id)
            .is_some_and(|e| e.destroy_pending || e.state == State::Destroying);
        let renewed = if fenced {
            p.own.renew_fenced(&id).await
        } else {
            p.own.renew(&id).await
        };
        match renewed {
            Ok(r) => {
                p.metrics.lease_renewal(renew_word(r));
                if r == Renew::Lapsed && !still_ours(p, &id) {
                    // Destroyed (and its claim released) while this renewal was on its way:
                    // the key it just wrote back would hold off everyone for a TTL.
                    let _ = p.own.release(&id).await;
                    continue;
                }
                if r == Renew::Lost {
                    // Under the ID's lock, as every other change to an entry: an operation on
                    // it under way (an acquire, which renews and sees the loss itself) is left
                    // to finish, and the next beat forgets it if it is still tracked.
                    let serial = p.serial(&id);
                    let Ok(_serial) = serial.try_lock() else {
                        tracing::info!(sandbox_id = %id, "ownership lost to another provider; in use here, forgotten at a later beat");
                        continue;
                    };
                    tracing::warn!(sandbox_id = %id, "ownership lost to another provider: forgetting it");
                    p.pool().forget(&id);
                }
            }
            Err(e) => {
                p.metrics.lease_renewal("error");
                tracing::warn!(sandbox_id = %id, error = %e, "renewal failed; still serving it");
            }
        }
    }
}

/// Tracked by this process, or held by an operation under way (an acquire creating it).
fn still_ours(p: &Provider, id: &str) -> bool {
    if p.pool().get(id).is_some() {
        return true;
    }
    let serial = p.serial.lock().unwrap_or_else(|p| p.into_inner());
    serial.get(id).is_some_and(|m| Arc::strong_count(m) > 1)
}

/// Releases every lease not renewed within `--lease-timeout`, as its holder would have: a
/// gateway that crashed or lost track of a lease would otherwise keep its sandbox active (never
/// warm, never reaped) for as long as this process runs. Part of `Provider::reap`.
pub(crate) async fn release_lapsed(p: &Provider) {
    let lapsed = p.pool().lapsed_leases(p.now());
    for (lease, sandbox_id, holder) in lapsed {
        let (result, error) = match p.release_if_lapsed(&lease).await {
            Some(Ok(word)) => (word, None),
            // Renewed or released by its holder since the list was made.
            None | Some(Err(ServeError::UnknownLease(_))) => continue,
            Some(Err(e)) => ("failed", Some(e.to_string())),
        };
        p.metrics.lease_lapsed(result);
        tracing::warn!(
            lease,
            sandbox_id,
            holder,
            result,
            error,
            lease_timeout_secs = p.config().lease_timeout.as_secs_f64(),
            "lease not renewed within --lease-timeout: released"
        );
    }
}

/// One reconciliation pass: running stack sandboxes no entry tracks are adopted into the warm
/// pool (and so reaped by the idle timer, counted by the cap). With a shared store a sandbox
/// must be seen unowned on consecutive passes spanning `adopt_grace` before it is claimed (a
/// peer may be creating it); with the memory store this process is the only provider, so an
/// untracked one is an orphan of an earlier run (a crash, kill -9) and is adopted at once. Any
/// store error forgets every observation (fail closed).
pub async fn reconcile(p: &Provider) {
    let grace = if p.own.is_shared() {
        p.config().adopt_grace
    } else {
        Duration::ZERO
    };
    let listed = match p.lc.list().await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "reconcile: cannot list the stack's sandboxes; adopting nothing");
            return;
        }
    };
    let now = p.now();
    let mut candidates = Vec::new();
    let mut dead = Vec::new();
    for l in listed {
        let Some(id) = adoptable_id(p, &l) else {
            continue;
        };
        if l.state != "running" {
            p.unowned_since().remove(&id);
            // Created, exited or dead: a leftover once it stays so for the grace (a create
            // under way holds the sandbox's lock, which the teardown below waits out).
            if l.scoped {
                let since = *p.dead_since().entry(id.clone()).or_insert(now);
                if now.saturating_sub(since) >= grace {
                    dead.push((id, l.container_id));
                }
            }
            continue;
        }
        p.dead_since().remove(&id);
        if p.pool().get(&id).is_some() {
            p.unowned_since().remove(&id);
            continue;
        }
        match p.own.value(&id).await {
            Ok(None) => {
                let since = *p.unowned_since().entry(id.clone()).or_insert(now);
                if now.saturating_sub(since) >= grace {
                    candidates.push(id);
                }
            }
            Ok(Some(_)) => {
                p.unowned_since().remove(&id);
            }
            Err(e) => {
                tracing::warn!(error = %e, "reconcile: ownership store unavailable; adopting nothing");
                p.unowned_since().clear();
                return;
            }
        }
    }
    for id in candidates {
        adopt(p, &id).await;
    }
    for (id, generation) in dead {
        tear_down_dead(p, &id, &generation).await;
    }
}

/// A sandbox lifecycle made that is not running (created, exited or dead) is a leftover: torn
/// down by the generation listed, under its lock and a `del:` claim (never one another provider
/// owns). A tracked one held by a lease is left to its holder (the next acquire's health check
/// replaces it); a tracked unheld one is destroyed as the reaper would.
async fn tear_down_dead(p: &Provider, id: &str, generation: &str) {
    p.dead_since().remove(id);
    let serial = p.serial(id);
    let Ok(_serial) = serial.try_lock() else {
        tracing::info!(
            sandbox_id = id,
            "reconcile: in use here; a sandbox not running is left for a later pass"
        );
        return;
    };
    let tracked = p
        .pool()
        .get(id)
        .map(|e| (e.holders.len(), e.container_id.clone()));
    let result = match tracked {
        Some((held, _)) if held > 0 => return,
        Some((_, tracked)) if tracked == generation => {
            if !p.pool().begin_destroy(id) {
                return;
            }
            p.destroy_fenced(id).await.map(super::destroy::Torn::as_str)
        }
        // Tracked under another generation: that one's fate is the reaper's and the acquire's.
        Some(_) => return,
        None => p
            .destroy_engine(id, Some(generation))
            .await
            .map(super::destroy::Torn::as_str),
    };
    match result {
        Ok(result) => {
            tracing::info!(
                sandbox_id = id,
                container_id = generation,
                result,
                "reconcile: a sandbox that was not running is torn down"
            )
        }
        Err(e) => {
            tracing::warn!(sandbox_id = id, container_id = generation, error = %e, "reconcile: a sandbox that was not running could not be torn down; kept for a later pass")
        }
    }
}

/// The ID a listed container may be adopted (or torn down) under: its `deerflow.sandbox_id`
/// label, only if that is a sandbox ID (a derived one; any ID of the stack for one the
/// provisioner API made, whose IDs deer-flow names) and the container's name is exactly that
/// ID's sandbox name. Anything else (an ID lifecycle could never have made, or a label naming
/// another sandbox) is skipped: once adopted, it could never be destroyed (`destroy` refuses the
/// ID, or acts on another container), its `del:` claim would be renewed forever and shutdown
/// would report it failed.
fn adoptable_id(p: &Provider, l: &crate::ops::Listed) -> Option<String> {
    let label = l.sandbox_id.as_deref()?;
    let parsed = match l.provisioned {
        true => naming::parse_stack_sandbox_id(label),
        false => naming::parse_sandbox_id(label),
    };
    let id = match parsed {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!(container = %l.container_name, container_id = %l.container_id, error = %e, "reconcile: its sandbox ID label is not a sandbox ID; not adopted");
            return None;
        }
    };
    let want = p.lc.names(&id).sandbox;
    if l.container_name != want {
        tracing::warn!(container = %l.container_name, container_id = %l.container_id, sandbox_id = %id, expected = %want, "reconcile: its name is not its sandbox ID label's sandbox name; not adopted");
        return None;
    }
    Some(id)
}

async fn adopt(p: &Provider, id: &str) {
    p.unowned_since().remove(id);
    // Under the ID's lock, as every other change to an entry. One in use (an acquire or a
    // destroy of that ID under way here) is no orphan: skipped, without waiting on it, so a
    // long create never holds up the reaper that runs in this same loop.
    let serial = p.serial(id);
    let Ok(_serial) = serial.try_lock() else {
        tracing::info!(sandbox_id = id, "reconcile: in use here; not adopted");
        return;
    };
    match p.own.claim(id).await {
        Ok(Claim::Ours) => {}
        other => {
            tracing::info!(sandbox_id = id, answer = ?other, "reconcile: not adopted (claimed meanwhile or store unavailable)");
            return;
        }
    }
    let found = p.lc.inspect_sandbox(id).await;
    let c = match found {
        Ok(Some(c)) if c.running => c,
        other => {
            tracing::info!(sandbox_id = id, found = ?other.map(|c| c.map(|c| c.id)), "reconcile: gone or not running; not adopted");
            let _ = p.own.release(id).await;
            return;
        }
    };
    let Some(scope) = c.labels.get(naming::LABEL_SCOPE).cloned() else {
        tracing::info!(
            sandbox_id = id,
            "reconcile: no scope label, so no (user, thread) to hand it to; not adopted"
        );
        let _ = p.own.release(id).await;
        return;
    };
    let created = p.lc.discovered(id, &c);
    let origin = c
        .labels
        .get(super::provision::LABEL_ORIGIN)
        .map(String::as_str);
    if origin == Some(super::provision::ORIGIN_PROVISIONER) {
        // deer-flow's (made through the provisioner API): tracked, never reaped or evicted.
        if p.pool().get(id).is_none() {
            p.pool()
                .commit_provisioned(id, &scope, &c.id, &created.url, p.now());
        }
        tracing::info!(sandbox_id = id, container_id = %c.id, "reconcile: adopted a provisioner API sandbox (kept until deer-flow deletes it)");
        return;
    }
    p.adopt_entry(id, &scope, &c.id, &created.url);
    tracing::info!(sandbox_id = id, container_id = %c.id, "reconcile: adopted an orphan into the warm pool");
}

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

/// Releases every lease; then destroys each tracked sandbox, or (`keep_warm`) leaves it
/// running and drops our claim so another provider may adopt it after its grace period.
pub async fn shutdown(p: &Provider, keep_warm: bool) -> Vec<ShutdownLine> {
    // Acquires under way finish first (their engine steps are never cut off), so what they
    // made is tracked and torn down here too.
    let _quiet = p.inflight.write().await;
    let leases = p.pool().all_leases();
    for lease in leases {
        let now = p.now();
        let _ = p.pool().release(&lease, now);
    }
    let ids: Vec<(String, String, bool)> = p
        .pool()
        .entries()
        .map(|(id, e)| {
            (
                id.clone(),
                e.container_id.clone(),
                e.destroy_pending || e.state == State::Destroying,
            )
        })
        .collect();
    let mut lines = Vec::new();
    for (id, generation, must_destroy) in ids {
        let result = if keep_warm && !must_destroy {
            match p.own.release(&id).await {
                Ok(_) => "kept".to_owned(),
                Err(e) => format!("kept; claim not released: {e}"),
            }
        } else {
            let serial = p.serial(&id);
            let _serial = serial.lock().await;
            p.pool().begin_destroy(&id);
            match p.destroy_fenced(&id).await {
                Ok(torn) => torn.as_str().to_owned(),
                Err(e) => format!("failed: {e}"),
            }
        };
        tracing::info!(sandbox_id = %id, result, "shutdown");
        lines.push(ShutdownLine {
            sandbox_id: id,
            generation,
            result,
        });
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::{heartbeat_period, ShutdownLine};
    use std::time::Duration;

    #[test]
    fn renewals_come_at_least_three_times_per_ttl() {
        let s = Duration::from_secs;
        assert_eq!(heartbeat_period(s(10), s(30)), s(10));
        assert_eq!(heartbeat_period(s(1), s(30)), s(1));
        // A --tick longer than a third of the TTL does not stretch the renewals.
        assert_eq!(heartbeat_period(s(60), s(30)), s(10));
        assert_eq!(
            heartbeat_period(s(1), Duration::ZERO),
            Duration::from_millis(10)
        );
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
