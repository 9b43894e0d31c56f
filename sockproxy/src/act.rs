//! What the transport does with a final plan: forward it to the path pinned to the checked ID,
//! with the checked body (or the client's stream, or nothing; a create's on the staging paths
//! its bind sources were pinned on, settled by the engine's answer), and shape the answer:
//! lists, events and `/info` cut to the stack's view, an inspect answered with the inspect the
//! check was made on, the engine's errors in the client's words. Every engine call here comes
//! after `evaluate` made the plan final.

use http::{header, Response, StatusCode};
use http_body_util::BodyExt;

use crate::exchange::Exchange;
use crate::forward::{buffered_response, in_client_words, pinned, stream_response};
use crate::forward::{upstream_request, with_query};
use crate::proxy::{json_request, upstream_err, Proxy, Reply};
use crate::upstream;
use sockproxy_policy::{
    ContainerOp, ExecOp, Kind, NetworkOp, ObjRef, Pinned, Plan, Refusal, Route, Sent,
};

/// A final plan for a named object carries its pin; one without is refused, not forwarded
/// unpinned.
fn pin_of(plan: &Plan) -> Result<&Pinned, Refusal> {
    plan.pin
        .as_ref()
        .ok_or_else(|| Refusal::Upstream(format!("{:?} was not pinned", plan.route)))
}

/// The checked body as bytes.
fn checked(plan: &Plan) -> Result<Option<Vec<u8>>, Refusal> {
    match &plan.body {
        Sent::Checked(v) => serde_json::to_vec(v)
            .map(Some)
            .map_err(|e| Refusal::BadRequest(e.to_string())),
        _ => Ok(None),
    }
}

impl Proxy {
    /// Acts on `plan`, whose body the exchange has settled.
    pub(crate) async fn act(&self, plan: &Plan, ex: &mut Exchange<'_>) -> Reply {
        let target = &plan.target;
        let path = with_query(target.path(), &target.query.encode_without(&[]));
        let parts = ex.parts;
        match &plan.route {
            Route::Forward | Route::Volume => {
                self.forward(parts, upstream::empty(), path, None).await
            }
            Route::VolumeList => self.volume_list(parts, target).await,
            Route::CreateNetwork if self.policy.create_rules.network_pool.is_some() => {
                self.create_pooled_network(plan, ex).await
            }
            Route::CreateContainer | Route::CreateNetwork => {
                let body = checked(plan)?.unwrap_or_default();
                // Forwarded: the engine's answer settles the pins. One that never comes
                // (the request failed on the way) leaves them to the next release pass, since
                // only the engine knows whether it made the container.
                let pins = ex.pins.take();
                let resp = self.forward_body(parts, body, path).await?;
                if let Some(pins) = pins {
                    pins.answered(resp.status() == StatusCode::CREATED);
                }
                match plan.route {
                    Route::CreateContainer => Ok(self.conflict_names_only(resp).await),
                    _ => Ok(resp),
                }
            }
            Route::Events => {
                let req = upstream_request(parts, path, upstream::empty(), false)?;
                let resp = self.upstream.send(req).await.map_err(upstream_err)?;
                if resp.status() != StatusCode::OK {
                    return Ok(stream_response(resp));
                }
                let (mut rparts, body) = resp.into_parts();
                rparts.headers.remove(header::CONTENT_LENGTH);
                let filtered = crate::event_stream::Filtered::new(body, self.policy.scope.clone());
                Ok(Response::from_parts(rparts, filtered.boxed()))
            }
            Route::List(kind) => self.list(*kind, parts, plan).await,
            Route::Info => self.info(target.version.as_deref()).await,
            Route::Container { op, target: r, .. } => self.container(*op, r, plan, ex).await,
            Route::Exec { op, .. } => self.exec(*op, plan, ex).await,
            Route::Network { op, target: r, .. } => self.network(*op, r, plan, ex).await,
        }
    }

    async fn container(
        &self,
        cop: ContainerOp,
        r: &ObjRef,
        plan: &Plan,
        ex: &mut Exchange<'_>,
    ) -> Reply {
        let id = pin_of(plan)?;
        if cop == ContainerOp::Inspect {
            // The inspect the check was made on is the answer: no second round trip.
            return Ok(buffered_response(ex.inspected(Kind::Container)?));
        }
        // A rename or remove through this proxy is known before its event arrives: the name
        // map forgets the ID before and after (a lookup racing the request may fill it again).
        let renames = matches!(cop, ContainerOp::Rename | ContainerOp::Remove);
        if renames {
            self.names.evict(Kind::Container, id.id());
        }
        let path = with_query(
            pinned(&plan.target, 1, id),
            &plan.target.query.encode_without(&[]),
        );
        let resp = match (checked(plan)?, &plan.body) {
            (Some(bytes), _) => self.forward_body(ex.parts, bytes, path).await,
            (None, Sent::Stream) => {
                let body = ex.take_body();
                self.forward(ex.parts, body, path, None).await
            }
            (None, _) => {
                let upgrade = ex.upgrade.take().filter(|_| cop == ContainerOp::Attach);
                self.forward(ex.parts, upstream::empty(), path, upgrade)
                    .await
            }
        };
        if renames {
            self.names.evict(Kind::Container, id.id());
        }
        let resp = match resp? {
            resp if cop == ContainerOp::Rename => self.conflict_names_only(resp).await,
            resp => resp,
        };
        Ok(in_client_words(resp, id, r.as_str()).await)
    }

    async fn exec(&self, eop: ExecOp, plan: &Plan, ex: &mut Exchange<'_>) -> Reply {
        let id = pin_of(plan)?;
        let path = with_query(
            pinned(&plan.target, 1, id),
            &plan.target.query.encode_without(&[]),
        );
        let upgrade = ex.upgrade.take().filter(|_| eop == ExecOp::Start);
        match checked(plan)? {
            Some(bytes) => {
                let req = json_request(ex.parts, bytes, path, upgrade.is_some())?;
                self.send_forwarded(req, upgrade).await
            }
            None => {
                self.forward(ex.parts, upstream::empty(), path, upgrade)
                    .await
            }
        }
    }

    async fn network(
        &self,
        nop: NetworkOp,
        r: &ObjRef,
        plan: &Plan,
        ex: &mut Exchange<'_>,
    ) -> Reply {
        let id = pin_of(plan)?;
        let path = with_query(
            pinned(&plan.target, 1, id),
            &plan.target.query.encode_without(&[]),
        );
        match nop {
            NetworkOp::Inspect => {
                let inspected = ex.inspected(Kind::Network)?;
                self.own_endpoints_only(inspected, plan.target.version.as_deref())
                    .await
            }
            NetworkOp::Remove => {
                // A remove through this proxy is known before its event arrives (as a
                // container's).
                self.names.evict(Kind::Network, id.id());
                let resp = self.forward(ex.parts, upstream::empty(), path, None).await;
                self.names.evict(Kind::Network, id.id());
                Ok(in_client_words(resp?, id, r.as_str()).await)
            }
            NetworkOp::Connect | NetworkOp::Disconnect => {
                let body = checked(plan)?.unwrap_or_default();
                self.forward_body(ex.parts, body, path).await
            }
        }
    }
}
