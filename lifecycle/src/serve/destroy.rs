//! The provider's teardowns: a destroy request (tracked, deferred, or untracked and checked),
//! the fenced destroy of a tracked entry (by the generation it tracks, never whatever the name
//! holds now), the engine step under a `del:` claim, and the reaper's pass. Every one of them
//! runs to its end in a task the client cannot cancel (`http` spawns them); should one still
//! stop half way (a panic, a runtime shutting down), `Unfinished` puts the entry where the
//! reaper retries it instead of leaving it `Destroying` for ever.

use super::claims::Claim;
use super::error::ServeError;
use super::pool::DestroyPlan;
use super::provider::Provider;
use crate::naming;
use crate::ops::{GenerationTeardown, OpError};

/// How a teardown of one sandbox ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Torn {
    /// The tracked generation (or what the name held, for an untracked destroy) is gone.
    Destroyed,
    /// The name holds another generation, left running; the tracked one is gone.
    Replaced,
    /// No container was there; what was left of the sandbox (a sidecar, networks, a port,
    /// records) is removed.
    Cleaned,
    /// Nothing of the sandbox was there.
    Absent,
    /// Holders remain: the last release destroys it.
    Deferred,
}

impl Torn {
    /// The `/v1/` answer's word (and the metric's): a sandbox found gone is "destroyed".
    pub fn as_str(self) -> &'static str {
        match self {
            Torn::Destroyed | Torn::Cleaned | Torn::Absent => "destroyed",
            Torn::Replaced => "replaced",
            Torn::Deferred => "deferred",
        }
    }

    /// What the teardown did, as the provisioner API's `DELETE` answers it.
    pub fn did(self) -> &'static str {
        match self {
            Torn::Destroyed => "destroyed",
            Torn::Replaced => "replaced",
            Torn::Cleaned => "cleaned",
            Torn::Absent => "absent",
            Torn::Deferred => "deferred",
        }
    }
}

/// Armed while a fenced destroy is under way: dropped armed, it records the destroy as failed
/// (fenced, `destroy_pending`, retried by the reaper with backoff).
pub(super) struct Unfinished<'a> {
    p: &'a Provider,
    id: &'a str,
    armed: bool,
}

impl<'a> Unfinished<'a> {
    pub(super) fn new(p: &'a Provider, id: &'a str) -> Self {
        Self { p, id, armed: true }
    }

    pub(super) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if self.armed {
            tracing::warn!(
                sandbox_id = self.id,
                "a destroy stopped before its end; kept fenced for the reaper's retry"
            );
            let now = self.p.now();
            self.p.pool().destroy_failed(self.id, now);
        }
    }
}

impl Provider {
    /// `destroy`: "destroyed", "replaced" or "deferred" (holders remain; the last release
    /// destroys it). An untracked ID is checked first: 404 when the engine has nothing of it,
    /// 409 when the container there carries no `lifecycle.scope` label (not a sandbox this
    /// provider's kind made: deer-flow's own, say) unless `force`.
    pub async fn destroy(&self, id: &str, force: bool) -> Result<&'static str, ServeError> {
        let id = naming::parse_sandbox_id(id)?;
        self.destroy_checked(id, force).await.map(Torn::as_str)
    }

    /// `destroy` of an ID already checked (a derived one, or the provisioner API's).
    pub(crate) async fn destroy_checked(
        &self,
        id: String,
        force: bool,
    ) -> Result<Torn, ServeError> {
        let serial = self.serial(&id);
        let _serial = serial.lock().await;
        let plan = self.pool().plan_destroy(&id);
        tracing::info!(sandbox_id = %id, plan = ?plan, force, "destroy");
        match plan {
            DestroyPlan::Deferred { .. } => Ok(Torn::Deferred),
            DestroyPlan::AlreadyDestroying => Err(ServeError::Busy { id }),
            DestroyPlan::Now => self.destroy_fenced(&id).await,
            DestroyPlan::Untracked => {
                let present = self.lc.inspect_sandbox(&id).await?;
                let generation = match present {
                    // Nothing under the name: what may be left of it (a sidecar, networks, a
                    // port, records) is removed; only when nothing at all was there is it 404.
                    None => None,
                    Some(c) if !c.labels.contains_key(naming::LABEL_SCOPE) && !force => {
                        tracing::warn!(sandbox_id = %id, container_id = %c.id, "destroy refused: the container carries no lifecycle.scope label (not a lifecycle sandbox); ?force=true destroys it anyway");
                        return Err(ServeError::NotLifecycle { id });
                    }
                    Some(c) => Some(c.id),
                };
                match self.destroy_engine(&id, generation.as_deref()).await? {
                    Torn::Absent => Err(OpError::NoSuchSandbox(id).into()),
                    torn => Ok(torn),
                }
            }
        }
    }

    /// Destroys an idle tracked entry (expiry, eviction, failed health); failures are kept.
    pub(crate) async fn destroy_idle(&self, id: &str) {
        if self.pool().begin_destroy(id) {
            let _ = self.destroy_fenced(id).await;
        }
    }

    /// The entry is fenced (`Destroying`): destroy the generation it tracks, then forget it,
    /// or keep it fenced for the reaper's retry when that fails (or stops half way).
    pub(crate) async fn destroy_fenced(&self, id: &str) -> Result<Torn, ServeError> {
        let unfinished = Unfinished::new(self, id);
        let generation = self.pool().get(id).map(|e| e.container_id.clone());
        let result = self
            .destroy_engine(id, generation.as_deref().filter(|g| !g.is_empty()))
            .await;
        unfinished.disarm();
        match result {
            Ok(torn) => {
                self.pool().forget(id);
                Ok(torn)
            }
            Err(e) => {
                let now = self.now();
                self.pool().destroy_failed(id, now);
                Err(e)
            }
        }
    }

    /// Engine teardown under a `del:` claim: refused (fail closed) when another process owns
    /// the sandbox or the store cannot answer. With a `generation`, only that container is
    /// torn down (`Lifecycle::destroy_generation`); without, whatever the name holds and the
    /// records left of earlier ones.
    pub(crate) async fn destroy_engine(
        &self,
        id: &str,
        generation: Option<&str>,
    ) -> Result<Torn, ServeError> {
        match self.own.begin_delete(id).await {
            Ok(Claim::Ours) => {}
            Ok(Claim::Owned(owner) | Claim::Deleting(owner)) => {
                self.metrics.destroy("refused");
                return Err(ServeError::Owned {
                    id: id.to_owned(),
                    owner,
                });
            }
            Err(e) => {
                self.metrics.destroy("failed");
                return Err(e.into());
            }
        }
        let result = match generation {
            Some(g) => self.lc.destroy_generation(id, g).await,
            None => self
                .lc
                .destroy_any(id)
                .await
                .map(GenerationTeardown::Destroyed),
        };
        let torn = match result {
            Ok(GenerationTeardown::Destroyed(d)) if d.container_id.is_some() => {
                tracing::info!(sandbox_id = id, "destroyed");
                Torn::Destroyed
            }
            Ok(GenerationTeardown::Destroyed(d)) => {
                tracing::info!(sandbox_id = id, leftovers = ?d.leftovers, records = d.absent_teardown, "no container was there; what was left of it is removed");
                Torn::Cleaned
            }
            Err(OpError::NoSuchSandbox(_)) => {
                tracing::info!(sandbox_id = id, "nothing of the sandbox was there");
                Torn::Absent
            }
            Ok(GenerationTeardown::Replaced { found, .. }) => {
                tracing::warn!(sandbox_id = id, tracked = ?generation, found = %found, "destroy: the name holds another generation now; left it running, retired the tracked one's record");
                Torn::Replaced
            }
            Err(e) => {
                // The `del:` claim stays (renewed while tracked) so no one adopts what is half
                // torn down; the quarantine record fences it on the engine side.
                self.metrics.destroy("failed");
                tracing::warn!(sandbox_id = id, error = %e, "destroy failed; kept fenced for a retry");
                return Err(e.into());
            }
        };
        if torn != Torn::Absent {
            self.metrics.destroy(torn.as_str());
        }
        let _ = self.own.release(id).await;
        Ok(torn)
    }

    /// Destroys warm entries idle past the timeout, and retries failed teardowns whose backoff
    /// has passed (monotonic clock).
    pub async fn reap(&self) -> Vec<String> {
        super::background::release_lapsed(self).await;
        let expired = self.pool().expired(self.now());
        let mut reaped = Vec::new();
        for id in expired {
            let serial = self.serial(&id);
            let _serial = serial.lock().await;
            // Reclaimed and released again while earlier ones were destroyed: fresh now.
            if !self.pool().is_expired(&id, self.now()) {
                continue;
            }
            tracing::info!(sandbox_id = %id, "idle timeout or teardown retry: destroying a warm sandbox");
            self.destroy_idle(&id).await;
            reaped.push(id);
        }
        reaped
    }
}
