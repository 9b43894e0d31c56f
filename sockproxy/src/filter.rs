//! List filtering (DESIGN §2): keeps only entries the stack may see, then applies the client's
//! `limit`. Pure: bytes in, bytes out. Entries are copied verbatim, never re-encoded.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::scope::{Kind, Scope};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("upstream list is not a JSON array of objects: {0}")]
pub struct FilterError(String);

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

/// The container's own name among its `Names` (link aliases carry an inner `/`).
fn container_name(names: &[String]) -> Option<&str> {
    names
        .iter()
        .map(|n| n.strip_prefix('/').unwrap_or(n))
        .find(|n| !n.contains('/'))
}

pub fn filter_list(
    kind: Kind,
    body: &[u8],
    scope: &Scope,
    limit: Option<usize>,
) -> Result<Vec<u8>, FilterError> {
    let entries: Vec<&RawValue> =
        serde_json::from_slice(body).map_err(|e| FilterError(e.to_string()))?;
    let mut out = Vec::with_capacity(body.len() / 2 + 2);
    out.push(b'[');
    let mut kept = 0usize;
    for raw in entries {
        if limit.is_some_and(|l| kept >= l) {
            break;
        }
        let visible = match kind {
            Kind::Container => {
                let e: ContainerEntry =
                    serde_json::from_str(raw.get()).map_err(|e| FilterError(e.to_string()))?;
                e.names
                    .as_deref()
                    .and_then(container_name)
                    .is_some_and(|n| scope.visible(n))
            }
            Kind::Network => {
                let e: NetworkEntry =
                    serde_json::from_str(raw.get()).map_err(|e| FilterError(e.to_string()))?;
                e.name.as_deref().is_some_and(|n| scope.visible(n))
            }
        };
        if visible {
            if kept > 0 {
                out.push(b',');
            }
            out.extend_from_slice(raw.get().as_bytes());
            kept += 1;
        }
    }
    out.extend_from_slice(b"]\n");
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Prefix;

    fn scope() -> Scope {
        Scope::new(Prefix::parse("deer-flow-").expect("valid"), false)
    }

    fn names(out: &[u8]) -> Vec<String> {
        let v: serde_json::Value = serde_json::from_slice(out).expect("json");
        v.as_array()
            .expect("array")
            .iter()
            .map(|e| {
                e.get("Names")
                    .and_then(|n| n.get(0))
                    .or_else(|| e.get("Name"))
                    .and_then(|n| n.as_str())
                    .unwrap_or("")
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn containers_filtered_by_own_name_not_alias() {
        let body = br#"[
            {"Id":"1","Names":["/deer-flow-sandbox-a"]},
            {"Id":"2","Names":["/other"]},
            {"Id":"3","Names":["/deer-flow-sandbox-b/other","/other2"]},
            {"Id":"4","Names":["/other3/deer-flow-x","/deer-flow-netproxy-a"]},
            {"Id":"5"},
            {"Id":"6","Names":["/Deer-flow-x"]}
        ]"#;
        let out = filter_list(Kind::Container, body, &scope(), None).expect("ok");
        assert_eq!(names(&out), ["/deer-flow-sandbox-a", "/other3/deer-flow-x"]);
        let ids: Vec<String> = serde_json::from_slice::<Vec<serde_json::Value>>(&out)
            .expect("json")
            .iter()
            .map(|e| e["Id"].as_str().unwrap_or("").to_owned())
            .collect();
        assert_eq!(ids, ["1", "4"]);
    }

    #[test]
    fn limit_applies_after_filtering() {
        let body = br#"[{"Names":["/x"]},{"Names":["/deer-flow-1"]},{"Names":["/y"]},{"Names":["/deer-flow-2"]},{"Names":["/deer-flow-3"]}]"#;
        let out = filter_list(Kind::Container, body, &scope(), Some(2)).expect("ok");
        assert_eq!(names(&out), ["/deer-flow-1", "/deer-flow-2"]);
    }

    #[test]
    fn networks_filtered() {
        let body = br#"[{"Name":"bridge"},{"Name":"deer-flow-net-egress"},{"Name":"host"}]"#;
        let out = filter_list(Kind::Network, body, &scope(), None).expect("ok");
        assert_eq!(names(&out), ["deer-flow-net-egress"]);
    }

    #[test]
    fn unreadable_lists_fail_closed() {
        for body in [&b"{}"[..], b"[1]", b"[{\"Names\":\"/x\"}]", b"[", b"null"] {
            assert!(
                filter_list(Kind::Container, body, &scope(), None).is_err(),
                "{body:?}"
            );
        }
    }

    #[test]
    fn limit_parsing() {
        assert_eq!(parse_limit(None), Ok(None));
        assert_eq!(parse_limit(Some("3")), Ok(Some(3)));
        assert_eq!(parse_limit(Some("0")), Ok(None));
        assert_eq!(parse_limit(Some("-1")), Ok(None));
        assert!(parse_limit(Some("x")).is_err());
    }
}
