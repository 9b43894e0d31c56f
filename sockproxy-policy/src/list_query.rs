//! What a list (containers, networks, volumes) asks the engine, and the part of the client's
//! filters the proxy applies itself (issue 37). The engine is asked for the stack's own objects
//! only, so another stack's cannot fill the list cap; the client's `name` values cannot go with
//! that ask (dockerd ORs `name` values: a client's `name=x` beside the stack's would let every
//! object named like `x` through), so they are taken out and matched here, the way dockerd's
//! `filters.Args.Match` matches them. Pure: strings in, strings out.

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value};

use crate::refusal::Refusal;

/// The most `name` values one list request may carry: each is compiled to a regular expression
/// and matched against every entry (round 3: a 62 KB list request of many values took the
/// proxy to 3.16 GB and held every other client for 21.6 s).
pub const MAX_NAME_VALUES: usize = 16;

/// What one request's `name` values may compile to together, programs and matching caches:
/// each value gets an equal share of it (the `regex` crate's own bounds; matching is linear
/// in the name either way).
pub const NAME_REGEX_BUDGET: usize = 1 << 20;

/// One value's share of `NAME_REGEX_BUDGET`, for its program and for its matching cache.
const NAME_REGEX_SHARE: usize = NAME_REGEX_BUDGET / MAX_NAME_VALUES / 2;

/// What to send the engine and what to keep of its answer.
#[derive(Debug, Default)]
pub struct ListAsk {
    /// The `filters` to send instead of the client's.
    pub filters: String,
    /// The client's `name` values, compiled (`Names::compile`, off the runtime's workers) and
    /// matched here.
    pub names: Vec<String>,
}

/// A client's `name` filter values. An entry passes when its name equals one of them or one
/// of them, read as a regular expression, is found in it; with no values every entry passes.
/// A value the `regex` crate cannot parse matches by equality only (dockerd skips a value Go
/// cannot compile): the stack then sees fewer of its own objects, never another stack's.
#[derive(Debug, Default)]
pub struct Names(Vec<(String, Option<Regex>)>);

impl Names {
    /// Compiles the values within their share of `NAME_REGEX_BUDGET`; a value past its share
    /// is a 400, not a value matched by equality (it would otherwise cost the proxy the
    /// compile each time it is sent). Slow for large values: the transport calls it on the
    /// blocking pool.
    pub fn compile(values: Vec<String>) -> Result<Self, Refusal> {
        too_many(values.len())?;
        values
            .into_iter()
            .map(|v| {
                let re = match RegexBuilder::new(&v)
                    .size_limit(NAME_REGEX_SHARE)
                    .dfa_size_limit(NAME_REGEX_SHARE)
                    .build()
                {
                    Ok(re) => Some(re),
                    Err(regex::Error::CompiledTooBig(_)) => {
                        return Err(Refusal::BadRequest(format!(
                            "filters: a name value compiles past its share ({NAME_REGEX_SHARE} bytes) of the {NAME_REGEX_BUDGET} bytes one list request may compile"
                        )))
                    }
                    Err(_) => None,
                };
                Ok((v, re))
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
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

fn too_many(n: usize) -> Result<(), Refusal> {
    if n > MAX_NAME_VALUES {
        return Err(Refusal::BadRequest(format!(
            "filters: {n} name values; at most {MAX_NAME_VALUES}"
        )));
    }
    Ok(())
}

/// The client's `filters` as dockerd reads them: a JSON object whose values are arrays of
/// strings or objects of booleans. Anything else is a 400: Go's decoder takes some shapes the
/// proxy cannot read (`{"label":null}`, `{"name":null}`) and then lists the whole host, and
/// the engine is asked for the stack's own objects only, without exception. So is a request
/// with more than `MAX_NAME_VALUES` `name` values, before anything is compiled or asked.
pub fn read_filters(raw: Option<&str>) -> Result<Map<String, Value>, Refusal> {
    let Some(raw) = raw.filter(|r| !r.is_empty()) else {
        return Ok(Map::new());
    };
    let unreadable = || {
        Refusal::BadRequest(
            "filters must be a JSON object of string arrays or of objects of booleans".into(),
        )
    };
    let Ok(Value::Object(given)) = serde_json::from_str::<Value>(raw) else {
        return Err(unreadable());
    };
    let readable = given.values().all(|v| match v {
        Value::Array(a) => a.iter().all(Value::is_string),
        Value::Object(m) => m.values().all(Value::is_boolean),
        _ => false,
    });
    if !readable {
        return Err(unreadable());
    }
    too_many(match given.get("name") {
        Some(Value::Array(a)) => a.len(),
        Some(Value::Object(m)) => m.len(),
        _ => 0,
    })?;
    Ok(given)
}

/// The `filters` a list is sent to the engine with: the client's filters without their `name`
/// values, a `name` filter for the prefix, anchored (dockerd matches `name` values as regular
/// expressions, against `/NAME` and `NAME` for containers), and under `--require-stack-label`
/// (`stack_label`) `label=sockproxy.stack=STACK` (dockerd ANDs `label` values, so it narrows
/// whatever the client asked). Added values take the form the client's filters use
/// (`{"name":["x"]}`, or `{"name":{"x":true}}`, the docker CLI's and the one used when the
/// client sent none): dockerd refuses a mix of the two as a whole, so a mix is written in the
/// map form. Filters the proxy cannot read are refused (`read_filters`). The answer is filtered
/// again locally in any case, by scope and by `names`.
pub fn own_list_filters(
    raw: Option<&str>,
    prefix: &str,
    stack_label: Option<&str>,
) -> Result<ListAsk, Refusal> {
    let mut given = read_filters(raw)?;
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
    Ok(ListAsk {
        filters: Value::Object(out).to_string(),
        names,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_ask_the_engine_for_the_stacks_own() {
        let f = |raw: Option<&str>, label: Option<&str>| {
            own_list_filters(raw, "deer-flow.x-", label).map(|ask| ask.filters)
        };
        let name_map = r#""name":{"^/?deer-flow\\.x-":true}"#;
        let name_list = r#""name":["^/?deer-flow\\.x-"]"#;
        // No filters of the client's: the map form, as the docker CLI writes it.
        assert_eq!(f(None, None), Ok(format!("{{{name_map}}}")));
        assert_eq!(f(Some(""), None), Ok(format!("{{{name_map}}}")));
        assert_eq!(f(Some("{}"), None), Ok(format!("{{{name_map}}}")));
        // The client's own filters kept, in their form; a mix in the map form.
        assert_eq!(
            f(Some(r#"{"status":["running"]}"#), None),
            Ok(format!(r#"{{{name_list},"status":["running"]}}"#))
        );
        assert_eq!(
            f(Some(r#"{"status":{"running":true}}"#), None),
            Ok(format!(r#"{{{name_map},"status":{{"running":true}}}}"#))
        );
        assert_eq!(
            f(Some(r#"{"status":["running"],"label":{"a=b":true}}"#), None),
            Ok(format!(
                r#"{{"label":{{"a=b":true}},{name_map},"status":{{"running":true}}}}"#
            ))
        );
        // A name filter of the client's own is taken out (dockerd would OR it with the
        // stack's) and replaced by the stack's.
        assert_eq!(
            f(Some(r#"{"name":["deer-flow.x-sandbox-1"]}"#), None),
            Ok(format!("{{{name_list}}}"))
        );
        assert_eq!(
            f(
                Some(r#"{"name":{"other":true},"status":{"exited":true}}"#),
                None
            ),
            Ok(format!(r#"{{{name_map},"status":{{"exited":true}}}}"#))
        );
        assert_eq!(
            f(Some(r#"{"name":[]}"#), None),
            Ok(format!("{{{name_list}}}"))
        );
        // Under --require-stack-label, the stack's label too, beside the client's labels.
        assert_eq!(
            f(Some(r#"{"label":["a"]}"#), Some("atlas")),
            Ok(format!(
                r#"{{"label":["a","sockproxy.stack=atlas"],{name_list}}}"#
            ))
        );
        assert_eq!(
            f(Some(r#"{"name":{"x":true}}"#), Some("atlas")),
            Ok(format!(
                r#"{{"label":{{"sockproxy.stack=atlas":true}},{name_map}}}"#
            ))
        );
        // What the proxy cannot read as dockerd's filters is refused, never sent on: Go's
        // decoder takes `null` values and lists the whole host.
        for bad in [
            "[]",
            "x",
            "null",
            r#"{"name":"x"}"#,
            r#"{"name":[1]}"#,
            r#"{"name":{"x":1}}"#,
            r#"{"label":null}"#,
            r#"{"name":null}"#,
            r#"{"status":["running"],"name":null}"#,
        ] {
            assert_eq!(
                f(Some(bad), None),
                Err(Refusal::BadRequest(
                    "filters must be a JSON object of string arrays or of objects of booleans"
                        .into()
                )),
                "{bad}"
            );
        }
        // At most MAX_NAME_VALUES name values, in either form.
        let values = |n: usize| (0..n).map(|i| format!("\"v{i}\"")).collect::<Vec<_>>();
        let list = |n: usize| format!(r#"{{"name":[{}]}}"#, values(n).join(","));
        let map = |n: usize| {
            let v: Vec<String> = values(n).iter().map(|v| format!("{v}:true")).collect();
            format!(r#"{{"name":{{{}}}}}"#, v.join(","))
        };
        assert!(f(Some(&list(MAX_NAME_VALUES)), None).is_ok());
        assert!(f(Some(&map(MAX_NAME_VALUES)), None).is_ok());
        for raw in [list(MAX_NAME_VALUES + 1), map(MAX_NAME_VALUES + 1)] {
            assert_eq!(
                f(Some(&raw), None),
                Err(Refusal::BadRequest(
                    "filters: 17 name values; at most 16".into()
                ))
            );
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
        let names = |raw: &str| {
            let ask = own_list_filters(Some(raw), "deer-flow-", None).expect("readable");
            Names::compile(ask.names).expect("compiles")
        };
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

    /// Each value compiles within its share of the request's budget; past it, a 400 (not a
    /// value matched by equality, which would cost the compile at every request).
    #[test]
    fn a_name_value_compiles_within_its_share() {
        assert!(Names::compile(vec!["^deer-flow-[a-z0-9]{1,16}$".into()]).is_ok());
        let big = "\\w{1000}".repeat(8);
        let refused = Names::compile(vec![big]).expect_err("too big");
        assert_eq!(
            refused.to_string(),
            "sockproxy: bad request: filters: a name value compiles past its share (32768 bytes) of the 1048576 bytes one list request may compile"
        );
        assert!(Names::compile(vec!["x".into(); MAX_NAME_VALUES + 1]).is_err());
        assert!(Names::compile(vec![]).expect("none").is_empty());
    }
}
