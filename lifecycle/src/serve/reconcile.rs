//! Reconciliation, at start-up and every tick: running stack sandboxes nobody tracks are adopted
//! (at once with the memory store, after the grace period with a shared one, never one another
//! process still renews, nothing while the store cannot answer), and what a step that stopped
//! half way or an earlier run left is finished or removed.

use std::collections::BTreeSet;
use std::time::Duration;

use super::claims::Claim;
use super::provider::Provider;
use crate::decide::Mode;
use crate::naming;

/// One reconciliation pass: running stack sandboxes no entry tracks are adopted into the warm
/// pool (and so reaped by the idle timer, counted by the cap). With a shared store a sandbox
/// must be seen unowned on consecutive passes spanning `adopt_grace` before it is claimed (a
/// peer may be creating it); with the memory store this process is the only provider, so an
/// untracked one is an orphan of an earlier run (a crash, kill -9) and is adopted at once. Any
/// store error forgets every observation (fail closed).
pub async fn reconcile(p: &Provider) {
    recover_intents(p).await;
    let grace = if p.own.is_shared() {
        p.config().adopt_grace
    } else {
        Duration::ZERO
    };
    let listed = match p.lc.list().await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "reconcile: cannot list the stack's sandboxes; adopting nothing");
            return;
        }
    };
    let now = p.now();
    let mut candidates = Vec::new();
    let mut dead = Vec::new();
    // Every sandbox ID a container holds, in any state: its restricted objects are not lone.
    let held: BTreeSet<String> = listed.iter().filter_map(|l| l.sandbox_id.clone()).collect();
    // Several hosts (`--advertise-url`): what this host does not track is its claim's to
    // decide, adopted or removed as stale (`hosts::untracked`).
    let mut untracked = Vec::new();
    for l in listed {
        let Some(id) = adoptable_id(p, &l) else {
            continue;
        };
        if p.hosts.is_some() && p.pool().get(&id).is_none() {
            untracked.push((id, l.container_id, l.state == "running"));
            continue;
        }
        if l.state != "running" {
            p.unowned_since().remove(&id);
            // Created, exited or dead: a leftover once it stays so for the grace (a create
            // under way holds the sandbox's lock, which the teardown below waits out).
            if l.scoped {
                let since = *p.dead_since().entry(id.clone()).or_insert(now);
                if now.saturating_sub(since) >= grace {
                    dead.push((id, l.container_id));
                }
            }
            continue;
        }
        p.dead_since().remove(&id);
        if p.pool().get(&id).is_some() {
            p.unowned_since().remove(&id);
            continue;
        }
        match p.own.value(&id).await {
            Ok(None) => {
                let since = *p.unowned_since().entry(id.clone()).or_insert(now);
                if now.saturating_sub(since) >= grace {
                    candidates.push(id);
                }
            }
            // Ours already: this provider's own, from before a restart with the same
            // --owner-id (its claim not yet lapsed): adopted at once.
            Ok(Some(v)) if v == format!("own:{}", p.own.me) => {
                p.unowned_since().remove(&id);
                candidates.push(id);
            }
            Ok(Some(_)) => {
                p.unowned_since().remove(&id);
            }
            Err(e) => {
                tracing::warn!(error = %e, "reconcile: ownership store unavailable; adopting nothing");
                p.unowned_since().clear();
                return;
            }
        }
    }
    for id in candidates {
        adopt(p, &id).await;
    }
    for (id, generation) in dead {
        tear_down_dead(p, &id, &generation).await;
    }
    super::hosts::untracked(p, untracked).await;
    if p.lc.settings.mode == Mode::Restricted {
        sweep_lone(p, &held, grace).await;
    }
}

/// Finishes or undoes every step whose process stopped half way (its intent record is left;
/// `Lifecycle::recover`), under the sandbox's lock and a `del:` claim: one that another
/// provider owns is left to it, one in use here or in another process (its lock held) to a
/// later pass, one a lease holds to its holder.
async fn recover_intents(p: &Provider) {
    let ids = match p.lc.intents.open() {
        Ok(ids) => ids,
        Err(e) => {
            tracing::warn!(error = %e, "reconcile: cannot read the intent records; none recovered");
            return;
        }
    };
    for id in ids {
        let serial = p.serial(&id);
        let Ok(_serial) = serial.try_lock() else {
            continue;
        };
        let tracked = p
            .pool()
            .get(&id)
            .map(|e| (e.holders.len(), e.container_id.clone()));
        if tracked.as_ref().is_some_and(|(held, _)| *held > 0) {
            continue;
        }
        match p.own.begin_delete(&id).await {
            Ok(Claim::Ours) => {}
            Ok(other) => {
                tracing::info!(sandbox_id = %id, claim = ?other, "reconcile: a step that stopped half way on a sandbox another provider owns; left to it");
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "reconcile: ownership store unavailable; nothing recovered");
                return;
            }
        }
        let mut gone = false;
        match p.lc.recover(&id).await {
            Ok(Some(cleared)) => {
                tracing::info!(sandbox_id = %id, removed = ?cleared.removed, ports = ?cleared.ports_released, "reconcile: a step that stopped half way is finished or undone");
                gone = tracked
                    .as_ref()
                    .is_some_and(|(_, cid)| cleared.generations.contains(cid));
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(sandbox_id = %id, error = %e, "reconcile: a step that stopped half way could not be finished; kept for a later pass")
            }
        }
        if gone {
            p.pool().forget(&id);
        }
        let still_tracked = p.pool().get(&id).is_some();
        let _ = match still_tracked {
            true => p.own.end_delete(&id).await.map(|_| ()),
            false => p.own.release(&id).await.map(|_| ()),
        };
    }
}

/// Restricted objects (a sidecar, networks) lifecycle made for a sandbox ID no container holds
/// any more, seen so for the grace, not tracked and not in use: removed under the ID's lock
/// and a `del:` claim (`Lifecycle::clear_leftovers`). What a killed process left before intent
/// records existed, or what something else removed the sandbox from under.
async fn sweep_lone(p: &Provider, held: &BTreeSet<String>, grace: Duration) {
    let ids = match p.lc.restricted_object_ids().await {
        Ok(ids) => ids,
        Err(e) => {
            tracing::warn!(error = %e, "reconcile: cannot list sidecars and networks; nothing swept");
            return;
        }
    };
    let now = p.now();
    let lone: BTreeSet<String> = ids
        .into_iter()
        .filter(|id| !held.contains(id) && p.pool().get(id).is_none())
        .collect();
    p.lone_since().retain(|id, _| lone.contains(id));
    for id in lone {
        let since = *p.lone_since().entry(id.clone()).or_insert(now);
        if now.saturating_sub(since) < grace {
            continue;
        }
        let serial = p.serial(&id);
        let Ok(_serial) = serial.try_lock() else {
            continue;
        };
        match p.own.begin_delete(&id).await {
            Ok(Claim::Ours) => {}
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "reconcile: ownership store unavailable; nothing swept");
                return;
            }
        }
        match p.lc.clear_leftovers(&id).await {
            Ok(Some(cleared)) => {
                p.lone_since().remove(&id);
                tracing::info!(sandbox_id = %id, removed = ?cleared.removed, "reconcile: what a sandbox that is gone left is removed");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(sandbox_id = %id, error = %e, "reconcile: a lone sidecar or network could not be removed; kept for a later pass")
            }
        }
        let _ = p.own.release(&id).await;
    }
}

/// A sandbox lifecycle made that is not running (created, exited or dead) is a leftover: torn
/// down by the generation listed, under its lock and a `del:` claim (never one another provider
/// owns). A tracked one held by a lease is left to its holder (the next acquire's health check
/// replaces it); a tracked unheld one is destroyed as the reaper would.
pub(crate) async fn tear_down_dead(p: &Provider, id: &str, generation: &str) {
    p.dead_since().remove(id);
    let serial = p.serial(id);
    let Ok(_serial) = serial.try_lock() else {
        tracing::info!(
            sandbox_id = id,
            "reconcile: in use here; a sandbox not running is left for a later pass"
        );
        return;
    };
    let tracked = p
        .pool()
        .get(id)
        .map(|e| (e.holders.len(), e.container_id.clone()));
    let result = match tracked {
        Some((held, _)) if held > 0 => return,
        Some((_, tracked)) if tracked == generation => {
            if !p.pool().begin_destroy(id) {
                return;
            }
            p.destroy_fenced(id).await.map(super::destroy::Torn::as_str)
        }
        // Tracked under another generation: that one's fate is the reaper's and the acquire's.
        Some(_) => return,
        None => p
            .destroy_engine(id, Some(generation))
            .await
            .map(super::destroy::Torn::as_str),
    };
    match result {
        Ok(result) => {
            tracing::info!(
                sandbox_id = id,
                container_id = generation,
                result,
                "reconcile: a sandbox that was not running is torn down"
            )
        }
        Err(e) => {
            tracing::warn!(sandbox_id = id, container_id = generation, error = %e, "reconcile: a sandbox that was not running could not be torn down; kept for a later pass")
        }
    }
}

/// The ID a listed container may be adopted (or torn down) under: its `deerflow.sandbox_id`
/// label, only if that is a sandbox ID (a derived one; any ID of the stack for one the
/// provisioner API made, whose IDs deer-flow names) and the container's name is exactly that
/// ID's sandbox name. Anything else (an ID lifecycle could never have made, or a label naming
/// another sandbox) is skipped: once adopted, it could never be destroyed (`destroy` refuses the
/// ID, or acts on another container), its `del:` claim would be renewed forever and shutdown
/// would report it failed.
fn adoptable_id(p: &Provider, l: &crate::ops::Listed) -> Option<String> {
    let label = l.sandbox_id.as_deref()?;
    let parsed = match l.provisioned {
        true => naming::parse_stack_sandbox_id(label),
        false => naming::parse_sandbox_id(label),
    };
    let id = match parsed {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!(container = %l.container_name, container_id = %l.container_id, error = %e, "reconcile: its sandbox ID label is not a sandbox ID; not adopted");
            return None;
        }
    };
    let want = p.lc.names(&id).sandbox;
    if l.container_name != want {
        tracing::warn!(container = %l.container_name, container_id = %l.container_id, sandbox_id = %id, expected = %want, "reconcile: its name is not its sandbox ID label's sandbox name; not adopted");
        return None;
    }
    Some(id)
}

pub(crate) async fn adopt(p: &Provider, id: &str) {
    p.unowned_since().remove(id);
    // Under the ID's lock, as every other change to an entry. One in use (an acquire or a
    // destroy of that ID under way here) is no orphan: skipped, without waiting on it, so a
    // long create never holds up the reaper that runs in this same loop.
    let serial = p.serial(id);
    let Ok(_serial) = serial.try_lock() else {
        tracing::info!(sandbox_id = id, "reconcile: in use here; not adopted");
        return;
    };
    match p.own.claim(id).await {
        Ok(Claim::Ours) => {}
        other => {
            tracing::info!(sandbox_id = id, answer = ?other, "reconcile: not adopted (claimed meanwhile or store unavailable)");
            return;
        }
    }
    let found = p.lc.inspect_sandbox(id).await;
    let c = match found {
        Ok(Some(c)) if c.running => c,
        other => {
            tracing::info!(sandbox_id = id, found = ?other.map(|c| c.map(|c| c.id)), "reconcile: gone or not running; not adopted");
            let _ = p.own.release(id).await;
            return;
        }
    };
    let Some(scope) = c.labels.get(naming::LABEL_SCOPE).cloned() else {
        tracing::info!(
            sandbox_id = id,
            "reconcile: no scope label, so no (user, thread) to hand it to; not adopted"
        );
        let _ = p.own.release(id).await;
        return;
    };
    let way_in = match p.lc.way_in(id, &c).await {
        Ok(port) if port.is_some() || !p.lc.needs_relay(&c) => port,
        other => {
            tracing::warn!(sandbox_id = id, container_id = %c.id, found = ?other, "reconcile: no way in to it (a restricted sandbox whose sidecar publishes no relay port); not adopted");
            let _ = p.own.release(id).await;
            return;
        }
    };
    let created = p.lc.discovered(id, &c, way_in);
    let origin = c
        .labels
        .get(super::provision::LABEL_ORIGIN)
        .map(String::as_str);
    if origin == Some(super::provision::ORIGIN_PROVISIONER) {
        // deer-flow's (made through the provisioner API): tracked, never reaped or evicted.
        if p.pool().get(id).is_none() {
            p.pool()
                .commit_provisioned(id, &scope, &c.id, &created.url, p.now());
        }
        tracing::info!(sandbox_id = id, container_id = %c.id, "reconcile: adopted a provisioner API sandbox (kept until deer-flow deletes it)");
        return;
    }
    p.adopt_entry(id, &scope, &c.id, &created.url);
    tracing::info!(sandbox_id = id, container_id = %c.id, "reconcile: adopted an orphan into the warm pool");
}
