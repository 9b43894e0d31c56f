//! Container and network lists as the stack gets them (docs/architecture.md, "sockproxy: a request's way through"): the engine asked for the
//! stack's own objects (`list_query`), the answer read within the list caps, then filtered
//! (`filter`), off the event loop when it is large. Volume lists take the same ask
//! (`own_list`) and are kept by `volumes`; `GET /info` counts the stack's own containers
//! (`info`).

use bytes::Bytes;
use http::request::Parts;
use http::{header, Response, StatusCode};

use crate::forward::{buffered_response, stream_response, upstream_request, with_query};
use crate::proxy::{upstream_err, Proxy, Reply};
use crate::upstream::{self, Body, Buffered};
use serde_json::Value;
use sockproxy_policy::filters::{self, stack_volumes, Names};
use sockproxy_policy::{Kind, Plan, Query, Refusal, Target};

/// Lists up to this size (a few hundred containers at most) with no client `name` values are
/// filtered in place, in well under a millisecond; others on the runtime's blocking pool.
const FILTER_INLINE_MAX: usize = 128 * 1024;

impl Proxy {
    pub(crate) async fn list(&self, kind: Kind, parts: &Parts, plan: &Plan) -> Reply {
        let target = &plan.target;
        let limit = filters::parse_limit(target.query.get("limit")).map_err(Refusal::BadRequest)?;
        // A filter that names a container (`before`, `since`) was decided by `evaluate` among
        // the stack's own containers, and the engine is asked with the full ID it pinned.
        let query = target.query.clone();
        // The engine is asked for the stack's own (a network list shows no predefined network
        // either, `Scope::visible`), so other stacks' objects do not count against the cap.
        // `limit` applies to the stack's own entries, so it is applied after filtering.
        let (answer, names, _held) = match self.own_list(parts, target, query, &["limit"]).await? {
            Ok(got) => got,
            Err(engine) => return Ok(engine),
        };
        let own = match kind {
            Kind::Network => self.own_ids(target.version.as_deref()).await?,
            Kind::Container => None,
        };
        let (body, scope) = (answer.body.clone(), self.policy.scope.clone());
        let filtered = off_the_workers(answer.body.len(), names, move |names| {
            filters::stack_list(kind, &body, &scope, limit, names, own.as_ref())
                .map_err(|e| Refusal::Upstream(e.to_string()))
        })
        .await?;
        Ok(buffered_response(Buffered {
            body: Bytes::from(filtered),
            ..answer
        }))
    }

    /// A list's answer from the engine, asked for the stack's own objects (`list_query`: its
    /// anchored name filter, its label under `--require-stack-label`, the client's `name` values
    /// kept to match here) and read within `--max-list-bytes` and the shared budget (held until
    /// the `Held` is dropped). `Ok(Err(_))`: the engine's own answer other than 200, as it is.
    pub(crate) async fn own_list(
        &self,
        parts: &Parts,
        target: &Target,
        query: Query,
        drop_params: &[&str],
    ) -> Result<Result<(Buffered, Vec<String>, upstream::Held), Response<Body>>, Refusal> {
        let label = self
            .policy
            .create_rules
            .require_stack_label
            .then_some(self.policy.stack.as_str());
        let prefix = self.policy.scope.prefix().as_str();
        let ask = filters::own_list_filters(query.get("filters"), prefix, label)?;
        let query = query.with("filters", ask.filters);
        let path = with_query(target.path(), &query.encode_without(drop_params));
        let req = upstream_request(parts, path, upstream::empty(), false)?;
        let resp = self.upstream.send(req).await.map_err(upstream_err)?;
        if resp.status() != StatusCode::OK {
            return Ok(Err(stream_response(resp)));
        }
        let (answer, held) = self
            .upstream
            .read_budgeted(
                resp,
                self.serving.max_list_bytes,
                Some(&self.serving.list_budget),
            )
            .await
            .map_err(upstream_err)?;
        Ok(Ok((answer, ask.names, held)))
    }
}

/// Compiles the client's `name` values and cuts a list answer with them: on the runtime's
/// blocking pool when there are values to compile and match, or the answer is large (a large
/// list takes milliseconds to filter, and every other request on the worker would wait
/// meanwhile; a compile may take longer, within `list_query::NAME_REGEX_BUDGET`). The one
/// runtime has one blocking pool, so such buffers come and go on the same few threads (a pool
/// per event loop once doubled a 10,000-container list's peak RSS).
async fn off_the_workers<T: Send + 'static>(
    answer_len: usize,
    names: Vec<String>,
    cut: impl FnOnce(&Names) -> Result<T, Refusal> + Send + 'static,
) -> Result<T, Refusal> {
    if names.is_empty() && answer_len <= FILTER_INLINE_MAX {
        return cut(&Names::default());
    }
    tokio::task::spawn_blocking(move || cut(&Names::compile(names)?))
        .await
        .map_err(|e| Refusal::Upstream(format!("filtering the list: {e}")))?
}

impl Proxy {
    /// `GET /volumes`: the engine asked for the stack's own, the answer kept to them.
    pub(crate) async fn volume_list(&self, parts: &Parts, target: &Target) -> Reply {
        let (answer, names, _held) = match self
            .own_list(parts, target, target.query.clone(), &[])
            .await?
        {
            Ok(got) => got,
            Err(engine) => return Ok(engine),
        };
        let (body, scope) = (answer.body.clone(), self.policy.scope.clone());
        let kept = off_the_workers(answer.body.len(), names, move |names| {
            stack_volumes(&body, &scope, names).map_err(|e| Refusal::Upstream(e.to_string()))
        })
        .await?;
        Ok(buffered_response(Buffered {
            body: bytes::Bytes::from(kept),
            ..answer
        }))
    }

    /// `GET /info` for the stack alone (`info::for_stack`).
    pub(crate) async fn info(&self, version: Option<&str>) -> Reply {
        let v = crate::forward::vprefix(version);
        let answer = self
            .upstream
            .get(&format!("{v}/info"), 1 << 20)
            .await
            .map_err(upstream_err)?;
        if answer.status != StatusCode::OK {
            return Ok(buffered_response(answer));
        }
        let engine: Value = serde_json::from_slice(&answer.body)
            .map_err(|e| Refusal::Upstream(format!("unreadable info answer: {e}")))?;
        let own: Vec<filters::State> = self
            .own_listed(Kind::Container, version)
            .await?
            .iter()
            .map(|o| filters::State::parse(&o.state))
            .collect();
        let mut out =
            serde_json::to_vec(&filters::info_for_stack(&engine, &self.policy.stack, &own))
                .map_err(|e| Refusal::Upstream(e.to_string()))?;
        out.push(b'\n');
        let mut headers = answer.headers;
        headers.remove(header::CONTENT_LENGTH);
        Ok(buffered_response(Buffered {
            status: answer.status,
            headers,
            body: Bytes::from(out),
        }))
    }
}
