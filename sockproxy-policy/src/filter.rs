//! List filtering (docs/architecture.md, "sockproxy: a request's way through"): keeps only entries the stack may see, then applies the client's
//! `limit`. Pure: bytes in, bytes out. Entries are copied verbatim, never re-encoded.

use serde::Deserialize;

use crate::list_query::Names;
use crate::reference::CanonicalName;
use crate::refusal::Refusal;
use crate::scope::{Kind, Scope};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("upstream list is unreadable: {0}")]
pub struct FilterError(String);

impl FilterError {
    pub fn new(why: String) -> Self {
        Self(why)
    }
}

#[derive(Deserialize)]
struct ContainerEntry {
    #[serde(rename = "Names", default)]
    names: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct NetworkEntry {
    #[serde(rename = "Name", default)]
    name: Option<String>,
}

/// An entry's `sockproxy.stack` label (the only one read; the others are skipped unread).
#[derive(Debug, Deserialize)]
pub struct StackLabel {
    #[serde(rename = "sockproxy.stack", default)]
    stack: Option<String>,
}

/// The entry types with their labels, read only under `--require-stack-label`: without it no
/// entry pays for the label's allocation.
#[derive(Deserialize)]
struct LabelledContainer {
    #[serde(rename = "Names", default)]
    names: Option<Vec<String>>,
    #[serde(rename = "Labels", default)]
    labels: Option<StackLabel>,
}

#[derive(Deserialize)]
struct LabelledNetwork {
    #[serde(rename = "Name", default)]
    name: Option<String>,
    #[serde(rename = "Labels", default)]
    labels: Option<StackLabel>,
}

pub fn stack_label(labels: &Option<StackLabel>) -> Option<&str> {
    labels.as_ref().and_then(|l| l.stack.as_deref())
}

/// Whether the entry at `pos` is one the stack sees (and the client's `name` filter keeps),
/// and the offset just past it.
fn visible_entry(
    kind: Kind,
    body: &[u8],
    pos: usize,
    scope: &Scope,
    names: &Names,
) -> Result<(bool, usize), FilterError> {
    let kept = |n: &str| match kind {
        Kind::Container => names.matches_container(n),
        Kind::Network => names.matches(n),
    };
    let name_visible = |n: Option<&str>| n.is_some_and(|n| scope.visible(n) && kept(n));
    Ok(match (kind, scope.requires_label()) {
        (Kind::Container, false) => {
            let (e, end) = entry::<ContainerEntry>(body, pos)?;
            (
                name_visible(e.names.as_deref().and_then(container_name)),
                end,
            )
        }
        (Kind::Network, false) => {
            let (e, end) = entry::<NetworkEntry>(body, pos)?;
            (name_visible(e.name.as_deref()), end)
        }
        (Kind::Container, true) => {
            let (e, end) = entry::<LabelledContainer>(body, pos)?;
            let name = e.names.as_deref().and_then(container_name);
            let labelled = |n| scope.label_allows(kind, n, stack_label(&e.labels));
            (name_visible(name) && name.is_some_and(labelled), end)
        }
        (Kind::Network, true) => {
            let (e, end) = entry::<LabelledNetwork>(body, pos)?;
            let name = e.name.as_deref();
            let labelled = |n| scope.label_allows(kind, n, stack_label(&e.labels));
            (name_visible(name) && name.is_some_and(labelled), end)
        }
    })
}

/// The container's own name among its `Names` (link aliases carry an inner `/`).
fn container_name(names: &[String]) -> Option<&str> {
    names
        .iter()
        .find_map(|n| CanonicalName::parse(n))
        .map(CanonicalName::as_str)
}

/// One pass over the answer: each entry is parsed once, for its name, and the bytes it spans
/// are copied out as they are. (Splitting into raw entries first and parsing each again read
/// every byte twice; that was half of sockproxy's time on a 10,000-container list.)
pub fn filter_list(
    kind: Kind,
    body: &[u8],
    scope: &Scope,
    limit: Option<usize>,
) -> Result<Vec<u8>, FilterError> {
    filter_named(kind, body, scope, limit, &Names::default())
}

/// `filter_list`, keeping also only what the client's own `name` filter matches.
fn filter_named(
    kind: Kind,
    body: &[u8],
    scope: &Scope,
    limit: Option<usize>,
    names: &Names,
) -> Result<Vec<u8>, FilterError> {
    let bad = |what: &str, at: usize| FilterError(format!("{what} at byte {at}"));
    // JSON is UTF-8 throughout; the parser skips the fields it does not read without checking
    // them, so the whole answer is checked here (a fast scan next to parsing).
    if let Err(e) = std::str::from_utf8(body) {
        return Err(bad("not UTF-8", e.valid_up_to()));
    }
    let mut out = Vec::with_capacity(body.len() / 2 + 2);
    out.push(b'[');
    let mut pos = skip_ws(body, 0);
    if body.get(pos) != Some(&b'[') {
        return Err(bad("expected '['", pos));
    }
    pos = skip_ws(body, pos + 1);
    let mut kept = 0usize;
    if body.get(pos) == Some(&b']') {
        pos += 1;
    } else {
        loop {
            if body.get(pos) != Some(&b'{') {
                return Err(bad("expected an object", pos));
            }
            let (visible, end) = visible_entry(kind, body, pos, scope, names)?;
            // Every entry is read, even past `limit`: an answer unreadable anywhere is refused.
            if visible && limit.is_none_or(|l| kept < l) {
                if kept > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(&body[pos..end]);
                kept += 1;
            }
            pos = skip_ws(body, end);
            match body.get(pos) {
                Some(b',') => pos = skip_ws(body, pos + 1),
                Some(b']') => {
                    pos += 1;
                    break;
                }
                _ => return Err(bad("expected ',' or ']'", pos)),
            }
        }
    }
    if skip_ws(body, pos) != body.len() {
        return Err(bad("trailing characters", pos));
    }
    out.extend_from_slice(b"]\n");
    Ok(out)
}

/// The entry starting at `start` and the offset just past it.
fn entry<T: serde::de::DeserializeOwned>(
    body: &[u8],
    start: usize,
) -> Result<(T, usize), FilterError> {
    let rest = body.get(start..).unwrap_or_default();
    let mut stream = serde_json::Deserializer::from_slice(rest).into_iter::<T>();
    match stream.next() {
        Some(Ok(e)) => Ok((e, start + stream.byte_offset())),
        Some(Err(e)) => Err(FilterError(e.to_string())),
        None => Err(FilterError(format!("truncated at byte {start}"))),
    }
}

/// JSON's four whitespace bytes.
fn skip_ws(body: &[u8], mut pos: usize) -> usize {
    while body
        .get(pos)
        .is_some_and(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
    {
        pos += 1;
    }
    pos
}

/// The full IDs of the stack's own containers, for `own_endpoints` under
/// `--require-stack-label`: an endpoint carries a container's name, never its labels.
pub type OwnIds = std::collections::HashSet<String>;

/// Keeps only the stack's own endpoints in a network's `Containers` (by name, and under
/// `--require-stack-label` by ID among `own`) and drops its swarm-only views of other nodes
/// and services (`Peers`, `Services`).
pub fn own_endpoints(network: &mut serde_json::Value, scope: &Scope, own: Option<&OwnIds>) {
    if let Some(serde_json::Value::Object(containers)) = network.get_mut("Containers") {
        containers.retain(|id, ep| {
            let named = ep
                .get("Name")
                .and_then(serde_json::Value::as_str)
                .is_some_and(|n| scope.visible(n));
            // Fail closed: under the flag, no ID set means no endpoint is known to be ours.
            named && (!scope.requires_label() || own.is_some_and(|own| own.contains(id)))
        });
    }
    if let Some(obj) = network.as_object_mut() {
        obj.remove("Peers");
        obj.remove("Services");
    }
}

/// A filtered network list with `own_endpoints` applied to every entry: below API 1.28 (and
/// with `verbose`) dockerd lists each network's endpoints, other stacks' containers among them.
fn own_endpoints_in_list(
    body: &[u8],
    scope: &Scope,
    own: Option<&OwnIds>,
) -> Result<Vec<u8>, FilterError> {
    let mut networks: Vec<serde_json::Value> =
        serde_json::from_slice(body).map_err(|e| FilterError(e.to_string()))?;
    for n in &mut networks {
        own_endpoints(n, scope, own);
    }
    let mut out = serde_json::to_vec(&networks).map_err(|e| FilterError(e.to_string()))?;
    out.push(b'\n');
    Ok(out)
}

/// A list answer as the stack gets it: `filter_list` with the client's `name` values, and for
/// networks `own_endpoints_in_list` on what was kept (one place, so a large list does both off
/// the event loop).
pub fn stack_list(
    kind: Kind,
    body: &[u8],
    scope: &Scope,
    limit: Option<usize>,
    names: &Names,
    own: Option<&OwnIds>,
) -> Result<Vec<u8>, FilterError> {
    let kept = filter_named(kind, body, scope, limit, names)?;
    match kind {
        Kind::Network => own_endpoints_in_list(&kept, scope, own),
        Kind::Container => Ok(kept),
    }
}

/// dockerd reads `limit` as an integer and ignores values below 1.
pub fn parse_limit(raw: Option<&str>) -> Result<Option<usize>, String> {
    match raw {
        None | Some("") => Ok(None),
        Some(s) => {
            let n: i64 = s
                .parse()
                .map_err(|_| format!("limit {s:?} is not an integer"))?;
            Ok(usize::try_from(n).ok().filter(|n| *n > 0))
        }
    }
}

/// List filters whose values name a container (`before`, `since`): dockerd looks them up and
/// answers "No such container" when absent, which would tell a stack that another stack's
/// container exists. The proxy resolves them among the stack's own instead.
const CONTAINER_REF_FILTERS: [&str; 2] = ["before", "since"];

/// Whether a `filters` value holds a filter that names a container (or cannot be read, in
/// which case `pin_container_refs` says why).
pub fn names_containers(raw: &str) -> bool {
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(serde_json::Value::Object(m)) => m
            .keys()
            .any(|k| CONTAINER_REF_FILTERS.contains(&k.as_str())),
        _ => true,
    }
}

/// `filters` with every `before`/`since` value replaced by the full ID of the stack's own
/// container it names (`own`: full ID and name), in dockerd's map form. A value that names no
/// own container gets the engine's own "No such container" answer, whether or not it exists.
pub fn pin_container_refs(raw: &str, own: &[(String, String)]) -> Result<String, Refusal> {
    use serde_json::{Map, Value};
    let Ok(Value::Object(mut filters)) = serde_json::from_str::<Value>(raw) else {
        return Err(Refusal::BadRequest("filters is not a JSON object".into()));
    };
    for key in CONTAINER_REF_FILTERS {
        let Some(v) = filters.remove(key) else {
            continue;
        };
        // Both shapes dockerd accepts: {"before": ["x"]} and {"before": {"x": true}}.
        let values: Vec<String> = match v {
            Value::Array(a) => a
                .iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect(),
            Value::Object(m) => m.keys().cloned().collect(),
            _ => return Err(Refusal::BadRequest(format!("filters.{key} is malformed"))),
        };
        let mut out = Map::new();
        for value in values {
            let name = CanonicalName::stripped(&value);
            let by_name = own.iter().find(|(_, n)| n == name);
            let hex = !name.is_empty() && name.bytes().all(|b| b.is_ascii_hexdigit());
            let id = match by_name {
                Some((id, _)) => id.clone(),
                None if hex => crate::pinning::own_prefix(Kind::Container, name, own)
                    .map_err(|_| Refusal::NoSuchContainer(value.clone()))?,
                None => return Err(Refusal::NoSuchContainer(value.clone())),
            };
            out.insert(id, Value::Bool(true));
        }
        filters.insert(key.to_owned(), Value::Object(out));
    }
    Ok(Value::Object(filters).to_string())
}

#[cfg(test)]
#[path = "filter_tests.rs"]
mod tests;
