//! Properties the fuzz targets (`fuzz/`) assert and the stable replay test
//! (`tests/tests/tools/fuzz_corpus.rs`) checks again on every committed corpus input. Each function
//! takes the raw fuzz input, reads it as documented, and returns `Err(why)` when a property
//! does not hold; malformed input that the code under test refuses is not a violation.
//!
//! - `request`: bytes → (method, target) → `canon` → `api::parse` → `policy::decide`; an
//!   allowed request, re-serialized as the proxy forwards it, parses back to the same target,
//!   endpoint and plan, and the plan is one the scope allows.
//! - `create_body` is `create_props`' (re-exported here).
//! - `list_filter`: `filter::filter_list` keeps a subset of the input entries, in order,
//!   verbatim, all visible to the scope, and every visible one up to `limit`.
//! - `evaluate_request` is `evaluate_props`' (re-exported here); `engine_answer` is the
//!   transport's (`sockproxy::props`).

use http::{HeaderMap, Method, Uri};
use serde_json::value::RawValue;
use serde_json::Value;

pub use crate::create_props::create_body;
pub use crate::evaluate_props::evaluate_request;

use crate::api;
use crate::canon::{canonicalize, Target};
use crate::filter::filter_list;
use crate::policy::{decide, Route};
use crate::reference::ObjRef;
use crate::scope::{Access, Kind, Prefix, Scope};

/// The prefix every property runs with (deer-flow's).
pub const PREFIX: &str = "deer-flow-";

/// Methods the first input byte selects from.
const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT",
];

/// The one image the request property's scope may pull.
const PULLABLE: &str = "busybox:1.36";

pub(crate) fn scope(restricted: bool, info: bool) -> Result<Scope, String> {
    let prefix = Prefix::parse(PREFIX).map_err(|e| format!("test prefix: {e}"))?;
    Ok(Scope::new(prefix, restricted).with_info(info))
}

/// The query as the proxy forwards it (every parameter the proxy checked, in order).
pub fn forwarded_target(t: &Target) -> String {
    let q = t.query.encode_without(&[]);
    if q.is_empty() {
        t.path()
    } else {
        format!("{}?{q}", t.path())
    }
}

/// Input: byte 0 picks the method, byte 1's low bits `--restricted` and `--info deny`, the rest
/// is the request target.
pub fn request(data: &[u8]) -> Result<(), String> {
    let [m, flags, rest @ ..] = data else {
        return Ok(());
    };
    let method = Method::from_bytes(METHODS[usize::from(*m) % METHODS.len()].as_bytes())
        .map_err(|e| e.to_string())?;
    let scope = scope(flags & 1 == 1, flags & 2 == 0)?;
    let Ok(raw) = std::str::from_utf8(rest) else {
        return Ok(());
    };
    let Ok(uri) = raw.parse::<Uri>() else {
        return Ok(());
    };
    let Ok(target) = canonicalize(&uri, &HeaderMap::new()) else {
        return Ok(());
    };
    let allow_images = vec![crate::images::normalize_image(PULLABLE)];
    let ep = api::parse(&method, &target);
    let Ok(plan) = decide(&ep, &target.query, &scope, &allow_images) else {
        return Ok(());
    };
    plan_in_scope(&plan, &target, &scope)?;
    let again = forwarded_target(&target);
    let uri2: Uri = again
        .parse()
        .map_err(|e| format!("forwarded target {again:?} does not parse: {e}"))?;
    let target2 = canonicalize(&uri2, &HeaderMap::new())
        .map_err(|e| format!("forwarded target {again:?} refused: {e}"))?;
    if target2 != target {
        return Err(format!(
            "forwarded target {again:?} reads as {target2:?}, not {target:?}"
        ));
    }
    let ep2 = api::parse(&method, &target2);
    if ep2 != ep {
        return Err(format!("{again:?} is {ep2:?}, was {ep:?}"));
    }
    match decide(&ep2, &target2.query, &scope, &allow_images) {
        Ok(plan2) if plan2 == plan => Ok(()),
        other => Err(format!("{again:?} decided {other:?}, was Ok({plan:?})")),
    }
}

/// What an allowed plan acts on is in the scope (names are decided without the engine).
fn plan_in_scope(plan: &Route, target: &Target, scope: &Scope) -> Result<(), String> {
    let name_ok = |kind, access, r: &ObjRef| match r {
        ObjRef::Name(n) => scope.allows(kind, access, n) && !n.contains('/'),
        ObjRef::Hex(h) => h.bytes().all(|b| b.is_ascii_hexdigit()) && !h.is_empty(),
    };
    let ok = match plan {
        Route::CreateContainer => {
            let name = target.query.get("name").unwrap_or("");
            let name = name.strip_prefix('/').unwrap_or(name);
            scope.allows(Kind::Container, Access::Change, name) && !name.contains('/')
        }
        Route::Container {
            op: crate::api::ContainerOp::Rename,
            target: r,
            access,
        } => {
            // The new name is in scope too, and no link alias.
            let new = target.query.get("name").unwrap_or("");
            let new = new.strip_prefix('/').unwrap_or(new);
            name_ok(Kind::Container, *access, r)
                && scope.allows(Kind::Container, Access::Change, new)
                && !new.contains('/')
        }
        Route::Container {
            target: r, access, ..
        } => name_ok(Kind::Container, *access, r),
        Route::Network {
            target: r, access, ..
        } => name_ok(Kind::Network, *access, r),
        Route::CreateNetwork => scope.restricted(),
        Route::Exec { id, .. } => id.bytes().all(|b| b.is_ascii_hexdigit()),
        Route::Forward | Route::List(_) | Route::Events | Route::Info | Route::VolumeList => true,
        // The one volume named in the path is the stack's, and never under the label rule.
        Route::Volume => {
            target.segments.len() == 2
                && target.segments[0] == "volumes"
                && scope.visible(&target.segments[1])
                && !scope.requires_label()
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{plan:?} allowed outside the scope"))
    }
}

/// Input: byte 0's low bit picks networks (else containers), byte 1 is `limit` (0: none); the
/// rest is the engine's list answer.
pub fn list_filter(data: &[u8]) -> Result<(), String> {
    let [sel, lim, body @ ..] = data else {
        return Ok(());
    };
    let kind = if sel & 1 == 1 {
        Kind::Network
    } else {
        Kind::Container
    };
    let limit = (*lim > 0).then_some(usize::from(*lim));
    let scope = scope(sel & 2 == 2, true)?;
    let Ok(out) = filter_list(kind, body, &scope, limit) else {
        return Ok(());
    };
    let input: Vec<&RawValue> = serde_json::from_slice(body)
        .map_err(|e| format!("filter accepted an answer that is not a JSON array: {e}"))?;
    let output: Vec<&RawValue> = serde_json::from_slice(&out)
        .map_err(|e| format!("filter output is not a JSON array: {e}"))?;
    // A subsequence of the input, entry bytes unchanged.
    let mut rest = input.iter();
    for o in &output {
        if !rest.any(|i| i.get() == o.get()) {
            return Err(format!(
                "output entry {} is not an input entry in order",
                o.get()
            ));
        }
    }
    for o in &output {
        if !visible(kind, o, &scope) {
            return Err(format!("output entry {} is not visible", o.get()));
        }
    }
    let want = input.iter().filter(|i| visible(kind, i, &scope)).count();
    let want = limit.map_or(want, |l| want.min(l));
    if output.len() != want {
        return Err(format!(
            "{} entries kept, {want} visible (limit {limit:?})",
            output.len()
        ));
    }
    Ok(())
}

/// An entry's `Name` and `Names` (the last of each when repeated, as a JSON object reads), kept
/// as raw JSON; every other field is skipped unread. A number no `f64` can hold (`1e666`, valid
/// JSON, which the filter passes through untouched) makes neither the entry nor the field the
/// kind does not read unreadable: `visible` decodes only the field its kind names.
#[derive(Default)]
struct NameFields {
    name: Option<Box<RawValue>>,
    names: Option<Box<RawValue>>,
}

impl<'de> serde::Deserialize<'de> for NameFields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = NameFields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list entry (an object)")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<NameFields, A::Error> {
                let mut out = NameFields::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "Name" => out.name = Some(map.next_value()?),
                        "Names" => out.names = Some(map.next_value()?),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(Fields)
    }
}

/// Visibility read independently of `filter`: a container's name is its first `Names` entry
/// without an inner `/` (one leading `/` stripped), a network's its `Name`.
fn visible(kind: Kind, entry: &RawValue, scope: &Scope) -> bool {
    let Ok(v) = serde_json::from_str::<NameFields>(entry.get()) else {
        return false;
    };
    let field =
        |raw: Option<Box<RawValue>>| raw.and_then(|r| serde_json::from_str::<Value>(r.get()).ok());
    let name = match kind {
        Kind::Network => field(v.name)
            .as_ref()
            .and_then(Value::as_str)
            .map(str::to_owned),
        Kind::Container => field(v.names)
            .as_ref()
            .and_then(Value::as_array)
            .and_then(|names| {
                names
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|n| n.strip_prefix('/').unwrap_or(n))
                    .find(|n| !n.contains('/'))
                    .map(str::to_owned)
            }),
    };
    name.is_some_and(|n| n.starts_with(PREFIX) && scope.visible(&n))
}
