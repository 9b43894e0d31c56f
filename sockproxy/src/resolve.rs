//! Gathering the facts a plan needs, through the engine (I/O only; the answers are read by
//! `sockproxy_policy::answers` and decided by `evaluate` or `pinning`): inspect a container,
//! network or exec instance, resolve an ID prefix among the stack's own objects, and list the
//! stack's own objects for list filters that name one.

use http::StatusCode;

use crate::forward::vprefix;
use crate::names::Entry;
use crate::proxy::Proxy;
use crate::upstream::Buffered;
use sockproxy_policy::answers::{self, ExecInfo, Named, Own};
use sockproxy_policy::evaluate::{evaluate, Decision, Facts, Request};
use sockproxy_policy::pinning::{self, Inspected, Pinned};
use sockproxy_policy::reference::ObjRef;
use sockproxy_policy::refusal::Refusal;
use sockproxy_policy::scope::{Access, Kind};

/// Cap on one inspect answer (a network with many endpoints is the largest we read).
const MAX_INSPECT: usize = 8 << 20;

/// A pinned object and the inspect answer the check was made on, or the engine's own answer
/// for a name it does not know, which goes back to the client as it is.
pub type Resolved = Result<(Pinned, Buffered), Buffered>;

/// What a request names, and what it wants to do with it. `request` is set for the object the
/// request itself names: its pin is `evaluate`'s, with the inspect as the fact.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wanted<'a> {
    pub kind: Kind,
    pub access: Access,
    pub op: &'a str,
    pub r: &'a ObjRef,
    pub version: Option<&'a str>,
    pub request: Option<&'a Request<'a>>,
}

/// The pin a decision with its fact gave; an allowed plan without one is a fact that did not
/// reach the decision, refused rather than forwarded unpinned.
fn pin_of(decision: Decision) -> Result<Pinned, Refusal> {
    decision
        .outcome?
        .pin
        .ok_or_else(|| Refusal::Upstream("the decision pinned nothing".into()))
}

impl Proxy {
    /// Inspects `r` and decides on the canonical name. An ID prefix is first resolved among
    /// the stack's own objects; a full ID or a name is inspected as it is.
    pub(crate) async fn resolve(&self, w: Wanted<'_>) -> Result<Resolved, Refusal> {
        let Wanted {
            kind, r, version, ..
        } = w;
        let full = match r {
            ObjRef::Hex(prefix) if !sockproxy_policy::reference::is_full_id(prefix) => {
                let own = self.own_objects(kind, version).await?;
                pinning::own_prefix(kind, prefix, &own)?
            }
            _ => r.as_str().to_owned(),
        };
        let stamp = self.names.stamp();
        let v = vprefix(version);
        let path = match kind {
            Kind::Container => format!("{v}/containers/{full}/json"),
            Kind::Network => format!("{v}/networks/{full}"),
        };
        let answer = self
            .upstream
            .get(&path, MAX_INSPECT)
            .await
            .map_err(crate::proxy::upstream_err)?;
        if answer.status != StatusCode::OK {
            pinning::inspect_failed(kind, r, answer.status, &answer.body)?;
            if let Some(absent) = pinning::not_found(kind, r, answer.status, &self.policy.rules()) {
                return Err(absent);
            }
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

    /// Decides on an inspected object: the request's own through `evaluate`, with the inspect
    /// as its fact; another the request names (a joined network, a connected container) by
    /// `pinning::inspected`.
    fn judge(&self, w: Wanted<'_>, ins: &Inspected<'_>) -> Result<Pinned, Refusal> {
        match w.request {
            Some(request) => pin_of(evaluate(request, &Facts::Object(*ins), &self.policy)),
            None => pinning::inspected(w.kind, w.access, w.op, w.r, ins, &self.policy.rules()),
        }
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
        pin_of(evaluate(request, &facts, &self.policy))
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
            .get(&path, self.max_list_bytes)
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
