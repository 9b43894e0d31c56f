//! What a create's settings may name besides the container itself: networks (the engine's
//! defaults or the stack's own), and other containers (`container:` modes, `VolumesFrom`,
//! `Links`), which must be the stack's own by name, and under `--require-stack-label` none.

use serde_json::Value;

use crate::create_rules::Ctx;
use crate::fields::{self, value_not_allowed};
use crate::reference::CanonicalName;
use crate::refusal::Refusal;
use crate::scope::{Access, Kind};

/// A network the stack may attach to: the engine's defaults (`stack_net::place` then puts the
/// default on the stack's own network, and refuses `bridge` unless allowed), the stack's own
/// network, or one of its own families by name.
pub fn own_network(ctx: &Ctx, path: &str, name: &str) -> Result<(), Refusal> {
    if matches!(name, "" | "default" | "bridge" | "none")
        || name == ctx.stack_network
        || ctx.scope.allows(Kind::Network, Access::Change, name)
    {
        Ok(())
    } else {
        Err(Refusal::Setting {
            op: ctx.op.to_owned(),
            why: format!("{path} {name} is not one of this stack's networks"),
        })
    }
}

/// A container another setting points at must be the stack's own, by name. Under
/// `--require-stack-label` the name alone does not make a container the stack's, and the body
/// check reads no engine state, so no container may be named at all.
pub fn own_container(ctx: &Ctx, path: &str, reference: &str) -> Result<(), Refusal> {
    if ctx.rules.require_stack_label {
        return Err(Refusal::Setting {
            op: ctx.op.to_owned(),
            why: format!(
                "{path} names another container, which --require-stack-label does not allow"
            ),
        });
    }
    if CanonicalName::parse(reference).is_some_and(|n| {
        ctx.scope
            .allows(Kind::Container, Access::Change, n.as_str())
    }) {
        Ok(())
    } else {
        Err(Refusal::Setting {
            op: ctx.op.to_owned(),
            why: format!("{path} {reference} is not one of this stack's sandboxes"),
        })
    }
}

pub fn network_mode(ctx: &Ctx, path: &str, v: Value) -> Result<Value, Refusal> {
    let mode = fields::string(path, v)?;
    match mode.strip_prefix("container:") {
        Some(c) => own_container(ctx, path, c)?,
        None if mode == "host" => return Err(value_not_allowed(ctx.op, path, "host", "")),
        None => own_network(ctx, path, &mode)?,
    }
    Ok(Value::String(mode))
}

/// `IpcMode`/`PidMode`: one of `plain`, or `container:` of the stack's own.
pub fn namespace(ctx: &Ctx, path: &str, v: Value, plain: &[&str]) -> Result<Value, Refusal> {
    let mode = fields::string(path, v)?;
    match mode.strip_prefix("container:") {
        Some(c) => own_container(ctx, path, c)?,
        None if plain.contains(&mode.as_str()) => {}
        None => return Err(value_not_allowed(ctx.op, path, &mode, "")),
    }
    Ok(Value::String(mode))
}

/// `VolumesFrom` (`NAME[:ro|rw]`) and `Links` (`NAME:ALIAS`) name only the stack's own.
pub fn own_containers(
    ctx: &Ctx,
    path: &str,
    v: Value,
    volumes_from: bool,
) -> Result<Value, Refusal> {
    let list = fields::str_list(path, v)?;
    for item in &list {
        let name = if volumes_from {
            item.split(':').next().unwrap_or("")
        } else {
            linked(ctx, path, item)?
        };
        own_container(ctx, path, name)?;
    }
    Ok(Value::from(list))
}

/// The container a link `NAME[:ALIAS]` names, read as dockerd's `ParseLink` reads it: more
/// than one ':' is a bad link there, so it is refused here rather than judged by a guess.
pub fn linked<'a>(ctx: &Ctx, path: &str, item: &'a str) -> Result<&'a str, Refusal> {
    match item.split(':').collect::<Vec<_>>()[..] {
        [name] | [name, _] => Ok(name),
        _ => Err(value_not_allowed(
            ctx.op,
            path,
            item,
            "a link is NAME or NAME:ALIAS",
        )),
    }
}
