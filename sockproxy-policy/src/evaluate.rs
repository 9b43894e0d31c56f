//! The seam between the policy and the transport: `evaluate(request, facts, policy)`. The
//! transport hands over a request head and what its I/O has found so far (`Facts`); the answer
//! is a `Decision`: a `Plan` to act on, or the `Refusal` to send, and the fixed `Reason` the
//! decision log line carries. A plan that names a container, network or exec instance says
//! which fact it still needs (`Plan::needs`); the transport gathers it and evaluates again, and
//! only then does the plan carry the `Pinned` ID the forwarded path is made from.

use http::{HeaderMap, Method, Uri};

use crate::api;
use crate::canon::{self, Target};
use crate::create_rules::CreateRules;
use crate::pinning::{self, Inspected, Pinned, Rules};
use crate::policy::{self, Plan as Route};
use crate::reference::ObjRef;
use crate::refusal::Refusal;
use crate::scope::{Kind, Scope};

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
    pub fn rules(&self) -> Rules<'_> {
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
}

/// The fact a plan still needs before the transport may act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need<'a> {
    Nothing,
    /// An inspect of this container or network (an ID prefix resolved among the stack's own
    /// objects first).
    Object(Kind, &'a ObjRef),
    /// An inspect of this exec instance and of its container.
    Exec(&'a str),
}

/// An allowed request: where it goes and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The request as it is forwarded: canonical path and query.
    pub target: Target,
    /// What the transport does with it.
    pub route: Route,
    /// The full ID a named object's path is pinned to, once its fact was given.
    pub pin: Option<Pinned>,
}

impl Plan {
    /// The fact the transport gathers before acting; `Nothing` once the plan is final.
    pub fn needs(&self) -> Need<'_> {
        if self.pin.is_some() {
            return Need::Nothing;
        }
        match &self.route {
            Route::Container { target, .. } => Need::Object(Kind::Container, target),
            Route::Network { target, .. } => Need::Object(Kind::Network, target),
            Route::Exec { id, .. } => Need::Exec(id),
            _ => Need::Nothing,
        }
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
        .and_then(|route| pin(route, &op, facts, policy))
        .map(|(route, pin)| Plan { target, route, pin });
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

/// The route with the pin its fact gives, when a fact is given.
fn pin(
    route: Route,
    op: &str,
    facts: &Facts,
    policy: &Policy,
) -> Result<(Route, Option<Pinned>), Refusal> {
    let pinned =
        match (facts, &route) {
            (Facts::None, _) => None,
            (Facts::Object(ins), Route::Container { target, access, .. }) => Some(
                pinning::inspected(Kind::Container, *access, op, target, ins, &policy.rules())?,
            ),
            (Facts::Object(ins), Route::Network { target, access, .. }) => Some(
                pinning::inspected(Kind::Network, *access, op, target, ins, &policy.rules())?,
            ),
            (
                Facts::Exec {
                    reported,
                    container,
                },
                Route::Exec { id, access, .. },
            ) => Some(pinning::exec(
                *access,
                id,
                *reported,
                container,
                &policy.rules(),
            )?),
            // A fact about another kind of object than the plan names: the transport's mistake,
            // refused rather than acted on.
            _ => return Err(Refusal::Upstream("a fact for another object".into())),
        };
    Ok((route, pinned))
}

#[cfg(test)]
#[path = "evaluate_tests.rs"]
mod tests;
