//! The properties of `evaluate` that the `evaluate` fuzz target asserts and the stable replay
//! test (`tests/tests/tools/fuzz_corpus.rs`) checks again on every committed corpus input.
//!
//! Input: byte 0 picks the method; byte 1's bits pick `--restricted` (1), `--require-stack-label`
//! (2), an exec fact instead of an object's (4), whether the fact's object carries the stack's
//! label (8), the stack's own objects given first (16: one, the fact's object), and a fact about
//! another object the request names (32: NAME is also its reference, a network with 64, else a
//! container); the rest is `TARGET \0 NAME \0 BODY`: the request target, the name the engine's
//! inspect gives the object, and a request body.
//!
//! - Never an allow without a `Pinned` for a named object: with no facts, a plan that names a
//!   container, network or exec instance carries no pin and says which fact it needs; with
//!   the fact, an allowed plan carries the pin of the fact's ID, and the fact's name is one the
//!   stack may see. A fact about no named object is refused. The stack's own objects pin
//!   nothing: they resolve an ID prefix to the full ID to inspect next (the own object's, the
//!   only one given), or pin a list filter's container; for a name or a full ID they are
//!   refused. Another object the request names is pinned only by its inspect, to its ID, and
//!   only when the stack may change it.
//! - Never a forwarded body that was not re-serialized: a create's body is forwarded as the
//!   checked value, written anew, and that text read and checked again gives the same value.

use http::{HeaderMap, Method, Uri};
use serde_json::Value;

use crate::create_rules::{CreateRules, NoPaths};
use crate::evaluate::{evaluate, Facts, Inspected, Need, Plan, Policy, Request};
use crate::policy::Route;
use crate::reference::{is_full_id, CanonicalName, ObjRef};
use crate::scope::{Access, Kind, Prefix, Scope};

const METHODS: [&str; 5] = ["GET", "HEAD", "POST", "PUT", "DELETE"];

/// The IDs the facts carry: an object's, and an exec instance's.
const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const EXEC_ID: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

const STACK: &str = "atlas";

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
    let first = evaluate(&request, &Facts::None, &policy);
    if first.outcome.is_err() != matches!(first.reason, crate::evaluate::Reason::Refused(_)) {
        return Err(format!(
            "{target}: reason {:?} for {:?}",
            first.reason, first.outcome
        ));
    }
    let Ok(plan) = first.outcome else {
        return Ok(());
    };
    if plan.pin.is_some() {
        return Err(format!("{target}: pinned without a fact"));
    }
    let object = Inspected {
        id: ID,
        name,
        stack_label: (flags & 8 == 8).then_some(STACK),
    };
    if flags & 32 == 32 {
        let kind = if flags & 64 == 64 {
            Kind::Network
        } else {
            Kind::Container
        };
        return another_object(&request, target, kind, object, &policy);
    }
    if flags & 16 == 16 {
        own_objects(&request, target, &plan, object, &policy)?;
    }
    let facts = if flags & 4 == 4 {
        Facts::Exec {
            reported: (EXEC_ID, ID),
            container: object,
        }
    } else {
        Facts::Object(object)
    };
    let again = evaluate(&request, &facts, &policy);
    match named(&plan.route) {
        None => {
            // A list filter that names a container asks for the stack's own containers only.
            let own_list = matches!(plan.route, Route::List(Kind::Container))
                && plan.needs() == Need::Own(Kind::Container);
            if plan.needs() != Need::Nothing && !own_list {
                return Err(format!(
                    "{target}: {:?} needs {:?}",
                    plan.route,
                    plan.needs()
                ));
            }
            if again.outcome.is_ok() {
                return Err(format!("{target}: a fact for no named object was taken"));
            }
            forwarded_body(&plan, body.unwrap_or_default(), &policy)
        }
        Some((kind, access)) => {
            if plan.needs() == Need::Nothing {
                return Err(format!("{target}: {:?} needs no fact", plan.route));
            }
            let Ok(pinned) = again.outcome else {
                return Ok(());
            };
            let want = if matches!(plan.route, Route::Exec { .. }) {
                EXEC_ID
            } else {
                ID
            };
            if pinned.pin.as_ref().map(|p| p.id()) != Some(want) {
                return Err(format!("{target}: allowed with pin {:?}", pinned.pin));
            }
            let seen = CanonicalName::parse(name)
                .is_some_and(|n| policy.scope.allows(kind, access, n.as_str()));
            if !seen {
                return Err(format!(
                    "{target}: pinned {name:?}, not the stack's to {access:?}"
                ));
            }
            Ok(())
        }
    }
}

/// The stack's own objects (one: `object`) as the fact: they pin nothing, and where the plan
/// asked for them they resolve an ID prefix to the own object's ID, the inspect needed next.
fn own_objects(
    request: &Request,
    target: &str,
    plan: &Plan,
    object: Inspected,
    policy: &Policy,
) -> Result<(), String> {
    let own = [(object.id.to_owned(), object.name.to_owned())];
    let with_own = evaluate(request, &Facts::Own(&own), policy);
    let asked = matches!(plan.needs(), Need::Own(_));
    let Ok(got) = with_own.outcome else {
        return Ok(());
    };
    if !asked && named(&plan.route).is_some() {
        return Err(format!(
            "{target}: own objects taken for {:?}",
            plan.needs()
        ));
    }
    if got.pin.is_some() {
        return Err(format!("{target}: own objects pinned {:?}", got.pin));
    }
    match (named(&got.route), got.needs()) {
        (None, Need::Nothing) => Ok(()),
        (Some(_), Need::Object(_, ObjRef::Hex(full))) if full == object.id => Ok(()),
        (_, need) => Err(format!("{target}: own objects left {need:?}")),
    }
}

/// A fact about another object the request names (`r`, parsed from the inspect's name): no pin
/// before its inspect; with it, the pin of its ID and a name the stack may change.
fn another_object(
    request: &Request,
    target: &str,
    kind: Kind,
    object: Inspected,
    policy: &Policy,
) -> Result<(), String> {
    let Some(r) = ObjRef::parse(object.name) else {
        return Ok(());
    };
    let own = [(object.id.to_owned(), object.name.to_owned())];
    for found in [Facts::None, Facts::Own(&own)] {
        let facts = Facts::Other {
            kind,
            r: &r,
            found: &found,
        };
        let Ok(plan) = evaluate(request, &facts, policy).outcome else {
            continue;
        };
        if plan.pin.is_some() || plan.needs() == Need::Nothing {
            return Err(format!(
                "{target}: {kind:?} {r:?} with {found:?}: pin {:?}, needs {:?}",
                plan.pin,
                plan.needs()
            ));
        }
        let prefix = matches!(&r, ObjRef::Hex(h) if !is_full_id(h));
        let want = match (&found, prefix) {
            (Facts::None, true) => Need::Own(kind),
            (Facts::None, false) => Need::Object(kind, r.clone()),
            _ => Need::Object(kind, ObjRef::Hex(object.id.to_owned())),
        };
        if plan.needs() != want {
            return Err(format!("{target}: {kind:?} {r:?} needs {:?}", plan.needs()));
        }
    }
    let found = Facts::Object(object);
    let facts = Facts::Other {
        kind,
        r: &r,
        found: &found,
    };
    let Ok(plan) = evaluate(request, &facts, policy).outcome else {
        return Ok(());
    };
    if plan.pin.as_ref().map(|p| p.id()) != Some(ID) {
        return Err(format!(
            "{target}: {kind:?} {r:?} allowed with pin {:?}",
            plan.pin
        ));
    }
    let changeable = CanonicalName::parse(object.name)
        .is_some_and(|n| policy.scope.allows(kind, Access::Change, n.as_str()));
    if !changeable {
        return Err(format!(
            "{target}: pinned {kind:?} {:?}, not the stack's to change",
            object.name
        ));
    }
    Ok(())
}

/// A create's body as the transport forwards it: the checked value, serialized anew; reading
/// those bytes and checking them again gives the same value.
fn forwarded_body(plan: &Plan, body: &[u8], policy: &Policy) -> Result<(), String> {
    let check = |bytes: &[u8]| -> Option<Value> {
        let v = crate::json::parse_checked(bytes).ok()?;
        match plan.route {
            Route::CreateContainer => crate::create_body::check(
                v,
                &policy.scope,
                &policy.create_rules,
                std::path::Path::new("/run/docker.sock"),
                &NoPaths,
                &policy.stack,
            )
            .ok(),
            Route::CreateNetwork => {
                crate::write_rules::network_create(v, &policy.scope, &policy.stack).ok()
            }
            _ => None,
        }
    };
    let Some(out) = check(body) else {
        return Ok(());
    };
    let forwarded = serde_json::to_vec(&out).map_err(|e| e.to_string())?;
    match check(&forwarded) {
        Some(again) if again == out => Ok(()),
        other => Err(format!(
            "the forwarded body {} checks as {other:?}",
            String::from_utf8_lossy(&forwarded)
        )),
    }
}
