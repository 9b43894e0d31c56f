//! The engine's answers that decisions stand on, read: an inspect of a container or network
//! (`Named`, whose `inspected` is the fact `evaluate` takes), an exec instance's inspect
//! (`ExecInfo`), the list of the stack's own objects (`own_list_path` asks for it,
//! `own_objects` keeps what the stack may see) and a request's JSON body (`parse_body`); a
//! conflict answer cut to the requested name (`conflict_names_only`) and the engine version an
//! archive request needs (`archive_on`). The transport fetches; this reads.

use std::borrow::Cow;

use serde::Deserialize;

use crate::evaluate::Policy;
use crate::filter::{stack_label, StackLabel};
use crate::pinning::Inspected;
use crate::reference::{is_full_id, CanonicalName};
use crate::refusal::Refusal;
use crate::scope::{Access, Kind, Scope};

/// An inspect answer of a container or network, as far as the decisions read it: its ID, its
/// name and its `sockproxy.stack` label, borrowed from the answer's bytes (a string with an
/// escape in it is the only one copied). Every other field, and every other label, is skipped
/// without being kept: the answer itself goes to the client as the engine sent it.
#[derive(Debug, Deserialize)]
pub struct Named<'a> {
    #[serde(rename = "Id", borrow)]
    id: Cow<'a, str>,
    #[serde(rename = "Name", borrow)]
    name: Cow<'a, str>,
    #[serde(rename = "Config", default, borrow)]
    config: Option<NamedConfig<'a>>,
    /// A network's labels (a container's are under `Config`).
    #[serde(rename = "Labels", default, borrow)]
    labels: Option<StackLabelOnly<'a>>,
}

#[derive(Debug, Deserialize)]
struct NamedConfig<'a> {
    #[serde(rename = "Labels", default, borrow)]
    labels: Option<StackLabelOnly<'a>>,
}

/// A labels object read for its `sockproxy.stack` label (`STACK_LABEL`) alone.
#[derive(Debug, Deserialize)]
struct StackLabelOnly<'a> {
    #[serde(rename = "sockproxy.stack", default, borrow)]
    stack: Option<Cow<'a, str>>,
}

impl<'a> Named<'a> {
    pub fn read(body: &'a [u8]) -> Result<Self, Refusal> {
        serde_json::from_slice(body).map_err(|e| unreadable("inspect", e))
    }

    /// The fields the decision reads: the fact `evaluate` takes.
    pub fn inspected(&self) -> Inspected<'_> {
        Inspected {
            id: &self.id,
            name: &self.name,
            stack_label: self
                .config
                .as_ref()
                .and_then(|c| c.labels.as_ref())
                .or(self.labels.as_ref())
                .and_then(|l| l.stack.as_deref()),
        }
    }
}

/// An exec instance's inspect answer: its own ID and its container's.
#[derive(Debug, Deserialize)]
pub struct ExecInfo {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "ContainerID")]
    pub container_id: String,
}

impl ExecInfo {
    /// The answer, refused unless its container is named by a full ID (the one inspected next).
    pub fn read(body: &[u8]) -> Result<Self, Refusal> {
        let info: Self = serde_json::from_slice(body).map_err(|e| unreadable("exec inspect", e))?;
        if !is_full_id(&info.container_id) {
            return Err(Refusal::Upstream(
                "exec inspect answer has no full IDs".into(),
            ));
        }
        Ok(info)
    }
}

/// One entry of a container or network list: its ID and its names.
#[derive(Deserialize)]
struct Listed {
    #[serde(rename = "Id", alias = "ID")]
    id: String,
    #[serde(rename = "Names", default)]
    names: Vec<String>,
    #[serde(rename = "Name", default)]
    name: String,
    #[serde(rename = "State", default)]
    state: String,
    /// Only the `sockproxy.stack` label is read.
    #[serde(rename = "Labels", default)]
    labels: Option<StackLabel>,
}

/// One of the stack's own objects, from a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Own {
    pub id: String,
    pub name: String,
    pub state: String,
}

fn unreadable(what: &str, e: serde_json::Error) -> Refusal {
    Refusal::Upstream(format!("unreadable {what} answer: {e}"))
}

/// The engine path (after `v`, the `/vX.Y` prefix or nothing) that lists every container (all
/// states) the stack sees, or every network it may read (its own and the predefined ones).
/// Containers are asked for with a name filter for the prefix (and the label under the flag),
/// which keeps the answer small; the engine's `id` filter is no use for prefixes, as it
/// resolves them the way the engine does (an ambiguity with another stack's ID would empty it).
pub fn own_list_path(v: &str, kind: Kind, policy: &Policy) -> String {
    match kind {
        Kind::Container => {
            // Names are matched as regular expressions against `/NAME`; under
            // `--require-stack-label` the label narrows it too, so another stack's
            // containers under the same prefix do not count against the list cap.
            let p = policy.scope.prefix().as_str().replace('.', "\\.");
            let mut filters = serde_json::json!({ "name": [format!("^/{p}")] });
            if policy.create_rules.require_stack_label {
                let label = format!("{}={}", crate::scope::STACK_LABEL, policy.stack);
                filters["label"] = serde_json::json!([label]);
            }
            let filters = filters.to_string();
            let query = form_urlencoded::Serializer::new(String::new())
                .append_pair("filters", &filters)
                .finish();
            format!("{v}/containers/json?all=1&{query}")
        }
        Kind::Network => {
            // The prefix's networks and the predefined ones, as regular expressions on
            // the name (dockerd's network `name` filter): another prefix's networks do not
            // count against the list cap.
            let p = policy.scope.prefix().as_str().replace('.', "\\.");
            let names = crate::scope::PREDEFINED_NETWORKS
                .iter()
                .map(|n| format!("|{n}$"))
                .collect::<String>();
            let filters = serde_json::json!({ "name": [format!("^(?:{p}{names})")] });
            let query = form_urlencoded::Serializer::new(String::new())
                .append_pair("filters", &filters.to_string())
                .finish();
            format!("{v}/networks?{query}")
        }
    }
}

/// The stack's own objects in a list answer; under `--require-stack-label`, only those with
/// its label.
pub fn own_objects(kind: Kind, body: &[u8], scope: &Scope) -> Result<Vec<Own>, Refusal> {
    let listed: Vec<Listed> = serde_json::from_slice(body).map_err(|e| unreadable("list", e))?;
    Ok(listed
        .into_iter()
        .filter_map(|l| {
            let name = match kind {
                Kind::Container => l
                    .names
                    .iter()
                    .find_map(|n| CanonicalName::parse(n))?
                    .as_str()
                    .to_owned(),
                Kind::Network => l.name,
            };
            let label = stack_label(&l.labels);
            let seen =
                scope.allows(kind, Access::Read, &name) && scope.label_allows(kind, &name, label);
            seen.then_some(Own {
                id: l.id,
                name,
                state: l.state,
            })
        })
        .collect())
}

/// A request's JSON body, read with the key rule (`json::parse_checked_with`, at most
/// `max_keys` object keys in all). An empty body is an empty object, as dockerd reads it.
pub fn parse_body(bytes: &[u8], max_keys: usize) -> Result<serde_json::Value, Refusal> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Value::Object(serde_json::Map::new()));
    }
    crate::json::parse_checked_with(bytes, max_keys)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::{Prefix, STACK_LABEL};
    use http::StatusCode;

    fn scope() -> Scope {
        Scope::new(Prefix::parse("deer-flow-").expect("valid"), false)
    }

    #[test]
    fn own_objects_are_the_stacks_by_their_own_name() {
        let body = br#"[
            {"Id":"a","Names":["/other/deer-flow-alias","/deer-flow-sandbox-1"],"State":"running"},
            {"Id":"b","Names":["/other"],"State":"exited"},
            {"Id":"c","Names":["/x/deer-flow-y"],"State":"running"}
        ]"#;
        let own = own_objects(Kind::Container, body, &scope()).expect("readable");
        assert_eq!(
            own,
            [Own {
                id: "a".into(),
                name: "deer-flow-sandbox-1".into(),
                state: "running".into()
            }]
        );
        let labelled = scope().with_required_label(Some("atlas"));
        assert_eq!(own_objects(Kind::Container, body, &labelled), Ok(vec![]));
        let err = own_objects(Kind::Network, b"{}", &scope()).expect_err("not a list");
        assert!(err.to_string().contains("unreadable list answer"), "{err}");
    }

    #[test]
    fn an_inspect_is_read_for_its_id_name_and_stack_label_alone() {
        let read = |body: &str| {
            Named::read(body.as_bytes()).map(|n| {
                let i = n.inspected();
                (
                    i.id.to_owned(),
                    i.name.to_owned(),
                    i.stack_label.map(str::to_owned),
                )
            })
        };
        let got = |id: &str, name: &str, label: Option<&str>| {
            Ok((id.to_owned(), name.to_owned(), label.map(str::to_owned)))
        };
        assert_eq!(STACK_LABEL, "sockproxy.stack", "the field read below");
        // A container: its label under Config, every other field and label skipped.
        let container = r#"{"Id":"abc","Created":"x","State":{"Running":true},"Name":"/deer-flow-a",
            "HostConfig":{"Binds":null,"Labels":{"sockproxy.stack":"not-here"}},
            "Config":{"Image":"busybox","Labels":{"a":"1","sockproxy.stack":"atlas","b":"2"}},
            "NetworkSettings":{"Networks":{}}}"#;
        assert_eq!(read(container), got("abc", "/deer-flow-a", Some("atlas")));
        // Escapes are read as JSON says (such a string is copied, not borrowed).
        assert_eq!(
            read(
                r#"{"Id":"a\u0062c","Name":"/x\"y","Config":{"Labels":{"sockproxy.stack":"at\/las"}}}"#
            ),
            got("abc", "/x\"y", Some("at/las"))
        );
        // Labels under Config, even without the stack's, are the container's: the top level's
        // are not looked at.
        assert_eq!(
            read(
                r#"{"Id":"a","Name":"/n","Config":{"Labels":{"x":"y"}},"Labels":{"sockproxy.stack":"s"}}"#
            ),
            got("a", "/n", None)
        );
        // A network: its labels at the top level; none at all, or null.
        assert_eq!(
            read(r#"{"Name":"deer-flow-net","Id":"n1","Labels":{"sockproxy.stack":"s"}}"#),
            got("n1", "deer-flow-net", Some("s"))
        );
        assert_eq!(
            read(r#"{"Id":"a","Name":"/n","Config":{"Labels":null},"Labels":null}"#),
            got("a", "/n", None)
        );
        assert_eq!(read(r#"{"Id":"a","Name":"/n"}"#), got("a", "/n", None));
        // What cannot be read is refused, never guessed.
        for bad in [
            r#"{"Name":"/n"}"#,
            r#"{"Id":"a","Name":"/n","Config":{"Labels":{"sockproxy.stack":1}}}"#,
            r#"{"Id":"a","Name":"/n","Config":{"Labels":{"sockproxy.stack":"a","sockproxy.stack":"b"}}}"#,
            r#"{"Id":"a","Name":"/n"} trailing"#,
            "[]",
        ] {
            let e = read(bad).expect_err(bad);
            assert!(e.to_string().contains("inspect"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_exec_names_its_container_by_full_id() {
        let id = "1".repeat(64);
        let ok = format!(r#"{{"ID":"e","ContainerID":"{id}"}}"#);
        assert_eq!(
            ExecInfo::read(ok.as_bytes()).map(|i| i.container_id),
            Ok(id)
        );
        assert_eq!(
            ExecInfo::read(br#"{"ID":"e","ContainerID":"abc"}"#).map(|i| i.id),
            Err(Refusal::Upstream(
                "exec inspect answer has no full IDs".into()
            ))
        );
    }

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
