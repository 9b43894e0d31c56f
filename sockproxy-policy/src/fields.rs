//! Reading a JSON request body field by field, the way dockerd's Go decoder reads it, into the
//! value the proxy forwards. Keys match their field case-insensitively (the body parser has
//! already refused non-ASCII keys and keys that fold together); `null` is the same as absent.
//! Every field must be claimed by a rule: whatever is left when a reader finishes is refused by
//! name, so a field the proxy does not know never reaches the engine.

use serde_json::{Map, Value};

use crate::refusal::Refusal;

/// One JSON object being read, with the dotted path used in refusals (`HostConfig.LogConfig`).
#[derive(Debug)]
pub struct Reader<'a> {
    op: &'a str,
    path: String,
    map: Map<String, Value>,
}

impl<'a> Reader<'a> {
    /// `v` must be an object (or null, read as empty).
    pub fn new(op: &'a str, path: &str, v: Value) -> Result<Self, Refusal> {
        let map = match v {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            _ => return Err(bad(path, "an object")),
        };
        Ok(Self {
            op,
            path: path.to_owned(),
            map,
        })
    }

    pub fn op(&self) -> &'a str {
        self.op
    }

    /// The dotted path of field `name` under this object.
    pub fn path(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    /// Removes and returns the value Go would decode into `name`; `null` reads as absent.
    pub fn take(&mut self, name: &str) -> Option<Value> {
        let key = self
            .map
            .keys()
            .find(|k| k.eq_ignore_ascii_case(name))?
            .clone();
        self.map.remove(&key).filter(|v| !v.is_null())
    }

    /// Removes `name` if the client sent it as `null`.
    pub fn take_null(&mut self, name: &str) -> bool {
        let key = self
            .map
            .iter()
            .find(|(k, v)| k.eq_ignore_ascii_case(name) && v.is_null())
            .map(|(k, _)| k.clone());
        key.is_some_and(|k| self.map.remove(&k).is_some())
    }

    /// Removes every key that names a field in `names`, as (canonical name, value) pairs.
    pub fn take_all(&mut self, names: &[&'static str]) -> Vec<(&'static str, Value)> {
        names
            .iter()
            .filter_map(|n| self.take(n).map(|v| (*n, v)))
            .collect()
    }

    /// Reads `name` with `check` and forwards what it returns under the canonical name. An
    /// explicit `null` (the field's zero value to Go) is forwarded as `null` unchecked, so the
    /// engine stores what it would have stored for the client's own body.
    pub fn keep(
        &mut self,
        out: &mut Map<String, Value>,
        name: &str,
        check: impl FnOnce(&Self, &str, Value) -> Result<Value, Refusal>,
    ) -> Result<(), Refusal> {
        if self.take_null(name) {
            out.insert(name.to_owned(), Value::Null);
        } else if let Some(v) = self.take(name) {
            let path = self.path(name);
            out.insert(name.to_owned(), check(self, &path, v)?);
        }
        Ok(())
    }

    /// Fields the stack may name only with their zero value (what clients send when unset:
    /// `""`, `0`, `false`, `[]`, `{}`, `null`); the value is forwarded as sent, since the engine
    /// stores `[]` and `null` differently and a client comparing answers would see it. An
    /// object of zeros is forwarded as `{}`: for a struct that is the same zero, but for a map
    /// (`Annotations`, `StorageOpt`, driver options) a key with an empty value is not nothing.
    pub fn zero_kept(
        &mut self,
        out: &mut Map<String, Value>,
        names: &[&str],
    ) -> Result<(), Refusal> {
        for name in names {
            if self.take_null(name) {
                out.insert((*name).to_owned(), Value::Null);
            } else if let Some(v) = self.take(name) {
                if !is_zero(&v) {
                    return Err(self.not_allowed(name));
                }
                let v = match v {
                    Value::Object(_) => Value::Object(Map::new()),
                    other => other,
                };
                out.insert((*name).to_owned(), v);
            }
        }
        Ok(())
    }

    /// `name` (a field of this object) is not allowed for this stack.
    pub fn not_allowed(&self, name: &str) -> Refusal {
        not_allowed(self.op, &self.path(name))
    }

    /// Any field no rule claimed is refused by name; a leftover `null` is absent anyway.
    pub fn finish(self) -> Result<(), Refusal> {
        match self.map.iter().find(|(_, v)| !v.is_null()) {
            Some((k, _)) => Err(not_allowed(self.op, &self.path(k))),
            None => Ok(()),
        }
    }
}

/// `sockproxy: OP: PATH is not allowed for this stack`.
pub fn not_allowed(op: &str, path: &str) -> Refusal {
    Refusal::Setting {
        op: op.to_owned(),
        why: format!("{path} is not allowed for this stack"),
    }
}

/// `sockproxy: OP: PATH VALUE is not allowed for this stack (HINT)`.
pub fn value_not_allowed(op: &str, path: &str, value: &str, hint: &str) -> Refusal {
    let hint = if hint.is_empty() {
        String::new()
    } else {
        format!(" ({hint})")
    };
    Refusal::Setting {
        op: op.to_owned(),
        why: format!("{path} {value} is not allowed for this stack{hint}"),
    }
}

fn bad(path: &str, expected: &str) -> Refusal {
    Refusal::BadRequest(format!("{path} must be {expected}"))
}

/// What Go leaves as the zero value: null, false, 0, "", [], {} or an object of zeros.
pub fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_zero),
    }
}

pub fn string(path: &str, v: Value) -> Result<String, Refusal> {
    match v {
        Value::String(s) => Ok(s),
        _ => Err(bad(path, "a string")),
    }
}

pub fn boolean(path: &str, v: &Value) -> Result<bool, Refusal> {
    v.as_bool().ok_or_else(|| bad(path, "a boolean"))
}

/// A JSON integer that fits Go's int64 (a fraction or exponent is refused, as Go refuses it).
pub fn int(path: &str, v: &Value) -> Result<i64, Refusal> {
    v.as_i64().ok_or_else(|| bad(path, "an integer"))
}

pub fn uint(path: &str, v: &Value) -> Result<u64, Refusal> {
    v.as_u64()
        .ok_or_else(|| bad(path, "a non-negative integer"))
}

pub fn str_list(path: &str, v: Value) -> Result<Vec<String>, Refusal> {
    match v {
        Value::Array(a) => a
            .into_iter()
            .map(|x| match x {
                Value::String(s) => Ok(s),
                _ => Err(bad(path, "a list of strings")),
            })
            .collect(),
        _ => Err(bad(path, "a list of strings")),
    }
}

/// Go's `strslice.StrSlice`: a string or a list of strings.
pub fn str_slice(path: &str, v: Value) -> Result<Value, Refusal> {
    match v {
        Value::String(_) => Ok(v),
        other => Ok(Value::from(str_list(path, other)?)),
    }
}

/// A `map[string]string`.
pub fn str_map(path: &str, v: Value) -> Result<Map<String, Value>, Refusal> {
    match v {
        Value::Object(m) if m.values().all(Value::is_string) => Ok(m),
        _ => Err(bad(path, "an object of strings")),
    }
}

/// A `map[string]struct{}` (exposed ports, anonymous volumes): keys kept, values `{}`.
pub fn key_set(path: &str, v: Value) -> Result<Value, Refusal> {
    match v {
        Value::Object(m) => Ok(Value::Object(
            m.into_iter()
                .map(|(k, _)| (k, Value::Object(Map::new())))
                .collect(),
        )),
        _ => Err(bad(path, "an object")),
    }
}

// Ready-made checks for `Reader::keep`.
pub fn any_string(_: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    string(p, v).map(Value::String)
}
pub fn any_bool(_: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    boolean(p, &v).map(Value::Bool)
}
pub fn any_int(_: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    int(p, &v).map(Value::from)
}
pub fn any_uint(_: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    uint(p, &v).map(Value::from)
}
pub fn any_str_list(_: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    str_list(p, v).map(Value::from)
}
pub fn any_str_slice(_: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    str_slice(p, v)
}
pub fn any_str_map(_: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    str_map(p, v).map(Value::Object)
}
pub fn any_key_set(_: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    key_set(p, v)
}
/// `false` (or absent) only: the setting is refused when on.
pub fn false_only(r: &Reader, p: &str, v: Value) -> Result<Value, Refusal> {
    if boolean(p, &v)? {
        Err(not_allowed(r.op(), p))
    } else {
        Ok(Value::Bool(false))
    }
}
/// A fixed set of string values.
pub fn one_of(
    allowed: &'static [&'static str],
) -> impl Fn(&Reader, &str, Value) -> Result<Value, Refusal> {
    move |r, p, v| {
        let s = string(p, v)?;
        if allowed.contains(&s.as_str()) {
            Ok(Value::String(s))
        } else {
            Err(value_not_allowed(r.op(), p, &s, ""))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_match_case_insensitively_and_leftovers_are_refused() {
        let mut r = Reader::new("x.op", "Top", json!({"image": "a", "Extra": 1, "N": null}))
            .expect("object");
        let mut out = Map::new();
        r.keep(&mut out, "Image", any_string).expect("string");
        assert_eq!(
            out,
            json!({"Image": "a"}).as_object().cloned().expect("obj")
        );
        assert_eq!(
            r.finish().map_err(|e| e.to_string()),
            Err("sockproxy: x.op: Top.Extra is not allowed for this stack".into())
        );
    }

    #[test]
    fn zero_only_and_types() {
        let mut r = Reader::new("o", "", json!({"A": "", "B": [], "C": {"x": 0}, "D": "on"}))
            .expect("object");
        let mut out = Map::new();
        r.zero_kept(&mut out, &["A", "B", "C"]).expect("zeros");
        assert_eq!(Value::Object(out), json!({"A": "", "B": [], "C": {}}));
        assert_eq!(
            r.zero_kept(&mut Map::new(), &["D"])
                .map_err(|e| e.to_string()),
            Err("sockproxy: o: D is not allowed for this stack".into())
        );
        for v in [json!(1.5), json!(1e3), json!(u64::MAX)] {
            assert_eq!(
                int("p", &v),
                Err(Refusal::BadRequest("p must be an integer".into())),
                "{v}"
            );
        }
        assert_eq!(
            str_list("p", json!(["a", 1])),
            Err(Refusal::BadRequest("p must be a list of strings".into()))
        );
        assert_eq!(str_slice("p", json!("sh")).expect("ok"), json!("sh"));
        assert_eq!(
            Reader::new("o", "p", json!([1])).map(|_| ()),
            Err(Refusal::BadRequest("p must be an object".into()))
        );
    }
}
