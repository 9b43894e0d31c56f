//! The provider's pure state: which sandboxes this process tracks, who holds them (leases, and
//! when each was last renewed), the warm pool, deferred destroys, idle expiry, lapsed leases and
//! the replica cap. No I/O and no clock of its
//! own: every decision takes the monotonic time it is made at, so a table test steps time (and
//! a wall-clock step cannot reach it). The provider asks a `plan_*` function what to do, does the
//! engine work, then reports the outcome with a `commit`/`warm`/`forget` call.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Whose sandbox it is: the `lifecycle.scope` digest of (user, thread).
pub type Scope = String;

pub use super::plan::{AcquirePlan, DestroyPlan, ProvisionPlan};
pub use super::reclaim::{reclaim_probe, Source, RECLAIM_PROBE};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Held by at least one lease.
    Active,
    /// No holder; its container keeps running since `since` (monotonic).
    Warm { since: Duration },
    /// A destroy is under way (no acquire may take it meanwhile).
    Destroying,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub scope: Scope,
    pub container_id: String,
    pub url: String,
    pub state: State,
    /// lease → holder name.
    pub holders: BTreeMap<String, String>,
    /// A destroy was asked while holders remained: the last release performs it.
    pub destroy_pending: bool,
    /// Monotonic time of the last acquire or release.
    pub last_used: Duration,
    /// An acquire is reclaiming this warm entry right now (health check, HTTP probe): the
    /// replica cap must not pick it as a victim meanwhile.
    pub reclaiming: bool,
    /// Teardowns of this entry that failed in a row (the reaper's backoff).
    pub failures: u32,
    /// The reaper retries a failed teardown no earlier than this (monotonic).
    pub retry_at: Duration,
    /// Made (or adopted) for deer-flow's provisioner API: deer-flow keeps its pool, idle
    /// and ownership state itself, so this one is never reaped on the idle timer nor evicted
    /// by the cap; only a DELETE (or shutdown with `destroy`) removes it.
    pub provisioned: bool,
}

impl Entry {
    fn new(scope: &str, container_id: &str, url: &str, state: State, now: Duration) -> Self {
        Self {
            scope: scope.to_owned(),
            container_id: container_id.to_owned(),
            url: url.to_owned(),
            state,
            holders: BTreeMap::new(),
            destroy_pending: false,
            last_used: now,
            reclaiming: false,
            failures: 0,
            retry_at: Duration::ZERO,
            provisioned: false,
        }
    }
}

/// How long the reaper waits before retrying a teardown that failed `failures` times in a row:
/// the first retry at its next pass (as a destroy request would), then 2 s doubling to 5 min,
/// so an engine that keeps refusing is not hammered every tick.
pub fn retry_backoff(failures: u32) -> Duration {
    if failures <= 1 {
        return Duration::ZERO;
    }
    let doublings = (failures - 2).min(8);
    (Duration::from_secs(2) * 2u32.pow(doublings)).min(MAX_RETRY_BACKOFF)
}

/// The longest the reaper waits between two retries of a failed teardown.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(300);

/// What a release leaves to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    UnknownLease,
    /// Other holders remain.
    StillHeld {
        sandbox_id: String,
    },
    /// The last holder left: health-check it and keep it warm, or destroy it.
    Idle {
        sandbox_id: String,
    },
    /// The last holder left a sandbox whose destroy was deferred: destroy it now.
    Destroy {
        sandbox_id: String,
    },
}

/// What a release that left its sandbox idle does once it holds that sandbox's lock: other
/// work on the sandbox may have run while it waited for the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdleCheck {
    /// No longer tracked: destroyed meanwhile (a destroy request, say).
    Gone,
    /// Acquired again meanwhile.
    Held,
    /// A destroy was asked, or failed and waits for its retry: destroy it, never warm it.
    Fenced,
    /// Still idle: health-check container `container_id` of `scope`, then keep it warm.
    Check { scope: Scope, container_id: String },
}

/// One lease: the sandbox it holds, and when it was granted or last renewed (monotonic).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Lease {
    sandbox: String,
    renewed: Duration,
}

#[derive(Debug, Clone, Default)]
pub struct Pool {
    pub(super) entries: BTreeMap<String, Entry>,
    /// IDs whose create is under way: each holds a slot under the replica cap.
    pub(super) creating: BTreeSet<String>,
    leases: BTreeMap<String, Lease>,
    idle_timeout: Duration,
    pub(super) max_replicas: usize,
    /// A lease not renewed for this long lapses (zero: leases last until released).
    lease_timeout: Duration,
}

impl Pool {
    /// `idle_timeout` zero keeps warm entries until evicted; `max_replicas` zero means no cap.
    pub fn new(idle_timeout: Duration, max_replicas: usize) -> Self {
        Self {
            idle_timeout,
            max_replicas,
            ..Self::default()
        }
    }

    /// Leases lapse once not renewed for `lease_timeout` (zero, the default: never).
    pub fn with_lease_timeout(mut self, lease_timeout: Duration) -> Self {
        self.lease_timeout = lease_timeout;
        self
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.get(id)
    }

    pub fn entries(&self) -> impl Iterator<Item = (&String, &Entry)> {
        self.entries.iter()
    }

    pub fn lease_sandbox(&self, lease: &str) -> Option<&str> {
        self.leases.get(lease).map(|l| l.sandbox.as_str())
    }

    /// Restarts `lease`'s clock at `now`; the sandbox it holds, or `None` for an unknown lease.
    pub fn renew_lease(&mut self, lease: &str, now: Duration) -> Option<String> {
        let l = self.leases.get_mut(lease)?;
        l.renewed = now;
        Some(l.sandbox.clone())
    }

    /// Leases not renewed for the lease timeout at `now`, each with its sandbox and holder:
    /// the holder is presumed gone (a gateway that crashed never releases).
    pub fn lapsed_leases(&self, now: Duration) -> Vec<(String, String, String)> {
        if self.lease_timeout.is_zero() {
            return Vec::new();
        }
        self.leases
            .iter()
            .filter(|(_, l)| now.saturating_sub(l.renewed) >= self.lease_timeout)
            .map(|(lease, l)| {
                let holder = self
                    .entries
                    .get(&l.sandbox)
                    .and_then(|e| e.holders.get(lease))
                    .cloned()
                    .unwrap_or_default();
                (lease.clone(), l.sandbox.clone(), holder)
            })
            .collect()
    }

    /// (active, warm, destroying) counts, for the metrics.
    pub fn sizes(&self) -> (usize, usize, usize) {
        let mut sizes = (0, 0, 0);
        for e in self.entries.values() {
            match e.state {
                State::Active => sizes.0 += 1,
                State::Warm { .. } => sizes.1 += 1,
                State::Destroying => sizes.2 += 1,
            }
        }
        sizes
    }

    /// The reclaim of `id` is over (handed out, dropped, or cut short).
    pub fn end_reclaim(&mut self, id: &str) {
        if let Some(e) = self.entries.get_mut(id) {
            e.reclaiming = false;
        }
    }

    /// Records a successful acquire: the entry is (re)made active with `lease` held by `holder`.
    #[allow(clippy::too_many_arguments)]
    pub fn commit_acquire(
        &mut self,
        id: &str,
        scope: &str,
        container_id: &str,
        url: &str,
        lease: &str,
        holder: &str,
        now: Duration,
    ) {
        let entry = self
            .entries
            .entry(id.to_owned())
            .or_insert_with(|| Entry::new(scope, container_id, url, State::Active, now));
        // A replaced (dead) generation keeps its holders: they hold the thread's sandbox.
        entry.reclaiming = false;
        entry.failures = 0;
        entry.container_id = container_id.to_owned();
        entry.url = url.to_owned();
        entry.state = State::Active;
        entry.last_used = now;
        entry.holders.insert(lease.to_owned(), holder.to_owned());
        self.creating.remove(id);
        self.leases.insert(
            lease.to_owned(),
            Lease {
                sandbox: id.to_owned(),
                renewed: now,
            },
        );
    }

    /// Releases `lease` only if it has lapsed at `now`: the reaper's release, decided again
    /// under the same lock as the release itself, so a renewal after the reaper listed the
    /// lease keeps it. `None`: unknown, renewed meanwhile, or leases never lapse.
    pub fn release_if_lapsed(&mut self, lease: &str, now: Duration) -> Option<Release> {
        let l = self.leases.get(lease)?;
        if self.lease_timeout.is_zero() || now.saturating_sub(l.renewed) < self.lease_timeout {
            return None;
        }
        Some(self.release(lease, now))
    }

    pub fn release(&mut self, lease: &str, now: Duration) -> Release {
        let Some(Lease { sandbox: id, .. }) = self.leases.remove(lease) else {
            return Release::UnknownLease;
        };
        let Some(entry) = self.entries.get_mut(&id) else {
            return Release::UnknownLease;
        };
        entry.holders.remove(lease);
        entry.last_used = now;
        if !entry.holders.is_empty() {
            return Release::StillHeld { sandbox_id: id };
        }
        if entry.destroy_pending {
            entry.state = State::Destroying;
            return Release::Destroy { sandbox_id: id };
        }
        Release::Idle { sandbox_id: id }
    }

    /// Where a released sandbox stands now (see `IdleCheck`).
    pub fn idle_check(&self, id: &str) -> IdleCheck {
        match self.entries.get(id) {
            None => IdleCheck::Gone,
            Some(e) if !e.holders.is_empty() => IdleCheck::Held,
            Some(e) if e.destroy_pending || e.state == State::Destroying => IdleCheck::Fenced,
            Some(e) => IdleCheck::Check {
                scope: e.scope.clone(),
                container_id: e.container_id.clone(),
            },
        }
    }

    /// The released sandbox passed its health check: keep it warm from `now`.
    pub fn warm(&mut self, id: &str, now: Duration) {
        if let Some(e) = self.entries.get_mut(id) {
            // A destroy under way (shutdown, say) is never undone by a late release.
            if e.holders.is_empty() && e.state != State::Destroying {
                e.state = State::Warm { since: now };
            }
        }
    }

    /// Fences an idle (warm) entry for a destroy the provider decided on (expiry, eviction, a
    /// failed health check); `false` when it is held or already being destroyed.
    pub fn begin_destroy(&mut self, id: &str) -> bool {
        match self.entries.get_mut(id) {
            Some(e) if e.holders.is_empty() && e.state != State::Destroying => {
                e.state = State::Destroying;
                e.reclaiming = false;
                true
            }
            _ => false,
        }
    }

    /// The sandbox is gone (destroyed, or found dead): it is no longer tracked. Its leases
    /// are dropped too (a dead sandbox replaced in the same acquire keeps them via
    /// `commit_acquire` instead).
    pub fn forget(&mut self, id: &str) {
        if let Some(e) = self.entries.remove(id) {
            for lease in e.holders.keys() {
                self.leases.remove(lease);
            }
        }
    }

    /// A destroy failed at `now`: the entry stays tracked but fenced (never warmed or handed
    /// out); the reaper retries it after `retry_backoff`, a destroy request or shutdown at once.
    pub fn destroy_failed(&mut self, id: &str, now: Duration) {
        if let Some(e) = self.entries.get_mut(id) {
            e.destroy_pending = true;
            e.reclaiming = false;
            e.failures = e.failures.saturating_add(1);
            e.retry_at = now + retry_backoff(e.failures);
            if e.holders.is_empty() {
                e.state = State::Warm { since: e.last_used };
            }
        }
    }

    /// A failed create's rollback left generation `container_id` behind: tracked fenced like a
    /// failed destroy (never handed out; a destroy, the reaper or shutdown retries it). Holders
    /// of a replaced generation keep their leases; their last release performs the destroy.
    pub fn keep_failed_rollback(
        &mut self,
        id: &str,
        scope: &str,
        container_id: &str,
        now: Duration,
    ) {
        self.creating.remove(id);
        let entry = self.entries.entry(id.to_owned()).or_insert_with(|| {
            Entry::new(scope, container_id, "", State::Warm { since: now }, now)
        });
        entry.container_id = container_id.to_owned();
        entry.url = String::new();
        entry.destroy_pending = true;
        if entry.holders.is_empty() {
            entry.state = State::Warm { since: now };
        }
    }

    /// What the reaper destroys at monotonic time `now`: warm entries idle for at least the
    /// idle timeout, and unheld ones whose teardown failed (retried every pass, with the idle
    /// timeout off too).
    pub fn expired(&self, now: Duration) -> Vec<String> {
        self.entries
            .keys()
            .filter(|id| self.is_expired(id, now))
            .cloned()
            .collect()
    }

    /// Whether the reaper destroys `id` at `now` (see `expired`): asked again under the
    /// sandbox's lock before it does, since a reclaim and release in between make it fresh.
    pub fn is_expired(&self, id: &str, now: Duration) -> bool {
        let Some(e) = self.entries.get(id) else {
            return false;
        };
        match e.state {
            State::Warm { .. } if e.destroy_pending && e.holders.is_empty() => now >= e.retry_at,
            State::Warm { since } => {
                !e.provisioned
                    && !self.idle_timeout.is_zero()
                    && now.saturating_sub(since) >= self.idle_timeout
            }
            _ => false,
        }
    }

    /// Records a sandbox made or found for the provisioner API (see `Entry::provisioned`):
    /// tracked, counted by the cap, held by no lease, never expired or evicted.
    pub fn commit_provisioned(
        &mut self,
        id: &str,
        scope: &str,
        container_id: &str,
        url: &str,
        now: Duration,
    ) {
        let entry = self
            .entries
            .entry(id.to_owned())
            .or_insert_with(|| Entry::new(scope, container_id, url, State::Active, now));
        entry.container_id = container_id.to_owned();
        entry.url = url.to_owned();
        entry.provisioned = true;
        // deer-flow's from now on (a warm `/v1/` one taken over too): in use, never warm.
        if entry.state != State::Destroying {
            entry.state = State::Active;
        }
        entry.reclaiming = false;
        self.creating.remove(id);
    }

    /// Leases of every entry, for shutdown.
    pub fn all_leases(&self) -> BTreeSet<String> {
        self.leases.keys().cloned().collect()
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
