//! The facts a create gathers about the stack as a whole, under the stack's lock
//! (`stack_lock`, taken by `exchange`): its own network as the engine holds it, made first when
//! the engine holds none (`Need::StackNetwork`), and its containers with their memory limits
//! (`Need::Usage`), and the subnets every network on the engine holds (`Need::Subnets`, for
//! `--network-pool`). What the network is made with, and whether the one found may be used, is
//! the policy's (`facts::stack_network_body`, `evaluate`); nothing here decides. At shutdown
//! the network goes when nothing names it (`retire_network`), so a stack taken down leaves
//! nothing on the engine.

use http::{header, HeaderValue, Method, Request, StatusCode};
use sockproxy_policy::facts::{self, StackNetwork, Usage};
use sockproxy_policy::{Fact, Kind, Refusal};

use crate::forward::vprefix;
use crate::proxy::{upstream_err, Proxy};
use crate::upstream;

/// Cap on one inspect answer (as `exchange`'s).
const MAX_INSPECT: usize = 8 << 20;

/// The stack's network as the engine holds it; made (with the policy's body) when the engine
/// answers its inspect with 404.
pub(crate) async fn stack_network(proxy: &Proxy, version: Option<&str>) -> Result<Fact, Refusal> {
    let v = vprefix(version);
    let name = facts::stack_network(&proxy.policy);
    if let Some(held) = inspect(proxy, &v, &name).await? {
        return Ok(Fact::StackNetwork(held));
    }
    // Under `--network-pool` it gets a subnet of the pool, as the stack's other networks do.
    let body = facts::stack_network_body(&proxy.policy);
    let send = |body: Vec<u8>| async {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(format!("{v}/networks/create"))
            .body(upstream::full(body))
            .map_err(|e| Refusal::Upstream(e.to_string()))?;
        req.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let resp = proxy.upstream.send(req).await.map_err(upstream_err)?;
        let (answer, _) = proxy
            .upstream
            .read_budgeted(resp, crate::pooled_create::MAX_CREATED, None)
            .await
            .map_err(upstream_err)?;
        Ok(answer)
    };
    let answer = crate::pooled_create::create(proxy, &v, "networks.create", body, send).await?;
    match answer.status {
        StatusCode::CREATED => {
            tracing::info!(network = %name, stack = %proxy.policy.stack, "made the stack's network");
        }
        // Made meanwhile by a proxy that does not share this one's lock file: judged as found.
        StatusCode::CONFLICT => {}
        status => {
            return Err(Refusal::Upstream(format!(
                "making the stack's network {name}: the engine answered {status}: {}",
                String::from_utf8_lossy(&answer.body).trim()
            )))
        }
    }
    match inspect(proxy, &v, &name).await? {
        Some(held) => Ok(Fact::StackNetwork(held)),
        None => Err(Refusal::Upstream(format!(
            "the stack's network {name} was made, then not found"
        ))),
    }
}

/// Every IPv4 subnet the engine's networks hold, for a create under `--network-pool`: the
/// whole engine's, not the stack's (a subnet another stack holds is not free), and never
/// shown to the stack.
pub(crate) async fn subnets(proxy: &Proxy, version: Option<&str>) -> Result<Fact, Refusal> {
    crate::pooled_create::held_subnets(proxy, &vprefix(version))
        .await
        .map(Fact::Subnets)
}

/// The network named `name`, or `None` when the engine answers 404.
async fn inspect(proxy: &Proxy, v: &str, name: &str) -> Result<Option<StackNetwork>, Refusal> {
    let answer = proxy
        .upstream
        .get(&format!("{v}/networks/{name}"), MAX_INSPECT)
        .await
        .map_err(upstream_err)?;
    match answer.status {
        StatusCode::OK => StackNetwork::read(&answer.body).map(Some),
        StatusCode::NOT_FOUND => Ok(None),
        status => Err(Refusal::Upstream(format!(
            "inspecting the stack's network {name}: the engine answered {status}: {}",
            String::from_utf8_lossy(&answer.body).trim()
        ))),
    }
}

/// Every container the stack sees, in any state, with its memory limit: one list, then an
/// inspect of each (a list answer does not carry the limit). One removed in between is gone
/// from the count.
pub(crate) async fn usage(proxy: &Proxy, version: Option<&str>) -> Result<Fact, Refusal> {
    let v = vprefix(version);
    let own = proxy.own_listed(Kind::Container, version).await?;
    let mut usage = Vec::with_capacity(own.len());
    for o in own {
        let answer = proxy
            .upstream
            .get(&format!("{v}/containers/{}/json", o.id), MAX_INSPECT)
            .await
            .map_err(upstream_err)?;
        match answer.status {
            StatusCode::OK => usage.push(Usage::read(&answer.body)?),
            StatusCode::NOT_FOUND => {}
            status => {
                return Err(Refusal::Upstream(format!(
                    "inspecting {} for the stack's totals: the engine answered {status}",
                    o.name
                )))
            }
        }
    }
    Ok(Fact::Usage(usage))
}

/// At shutdown, under the stack's lock: removes the stack's network if it is the one the proxy
/// made and no container in any state names it (a stopped one would fail its next start
/// without it). A create through another proxy of the stack that shares the lock file waits,
/// then makes it again. Says whether it was removed.
pub async fn retire_network(proxy: &Proxy) -> Result<bool, Refusal> {
    let _held = proxy.stack_lock.lock().await?;
    let name = facts::stack_network(&proxy.policy);
    let Some(held) = inspect(proxy, "", &name).await? else {
        return Ok(false);
    };
    if !facts::is_stack_network(&held, &proxy.policy) {
        return Ok(false);
    }
    // By name as well as ID: a container created but never started names the network in its
    // settings without its ID (dockerd 20.10 matches such a one by name only).
    let filters = serde_json::json!({ "network": [held.name, held.id] }).to_string();
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("all", "1")
        .append_pair("filters", &filters)
        .finish();
    let listed = proxy
        .upstream
        .get(&format!("/containers/json?{query}"), MAX_INSPECT)
        .await
        .map_err(upstream_err)?;
    let named: Vec<serde_json::Value> = match listed.status {
        StatusCode::OK => serde_json::from_slice(&listed.body)
            .map_err(|e| Refusal::Upstream(format!("unreadable container list: {e}")))?,
        status => {
            return Err(Refusal::Upstream(format!(
                "listing the containers on {name}: the engine answered {status}"
            )))
        }
    };
    if !named.is_empty() {
        tracing::info!(network = %name, containers = named.len(), "the stack's network stays: containers name it");
        return Ok(false);
    }
    let req = Request::builder()
        .method(Method::DELETE)
        .uri(format!("/networks/{}", held.id))
        .body(upstream::full(Vec::new()))
        .map_err(|e| Refusal::Upstream(e.to_string()))?;
    let resp = proxy.upstream.send(req).await.map_err(upstream_err)?;
    let status = resp.status();
    let removed = status == StatusCode::NO_CONTENT || status == StatusCode::OK;
    if removed {
        tracing::info!(network = %name, stack = %proxy.policy.stack, "removed the stack's network: no container names it");
    } else {
        tracing::info!(network = %name, %status, "the stack's network stays: the engine did not remove it");
    }
    Ok(removed)
}
