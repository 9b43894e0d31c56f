//! One provisioner URL over several Docker hosts (`--advertise-url`, with a Redis
//! `--ownership`): HAProxy sends each sandbox ID's calls to one host by consistent hashing, and
//! this module makes every host answer the same way whichever it gets. The Redis claim decides
//! who owns an ID; `route_by_claim` and `route_by_owner` (pure, table-tested) say what a call
//! does: here, answered from the shared registry (`registry`), a 307 to the live owner's
//! advertised address, 404, or 503 (the store unreachable, a claim not renewed within its TTL,
//! an owner that stopped answering and whose claim has not lapsed yet). The heartbeat announces
//! this host and publishes its sandboxes (`beat`); reconciliation removes what a host that
//! was away holds for IDs it no longer owns (`untracked`), without touching any claim.
//!
//! Every host must have its own engine: a sandbox found on this host's engine whose claim is
//! another owner's, or nobody's, is stale here and removed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};

use super::provider::Provider;
use super::provisioner::ApiAnswer;
use super::store::Store;

/// This host's part in a multi-host deployment.
#[derive(Debug)]
pub struct MultiHost {
    /// Where the gateway and HAProxy reach this host's API (`http://HOST:PORT`).
    pub advertise: String,
    /// Untracked sandboxes on this engine seen stale, since (monotonic).
    stale_since: Mutex<HashMap<String, Duration>>,
    /// Last time each tracked sandbox's claim was known held (a renewal, or its create).
    renewed: Mutex<HashMap<String, Duration>>,
    /// The answer published for each tracked provisioner sandbox.
    published: Mutex<HashMap<String, Value>>,
    /// Stale sandboxes being removed right now: the heartbeat must not renew (and so take)
    /// their claims, as it does for an ID whose lock a create holds.
    removing: Mutex<std::collections::HashSet<String>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MultiHost {
    pub fn new(advertise: String) -> Self {
        Self {
            advertise,
            stale_since: Mutex::default(),
            renewed: Mutex::default(),
            published: Mutex::default(),
            removing: Mutex::default(),
        }
    }
}

/// `--advertise-url`, checked: `http://` or `https://`, a host and a port, no path.
pub fn check_advertise(raw: &str) -> Result<String, String> {
    let url = raw.trim_end_matches('/');
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("{raw:?}: expected http://HOST:PORT"))?;
    let bad = rest.is_empty()
        || rest.contains(['/', '?', '#', '@', ' '])
        || rest.chars().any(char::is_control);
    let port = rest.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
    match (bad, port) {
        (false, Some(Ok(p))) if p > 0 => Ok(url.to_owned()),
        _ => Err(format!("{raw:?}: expected http://HOST:PORT")),
    }
}

/// Which call of deer-flow's is being routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Create,
    Get,
    Delete,
}

/// What the claim alone decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ByClaim {
    Local,
    NotFound,
    Unavailable(&'static str),
    /// Another owner holds the claim: where it answers decides (`route_by_owner`).
    Owner(String),
}

/// `tracked`: this host tracks the ID; `fresh`: its claim was held within a TTL; `claim`:
/// the key's value (`None` unowned), `Err` when the store did not answer (only read for an
/// untracked ID).
pub fn route_by_claim(
    call: Call,
    me: &str,
    tracked: bool,
    fresh: bool,
    claim: Result<Option<&str>, ()>,
) -> ByClaim {
    if tracked {
        // A claim not renewed within its TTL may be another host's by now: not handed out
        // until the store answers again (a DELETE still runs, under its own `del:` claim).
        return match (call, fresh) {
            (Call::Delete, _) | (_, true) => ByClaim::Local,
            _ => ByClaim::Unavailable("its ownership claim was not renewed within its TTL (the store does not answer); not handed out"),
        };
    }
    let Ok(value) = claim else {
        return ByClaim::Unavailable("the ownership store does not answer");
    };
    let owner = value.map(super::claims::owner_of);
    match (call, owner) {
        (_, Some(o)) if o == me => ByClaim::Local,
        (_, Some(o)) => ByClaim::Owner(o),
        // Unowned and not tracked here: what this engine may hold under the ID is stale.
        (Call::Get, None) => ByClaim::NotFound,
        (Call::Create | Call::Delete, None) => ByClaim::Local,
    }
}

/// What a call for an ID another owner holds does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ByOwner {
    /// Answered from the shared registry.
    Registry,
    /// 307 to this URL.
    Redirect(String),
    NotFound,
    /// 503 with `Retry-After` (seconds): the owner stopped announcing itself and its claim
    /// has not lapsed yet.
    OwnerGone(u64),
}

/// `url`: where the owner announced itself (`None`: it has not within a TTL); `claim_ms`:
/// what its claim still lives; `path`: the request's path.
pub fn route_by_owner(call: Call, url: Option<&str>, claim_ms: Option<u64>, path: &str) -> ByOwner {
    match (call, url) {
        (Call::Get, Some(_)) => ByOwner::Registry,
        (Call::Get, None) => ByOwner::NotFound,
        (Call::Create | Call::Delete, Some(u)) => ByOwner::Redirect(format!("{u}{path}")),
        (Call::Create | Call::Delete, None) => {
            ByOwner::OwnerGone(claim_ms.unwrap_or(1000).div_ceil(1000).max(1))
        }
    }
}

/// An answer of the routed API: the provisioner's own, a redirect, or a 503 to retry.
#[derive(Debug, Clone, PartialEq)]
pub enum Routed {
    Api(ApiAnswer),
    Redirect(String),
    Retry { after_secs: u64, detail: String },
}

fn detail(status: u16, msg: impl Into<String>) -> Routed {
    Routed::Api(ApiAnswer {
        status,
        body: json!({ "detail": msg.into() }),
    })
}

impl Provider {
    fn redis(&self) -> Option<&super::redis_store::RedisStore> {
        match &self.own.store {
            Store::Redis(r) => Some(r),
            Store::Memory(_) => None,
        }
    }

    /// Notes that `id`'s claim is held now (a renewal or a create).
    pub(crate) fn note_claim_held(&self, id: &str) {
        if let Some(m) = &self.hosts {
            locked(&m.renewed).insert(id.to_owned(), self.now());
        }
    }

    /// Whether `id` is a stale sandbox being removed here (its claim is not ours to renew).
    pub(crate) fn removing_stale(&self, id: &str) -> bool {
        self.hosts
            .as_ref()
            .is_some_and(|m| locked(&m.removing).contains(id))
    }

    fn fresh(&self, m: &MultiHost, id: &str) -> bool {
        let now = self.now();
        let at = *locked(&m.renewed).entry(id.to_owned()).or_insert(now);
        now.saturating_sub(at) < self.own.ttl
    }

    /// Decides where a call for `id` goes; `None` means answer it here.
    async fn route(&self, call: Call, id: &str, path: &str) -> Option<Routed> {
        let (m, r) = (self.hosts.as_ref()?, self.redis()?);
        let tracked = self.pool().get(id).is_some();
        let fresh = tracked && self.fresh(m, id);
        let claim = match tracked {
            true => Ok(None),
            false => self.own.value(id).await,
        };
        let step = route_by_claim(
            call,
            &self.own.me,
            tracked,
            fresh,
            claim.as_ref().map(Option::as_deref).map_err(|_| ()),
        );
        tracing::info!(sandbox_id = id, ?call, tracked, fresh, claim = ?claim, route = ?step, "multi-host: routed");
        let owner = match step {
            ByClaim::Local => return None,
            ByClaim::NotFound => return Some(detail(404, format!("Sandbox '{id}' not found"))),
            ByClaim::Unavailable(why) => {
                return Some(Routed::Retry {
                    after_secs: 1,
                    detail: format!("sandbox {id}: {why}"),
                })
            }
            ByClaim::Owner(o) => o,
        };
        let (url, ttl) = match (r.host_url(&owner).await, r.claim_ttl(id).await) {
            (Ok(u), Ok(t)) => (u, t),
            (Err(e), _) | (_, Err(e)) => {
                return Some(Routed::Retry {
                    after_secs: 1,
                    detail: format!("sandbox {id}: {e}"),
                })
            }
        };
        match route_by_owner(call, url.as_deref(), ttl, path) {
            ByOwner::Redirect(to) => Some(Routed::Redirect(to)),
            ByOwner::NotFound => Some(detail(404, format!("Sandbox '{id}' not found"))),
            ByOwner::OwnerGone(after_secs) => Some(Routed::Retry {
                after_secs,
                detail: format!("sandbox {id} is held by host {owner}, which does not answer; its claim lapses within {after_secs} s"),
            }),
            ByOwner::Registry => Some(match r.entry(id).await {
                Ok(Some((_, answer))) => match serde_json::from_str::<Value>(&answer) {
                    Ok(body) => Routed::Api(ApiAnswer { status: 200, body }),
                    Err(_) => detail(404, format!("Sandbox '{id}' not found")),
                },
                Ok(None) => detail(404, format!("Sandbox '{id}' not found")),
                Err(e) => Routed::Retry {
                    after_secs: 1,
                    detail: e.to_string(),
                },
            }),
        }
    }

    /// Adds this host's name to an answer, and publishes it when it is a sandbox's.
    async fn publish(&self, id: &str, a: &mut ApiAnswer) {
        let (Some(m), Some(r)) = (&self.hosts, self.redis()) else {
            return;
        };
        if a.status != 200 {
            return;
        }
        if let Some(o) = a.body.as_object_mut() {
            o.insert("owner".into(), json!(self.own.me));
        }
        locked(&m.published).insert(id.to_owned(), a.body.clone());
        if let Err(e) = r
            .publish(id, &self.own.me, &a.body.to_string(), self.own.ttl)
            .await
        {
            tracing::warn!(sandbox_id = id, error = %e, "multi-host: not published in the registry (the next heartbeat tries again)");
        }
    }

    /// `POST /api/sandboxes`, routed.
    pub async fn routed_create(&self, raw: &[u8]) -> Routed {
        let id = serde_json::from_slice::<Value>(raw)
            .ok()
            .and_then(|v| {
                v.get("sandbox_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .filter(|id| super::provision::check_sandbox_id(id).is_ok());
        let Some(id) = id else {
            return Routed::Api(self.api_create(raw).await);
        };
        if let Some(r) = self.route(Call::Create, &id, "/api/sandboxes").await {
            return r;
        }
        let mut a = self.api_create(raw).await;
        if a.status == 200 {
            self.note_claim_held(&id);
        }
        self.publish(&id, &mut a).await;
        Routed::Api(a)
    }

    /// `GET /api/sandboxes/{id}`, routed.
    pub async fn routed_get(&self, id: &str) -> Routed {
        if super::provision::check_sandbox_id(id).is_ok() {
            let path = format!("/api/sandboxes/{id}");
            if let Some(r) = self.route(Call::Get, id, &path).await {
                return r;
            }
        }
        let mut a = self.api_get(id).await;
        if let Some(o) = a.body.as_object_mut().filter(|_| self.hosts.is_some()) {
            o.insert("owner".into(), json!(self.own.me));
        }
        Routed::Api(a)
    }

    /// `DELETE /api/sandboxes/{id}`, routed.
    pub async fn routed_delete(&self, id: &str) -> Routed {
        if super::provision::check_sandbox_id(id).is_ok() {
            let path = format!("/api/sandboxes/{id}");
            if let Some(r) = self.route(Call::Delete, id, &path).await {
                return r;
            }
        }
        let a = self.api_delete(id).await;
        if let (Some(m), Some(r), 200) = (&self.hosts, self.redis(), a.status) {
            locked(&m.published).remove(id);
            if let Err(e) = r.unpublish(id, &self.own.me).await {
                tracing::warn!(sandbox_id = id, error = %e, "multi-host: registry entry not dropped (it lapses within a TTL)");
            }
        }
        Routed::Api(a)
    }

    /// `GET /api/sandboxes`: every host's, from the registry (this engine's alone without
    /// `--advertise-url`).
    pub async fn routed_list(&self) -> Routed {
        let (Some(_), Some(r)) = (&self.hosts, self.redis()) else {
            return Routed::Api(self.api_list().await);
        };
        match r.entries().await {
            Ok(entries) => {
                let out: Vec<Value> = entries
                    .iter()
                    .filter_map(|(_, a)| serde_json::from_str::<Value>(a).ok())
                    .collect();
                let count = out.len();
                Routed::Api(ApiAnswer {
                    status: 200,
                    body: json!({ "sandboxes": out, "count": count }),
                })
            }
            Err(e) => Routed::Retry {
                after_secs: 1,
                detail: format!("the registry of every host's sandboxes: {e}"),
            },
        }
    }
}

#[path = "hosts_beat.rs"]
mod beat;
pub(crate) use beat::{beat, untracked, withdraw};

#[cfg(test)]
#[path = "hosts_tests.rs"]
mod tests;
