//! The replica cap (`--max-replicas`), pure: a create counts from the moment it is planned
//! (a reserved slot) until its entry is committed or the create ends, entries on their way out
//! (`Destroying`) no longer count, and victims are chosen and fenced in the same step as the
//! reservation, under the pool's one lock. So concurrent acquires never count past the cap
//! together and never skip each other's victims; with nothing warm to evict the cap answers
//! `Full`, never "create anyway".

use std::time::Duration;

use super::pool::{AcquirePlan, Pool, State};

impl Pool {
    /// Sandboxes that count against the cap: tracked ones not being destroyed, and creates
    /// under way.
    pub fn counted(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.state != State::Destroying)
            .count()
            + self.creating.len()
    }

    /// Plans the create of untracked `id`: reserves its slot and fences the oldest warm
    /// entries it must evict first, or answers `Full`.
    pub(super) fn plan_create(&mut self, id: &str) -> AcquirePlan {
        let counted = self.counted();
        if self.max_replicas == 0 || counted < self.max_replicas {
            self.creating.insert(id.to_owned());
            return AcquirePlan::Create { evict: Vec::new() };
        }
        let excess = counted + 1 - self.max_replicas;
        let mut warm: Vec<(Duration, String)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.holders.is_empty() && !e.reclaiming && !e.provisioned)
            .filter_map(|(id, e)| match e.state {
                State::Warm { since } => Some((since, id.clone())),
                _ => None,
            })
            .collect();
        if warm.len() < excess {
            return AcquirePlan::Full;
        }
        warm.sort();
        let evict: Vec<String> = warm.into_iter().take(excess).map(|(_, id)| id).collect();
        for victim in &evict {
            if let Some(e) = self.entries.get_mut(victim) {
                e.state = State::Destroying;
            }
        }
        self.creating.insert(id.to_owned());
        AcquirePlan::Create { evict }
    }

    /// The create of `id` ended without a committed entry (failed, refused, or cut short):
    /// its slot is free again. Idempotent.
    pub fn end_create(&mut self, id: &str) {
        self.creating.remove(id);
    }

    /// Reserves a slot for `id` without the cap check: a replacement for a sandbox of the
    /// same ID that is being destroyed takes that one's slot.
    pub fn reserve_replacement(&mut self, id: &str) {
        self.creating.insert(id.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::pool::{AcquirePlan, Pool};

    #[test]
    fn a_replacement_holds_a_slot_until_its_create_ends() {
        let mut p = Pool::new(Duration::ZERO, 1);
        p.reserve_replacement("r");
        assert_eq!(p.counted(), 1, "the replacement is counted");
        assert_eq!(p.plan_acquire("other", "s"), AcquirePlan::Full);
        p.end_create("r");
        assert_eq!(p.counted(), 0);
        assert_eq!(
            p.plan_acquire("other", "s"),
            AcquirePlan::Create { evict: vec![] }
        );
    }
}
