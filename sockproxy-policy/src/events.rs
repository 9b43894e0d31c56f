//! `GET /events` through the proxy: the engine's newline-separated JSON events, streamed, each
//! kept only when its actor is one of the stack's containers or networks (by the actor's name).
//! A network event names the container that joined or left by ID; that attribute is kept only
//! for a container this stream has seen as the stack's own, so no other stack's ID leaks.
//! A line that cannot be read is dropped: fail closed. Under `--require-stack-label` a
//! container event passes only with the stack's label, and no network event passes.

use std::collections::HashSet;

use crate::scope::{Kind, Scope};

/// The line to pass on for one event (rewritten when a foreign container ID must go), or
/// `None` when it does not concern the stack. `own` collects the stack's container IDs seen.
pub fn keep(line: &[u8], scope: &Scope, own: &mut HashSet<String>) -> Option<Vec<u8>> {
    let mut v = serde_json::from_slice::<serde_json::Value>(line).ok()?;
    let kind = v["Type"].as_str().unwrap_or("");
    let name = v["Actor"]["Attributes"]["name"].as_str().unwrap_or("");
    if !matches!(kind, "container" | "network") || name.contains('/') || !scope.visible(name) {
        return None;
    }
    if kind == "container" {
        // A container event carries the container's labels among its attributes (set before
        // `name`, which a label cannot override). A network event carries none, so under
        // `--require-stack-label` no network event can be told the stack's: none passes.
        let label = v["Actor"]["Attributes"][crate::scope::STACK_LABEL].as_str();
        if !scope.label_allows(Kind::Container, name, label) {
            return None;
        }
        if let Some(id) = v["Actor"]["ID"].as_str() {
            if own.len() < MAX_OWN {
                own.insert(id.to_owned());
            }
        }
        return Some(line.to_vec());
    }
    if scope.requires_label() {
        return None;
    }
    let attrs = v["Actor"]["Attributes"].as_object_mut()?;
    let foreign = attrs
        .get("container")
        .is_some_and(|c| !c.as_str().is_some_and(|c| own.contains(c)));
    if !foreign {
        return Some(line.to_vec());
    }
    attrs.remove("container");
    serde_json::to_vec(&v).ok()
}

/// Own container IDs remembered per stream (a long stream must not grow without bound).
const MAX_OWN: usize = 65_536;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Prefix;

    fn scope() -> Scope {
        Scope::new(Prefix::parse("deer-flow-").expect("valid"), false)
    }

    #[test]
    fn network_events_name_only_the_stacks_containers() {
        let s = Scope::new(Prefix::parse("deer-flow-").expect("valid"), true);
        let mut own = HashSet::new();
        let started = br#"{"Type":"container","Action":"start","Actor":{"ID":"aaa","Attributes":{"name":"deer-flow-sandbox-1"}}}"#;
        assert!(keep(started, &s, &mut own).is_some());
        let ours = br#"{"Type":"network","Action":"connect","Actor":{"ID":"n","Attributes":{"container":"aaa","name":"deer-flow-net-1"}}}"#;
        assert_eq!(keep(ours, &s, &mut own).as_deref(), Some(&ours[..]));
        let theirs = br#"{"Type":"network","Action":"connect","Actor":{"ID":"n","Attributes":{"container":"bbb","name":"deer-flow-net-1"}}}"#;
        let out = keep(theirs, &s, &mut own).expect("kept without the ID");
        assert!(!String::from_utf8_lossy(&out).contains("bbb"));
    }

    /// Under `--require-stack-label`: a container event passes only with the stack's label
    /// among its attributes, and no network event passes (they carry no labels).
    #[test]
    fn under_the_label_rule_only_labelled_container_events_pass() {
        let s = scope().with_required_label(Some("atlas"));
        let mut own = HashSet::new();
        let container = |label: &str| {
            format!(
                r#"{{"Type":"container","Action":"start","Actor":{{"ID":"aaa","Attributes":{{{label}"name":"deer-flow-sandbox-1"}}}}}}"#
            )
        };
        let ours = container(r#""sockproxy.stack":"atlas","#);
        assert!(keep(ours.as_bytes(), &s, &mut own).is_some());
        for other in [
            r#""sockproxy.stack":"bravo","#,
            r#""sockproxy.stack":7,"#,
            "",
        ] {
            let line = container(other);
            assert_eq!(keep(line.as_bytes(), &s, &mut own), None, "{line}");
        }
        let net = br#"{"Type":"network","Action":"create","Actor":{"ID":"n","Attributes":{"name":"deer-flow-net-1","type":"bridge"}}}"#;
        assert_eq!(keep(net, &s, &mut own), None);
        assert!(keep(net, &scope(), &mut own).is_some(), "without the flag");
    }
}
