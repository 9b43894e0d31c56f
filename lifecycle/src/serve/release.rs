//! Releasing a lease (docs/architecture.md, "The provider (`lifecycle serve`)"): what the pool says a release leaves to do (nothing, a
//! health check then warm, or a deferred destroy), done under the sandbox's lock in a task the
//! client cannot cancel; a guard warms an entry whose release stopped half way.

use super::destroy::{Torn, Unfinished};
use super::error::ServeError;
use super::pool::{IdleCheck, Release};
use super::provider::Provider;

/// Armed while a release that left its sandbox idle decides its fate: should it stop half way
/// (a panic, a runtime shutting down), the entry is warmed rather than left active with no
/// holder (never reaped, evicted or warmed); the next acquire health-checks it as any warm one.
struct IdleGuard<'a> {
    p: &'a Provider,
    id: &'a str,
    armed: bool,
}

impl Drop for IdleGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            tracing::warn!(
                sandbox_id = self.id,
                "a release stopped before its end; its sandbox is kept warm"
            );
            let now = self.p.now();
            self.p.pool().warm(self.id, now);
        }
    }
}

impl Provider {
    /// `release`: "held" (others remain), "warm" or "destroyed".
    pub async fn release(&self, lease: &str) -> Result<&'static str, ServeError> {
        let outcome = self.pool().release(lease, self.now());
        self.released(lease, outcome).await
    }

    /// The reaper's release of a lease that has lapsed, decided again under the pool's lock
    /// (`None`: renewed or released meanwhile).
    pub(crate) async fn release_if_lapsed(
        &self,
        lease: &str,
    ) -> Option<Result<&'static str, ServeError>> {
        let outcome = self.pool().release_if_lapsed(lease, self.now())?;
        Some(self.released(lease, outcome).await)
    }

    /// What a release leaves to do: nothing, a health check then warm, or a deferred destroy.
    async fn released(&self, lease: &str, outcome: Release) -> Result<&'static str, ServeError> {
        tracing::info!(lease, outcome = ?outcome, "release");
        match outcome {
            Release::UnknownLease => Err(ServeError::UnknownLease(lease.to_owned())),
            Release::StillHeld { .. } => Ok("held"),
            Release::Destroy { sandbox_id } => {
                // The pool marked it `Destroying`; cut off before the destroy runs, it must
                // still reach the reaper's retry.
                let unfinished = Unfinished::new(self, &sandbox_id);
                let serial = self.serial(&sandbox_id);
                let _serial = serial.lock().await;
                let result = self.destroy_fenced(&sandbox_id).await;
                unfinished.disarm();
                result.map(Torn::as_str)
            }
            Release::Idle { sandbox_id } => {
                let mut idle = IdleGuard {
                    p: self,
                    id: &sandbox_id,
                    armed: true,
                };
                let result = self.settle_idle(&sandbox_id).await;
                idle.armed = false;
                result
            }
        }
    }

    /// The last holder left `sandbox_id`: under its lock, health-check it and keep it warm, or
    /// destroy it (dead, replaced, quarantined, or a destroy asked meanwhile).
    async fn settle_idle(&self, sandbox_id: &str) -> Result<&'static str, ServeError> {
        {
            {
                let serial = self.serial(sandbox_id);
                let _serial = serial.lock().await;
                let check = self.pool().idle_check(sandbox_id);
                let (scope, container_id) = match check {
                    IdleCheck::Gone => return Ok("destroyed"),
                    IdleCheck::Held => return Ok("held"),
                    IdleCheck::Fenced => {
                        self.pool().begin_destroy(sandbox_id);
                        return self.destroy_fenced(sandbox_id).await.map(Torn::as_str);
                    }
                    IdleCheck::Check {
                        scope,
                        container_id,
                    } => (scope, container_id),
                };
                // An unreadable engine is not proof of harm: keep it warm; the next acquire
                // checks again before handing it out.
                let healthy = self
                    .healthy(sandbox_id, &scope, &container_id)
                    .await
                    .unwrap_or(true);
                if healthy {
                    self.pool().warm(sandbox_id, self.now());
                    tracing::info!(sandbox_id, "kept warm");
                    Ok("warm")
                } else {
                    tracing::info!(sandbox_id, "released sandbox is dead, replaced or quarantined: destroying instead of warming");
                    // A refused or failed teardown is reported as such, never as "destroyed":
                    // the entry stays fenced for the reaper's retry.
                    self.pool().begin_destroy(sandbox_id);
                    self.destroy_fenced(sandbox_id).await.map(Torn::as_str)
                }
            }
        }
    }
}
