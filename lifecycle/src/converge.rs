//! Finishing or undoing a step that stopped half way (docs/lifecycle.md, "A crash at any
//! step"). A teardown's is finished: every object lifecycle made for the sandbox ID is removed,
//! whatever state each is in (a sandbox created and never started, exited, dead or running; a
//! lone sidecar; lone networks), then the ID's port reservations are released and its
//! quarantine records retired. A create's is undone: what carries its intent token goes, with
//! its generation's port, record and the pending port; a sandbox that was there before it
//! stays. An object counts as lifecycle's for the ID only when its labels say so
//! (`deerflow.sandbox_id` is the ID and `deerflow.stack` the prefix); anything else under the
//! sandbox's names is left alone and reported. The restricted objects follow the absent
//! teardown's rule: always in restricted mode, in open mode only when the sidecar's exact name
//! is listed (or the listing fails).
//!
//! Every multi-object step writes an intent record (`intent`) before its first change
//! (`changing`) and `with_intent` ends it when the step returns (it undid what it made, or
//! recorded what it could not in the quarantine ledger); a record left by an earlier step is
//! converged before the next step on the ID runs. So only a step that stopped half way (its
//! process killed) or could not write its records leaves its ID for the next one, or the
//! provider's reconciliation, to converge; a step that only looked leaves nothing.

use std::collections::HashMap;
use std::future::Future;

use crate::create::BeforeUndo;
use crate::decide::{self, AbsentPlan, Listing};
use crate::intent::{Step, LABEL_INTENT};
use crate::naming::{self, Names};
use crate::ops::{step, Lifecycle, OpError};

/// What `converge` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Cleared {
    /// What it removed: `container NAME (ID)`, `network NAME`.
    pub removed: Vec<String>,
    /// What it found under the sandbox's names that is not lifecycle's for this ID: left alone.
    pub left: Vec<String>,
    /// The container IDs of the sandboxes it removed.
    pub generations: Vec<String>,
    pub ports_released: Vec<u16>,
    /// Whether quarantine records were retired.
    pub records_retired: bool,
}

impl Cleared {
    /// Nothing of the sandbox was there.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.ports_released.is_empty() && !self.records_retired
    }
}

impl Lifecycle {
    /// Whether `labels` say lifecycle made the object for sandbox `id` of this stack (in the
    /// create whose token is `token`, when one is given).
    fn made_for(&self, labels: &HashMap<String, String>, id: &str, token: Option<&str>) -> bool {
        labels.get(naming::LABEL_SANDBOX_ID).map(String::as_str) == Some(id)
            && labels.get(naming::LABEL_STACK).map(String::as_str)
                == Some(self.settings.prefix.as_str())
            && token.is_none_or(|t| labels.get(LABEL_INTENT).map(String::as_str) == Some(t))
    }

    /// Whether the sidecar and networks are this process's to look for (`decide::absent_plan`).
    async fn restricted_cleanup(&self, id: &str, names: &Names) -> bool {
        let listing = match decide::needs_listing(self.settings.mode) {
            false => None,
            true => Some(
                match self
                    .engine
                    .list_names(&names.sidecar, self.settings.list_timeout)
                    .await
                {
                    Ok(n) => Listing::Names(n),
                    Err(e) => Listing::Failed(e.to_string()),
                },
            ),
        };
        let plan = decide::absent_plan(self.settings.mode, listing.as_ref(), &names.sidecar);
        if plan == AbsentPlan::Skip {
            tracing::debug!(
                sandbox_id = id,
                "converge: no network proxy listed; no restricted objects looked for"
            );
        }
        plan == AbsentPlan::Strict
    }

    /// Finishes `step` on `id` (a teardown: everything lifecycle made for it goes, its ports and
    /// records too) or undoes it (a create: what it made goes; see the module's doc). The
    /// caller holds the sandbox's lock (and, in a provider, its teardown claim). Any engine or
    /// storage error is returned with what is left in place: the intent record stays, so the
    /// next step converges again.
    pub(crate) async fn converge(&self, id: &str, step_: &Step) -> Result<Cleared, OpError> {
        if !self.intents.is_open(id)? {
            self.changing(id, &Step::Teardown)?;
        }
        let token = match step_ {
            Step::Create { token } => Some(token.as_str()),
            Step::Teardown => None,
        };
        let names = self.names(id);
        let mut out = Cleared::default();
        let mut removed_generation = None;
        // A container this step may not remove keeps the name: then its quarantine records keep
        // fencing it and its ports stay, as an absent teardown would leave them.
        let mut name_held = false;
        match self.inspect_sandbox(id).await? {
            Some(c) if !c.id.is_empty() && self.made_for(&c.labels, id, token) => {
                self.stop_and_remove(&c.id, &names.sandbox).await?;
                out.removed
                    .push(format!("container {} ({})", names.sandbox, c.id));
                out.generations.push(c.id.clone());
                removed_generation = Some(c.id);
            }
            Some(c) => {
                name_held = true;
                if token.is_none() || !self.made_for(&c.labels, id, None) {
                    out.left
                        .push(format!("container {} ({})", names.sandbox, c.id));
                }
            }
            None => {}
        }
        if self.restricted_cleanup(id, &names).await {
            let sidecar = self
                .engine
                .inspect(&names.sidecar)
                .await
                .map_err(step(format!("inspect {}", names.sidecar)))?;
            match sidecar {
                Some(c) if !c.id.is_empty() && self.made_for(&c.labels, id, token) => {
                    self.stop_and_remove(&c.id, &names.sidecar).await?;
                    out.removed
                        .push(format!("container {} ({})", names.sidecar, c.id));
                }
                Some(c) if !self.made_for(&c.labels, id, None) => out
                    .left
                    .push(format!("container {} ({})", names.sidecar, c.id)),
                _ => {}
            }
            for network in [&names.network, &names.egress] {
                let found = self
                    .engine
                    .inspect_network(network)
                    .await
                    .map_err(step(format!("inspect network {network}")))?;
                match found {
                    Some(n) if self.made_for(&n.labels, id, token) => {
                        self.engine
                            .remove_network(network)
                            .await
                            .map_err(step(format!("remove network {network}")))?;
                        out.removed.push(format!("network {network}"));
                    }
                    Some(n) if !self.made_for(&n.labels, id, None) => {
                        out.left.push(format!("network {network}"))
                    }
                    _ => {}
                }
            }
        }
        match token {
            // A teardown finished: no generation of the ID is left, unless one it may not
            // remove holds the name.
            None if !name_held => {
                out.ports_released = self.ports.release_all(id)?;
                if self.ledger.is_quarantined(id)? {
                    self.ledger.retire(id)?;
                    out.records_retired = true;
                }
            }
            None => {}
            // A create undone: its pending port, and the generation it made.
            Some(_) => {
                out.ports_released.extend(self.ports.release_pending(id)?);
                if let Some(generation) = &removed_generation {
                    out.ports_released
                        .extend(self.ports.release(id, generation)?);
                    if self.ledger.fences(id, generation)? {
                        self.ledger.retire_generation(id, generation)?;
                        out.records_retired = true;
                    }
                }
            }
        }
        if !out.left.is_empty() {
            tracing::warn!(sandbox_id = id, left = ?out.left, "converge: objects under the sandbox's names that lifecycle did not make for it are left alone");
        }
        if out.is_empty() {
            tracing::debug!(sandbox_id = id, "converge: nothing to do");
        } else {
            tracing::info!(sandbox_id = id, step = ?step_, removed = ?out.removed, ports = ?out.ports_released, records = out.records_retired, "converged: the step that stopped half way is finished or undone");
        }
        Ok(out)
    }

    /// Records that a step on `id` (whose lock the caller holds) is about to change the engine
    /// or its port reservations: from here until the step returns, a process that stops leaves
    /// the intent record for the next step to converge. Called before each first change (a
    /// create's port reservation or first object, a teardown's first stop or removal); a step
    /// that only looks (a create that discovers a running sandbox) records nothing, so its
    /// death destroys nothing.
    pub(crate) fn changing(&self, id: &str, step_: &Step) -> Result<(), OpError> {
        self.intents.begin(id, step_)?;
        Ok(())
    }

    /// Runs `step_` on `id`, whose lock the caller holds, under the intent rule: a record left
    /// by an earlier step that stopped half way is converged first (under `guard`'s teardown
    /// claim; a failure there returns with the record kept), and the record (if `step_` wrote
    /// one, `changing`) ends when the step returns, unless with a storage error.
    pub(crate) async fn with_intent<T>(
        &self,
        id: &str,
        guard: &dyn BeforeUndo,
        step_: impl Future<Output = Result<T, OpError>>,
    ) -> Result<T, OpError> {
        if let Some(record) = self.intents.read(id)? {
            tracing::warn!(
                sandbox_id = id,
                step = ?record.step,
                "an earlier step on this sandbox stopped half way: converging first"
            );
            crate::create::under_claim(guard, id, async {
                self.converge(id, &record.step).await?;
                self.intents.end(id)?;
                Ok(())
            })
            .await?;
        }
        let result = step_.await;
        // A step that returned did its own undo or left a quarantine record for what it could
        // not undo; only one that failed to write its records may have left things unrecorded.
        if !matches!(
            result,
            Err(OpError::Ledger(_) | OpError::Ports(_) | OpError::Intent(_))
        ) {
            self.intents.end(id)?;
        }
        result
    }

    /// Finishes a step on `id` that stopped half way (its intent record is there): converges
    /// under the sandbox's lock and ends the record. `Ok(None)` when the lock is held right now
    /// (the step is under way, not stopped) or no record is there any more. The caller holds
    /// the provider's teardown claim when there is one.
    pub async fn recover(&self, id: &str) -> Result<Option<crate::converge::Cleared>, OpError> {
        let id = naming::parse_stack_sandbox_id(id)?;
        let Some(_lock) = self.locks.try_acquire(&id)? else {
            return Ok(None);
        };
        let Some(record) = self.intents.read(&id)? else {
            return Ok(None);
        };
        let cleared = self.converge(&id, &record.step).await?;
        self.intents.end(&id)?;
        Ok(Some(cleared))
    }

    /// The sandbox IDs whose restricted objects (sidecar, internal or egress network) lifecycle
    /// made and the engine holds, each under exactly its ID's name: what a sandbox that is gone
    /// may have left. Their sandboxes may still be there; the caller compares.
    pub async fn restricted_object_ids(
        &self,
    ) -> Result<std::collections::BTreeSet<String>, OpError> {
        let prefix = self.settings.prefix.as_str();
        let mut ids = std::collections::BTreeSet::new();
        let mut consider = |labels: &HashMap<String, String>, name: &str| {
            let Some(id) = labels
                .get(naming::LABEL_SANDBOX_ID)
                .and_then(|i| naming::parse_stack_sandbox_id(i).ok())
            else {
                return;
            };
            let names = self.names(&id);
            let named = [&names.sidecar, &names.network, &names.egress]
                .iter()
                .any(|n| n.as_str() == name.trim_start_matches('/'));
            if named && self.made_for(labels, &id, None) {
                ids.insert(id);
            }
        };
        let sidecars = self
            .engine
            .list_role(prefix, "netproxy", &format!("{prefix}netproxy-"))
            .await
            .map_err(step("list sidecars".into()))?;
        for c in &sidecars {
            consider(&c.labels, &c.name);
        }
        let networks = self
            .engine
            .list_networks(&format!("{prefix}sandbox-"))
            .await
            .map_err(step("list networks".into()))?;
        for n in &networks {
            consider(&n.labels, &n.name);
        }
        Ok(ids)
    }

    /// Removes what is left of sandbox `id` when no container holds its name (a lone sidecar,
    /// lone networks, ports, records): `Ok(None)` when its lock is held right now or a
    /// container holds the name (that one's fate is decided by its own state).
    pub async fn clear_leftovers(&self, id: &str) -> Result<Option<Cleared>, OpError> {
        let id = naming::parse_stack_sandbox_id(id)?;
        let Some(_lock) = self.locks.try_acquire(&id)? else {
            return Ok(None);
        };
        if self.inspect_sandbox(&id).await?.is_some() {
            return Ok(None);
        }
        self.with_intent(
            &id,
            &crate::create::Unguarded,
            self.converge(&id, &Step::Teardown),
        )
        .await
        .map(Some)
    }
}
