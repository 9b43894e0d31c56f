//! The seam between the policy and the transport: `evaluate(request, facts, policy)`. The
//! transport hands over a request head and what its I/O has found so far (`Facts`); the answer
//! is a `Decision`: a `Plan` to act on, or the `Refusal` to send, and the fixed `Reason` the
//! decision log line carries. A plan that names a container, network or exec instance says
//! which fact it still needs (`Plan::needs`); the transport gathers it and evaluates again, and
//! only then does the plan carry the `Pinned` ID the forwarded path is made from. The same holds
//! for the other objects a request names (the networks a create joins, the container a network
//! connect names: `Facts::Other`), and an ID prefix or a list filter that names a container is
//! decided among the stack's own objects (`Facts::Own`), never by the engine.

use http::{HeaderMap, Method, Uri};

use crate::api;
use crate::api::NetworkOp;
use crate::canon::{self, Target};
use crate::create_rules::CreateRules;
use crate::pinning::{self, Rules};
use crate::policy::{self, Route};
use crate::reference::{is_full_id, ObjRef};
use crate::refusal::Refusal;
use crate::scope::{Access, Kind, Scope};

/// The facts' and the plan's types: `Pinned` is made only by this crate's pinning rules.
pub use crate::pinning::{Inspected, Pinned};

/// A request head as the client sent it; the body is read (and checked) by the transport only
/// when the plan says so.
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

/// What the transport's I/O found about the object the request names.
#[derive(Debug, Clone, Copy)]
pub enum Facts<'a> {
    /// Nothing read from the engine yet.
    None,
    /// The container or network, as the engine's inspect (or the name map) describes it.
    Object(Inspected<'a>),
    /// The exec instance: its inspect's own ID and container ID, and that container.
    Exec {
        reported: (&'a str, &'a str),
        container: Inspected<'a>,
    },
    /// The stack's own containers or networks, `(full ID, name)` as a list of them answered:
    /// an ID prefix is resolved among them, and a list filter that names a container is
    /// pinned to one of them.
    Own(&'a [(String, String)]),
    /// Another object the request names (a network a create joins, the container a network
    /// connect or disconnect names), with what was found about it (`None`, `Own`, `Object`):
    /// decided as a change to that object.
    Other {
        kind: Kind,
        r: &'a ObjRef,
        found: &'a Facts<'a>,
    },
}

/// The fact a plan still needs before the transport may act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    Nothing,
    /// The stack's own containers or networks (`Facts::Own`): for an ID prefix, or a list
    /// filter that names a container.
    Own(Kind),
    /// An inspect of this container or network (a full ID, or a name).
    Object(Kind, ObjRef),
    /// An inspect of this exec instance and of its container.
    Exec(String),
}

/// An allowed request: where it goes and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The request as it is forwarded: canonical path and query (a list filter that named a
    /// container names its full ID once the stack's own objects were given).
    pub target: Target,
    /// What the transport does with it.
    pub route: Route,
    /// The full ID the object the facts are about is pinned to (the request's own, or the
    /// `Facts::Other` one), once its fact was given.
    pub pin: Option<Pinned>,
    /// The fact still to gather before the transport may act (`Need::Nothing` once final).
    pub need: Need,
}

impl Plan {
    /// The fact the transport gathers before acting; `Nothing` once the plan is final.
    pub fn needs(&self) -> Need {
        self.need.clone()
    }
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

/// Decides on `request` with what is known (`facts`) under `policy`. Pure: the same three
/// give the same decision, so the transport may evaluate again with each fact it gathers.
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
        .and_then(|route| {
            let (pin, need, target) = gather(&route, &op, target, facts, policy)?;
            Ok(Plan {
                target,
                route,
                pin,
                need,
            })
        });
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

/// What the plan's facts give: the pin, the fact still needed, and the target to forward.
type Gathered = (Option<Pinned>, Need, Target);

/// A fact about another kind of object than the plan names: the transport's mistake, refused
/// rather than acted on.
fn misplaced() -> Refusal {
    Refusal::Upstream("a fact for another object".into())
}

/// An ID shorter than a full one: resolved among the stack's own objects, never by the engine.
fn prefix(r: &ObjRef) -> Option<&str> {
    match r {
        ObjRef::Hex(p) if !is_full_id(p) => Some(p),
        _ => None,
    }
}

/// The fact an object needs first: its own objects for an ID prefix, else its inspect.
fn first_need(kind: Kind, r: &ObjRef) -> Need {
    match prefix(r) {
        Some(_) => Need::Own(kind),
        None => Need::Object(kind, r.clone()),
    }
}

/// The route's object with what the facts say of it.
fn gather(
    route: &Route,
    op: &str,
    mut target: Target,
    facts: &Facts,
    policy: &Policy,
) -> Result<Gathered, Refusal> {
    let object = match route {
        Route::Container { target, access, .. } => Some((Kind::Container, target, *access)),
        Route::Network { target, access, .. } => Some((Kind::Network, target, *access)),
        _ => None,
    };
    match (facts, route, object) {
        (Facts::Other { kind, r, found }, _, _) => {
            let (pin, need) = other(route, op, *kind, r, found, policy)?;
            Ok((pin, need, target))
        }
        (Facts::None, Route::Exec { id, .. }, _) => Ok((None, Need::Exec(id.clone()), target)),
        (Facts::None, Route::List(Kind::Container), _)
            if target
                .query
                .get("filters")
                .is_some_and(crate::filter::names_containers) =>
        {
            Ok((None, Need::Own(Kind::Container), target))
        }
        (Facts::None, _, Some((kind, r, _))) => Ok((None, first_need(kind, r), target)),
        (Facts::None, _, None) => Ok((None, Need::Nothing, target)),
        (Facts::Own(own), Route::List(Kind::Container), _) => {
            if let Some(raw) = target.query.get("filters") {
                if crate::filter::names_containers(raw) {
                    let pinned = crate::filter::pin_container_refs(raw, own)?;
                    target.query = target.query.replaced("filters", pinned);
                }
            }
            Ok((None, Need::Nothing, target))
        }
        (Facts::Own(own), _, Some((kind, r, _))) => {
            Ok((None, resolved_prefix(kind, r, own)?, target))
        }
        (Facts::Object(ins), _, Some((kind, r, access))) => {
            let pin = pinning::inspected(kind, access, op, r, ins, &policy.rules())?;
            Ok((Some(pin), Need::Nothing, target))
        }
        (
            Facts::Exec {
                reported,
                container,
            },
            Route::Exec { id, access, .. },
            _,
        ) => {
            let pin = pinning::exec(*access, id, *reported, container, &policy.rules())?;
            Ok((Some(pin), Need::Nothing, target))
        }
        _ => Err(misplaced()),
    }
}

/// An ID prefix resolved among the stack's own objects: the inspect of the full ID it stands
/// for is needed next. Own objects for a full ID or a name are no fact about it.
fn resolved_prefix(kind: Kind, r: &ObjRef, own: &[(String, String)]) -> Result<Need, Refusal> {
    let p = prefix(r).ok_or_else(misplaced)?;
    let full = pinning::own_prefix(kind, p, own)?;
    Ok(Need::Object(kind, ObjRef::Hex(full)))
}

/// Another object the request names: a network a create joins, or the container a network
/// connect or disconnect names; each is changed by the request, so it is decided as a change.
fn other(
    route: &Route,
    op: &str,
    kind: Kind,
    r: &ObjRef,
    found: &Facts,
    policy: &Policy,
) -> Result<(Option<Pinned>, Need), Refusal> {
    let names_it = matches!(
        (route, kind),
        (Route::CreateContainer, Kind::Network)
            | (
                Route::Network {
                    op: NetworkOp::Connect | NetworkOp::Disconnect,
                    ..
                },
                Kind::Container,
            )
    );
    if !names_it {
        return Err(misplaced());
    }
    policy::check_name(kind, Access::Change, op, r, &policy.scope)?;
    match found {
        Facts::None => Ok((None, first_need(kind, r))),
        Facts::Own(own) => Ok((None, resolved_prefix(kind, r, own)?)),
        Facts::Object(ins) => {
            let pin = pinning::inspected(kind, Access::Change, op, r, ins, &policy.rules())?;
            Ok((Some(pin), Need::Nothing))
        }
        _ => Err(misplaced()),
    }
}

#[cfg(test)]
#[path = "evaluate_tests.rs"]
mod tests;
