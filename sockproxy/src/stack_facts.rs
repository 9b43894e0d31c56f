//! The facts a create gathers about the stack as a whole, under the stack's lock
//! (`stack_lock`, taken by `exchange`): its own network as the engine holds it, made first when
//! the engine holds none (`Need::StackNetwork`), and its containers with their memory limits
//! (`Need::Usage`). What the network is made with, and whether the one found may be used, is
//! the policy's (`facts::stack_network_body`, `evaluate`); nothing here decides.

use http::{header, HeaderValue, Method, Request, StatusCode};
use sockproxy_policy::facts::{self, StackNetwork, Usage};
use sockproxy_policy::{Fact, Kind, Refusal};

use crate::forward::vprefix;
use crate::proxy::{upstream_err, Proxy};
use crate::upstream;

/// Cap on one inspect answer (as `exchange`'s).
const MAX_INSPECT: usize = 8 << 20;
/// Cap on the engine's answer to a network create.
const MAX_CREATED: usize = 64 << 10;

/// The stack's network as the engine holds it; made (with the policy's body) when the engine
/// answers its inspect with 404.
pub(crate) async fn stack_network(proxy: &Proxy, version: Option<&str>) -> Result<Fact, Refusal> {
    let v = vprefix(version);
    let name = facts::stack_network(&proxy.policy);
    if let Some(held) = inspect(proxy, &v, &name).await? {
        return Ok(Fact::StackNetwork(held));
    }
    let body = serde_json::to_vec(&facts::stack_network_body(&proxy.policy))
        .map_err(|e| Refusal::Upstream(e.to_string()))?;
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
        .read_budgeted(resp, MAX_CREATED, None)
        .await
        .map_err(upstream_err)?;
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
