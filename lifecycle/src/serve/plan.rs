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
}

/// What a provisioner API create must do first: `plan_acquire`'s decision, for a create that
/// hands out no lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProvisionPlan {
    /// Tracked for another (user, thread): refuse, touch nothing.
    Collision,
    /// A destroy is under way or deferred: refuse until it is done.
    Busy,
    /// Tracked: inspect the name and ask `provision_checked` whether container `container_id`
    /// is handed out again, refused (`held`: leases hold it), or torn down and made afresh.
    Check { container_id: String, held: bool },
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
    /// Dead or replaced, but leases still hold it: refuse until they are released.
    Busy,
    /// Dead or replaced and unheld: tear the tracked generation down, then create afresh.
    Replace,
}

/// `Checked` for tracked generation `tracked` (`held` by leases), given what the name holds now:
/// `found` is (container ID, running), or `None` when nothing is there.
pub fn provision_checked(tracked: &str, held: bool, found: Option<(&str, bool)>) -> Checked {
    match found {
        Some((id, true)) if id == tracked => Checked::Reuse,
        _ if held => Checked::Busy,
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
    /// `provision_checked` once its container is inspected.
    pub fn plan_provision(&mut self, id: &str, scope: &str) -> ProvisionPlan {
        let held = self.entries.get(id).is_some_and(|e| !e.holders.is_empty());
        match self.plan_acquire(id, scope) {
            AcquirePlan::Collision => ProvisionPlan::Collision,
            AcquirePlan::Busy => ProvisionPlan::Busy,
            AcquirePlan::Reuse { container_id, .. } => ProvisionPlan::Check { container_id, held },
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

    fn check(id: &str, held: bool) -> ProvisionPlan {
        ProvisionPlan::Check {
            container_id: format!("c-{id}"),
            held,
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
            ("held", "s", check("held", true)),
            ("warm", "s", check("warm", false)),
            ("made", "s", check("made", false)),
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
            (false, Some(("c1", true)), Checked::Reuse),
            (true, Some(("c1", true)), Checked::Reuse),
            (false, Some(("c1", false)), Checked::Replace),
            (true, Some(("c1", false)), Checked::Busy),
            (false, Some(("c2", true)), Checked::Replace),
            (true, Some(("c2", true)), Checked::Busy),
            (false, None, Checked::Replace),
            (true, None, Checked::Busy),
        ];
        for (held, found, want) in cases {
            assert_eq!(
                provision_checked("c1", held, found),
                want,
                "{held} {found:?}"
            );
        }
    }
}
