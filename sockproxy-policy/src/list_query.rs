//! What a list (containers, networks, volumes) asks the engine, and the part of the client's
//! filters the proxy applies itself (issue 37). The engine is asked for the stack's own objects
//! only, so another stack's cannot fill the list cap; the client's `name` values cannot go with
//! that ask (dockerd ORs `name` values: a client's `name=x` beside the stack's would let every
//! object named like `x` through), so they are taken out and matched here, the way dockerd's
//! `filters.Args.Match` matches them. Pure: strings in, strings out.

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value};

/// The largest compiled program one client `name` value may take (the `regex` crate's own
/// bound; matching is linear in the name either way).
const NAME_REGEX_BYTES: usize = 1 << 20;

/// What to send the engine and what to keep of its answer.
#[derive(Debug, Default)]
pub struct ListAsk {
    /// The `filters` to send instead of the client's; `None`: the client's go unchanged.
    pub filters: Option<String>,
    /// The client's `name` values, matched here.
    pub names: Names,
}

/// A client's `name` filter values. An entry passes when its name equals one of them or one
/// of them, read as a regular expression, is found in it; with no values every entry passes.
/// A value the `regex` crate cannot compile matches by equality only (dockerd skips a value Go
/// cannot compile): the stack then sees fewer of its own objects, never another stack's.
#[derive(Debug, Default)]
pub struct Names(Vec<(String, Option<Regex>)>);

impl Names {
    pub fn new(values: Vec<String>) -> Self {
        Self(
            values
                .into_iter()
                .map(|v| {
                    let re = RegexBuilder::new(&v)
                        .size_limit(NAME_REGEX_BYTES)
                        .build()
                        .ok();
                    (v, re)
                })
                .collect(),
        )
    }

    pub fn matches(&self, name: &str) -> bool {
        self.0.is_empty()
            || self
                .0
                .iter()
                .any(|(v, re)| v == name || re.as_ref().is_some_and(|re| re.is_match(name)))
    }

    /// A container's name: dockerd matches `/NAME` and `NAME`.
    pub fn matches_container(&self, name: &str) -> bool {
        self.0.is_empty() || self.matches(name) || self.matches(&format!("/{name}"))
    }
}

/// The `filters` a list is sent to the engine with: the client's filters without their `name`
/// values, a `name` filter for the prefix, anchored (dockerd matches `name` values as regular
/// expressions, against `/NAME` and `NAME` for containers), and under `--require-stack-label`
/// (`stack_label`) `label=sockproxy.stack=STACK` (dockerd ANDs `label` values, so it narrows
/// whatever the client asked). Added values take the form the client's filters use
/// (`{"name":["x"]}`, or `{"name":{"x":true}}`, the docker CLI's and the one used when the
/// client sent none): dockerd refuses a mix of the two as a whole, so a mix is written in the
/// map form. Filters the proxy cannot read as dockerd's go unchanged (the engine refuses them).
/// The answer is filtered again locally in any case, by scope and by `names`.
pub fn own_list_filters(raw: Option<&str>, prefix: &str, stack_label: Option<&str>) -> ListAsk {
    let mut given = match raw.filter(|r| !r.is_empty()) {
        None => Map::new(),
        Some(r) => match serde_json::from_str::<Value>(r) {
            Ok(Value::Object(m)) => m,
            _ => return ListAsk::default(),
        },
    };
    let readable = given.values().all(|v| match v {
        Value::Array(a) => a.iter().all(Value::is_string),
        Value::Object(m) => m.values().all(Value::is_boolean),
        _ => false,
    });
    if !readable {
        return ListAsk::default();
    }
    let arrays = !given.is_empty() && given.values().all(Value::is_array);
    let names: Vec<String> = match given.remove("name") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        // dockerd's map form counts a value whatever its boolean says.
        Some(Value::Object(m)) => m.into_iter().map(|(k, _)| k).collect(),
        _ => Vec::new(),
    };
    let mut added: Vec<(&str, String)> =
        vec![("name", format!("^/?{}", prefix.replace('.', "\\.")))];
    if let Some(stack) = stack_label {
        added.push(("label", format!("{}={stack}", crate::scope::STACK_LABEL)));
    }
    let mut out = Map::new();
    for (key, values) in given {
        let values = match values {
            Value::Array(a) if !arrays => Value::Object(
                a.into_iter()
                    .filter_map(|v| v.as_str().map(|s| (s.to_owned(), Value::Bool(true))))
                    .collect(),
            ),
            other => other,
        };
        out.insert(key, values);
    }
    for (key, value) in added {
        let slot = out.entry(key).or_insert_with(|| {
            if arrays {
                Value::Array(Vec::new())
            } else {
                Value::Object(Map::new())
            }
        });
        match slot {
            Value::Array(a) => a.push(Value::String(value)),
            Value::Object(m) => {
                m.insert(value, Value::Bool(true));
            }
            _ => {}
        }
    }
    ListAsk {
        filters: Some(Value::Object(out).to_string()),
        names: Names::new(names),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_ask_the_engine_for_the_stacks_own() {
        let f = |raw: Option<&str>, label: Option<&str>| {
            own_list_filters(raw, "deer-flow.x-", label).filters
        };
        let name_map = r#""name":{"^/?deer-flow\\.x-":true}"#;
        let name_list = r#""name":["^/?deer-flow\\.x-"]"#;
        // No filters of the client's: the map form, as the docker CLI writes it.
        assert_eq!(f(None, None), Some(format!("{{{name_map}}}")));
        assert_eq!(f(Some(""), None), Some(format!("{{{name_map}}}")));
        assert_eq!(f(Some("{}"), None), Some(format!("{{{name_map}}}")));
        // The client's own filters kept, in their form; a mix in the map form.
        assert_eq!(
            f(Some(r#"{"status":["running"]}"#), None),
            Some(format!(r#"{{{name_list},"status":["running"]}}"#))
        );
        assert_eq!(
            f(Some(r#"{"status":{"running":true}}"#), None),
            Some(format!(r#"{{{name_map},"status":{{"running":true}}}}"#))
        );
        assert_eq!(
            f(Some(r#"{"status":["running"],"label":{"a=b":true}}"#), None),
            Some(format!(
                r#"{{"label":{{"a=b":true}},{name_map},"status":{{"running":true}}}}"#
            ))
        );
        // A name filter of the client's own is taken out (dockerd would OR it with the
        // stack's) and replaced by the stack's.
        assert_eq!(
            f(Some(r#"{"name":["deer-flow.x-sandbox-1"]}"#), None),
            Some(format!("{{{name_list}}}"))
        );
        assert_eq!(
            f(
                Some(r#"{"name":{"other":true},"status":{"exited":true}}"#),
                None
            ),
            Some(format!(r#"{{{name_map},"status":{{"exited":true}}}}"#))
        );
        assert_eq!(
            f(Some(r#"{"name":[]}"#), None),
            Some(format!("{{{name_list}}}"))
        );
        // Under --require-stack-label, the stack's label too, beside the client's labels.
        assert_eq!(
            f(Some(r#"{"label":["a"]}"#), Some("atlas")),
            Some(format!(
                r#"{{"label":["a","sockproxy.stack=atlas"],{name_list}}}"#
            ))
        );
        assert_eq!(
            f(Some(r#"{"name":{"x":true}}"#), Some("atlas")),
            Some(format!(
                r#"{{"label":{{"sockproxy.stack=atlas":true}},{name_map}}}"#
            ))
        );
        // What dockerd would refuse goes as it is.
        for bad in [
            "[]",
            "x",
            r#"{"name":"x"}"#,
            r#"{"name":[1]}"#,
            r#"{"name":{"x":1}}"#,
        ] {
            assert_eq!(f(Some(bad), None), None, "{bad}");
        }
        // The anchored value matches the stack's names only, as dockerd's regexp reads it.
        let re = regex::Regex::new("^/?deer-flow\\.x-").expect("regex");
        assert!(re.is_match("/deer-flow.x-sandbox-1") && re.is_match("deer-flow.x-a"));
        assert!(!re.is_match("/deer-flowXx-sandbox-1") && !re.is_match("/other-deer-flow.x-a"));
    }

    /// The client's `name` values are kept for the local filter, in either form, and matched
    /// as dockerd matches them: equal, or a regular expression found anywhere in the name.
    #[test]
    fn the_clients_names_are_matched_here() {
        let names = |raw: &str| own_list_filters(Some(raw), "deer-flow-", None).names;
        let one = names(r#"{"name":["sandbox-1$"]}"#);
        assert!(one.matches_container("deer-flow-sandbox-1"));
        assert!(!one.matches_container("deer-flow-sandbox-10"));
        let map = names(r#"{"name":{"^/deer-flow-a":true,"b$":false}}"#);
        assert!(map.matches_container("deer-flow-a1"), "/NAME is tried too");
        let bare = names(r#"{"name":["^deer-flow-a"]}"#);
        assert!(bare.matches_container("deer-flow-a1"), "and NAME alone");
        assert!(
            map.matches_container("deer-flow-xb"),
            "a false value still counts"
        );
        assert!(!map.matches_container("deer-flow-c"));
        // Networks and volumes carry no leading `/`.
        assert!(!map.matches("deer-flow-a1") && map.matches("deer-flow-b"));
        // A value that is no regular expression matches only a name equal to it.
        let bad = names(r#"{"name":["deer-flow-(x"]}"#);
        assert!(bad.matches("deer-flow-(x") && !bad.matches("deer-flow-x"));
        // No name filter, or an empty one: everything passes.
        assert!(names(r#"{"status":["exited"]}"#).matches_container("deer-flow-z"));
        assert!(names(r#"{"name":[]}"#).matches("deer-flow-z"));
        assert!(Names::default().matches("anything"));
    }
}
