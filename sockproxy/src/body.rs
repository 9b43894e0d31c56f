//! JSON request bodies the proxy must read (network create, connect, disconnect): bounded
//! reading and dockerd's way of matching keys. Go's decoder matches object keys to struct
//! fields case-insensitively (with Unicode folding) and lets the last duplicate win, so the proxy
//! refuses any body where that reading could differ from its own, and forwards what it checked.

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use serde_json::{Map, Value};

use crate::refusal::Refusal;
use crate::upstream::Body;

/// Largest request body the proxy reads to decide on (DESIGN: oversized ⇒ deny).
pub const MAX_BODY: usize = 1 << 20;

pub async fn read_json_object(body: Body) -> Result<Map<String, Value>, Refusal> {
    let bytes: Bytes = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Refusal::TooLarge(MAX_BODY)
            } else {
                Refusal::BadRequest(format!("reading body: {e}"))
            }
        })?
        .to_bytes();
    parse_object(&bytes)
}

pub fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, Refusal> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| Refusal::BadRequest(format!("body is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(Refusal::BadRequest("body is not a JSON object".into()));
    }
    // A `Map` silently keeps the last of two equal keys, so the keys are read again in order.
    let Pairs(keys) = serde_json::from_slice(bytes)
        .map_err(|e| Refusal::BadRequest(format!("body is not JSON: {e}")))?;
    check_keys(&keys)?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(Refusal::BadRequest("body is not a JSON object".into())),
    }
}

/// The top-level keys of a JSON object, in order, duplicates included.
struct Pairs(Vec<String>);

impl<'de> serde::Deserialize<'de> for Pairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Pairs;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Pairs, A::Error> {
                let mut keys = Vec::new();
                while let Some((k, _)) = m.next_entry::<String, serde::de::IgnoredAny>()? {
                    keys.push(k);
                }
                Ok(Pairs(keys))
            }
        }
        d.deserialize_map(V)
    }
}

/// Refuses non-ASCII keys (Unicode folding such as `ſ`→`s` could reach a field) and keys that
/// fold to the same field.
fn check_keys(keys: &[String]) -> Result<(), Refusal> {
    let mut seen: Vec<String> = Vec::with_capacity(keys.len());
    for key in keys {
        if !key.is_ascii() {
            return Err(Refusal::BadRequest(format!(
                "body key {key:?} is not ASCII"
            )));
        }
        let folded = key.to_ascii_lowercase();
        if seen.contains(&folded) {
            return Err(Refusal::BadRequest(format!(
                "body keys that differ only in case: {key:?}"
            )));
        }
        seen.push(folded);
    }
    Ok(())
}

/// The key that dockerd would read as `field`, if any (keys are already checked unique).
pub fn field_key(map: &Map<String, Value>, field: &str) -> Option<String> {
    map.keys().find(|k| k.eq_ignore_ascii_case(field)).cloned()
}

/// The string value dockerd would read as `field`; a non-string value is refused.
pub fn string_field<'a>(
    map: &'a Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, Refusal> {
    match field_key(map, field).and_then(|k| map.get(&k)) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Refusal::BadRequest(format!("{field} must be a string"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_rules() {
        let ok = parse_object(br#"{"name":"a","Driver":"bridge"}"#).expect("ok");
        assert_eq!(string_field(&ok, "Name").expect("ok"), Some("a"));
        assert!(parse_object(br#"{"Name":"a","name":"b"}"#).is_err());
        assert!(parse_object(br#"{"Name":"a","Name":"b"}"#).is_err());
        assert!(parse_object("{\"N\u{0430}me\":\"a\"}".as_bytes()).is_err());
        assert!(parse_object(br#"{"\u017fecret":1}"#).is_err());
        assert!(parse_object(b"[]").is_err());
        assert!(parse_object(b"nope").is_err());
        let num = parse_object(br#"{"Name":1}"#).expect("object");
        assert!(string_field(&num, "Name").is_err());
    }
}
