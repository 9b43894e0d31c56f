//! A stack's named volumes (issue 37): the ones its creates may make, named with its prefix
//! (`mounts`), are listed and removed as its own. `GET /volumes` asks the engine for the prefix
//! (and under `--require-stack-label` the label), then keeps the stack's entries here; inspect
//! and remove are decided by name in `policy`. Under `--require-stack-label` a stack has no
//! volumes: it cannot make one, and a volume carries no label the stack could have set.

use crate::filter::FilterError;
use crate::list_query::Names;
use crate::scope::Scope;

/// The engine's volume list answer (`{"Volumes": [...], "Warnings": [...]}`) as the stack gets
/// it: the entries whose `Name` is the stack's and matches the client's `name` values, byte
/// for byte as the engine wrote them, and no warnings (a driver's warning may name another
/// stack's volume). An answer of any other shape is refused whole.
pub fn stack_volumes(body: &[u8], scope: &Scope, names: &Names) -> Result<Vec<u8>, FilterError> {
    #[derive(serde::Deserialize)]
    struct Listed<'a> {
        #[serde(rename = "Volumes", borrow)]
        volumes: Option<Vec<&'a serde_json::value::RawValue>>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(rename = "Name")]
        name: String,
    }
    let bad = |e: serde_json::Error| FilterError::new(format!("volume list: {e}"));
    let answer: Listed = serde_json::from_slice(body).map_err(bad)?;
    let mut kept = Vec::new();
    for raw in answer.volumes.unwrap_or_default() {
        let e: Entry = serde_json::from_str(raw.get()).map_err(bad)?;
        if !scope.requires_label() && scope.visible(&e.name) && names.matches(&e.name) {
            kept.push(raw);
        }
    }
    let mut bytes = b"{\"Volumes\":[".to_vec();
    for (i, raw) in kept.iter().enumerate() {
        if i > 0 {
            bytes.push(b',');
        }
        bytes.extend_from_slice(raw.get().as_bytes());
    }
    bytes.extend_from_slice(b"],\"Warnings\":null}\n");
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Prefix;
    use serde_json::Value;

    fn scope() -> Scope {
        Scope::new(Prefix::parse("deer-flow-").expect("valid"), false)
    }

    #[test]
    fn only_the_stacks_volumes_are_kept_as_the_engine_wrote_them() {
        let body = br#"{"Volumes":[
            {"Name":"deer-flow-data","Driver":"local","Labels":null},
            {"Name":"other-data","Driver":"local"},
            {"Name":"0123456789abcdef","Driver":"local"},
            {"Name":"deer-flow-cache", "Driver":"local"}
        ],"Warnings":["other-data: driver gone"]}"#;
        let out = stack_volumes(body, &scope(), &Names::default()).expect("kept");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "{\"Volumes\":[{\"Name\":\"deer-flow-data\",\"Driver\":\"local\",\"Labels\":null},\
             {\"Name\":\"deer-flow-cache\", \"Driver\":\"local\"}],\"Warnings\":null}\n"
        );
        let named = Names::compile(vec!["cache$".into()]).expect("compiles");
        let out = stack_volumes(body, &scope(), &named).expect("kept");
        let v: Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(v["Volumes"][0]["Name"], "deer-flow-cache");
        assert_eq!(v["Volumes"].as_array().map(Vec::len), Some(1));
        // Under --require-stack-label the stack has no volumes.
        let labelled = scope().with_required_label(Some("atlas"));
        let out = stack_volumes(body, &labelled, &Names::default()).expect("kept");
        assert_eq!(out, b"{\"Volumes\":[],\"Warnings\":null}\n");
        // An engine that lists no volumes writes `null`.
        let out = stack_volumes(
            br#"{"Volumes":null,"Warnings":null}"#,
            &scope(),
            &Names::default(),
        );
        assert_eq!(out.expect("kept"), b"{\"Volumes\":[],\"Warnings\":null}\n");
    }

    #[test]
    fn an_unreadable_volume_list_fails_closed() {
        for bad in [
            &br#"[]"#[..],
            br#"{"Volumes":[{"Driver":"local"}]}"#,
            br#"{"Volumes":[{"Name":7}]}"#,
            br#"{"Volumes":{}}"#,
            br#"{"Volumes":[] "#,
        ] {
            let got = stack_volumes(bad, &scope(), &Names::default()).map_err(|e| e.to_string());
            assert!(
                got.as_ref()
                    .is_err_and(|e| e.starts_with("upstream list is unreadable: volume list: ")),
                "{}: {got:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
