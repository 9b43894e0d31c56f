//! The engine's answers that decisions stand on, read: an inspect of a container or network
//! (`Named`, whose `inspected` is the fact `evaluate` takes), an exec instance's inspect
//! (`ExecInfo`), and the list of the stack's own objects (`own_list_path` asks for it,
//! `own_objects` keeps what the stack may see). The transport fetches; this reads.

use serde::Deserialize;

use crate::evaluate::Policy;
use crate::filter::{stack_label, StackLabel};
use crate::pinning::Inspected;
use crate::reference::{is_full_id, CanonicalName};
use crate::refusal::Refusal;
use crate::scope::{Access, Kind, Scope, STACK_LABEL};

/// An inspect answer of a container or network, as far as the decisions read it.
#[derive(Debug, Deserialize)]
pub struct Named {
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "Config", default)]
    config: Option<NamedConfig>,
    /// A network's labels (a container's are under `Config`).
    #[serde(rename = "Labels", default)]
    labels: Option<std::collections::HashMap<String, String>>,
}

#[derive(Debug, Deserialize)]
struct NamedConfig {
    #[serde(rename = "Labels", default)]
    labels: Option<std::collections::HashMap<String, String>>,
}

impl Named {
    pub fn read(body: &[u8]) -> Result<Self, Refusal> {
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
                .and_then(|l| l.get(STACK_LABEL))
                .map(String::as_str),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Prefix;

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
}
