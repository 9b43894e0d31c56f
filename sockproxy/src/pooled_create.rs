//! A network create as the engine is asked it, the stack's own network's and a client's: under
//! `--network-pool` with a subnet of the pool (the policy's choice; the stack's own network's
//! chosen here, by the same rule), and, when the engine refuses that subnet as overlapping one
//! it holds but does not list (`facts::subnet_overlap`: a bridge left behind by a create an
//! engine restart cut short), again with the next free one, passing over `MAX_PASSED` subnets
//! at most. Without it passed over, every create would choose that subnet again and fail. The
//! caller holds the stack's lock, so no other create of the stack chooses meanwhile.
//! Also here: the engine's network list read for the subnets it holds (`held_subnets`, the
//! `Need::Subnets` fact too) and the two flags read into the policy's `NetworkPool` (`settings`).

use std::future::Future;

use http::{Response, StatusCode};
use serde_json::Value;
use sockproxy_policy::settings::NetworkPool;
use sockproxy_policy::{facts, Plan, Refusal, Sent};

use crate::exchange::Exchange;
use crate::forward::{buffered_response, vprefix, with_query};
use crate::proxy::{json_request, upstream_err, Proxy, Reply};
use crate::upstream::{Body, Buffered};

/// Subnets one create may pass over before the engine's refusal goes back to the client.
pub(crate) const MAX_PASSED: usize = 8;
/// Cap on the engine's answer to a network create.
pub(crate) const MAX_CREATED: usize = 64 << 10;

/// Sends `body` (with `send`, which returns the engine's answer read whole), under the pool
/// when there is one.
pub(crate) async fn create<F, Fut>(
    proxy: &Proxy,
    v: &str,
    op: &str,
    mut body: Value,
    mut send: F,
) -> Result<Buffered, Refusal>
where
    F: FnMut(Vec<u8>) -> Fut,
    Fut: Future<Output = Result<Buffered, Refusal>>,
{
    let pool = proxy.policy.create_rules.network_pool;
    let mut passed = Vec::new();
    if let Some(pool) = &pool {
        if facts::assigned_subnet(&body).is_none() {
            let held = held_subnets(proxy, v).await?;
            pool.assign(op, &held, &mut body)?;
        }
    }
    loop {
        let bytes = serde_json::to_vec(&body).map_err(|e| Refusal::Upstream(e.to_string()))?;
        let answer = send(bytes).await?;
        let (Some(pool), Some(subnet)) = (&pool, facts::assigned_subnet(&body)) else {
            return Ok(answer);
        };
        if passed.len() >= MAX_PASSED
            || !facts::subnet_overlap(answer.status.as_u16(), &answer.body)
        {
            return Ok(answer);
        }
        tracing::warn!(
            %subnet,
            stack = %proxy.policy.stack,
            "the engine refused a subnet of --network-pool that none of its listed networks holds; passing it over"
        );
        passed.push(subnet);
        let mut held = held_subnets(proxy, v).await?;
        held.extend(passed.iter().copied());
        pool.assign(op, &held, &mut body)?;
    }
}

impl Proxy {
    /// A client's network create under `--network-pool`: the checked body, its subnet passed
    /// over as `create` does, and the engine's last answer as the client's.
    pub(crate) async fn create_pooled_network(&self, plan: &Plan, ex: &Exchange<'_>) -> Reply {
        let Sent::Checked(body) = &plan.body else {
            return Err(Refusal::Upstream(
                "a network create without its checked body".into(),
            ));
        };
        let target = &plan.target;
        let path = with_query(target.path(), &target.query.encode_without(&[]));
        let v = vprefix(target.version.as_deref());
        let send = |bytes: Vec<u8>| {
            let path = path.clone();
            async move {
                let req = json_request(ex.parts, bytes, path, false)?;
                let resp = self.upstream.send(req).await.map_err(upstream_err)?;
                let (answer, _) = self
                    .upstream
                    .read_budgeted(resp, MAX_CREATED, None)
                    .await
                    .map_err(upstream_err)?;
                Ok(answer)
            }
        };
        let answer = create(self, &v, "networks.create", body.clone(), send).await?;
        let resp: Response<Body> = buffered_response(answer);
        Ok(resp)
    }
}

/// The IPv4 subnets every network on the engine holds.
pub(crate) async fn held_subnets(proxy: &Proxy, v: &str) -> Result<Vec<ipnet::Ipv4Net>, Refusal> {
    // A list, capped as lists are (`--max-list-bytes`): labels are what make it long, and a
    // pooled network's are bounded (`NetworkPool::assign`).
    let answer = proxy
        .upstream
        .get(&format!("{v}/networks"), proxy.serving.max_list_bytes)
        .await
        .map_err(upstream_err)?;
    match answer.status {
        StatusCode::OK => facts::network_subnets(&answer.body),
        status => Err(Refusal::Upstream(format!(
            "listing the engine's networks for --network-pool: the engine answered {status}"
        ))),
    }
}

/// `--network-pool` and `--network-pool-size`, read once at start-up: a size without a pool is
/// a mistake, not a default.
pub(crate) fn settings(
    pool: Option<&str>,
    size: Option<u8>,
) -> Result<Option<NetworkPool>, String> {
    let Some(pool) = pool else {
        return match size {
            Some(_) => Err("--network-pool-size needs --network-pool".into()),
            None => Ok(None),
        };
    };
    let net: ipnet::Ipv4Net = pool
        .parse()
        .map_err(|_| format!("{pool:?} is not an IPv4 range (a.b.c.d/n)"))?;
    NetworkPool::new(net, size.unwrap_or(24)).map(Some)
}
