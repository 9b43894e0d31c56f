//! The multi-host part of the heartbeat and of reconciliation: this host announces where it
//! answers and republishes its provisioner sandboxes (each only while its claim is this host's),
//! and removes from its own engine what it holds for IDs it does not own (a host that was away
//! while others took its IDs over), by the generation listed, touching no claim.

use std::collections::HashSet;

use super::{locked, MultiHost};
use crate::serve::provider::Provider;

/// One heartbeat's multi-host part: announce, then publish every tracked provisioner sandbox
/// (its answer read from the engine once) and drop what is no longer tracked.
pub(crate) async fn beat(p: &Provider) {
    let (Some(m), Some(r)) = (&p.hosts, p.redis()) else {
        return;
    };
    if let Err(e) = r.announce(&p.own.me, &m.advertise, p.own.ttl).await {
        tracing::warn!(error = %e, "multi-host: could not announce this host");
        return;
    }
    let tracked: HashSet<String> = p
        .pool()
        .entries()
        .filter(|(_, e)| e.provisioned && !e.destroy_pending)
        .map(|(id, _)| id.clone())
        .collect();
    let gone: Vec<String> = {
        let mut published = locked(&m.published);
        let gone = published
            .keys()
            .filter(|id| !tracked.contains(*id))
            .cloned()
            .collect();
        published.retain(|id, _| tracked.contains(id));
        gone
    };
    for id in gone {
        locked(&m.renewed).remove(&id);
        let _ = r.unpublish(&id, &p.own.me).await;
    }
    for id in tracked {
        let known = locked(&m.published).get(&id).cloned();
        let answer = match known {
            Some(a) => a,
            None => {
                // Adopted (a restart within the claim's TTL): its answer read once.
                let mut a = p.api_get(&id).await;
                if a.status != 200 {
                    continue;
                }
                if let Some(o) = a.body.as_object_mut() {
                    o.insert("owner".into(), serde_json::json!(p.own.me));
                }
                locked(&m.published).insert(id.clone(), a.body.clone());
                a.body
            }
        };
        if let Err(e) = r
            .publish(&id, &p.own.me, &answer.to_string(), p.own.ttl)
            .await
        {
            tracing::warn!(sandbox_id = %id, error = %e, "multi-host: not republished");
            return;
        }
    }
}

/// Drops this host's address at shutdown, so calls for its IDs stop being sent here at once.
pub(crate) async fn withdraw(p: &Provider) {
    if let (Some(_), Some(r)) = (&p.hosts, p.redis()) {
        let _ = r.withdraw(&p.own.me).await;
    }
}

/// What reconciliation found on this engine that this host does not track: (ID, container
/// ID, running). With its claim this host's, a running one is adopted and a dead one torn down
/// (as on one host); otherwise it is stale here once seen so for `--adopt-grace`, and removed
/// by the generation listed. The claim is never touched: it is the new owner's, or nobody's.
pub(crate) async fn untracked(p: &Provider, found: Vec<(String, String, bool)>) {
    let Some(m) = &p.hosts else {
        return;
    };
    let now = p.now();
    let seen: HashSet<&str> = found.iter().map(|(id, _, _)| id.as_str()).collect();
    locked(&m.stale_since).retain(|id, _| seen.contains(id.as_str()));
    let mine = format!("own:{}", p.own.me);
    for (id, generation, running) in &found {
        let claim = match p.own.value(id).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "multi-host reconcile: ownership store unavailable; nothing removed");
                locked(&m.stale_since).clear();
                return;
            }
        };
        if claim.as_deref() == Some(mine.as_str()) {
            locked(&m.stale_since).remove(id);
            match running {
                true => crate::serve::reconcile::adopt(p, id).await,
                false => crate::serve::reconcile::tear_down_dead(p, id, generation).await,
            }
            continue;
        }
        let since = *locked(&m.stale_since).entry(id.clone()).or_insert(now);
        if now.saturating_sub(since) < p.config().adopt_grace {
            continue;
        }
        remove_stale(p, m, id, generation, claim.as_deref()).await;
    }
}

async fn remove_stale(
    p: &Provider,
    m: &MultiHost,
    id: &str,
    generation: &str,
    claim: Option<&str>,
) {
    let serial = p.serial(id);
    let Ok(_serial) = serial.try_lock() else {
        return;
    };
    // Tracked since (a create here took the ID): no longer stale.
    if p.pool().get(id).is_some() {
        locked(&m.stale_since).remove(id);
        return;
    }
    locked(&m.removing).insert(id.to_owned());
    let done = p.lc.destroy_generation(id, generation).await;
    locked(&m.removing).remove(id);
    match done {
        Ok(done) => {
            locked(&m.stale_since).remove(id);
            tracing::warn!(sandbox_id = id, container_id = generation, claim = ?claim, result = ?done, "multi-host reconcile: a sandbox this host does not own is removed from its engine (stale: another host took the ID over, or its claim lapsed)");
        }
        Err(e) => {
            tracing::warn!(sandbox_id = id, container_id = generation, error = %e, "multi-host reconcile: a stale sandbox could not be removed; kept for a later pass");
        }
    }
}
