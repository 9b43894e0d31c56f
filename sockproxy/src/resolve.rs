//! Gathering the facts a plan needs, through the engine (I/O only; the answers are read by
//! `sockproxy_policy::answers` and decided by `evaluate`): inspect a container, network or
//! exec instance, and list the stack's own objects (among which `evaluate` resolves an ID
//! prefix, or pins a list filter that names a container).

use http::StatusCode;

use crate::forward::vprefix;
use crate::names::Entry;
use crate::proxy::Proxy;
use crate::upstream::Buffered;
use sockproxy_policy::facts::{self as answers, ExecInfo, Named, Own};
use sockproxy_policy::{
    evaluate, Facts, Inspected, Kind, Need, ObjRef, Pinned, Plan, Refusal, Request,
};

/// Cap on one inspect answer (a network with many endpoints is the largest we read).
const MAX_INSPECT: usize = 8 << 20;

/// A pinned object and the inspect answer the check was made on, or the engine's own answer
/// for a name it does not know, which goes back to the client as it is.
pub type Resolved = Result<(Pinned, Buffered), Buffered>;

/// An object a request names: its own (`other: false`), or another one its body names (a
/// joined network, a connected container: `Facts::Other`). Either is decided by `evaluate`,
/// with each fact the transport gathers for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wanted<'a> {
    pub kind: Kind,
    pub r: &'a ObjRef,
    pub version: Option<&'a str>,
    pub request: &'a Request<'a>,
    pub other: bool,
}

impl Wanted<'_> {
    /// The plan `evaluate` makes with `found` about this object.
    fn decide(
        &self,
        found: &Facts<'_>,
        policy: &sockproxy_policy::Policy,
    ) -> Result<Plan, Refusal> {
        let decision = if self.other {
            let facts = Facts::Other {
                kind: self.kind,
                r: self.r,
                found,
            };
            evaluate(self.request, &facts, policy)
        } else {
            evaluate(self.request, found, policy)
        };
        decision.outcome
    }
}

/// A plan that asks for a fact the transport did not expect (or for none, where a pin was
/// due): refused rather than forwarded unpinned.
fn undecided(need: &Need) -> Refusal {
    Refusal::Upstream(format!("the decision needs {need:?}, not a pin"))
}

/// The pin a plan with its fact carries.
fn pin_of(plan: Plan) -> Result<Pinned, Refusal> {
    plan.pin.ok_or_else(|| undecided(&plan.need))
}

impl Proxy {
    /// Gathers what `evaluate` asks for the object `w` names and decides on it: an ID prefix
    /// by the stack's own objects, then the inspect of the full ID or name.
    pub(crate) async fn resolve(&self, w: Wanted<'_>) -> Result<Resolved, Refusal> {
        let Wanted {
            kind, r, version, ..
        } = w;
        let full = match w.decide(&Facts::None, &self.policy)?.need {
            Need::Own(kind) => {
                let own = self.own_objects(kind, version).await?;
                match w.decide(&Facts::Own(&own), &self.policy)?.need {
                    Need::Object(_, full) => full,
                    other => return Err(undecided(&other)),
                }
            }
            Need::Object(_, named) => named,
            other => return Err(undecided(&other)),
        };
        let stamp = self.names.stamp();
        let v = vprefix(version);
        let path = match kind {
            Kind::Container => format!("{v}/containers/{}/json", full.as_str()),
            Kind::Network => format!("{v}/networks/{}", full.as_str()),
        };
        let answer = self
            .upstream
            .get(&path, MAX_INSPECT)
            .await
            .map_err(crate::proxy::upstream_err)?;
        if answer.status != StatusCode::OK {
            answers::inspect_refused(kind, r, answer.status, &answer.body, &self.policy)?;
            return Ok(Err(answer));
        }
        let named = Named::read(&answer.body)?;
        if let Some(stamp) = stamp {
            self.names
                .fill(kind, stamp, &named.inspected(), &self.policy.scope);
        }
        let pin = self.judge(w, &named.inspected())?;
        Ok(Ok((pin, answer)))
    }

    /// The pin the name map holds for `r`, decided as an inspect's answer would be; `None`
    /// when the map does not hold it (then the caller inspects).
    pub(crate) fn remembered(&self, w: Wanted<'_>) -> Result<Option<Pinned>, Refusal> {
        let found = self.names.lookup(w.kind, w.r);
        if self.name_cache {
            self.metrics.name_lookup(found.is_some());
        }
        let Some(e) = found else {
            return Ok(None);
        };
        self.judge(w, &e.inspected()).map(Some)
    }

    /// Decides on an inspected object through `evaluate`, with the inspect as its fact.
    fn judge(&self, w: Wanted<'_>, ins: &Inspected<'_>) -> Result<Pinned, Refusal> {
        pin_of(w.decide(&Facts::Object(*ins), &self.policy)?)
    }

    /// An exec instance is the stack's when its container is; pinned to the exec's full ID.
    pub(crate) async fn resolve_exec(
        &self,
        request: &Request<'_>,
        id: &str,
        version: Option<&str>,
    ) -> Result<Pinned, Refusal> {
        let v = vprefix(version);
        let answer = self
            .upstream
            .get(&format!("{v}/exec/{id}/json"), MAX_INSPECT)
            .await
            .map_err(crate::proxy::upstream_err)?;
        if answer.status.is_server_error() {
            return Err(Refusal::Upstream(format!(
                "exec inspect answered {}",
                answer.status
            )));
        }
        if answer.status != StatusCode::OK {
            return Err(Refusal::NoSuchExec(id.to_owned()));
        }
        let info = ExecInfo::read(&answer.body)?;
        let by_id = ObjRef::Hex(info.container_id.clone());
        let remembered = self.names.lookup(Kind::Container, &by_id);
        if self.name_cache {
            self.metrics.name_lookup(remembered.is_some());
        }
        let entry = match remembered {
            Some(e) => e,
            None => {
                let stamp = self.names.stamp();
                let container = self
                    .upstream
                    .get(
                        &format!("{v}/containers/{}/json", info.container_id),
                        MAX_INSPECT,
                    )
                    .await
                    .map_err(crate::proxy::upstream_err)?;
                if container.status != StatusCode::OK {
                    return Err(Refusal::NoSuchExec(id.to_owned()));
                }
                let named = Named::read(&container.body)?;
                if let Some(stamp) = stamp {
                    self.names.fill(
                        Kind::Container,
                        stamp,
                        &named.inspected(),
                        &self.policy.scope,
                    );
                }
                Entry::from(&named.inspected())
            }
        };
        let facts = Facts::Exec {
            reported: (&info.id, &info.container_id),
            container: entry.inspected(),
        };
        pin_of(evaluate(request, &facts, &self.policy).outcome?)
    }

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
    /// (`answers::own_list_path` says how it is asked for, `answers::own_objects` what is kept).
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
            .map_err(crate::proxy::upstream_err)?;
        if answer.status != StatusCode::OK {
            return Err(Refusal::Upstream(format!(
                "list answered {}",
                answer.status
            )));
        }
        answers::own_objects(kind, &answer.body, &self.policy.scope)
    }
}
