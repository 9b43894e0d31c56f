//! One request on its way through the transport (`Exchange`), and the I/O that gathers the
//! facts its plan needs (`decide::Gather`): its JSON body, read bounded; an inspect of a
//! container, network or exec instance through `upstream`, or the name map's entry in its
//! place; the stack's own objects, listed; a create's bind sources, pinned (`pins`). The
//! answers are read by `sockproxy_policy::facts` and decided by `evaluate`; nothing here
//! decides.

use http::request::Parts;
use http::StatusCode;
use hyper::upgrade::OnUpgrade;

use crate::decide::Gather;
use crate::forward::vprefix;
use crate::proxy::{upstream_err, Proxy};
use crate::upstream::{self, Body, Buffered};
use sockproxy_policy::facts::{self as answers, ExecInfo, Named, Own};
use sockproxy_policy::{
    ContainerOp, Fact, Facts, Found, Kind, Need, NetworkOp, ObjRef, Plan, Refusal, Route, Sent,
};

/// Cap on one inspect answer (a network with many endpoints is the largest we read).
const MAX_INSPECT: usize = 8 << 20;

/// One request on its way: what the client sent, its body until it is read or forwarded (it
/// stays in its slot so a refusal on the way can drain it), and what gathering kept for
/// acting: the engine's inspect answers (an inspect's own answer, and the engine's answer a
/// plan relays), the facts the name map gave (taken back when the engine says 404), and a
/// create's pinned bind sources until the create is forwarded.
#[derive(Debug)]
pub(crate) struct Exchange<'a> {
    pub proxy: &'a Proxy,
    pub parts: &'a Parts,
    pub body: Option<Body>,
    pub upgrade: Option<OnUpgrade>,
    /// Facts the name map gave: the need, and the kind and ID its entry pinned.
    pub remembered: Vec<(Need, Kind, String)>,
    /// Inspects the engine answered, by the need they answered.
    answers: Vec<(Need, Buffered)>,
    /// Every inspect goes to the engine (after a remembered pin was stale).
    fresh: bool,
    /// The bind sources pinned for a create (`Need::BindPins`): `act` takes them as it
    /// forwards the create, and the engine's answer settles them; still here when the request
    /// ends, the create was not forwarded and they are released (`release_pins`).
    pub pins: Option<crate::pins::PinSet<'a>>,
    /// The stack's lock, once a fact gathered under it (`Need::StackNetwork`, `Need::Usage`,
    /// `Need::Subnets`):
    /// held until the request is answered.
    stack_lock: Option<crate::stack_lock::Held>,
}

impl<'a> Exchange<'a> {
    pub fn new(proxy: &'a Proxy, parts: &'a Parts, body: Body, upgrade: Option<OnUpgrade>) -> Self {
        Self {
            proxy,
            parts,
            body: Some(body),
            upgrade,
            remembered: vec![],
            answers: vec![],
            fresh: false,
            pins: None,
            stack_lock: None,
        }
    }

    /// Releases the bind sources pinned for a create that was not forwarded (refused after
    /// they were pinned, or failed before it was sent).
    pub fn release_pins(&mut self) {
        if let Some(set) = self.pins.take() {
            set.answered(false);
        }
    }

    /// The client's body, for a plan that forwards it.
    pub fn take_body(&mut self) -> Body {
        self.body.take().unwrap_or_else(upstream::empty)
    }

    /// Before anything is asked of the engine for a plan whose endpoint takes no body: the
    /// client sent none (`body::no_body`).
    pub async fn settle_body(&mut self, plan: &Plan) -> Result<(), Refusal> {
        if plan.body == Sent::Nothing {
            if let Some(body) = self.body.take() {
                let limit = self.proxy.serving.body_timeout;
                crate::body::in_time(limit, crate::body::no_body(body)).await?;
            }
        }
        Ok(())
    }

    /// The stack's lock, taken once for the request.
    async fn hold_stack_lock(&mut self) -> Result<(), Refusal> {
        if self.stack_lock.is_none() {
            self.stack_lock = Some(self.proxy.stack_lock.lock().await?);
        }
        Ok(())
    }

    /// The engine's answer to `need`'s inspect, as it gave it.
    pub fn answer(&mut self, need: &Need) -> Result<Buffered, Refusal> {
        let at = self.answers.iter().position(|(n, _)| n == need);
        match at {
            Some(i) => Ok(self.answers.swap_remove(i).1),
            None => Err(Refusal::Upstream(format!("no answer kept for {need:?}"))),
        }
    }

    /// The last inspect of a `kind` the engine answered: the request's own object's.
    pub fn inspected(&mut self, kind: Kind) -> Result<Buffered, Refusal> {
        let need = self
            .answers
            .iter()
            .rev()
            .map(|(n, _)| n)
            .find(|n| matches!(n, Need::Object(k, _) if *k == kind))
            .cloned()
            .ok_or_else(|| Refusal::Upstream("no inspect kept".into()))?;
        self.answer(&need)
    }

    /// After a remembered pin was stale: every fact the name map gave is forgotten (in the map
    /// and in `facts`), and every inspect from now on goes to the engine.
    pub fn forget_remembered(&mut self, facts: &mut Facts) {
        for (need, kind, id) in self.remembered.drain(..) {
            self.proxy.names.evict(kind, &id);
            facts.forget(&need);
        }
        self.fresh = true;
    }

    /// Whether the name map may answer an inspect for this plan instead of the engine: for a
    /// request that can be sent twice (a streamed upload or an upgrade cannot be), and not for
    /// an inspect, whose answer is the inspect itself, nor an archive request, decided on the
    /// engine's version the inspect tells. Nor for the full ID an ID prefix was resolved to.
    fn may_remember(&self, plan: &Plan, kind: Kind, facts: &Facts) -> bool {
        let route = match &plan.route {
            Route::Container { op, .. } => {
                self.upgrade.is_none() && !matches!(op, ContainerOp::Inspect | ContainerOp::Archive)
            }
            Route::Network { op, .. } => *op != NetworkOp::Inspect,
            Route::Exec { .. } | Route::CreateContainer => true,
            _ => false,
        };
        route && !self.fresh && !facts.has(&Need::Own(kind))
    }

    async fn inspect(
        &mut self,
        need: &Need,
        (kind, r): (Kind, &ObjRef),
        version: Option<&str>,
        remember: bool,
    ) -> Result<Fact, Refusal> {
        let proxy = self.proxy;
        if remember {
            let found = proxy.names.lookup(kind, r);
            if proxy.name_cache {
                proxy.metrics.name_lookup(found.is_some());
            }
            if let Some(found) = found {
                self.remembered.push((need.clone(), kind, found.id.clone()));
                return Ok(Fact::Object {
                    found,
                    engine_api: None,
                });
            }
        }
        let stamp = proxy.names.stamp();
        let v = vprefix(version);
        let path = match kind {
            Kind::Container => format!("{v}/containers/{}/json", r.as_str()),
            Kind::Network => format!("{v}/networks/{}", r.as_str()),
        };
        let answer = proxy
            .upstream
            .get(&path, MAX_INSPECT)
            .await
            .map_err(upstream_err)?;
        let fact = if answer.status == StatusCode::OK {
            let named = Named::read(&answer.body)?;
            if let Some(stamp) = stamp {
                proxy
                    .names
                    .fill(kind, stamp, &named.inspected(), &proxy.policy.scope);
            }
            let engine_api = answer.headers.get("api-version");
            Fact::Object {
                found: Found::from(&named.inspected()),
                engine_api: engine_api.and_then(|v| v.to_str().ok()).map(str::to_owned),
            }
        } else {
            Fact::Absent {
                status: answer.status,
                body: answer.body.clone(),
            }
        };
        self.answers.push((need.clone(), answer));
        Ok(fact)
    }

    async fn inspect_exec(&self, id: &str, version: Option<&str>) -> Result<Fact, Refusal> {
        let v = vprefix(version);
        let answer = self
            .proxy
            .upstream
            .get(&format!("{v}/exec/{id}/json"), MAX_INSPECT)
            .await
            .map_err(upstream_err)?;
        if answer.status != StatusCode::OK {
            return Ok(Fact::Absent {
                status: answer.status,
                body: answer.body,
            });
        }
        let info = ExecInfo::read(&answer.body)?;
        Ok(Fact::Exec {
            id: info.id,
            container_id: info.container_id,
        })
    }
}

impl Gather for Exchange<'_> {
    async fn gather(&mut self, plan: &Plan, facts: &Facts) -> Result<Fact, Refusal> {
        self.settle_body(plan).await?;
        let version = plan.target.version.as_deref();
        match &plan.need {
            Need::Body => {
                let max_keys = self.proxy.policy.create_rules.spend.max_json_keys;
                let body = self.take_body();
                let limit = self.proxy.serving.body_timeout;
                let read = crate::body::read_json(body, max_keys);
                Ok(Fact::Body(crate::body::in_time(limit, read).await?))
            }
            Need::StackNetwork => {
                self.hold_stack_lock().await?;
                crate::stack_facts::stack_network(self.proxy, version).await
            }
            Need::Usage => {
                self.hold_stack_lock().await?;
                crate::stack_facts::usage(self.proxy, version).await
            }
            Need::Subnets => {
                self.hold_stack_lock().await?;
                crate::stack_facts::subnets(self.proxy, version).await
            }
            Need::Own(kind) => {
                let own = self.proxy.own_objects(*kind, version).await?;
                Ok(Fact::Own(own))
            }
            Need::Object(kind, r) => {
                let remember = self.may_remember(plan, *kind, facts);
                self.inspect(&plan.need, (*kind, r), version, remember)
                    .await
            }
            Need::Exec(id) => self.inspect_exec(id, version).await,
            Need::BindPins(sources) => {
                // Pinned again only if the sources changed between evaluations: the earlier
                // ones go first.
                self.release_pins();
                let proxy = self.proxy;
                let set =
                    crate::pins::for_create(proxy.pins.as_deref(), sources, &proxy.policy.stack)?;
                let staging = set.staging.clone();
                self.pins = Some(set);
                Ok(Fact::BindPins(staging))
            }
            Need::Nothing => Err(Refusal::Upstream("nothing to gather".into())),
        }
    }
}

impl Proxy {
    /// `(full ID, name)` of every container (all states) or network the stack sees.
    pub(crate) async fn own_objects(
        &self,
        kind: Kind,
        version: Option<&str>,
    ) -> Result<Vec<(String, String)>, Refusal> {
        Ok(self
            .own_listed(kind, version)
            .await?
            .into_iter()
            .map(|o| (o.id, o.name))
            .collect())
    }

    /// Every container (all states) the stack sees, or every network it may read
    /// (`facts::own_list_path` says how it is asked for, `facts::own_objects` what is kept).
    pub(crate) async fn own_listed(
        &self,
        kind: Kind,
        version: Option<&str>,
    ) -> Result<Vec<Own>, Refusal> {
        let v = vprefix(version);
        let path = answers::own_list_path(&v, kind, &self.policy);
        let answer = self
            .upstream
            .get(&path, self.serving.max_list_bytes)
            .await
            .map_err(upstream_err)?;
        if answer.status != StatusCode::OK {
            return Err(Refusal::Upstream(format!(
                "list answered {}",
                answer.status
            )));
        }
        answers::own_objects(kind, &answer.body, &self.policy.scope)
    }
}
