//! Undoing a failed create (docs/architecture.md, "lifecycle"): what it made is removed by ID (the sandbox, then in
//! restricted mode the sidecar and both networks, never a network it found and refused), under
//! the caller's teardown claim (`BeforeUndo`); success releases the port, failure quarantines
//! the generation, keeps its port and names what is left.

use crate::create::{BeforeUndo, Made};
use crate::ledger::UNKNOWN_GENERATION;
use crate::naming::Names;
use crate::ops::{Lifecycle, OpError};

impl Lifecycle {
    /// Undoes a failed create: the sandbox by its ID, then (restricted) the sidecar and both
    /// networks. Success releases the port and returns `cause`; a failure quarantines the
    /// generation, keeps its port, and returns `RollbackFailed` naming what is left.
    pub(crate) async fn undo(
        &self,
        id: &str,
        made: &Made,
        cause: OpError,
        guard: &dyn BeforeUndo,
    ) -> OpError {
        let names = self.names(id);
        let anything_made = made.sandbox.is_some() || made.restricted;
        let refused = match anything_made {
            true => guard.before_undo(id).await.err(),
            false => None,
        };
        let (left, mut errors) = match refused {
            None => self.tear_down_made(&names, made).await,
            Some(reason) => {
                tracing::warn!(sandbox_id = id, reason, "a failed create's undo was not allowed to start; what it made is left and quarantined");
                (
                    made_objects(&names, made),
                    vec![format!("undo not started: {reason}")],
                )
            }
        };
        let generation = made
            .sandbox
            .clone()
            .unwrap_or_else(|| UNKNOWN_GENERATION.to_owned());
        if left.is_empty() {
            let released = match &made.sandbox {
                Some(cid) => self.ports.release(id, cid),
                None => self.ports.release_pending(id),
            };
            return match released {
                Ok(_) => cause,
                Err(e) => OpError::Ports(e),
            };
        }
        tracing::error!(sandbox_id = id, generation = %generation, left = ?left, "a failed create could not be undone");
        if let Err(e) = self.ledger.mark(id, &generation) {
            errors.push(e.to_string());
        }
        let cause = match cause {
            // Its own message claims the undo succeeded; here it did not.
            OpError::NotReady { url, secs, .. } => {
                format!("failed to become ready within {secs}s at {url}")
            }
            other => other.to_string(),
        };
        OpError::RollbackFailed {
            id: id.to_owned(),
            cause,
            left,
            errors,
            generation,
        }
    }

    /// Removes what a failed create made, by ID; returns (what is left, the errors).
    async fn tear_down_made(&self, names: &Names, made: &Made) -> (Vec<String>, Vec<String>) {
        let mut left = Vec::new();
        let mut errors = Vec::new();
        if let Some(cid) = &made.sandbox {
            if let Err(e) = self.stop_and_remove(cid, &names.sandbox).await {
                left.push(format!("container {} ({cid})", names.sandbox));
                errors.push(e.to_string());
            }
        }
        if made.restricted {
            if let Err(e) = self.remove_sidecar(names, made.sidecar.as_deref()).await {
                left.push(format!("container {}", names.sidecar));
                errors.push(e.to_string());
            }
            for network in [&names.network, &names.egress] {
                if made.foreign.contains(network) {
                    continue;
                }
                if let Err(e) = self.engine.remove_network(network).await {
                    left.push(format!("network {network}"));
                    errors.push(format!("remove network {network}: {e}"));
                }
            }
        }
        (left, errors)
    }
}

/// Everything a failed create may have made, as `undo` names what it left.
fn made_objects(names: &Names, made: &Made) -> Vec<String> {
    let mut left = Vec::new();
    if let Some(cid) = &made.sandbox {
        left.push(format!("container {} ({cid})", names.sandbox));
    }
    if made.restricted {
        left.push(format!("container {}", names.sidecar));
        for network in [&names.network, &names.egress] {
            if !made.foreign.contains(network) {
                left.push(format!("network {network}"));
            }
        }
    }
    left
}
