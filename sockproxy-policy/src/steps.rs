//! Each route's steps, in the order they ask for facts: the body first (so a refused body
//! costs the engine nothing), then the request's own object (an ID prefix among the stack's
//! own objects, then the inspect), then the other objects the body names (the networks a
//! create joins, the container a network connect names), and last a create's bind sources,
//! pinned by the transport (a mount it undoes if the create is refused). `run` replays them
//! with the facts given and stops at the first one missing (`Stop::Need`), so `evaluate`
//! resumes where the transport's last fact left it.

use http::Method;
use serde_json::Value;

use crate::api::{ContainerOp, ExecOp, NetworkOp};
use crate::canon::Target;
use crate::evaluate::{Fact, Facts, Found, Need, Pinned, Policy, Sent};
use crate::limits::Adds;
use crate::pinning;
use crate::policy::{self, Route};
use crate::reference::{is_full_id, ObjRef};
use crate::refusal::Refusal;
use crate::scope::{Access, Kind};

/// Why the steps stopped before a final plan.
#[derive(Debug)]
pub(crate) enum Stop {
    /// This fact is missing.
    Need(Need),
    /// The engine's own answer to this need's inspect goes back as it is.
    Relay(Need),
    Refused(Refusal),
}

impl From<Refusal> for Stop {
    fn from(r: Refusal) -> Self {
        Self::Refused(r)
    }
}

/// A final plan's parts: the pin, the body sent, and the target when a fact changed it.
#[derive(Debug)]
pub(crate) struct Done {
    pub pin: Option<Pinned>,
    pub body: Sent,
    pub target: Option<Target>,
}

impl Done {
    fn sent(body: Sent) -> Self {
        Self {
            pin: None,
            body,
            target: None,
        }
    }
}

/// What a route sends as its body, before the body is read.
pub(crate) fn body_of(route: &Route, method: &Method) -> Sent {
    match route {
        Route::CreateContainer
        | Route::CreateNetwork
        | Route::Container {
            op: ContainerOp::ExecCreate | ContainerOp::Update,
            ..
        }
        | Route::Exec {
            op: ExecOp::Start, ..
        }
        | Route::Network {
            op: NetworkOp::Connect | NetworkOp::Disconnect,
            ..
        } => Sent::Unread,
        // The upload's body is the tar stream itself; its head (query parameters:
        // `policy::decide`) is checked.
        Route::Container {
            op: ContainerOp::Archive,
            ..
        } if method == Method::PUT => Sent::Stream,
        _ => Sent::Nothing,
    }
}

/// Runs the route's steps with `facts`.
pub(crate) fn run(
    method: &Method,
    route: &Route,
    op: &str,
    target: &Target,
    facts: &Facts,
    policy: &Policy,
) -> Result<Done, Stop> {
    let body = || match facts.get(&Need::Body) {
        Some(Fact::Body(v)) => Ok(v.clone()),
        Some(_) => Err(misplaced()),
        None => Err(Stop::Need(Need::Body)),
    };
    let rules = &policy.create_rules;
    match route {
        Route::CreateContainer => {
            let checked = crate::create_body::check(
                body()?,
                &policy.scope,
                rules,
                &policy.host.engine_socket,
                policy.host.paths.as_ref(),
                &policy.stack,
            )?;
            let net = crate::stack_net::name(&policy.scope, &policy.stack);
            if rules.require_stack_label {
                joined_networks(op, &checked, &net, facts, policy)?;
            }
            if crate::stack_net::uses(&checked, &net) {
                stack_network(op, facts, policy)?;
            }
            let memory = checked
                .get("HostConfig")
                .and_then(|h| h.get("Memory"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            totals(op, facts, policy, Adds::Container { memory })?;
            // Last: pinning is a mount the transport undoes if the create is not made.
            let forwarded = bind_pins(checked, facts, policy)?;
            Ok(Done::sent(Sent::Checked(forwarded)))
        }
        Route::CreateNetwork => {
            let mut checked =
                crate::write_rules::network_create(body()?, &policy.scope, &policy.stack)?;
            if let Some(pool) = &rules.network_pool {
                match facts.get(&Need::Subnets) {
                    None => return Err(Stop::Need(Need::Subnets)),
                    Some(Fact::Subnets(held)) => pool.assign(op, held, &mut checked)?,
                    Some(_) => return Err(misplaced()),
                }
            }
            Ok(Done::sent(Sent::Checked(checked)))
        }
        Route::List(Kind::Container) => {
            let Some(raw) = target
                .query
                .get("filters")
                .filter(|raw| crate::filter::names_containers(raw))
            else {
                return Ok(Done::sent(Sent::Nothing));
            };
            let pinned = crate::filter::pin_container_refs(raw, own(Kind::Container, facts)?)?;
            let mut target = target.clone();
            target.query = target.query.replaced("filters", pinned);
            Ok(Done {
                target: Some(target),
                ..Done::sent(Sent::Nothing)
            })
        }
        Route::Container {
            op: cop,
            target: r,
            access,
        } => {
            let sent = match cop {
                ContainerOp::ExecCreate => Sent::Checked(crate::write_rules::exec_create(body()?)?),
                ContainerOp::Update => Sent::Checked(crate::write_rules::update(
                    body()?,
                    target.version.as_deref(),
                    &rules.spend,
                )?),
                _ => body_of(route, method),
            };
            let (pin, engine_api) = object(Kind::Container, r, *access, op, facts, policy)?;
            if *cop == ContainerOp::Archive {
                crate::answers::archive_on(engine_api)?;
            }
            let raised = match &sent {
                Sent::Checked(v) if *cop == ContainerOp::Update => {
                    v.get("Memory").and_then(Value::as_i64).filter(|m| *m > 0)
                }
                _ => None,
            };
            if let Some(memory) = raised {
                let id = pin.id();
                totals(op, facts, policy, Adds::Memory { id, memory })?;
            }
            Ok(Done {
                pin: Some(pin),
                ..Done::sent(sent)
            })
        }
        Route::Exec {
            op: eop,
            id,
            access,
        } => {
            let sent = match eop {
                ExecOp::Start => Sent::Checked(crate::write_rules::exec_start(body()?)?),
                _ => Sent::Nothing,
            };
            Ok(Done {
                pin: Some(exec(id, *access, facts, policy)?),
                ..Done::sent(sent)
            })
        }
        Route::Network {
            op: nop,
            target: r,
            access,
        } => {
            let attach = match nop {
                NetworkOp::Connect | NetworkOp::Disconnect => Some(
                    crate::write_rules::network_attach(op, body()?, &policy.scope, rules)?,
                ),
                _ => None,
            };
            let (pin, _) = object(Kind::Network, r, *access, op, facts, policy)?;
            let sent = match attach {
                Some((container, mut rest)) => {
                    let cref = ObjRef::parse(&container).ok_or_else(|| {
                        Refusal::BadRequest(format!(
                            "{op}: Container {container:?} is not a reference"
                        ))
                    })?;
                    // The container is changed too: decided as another object the request
                    // names, and forwarded by the full ID it is pinned to.
                    let c = other(Kind::Container, &cref, op, facts, policy)?;
                    rest.insert("Container".into(), Value::String(c.id().to_owned()));
                    Sent::Checked(Value::Object(rest))
                }
                None => Sent::Nothing,
            };
            Ok(Done {
                pin: Some(pin),
                ..Done::sent(sent)
            })
        }
        Route::Forward
        | Route::List(Kind::Network)
        | Route::Events
        | Route::VolumeList
        | Route::Volume
        | Route::Info => Ok(Done::sent(Sent::Nothing)),
    }
}

/// Under `--require-stack-label`, each of the stack's networks a checked create joins must
/// carry the stack's label: decided as a change to that network. The name goes on to the
/// engine as it was checked: a labelled network cannot be renamed, and another of the same
/// name would make the name ambiguous to the engine, which then refuses the create.
fn joined_networks(
    op: &str,
    checked: &Value,
    stack_network: &str,
    facts: &Facts,
    policy: &Policy,
) -> Result<(), Stop> {
    for name in crate::create_body::joined_networks(checked, stack_network) {
        let r = ObjRef::parse(&name).ok_or_else(|| {
            Refusal::BadRequest(format!("{op}: network {name:?} is not a reference"))
        })?;
        other(Kind::Network, &r, op, facts, policy)?;
    }
    Ok(())
}

/// A checked create's body as it is forwarded: with no host path bound, as it is; else once
/// the transport has pinned each source, written on the staging paths (`bind_pins`).
fn bind_pins(checked: Value, facts: &Facts, policy: &Policy) -> Result<Value, Stop> {
    let sources = crate::bind_pins::sources(&checked, &policy.create_rules)?;
    if sources.is_empty() {
        return Ok(checked);
    }
    let need = Need::BindPins(sources.clone());
    match facts.get(&need) {
        None => Err(Stop::Need(need)),
        Some(Fact::BindPins(staging)) => Ok(crate::bind_pins::rewrite(checked, &sources, staging)?),
        Some(_) => Err(misplaced()),
    }
}

/// The stack's own network, which the create is put on: the one the engine holds must be one
/// the proxy made for this stack (`stack_net::judge`).
fn stack_network(op: &str, facts: &Facts, policy: &Policy) -> Result<(), Stop> {
    match facts.get(&Need::StackNetwork) {
        None => Err(Stop::Need(Need::StackNetwork)),
        Some(Fact::StackNetwork(held)) => Ok(crate::stack_net::judge(op, held, policy)?),
        Some(_) => Err(misplaced()),
    }
}

/// The stack's totals with what the request adds (`limits::totals`).
fn totals(op: &str, facts: &Facts, policy: &Policy, adds: Adds) -> Result<(), Stop> {
    match facts.get(&Need::Usage) {
        None => Err(Stop::Need(Need::Usage)),
        Some(Fact::Usage(usage)) => Ok(crate::limits::totals(
            op,
            &policy.create_rules.spend.limits,
            policy.scope.prefix(),
            usage,
            adds,
        )?),
        Some(_) => Err(misplaced()),
    }
}

/// A fact of another kind than its need's: the transport's mistake, refused rather than
/// acted on.
fn misplaced() -> Stop {
    Stop::Refused(Refusal::Upstream("a fact for another need".into()))
}

/// The stack's own objects of `kind`.
fn own(kind: Kind, facts: &Facts) -> Result<&[(String, String)], Stop> {
    match facts.get(&Need::Own(kind)) {
        Some(Fact::Own(own)) => Ok(own),
        Some(_) => Err(misplaced()),
        None => Err(Stop::Need(Need::Own(kind))),
    }
}

/// An ID shorter than a full one: resolved among the stack's own objects, never by the engine.
fn prefix(r: &ObjRef) -> Option<&str> {
    match r {
        ObjRef::Hex(p) if !is_full_id(p) => Some(p),
        _ => None,
    }
}

/// The object `r` names, pinned: an ID prefix resolved among the stack's own objects, then
/// the inspect of the full ID (or of the name), decided for `access`; with the engine's API
/// version that inspect reported.
fn object<'f>(
    kind: Kind,
    r: &ObjRef,
    access: Access,
    op: &str,
    facts: &'f Facts,
    policy: &Policy,
) -> Result<(Pinned, Option<&'f str>), Stop> {
    let need = match prefix(r) {
        Some(p) => {
            let full = pinning::own_prefix(kind, p, own(kind, facts)?)?;
            Need::Object(kind, ObjRef::Hex(full))
        }
        None => Need::Object(kind, r.clone()),
    };
    match facts.get(&need) {
        None => Err(Stop::Need(need)),
        Some(Fact::Object { found, engine_api }) => {
            let pin = inspected(kind, access, op, r, found, policy)?;
            Ok((pin, engine_api.as_deref()))
        }
        Some(Fact::Absent { status, body }) => {
            pinning::inspect_failed(kind, r, *status, body)?;
            match pinning::not_found(kind, r, *status, &policy.rules()) {
                Some(absent) => Err(absent.into()),
                None => Err(Stop::Relay(need)),
            }
        }
        Some(_) => Err(misplaced()),
    }
}

fn inspected(
    kind: Kind,
    access: Access,
    op: &str,
    r: &ObjRef,
    found: &Found,
    policy: &Policy,
) -> Result<Pinned, Refusal> {
    pinning::inspected(kind, access, op, r, &found.inspected(), &policy.rules())
}

/// Another object the request names (a network a create joins, the container a network
/// connect or disconnect names): the request changes it, so it is decided as a change, by
/// its name before anything is asked of the engine.
fn other(kind: Kind, r: &ObjRef, op: &str, facts: &Facts, policy: &Policy) -> Result<Pinned, Stop> {
    policy::check_name(kind, Access::Change, op, r, &policy.scope)?;
    Ok(object(kind, r, Access::Change, op, facts, policy)?.0)
}

/// An exec instance is the stack's when its container is: the exec's inspect names the
/// container, whose inspect decides; pinned to the exec's full ID.
fn exec(id: &str, access: Access, facts: &Facts, policy: &Policy) -> Result<Pinned, Stop> {
    let need = Need::Exec(id.to_owned());
    let (reported, container_id) = match facts.get(&need) {
        None => return Err(Stop::Need(need)),
        Some(Fact::Exec { id, container_id }) => (id, container_id),
        Some(Fact::Absent { status, .. }) if status.is_server_error() => {
            return Err(Refusal::Upstream(format!("exec inspect answered {status}")).into())
        }
        Some(Fact::Absent { .. }) => return Err(Refusal::NoSuchExec(id.to_owned()).into()),
        Some(_) => return Err(misplaced()),
    };
    if !is_full_id(container_id) {
        return Err(Refusal::Upstream("exec inspect answer has no full IDs".into()).into());
    }
    let need = Need::Object(Kind::Container, ObjRef::Hex(container_id.clone()));
    let container = match facts.get(&need) {
        None => return Err(Stop::Need(need)),
        Some(Fact::Object { found, .. }) => found,
        // Gone between the two inspects, or never there: no such exec either way.
        Some(Fact::Absent { .. }) => return Err(Refusal::NoSuchExec(id.to_owned()).into()),
        Some(_) => return Err(misplaced()),
    };
    Ok(pinning::exec(
        access,
        id,
        (reported, container_id),
        &container.inspected(),
        &policy.rules(),
    )?)
}
