//! The proxy's decisions, free of I/O. `decide` turns an endpoint into a plan or a refusal;
//! `check_resolved` and `check_exec` decide once an upstream inspect has named the object.
//! Names are decided here without asking the engine, so a refusal is no existence oracle.

use crate::api::{ContainerOp, Endpoint, ExecOp, NetworkOp, ObjRef, ViewKind};
use crate::canon::Query;
use crate::refusal::Refusal;
use crate::scope::{Access, Kind, Scope};

/// What the proxy will do for an allowed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
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
    /// Answer `GET /info` for the stack alone.
    Info,
}

/// `allow_images`: normalized references `--allow-image` lets the stack pull.
pub fn decide(
    ep: &Endpoint,
    query: &Query,
    scope: &Scope,
    allow_images: &[String],
) -> Result<Plan, Refusal> {
    let op = ep.op();
    match ep {
        Endpoint::Events => Ok(Plan::Events),
        Endpoint::Info if scope.info_for_stack() => Ok(Plan::Info),
        Endpoint::Info => Err(Refusal::NotAllowed { op }),
        Endpoint::ImagePull => pull(query, allow_images),
        Endpoint::Ping | Endpoint::Version | Endpoint::ImageInspect => Ok(Plan::Forward),
        Endpoint::ContainerList => Ok(Plan::List(Kind::Container)),
        Endpoint::NetworkList => Ok(Plan::List(Kind::Network)),
        Endpoint::ContainerCreate => {
            let name = query.get("name").unwrap_or("");
            let name = name.strip_prefix('/').unwrap_or(name);
            if scope.allows(Kind::Container, Access::Change, name) && !name.contains('/') {
                Ok(Plan::CreateContainer)
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
            if *cop == ContainerOp::Rename {
                let new = query.get("name").unwrap_or("");
                let new = new.strip_prefix('/').unwrap_or(new);
                if new.contains('/') || !scope.allows(Kind::Container, Access::Change, new) {
                    return Err(out_of_scope(Kind::Container, &op, new));
                }
            }
            Ok(Plan::Container {
                op: *cop,
                target: target.clone(),
                access,
            })
        }
        Endpoint::Exec { op: eop, id } => Ok(Plan::Exec {
            op: *eop,
            id: id.clone(),
            access: if *eop == ExecOp::Inspect {
                Access::Read
            } else {
                Access::Change
            },
        }),
        Endpoint::NetworkCreate if scope.restricted() => Ok(Plan::CreateNetwork),
        Endpoint::Network { op: nop, target } => {
            let access = if *nop == NetworkOp::Inspect {
                Access::Read
            } else if scope.restricted() {
                Access::Change
            } else {
                return Err(Refusal::NotAllowed { op });
            };
            check_name(Kind::Network, access, &op, target, scope)?;
            Ok(Plan::Network {
                op: *nop,
                target: target.clone(),
                access,
            })
        }
        Endpoint::NotInView { kind, name } => Err(match kind {
            ViewKind::Volume => Refusal::NoSuchVolume(name.clone()),
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

/// A pull names `fromImage` (and `tag`); only exact `--allow-image` references are pulled.
fn pull(query: &Query, allow_images: &[String]) -> Result<Plan, Refusal> {
    if query.get("fromSrc").is_some() {
        return Err(Refusal::NotAllowed {
            op: "images.import".into(),
        });
    }
    let from = query.get("fromImage").unwrap_or("");
    let tag = query.get("tag").filter(|t| !t.is_empty());
    let last = from.rsplit('/').next().unwrap_or(from);
    if tag.is_none() && !last.contains(':') && !from.contains('@') {
        // Without a tag dockerd pulls every tag of the repository.
        return Err(Refusal::Setting {
            op: "images.pull".into(),
            why: format!("{from} names no tag or digest; pull one tag at a time"),
        });
    }
    let reference = match tag {
        Some(tag) if !from.contains('@') => format!("{from}:{tag}"),
        _ => from.to_owned(),
    };
    if !from.is_empty() && allow_images.contains(&crate::config::normalize_image(&reference)) {
        Ok(Plan::Forward)
    } else {
        Err(Refusal::Setting {
            op: "images.pull".into(),
            why: format!("{reference} is not an allowed image (--allow-image)"),
        })
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
    let canonical = canonical.strip_prefix('/').unwrap_or(canonical);
    if !canonical.contains('/') && scope.allows(kind, access, canonical) {
        return Ok(());
    }
    Err(match target {
        ObjRef::Name(name) => out_of_scope(kind, op, name),
        // The stack may see this object (its inspect names it), so naming it hides nothing. A
        // change it may not make is refused as if asked by name, never answered as absent,
        // which would let a client take a container that is still there for gone.
        ObjRef::Hex(_)
            if !canonical.contains('/') && scope.allows(kind, Access::Read, canonical) =>
        {
            out_of_scope(kind, op, canonical)
        }
        ObjRef::Hex(id) => absent(kind, id),
    })
}

/// An exec instance is in scope when its container is.
pub fn check_exec(access: Access, id: &str, container: &str, scope: &Scope) -> Result<(), Refusal> {
    let container = container.strip_prefix('/').unwrap_or(container);
    if !container.contains('/') && scope.allows(Kind::Container, access, container) {
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
mod tests {
    use super::*;
    use crate::scope::Prefix;

    fn scope(restricted: bool) -> Scope {
        Scope::new(Prefix::parse("deer-flow-").expect("valid"), restricted)
    }

    fn container(op: ContainerOp, name: &str) -> Endpoint {
        Endpoint::Container {
            op,
            target: ObjRef::parse(name).expect("ref"),
        }
    }

    #[test]
    fn decision_table() {
        let q = Query::default();
        let stop_sidecar = container(ContainerOp::Stop, "deer-flow-netproxy-c1a44b2434411cc2");
        let cases: Vec<(Endpoint, bool, Result<(), String>)> = vec![
            (Endpoint::Ping, false, Ok(())),
            (
                stop_sidecar.clone(),
                false,
                Err("sockproxy: containers.stop: deer-flow-netproxy-c1a44b2434411cc2 is not one of this stack's sandboxes".into()),
            ),
            (stop_sidecar, true, Ok(())),
            (container(ContainerOp::Inspect, "deer-flow-netproxy-x"), false, Ok(())),
            (
                container(ContainerOp::Inspect, "other-x"),
                false,
                Err("sockproxy: containers.inspect: other-x is not one of this stack's sandboxes".into()),
            ),
            (container(ContainerOp::Stop, "abc123"), false, Ok(())),
            (
                Endpoint::Denied { op: "system.info".into() },
                true,
                Err("sockproxy: system.info: not allowed for this stack".into()),
            ),
            (Endpoint::Info, false, Ok(())),
            (
                Endpoint::NetworkCreate,
                false,
                Err("sockproxy: networks.create: not allowed for this stack".into()),
            ),
            (Endpoint::NetworkCreate, true, Ok(())),
            (
                Endpoint::Network { op: NetworkOp::Remove, target: ObjRef::parse("bridge").expect("ref") },
                true,
                Err("sockproxy: networks.remove: bridge is not one of this stack's networks".into()),
            ),
            (
                Endpoint::Network { op: NetworkOp::Remove, target: ObjRef::parse("deer-flow-net-1").expect("ref") },
                false,
                Err("sockproxy: networks.remove: not allowed for this stack".into()),
            ),
            (
                Endpoint::Unknown { op: "POST /containers/a/b/stop".into() },
                true,
                Err("sockproxy: POST /containers/a/b/stop: not allowed for this stack".into()),
            ),
        ];
        for (ep, restricted, want) in cases {
            let got = decide(&ep, &q, &scope(restricted), &[])
                .map(|_| ())
                .map_err(|r| r.to_string());
            assert_eq!(got, want, "{ep:?} restricted={restricted}");
        }
    }

    #[test]
    fn info_deny_refuses_info() {
        let s = scope(false).with_info(false);
        assert_eq!(
            decide(&Endpoint::Info, &Query::default(), &s, &[]).map_err(|r| r.to_string()),
            Err("sockproxy: system.info: not allowed for this stack".into())
        );
    }

    #[test]
    fn create_needs_a_name_in_scope() {
        let s = scope(false);
        let with = |n: &str| Query::parse(Some(&format!("name={n}"))).expect("query");
        assert!(decide(
            &Endpoint::ContainerCreate,
            &with("deer-flow-sandbox-1"),
            &s,
            &[]
        )
        .is_ok());
        assert!(decide(
            &Endpoint::ContainerCreate,
            &with("/deer-flow-sandbox-1"),
            &s,
            &[]
        )
        .is_ok());
        assert!(decide(
            &Endpoint::ContainerCreate,
            &with("deer-flow-netproxy-1"),
            &s,
            &[]
        )
        .is_err());
        assert!(decide(&Endpoint::ContainerCreate, &with("other"), &s, &[]).is_err());
        assert!(decide(&Endpoint::ContainerCreate, &Query::default(), &s, &[]).is_err());
        assert!(decide(
            &Endpoint::ContainerCreate,
            &with("deer-flow-netproxy-1"),
            &scope(true),
            &[]
        )
        .is_ok());
    }

    #[test]
    fn pulls_rename_and_events() {
        let s = scope(false);
        let q = |raw: &str| Query::parse(Some(raw)).expect("query");
        let allowed = vec!["busybox:latest".to_owned(), "ghcr.io/x/y:1".to_owned()];
        let pull = |raw: &str| {
            decide(&Endpoint::ImagePull, &q(raw), &s, &allowed)
                .map(|_| ())
                .map_err(|r| r.to_string())
        };
        assert_eq!(
            pull("fromImage=docker.io%2Flibrary%2Fbusybox&tag=latest"),
            Ok(())
        );
        assert_eq!(
            pull("fromImage=busybox"),
            Err(
                "sockproxy: images.pull: busybox names no tag or digest; pull one tag at a time"
                    .into()
            )
        );
        assert_eq!(pull("fromImage=busybox%3Alatest"), Ok(()));
        assert_eq!(pull("fromImage=busybox&tag=latest"), Ok(()));
        assert_eq!(pull("fromImage=ghcr.io%2Fx%2Fy&tag=1"), Ok(()));
        assert_eq!(
            pull("fromImage=ghcr.io%2Fx%2Fy&tag=2"),
            Err(
                "sockproxy: images.pull: ghcr.io/x/y:2 is not an allowed image (--allow-image)"
                    .into()
            )
        );
        assert!(pull("fromSrc=-").is_err());
        assert!(pull("").is_err());
        let rename = |new: &str| {
            decide(
                &container(ContainerOp::Rename, "deer-flow-sandbox-1"),
                &q(&format!("name={new}")),
                &s,
                &[],
            )
            .map(|_| ())
            .map_err(|r| r.to_string())
        };
        assert_eq!(rename("deer-flow-sandbox-2"), Ok(()));
        assert_eq!(
            rename("other"),
            Err("sockproxy: containers.rename: other is not one of this stack's sandboxes".into())
        );
        assert!(rename("").is_err());
        assert!(decide(
            &container(ContainerOp::Rename, "other"),
            &q("name=deer-flow-sandbox-2"),
            &s,
            &[]
        )
        .is_err());
        assert_eq!(
            decide(&Endpoint::Events, &Query::default(), &s, &[]),
            Ok(Plan::Events)
        );
    }

    #[test]
    fn resolved_ids_out_of_scope_look_absent_unless_visible() {
        let s = scope(false);
        let hex = ObjRef::Hex("abc".into());
        let got = check_resolved(
            Kind::Container,
            Access::Change,
            "containers.stop",
            &hex,
            "/other",
            &s,
        );
        assert_eq!(got, Err(Refusal::NoSuchContainer("abc".into())));
        let got = check_resolved(
            Kind::Container,
            Access::Change,
            "containers.stop",
            &hex,
            "/deer-flow-sandbox-1",
            &s,
        );
        assert_eq!(got, Ok(()));
        // A link alias is never a stack's own canonical name.
        let got = check_resolved(
            Kind::Container,
            Access::Read,
            "containers.inspect",
            &hex,
            "/deer-flow-x/alias",
            &s,
        );
        assert!(got.is_err());
        // A container the stack may see but not change (a leftover sidecar without
        // `--restricted`): by ID, refused by its name, not answered as absent.
        let got = check_resolved(
            Kind::Container,
            Access::Change,
            "containers.stop",
            &hex,
            "/deer-flow-netproxy-1",
            &s,
        );
        assert_eq!(
            got.map_err(|e| e.to_string()),
            Err("sockproxy: containers.stop: deer-flow-netproxy-1 is not one of this stack's sandboxes".into())
        );
        assert!(check_exec(Access::Change, "e1", "/deer-flow-sandbox-1", &s).is_ok());
        assert_eq!(
            check_exec(Access::Change, "e1", "/deer-flow-netproxy-1", &s),
            Err(Refusal::NoSuchExec("e1".into()))
        );
        assert!(check_exec(Access::Read, "e1", "/deer-flow-netproxy-1", &s).is_ok());
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use crate::api;
    use crate::canon;
    use crate::scope::Prefix;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Any target: the pure pipeline answers without panicking.
        #[test]
        fn pipeline_never_panics(method in "(GET|POST|DELETE|PUT|HEAD|PATCH|X)", path in "[ -~]{0,60}") {
            let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
            if let Ok(uri) = path.parse::<http::Uri>() {
                if let Ok(t) = canon::canonicalize(&uri, &http::HeaderMap::new()) {
                    let m = http::Method::from_bytes(method.as_bytes()).expect("method");
                    let ep = api::parse(&m, &t);
                    let _ = decide(&ep, &t.query, &scope, &[]);
                }
            }
        }

        /// A container named outside the stack's sandbox scope is never allowed to be changed,
        /// whatever the action and version segment.
        #[test]
        fn foreign_names_are_never_changeable(
            name in "[a-zA-Z0-9_.-]{1,24}",
            action in "(start|stop|kill|restart|attach|resize|exec|archive)",
            version in "(|/v1.41|/v1.44)",
        ) {
            prop_assume!(!name.starts_with("deer-flow-sandbox-"));
            prop_assume!(!name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
            let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
            let method = if action == "archive" { "PUT" } else { "POST" };
            let target = format!("{version}/containers/{name}/{action}");
            if let Ok(uri) = target.parse::<http::Uri>() {
                if let Ok(t) = canon::canonicalize(&uri, &http::HeaderMap::new()) {
                    let m = http::Method::from_bytes(method.as_bytes()).expect("method");
                    let ep = api::parse(&m, &t);
                    prop_assert!(decide(&ep, &t.query, &scope, &[]).is_err(), "{target} was allowed");
                }
            }
        }
    }
}
