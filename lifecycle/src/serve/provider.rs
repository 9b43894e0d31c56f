//! The provider: `Pool` (pure) + `Lifecycle` (engine work, through the stack's proxy) +
//! `Ownership` (who owns each sandbox across processes). Each operation on a sandbox ID runs
//! under that ID's async mutex, so two acquires of one thread give one sandbox: parse, ask the
//! pool, do the engine work, report the outcome to the pool. Every decision logs one line.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::claims::{Claim, Renew};
use super::clock::Clock;
pub use super::error::ServeError;
use super::error::{self, failure_kind};
use super::metrics::Metrics;
use super::pool::{reclaim_probe, AcquirePlan, Pool, Source};
use super::store::Ownership;
use crate::decide::{self, Discovery};
use crate::ops::{Lifecycle, OpError};
use crate::{naming, ready};

#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// Warm entries idle this long are destroyed (zero: never).
    pub idle_timeout: Duration,
    /// Cap on tracked sandboxes; the oldest warm one is destroyed before a create (zero: none).
    pub max_replicas: usize,
    /// How unowned a sandbox must stay before reconciliation adopts it (shared store only).
    pub adopt_grace: Duration,
    /// A lease neither released nor renewed for this long is released by the reaper (zero:
    /// leases last until released).
    pub lease_timeout: Duration,
    /// Teardowns a shutdown runs at once (`--shutdown-parallel`).
    pub shutdown_parallel: usize,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Acquired {
    pub sandbox_id: String,
    pub url: String,
    /// The container ID (the generation ports and quarantine records are keyed by).
    pub generation: String,
    pub source: Source,
    pub lease: String,
}

#[derive(Debug)]
pub struct Provider {
    pub lc: Lifecycle,
    pub own: Ownership,
    pub metrics: Metrics,
    pub(crate) pool: Mutex<Pool>,
    clock: Arc<dyn Clock>,
    config: ProviderConfig,
    /// Per-ID async mutexes; `background::renew_ownership` reads which are in use.
    pub(super) serial: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    seq: AtomicU64,
    /// Sandboxes seen unowned by reconciliation, since (monotonic).
    unowned_since: Mutex<HashMap<String, Duration>>,
    /// Held for reading by each acquire; shutdown takes it for writing to let them finish.
    pub(crate) inflight: tokio::sync::RwLock<()>,
    /// deer-flow's provisioner API: mount root, sandbox host, key.
    pub api: super::provision::ApiConfig,
    /// Wakes the reconciliation pass before its tick (a sandbox found not running).
    pub(crate) wake: tokio::sync::Notify,
    /// Sandboxes seen not running by reconciliation, since (monotonic).
    pub(crate) dead_since: Mutex<HashMap<String, Duration>>,
    /// Sandbox IDs whose restricted objects were seen with no sandbox, since (monotonic).
    lone_since: Mutex<HashMap<String, Duration>>,
    /// This host's part in a multi-host deployment (`--advertise-url`).
    pub hosts: Option<super::hosts::MultiHost>,
    /// The engine's last `/_ping` for deer-flow's `/health`.
    pub(crate) engine_health: super::engine_health::EngineHealth,
}

/// Ends a create's reservation under the cap and an acquire's reclaim mark, however the step
/// ends (a committed entry has already taken the reservation over).
pub(super) struct Planned<'a> {
    p: &'a Provider,
    id: String,
}

impl<'a> Planned<'a> {
    pub(super) fn new(p: &'a Provider, id: &str) -> Self {
        Self {
            p,
            id: id.to_owned(),
        }
    }
}

impl Drop for Planned<'_> {
    fn drop(&mut self) {
        let mut pool = self.p.pool();
        pool.end_create(&self.id);
        pool.end_reclaim(&self.id);
    }
}

impl Provider {
    pub fn new(
        lc: Lifecycle,
        own: Ownership,
        clock: Arc<dyn Clock>,
        config: ProviderConfig,
    ) -> Self {
        Self {
            lc,
            own,
            metrics: Metrics::default(),
            pool: Mutex::new(
                Pool::new(config.idle_timeout, config.max_replicas)
                    .with_lease_timeout(config.lease_timeout),
            ),
            clock,
            config,
            serial: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
            unowned_since: Mutex::new(HashMap::new()),
            inflight: tokio::sync::RwLock::new(()),
            api: super::provision::ApiConfig::default(),
            wake: tokio::sync::Notify::new(),
            dead_since: Mutex::new(HashMap::new()),
            lone_since: Mutex::new(HashMap::new()),
            hosts: None,
            engine_health: Default::default(),
        }
    }

    /// The provider as one host of several behind one provisioner URL (`--advertise-url`).
    pub fn with_hosts(mut self, hosts: super::hosts::MultiHost) -> Self {
        self.hosts = Some(hosts);
        self
    }

    /// The provider with the provisioner API configured.
    pub fn with_api(mut self, api: super::provision::ApiConfig) -> Self {
        self.api = api;
        self
    }

    pub(crate) fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        // A panic while holding the pool is a bug; the state it left is still the best we have.
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn now(&self) -> Duration {
        self.clock.monotonic()
    }

    pub(crate) fn serial(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.serial.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(id.to_owned()).or_default().clone()
    }

    /// A lease token: 256 bits from the OS's random source, as hex. A lease is a bearer token
    /// that only its holder ever sees (the listing shows holder names, never tokens), so
    /// another client can neither read nor guess one. Should the random source fail, a token
    /// hashed from a process-wide counter and the clock stands in: still unlisted and unique.
    fn new_lease(&self) -> String {
        let mut bytes = [0u8; 32];
        if getrandom::getrandom(&mut bytes).is_err() {
            let n = self.seq.fetch_add(1, Ordering::Relaxed);
            let seed = format!(
                "{}:{}:{n}:{:?}",
                self.own.me,
                std::process::id(),
                Instant::now()
            );
            bytes.copy_from_slice(&Sha256::digest(seed.as_bytes()));
        }
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Is container `container_id` still the sandbox `id` of `scope`, running, not unhealthy
    /// and not quarantined? `Err` when that cannot be read (the caller fails closed).
    pub(super) async fn healthy(
        &self,
        id: &str,
        scope: &str,
        container_id: &str,
    ) -> Result<bool, ServeError> {
        let Some(c) = self.lc.inspect_sandbox(id).await? else {
            return Ok(false);
        };
        let ok = c.id == container_id
            // Its way in was there when it was handed out; the reclaim's HTTP probe asks again.
            && decide::discovery(c.running, c.health.as_deref(), true) == Discovery::Reuse
            && error::labels_name(&c.labels, id, scope)
            && !self.lc.ledger.fences(id, &c.id).map_err(OpError::from)?;
        Ok(ok)
    }

    /// Whether a sandbox about to be handed out as `source` answers HTTP at `url`, by the
    /// create's readiness rule (`pool::reclaim_probe` says when and how long to ask).
    async fn answers(&self, source: &Source, url: &str) -> bool {
        match reclaim_probe(source, self.lc.settings.ready_timeout) {
            None => true,
            Some(within) => ready::answers(url, within).await,
        }
    }

    /// The container under the name is `container_id` and its labels name `id` and `scope`.
    async fn identity_ok(&self, id: &str, scope: &str, container_id: &str) -> bool {
        matches!(self.lc.inspect_sandbox(id).await, Ok(Some(c))
            if c.id == container_id && error::labels_name(&c.labels, id, scope))
    }

    pub async fn acquire(
        &self,
        user: &str,
        thread: &str,
        holder: &str,
    ) -> Result<Acquired, ServeError> {
        // Shutdown waits for every acquire under way (it takes this lock for writing).
        let _inflight = self.inflight.read().await;
        let started = Instant::now();
        let result = self.acquire_inner(user, thread, holder).await;
        match &result {
            Ok(a) => self
                .metrics
                .observe_acquire(a.source.as_str(), started.elapsed()),
            Err(e) => self.metrics.failure(failure_kind(e)),
        }
        result
    }

    async fn acquire_inner(
        &self,
        user: &str,
        thread: &str,
        holder: &str,
    ) -> Result<Acquired, ServeError> {
        let id = naming::sandbox_id(user, thread)?;
        let scope = naming::scope_digest(user, thread);
        let serial = self.serial(&id);
        let _serial = serial.lock().await;
        let plan = self.pool().plan_acquire(&id, &scope);
        tracing::info!(sandbox_id = %id, holder, plan = ?plan, "acquire");
        // However this acquire ends, its slot under the cap and its reclaim mark go with it.
        let _planned = Planned::new(self, &id);
        let evict = match plan {
            AcquirePlan::Collision => return Err(ServeError::Collision { id }),
            AcquirePlan::Busy => return Err(ServeError::Busy { id }),
            AcquirePlan::Provisioned { .. } => {
                return Err(ServeError::OtherApi {
                    id,
                    why: "was made through the provisioner API: it is deer-flow's and is not leased through /v1/",
                })
            }
            AcquirePlan::Full => {
                self.metrics.cap_refusal();
                return Err(ServeError::Full {
                    max: self.config.max_replicas,
                });
            }
            AcquirePlan::Reuse {
                source,
                container_id,
            } => {
                let url = self
                    .pool()
                    .get(&id)
                    .map(|e| e.url.clone())
                    .unwrap_or_default();
                let healthy = match self.healthy(&id, &scope, &container_id).await {
                    // Held right now by another lease and in use: an engine that cannot answer
                    // is no evidence against it, so it is handed out and kept (as deer-flow's
                    // provider does). The ledger's fence check is local and never skipped: a
                    // storage error still fails closed.
                    Err(ServeError::Op(OpError::Engine { .. })) if source == Source::Cached => {
                        tracing::warn!(sandbox_id = %id, container_id, "health check unanswered by the engine; handing out the sandbox already held");
                        true
                    }
                    other => other?,
                };
                if healthy {
                    if self.answers(&source, &url).await {
                        self.keep_owned(&id).await?;
                        return Ok(self.commit(&id, &scope, &container_id, &url, holder, source));
                    }
                    tracing::info!(sandbox_id = %id, container_id, url, "warm sandbox runs but does not answer HTTP; dropping it and creating a fresh one");
                } else {
                    tracing::info!(sandbox_id = %id, container_id, source = source.as_str(), "dropping a dead, replaced or quarantined sandbox; creating a fresh one");
                }
                if source == Source::Warm && self.pool().begin_destroy(&id) {
                    // The replacement takes this one's slot under the cap; fenced, a failed
                    // destroy stays tracked for a retry, never handed out.
                    self.pool().reserve_replacement(&id);
                    self.destroy_fenced(&id).await?;
                } else {
                    // Held: the holders keep the entry; the replacement takes its place.
                    self.destroy_engine(&id, Some(&container_id)).await?;
                }
                Vec::new()
            }
            AcquirePlan::Create { evict } => evict,
            AcquirePlan::RetryTeardown => {
                // A teardown of this thread's sandbox failed earlier: retry it now, and only
                // once the tracked generation is confirmed gone (destroyed, or replaced under
                // the name) does a fresh or discovered one take its place; a retry that fails
                // again keeps the record and refuses (as deer-flow admits a replacement only
                // after the old one's teardown).
                self.pool().reserve_replacement(&id);
                let torn = self.destroy_fenced(&id).await?;
                tracing::info!(sandbox_id = %id, result = torn.as_str(), "failed teardown retried before the acquire");
                Vec::new()
            }
        };
        self.evict(evict).await?;
        match self.own.claim(&id).await? {
            Claim::Ours => {}
            Claim::Owned(owner) | Claim::Deleting(owner) => {
                return Err(ServeError::Owned { id, owner })
            }
        }
        // A failed create's rollback turns the claim into `del:` first (`BeforeUndo`).
        let created = match self.lc.create_guarded(user, thread, &self.own).await {
            Ok(c) => c,
            Err(e) => return Err(self.create_failed(&id, &scope, e).await),
        };
        if created.scope.as_deref() != Some(scope.as_str()) {
            tracing::warn!(sandbox_id = %id, found = ?created.scope, "identity mismatch: the container under this ID is another (user, thread)'s; refused");
            let _ = self.own.release(&id).await;
            return Err(ServeError::Collision { id });
        }
        // A discovered container must carry this (user, thread)'s labels; else it is refused
        // and left alone.
        if created.discovered && !self.identity_ok(&id, &scope, &created.container_id).await {
            tracing::warn!(sandbox_id = %id, container_id = %created.container_id, "discovered sandbox's labels name another (user, thread); refused");
            let _ = self.own.release(&id).await;
            return Err(ServeError::Collision { id });
        }
        let source = if created.discovered {
            Source::Discovered
        } else {
            Source::Created
        };
        Ok(self.commit(
            &id,
            &scope,
            &created.container_id,
            &created.url,
            holder,
            source,
        ))
    }

    /// Destroys the victims a create's plan chose (and fenced) under the cap. A victim that
    /// cannot be torn down keeps its slot, so the create does not fit: refused, the cap holds.
    pub(crate) async fn evict(&self, evict: Vec<String>) -> Result<(), ServeError> {
        for victim in evict {
            // The plan fenced it (`Destroying`) under the pool's lock, so no acquire reclaims it
            // and no other acquire picks it; its own lock is taken as for every change to an
            // entry (a reap or release of it may be finishing). A victim that cannot be torn
            // down keeps its slot, so this create does not fit: refused, the cap holds.
            let victim_serial = self.serial(&victim);
            let _victim_serial = victim_serial.lock().await;
            tracing::info!(sandbox_id = %victim, "replica cap: destroying the oldest warm sandbox before a create");
            if let Err(e) = self.destroy_fenced(&victim).await {
                tracing::warn!(sandbox_id = %victim, error = %e, "replica cap: the evicted sandbox was not torn down; create refused");
                return Err(ServeError::Full {
                    max: self.config.max_replicas,
                });
            }
        }
        Ok(())
    }

    /// A create failed. Rolled back (or nothing made): the claim goes. A failed rollback left
    /// something of ours: the `del:` claim it ran under stays and the sandbox is tracked fenced
    /// (`destroy_pending`), so the heartbeat renews the claim, no peer adopts or reuses it, no
    /// acquire gets it, and a destroy, the reaper or shutdown retries the teardown.
    pub(crate) async fn create_failed(&self, id: &str, scope: &str, e: OpError) -> ServeError {
        match &e {
            OpError::RollbackFailed { generation, .. } => {
                self.metrics.destroy("failed");
                self.pool()
                    .keep_failed_rollback(id, scope, generation, self.now());
                tracing::warn!(
                    sandbox_id = id,
                    generation,
                    "rollback failed: kept quarantined and fenced under our claim for a retry"
                );
            }
            _ => {
                let _ = self.own.release(id).await;
            }
        }
        e.into()
    }

    fn commit(
        &self,
        id: &str,
        scope: &str,
        cid: &str,
        url: &str,
        holder: &str,
        source: Source,
    ) -> Acquired {
        let lease = self.new_lease();
        self.pool()
            .commit_acquire(id, scope, cid, url, &lease, holder, self.now());
        tracing::info!(
            sandbox_id = id,
            lease,
            holder,
            source = source.as_str(),
            "acquired"
        );
        Acquired {
            sandbox_id: id.to_owned(),
            url: url.to_owned(),
            generation: cid.to_owned(),
            source,
            lease,
        }
    }

    /// Renews our claim on a sandbox we hand out again; lost means another process owns it now.
    async fn keep_owned(&self, id: &str) -> Result<(), ServeError> {
        match self.own.renew(id).await {
            Ok(Renew::Renewed | Renew::Lapsed) => Ok(()),
            // A store outage: what we track we still own as far as anyone can tell, and the
            // daemon keeps serving it (no other provider can adopt it without the store either).
            Err(e) => {
                tracing::warn!(sandbox_id = id, error = %e, "ownership store unavailable; serving a sandbox we already own");
                Ok(())
            }
            Ok(Renew::Lost) => {
                let owner = self.own.value(id).await.ok().flatten().unwrap_or_default();
                self.pool().forget(id);
                Err(ServeError::Owned {
                    id: id.to_owned(),
                    owner,
                })
            }
        }
    }

    /// `renew`: restarts the lease's `--lease-timeout` clock; the sandbox it holds.
    pub fn renew_lease(&self, lease: &str) -> Result<String, ServeError> {
        let now = self.now();
        let renewed = self.pool().renew_lease(lease, now);
        tracing::debug!(lease, sandbox_id = ?renewed, "renew lease");
        renewed.ok_or_else(|| ServeError::UnknownLease(lease.to_owned()))
    }

    /// Hands sandbox `id`, found not running, to the reconciler: its pass runs now rather than
    /// at its next tick.
    pub(crate) fn suspect(&self, id: &str) {
        tracing::debug!(sandbox_id = id, "waking the reconciler");
        self.wake.notify_one();
    }

    pub(crate) fn config(&self) -> &ProviderConfig {
        &self.config
    }

    pub(crate) fn lone_since(&self) -> std::sync::MutexGuard<'_, HashMap<String, Duration>> {
        self.lone_since.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn dead_since(&self) -> std::sync::MutexGuard<'_, HashMap<String, Duration>> {
        self.dead_since.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn unowned_since(&self) -> std::sync::MutexGuard<'_, HashMap<String, Duration>> {
        self.unowned_since.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn adopt_entry(&self, id: &str, scope: &str, cid: &str, url: &str) {
        let mut pool = self.pool();
        if pool.get(id).is_none() {
            let lease = format!("adopt-{id}");
            pool.commit_acquire(id, scope, cid, url, &lease, "adopt", self.now());
            pool.release(&lease, self.now());
            pool.warm(id, self.now());
        }
    }
}
