//! JSON request bodies the proxy decides on, read dockerd's way of matching keys. Go's decoder matches object keys to struct
//! fields case-insensitively (with Unicode folding) and lets the last duplicate win, so the proxy
//! refuses any body where that reading could differ from its own, and forwards what it checked.

use std::cell::Cell;
use std::collections::HashSet;

use serde::de::DeserializeSeed;
use serde_json::{Map, Value};

use crate::refusal::Refusal;

/// Default for `--max-json-keys`: object keys a body may hold, counted at every depth. The
/// docker CLI's creates hold a few dozen; a body with many labels a few hundred.
pub const DEFAULT_MAX_JSON_KEYS: usize = 10_000;

/// Parses JSON (decoding `\u` escapes), refusing at every object level a key that is not
/// ASCII (Go folds `ſ` to `s` and the Kelvin sign to `k`) and keys that fold to the same field
/// (Go would take the last; a reader that takes the first would decide on another value).
/// Map-valued fields (labels and the like) get the same rule: stricter than needed, never laxer.
/// At most `DEFAULT_MAX_JSON_KEYS` keys (`parse_checked_with`).
pub fn parse_checked(bytes: &[u8]) -> Result<Value, Refusal> {
    parse_checked_with(bytes, DEFAULT_MAX_JSON_KEYS)
}

/// `parse_checked` with at most `max_keys` object keys in the whole body (`--max-json-keys`).
/// Each key costs one hash-set lookup in its object, so the check is linear in the body.
pub fn parse_checked_with(bytes: &[u8], max_keys: usize) -> Result<Value, Refusal> {
    let budget = Cell::new(max_keys);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Seed(&budget, max_keys)
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    let Checked(v) = parsed.map_err(|e| {
        let msg = e.to_string();
        if let Some(reason) = msg.strip_prefix(KEY_ERROR) {
            Refusal::BadRequest(
                reason
                    .split(" at line ")
                    .next()
                    .unwrap_or(reason)
                    .to_owned(),
            )
        } else {
            Refusal::BadRequest(format!("body is not JSON: {msg}"))
        }
    })?;
    Ok(v)
}

const KEY_ERROR: &str = "sockproxy-key: ";

/// A JSON value whose objects passed the key rule.
struct Checked(Value);

/// Reads one value with the key rule; the cell holds how many more keys the body may have, the
/// number the limit it started from (for the refusal).
#[derive(Clone, Copy)]
struct Seed<'b>(&'b Cell<usize>, usize);

impl<'de> serde::de::DeserializeSeed<'de> for Seed<'_> {
    type Value = Checked;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Checked, D::Error> {
        d.deserialize_any(CheckedVisitor(self))
    }
}

struct CheckedVisitor<'b>(Seed<'b>);

impl<'de> serde::de::Visitor<'de> for CheckedVisitor<'_> {
    type Value = Checked;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Checked, E> {
        Ok(Checked(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Checked, E> {
        Ok(Checked(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Checked, E> {
        Ok(Checked(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Checked, E> {
        Ok(Checked(
            serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
        ))
    }
    fn visit_str<E>(self, v: &str) -> Result<Checked, E> {
        Ok(Checked(Value::String(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Checked, E> {
        Ok(Checked(Value::String(v)))
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked(Value::Null))
    }
    fn visit_none<E>(self) -> Result<Checked, E> {
        Ok(Checked(Value::Null))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        let mut out = Vec::new();
        while let Some(Checked(v)) = seq.next_element_seed(self.0)? {
            out.push(v);
        }
        Ok(Checked(Value::Array(out)))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Checked, A::Error> {
        use serde::de::Error;
        let Seed(budget, max) = self.0;
        let mut out = Map::new();
        let mut folded: HashSet<String> = HashSet::new();
        while let Some(key) = m.next_key::<String>()? {
            match budget.get().checked_sub(1) {
                Some(left) => budget.set(left),
                None => {
                    return Err(A::Error::custom(format!(
                        "{KEY_ERROR}body has more than {max} keys (--max-json-keys)"
                    )))
                }
            }
            if !key.is_ascii() {
                return Err(A::Error::custom(format!(
                    "{KEY_ERROR}body key {key:?} is not ASCII"
                )));
            }
            if !folded.insert(key.to_ascii_lowercase()) {
                return Err(A::Error::custom(format!(
                    "{KEY_ERROR}body keys that name the same field: {key:?}"
                )));
            }
            let Checked(v) = m.next_value_seed(self.0)?;
            out.insert(key, v);
        }
        Ok(Checked(Value::Object(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_keys_follow_the_rule_too() {
        let refused = |body: &[u8]| parse_checked(body).map_err(|e| e.to_string());
        assert_eq!(
            refused(br#"{"HostConfig":{"Privileged":false,"privileged":true}}"#),
            Err(
                "sockproxy: bad request: body keys that name the same field: \"privileged\"".into()
            )
        );
        assert_eq!(
            refused(
                "{\"HostConfig\":{\"Privileged\":false,\"Privil\u{212a}ged\":true}}".as_bytes()
            ),
            Err("sockproxy: bad request: body key \"Privil\u{212a}ged\" is not ASCII".into())
        );
        assert_eq!(
            refused(br#"{"A":[{"b":1,"B":2}]}"#),
            Err("sockproxy: bad request: body keys that name the same field: \"B\"".into())
        );
        let v = parse_checked(br#"{"Bind\u0073":["/a:/b"]}"#).expect("escapes decode");
        assert_eq!(v["Binds"][0], "/a:/b");
        let e = parse_checked(br#"{"a":1,"A":2}"#)
            .expect_err("dup")
            .to_string();
        assert_eq!(
            e,
            "sockproxy: bad request: body keys that name the same field: \"A\""
        );
    }

    /// `{"k0":0,"k1":0,…}` with `n` keys, the last one `last`.
    fn many_keys(n: usize, last: &str) -> Vec<u8> {
        let mut s = String::from("{");
        for i in 0..n - 1 {
            s.push_str(&format!("\"k{i}\":0,"));
        }
        s.push_str(&format!("\"{last}\":0}}"));
        s.into_bytes()
    }

    #[test]
    fn a_body_with_many_keys_is_read_whole_or_refused_by_count() {
        let n = 100_000;
        let v = parse_checked_with(&many_keys(n, "last"), n).expect("100k distinct keys");
        assert_eq!(v.as_object().map(Map::len), Some(n));
        assert_eq!(v["k99998"], 0);
        // A fold of the first key, 100k keys later, is still found.
        let e = parse_checked_with(&many_keys(n, "K0"), n)
            .expect_err("duplicate")
            .to_string();
        assert_eq!(
            e,
            "sockproxy: bad request: body keys that name the same field: \"K0\""
        );
        let e = parse_checked_with(&many_keys(n + 1, "last"), n)
            .expect_err("too many")
            .to_string();
        assert_eq!(
            e,
            "sockproxy: bad request: body has more than 100000 keys (--max-json-keys)"
        );
        // The default: keys at every depth count, arrays of objects included.
        let nested = format!(
            "{{\"a\":[{}],\"b\":{{\"c\":1}}}}",
            vec!["{\"x\":1,\"y\":2}"; 4999].join(",")
        );
        // 2 (a, b) + 2×4999 + 1 (c) = 10,001 keys.
        let e = parse_checked(nested.as_bytes()).expect_err("10,001 keys");
        assert_eq!(
            e.to_string(),
            "sockproxy: bad request: body has more than 10000 keys (--max-json-keys)"
        );
        let fits = nested.replacen("{\"x\":1,\"y\":2},", "", 1);
        let v = parse_checked(fits.as_bytes()).expect("9,999 keys");
        assert_eq!(v["a"].as_array().map(Vec::len), Some(4998));
        assert_eq!(v["b"], serde_json::json!({ "c": 1 }));
        assert_eq!(
            parse_checked(b"{} x").map_err(|e| e.to_string()),
            Err(
                "sockproxy: bad request: body is not JSON: trailing characters at line 1 column 4"
                    .into()
            ),
            "trailing bytes"
        );
    }

    #[test]
    fn key_rules() {
        let ok = parse_checked(br#"{"name":"a","Driver":"bridge"}"#).expect("ok");
        assert_eq!(ok["name"], "a");
        for (body, why) in [
            (
                &br#"{"Name":"a","name":"b"}"#[..],
                "body keys that name the same field: \"name\"",
            ),
            (
                br#"{"Name":"a","Name":"b"}"#,
                "body keys that name the same field: \"Name\"",
            ),
            (
                "{\"N\u{0430}me\":\"a\"}".as_bytes(),
                "body key \"N\u{0430}me\" is not ASCII",
            ),
            (
                br#"{"\u017fecret":1}"#,
                "body key \"\u{17f}ecret\" is not ASCII",
            ),
            (
                b"nope",
                "body is not JSON: expected ident at line 1 column 2",
            ),
        ] {
            assert_eq!(
                parse_checked(body),
                Err(Refusal::BadRequest(why.into())),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
