//! Tearing down (docs/architecture.md, "lifecycle"): destroy of a present container (stop and remove by the ID that was
//! inspected, absence confirmed, the restricted cleanup when its label is not `open`), the
//! absent teardown of a quarantined sandbox, and `retire`. A failure is returned, leaves a
//! quarantine record for the generation it was about and keeps that generation's port; success
//! retires exactly that generation's record and port.

use crate::create::Unguarded;
use crate::decide::{self, AbsentPlan, Listing};
use crate::engine::{Container, Done, EngineError};
use crate::intent::Step as Intent;
use crate::ledger::UNKNOWN_GENERATION;
use crate::naming::{self, k, Names};
use crate::ops::{
    deferred, step, Destroyed, GenerationTeardown, Lifecycle, OpError, Retired, Teardown,
};
use crate::teardown_plan::{self, Step};

impl Lifecycle {
    /// `destroy ID`: the sandbox's container (if present) is destroyed by its ID; records of
    /// generations the name no longer holds, or of an absent sandbox, finish their absent
    /// teardown. Only a sandbox with neither a container nor a record is "nothing to destroy".
    pub async fn destroy(&self, id: &str) -> Result<Destroyed, OpError> {
        let id = naming::parse_sandbox_id(id)?;
        self.destroy_any(&id).await
    }

    /// `destroy` of any sandbox ID of the stack (`naming::parse_stack_sandbox_id`): the
    /// provider's, whose provisioner API names sandboxes deer-flow's way.
    pub async fn destroy_any(&self, id: &str) -> Result<Destroyed, OpError> {
        let id = naming::parse_stack_sandbox_id(id)?;
        let _lock = self.locks.acquire(&id).await?;
        let step = async {
            let present = self.inspect_sandbox(&id).await?;
            self.destroy_locked(id.clone(), present).await
        };
        self.with_intent(&id, &Unguarded, step).await
    }

    /// `destroy`'s body, once the lock is held and the name inspected (`present`).
    async fn destroy_locked(
        &self,
        id: String,
        present: Option<Container>,
    ) -> Result<Destroyed, OpError> {
        if present.is_none() && !self.ledger.is_quarantined(&id)? {
            // No container and no record: what may be left of it (a sidecar, networks, a port)
            // is removed too; only when nothing at all is there is it "nothing to destroy".
            let cleared = self
                .converge(&id, &Intent::Teardown)
                .await
                .map_err(|e| unfinished(&id, e))?;
            if cleared.is_empty() {
                return Err(OpError::NoSuchSandbox(id));
            }
            return Ok(Destroyed {
                sandbox_id: id,
                container_id: None,
                ports_released: cleared.ports_released,
                absent_teardown: false,
                leftovers: cleared.removed,
            });
        }
        let mut ports_released = Vec::new();
        if let Some(c) = &present {
            let port = self.destroy_present(&id, c).await;
            ports_released.extend(port.map_err(|e| unfinished(&id, e))?);
        }
        let absent_teardown = self.ledger.is_quarantined(&id)?;
        if absent_teardown {
            let t = self.absent_teardown(&id).await;
            ports_released.extend(t.map_err(|e| unfinished(&id, e))?.ports_released);
        }
        Ok(Destroyed {
            sandbox_id: id,
            container_id: present.map(|c| c.id),
            ports_released,
            absent_teardown,
            leftovers: Vec::new(),
        })
    }

    /// A provider's teardown of the generation it tracks: only container `generation` is torn
    /// down. When the name now holds another generation (replaced meanwhile, by another process
    /// or by hand), that one is left alone and reported as `Replaced`; the tracked
    /// generation's record and port are retired once the engine confirms that generation is
    /// gone under any name (else the teardown is deferred and the record kept).
    pub async fn destroy_generation(
        &self,
        id: &str,
        generation: &str,
    ) -> Result<GenerationTeardown, OpError> {
        let id = naming::parse_stack_sandbox_id(id)?;
        let _lock = self.locks.acquire(&id).await?;
        self.with_intent(&id, &Unguarded, self.generation_locked(&id, generation))
            .await
    }

    /// `destroy_generation`'s body, under the lock and an intent record.
    async fn generation_locked(
        &self,
        id: &str,
        generation: &str,
    ) -> Result<GenerationTeardown, OpError> {
        let id = id.to_owned();
        let present = self.inspect_sandbox(&id).await?;
        match present {
            Some(c) if c.id != generation && !c.id.is_empty() => {
                // Inspect by ID: a hex reference the proxy pins, so a renamed old generation
                // is still found (and then kept quarantined, not guessed about).
                let old = self
                    .engine
                    .inspect(generation)
                    .await
                    .map_err(step(format!("inspect {generation}")))?;
                if old.is_some() {
                    self.ledger.mark(&id, generation)?;
                    return Err(deferred(
                        &id,
                        format!("generation {generation} still exists under another name; {} now holds {}", self.names(&id).sandbox, c.id),
                    ));
                }
                let port = self.ports.release(&id, generation)?;
                self.ledger.retire_generation(&id, generation)?;
                Ok(GenerationTeardown::Replaced {
                    found: c.id,
                    ports_released: port.into_iter().collect(),
                })
            }
            _ => self
                .destroy_locked(id, present)
                .await
                .map(GenerationTeardown::Destroyed),
        }
    }

    /// Stop and remove a present sandbox `c` by its ID; the restricted cleanup runs unless its
    /// label says `open`. Any failure is returned and leaves a quarantine record for this
    /// generation (its port stays reserved); success releases the generation's port and
    /// retires its record. The caller holds the sandbox's lock.
    pub(crate) async fn destroy_present(
        &self,
        id: &str,
        c: &Container,
    ) -> Result<Option<u16>, OpError> {
        let names = self.names(id);
        let label = c.labels.get(naming::LABEL_NETWORK_MODE).map(String::as_str);
        let plan = teardown_plan::present(&c.id, &names.sandbox, label);
        if let Some(why) = plan.refuse {
            self.ledger.mark(id, &plan.record_on_failure)?;
            return Err(OpError::Engine {
                step: format!("inspect {}", names.sandbox),
                source: EngineError::Unreadable(why.into()),
            });
        }
        self.changing(id, &Intent::Teardown)?;
        let result = async {
            for step in &plan.steps {
                match step {
                    Step::StopRemove { id, name } => self.stop_and_remove(id, name).await?,
                    Step::RestrictedCleanup => self.strict_cleanup(&names).await?,
                }
            }
            Ok::<_, OpError>(())
        }
        .await;
        if let Err(e) = result {
            self.ledger.mark(id, &plan.record_on_failure)?;
            return Err(e);
        }
        let Some(generation) = plan.retire_on_success else {
            return Ok(None);
        };
        let port = self.ports.release(id, &generation)?;
        self.ledger.retire_generation(id, &generation)?;
        Ok(port)
    }

    /// Stops and removes `reference` (a container ID) of the container
    /// named `what`, then confirms it no longer holds that name: a 409 "removal already in progress" or a remove
    /// the engine answered early both end in a bounded wait for absence.
    pub(crate) async fn stop_and_remove(&self, reference: &str, what: &str) -> Result<(), OpError> {
        let shown = if reference == what {
            what.to_owned()
        } else {
            format!("{what} ({reference})")
        };
        let stopped = self
            .engine
            .stop(reference, self.settings.stop_timeout)
            .await
            .map_err(step(format!("stop {shown}")))?;
        if stopped == Done::AlreadyGone {
            return Ok(());
        }
        if stopped == Done::Done {
            self.engine
                .remove(reference)
                .await
                .map_err(step(format!("remove {shown}")))?;
        }
        let limit = self.settings.removal_wait;
        let id = (reference != what).then_some(reference);
        let gone = self
            .engine
            .wait_gone(what, id, limit)
            .await
            .map_err(step(format!("confirm {shown} is gone")))?;
        if gone {
            Ok(())
        } else {
            Err(OpError::Engine {
                step: format!("confirm {shown} is gone"),
                source: EngineError::Timeout(limit),
            })
        }
    }

    /// Sidecar and both networks; "no such" for that exact name counts as done.
    pub(crate) async fn strict_cleanup(&self, names: &Names) -> Result<(), OpError> {
        self.remove_sidecar(names, None).await?;
        for network in [&names.network, &names.egress] {
            self.engine
                .remove_network(network)
                .await
                .map_err(step(format!("remove network {network}")))?;
        }
        Ok(())
    }

    /// Stops and removes the sandbox's sidecar by an ID: the one its create returned, or the
    /// one an inspect of its exact name answers now (absent: nothing to do). Like the sandbox,
    /// it is never stopped or removed by name, so a container that takes the name between the
    /// decision and the stop is not touched.
    pub(crate) async fn remove_sidecar(
        &self,
        names: &Names,
        known: Option<&str>,
    ) -> Result<(), OpError> {
        let id = match known {
            Some(id) => id.to_owned(),
            None => match self
                .engine
                .inspect(&names.sidecar)
                .await
                .map_err(step(format!("inspect {}", names.sidecar)))?
            {
                Some(c) => c.id,
                None => return Ok(()),
            },
        };
        self.stop_and_remove(&id, &names.sidecar).await
    }

    /// Teardown of a sandbox whose container is gone (docs/architecture.md, "lifecycle"), under the sandbox's lock.
    pub async fn complete_absent_teardown(&self, id: &str) -> Result<Teardown, OpError> {
        let _lock = self.locks.acquire(id).await?;
        self.with_intent(id, &Unguarded, self.absent_teardown(id))
            .await
    }

    /// The absent teardown proper; then the recorded generations' ports and the records. The
    /// caller holds the lock and knows the name is absent.
    pub(crate) async fn absent_teardown(&self, id: &str) -> Result<Teardown, OpError> {
        let names = self.names(id);
        let listing = if decide::needs_listing(self.settings.mode) {
            Some(
                match self
                    .engine
                    .list_names(&names.sidecar, self.settings.list_timeout)
                    .await
                {
                    Ok(n) => Listing::Names(n),
                    Err(e) => Listing::Failed(e.to_string()),
                },
            )
        } else {
            None
        };
        let plan = decide::absent_plan(self.settings.mode, listing.as_ref(), &names.sidecar);
        if let Some(Listing::Failed(why)) = &listing {
            tracing::warn!(sandbox_id = id, error = %why, "listing the network proxy failed; keeping the restricted cleanup");
        }
        self.changing(id, &Intent::Teardown)?;
        match plan {
            AbsentPlan::Strict => self.strict_cleanup(&names).await?,
            AbsentPlan::Skip => tracing::info!(
                "Retiring open-mode sandbox {id} without restricted cleanup: no network proxy {} is listed.",
                names.sidecar
            ),
        }
        let keys = self.ledger.generations(id)?;
        // An `unknown` generation's port is not known either: every port of this sandbox is a
        // dead generation's, since its name is absent and its lock is held.
        let ports_released = if keys.contains(&k(UNKNOWN_GENERATION)) {
            self.ports.release_all(id)?
        } else {
            let mut out = Vec::new();
            for key in &keys {
                out.extend(self.ports.release_key(id, key)?);
            }
            out
        };
        self.ledger.retire(id)?;
        Ok(Teardown {
            strict: plan == AbsentPlan::Strict,
            ports_released,
        })
    }

    /// Retires one sandbox's records if its container is confirmed absent, all under its lock
    /// (an absence check made outside it could be stale by the time the port is released).
    pub async fn retire(&self, id: &str) -> Retired {
        let run = async {
            let _lock = self.locks.acquire(id).await?;
            let step = async {
                if !self.is_absent(id).await? {
                    return Ok(None);
                }
                self.absent_teardown(id).await.map(Some)
            };
            self.with_intent(id, &Unguarded, step).await
        };
        match run.await {
            Ok(None) => Retired::Kept {
                sandbox_id: Some(id.to_owned()),
                key: None,
                reason: "container present".into(),
            },
            Ok(Some(t)) => Retired::Retired {
                sandbox_id: id.to_owned(),
                strict: t.strict,
                ports_released: t.ports_released,
            },
            Err(e) => Retired::Deferred {
                sandbox_id: id.to_owned(),
                error: e.to_string(),
            },
        }
    }

    /// `retire`: every record, one result each.
    pub async fn retire_all(&self) -> Result<Vec<Retired>, OpError> {
        let mut out = Vec::new();
        for entry in self.ledger.entries()? {
            match entry.checked_id() {
                Ok(Some(id)) => out.push(self.retire(&id).await),
                Ok(None) => out.push(Retired::Kept {
                    sandbox_id: None,
                    key: Some(entry.key),
                    reason:
                        "record names no sandbox ID; it retires on the next create in its thread"
                            .into(),
                }),
                // Nothing is asked of the engine or the lock for it: its name is not known.
                Err(why) => {
                    tracing::warn!(key = %entry.key, reason = %why, "quarantine record is corrupt; kept, nothing done");
                    out.push(Retired::Kept {
                        sandbox_id: None,
                        key: Some(entry.key),
                        reason: format!("corrupt record, kept and not acted on: {why}"),
                    });
                }
            }
        }
        Ok(out)
    }

    /// Before a create of a quarantined sandbox (`decide::before_create`): confirm absence and
    /// run the absent teardown, or destroy the quarantined generation first, or retire records
    /// the name proves stale. Returns the container to discover, if the name holds a newer one.
    /// Any failure defers the create: the record is kept and nothing new is made.
    pub(crate) async fn retire_before_create(
        &self,
        id: &str,
    ) -> Result<Option<Container>, OpError> {
        let names = self.names(id);
        let present = self.engine.inspect(&names.sandbox).await.map_err(|e| {
            deferred(
                id,
                format!("cannot confirm {} is absent: {e}", names.sandbox),
            )
        })?;
        let fenced = match &present {
            Some(c) => Some(self.ledger.fences(id, &c.id)?),
            None => None,
        };
        let keep_storage_errors = |e| unfinished(id, e);
        match (decide::before_create(true, fenced), present) {
            (decide::BeforeCreate::RetireStaleThenDiscover, Some(c)) => {
                for key in self.ledger.generations(id)? {
                    self.ports.release_key(id, &key)?;
                }
                self.ledger.retire(id)?;
                Ok(Some(c))
            }
            (decide::BeforeCreate::DestroyThenCreate, Some(c)) => {
                self.destroy_present(id, &c)
                    .await
                    .map_err(|e| deferred(id, e.to_string()))?;
                if self.ledger.is_quarantined(id)? {
                    self.absent_teardown(id)
                        .await
                        .map_err(keep_storage_errors)?;
                }
                Ok(None)
            }
            _ => {
                self.absent_teardown(id)
                    .await
                    .map_err(keep_storage_errors)?;
                Ok(None)
            }
        }
    }
}

/// A teardown that failed after its record was written is deferred (exit 3), so the exit code
/// says a record is kept; storage and lock errors stay what they are.
pub(crate) fn unfinished(id: &str, e: OpError) -> OpError {
    match e {
        OpError::Ledger(_)
        | OpError::Ports(_)
        | OpError::Intent(_)
        | OpError::Lock(_)
        | OpError::Deferred { .. } => e,
        other => deferred(id, other.to_string()),
    }
}
