//! What each request must do first, decided on the pool without I/O: an acquire (`/v1/`), a
//! provisioner create (`/api/`) and a destroy. One acquire decision serves both routes:
//! `plan_provision` is `plan_acquire`'s, read for a create that hands out no lease, and
//! `provision_checked` says what such a create does with the tracked sandbox it inspected. The
//! provider asks, does the engine work, then reports the outcome to the pool.

use super::pool::{Pool, Source, State};

/// What an acquire must do first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquirePlan {
    /// The sandbox is tracked for another (user, thread): refuse, touch nothing.
    Collision,
    /// A destroy is under way or deferred: refuse until it is done.
    Busy,
    /// Tracked and held (`Cached`) or warm (`Warm`): health-check container `container_id`,
    /// then hand it out, or drop it and create.
    Reuse {
        source: Source,
        container_id: String,
    },
    /// Not tracked: destroy `evict` (oldest warm first, for the replica cap; already fenced),
    /// then create. A slot under the cap is reserved for it until `commit_acquire` or
    /// `end_create`.
    Create { evict: Vec<String> },
    /// The replica cap is reached and nothing warm can be evicted: refuse (503), create nothing.
    Full,
    /// Tracked, unheld, and its teardown failed earlier: fenced now; retry that teardown, then
    /// create (or discover a replacement generation).
    RetryTeardown,
    /// Made through the provisioner API: deer-flow's, never leased through `/v1/` (a lease
    /// would keep it alive past deer-flow's `DELETE`); refuse, touch nothing.
    Provisioned { container_id: String },
}

/// What a provisioner API create must do first: `plan_acquire`'s decision, for a create that
/// hands out no lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProvisionPlan {
    /// Tracked for another (user, thread): refuse, touch nothing.
    Collision,
    /// A destroy is under way or deferred: refuse until it is done.
    Busy,
    /// Tracked and held by no lease: inspect the name and ask `provision_checked` whether
    /// container `container_id` is answered again or torn down and made afresh.
    Check { container_id: String },
    /// Leased through `/v1/` right now: not deer-flow's to take while a lease holds it; refuse.
    Leased,
    /// Not tracked: destroy `evict` (already fenced), then create; its slot is reserved.
    Create { evict: Vec<String> },
    /// The replica cap is reached and nothing warm can be evicted: refuse (503).
    Full,
    /// Tracked, unheld, and its teardown failed earlier: fenced now; retry that teardown, then
    /// create.
    RetryTeardown,
}

/// What a provisioner create does with the tracked sandbox it inspected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// The tracked generation still runs under the name: answer it.
    Reuse,
    /// Dead or replaced: tear the tracked generation down, then create afresh.
    Replace,
}

/// `Checked` for tracked generation `tracked`, given what the name holds now: `found` is
/// (container ID, running), or `None` when nothing is there.
pub fn provision_checked(tracked: &str, found: Option<(&str, bool)>) -> Checked {
    match found {
        Some((id, true)) if id == tracked => Checked::Reuse,
        _ => Checked::Replace,
    }
}

/// What a destroy request must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestroyPlan {
    /// Not tracked here: destroy on the engine (the caller checks ownership).
    Untracked,
    /// Holders remain: the last release destroys it.
    Deferred { holders: usize },
    /// Destroying now (the entry is fenced against acquires meanwhile).
    Now,
    /// Another destroy is already under way.
    AlreadyDestroying,
}

impl Pool {
    /// What an acquire of `id` for `scope` does first. Decided and recorded under the pool's
    /// lock: a warm entry is marked as being reclaimed, a create reserves its slot under the
    /// cap and fences its victims, so concurrent acquires never count past the cap or pick the
    /// same victim (`cap.rs`).
    pub fn plan_acquire(&mut self, id: &str, scope: &str) -> AcquirePlan {
        match self.entries.get_mut(id) {
            Some(e) if e.scope != scope => AcquirePlan::Collision,
            Some(e)
                if e.destroy_pending
                    && e.holders.is_empty()
                    && matches!(e.state, State::Warm { .. }) =>
            {
                e.state = State::Destroying;
                AcquirePlan::RetryTeardown
            }
            Some(e) if e.destroy_pending || e.state == State::Destroying => AcquirePlan::Busy,
            Some(e) if e.provisioned => AcquirePlan::Provisioned {
                container_id: e.container_id.clone(),
            },
            Some(e) => {
                let source = if e.state == State::Active {
                    Source::Cached
                } else {
                    e.reclaiming = true;
                    Source::Warm
                };
                AcquirePlan::Reuse {
                    source,
                    container_id: e.container_id.clone(),
                }
            }
            None if self.creating.contains(id) => AcquirePlan::Busy,
            None => self.plan_create(id),
        }
    }

    /// What a provisioner create of `id` for `scope` does first: `plan_acquire`'s rules (a
    /// failed teardown is retried first, a destroy under way refuses, a create reserves its
    /// slot and fences its victims), with the reuse of a tracked entry left to
    /// `provision_checked` once its container is inspected. One `/v1/` leases right now is
    /// refused: a `DELETE` of it would be deferred by the lease while deer-flow is told it is
    /// gone. An unheld (warm) one goes on to the check, where its mounts (none of deer-flow's)
    /// refuse it.
    pub fn plan_provision(&mut self, id: &str, scope: &str) -> ProvisionPlan {
        let held = self.entries.get(id).is_some_and(|e| !e.holders.is_empty());
        match self.plan_acquire(id, scope) {
            AcquirePlan::Collision => ProvisionPlan::Collision,
            AcquirePlan::Busy => ProvisionPlan::Busy,
            AcquirePlan::Reuse { .. } if held => ProvisionPlan::Leased,
            AcquirePlan::Reuse { container_id, .. } | AcquirePlan::Provisioned { container_id } => {
                ProvisionPlan::Check { container_id }
            }
            AcquirePlan::Create { evict } => ProvisionPlan::Create { evict },
            AcquirePlan::Full => ProvisionPlan::Full,
            AcquirePlan::RetryTeardown => ProvisionPlan::RetryTeardown,
        }
    }

    pub fn plan_destroy(&mut self, id: &str) -> DestroyPlan {
        match self.entries.get_mut(id) {
            None => DestroyPlan::Untracked,
            Some(e) if e.state == State::Destroying => DestroyPlan::AlreadyDestroying,
            Some(e) if !e.holders.is_empty() => {
                e.destroy_pending = true;
                DestroyPlan::Deferred {
                    holders: e.holders.len(),
                }
            }
            Some(e) => {
                e.state = State::Destroying;
                DestroyPlan::Now
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// `id` tracked for scope "s": held by lease `l-{id}` (`held`) or warm.
    fn tracked(p: &mut Pool, id: &str, held: bool) {
        let lease = format!("l-{id}");
        p.commit_acquire(id, "s", &format!("c-{id}"), "u", &lease, "h", S);
        if !held {
            p.release(&lease, S);
            p.warm(id, S);
        }
    }

    fn check(id: &str) -> ProvisionPlan {
        ProvisionPlan::Check {
            container_id: format!("c-{id}"),
        }
    }

    #[test]
    fn plan_provision_table() {
        let mut p = Pool::new(Duration::ZERO, 0);
        tracked(&mut p, "held", true);
        tracked(&mut p, "warm", false);
        // Made through the provisioner API: tracked, no lease.
        p.commit_provisioned("made", "s", "c-made", "u", S);
        tracked(&mut p, "pending", true);
        assert_eq!(
            p.plan_destroy("pending"),
            DestroyPlan::Deferred { holders: 1 }
        );
        tracked(&mut p, "gone", false);
        assert_eq!(p.plan_destroy("gone"), DestroyPlan::Now);
        tracked(&mut p, "failed", false);
        p.begin_destroy("failed");
        p.destroy_failed("failed", S);
        p.reserve_replacement("creating");
        let cases = [
            // Leased through /v1/: deer-flow may not take it while the lease holds it.
            ("held", "s", ProvisionPlan::Leased),
            ("warm", "s", check("warm")),
            ("made", "s", check("made")),
            ("held", "t", ProvisionPlan::Collision),
            ("made", "t", ProvisionPlan::Collision),
            ("pending", "s", ProvisionPlan::Busy),
            ("gone", "s", ProvisionPlan::Busy),
            ("creating", "s", ProvisionPlan::Busy),
            // The rule `/v1/` follows: a teardown that failed is retried before a create.
            ("failed", "s", ProvisionPlan::RetryTeardown),
            ("new", "s", ProvisionPlan::Create { evict: vec![] }),
        ];
        for (id, scope, want) in cases {
            assert_eq!(p.plan_provision(id, scope), want, "{id} {scope}");
        }
        assert_eq!(
            p.get("failed").map(|e| e.state.clone()),
            Some(State::Destroying),
            "fenced for the retry"
        );
        assert!(
            p.get("warm").is_some_and(|e| e.reclaiming),
            "no victim while checked"
        );
    }

    #[test]
    fn plan_provision_under_the_cap() {
        let mut p = Pool::new(Duration::ZERO, 2);
        tracked(&mut p, "old", false);
        assert_eq!(
            p.plan_provision("a", "s"),
            ProvisionPlan::Create { evict: vec![] }
        );
        assert_eq!(
            p.plan_provision("b", "s"),
            ProvisionPlan::Create {
                evict: vec!["old".into()]
            },
            "the oldest warm one makes room"
        );
        assert_eq!(p.plan_provision("c", "s"), ProvisionPlan::Full);
        // Every plan above is `plan_acquire`'s: the same pool answers an acquire alike.
        assert_eq!(p.plan_acquire("c", "s"), AcquirePlan::Full);
    }

    #[test]
    fn provision_checked_table() {
        let cases = [
            (Some(("c1", true)), Checked::Reuse),
            (Some(("c1", false)), Checked::Replace),
            (Some(("c2", true)), Checked::Replace),
            (Some(("", true)), Checked::Replace),
            (None, Checked::Replace),
        ];
        for (found, want) in cases {
            assert_eq!(provision_checked("c1", found), want, "{found:?}");
        }
    }

    /// A sandbox made through the provisioner API is deer-flow's: `/v1/` never leases it, so
    /// no lease can keep it past deer-flow's `DELETE`, warm it, or make it reapable or an
    /// eviction victim; the refusal changes nothing in the pool.
    #[test]
    fn a_provisioner_sandbox_is_never_leased_reaped_or_evicted_through_v1() {
        let mut p = Pool::new(10 * S, 1);
        p.commit_provisioned("made", "s", "c-made", "u", S);
        let before = p.get("made").cloned();
        assert_eq!(
            p.plan_acquire("made", "s"),
            AcquirePlan::Provisioned {
                container_id: "c-made".into()
            }
        );
        assert_eq!(p.get("made").cloned(), before, "untouched");
        assert_eq!(p.plan_acquire("made", "other"), AcquirePlan::Collision);
        assert!(p.expired(1000 * S).is_empty(), "never reaped");
        assert_eq!(
            p.plan_acquire("new", "s"),
            AcquirePlan::Full,
            "never evicted"
        );
        // A /v1/ sandbox taken over through the API while warm is deer-flow's from then on.
        let mut p = Pool::new(10 * S, 0);
        tracked(&mut p, "warm", false);
        assert_eq!(p.plan_provision("warm", "s"), check("warm"));
        p.commit_provisioned("warm", "s", "c-warm", "u", 2 * S);
        assert!(matches!(
            p.plan_acquire("warm", "s"),
            AcquirePlan::Provisioned { .. }
        ));
        assert!(p.expired(1000 * S).is_empty());
    }
}
