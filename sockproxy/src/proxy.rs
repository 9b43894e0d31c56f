//! The request handler: decide (`decide`'s loop: evaluate, gather, evaluate again) → act, and
//! one log line per decision.
//! Nothing reaches the engine before `policy` has allowed it; every container, network and exec
//! path that is forwarded is pinned to the full ID the check was made on.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use serde_json::Value;

use crate::decide::{decide, Settled};
use crate::decision_line::Decided;
use crate::exchange::Exchange;
use crate::forward::{
    buffered_response, drain, splice, stream_response, upstream_request, wants_upgrade,
};
use crate::refused::IntoResponse;
use crate::upstream::{self, Body, Buffered, Upstream};

use sockproxy_policy::filters;
use sockproxy_policy::{self as policy, Facts, Kind, Plan, Policy, Refusal, Route};

/// The proxy's answer to one request: the engine's (or the proxy's own) response, or the
/// refusal it sends instead.
pub(crate) type Reply = Result<Response<Body>, Refusal>;

/// Who is on the other end of the proxy's socket (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Peer {
    pub uid: Option<u32>,
    pub pid: Option<i32>,
}

/// What the transport holds: the policy it evaluates under, the engine client, the name map,
/// what it serves clients within, and what it counts and logs.
#[derive(Debug)]
pub struct Proxy {
    /// What the stack may do: every decision reads it (`sockproxy_policy::evaluate`).
    pub policy: Policy,
    /// The engine client.
    pub upstream: Upstream,
    /// The stack's own names and IDs, while the engine's events keep them coherent.
    pub names: Arc<crate::names::Names>,
    /// Whether `names` is kept at all (`--no-name-cache` turns it off).
    pub name_cache: bool,
    /// The server's side: connections, head timeout, in-flight work and list buffers.
    pub serving: Serving,
    pub counters: Counters,
    /// The metric families `--metrics-listen` serves (`metrics`); counted whether served or not.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The stack's pinned bind sources, with `--allow-bind-root` (`pins`).
    pub pins: Option<Arc<crate::pins::Pins>>,
    /// What a create's checks of the stack's network and totals are gathered under.
    pub stack_lock: crate::stack_lock::StackLock,
    /// The log guard's limit (`log_guard`); `None`: no guard.
    pub log_flood: Option<sockproxy_policy::log_flood::LogFlood>,
    /// Where the log guard keeps its last stop (`--state-dir`); `None`: in memory only.
    pub state_dir: Option<std::path::PathBuf>,
}

/// What bounds the clients the proxy serves and the lists it buffers for them.
#[derive(Debug)]
pub struct Serving {
    /// Client connections served at once (`--max-connections`).
    pub connection_slots: Arc<tokio::sync::Semaphore>,
    /// Time a client has to send a whole request head (`--header-timeout`).
    pub header_timeout: std::time::Duration,
    /// Time a client has to send a whole JSON body, once its head is read (`--body-timeout`).
    pub body_timeout: std::time::Duration,
    /// Connections and upgrade streams in flight, for a graceful shutdown.
    pub inflight: crate::inflight::Inflight,
    /// Bytes one buffered list may hold (`--max-list-bytes`).
    pub max_list_bytes: usize,
    /// Bytes all buffered lists may hold together (`--max-list-bytes-total`).
    pub list_budget: upstream::ListBudget,
}

/// How many requests were allowed and refused since start.
#[derive(Debug, Default)]
pub struct Counters {
    pub allowed: std::sync::atomic::AtomicU64,
    pub denied: std::sync::atomic::AtomicU64,
}

impl Counters {
    pub fn count(&self, allowed: bool) {
        let c = if allowed { &self.allowed } else { &self.denied };
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// (allowed, denied).
    pub fn snapshot(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.allowed.load(Relaxed), self.denied.load(Relaxed))
    }
}

/// What one request came to, for the decision log line and its count.
struct Outcome {
    op: String,
    /// `op` as a metric label (`Endpoint::op_label`).
    label: &'static str,
    reason: &'static str,
    result: Reply,
}

impl Proxy {
    pub async fn handle(
        self: Arc<Self>,
        peer: Peer,
        mut req: Request<Incoming>,
    ) -> Result<Response<Body>, Infallible> {
        let start = Instant::now();
        let target = req.uri().path().to_owned();
        let name = req.uri().query().and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "name")
                .map(|(_, v)| v.into_owned())
        });
        let method = req.method().clone();
        let client_upgrade = wants_upgrade(req.headers()).then(|| hyper::upgrade::on(&mut req));
        // headguard frames the stream as a tunnel after any CONNECT, and after any HTTP/1.1
        // head with an `Upgrade` header, `Connection: upgrade` or not; it judges no later head
        // on it.
        let tunnel_framed = method == Method::CONNECT
            || (req.version() == http::Version::HTTP_11
                && req.headers().contains_key(header::UPGRADE));
        // Until the endpoint is known, an engine round trip (there is none) would be `unknown`.
        let process = self.process(req, client_upgrade);
        let outcome = crate::metrics::with_op("unknown", process).await;
        let (decision, reason, rule, message, mut resp) = match outcome.result {
            Ok(resp) => ("allow", outcome.reason, outcome.reason, None, resp),
            Err(refusal) => (
                "deny",
                refusal.reason(),
                refusal.rule(),
                Some(refusal.to_string()),
                refusal.into_response(),
            ),
        };
        if tunnel_framed && resp.status() != StatusCode::SWITCHING_PROTOCOLS {
            // The client's stream is framed as a tunnel after an upgrade request
            // (`headguard`); one that was not upgraded carries no further request.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        self.decided(
            peer,
            outcome.label,
            Decided {
                method: method.as_str(),
                op: &outcome.op,
                target: &target,
                decision,
                reason,
                rule,
                name: name.as_deref(),
                message: message.as_deref(),
                status: resp.status(),
                duration_ms: crate::decision_line::millis(start.elapsed()),
            },
        );
        Ok(resp)
    }

    /// Counts a decision (`label`: its op as a metric label) and writes its one log line
    /// (`decision_line`).
    pub(crate) fn decided(&self, peer: Peer, label: &'static str, d: Decided<'_>) {
        self.counters.count(d.decision == "allow");
        self.metrics.decision(label, d.decision, d.reason, d.rule);
        crate::decision_line::log(&self.policy.stack, peer.uid, peer.pid, &d);
    }

    /// Answers the stand-in request hyper is given for a head `headguard` refused.
    pub fn refuse_head(&self, peer: Peer, why: headguard::HeadRefusal) -> Response<Body> {
        let refusal = Refusal::BadHead {
            status: why.status,
            why: why.reason,
        };
        self.decided(
            peer,
            "bad_request",
            Decided {
                method: "",
                op: "bad_request",
                target: "",
                decision: "deny",
                reason: refusal.reason(),
                rule: refusal.rule(),
                name: None,
                message: Some(&refusal.to_string()),
                status: why.status,
                duration_ms: 0.0,
            },
        );
        let mut resp = refusal.into_response();
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        resp
    }

    async fn process(&self, req: Request<Incoming>, upgrade: Option<OnUpgrade>) -> Outcome {
        let (parts, body) = req.into_parts();
        let body = body.map_err(crate::upstream::boxed_error).boxed();
        let request = policy::Request {
            method: &parts.method,
            uri: &parts.uri,
            headers: &parts.headers,
        };
        let mut ex = Exchange::new(self, &parts, body, upgrade);
        let Settled {
            decision, facts, ..
        } = decide(&request, &self.policy, Facts::default(), &mut ex).await;
        let reason = decision.reason.as_str();
        let result = match decision.outcome {
            Err(r) => Err(r),
            Ok(plan) => self.answer(&request, plan, facts, &mut ex).await,
        };
        // Pins still held here belong to a create that was never forwarded.
        ex.release_pins();
        if result.is_err() {
            if let Some(unread) = ex.body.take() {
                drain(unread).await;
            }
        }
        Outcome {
            op: decision.op,
            label: decision.label,
            reason,
            result,
        }
    }

    /// Answers a decided request: the engine's own answer where the plan relays it, else the
    /// plan acted on, and once more with fresh pins where a remembered one was stale.
    async fn answer(
        &self,
        request: &policy::Request<'_>,
        plan: Plan,
        facts: Facts,
        ex: &mut Exchange<'_>,
    ) -> Reply {
        if let Some(need) = &plan.relay {
            return Ok(buffered_response(ex.answer(need)?));
        }
        ex.settle_body(&plan).await?;
        let resp = self.act(&plan, ex).await?;
        let retried = matches!(plan.route, Route::Container { .. } | Route::Network { .. });
        if resp.status() != StatusCode::NOT_FOUND || !retried || ex.remembered.is_empty() {
            return Ok(resp);
        }
        self.with_fresh_pin(request, plan, facts, resp, ex).await
    }

    /// After the engine answered 404 to a request pinned by the name map: perhaps the object
    /// is gone, its event still on the way. Every remembered pin is forgotten and inspected
    /// afresh, once; when that pins the same IDs, the 404 was about the request, not the name,
    /// and it stands (the request is not sent twice).
    async fn with_fresh_pin(
        &self,
        request: &policy::Request<'_>,
        stale: Plan,
        mut facts: Facts,
        resp: Response<Body>,
        ex: &mut Exchange<'_>,
    ) -> Reply {
        ex.forget_remembered(&mut facts);
        let fresh = decide(request, &self.policy, facts, ex)
            .await
            .decision
            .outcome?;
        if let Some(need) = &fresh.relay {
            return Ok(buffered_response(ex.answer(need)?));
        }
        if fresh.pin == stale.pin && fresh.body == stale.body {
            return Ok(resp);
        }
        self.act(&fresh, ex).await
    }

    pub(crate) async fn forward(
        &self,
        parts: &Parts,
        body: Body,
        path_and_query: String,
        client_upgrade: Option<OnUpgrade>,
    ) -> Reply {
        let req = upstream_request(parts, path_and_query, body, client_upgrade.is_some())?;
        self.send_forwarded(req, client_upgrade).await
    }

    /// Sends a request made from the client's and splices an upgrade the engine agreed to.
    pub(crate) async fn send_forwarded(
        &self,
        req: Request<Body>,
        client_upgrade: Option<OnUpgrade>,
    ) -> Reply {
        let mut resp = self.upstream.send(req).await.map_err(upstream_err)?;
        if let Some(client) = client_upgrade {
            if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
                let engine = hyper::upgrade::on(&mut resp);
                let guard = self.serving.inflight.enter();
                tokio::spawn(async move {
                    splice(client, engine).await;
                    drop(guard);
                });
                let (parts, _) = resp.into_parts();
                return Ok(Response::from_parts(parts, upstream::empty()));
            }
        }
        Ok(stream_response(resp))
    }

    /// Under `--require-stack-label`, the engine's 409 over a name (create, rename) names only
    /// the requested name, not the ID of the container that holds it
    /// (`answers::conflict_names_only`).
    pub(crate) async fn conflict_names_only(&self, resp: Response<Body>) -> Response<Body> {
        if !self.policy.create_rules.require_stack_label || resp.status() != StatusCode::CONFLICT {
            return resp;
        }
        let (mut parts, body) = resp.into_parts();
        let bytes = match crate::forward::error_answer(body).await {
            Ok(b) => b,
            Err(refused) => return refused,
        };
        let message = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned));
        let Some(message) = message else {
            // Not dockerd's error shape: nothing the proxy can read is passed on.
            return Refusal::Upstream("unreadable conflict answer".into()).into_response();
        };
        let mut out = serde_json::to_vec(&serde_json::json!({
            "message": filters::conflict_names_only(&message)
        }))
        .unwrap_or_default();
        out.push(b'\n');
        parts.headers.remove(header::CONTENT_LENGTH);
        Response::from_parts(parts, upstream::full(out))
    }

    pub(crate) async fn forward_body(&self, parts: &Parts, bytes: Vec<u8>, path: String) -> Reply {
        let req = json_request(parts, bytes, path, false)?;
        self.send_forwarded(req, None).await
    }

    /// Under `--require-stack-label`, the full IDs of the stack's own (labelled) containers,
    /// which a network's endpoints are checked against (one list from the engine); `None`
    /// without the flag, where an endpoint's name decides.
    pub(crate) async fn own_ids(
        &self,
        version: Option<&str>,
    ) -> Result<Option<filters::OwnIds>, Refusal> {
        if !self.policy.scope.requires_label() {
            return Ok(None);
        }
        let own = self.own_objects(Kind::Container, version).await?;
        Ok(Some(own.into_iter().map(|(id, _)| id).collect()))
    }

    /// A network's inspect answer with `Containers` cut to the stack's own (by endpoint name),
    /// so an own or predefined network does not list other stacks' containers.
    pub(crate) async fn own_endpoints_only(
        &self,
        inspected: Buffered,
        version: Option<&str>,
    ) -> Reply {
        let mut v: Value = serde_json::from_slice(&inspected.body)
            .map_err(|e| Refusal::Upstream(format!("unreadable network inspect answer: {e}")))?;
        let own = self.own_ids(version).await?;
        filters::own_endpoints(&mut v, &self.policy.scope, own.as_ref());
        let mut out = serde_json::to_vec(&v).map_err(|e| Refusal::Upstream(e.to_string()))?;
        out.push(b'\n');
        Ok(buffered_response(Buffered {
            body: Bytes::from(out),
            ..inspected
        }))
    }
}

/// The request head for a body the proxy wrote: its own length, JSON.
pub(crate) fn json_request(
    parts: &Parts,
    bytes: Vec<u8>,
    path: String,
    upgrade: bool,
) -> Result<Request<Body>, Refusal> {
    let mut req = upstream_request(parts, path, upstream::full(bytes), upgrade)?;
    req.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(req)
}

pub(crate) fn upstream_err(e: upstream::UpstreamError) -> Refusal {
    match e {
        upstream::UpstreamError::Busy => Refusal::Busy(e.to_string()),
        e => Refusal::Upstream(e.to_string()),
    }
}
