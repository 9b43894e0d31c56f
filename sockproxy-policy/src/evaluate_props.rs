//! The properties of `evaluate` that the `evaluate` fuzz target asserts and the stable replay
//! test (`tests/tests/tools/fuzz_corpus.rs`) checks again on every committed corpus input.
//!
//! The request is decided the way the transport decides it: evaluate, give the fact the plan
//! needs, evaluate again, until the plan is final, relays the engine's answer, or is refused.
//! The facts come from a scripted engine that knows one object, and answers every inspect with
//! it whatever it was asked (an engine that resolves a reference to something else).
//!
//! Input: byte 0 picks the method; byte 1's bits pick `--restricted` (1), `--require-stack-label`
//! (2), whether the exec instance exists (4: its inspect names the object as its container),
//! whether the object carries the stack's label (8), whether the stack's own objects hold it
//! (16: the list of them is `[(ID, NAME)]`, else empty), and whether inspects answer 404
//! instead (32; 500 with 64), and whether the stack's network is one made by hand (128); the
//! rest is `TARGET \0 NAME \0 BODY`: the request target, the
//! name the engine's inspect gives the object, and the request's body.
//!
//! - Every decision's reason says allow exactly when its outcome does.
//! - Never an allow without a `Pinned` for a named object: with no facts, no plan is pinned,
//!   and one that names a container, network or exec instance needs a fact first; a need once
//!   answered is never asked again, and the loop ends. A final plan for a named object carries
//!   the pin of the object's ID (the exec instance's for an exec), and the object's name is one
//!   the stack may see for that access (under `--require-stack-label`, it carries the label);
//!   a final plan for no named object pins nothing. The container a network connect names is
//!   forwarded by the object's ID, and only when the stack may change it. The engine's answer
//!   is relayed only after an inspect it did not answer with 200.
//! - Never a forwarded body that was not re-serialized: a create's body is forwarded as the
//!   checked value, written anew, and that text read and checked again gives the same value.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri};

use crate::create_rules::CreateRules;
use crate::evaluate::{
    evaluate, Fact, Facts, Found, Host, Need, Plan, Policy, Reason, Request, Sent,
};
use crate::json::DEFAULT_MAX_JSON_KEYS;
use crate::policy::Route;
use crate::reference::CanonicalName;
use crate::scope::{Access, Kind, Prefix, Scope, PREDEFINED_NETWORKS};

const METHODS: [&str; 5] = ["GET", "HEAD", "POST", "PUT", "DELETE"];

/// The IDs the facts carry: an object's, and an exec instance's.
const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const EXEC_ID: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

const STACK: &str = "atlas";

/// More evaluations than any route has steps: a loop that gets here does not end.
const MAX_EVALUATIONS: usize = 16;

fn policy(restricted: bool, label: bool) -> Result<Policy, String> {
    let prefix = Prefix::parse(crate::props::PREFIX).map_err(|e| format!("test prefix: {e}"))?;
    Ok(Policy {
        scope: Scope::new(prefix, restricted).with_required_label(label.then_some(STACK)),
        stack: STACK.into(),
        create_rules: CreateRules {
            require_stack_label: label,
            ..CreateRules::default()
        },
        allow_images: vec![],
        min_api_version: (1, 24),
        host: Host::unread(),
    })
}

/// The object a route names, with the access it asks for.
fn named(route: &Route) -> Option<(Kind, Access)> {
    match route {
        Route::Container { access, .. } | Route::Exec { access, .. } => {
            Some((Kind::Container, *access))
        }
        Route::Network { access, .. } => Some((Kind::Network, *access)),
        _ => None,
    }
}

/// The scripted engine: the one object, the exec instance, and how inspects answer.
struct World<'a> {
    flags: u8,
    policy: &'a Policy,
    name: &'a str,
    body: &'a [u8],
}

impl World<'_> {
    /// The fact for `need`; `None` where the transport would refuse (a body that is not JSON).
    fn fact(&self, need: &Need) -> Option<Fact> {
        let absent = match self.flags & (32 | 64) {
            0 => None,
            32 => Some(StatusCode::NOT_FOUND),
            _ => Some(StatusCode::INTERNAL_SERVER_ERROR),
        };
        let answered = |fact| match absent {
            Some(status) => Fact::Absent {
                status,
                body: Bytes::from_static(b"{\"message\":\"No such object\"}"),
            },
            None => fact,
        };
        Some(match need {
            Need::Nothing => return None,
            Need::Body => {
                Fact::Body(crate::answers::parse_body(self.body, DEFAULT_MAX_JSON_KEYS).ok()?)
            }
            Need::Own(_) if self.flags & 16 == 16 => {
                Fact::Own(vec![(ID.to_owned(), self.name.to_owned())])
            }
            Need::Own(_) => Fact::Own(vec![]),
            Need::Object(..) => answered(Fact::Object {
                found: Found {
                    id: ID.into(),
                    name: self.name.into(),
                    stack_label: (self.flags & 8 == 8).then(|| STACK.into()),
                },
                engine_api: Some("1.43".into()),
            }),
            Need::Exec(_) if self.flags & 4 == 4 => Fact::Exec {
                id: EXEC_ID.into(),
                container_id: ID.into(),
            },
            Need::Exec(_) => Fact::Absent {
                status: StatusCode::NOT_FOUND,
                body: Bytes::from_static(b"{\"message\":\"No such exec instance\"}"),
            },
            // No bind roots here: never asked, but pinned as the transport would.
            Need::BindPins(sources) => Fact::BindPins(
                (0..sources.len())
                    .map(|i| format!("/run/sockproxy-pins/{STACK}/{i}").into())
                    .collect(),
            ),
            Need::StackNetwork => {
                // As the transport made it; bit 128: one made by hand, with no label.
                let mut made = crate::stack_net::create_body(self.policy);
                made["Id"] = ID.into();
                if self.flags & 128 == 128 {
                    made["Labels"] = serde_json::json!({});
                }
                Fact::StackNetwork(crate::stack_net::Held::read(made.to_string().as_bytes()).ok()?)
            }
            Need::Subnets => Fact::Subnets(vec![]),
            Need::Usage => Fact::Usage(vec![crate::limits::Usage {
                id: ID.into(),
                name: self.name.into(),
                memory: 0,
            }]),
        })
    }
}

/// The transport's loop over `world`: the last plan (final, relaying, or refused: `None`).
fn decide(
    request: &Request,
    world: &World,
    policy: &Policy,
    target: &str,
) -> Result<Option<Plan>, String> {
    let mut facts = Facts::default();
    let mut asked = Vec::new();
    for n in 0..MAX_EVALUATIONS {
        let d = evaluate(request, &facts, policy);
        if d.outcome.is_err() != matches!(d.reason, Reason::Refused(_)) {
            return Err(format!(
                "{target}: reason {:?} for {:?}",
                d.reason, d.outcome
            ));
        }
        let Ok(plan) = d.outcome else {
            return Ok(None);
        };
        if n == 0 {
            first_plan(&plan, target)?;
        }
        if plan.need == Need::Nothing {
            if plan.relay.is_some() && world.flags & (32 | 64) == 0 {
                return Err(format!("{target}: relayed with every inspect answered"));
            }
            return Ok(Some(plan));
        }
        if plan.pin.is_some() {
            return Err(format!("{target}: pinned while it needs {:?}", plan.need));
        }
        if asked.contains(&plan.need) {
            return Err(format!("{target}: {:?} asked again", plan.need));
        }
        let Some(fact) = world.fact(&plan.need) else {
            return Ok(None);
        };
        asked.push(plan.need.clone());
        facts.give(plan.need, fact);
    }
    Err(format!(
        "{target}: no final plan after {MAX_EVALUATIONS} evaluations"
    ))
}

/// With no facts: no pin, and a named object needs a fact first.
fn first_plan(plan: &Plan, target: &str) -> Result<(), String> {
    if plan.pin.is_some() {
        return Err(format!("{target}: pinned without a fact"));
    }
    if named(&plan.route).is_some() && plan.need == Need::Nothing {
        return Err(format!("{target}: {:?} needs no fact", plan.route));
    }
    Ok(())
}

pub fn evaluate_request(data: &[u8]) -> Result<(), String> {
    let [m, flags, rest @ ..] = data else {
        return Ok(());
    };
    let method = Method::from_bytes(METHODS[usize::from(*m) % METHODS.len()].as_bytes())
        .map_err(|e| e.to_string())?;
    let policy = policy(flags & 1 == 1, flags & 2 == 2)?;
    let mut parts = rest.splitn(3, |b| *b == 0);
    let (Some(target), name, body) = (parts.next(), parts.next(), parts.next()) else {
        return Ok(());
    };
    let (Ok(target), Ok(name)) = (
        std::str::from_utf8(target),
        std::str::from_utf8(name.unwrap_or_default()),
    ) else {
        return Ok(());
    };
    let Ok(uri) = target.parse::<Uri>() else {
        return Ok(());
    };
    let headers = HeaderMap::new();
    let request = Request {
        method: &method,
        uri: &uri,
        headers: &headers,
    };
    let world = World {
        flags: *flags,
        policy: &policy,
        name,
        body: body.unwrap_or_default(),
    };
    let Some(plan) = decide(&request, &world, &policy, target)? else {
        return Ok(());
    };
    if plan.relay.is_some() {
        return Ok(());
    }
    final_plan(&plan, &world, &policy, target)?;
    forwarded_body(&request, &plan, &world, &policy, target)
}

/// A final plan's pins: the object's ID, for a name the stack may see with that access.
fn final_plan(plan: &Plan, world: &World, policy: &Policy, target: &str) -> Result<(), String> {
    let allows = |kind, access| {
        CanonicalName::parse(world.name).is_some_and(|n| {
            policy.scope.allows(kind, access, n.as_str())
                && (!policy.scope.requires_label()
                    || world.flags & 8 == 8
                    || kind == Kind::Network && PREDEFINED_NETWORKS.contains(&n.as_str()))
        })
    };
    let Some((kind, access)) = named(&plan.route) else {
        return match &plan.pin {
            None => Ok(()),
            Some(pin) => Err(format!("{target}: {:?} pinned {pin:?}", plan.route)),
        };
    };
    let want = if matches!(plan.route, Route::Exec { .. }) {
        EXEC_ID
    } else {
        ID
    };
    if plan.pin.as_ref().map(|p| p.id()) != Some(want) {
        return Err(format!("{target}: allowed with pin {:?}", plan.pin));
    }
    if !allows(kind, access) {
        return Err(format!(
            "{target}: pinned {:?}, not the stack's to {access:?}",
            world.name
        ));
    }
    if let Sent::Checked(body) = &plan.body {
        if let Route::Network { .. } = plan.route {
            let connects = body.get("Container").and_then(|c| c.as_str());
            if connects.is_some_and(|c| c != ID || !allows(Kind::Container, Access::Change)) {
                return Err(format!(
                    "{target}: connects {connects:?}, named {:?}",
                    world.name
                ));
            }
        }
    }
    Ok(())
}

/// A create's body as the transport forwards it: the checked value, serialized anew; reading
/// those bytes and deciding on them again gives the same value.
fn forwarded_body(
    request: &Request,
    plan: &Plan,
    world: &World,
    policy: &Policy,
    target: &str,
) -> Result<(), String> {
    let (Route::CreateContainer | Route::CreateNetwork, Sent::Checked(out)) =
        (&plan.route, &plan.body)
    else {
        return Ok(());
    };
    let forwarded = serde_json::to_vec(out).map_err(|e| e.to_string())?;
    let again = World {
        body: &forwarded,
        ..*world
    };
    match decide(request, &again, policy, target)? {
        Some(Plan {
            body: Sent::Checked(v),
            ..
        }) if v == *out => Ok(()),
        other => Err(format!(
            "the forwarded body {} decides as {other:?}",
            String::from_utf8_lossy(&forwarded)
        )),
    }
}
