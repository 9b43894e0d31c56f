//! The decisions made once the engine has named an object (pure): whether an inspected
//! container, network or exec instance is the stack's, and which full ID the forwarded path is
//! pinned to. A `Pinned` can only be made here, and the forwarder takes nothing else for a path
//! it pins, so "every forwarded path is pinned to a checked ID" holds by type.

use http::StatusCode;

use crate::api::ObjRef;
use crate::policy::{absent, check_exec, check_resolved};
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
pub struct Rules<'a> {
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

pub fn is_full_id(id: &str) -> bool {
    id.len() == 64
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// An inspect the engine did not answer with 200: an ID (or ID prefix) that is absent or
/// ambiguous looks exactly like one out of scope; an engine failure is a 502; otherwise the
/// engine's own answer for a name goes back to the client (`Ok(())`).
pub fn inspect_failed(
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
pub fn not_found(kind: Kind, r: &ObjRef, status: StatusCode, rules: &Rules) -> Option<Refusal> {
    match r {
        ObjRef::Name(name) if rules.require_stack_label && status == StatusCode::NOT_FOUND => {
            Some(absent(kind, name))
        }
        _ => None,
    }
}

/// An engine conflict over a name (`Conflict. The container name "/N" is already in use by
/// container "ID". …`, on create and rename) with the other container's ID taken out: under
/// `--require-stack-label` that container may be another stack's, whose ID the stack must not
/// learn. The answer then names nothing but the requested name.
pub fn conflict_names_only(message: &str) -> String {
    const BY: &str = " by container \"";
    let Some(at) = message.find(BY) else {
        return message.to_owned();
    };
    let rest = &message[at + BY.len()..];
    match rest.find('"') {
        Some(end) if rest[..end].bytes().all(|b| b.is_ascii_hexdigit()) => {
            format!("{}{}", &message[..at], &rest[end + 1..])
        }
        _ => message.to_owned(),
    }
}

/// Decides on an inspected container or network.
pub fn inspected(
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
pub fn exec(
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

/// The first engine API whose archive endpoints work in a mount namespace of their own (moby
/// 2bdc7fb, engine 24.0). Before it, dockerd mounts the container's volumes, binds and network
/// files into its root filesystem in the host's namespace for every archive request, through a
/// path a process in the container can swap for a symlink between the check and the mount: a
/// running sandbox then gets a root `mkdir` and a bind mount at a host path of its choosing,
/// and a lost race leaves a mount behind in the host's namespace.
pub const ARCHIVE_SAFE_API: (u32, u32) = (1, 43);

/// `GET`/`HEAD`/`PUT /containers/{id}/archive` is forwarded only to an engine that says
/// (`Api-Version` on the inspect that pinned the container) it is at least API 1.43. An
/// answer without the header, or with one that does not parse, is an old engine.
pub fn archive_on(engine_api: Option<&str>) -> Result<(), Refusal> {
    let engine = engine_api.and_then(crate::canon::api_version);
    match engine {
        Some(v) if v >= ARCHIVE_SAFE_API => Ok(()),
        _ => Err(Refusal::Setting {
            op: "containers.archive".into(),
            why: format!(
                "copying to or from a container needs Docker Engine 24 (API {}.{}) or later; \
                 this engine ({}) mounts the container's volumes on the host for it",
                ARCHIVE_SAFE_API.0,
                ARCHIVE_SAFE_API.1,
                engine.map_or("API unknown".into(), |(a, b)| format!("API {a}.{b}")),
            ),
        }),
    }
}

/// An ID prefix is resolved among the stack's own objects only (`(id, name)` of the filtered
/// list), never by the engine: a prefix another stack's object shares must not change the
/// answer. One match is the object; none, or more than one, is "no such object".
pub fn own_prefix(kind: Kind, prefix: &str, own: &[(String, String)]) -> Result<String, Refusal> {
    let mut matching = own.iter().filter(|(id, _)| id.starts_with(prefix));
    match (matching.next(), matching.next()) {
        (Some((id, _)), None) => Ok(id.clone()),
        _ => Err(absent(kind, prefix)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Prefix;

    fn rules(scope: &Scope) -> Rules<'_> {
        Rules {
            scope,
            require_stack_label: true,
            stack: "atlas",
        }
    }

    const ID: &str = "1111111111111111111111111111111111111111111111111111111111111111";

    #[test]
    fn conflicts_name_only_the_requested_name() {
        let id = "8e4b8b4a3f0c6a3b1f2e9d7c5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b";
        let engine = format!(
            "Conflict. The container name \"/deer-flow-sandbox-1\" is already in use by container \"{id}\". You have to remove (or rename) that container to be able to reuse that name."
        );
        let want = "Conflict. The container name \"/deer-flow-sandbox-1\" is already in use. You have to remove (or rename) that container to be able to reuse that name.";
        assert_eq!(conflict_names_only(&engine), want);
        // Rename's wording wraps the same sentence.
        assert_eq!(
            conflict_names_only(&format!("Error when allocating new name: {engine}")),
            format!("Error when allocating new name: {want}")
        );
        assert!(!conflict_names_only(&engine).contains(&id[..12]));
        // Anything else is left as the engine said it.
        for other in [
            "You cannot remove a running container 1234. Stop the container before attempting removal or force remove",
            "Conflict. The container name \"/x\" is already in use by container \"not-hex\".",
            "",
        ] {
            assert_eq!(conflict_names_only(other), other);
        }
    }

    #[test]
    fn inspected_objects() {
        let s = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
        let r = rules(&s);
        let name = ObjRef::Name("deer-flow-sandbox-1".into());
        let ins = |label| Inspected {
            id: ID,
            name: "/deer-flow-sandbox-1",
            stack_label: label,
        };
        let ok = inspected(
            Kind::Container,
            Access::Change,
            "containers.stop",
            &name,
            &ins(Some("atlas")),
            &r,
        );
        assert_eq!(ok.map(|p| p.id().to_owned()), Ok(ID.to_owned()));
        // A change to another stack's container answers what a missing one answers, under the
        // flag the proxy's own not-found for both (issue 37).
        for (op, label) in [
            ("containers.stop", None),
            ("containers.kill", Some("other-stack")),
            ("containers.remove", Some("")),
        ] {
            assert_eq!(
                inspected(Kind::Container, Access::Change, op, &name, &ins(label), &r),
                Err(Refusal::NoSuchContainer("deer-flow-sandbox-1".into())),
                "{op}"
            );
        }
        assert_eq!(
            not_found(Kind::Container, &name, StatusCode::NOT_FOUND, &r),
            Some(Refusal::NoSuchContainer("deer-flow-sandbox-1".into()))
        );
        assert_eq!(
            not_found(Kind::Container, &name, StatusCode::NOT_FOUND, &r)
                .map(|x| (x.status(), x.body())),
            inspected(
                Kind::Container,
                Access::Change,
                "containers.stop",
                &name,
                &ins(None),
                &r
            )
            .err()
            .map(|x| (x.status(), x.body())),
            "the same status and bytes"
        );
        assert_eq!(
            not_found(
                Kind::Network,
                &ObjRef::Name("deer-flow-sandbox-net-9".into()),
                StatusCode::NOT_FOUND,
                &r
            ),
            Some(Refusal::NoSuchNetwork("deer-flow-sandbox-net-9".into()))
        );
        // Other answers, and every answer without the flag, are the engine's.
        assert_eq!(
            not_found(Kind::Container, &name, StatusCode::CONFLICT, &r),
            None
        );
        let unlabelled = Rules {
            require_stack_label: false,
            ..r
        };
        assert_eq!(
            not_found(Kind::Container, &name, StatusCode::NOT_FOUND, &unlabelled),
            None
        );
        // Reads too: another stack on the same prefix must not see its environment or logs.
        for label in [None, Some("other-stack")] {
            assert_eq!(
                inspected(
                    Kind::Container,
                    Access::Read,
                    "containers.inspect",
                    &name,
                    &ins(label),
                    &r
                ),
                Err(Refusal::NoSuchContainer("deer-flow-sandbox-1".into())),
                "{label:?}"
            );
        }
        // Without the flag, the prefix alone decides.
        let prefix_only = Rules {
            require_stack_label: false,
            ..r
        };
        for access in [Access::Read, Access::Change] {
            assert_eq!(
                inspected(
                    Kind::Container,
                    access,
                    "containers.x",
                    &name,
                    &ins(Some("other-stack")),
                    &prefix_only
                ),
                Ok(Pinned(ID.into())),
                "{access:?}"
            );
        }
        // Networks too: one without the stack's label is not the stack's to see or change.
        let net = ObjRef::Name("deer-flow-sandbox-net-1".into());
        let net_ins = |label| Inspected {
            id: ID,
            name: "deer-flow-sandbox-net-1",
            stack_label: label,
        };
        let restricted = Scope::new(Prefix::parse("deer-flow-").expect("valid"), true);
        let rr = rules(&restricted);
        for label in [None, Some("other-stack")] {
            assert_eq!(
                inspected(
                    Kind::Network,
                    Access::Change,
                    "networks.connect",
                    &net,
                    &net_ins(label),
                    &rr
                ),
                // The answer for a network nobody has (issue 37: a 403 was an oracle).
                Err(Refusal::NoSuchNetwork("deer-flow-sandbox-net-1".into())),
                "{label:?}"
            );
            assert_eq!(
                inspected(
                    Kind::Network,
                    Access::Change,
                    "networks.remove",
                    &ObjRef::Hex("11".into()),
                    &net_ins(label),
                    &rr
                ),
                Err(Refusal::NoSuchNetwork("11".into())),
                "{label:?}"
            );
        }
        assert_eq!(
            inspected(
                Kind::Network,
                Access::Read,
                "networks.inspect",
                &net,
                &net_ins(None),
                &rr
            ),
            Err(Refusal::NoSuchNetwork("deer-flow-sandbox-net-1".into()))
        );
        // The engine's own networks carry no label and stay readable, never changeable.
        let bridge = Inspected {
            id: ID,
            name: "bridge",
            stack_label: None,
        };
        let by_name = ObjRef::Name("bridge".into());
        let read = |access, op| inspected(Kind::Network, access, op, &by_name, &bridge, &rr);
        assert_eq!(
            read(Access::Read, "networks.inspect"),
            Ok(Pinned(ID.into()))
        );
        assert_eq!(
            read(Access::Change, "networks.remove")
                .map(|_| ())
                .map_err(|r| r.to_string()),
            Err(
                "sockproxy: networks.remove: bridge is not one of this stack's networks".to_owned()
            )
        );
        assert_eq!(
            inspected(
                Kind::Network,
                Access::Change,
                "networks.connect",
                &net,
                &net_ins(Some("atlas")),
                &rr
            ),
            Ok(Pinned(ID.into()))
        );
        let hex = ObjRef::Hex("11".into());
        let foreign = Inspected {
            id: ID,
            name: "/other",
            stack_label: Some("atlas"),
        };
        assert_eq!(
            inspected(
                Kind::Container,
                Access::Read,
                "containers.inspect",
                &hex,
                &foreign,
                &r
            ),
            Err(Refusal::NoSuchContainer("11".into()))
        );
        let short = Inspected {
            id: "11",
            ..ins(Some("atlas"))
        };
        assert_eq!(
            inspected(
                Kind::Container,
                Access::Change,
                "containers.stop",
                &name,
                &short,
                &r
            ),
            Err(Refusal::Upstream("inspect answer has no full ID".into()))
        );
    }

    #[test]
    fn failed_inspects_and_prefixes() {
        let hex = ObjRef::Hex("ab".into());
        let name = ObjRef::Name("deer-flow-sandbox-1".into());
        let amb = b"{\"message\":\"Multiple IDs found with provided prefix: ab\"}";
        assert_eq!(
            inspect_failed(
                Kind::Container,
                &hex,
                StatusCode::INTERNAL_SERVER_ERROR,
                amb
            ),
            Err(Refusal::NoSuchContainer("ab".into()))
        );
        assert_eq!(
            inspect_failed(Kind::Container, &name, StatusCode::NOT_FOUND, b""),
            Ok(())
        );
        assert_eq!(
            inspect_failed(
                Kind::Container,
                &name,
                StatusCode::INTERNAL_SERVER_ERROR,
                b""
            ),
            Err(Refusal::Upstream(
                "inspect answered 500 Internal Server Error".into()
            ))
        );
        let own = vec![
            ("abc1".to_owned(), "/deer-flow-sandbox-1".to_owned()),
            ("abd2".to_owned(), "/deer-flow-sandbox-2".to_owned()),
        ];
        assert_eq!(
            own_prefix(Kind::Container, "abc", &own),
            Ok("abc1".to_owned())
        );
        assert_eq!(
            own_prefix(Kind::Container, "ab", &own),
            Err(Refusal::NoSuchContainer("ab".into()))
        );
        assert_eq!(
            own_prefix(Kind::Network, "ff", &own),
            Err(Refusal::NoSuchNetwork("ff".into()))
        );
    }

    #[test]
    fn exec_instances() {
        let s = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
        let r = Rules {
            require_stack_label: false,
            ..rules(&s)
        };
        let c = Inspected {
            id: ID,
            name: "/deer-flow-sandbox-1",
            stack_label: None,
        };
        assert_eq!(
            exec(Access::Change, "e", (ID, ID), &c, &r),
            Ok(Pinned(ID.into()))
        );
        // Under --require-stack-label, an exec of an unlabelled container is not found, for
        // an inspect as for a start.
        let labelled = Rules {
            require_stack_label: true,
            ..r
        };
        for access in [Access::Read, Access::Change] {
            assert_eq!(
                exec(access, "e", (ID, ID), &c, &labelled),
                Err(Refusal::NoSuchExec("e".into()))
            );
            let own = Inspected {
                stack_label: Some("atlas"),
                ..c
            };
            assert_eq!(
                exec(access, "e", (ID, ID), &own, &labelled),
                Ok(Pinned(ID.into())),
                "{access:?}"
            );
        }
        let other = Inspected {
            name: "/other",
            ..c
        };
        assert_eq!(
            exec(Access::Change, "e", (ID, ID), &other, &r),
            Err(Refusal::NoSuchExec("e".into()))
        );
        let moved = "2222222222222222222222222222222222222222222222222222222222222222";
        assert_eq!(
            exec(Access::Change, "e", (ID, moved), &c, &r),
            Err(Refusal::NoSuchExec("e".into()))
        );
    }

    #[test]
    fn archive_needs_an_engine_with_a_mount_namespace_for_it() {
        for ok in ["1.43", "1.44", "1.52", "1.100", "2.0", "v1.43"] {
            assert_eq!(archive_on(Some(ok)), Ok(()), "{ok}");
        }
        for (old, shown) in [
            (Some("1.41"), "API 1.41"),
            (Some("1.42"), "API 1.42"),
            (Some("0.99"), "API 0.99"),
            (Some(""), "API unknown"),
            (Some("1.43-rc"), "API unknown"),
            (Some("latest"), "API unknown"),
            (None, "API unknown"),
        ] {
            let e = archive_on(old).expect_err("refused");
            assert_eq!(e.status(), StatusCode::FORBIDDEN);
            assert_eq!(
                e.to_string(),
                format!(
                    "sockproxy: containers.archive: copying to or from a container needs Docker \
                     Engine 24 (API 1.43) or later; this engine ({shown}) mounts the \
                     container's volumes on the host for it"
                ),
                "{old:?}"
            );
        }
    }
}
