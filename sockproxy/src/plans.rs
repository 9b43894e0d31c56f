//! What the proxy does for the allowed plans that name an object (container, exec instance,
//! network): decide on the body first, resolve and pin the object, then forward exactly the
//! checked body to the pinned path. Every engine call here happens after `policy::decide`.

use http::request::Parts;
use http::StatusCode;
use hyper::upgrade::OnUpgrade;
use serde_json::Value;

use crate::body;
use crate::exchange::Exchange;
use crate::forward::in_client_words;
use crate::forward::{buffered_response, pinned, with_query};
use crate::proxy::{json_request, Proxy};
use crate::resolve::Wanted;
use crate::upstream::{self, Body, Buffered};
use sockproxy_policy::bodies;
use sockproxy_policy::{
    self as policy, ContainerOp, ExecOp, Kind, NetworkOp, ObjRef, Pinned, Refusal, Target,
};

use crate::proxy::Reply;

/// A container request once its body is decided: sent to a pinned ID by `send_pinned`.
#[derive(Debug, Clone, Copy)]
struct ToContainer<'a> {
    cop: ContainerOp,
    parts: &'a Parts,
    checked: &'a Option<Value>,
    target: &'a Target,
}

impl Proxy {
    pub(crate) async fn container(&self, cop: ContainerOp, r: &ObjRef, ex: Exchange<'_>) -> Reply {
        let Exchange {
            parts,
            body,
            target,
            upgrade,
            ..
        } = ex;
        let mut take = || body.take().unwrap_or_else(upstream::empty);
        let upload = cop == ContainerOp::Archive && parts.method == http::Method::PUT;
        // Bodies are decided before anything is asked of the engine.
        let checked = match cop {
            ContainerOp::ExecCreate => Some(bodies::exec_create(
                body::read_checked(take(), self.policy.create_rules.spend.max_json_keys).await?,
            )?),
            ContainerOp::Update => Some(bodies::update(
                body::read_checked(take(), self.policy.create_rules.spend.max_json_keys).await?,
                target.version.as_deref(),
                &self.policy.create_rules.spend,
            )?),
            // The archive upload's body is the tar stream itself; its head (query parameters:
            // `policy::decide`) is checked.
            ContainerOp::Archive if upload => None,
            _ => {
                body::no_body(take()).await?;
                None
            }
        };
        let version = target.version.as_deref();
        // A pin the name map holds saves the inspect, for a request that can be sent twice: a
        // streamed upload or an upgrade cannot be, and an inspect is itself the answer.
        // An archive request is decided on the engine's version, which the inspect tells.
        let repeatable = !upload
            && upgrade.is_none()
            && !matches!(cop, ContainerOp::Inspect | ContainerOp::Archive);
        let to = ToContainer {
            cop,
            parts: &parts,
            checked: &checked,
            target,
        };
        // The request's own object: its pin is `evaluate`'s, with the inspect as the fact.
        let request = policy::Request {
            method: &parts.method,
            uri: &parts.uri,
            headers: &parts.headers,
        };
        let own = Wanted {
            kind: Kind::Container,
            r,
            version,
            request: &request,
            other: false,
        };
        let mut stale = None;
        if repeatable {
            if let Some(id) = self.remembered(own)? {
                let resp = self.send_pinned(to, &id, upstream::empty(), None).await?;
                if resp.status() != StatusCode::NOT_FOUND {
                    return Ok(in_client_words(resp, &id, r.as_str()).await);
                }
                // Perhaps gone, with its event still on the way: inspect afresh, once.
                self.names.evict(Kind::Container, id.id());
                stale = Some((id, resp));
            }
        }
        let (id, inspected) = match self.resolve(own).await? {
            Ok(found) => found,
            Err(engine) => return Ok(buffered_response(engine)),
        };
        if cop == ContainerOp::Inspect {
            // The inspect the check was made on is the answer: no second round trip.
            return Ok(buffered_response(inspected));
        }
        if cop == ContainerOp::Archive {
            let api = inspected.headers.get("api-version");
            sockproxy_policy::facts::archive_on(api.and_then(|v| v.to_str().ok()))?;
        }
        let resp = match stale {
            // The same object: the engine's 404 was about the request, not the name.
            Some((old, resp)) if old == id => resp,
            _ => {
                let upgrade = upgrade.filter(|_| cop == ContainerOp::Attach);
                let sent = if upload { take() } else { upstream::empty() };
                self.send_pinned(to, &id, sent, upgrade).await?
            }
        };
        Ok(in_client_words(resp, &id, r.as_str()).await)
    }

    /// Sends a container request to the pinned ID: the checked body when there is one, else
    /// `sent`.
    async fn send_pinned(
        &self,
        to: ToContainer<'_>,
        id: &Pinned,
        sent: Body,
        upgrade: Option<OnUpgrade>,
    ) -> Reply {
        let ToContainer {
            cop,
            parts,
            checked,
            target,
        } = to;
        // A rename or remove through this proxy is known before its event arrives: the name
        // map forgets the ID before and after (a lookup racing the request may fill it again).
        let renames = matches!(cop, ContainerOp::Rename | ContainerOp::Remove);
        if renames {
            self.names.evict(Kind::Container, id.id());
        }
        let path = with_query(pinned(target, 1, id), &target.query.encode_without(&[]));
        let resp = match checked {
            Some(v) => self.forward_json(parts, v, path).await,
            None => self.forward(parts, sent, path, upgrade).await,
        };
        if renames {
            self.names.evict(Kind::Container, id.id());
        }
        match resp {
            Ok(resp) if cop == ContainerOp::Rename => Ok(self.conflict_names_only(resp).await),
            other => other,
        }
    }

    pub(crate) async fn exec(&self, eop: ExecOp, id: &str, ex: Exchange<'_>) -> Reply {
        let Exchange {
            parts,
            body,
            target,
            upgrade,
            ..
        } = ex;
        let raw = body.take().unwrap_or_else(upstream::empty);
        let checked = if eop == ExecOp::Start {
            Some(bodies::exec_start(
                body::read_checked(raw, self.policy.create_rules.spend.max_json_keys).await?,
            )?)
        } else {
            body::no_body(raw).await?;
            None
        };
        let request = policy::Request {
            method: &parts.method,
            uri: &parts.uri,
            headers: &parts.headers,
        };
        let exec_id = self
            .resolve_exec(&request, id, target.version.as_deref())
            .await?;
        let path = with_query(
            pinned(target, 1, &exec_id),
            &target.query.encode_without(&[]),
        );
        let upgrade = upgrade.filter(|_| eop == ExecOp::Start);
        match checked {
            Some(v) => {
                let bytes =
                    serde_json::to_vec(&v).map_err(|e| Refusal::BadRequest(e.to_string()))?;
                let req = json_request(&parts, bytes, path, upgrade.is_some())?;
                self.send_forwarded(req, upgrade).await
            }
            None => self.forward(&parts, upstream::empty(), path, upgrade).await,
        }
    }

    pub(crate) async fn network(&self, nop: NetworkOp, r: &ObjRef, ex: Exchange<'_>) -> Reply {
        let Exchange {
            op,
            parts,
            body,
            target,
            ..
        } = ex;
        let raw = body.take().unwrap_or_else(upstream::empty);
        let version = target.version.as_deref();
        let at = |id: &Pinned| with_query(pinned(target, 1, id), &target.query.encode_without(&[]));
        let request = policy::Request {
            method: &parts.method,
            uri: &parts.uri,
            headers: &parts.headers,
        };
        let net = Wanted {
            kind: Kind::Network,
            r,
            version,
            request: &request,
            other: false,
        };
        if nop == NetworkOp::Inspect {
            let (_, inspected) = match self.resolve(net).await? {
                Ok(found) => found,
                Err(engine) => return Ok(buffered_response(engine)),
            };
            body::no_body(raw).await?;
            return self.own_endpoints_only(inspected, version).await;
        }
        let (mut id, net_remembered) = match self.pin(net).await? {
            Ok(pin) => pin,
            Err(engine) => return Ok(buffered_response(engine)),
        };
        if nop == NetworkOp::Remove {
            body::no_body(raw).await?;
            // A remove through this proxy is known before its event arrives (as in
            // `send_pinned`).
            self.names.evict(Kind::Network, id.id());
            let mut resp = self
                .forward(&parts, upstream::empty(), at(&id), None)
                .await?;
            self.names.evict(Kind::Network, id.id());
            if net_remembered && resp.status() == StatusCode::NOT_FOUND {
                // Perhaps gone, with its event still on the way: inspect afresh, once.
                let fresh = match self.fresh_pin(net).await? {
                    Ok(fresh) => fresh,
                    Err(engine) => return Ok(buffered_response(engine)),
                };
                if fresh != id {
                    resp = self
                        .forward(&parts, upstream::empty(), at(&fresh), None)
                        .await?;
                    id = fresh;
                }
            }
            return Ok(in_client_words(resp, &id, r.as_str()).await);
        }
        let (container, mut map) = bodies::network_attach(
            op,
            body::read_checked(raw, self.policy.create_rules.spend.max_json_keys).await?,
            &self.policy.scope,
            &self.policy.create_rules,
        )?;
        let cref = ObjRef::parse(&container).ok_or_else(|| {
            Refusal::BadRequest(format!("{op}: Container {container:?} is not a reference"))
        })?;
        // The container is changed too: `evaluate` decides on it as another object the
        // request names.
        let joined = Wanted {
            kind: Kind::Container,
            r: &cref,
            other: true,
            ..net
        };
        let (cid, c_remembered) = match self.pin(joined).await? {
            Ok(pin) => pin,
            Err(engine) => return Ok(buffered_response(engine)),
        };
        let mut attach = |cid: &Pinned| {
            map.insert("Container".into(), Value::String(cid.id().to_owned()));
            serde_json::to_vec(&map).map_err(|e| Refusal::BadRequest(e.to_string()))
        };
        let resp = self.forward_body(&parts, attach(&cid)?, at(&id)).await?;
        if resp.status() != StatusCode::NOT_FOUND || !(net_remembered || c_remembered) {
            return Ok(resp);
        }
        // Either remembered pin may be stale: each inspected afresh, once.
        let mut fresh_net = id.clone();
        if net_remembered {
            match self.repin(net, &id).await? {
                Ok(f) => fresh_net = f,
                Err(engine) => return Ok(buffered_response(engine)),
            }
        }
        let mut fresh_c = cid.clone();
        if c_remembered {
            match self.repin(joined, &cid).await? {
                Ok(f) => fresh_c = f,
                Err(engine) => return Ok(buffered_response(engine)),
            }
        }
        if fresh_net == id && fresh_c == cid {
            return Ok(resp);
        }
        self.forward_body(&parts, attach(&fresh_c)?, at(&fresh_net))
            .await
    }

    /// Under `--require-stack-label`, each of the stack's networks a checked create joins must
    /// carry the stack's label, decided by `evaluate` as a change to that network
    /// (`Facts::Other`); `Some` is the engine's own answer for a network it does not know. The name goes on to
    /// the engine as it was checked: a labelled network cannot be renamed, and another of the
    /// same name would make the name ambiguous to the engine, which then refuses the create.
    pub(crate) async fn check_joined_networks(
        &self,
        request: &policy::Request<'_>,
        op: &str,
        out: &serde_json::Value,
        version: Option<&str>,
    ) -> Result<Option<Buffered>, Refusal> {
        if !self.policy.create_rules.require_stack_label {
            return Ok(None);
        }
        for name in bodies::joined_networks(out) {
            let r = ObjRef::parse(&name).ok_or_else(|| {
                Refusal::BadRequest(format!("{op}: network {name:?} is not a reference"))
            })?;
            let w = Wanted {
                kind: Kind::Network,
                r: &r,
                version,
                request,
                other: true,
            };
            if let Err(engine) = self.pin(w).await? {
                return Ok(Some(engine));
            }
        }
        Ok(None)
    }

    /// The pin for what `w` names, and whether it came from the name map; `Err` is the
    /// engine's own answer for a name it does not know.
    async fn pin(&self, w: Wanted<'_>) -> Result<Result<(Pinned, bool), Buffered>, Refusal> {
        if let Some(id) = self.remembered(w)? {
            return Ok(Ok((id, true)));
        }
        Ok(self.fresh_pin(w).await?.map(|id| (id, false)))
    }

    /// A pin from a fresh inspect, or the engine's own answer for a name it does not know.
    async fn fresh_pin(&self, w: Wanted<'_>) -> Result<Result<Pinned, Buffered>, Refusal> {
        Ok(self.resolve(w).await?.map(|(id, _)| id))
    }

    /// After the engine answered 404 to a remembered pin: forget it and inspect afresh.
    async fn repin(
        &self,
        w: Wanted<'_>,
        stale: &Pinned,
    ) -> Result<Result<Pinned, Buffered>, Refusal> {
        self.names.evict(w.kind, stale.id());
        self.fresh_pin(w).await
    }
}
