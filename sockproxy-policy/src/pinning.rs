//! The decisions made once the engine has named an object (pure): whether an inspected
//! container, network or exec instance is the stack's, and which full ID the forwarded path is
//! pinned to. A `Pinned` can only be made here, and the forwarder takes nothing else for a path
//! it pins, so "every forwarded path is pinned to a checked ID" holds by type.

use http::StatusCode;

use crate::policy::{absent, check_exec, check_resolved};
use crate::reference::{is_full_id, ObjRef};
use crate::refusal::Refusal;
use crate::scope::{Access, Kind, Scope, PREDEFINED_NETWORKS};

/// A full 64-hex ID the proxy decided on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned(String);

impl Pinned {
    pub fn id(&self) -> &str {
        &self.0
    }
}

/// What the rules need: the stack's scope, and `--require-stack-label` with the stack's name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules<'a> {
    pub scope: &'a Scope,
    pub require_stack_label: bool,
    pub stack: &'a str,
}

/// The fields of an inspect answer the decision reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inspected<'a> {
    pub id: &'a str,
    pub name: &'a str,
    /// The `sockproxy.stack` label, when the object has one.
    pub stack_label: Option<&'a str>,
}

/// An inspect the engine did not answer with 200: an ID (or ID prefix) that is absent or
/// ambiguous looks exactly like one out of scope; an engine failure is a 502; otherwise the
/// engine's own answer for a name goes back to the client (`Ok(())`).
pub(crate) fn inspect_failed(
    kind: Kind,
    r: &ObjRef,
    status: StatusCode,
    body: &[u8],
) -> Result<(), Refusal> {
    // An ambiguous prefix is 500 on 20.10 and 400 on 29 (moby `pkg/truncindex`,
    // `daemon/container/view.go`); it must not tell a stack that another's ID shares it.
    let ambiguous = String::from_utf8_lossy(body)
        .to_ascii_lowercase()
        .contains("multiple ids found with provided prefix");
    match r {
        ObjRef::Hex(id) if status.is_client_error() || ambiguous => Err(absent(kind, id)),
        _ if status.is_server_error() => {
            Err(Refusal::Upstream(format!("inspect answered {status}")))
        }
        _ => Ok(()),
    }
}

/// Under `--require-stack-label`, the engine's 404 for a name is answered by the proxy, in the
/// words it uses for another stack's object of that name (`inspected`), so the two answers are
/// the same bytes with the same headers: the engine's own would carry headers of its own
/// (`Api-Version`, `Server`) that the proxy's lack. `None`: the engine's answer goes back.
pub(crate) fn not_found(
    kind: Kind,
    r: &ObjRef,
    status: StatusCode,
    rules: &Rules,
) -> Option<Refusal> {
    match r {
        ObjRef::Name(name) if rules.require_stack_label && status == StatusCode::NOT_FOUND => {
            Some(absent(kind, name))
        }
        _ => None,
    }
}

/// Decides on an inspected container or network.
pub(crate) fn inspected(
    kind: Kind,
    access: Access,
    op: &str,
    r: &ObjRef,
    ins: &Inspected,
    rules: &Rules,
) -> Result<Pinned, Refusal> {
    check_resolved(kind, access, op, r, ins.name, rules.scope)?;
    // Containers and networks alike, reads as changes: a container or network made on the
    // engine (or by another stack with the same prefix) is not the stack's to read (its
    // environment, logs, processes), remove, connect to or put a sandbox on. The engine's
    // predefined networks carry no label and stay readable.
    let predefined = kind == Kind::Network && PREDEFINED_NETWORKS.contains(&ins.name);
    if rules.require_stack_label && !predefined && ins.stack_label != Some(rules.stack) {
        // Reads and changes alike get the not-found of a name nobody has (`not_found`, which
        // answers that one under the flag): a 403 would tell the stack that another stack
        // holds that (predictable) sandbox name.
        return Err(absent(kind, r.as_str()));
    }
    if !is_full_id(ins.id) {
        return Err(Refusal::Upstream("inspect answer has no full ID".into()));
    }
    Ok(Pinned(ins.id.to_owned()))
}

/// Decides on an exec instance (`exec_id` as the client sent it, `reported` the exec inspect's
/// own ID and container ID) once its container has been inspected by that container ID.
pub(crate) fn exec(
    access: Access,
    exec_id: &str,
    reported: (&str, &str),
    container: &Inspected,
    rules: &Rules,
) -> Result<Pinned, Refusal> {
    let (id, container_id) = reported;
    if !is_full_id(id) || !is_full_id(container_id) {
        return Err(Refusal::Upstream(
            "exec inspect answer has no full IDs".into(),
        ));
    }
    if container.id != container_id {
        return Err(Refusal::NoSuchExec(exec_id.to_owned()));
    }
    check_exec(access, exec_id, container.name, rules.scope)?;
    if rules.require_stack_label && container.stack_label != Some(rules.stack) {
        return Err(Refusal::NoSuchExec(exec_id.to_owned()));
    }
    Ok(Pinned(id.to_owned()))
}

/// An ID prefix is resolved among the stack's own objects only (`(id, name)` of the filtered
/// list), never by the engine: a prefix another stack's object shares must not change the
/// answer. One match is the object; none, or more than one, is "no such object".
pub(crate) fn own_prefix(
    kind: Kind,
    prefix: &str,
    own: &[(String, String)],
) -> Result<String, Refusal> {
    let mut matching = own.iter().filter(|(id, _)| id.starts_with(prefix));
    match (matching.next(), matching.next()) {
        (Some((id, _)), None) => Ok(id.clone()),
        _ => Err(absent(kind, prefix)),
    }
}

#[cfg(test)]
#[path = "pinning_tests.rs"]
mod tests;
