//! What the proxy does for the allowed plans that name an object (container, exec instance,
//! network): decide on the body first, resolve and pin the object, then forward exactly the
//! checked body to the pinned path. Every engine call here happens after `policy::decide`.

use http::request::Parts;
use hyper::upgrade::OnUpgrade;
use serde_json::Value;

use crate::api::{ContainerOp, ExecOp, NetworkOp, ObjRef};
use crate::body;
use crate::canon::Target;
use crate::forward::{buffered_response, pinned, with_query};
use crate::policy;
use crate::proxy::{in_client_words, json_parts, Proxy};
use crate::refusal::Refusal;
use crate::scope::{Access, Kind};
use crate::upstream::{self, Body};

/// Query parameters of `PUT /containers/{id}/archive` (dockerd's `putContainersArchive`).
const ARCHIVE_PUT_PARAMS: [&str; 3] = ["path", "noOverwriteDirNonDir", "copyUIDGID"];

type Answer = Result<http::Response<Body>, Refusal>;

impl Proxy {
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn container(
        &self,
        cop: ContainerOp,
        r: &ObjRef,
        access: Access,
        op: &str,
        parts: Parts,
        body: &mut Option<Body>,
        target: &Target,
        upgrade: Option<OnUpgrade>,
    ) -> Answer {
        let mut take = || body.take().unwrap_or_else(upstream::empty);
        let upload = cop == ContainerOp::Archive && parts.method == http::Method::PUT;
        // Bodies are decided before anything is asked of the engine.
        let checked = match cop {
            ContainerOp::ExecCreate => Some(crate::write_rules::exec_create(
                body::read_checked(take()).await?,
            )?),
            ContainerOp::Update => Some(crate::write_rules::update(
                body::read_checked(take()).await?,
            )?),
            // The archive upload's body is the tar stream itself; its head is checked.
            ContainerOp::Archive if upload => {
                archive_put_query(target)?;
                None
            }
            _ => {
                body::no_body(take()).await?;
                None
            }
        };
        let version = target.version.as_deref();
        let (id, inspected) = match self
            .resolve(Kind::Container, access, op, r, version)
            .await?
        {
            Ok(found) => found,
            Err(engine) => return Ok(buffered_response(engine)),
        };
        if cop == ContainerOp::Inspect {
            // The inspect the check was made on is the answer: no second round trip.
            return Ok(buffered_response(inspected));
        }
        let path = with_query(pinned(target, 1, &id), &target.query.encode_without(&[]));
        let resp = match checked {
            Some(v) => self.forward_json(parts, &v, path).await?,
            None => {
                let upgrade = upgrade.filter(|_| cop == ContainerOp::Attach);
                let sent = if upload { take() } else { upstream::empty() };
                self.forward(parts, sent, path, upgrade).await?
            }
        };
        Ok(in_client_words(resp, &id, r.as_str()).await)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn exec(
        &self,
        eop: ExecOp,
        id: &str,
        access: Access,
        parts: Parts,
        body: &mut Option<Body>,
        target: &Target,
        upgrade: Option<OnUpgrade>,
    ) -> Answer {
        let raw = body.take().unwrap_or_else(upstream::empty);
        let checked = if eop == ExecOp::Start {
            Some(crate::write_rules::exec_start(
                body::read_checked(raw).await?,
            )?)
        } else {
            body::no_body(raw).await?;
            None
        };
        let exec_id = self
            .resolve_exec(access, id, target.version.as_deref())
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
                self.forward(json_parts(parts), upstream::full(bytes), path, upgrade)
                    .await
            }
            None => self.forward(parts, upstream::empty(), path, upgrade).await,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn network(
        &self,
        nop: NetworkOp,
        r: &ObjRef,
        access: Access,
        op: &str,
        parts: Parts,
        body: &mut Option<Body>,
        target: &Target,
    ) -> Answer {
        let raw = body.take().unwrap_or_else(upstream::empty);
        let version = target.version.as_deref();
        let (id, inspected) = match self.resolve(Kind::Network, access, op, r, version).await? {
            Ok(found) => found,
            Err(engine) => return Ok(buffered_response(engine)),
        };
        let path = with_query(pinned(target, 1, &id), &target.query.encode_without(&[]));
        match nop {
            NetworkOp::Inspect => {
                body::no_body(raw).await?;
                self.own_endpoints_only(inspected)
            }
            NetworkOp::Remove => {
                body::no_body(raw).await?;
                let resp = self.forward(parts, upstream::empty(), path, None).await?;
                Ok(in_client_words(resp, &id, r.as_str()).await)
            }
            NetworkOp::Connect | NetworkOp::Disconnect => {
                let (container, mut map) = crate::write_rules::network_attach(
                    op,
                    body::read_checked(raw).await?,
                    &self.scope,
                    &self.create_rules,
                )?;
                let cref = ObjRef::parse(&container).ok_or_else(|| {
                    Refusal::BadRequest(format!("{op}: Container {container:?} is not a reference"))
                })?;
                policy::check_name(Kind::Container, Access::Change, op, &cref, &self.scope)?;
                let cid = match self
                    .resolve(Kind::Container, Access::Change, op, &cref, version)
                    .await?
                {
                    Ok((cid, _)) => cid,
                    Err(engine) => return Ok(buffered_response(engine)),
                };
                map.insert("Container".into(), Value::String(cid.id().to_owned()));
                let bytes =
                    serde_json::to_vec(&map).map_err(|e| Refusal::BadRequest(e.to_string()))?;
                self.forward_body(parts, bytes, path).await
            }
        }
    }
}

/// An upload names where to put the tar and two switches; nothing else reaches the engine.
fn archive_put_query(target: &Target) -> Result<(), Refusal> {
    match target
        .query
        .keys()
        .find(|k| !ARCHIVE_PUT_PARAMS.contains(k))
    {
        Some(k) => Err(Refusal::Setting {
            op: "containers.archive".into(),
            why: format!("query parameter {k} is not allowed for this stack"),
        }),
        None => Ok(()),
    }
}
