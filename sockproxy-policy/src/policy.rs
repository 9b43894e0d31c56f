//! The proxy's decisions, free of I/O. `decide` turns an endpoint into a plan or a refusal;
//! `check_resolved` and `check_exec` decide once an upstream inspect has named the object.
//! Names are decided here without asking the engine, so a refusal is no existence oracle.

use crate::api::{ContainerOp, Endpoint, ExecOp, NetworkOp, ViewKind};
use crate::canon::Query;
use crate::reference::CanonicalName;
use crate::reference::ObjRef;
use crate::refusal::Refusal;
use crate::scope::{Access, Kind, Scope};

/// What the proxy will do for an allowed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Forward unchanged (ping, version, image inspect).
    Forward,
    /// Forward, then keep only entries visible to the stack.
    List(Kind),
    /// Forward a create whose `?name=` is in scope.
    CreateContainer,
    /// Resolve the container, check it, pin the path to its full ID, forward.
    Container {
        op: ContainerOp,
        target: ObjRef,
        access: Access,
    },
    /// Resolve the exec instance's container, check it, pin the exec ID, forward.
    Exec {
        op: ExecOp,
        id: String,
        access: Access,
    },
    /// Read the body's `Name`, check it, forward what was checked.
    CreateNetwork,
    /// Resolve the network, check it, pin; connect/disconnect also check the body's container.
    Network {
        op: NetworkOp,
        target: ObjRef,
        access: Access,
    },
    /// Stream the engine's events, keeping only the stack's own.
    Events,
    /// Forward, then keep only the stack's named volumes.
    VolumeList,
    /// Forward a request on one of the stack's named volumes (checked by name).
    Volume,
    /// Answer `GET /info` for the stack alone.
    Info,
}

/// `allow_images`: normalized references `--allow-image` lets the stack pull.
pub fn decide(
    ep: &Endpoint,
    query: &Query,
    scope: &Scope,
    allow_images: &[String],
) -> Result<Route, Refusal> {
    let op = ep.op();
    match ep {
        Endpoint::Events => Ok(Route::Events),
        Endpoint::Info if scope.info_for_stack() => Ok(Route::Info),
        Endpoint::Info => Err(Refusal::NotAllowed { op }),
        Endpoint::ImagePull => pull(query, allow_images),
        Endpoint::ImageInspect { reference } => image_inspect(reference, allow_images),
        Endpoint::Ping | Endpoint::Version => Ok(Route::Forward),
        Endpoint::ContainerList => {
            unsized_list(&op, query)?;
            Ok(Route::List(Kind::Container))
        }
        Endpoint::NetworkList => Ok(Route::List(Kind::Network)),
        Endpoint::ContainerCreate => {
            known_params(&op, query, CREATE_PARAMS)?;
            let raw = query.get("name").unwrap_or("");
            let name = CanonicalName::stripped(raw);
            if CanonicalName::parse(raw)
                .is_some_and(|n| scope.allows(Kind::Container, Access::Change, n.as_str()))
            {
                name_bound(&op, name)?;
                Ok(Route::CreateContainer)
            } else {
                Err(Refusal::ContainerOutOfScope {
                    op,
                    name: if name.is_empty() {
                        "a container without a name".into()
                    } else {
                        name.to_owned()
                    },
                })
            }
        }
        Endpoint::Container { op: cop, target } => {
            let access = if cop.is_read() {
                Access::Read
            } else {
                Access::Change
            };
            check_name(Kind::Container, access, &op, target, scope)?;
            known_params(&op, query, cop.query_params())?;
            if *cop == ContainerOp::Top {
                top_args(&op, query)?;
            }
            if *cop == ContainerOp::Rename {
                let new = query.get("name").unwrap_or("");
                if !CanonicalName::parse(new)
                    .is_some_and(|n| scope.allows(Kind::Container, Access::Change, n.as_str()))
                {
                    let new = CanonicalName::stripped(new);
                    return Err(out_of_scope(Kind::Container, &op, new));
                }
                name_bound(&op, CanonicalName::stripped(new))?;
            }
            Ok(Route::Container {
                op: *cop,
                target: target.clone(),
                access,
            })
        }
        Endpoint::Exec { op: eop, id } => {
            known_params(&op, query, eop.query_params())?;
            Ok(Route::Exec {
                op: *eop,
                id: id.clone(),
                access: if *eop == ExecOp::Inspect {
                    Access::Read
                } else {
                    Access::Change
                },
            })
        }
        Endpoint::NetworkCreate if scope.restricted() => Ok(Route::CreateNetwork),
        Endpoint::Network { op: nop, target } => {
            let access = if *nop == NetworkOp::Inspect {
                Access::Read
            } else if scope.restricted() {
                Access::Change
            } else {
                return Err(Refusal::NotAllowed { op });
            };
            check_name(Kind::Network, access, &op, target, scope)?;
            known_params(&op, query, nop.query_params())?;
            Ok(Route::Network {
                op: *nop,
                target: target.clone(),
                access,
            })
        }
        Endpoint::VolumeList => {
            known_params(&op, query, &["filters"])?;
            Ok(Route::VolumeList)
        }
        Endpoint::Volume { op: vop, name } => {
            known_params(&op, query, vop.query_params())?;
            // Another stack's volume answers as a missing one does (no existence oracle).
            // Under --require-stack-label a volume carries no label the stack could have set,
            // so the stack has none (mounts refuses named volumes there alike).
            if scope.visible(name) && !scope.requires_label() {
                Ok(Route::Volume)
            } else {
                Err(Refusal::NoSuchVolume(name.clone()))
            }
        }
        Endpoint::NotInView { kind, name } => Err(match kind {
            ViewKind::Plugin => Refusal::NoSuchPlugin(name.clone()),
        }),
        Endpoint::BadRef { .. } => Err(Refusal::BadRequest(format!(
            "{op}: not a container, network or exec reference"
        ))),
        Endpoint::NetworkCreate | Endpoint::Denied { .. } | Endpoint::Unknown { .. } => {
            Err(Refusal::NotAllowed { op })
        }
    }
}

/// Query parameters of `POST /containers/create` (dockerd's `postContainersCreate`).
const CREATE_PARAMS: &[&str] = &["name", "platform"];

/// The longest container name a stack may give (create, rename). dockerd sets no bound; a name
/// is copied into every log line a `{{.Name}}` tag writes (`spend_host::tag_template`), and
/// into every list and inspect answer.
pub const MAX_NAME_BYTES: usize = 128;

/// A container name within `MAX_NAME_BYTES`.
fn name_bound(op: &str, name: &str) -> Result<(), Refusal> {
    if name.len() <= MAX_NAME_BYTES {
        return Ok(());
    }
    Err(Refusal::Setting {
        op: op.to_owned(),
        why: format!(
            "a name of {} bytes is not allowed for this stack (at most {MAX_NAME_BYTES})",
            name.len()
        ),
    })
}

/// Only the parameters dockerd reads for `op` reach it: an allowlist, so a parameter a later
/// engine starts to read (or an experimental one, like `start`'s `checkpoint`) is refused by
/// name instead of forwarded unseen.
fn known_params(op: &str, query: &Query, known: &[&str]) -> Result<(), Refusal> {
    match query.keys().find(|k| !known.contains(k)) {
        Some(k) => Err(Refusal::Setting {
            op: op.to_owned(),
            why: format!("query parameter {k} is not allowed for this stack"),
        }),
        None => Ok(()),
    }
}

/// A container list may not ask for sizes: dockerd sizes every container the client's filters
/// match, the whole host's, before the proxy keeps the stack's own (a walk of each one's
/// writable layer). docker-py and bollard send `size=0`, which passes; `docker ps -s` is refused.
fn unsized_list(op: &str, query: &Query) -> Result<(), Refusal> {
    match query.get("size") {
        Some(v) if go_bool(v) => Err(Refusal::Setting {
            op: op.to_owned(),
            why: format!(
                "query parameter size={v} is not allowed for this stack (the engine would size every container on the host)"
            ),
        }),
        _ => Ok(()),
    }
}

/// dockerd's reading of a boolean query parameter (`httputils.BoolValue`): false only for an
/// empty value, `0`, `no`, `false` or `none`, in any case and with surrounding space.
pub(crate) fn go_bool(v: &str) -> bool {
    !matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "" | "0" | "no" | "false" | "none"
    )
}

/// `ps` options `top` may pass. dockerd runs `ps` as root with the client's options, and when
/// they cannot be combined with its own `-q PIDS` it runs them over every process on the host,
/// then keeps rows by a column the options can rename: any other option could list the host's
/// processes with their environments.
const TOP_ARGS: [&str; 3] = ["", "-ef", "aux"];

fn top_args(op: &str, query: &Query) -> Result<(), Refusal> {
    match query.get("ps_args") {
        Some(args) if !TOP_ARGS.contains(&args) => Err(Refusal::Setting {
            op: op.to_owned(),
            why: format!("ps_args {args:?} is not allowed for this stack (allowed: -ef, aux)"),
        }),
        _ => Ok(()),
    }
}

/// A pull names `fromImage` (and `tag`); only exact `--allow-image` references are pulled.
fn pull(query: &Query, allow_images: &[String]) -> Result<Route, Refusal> {
    if query.get("fromSrc").is_some() {
        return Err(Refusal::NotAllowed {
            op: "images.import".into(),
        });
    }
    let from = query.get("fromImage").unwrap_or("");
    let tag = query.get("tag").filter(|t| !t.is_empty());
    if from.contains('@') && tag.is_some() {
        // dockerd reads a digest-shaped tag as the digest to pull, in place of the one checked.
        return Err(Refusal::Setting {
            op: "images.pull".into(),
            why: format!("{from} names a digest and a tag; pull by the digest alone"),
        });
    }
    let last = from.rsplit('/').next().unwrap_or(from);
    if tag.is_none() && !last.contains(':') && !from.contains('@') {
        // Without a tag dockerd pulls every tag of the repository.
        return Err(Refusal::Setting {
            op: "images.pull".into(),
            why: format!("{from} names no tag or digest; pull one tag at a time"),
        });
    }
    let reference = match tag {
        // The docker CLI pulls `NAME@DIGEST` as `fromImage=NAME&tag=DIGEST`; a tag never holds
        // a ':', and dockerd reads one that parses as a digest as the digest.
        Some(tag) if tag.contains(':') => format!("{from}@{tag}"),
        Some(tag) => format!("{from}:{tag}"),
        None => from.to_owned(),
    };
    if !from.is_empty() && allow_images.contains(&crate::images::normalize_image(&reference)) {
        Ok(Route::Forward)
    } else {
        Err(Refusal::Setting {
            op: "images.pull".into(),
            why: format!("{reference} is not an allowed image (--allow-image)"),
        })
    }
}

/// With `--allow-image`, the images a stack may inspect are the ones it may create from, named
/// as allowed, or by a full ID (which it can only have read from its own container): an ID
/// prefix would let it walk every image on the host, other stacks' committed containers with
/// their environments among them. Anything else is absent, as the engine says it, so
/// `docker inspect NAME` walks on to the next kind of object. Without the flag the stack may
/// create from any image, so there is nothing its inspect could add.
fn image_inspect(reference: &str, allow_images: &[String]) -> Result<Route, Refusal> {
    let hex = reference.strip_prefix("sha256:").unwrap_or(reference);
    if allow_images.is_empty()
        || crate::reference::is_full_id(hex)
        || allow_images.contains(&crate::images::normalize_image(reference))
    {
        Ok(Route::Forward)
    } else {
        Err(Refusal::NoSuchImage(crate::images::normalize_image(
            reference,
        )))
    }
}

/// A name reference is decided locally; a hex reference waits for the upstream inspect.
pub fn check_name(
    kind: Kind,
    access: Access,
    op: &str,
    target: &ObjRef,
    scope: &Scope,
) -> Result<(), Refusal> {
    match target {
        ObjRef::Name(name) if !scope.allows(kind, access, name) => {
            Err(out_of_scope(kind, op, name))
        }
        _ => Ok(()),
    }
}

/// Decides on the canonical name an upstream inspect returned for `target`.
pub fn check_resolved(
    kind: Kind,
    access: Access,
    op: &str,
    target: &ObjRef,
    canonical: &str,
    scope: &Scope,
) -> Result<(), Refusal> {
    let name = CanonicalName::parse(canonical);
    if name.is_some_and(|n| scope.allows(kind, access, n.as_str())) {
        return Ok(());
    }
    Err(match target {
        ObjRef::Name(name) => out_of_scope(kind, op, name),
        // The stack may see this object (its inspect names it), so naming it hides nothing. A
        // change it may not make is refused as if asked by name, never answered as absent,
        // which would let a client take a container that is still there for gone.
        ObjRef::Hex(_) if name.is_some_and(|n| scope.allows(kind, Access::Read, n.as_str())) => {
            out_of_scope(kind, op, CanonicalName::stripped(canonical))
        }
        ObjRef::Hex(id) => absent(kind, id),
    })
}

/// An exec instance is in scope when its container is.
pub fn check_exec(access: Access, id: &str, container: &str, scope: &Scope) -> Result<(), Refusal> {
    if CanonicalName::parse(container)
        .is_some_and(|n| scope.allows(Kind::Container, access, n.as_str()))
    {
        Ok(())
    } else {
        Err(Refusal::NoSuchExec(id.to_owned()))
    }
}

pub fn absent(kind: Kind, reference: &str) -> Refusal {
    match kind {
        Kind::Container => Refusal::NoSuchContainer(reference.to_owned()),
        Kind::Network => Refusal::NoSuchNetwork(reference.to_owned()),
    }
}

fn out_of_scope(kind: Kind, op: &str, name: &str) -> Refusal {
    match kind {
        Kind::Container => Refusal::ContainerOutOfScope {
            op: op.to_owned(),
            name: name.to_owned(),
        },
        Kind::Network => Refusal::NetworkOutOfScope {
            op: op.to_owned(),
            name: name.to_owned(),
        },
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
pub(crate) mod tests;

#[cfg(test)]
#[path = "policy_name_tests.rs"]
mod name_tests;
