//! The provider's periodic work: the ownership heartbeat (on its own task), the idle reaper and
//! the release of lapsed leases (`--lease-timeout`), and reconciliation at start-up and every
//! tick (`reconcile`); shutdown is `shutdown`'s.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::claims::Renew;
use super::error::renew_word;
use super::pool::State;
use super::provider::{Provider, ServeError};

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
    /// (`renew_ownership`). On one of several hosts (`--advertise-url`), not while the engine
    /// behind the stack's proxy does not answer: HAProxy has taken this host out (its
    /// `/health` is 503), so its claims and registry entries must lapse for another host to
    /// make its IDs' sandboxes on deer-flow's next call, instead of redirecting them here
    /// for as long as this process runs. Once the engine answers again, a claim another host
    /// took is lost here (forgotten) and its sandbox on this engine is stale (removed by
    /// reconciliation); one nobody took is renewed as before.
    pub async fn heartbeat(&self) {
        if self.hosts.is_some() {
            if let Err(why) = self.engine_state().await {
                tracing::warn!(reason = %why, "multi-host: the engine does not answer; claims and registry entries left to lapse, so other hosts take this host's sandbox IDs");
                return;
            }
        }
        renew_ownership(self).await;
        super::hosts::beat(self).await;
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
        if !still_ours(p, &id) || p.removing_stale(&id) {
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
                if r != Renew::Lost {
                    p.note_claim_held(&id);
                }
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

pub use super::reconcile::reconcile;
pub use super::shutdown::{shutdown, ShutdownLine};

#[cfg(test)]
mod tests {
    use super::heartbeat_period;
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
}
