//! The seam between the policy and the transport: `evaluate(request, facts, policy)`, a
//! decision that resumes. The transport hands over a request head and every fact its I/O has
//! found so far (`Facts`: the request's JSON body, inspects, the stack's own objects); the
//! answer is a `Decision`: a `Plan` to act on, or the `Refusal` to send, and the fixed
//! `Reason` the decision log line carries. A plan that still needs a fact says which
//! (`Plan::need`); the transport gathers it, adds it to the facts and evaluates again, until the
//! plan needs nothing. Only then does it carry the `Pinned` ID the forwarded path is made from,
//! and the checked body that is forwarded instead of the client's (a create's with each host
//! path it binds on the staging path the transport pinned it on: `Need::BindPins`). The
//! route's steps, in the order they ask for facts, are `steps`'.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::Value;

use crate::api;
use crate::bind_pins::BindSource;
use crate::canon::{self, Target};
use crate::create_rules::{CreateRules, HostPaths, NoPaths};
use crate::pinning::Rules;
use crate::policy::{self, Route};
use crate::reference::ObjRef;
use crate::refusal::Refusal;
use crate::scope::{Kind, Scope};
use crate::steps::{self, Stop};

/// The facts' and the plan's types: `Pinned` is made only by this crate's pinning rules.
pub use crate::pinning::{Inspected, Pinned};

/// A request head as the client sent it; its body, when the plan needs it, is a fact.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a Method,
    pub uri: &'a Uri,
    pub headers: &'a HeaderMap,
}

/// What the operator decided a stack may do; read by every decision, changed by none.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The stack's names (its prefix, restricted mode, `--require-stack-label`'s label).
    pub scope: Scope,
    /// The stack's name (`--stack`), stamped on what it creates.
    pub stack: String,
    /// What creates and updates may ask for, and what a stack may spend.
    pub create_rules: CreateRules,
    /// Normalized references `--allow-image` lets the stack pull.
    pub allow_images: Vec<String>,
    /// Requests naming an older `/vX.Y` are refused before anything else.
    pub min_api_version: (u32, u32),
    /// The host as the proxy sees it, which a create's bind sources are checked on.
    pub host: Host,
}

/// The host's side of a create's check: the engine's socket (never a bind source) and the
/// filesystem a bind source is walked on, both as the proxy sees them.
#[derive(Debug, Clone)]
pub struct Host {
    pub engine_socket: PathBuf,
    pub paths: Arc<dyn HostPaths>,
}

impl Host {
    /// A host whose paths are never read (every bind source is unreadable): for decisions
    /// made away from the proxy (tests, properties).
    pub fn unread() -> Self {
        Self {
            engine_socket: PathBuf::from("/run/docker.sock"),
            paths: Arc::new(NoPaths),
        }
    }
}

impl Policy {
    /// What the pinning rules read.
    pub(crate) fn rules(&self) -> Rules<'_> {
        Rules {
            scope: &self.scope,
            require_stack_label: self.create_rules.require_stack_label,
            stack: &self.stack,
        }
    }
}

/// What the transport's I/O found so far, each fact the answer to one `Need`. Facts nobody
/// asked for are never read.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    found: Vec<(Need, Fact)>,
}

impl Facts {
    /// Adds the fact `need` asked for (replacing one given before).
    pub fn give(&mut self, need: Need, fact: Fact) {
        self.forget(&need);
        self.found.push((need, fact));
    }

    /// Takes back the fact for `need` (a pin the name map gave turned out stale).
    pub fn forget(&mut self, need: &Need) {
        self.found.retain(|(n, _)| n != need);
    }

    /// Whether a fact answers `need`.
    pub fn has(&self, need: &Need) -> bool {
        self.get(need).is_some()
    }

    pub(crate) fn get(&self, need: &Need) -> Option<&Fact> {
        self.found.iter().find(|(n, _)| n == need).map(|(_, f)| f)
    }
}

/// One fact, found by the transport.
#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    /// The request's JSON body, parsed with the key rule (`facts::parse_body`).
    Body(Value),
    /// The stack's own containers or networks, `(full ID, name)` as a list of them answered:
    /// an ID prefix is resolved among them, and a list filter that names a container is
    /// pinned to one of them.
    Own(Vec<(String, String)>),
    /// The container or network, as the engine's inspect (or the name map) describes it, and
    /// the engine's API version as that inspect's `Api-Version` says it (none from the map).
    Object {
        found: Found,
        engine_api: Option<String>,
    },
    /// The exec instance's inspect: its own ID and its container's.
    Exec { id: String, container_id: String },
    /// The engine answered the inspect with this status, not 200, and these bytes.
    Absent { status: StatusCode, body: Bytes },
    /// The staging path each of a create's bind sources was pinned on, in the order the
    /// need named them.
    BindPins(Vec<PathBuf>),
    /// The stack's own network as the engine holds it, made first when it held none
    /// (`facts::stack_network_body`).
    StackNetwork(crate::stack_net::Held),
    /// Every container the stack sees, in any state, with its memory limit: what the
    /// per-stack totals count.
    Usage(Vec<crate::limits::Usage>),
    /// Every IPv4 subnet the engine's networks hold (`facts::network_subnets`).
    Subnets(Vec<ipnet::Ipv4Net>),
}

/// What the decisions read about an inspected container or network, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub id: String,
    /// As the inspect answered it (a container's carries the leading `/`).
    pub name: String,
    /// The `sockproxy.stack` label, when the object has one.
    pub stack_label: Option<String>,
}

impl Found {
    pub fn inspected(&self) -> Inspected<'_> {
        Inspected {
            id: &self.id,
            name: &self.name,
            stack_label: self.stack_label.as_deref(),
        }
    }
}

impl From<&Inspected<'_>> for Found {
    fn from(ins: &Inspected<'_>) -> Self {
        Self {
            id: ins.id.to_owned(),
            name: ins.name.to_owned(),
            stack_label: ins.stack_label.map(str::to_owned),
        }
    }
}

/// The fact a plan still needs before the transport may act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// None: the plan is final.
    Nothing,
    /// The request's JSON body (`Fact::Body`).
    Body,
    /// The stack's own containers or networks (`Fact::Own`): for an ID prefix, or a list
    /// filter that names a container.
    Own(Kind),
    /// An inspect of this container or network (a full ID, or a name): `Fact::Object`, or
    /// `Fact::Absent` when the engine answered otherwise.
    Object(Kind, ObjRef),
    /// An inspect of this exec instance (`Fact::Exec` or `Fact::Absent`); its container's
    /// inspect is needed next.
    Exec(String),
    /// These host paths a checked create binds, each pinned on a staging path
    /// (`Fact::BindPins`): asked last, once nothing else can refuse the create, since pinning
    /// is a mount the transport undoes if the create is not made.
    BindPins(Vec<BindSource>),
    /// The stack's own network (`Fact::StackNetwork`), for a create that is put on it. The
    /// transport takes the stack's lock to gather it, makes the network when the engine holds
    /// none, and keeps the lock until the request is answered.
    StackNetwork,
    /// The stack's containers and their memory limits (`Fact::Usage`), for a create or a
    /// memory update, counted against the stack's totals; gathered under the stack's lock,
    /// held until the request is answered, so two creates are never counted against the same
    /// total.
    Usage,
    /// Every IPv4 subnet the engine's networks hold (`Fact::Subnets`), for a network create
    /// under `--network-pool`; gathered under the stack's lock, so two of the stack's creates
    /// never choose the same subnet.
    Subnets,
}

/// What is sent to the engine as the request's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// Nothing: the endpoint takes no body, and the transport sees that the client sent none
    /// (or only a "nothing": whitespace, `{}`, `null`) before it asks the engine anything.
    Nothing,
    /// The client's body as it streams in, never read (an archive upload's tar stream).
    Stream,
    /// A JSON body, still to be read (`Need::Body`).
    Unread,
    /// The body the policy checked, forwarded instead of the client's bytes.
    Checked(Value),
}

/// An allowed request: where it goes and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The request as it is forwarded: canonical path and query (a list filter that named a
    /// container names its full ID once the stack's own objects were given).
    pub target: Target,
    /// What the transport does with it.
    pub route: Route,
    /// The full ID the request's own object is pinned to, once the plan is final.
    pub pin: Option<Pinned>,
    /// The fact still to gather before the transport may act (`Need::Nothing` once final).
    pub need: Need,
    /// The body sent to the engine.
    pub body: Sent,
    /// The engine's own answer to this need's inspect goes back to the client as it is (a
    /// name the engine does not know), instead of acting.
    pub relay: Option<Need>,
}

/// Why a request was allowed or refused: a fixed tag for the decision log line (smokescreen's
/// way: every allow says why too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// An endpoint every stack may use (ping, version, image inspect).
    AlwaysAllowed,
    /// A list, answered with the stack's own entries only.
    FilteredList,
    /// An object, a create or a body decided in the stack's scope.
    InScope,
    /// Refused; the tag is the refusal's (`Refusal::reason`).
    Refused(&'static str),
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AlwaysAllowed => "always_allowed",
            Self::FilteredList => "filtered_list",
            Self::InScope => "in_scope",
            Self::Refused(tag) => tag,
        }
    }

    fn of(route: &Route) -> Self {
        match route {
            Route::Forward => Self::AlwaysAllowed,
            Route::List(_) | Route::VolumeList => Self::FilteredList,
            _ => Self::InScope,
        }
    }
}

/// What `evaluate` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub outcome: Result<Plan, Refusal>,
    pub reason: Reason,
    /// The operation (`containers.stop`, `bad_request`), for the decision log line.
    pub op: String,
    /// `op` as a bounded metric label (`Endpoint::op_label`).
    pub label: &'static str,
}

/// Decides on `request` with what is known (`facts`) under `policy`. Pure but for the host
/// paths a create's bind source is walked on: the same three give the same decision, so the
/// transport evaluates again with each fact it gathers.
pub fn evaluate(request: &Request, facts: &Facts, policy: &Policy) -> Decision {
    let bad = |refusal: Refusal| Decision {
        reason: Reason::Refused(refusal.reason()),
        outcome: Err(refusal),
        op: "bad_request".to_owned(),
        label: "bad_request",
    };
    let target = match canon::canonicalize(request.uri, request.headers) {
        Ok(target) => target,
        Err(e) => return bad(e.into()),
    };
    if let Some(refusal) = too_old(&target, policy.min_api_version) {
        return bad(refusal);
    }
    let ep = api::parse(request.method, &target);
    let op = ep.op();
    let label = ep.op_label();
    let outcome = policy::decide(&ep, &target.query, &policy.scope, &policy.allow_images)
        .and_then(|route| {
            crate::spend::plan_query(&policy.create_rules.spend, &route, &op, &target.query)
                .map(|()| route)
        })
        .and_then(|route| plan(request.method, route, &op, target, facts, policy));
    let reason = match &outcome {
        Ok(plan) => Reason::of(&plan.route),
        Err(refusal) => Reason::Refused(refusal.reason()),
    };
    Decision {
        outcome,
        reason,
        op,
        label,
    }
}

/// The route's steps run with the facts given: a final plan, the next fact to gather, the
/// engine's answer to relay, or a refusal.
fn plan(
    method: &Method,
    route: Route,
    op: &str,
    target: Target,
    facts: &Facts,
    policy: &Policy,
) -> Result<Plan, Refusal> {
    let unfinished = |target, route, need, relay| Plan {
        target,
        body: steps::body_of(&route, method),
        route,
        pin: None,
        need,
        relay,
    };
    match steps::run(method, &route, op, &target, facts, policy) {
        Ok(done) => Ok(Plan {
            target: done.target.unwrap_or(target),
            route,
            pin: done.pin,
            need: Need::Nothing,
            body: done.body,
            relay: None,
        }),
        Err(Stop::Need(need)) => Ok(unfinished(target, route, need, None)),
        Err(Stop::Relay(need)) => Ok(unfinished(target, route, Need::Nothing, Some(need))),
        Err(Stop::Refused(refusal)) => Err(refusal),
    }
}

/// Below the operator's minimum API version some bodies mean more (below 1.24 a start body
/// replaces the HostConfig): such a request is refused before anything else.
fn too_old(target: &Target, min: (u32, u32)) -> Option<Refusal> {
    let version = target.version.as_deref()?;
    canon::api_version(version)
        .is_none_or(|v| v < min)
        .then(|| {
            Refusal::BadRequest(format!(
                "API version {version} is older than this proxy's minimum {}.{}",
                min.0, min.1
            ))
        })
}

#[cfg(test)]
#[path = "evaluate_tests.rs"]
mod tests;
