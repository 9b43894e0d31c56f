//! Request-target canonicalization (docs/architecture.md, "sockproxy: a request's way through"): turns a raw URI into a version, path segments
//! and a parsed query, or says why the request is malformed. Runs before any decision, so every
//! later stage sees one unambiguous reading of the target, the same one dockerd will make.

use http::{HeaderMap, Uri};

/// Why a request is answered 400. The text goes into `sockproxy: bad request: WHY`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    #[error("request target must be in origin form (a path starting with '/')")]
    NotOriginForm,
    #[error("empty path segment ('//' or a trailing '/')")]
    EmptySegment,
    #[error("'.' and '..' path segments are not accepted")]
    DotSegment,
    #[error("backslash in path")]
    Backslash,
    #[error("control character in request target")]
    ControlChar,
    #[error("'%' in path (names and IDs never need encoding)")]
    PercentInPath,
    #[error("malformed percent-escape in query")]
    BadQueryEscape,
    #[error("';' in query")]
    SemicolonInQuery,
    #[error("repeated query parameter {0:?}")]
    RepeatedParam(&'static str),
    #[error("form-encoded request bodies are not accepted")]
    FormBody,
    #[error("{0}")]
    Other(String),
}

/// Query parameters whose repetition would let dockerd and the proxy read different values.
/// (Both read the first value today; a repeat is refused so that no later change on either side
/// can split them for the parameters the policy reads.)
const SINGLE_VALUED: [&str; 7] = [
    "name",
    "filters",
    "force",
    "all",
    "ps_args",
    "fromImage",
    "tag",
];

/// A parsed query string, kept in order so it can be re-serialized for forwarding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Result<Self, BadRequest> {
        let Some(raw) = raw else {
            return Ok(Self::default());
        };
        if raw.contains(';') {
            // Go's url.ParseQuery rejects ';' (since 1.17); refusing keeps both readings equal.
            return Err(BadRequest::SemicolonInQuery);
        }
        if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return Err(BadRequest::ControlChar);
        }
        check_escapes(raw)?;
        let pairs: Vec<(String, String)> = form_urlencoded::parse(raw.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        for key in SINGLE_VALUED {
            if pairs.iter().filter(|(k, _)| k == key).count() > 1 {
                return Err(BadRequest::RepeatedParam(key));
            }
        }
        Ok(Self { pairs })
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The parameter names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.pairs.iter().map(|(k, _)| k.as_str())
    }

    /// The same query with `key`'s value replaced (the proxy's reading of it).
    pub fn replaced(&self, key: &str, value: String) -> Self {
        let pairs = self
            .pairs
            .iter()
            .map(|(k, v)| (k.clone(), if k == key { value.clone() } else { v.clone() }))
            .collect();
        Self { pairs }
    }

    /// The same query with `key` set to `value`: replaced where it is, else added at the end.
    pub fn with(&self, key: &str, value: String) -> Self {
        if self.get(key).is_some() {
            return self.replaced(key, value);
        }
        let mut pairs = self.pairs.clone();
        pairs.push((key.to_owned(), value));
        Self { pairs }
    }

    /// Re-serializes the parameters the proxy checked, leaving out `drop`.
    pub fn encode_without(&self, drop: &[&str]) -> String {
        let mut ser = form_urlencoded::Serializer::new(String::new());
        for (k, v) in &self.pairs {
            if !drop.contains(&k.as_str()) {
                ser.append_pair(k, v);
            }
        }
        ser.finish()
    }
}

fn check_escapes(raw: &str) -> Result<(), BadRequest> {
    let bytes = raw.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let ok = bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
            if !ok {
                return Err(BadRequest::BadQueryEscape);
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    Ok(())
}

/// A canonical request target: optional `vN.NN` segment (kept for forwarding), the remaining
/// path segments, and the query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub version: Option<String>,
    pub segments: Vec<String>,
    pub query: Query,
}

impl Target {
    /// The path as the proxy will forward it, with `segments` in place of the original ones.
    pub fn path_with(&self, segments: &[&str]) -> String {
        let mut out = String::new();
        if let Some(v) = &self.version {
            out.push('/');
            out.push_str(v);
        }
        for s in segments {
            out.push('/');
            out.push_str(s);
        }
        out
    }

    /// The original path (canonical form).
    pub fn path(&self) -> String {
        let segs: Vec<&str> = self.segments.iter().map(String::as_str).collect();
        self.path_with(&segs)
    }
}

/// `MAJOR.MINOR` (with or without a leading `v`) compared as dockerd compares versions: each
/// part as a number, so `1.024` is 1.24.
pub fn api_version(raw: &str) -> Option<(u32, u32)> {
    let raw = raw.strip_prefix('v').unwrap_or(raw);
    let (major, minor) = raw.split_once('.')?;
    let num = |s: &str| {
        (!s.is_empty() && s.len() <= 6 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    Some((num(major)?, num(minor)?))
}

pub fn canonicalize(uri: &Uri, headers: &HeaderMap) -> Result<Target, BadRequest> {
    if uri.scheme().is_some() || uri.authority().is_some() {
        return Err(BadRequest::NotOriginForm);
    }
    let path = uri.path();
    if !path.starts_with('/') {
        return Err(BadRequest::NotOriginForm);
    }
    if path.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(BadRequest::ControlChar);
    }
    if path.contains('\\') {
        return Err(BadRequest::Backslash);
    }
    if path.contains('%') {
        return Err(BadRequest::PercentInPath);
    }
    if is_form_body(headers) {
        // Go's ParseForm merges a form body into the query values dockerd reads; a proxy that
        // checks only the URL would be reading a different `name` than the engine.
        return Err(BadRequest::FormBody);
    }
    let mut segments: Vec<String> = Vec::new();
    if path != "/" {
        for seg in path[1..].split('/') {
            match seg {
                "" => return Err(BadRequest::EmptySegment),
                "." | ".." => return Err(BadRequest::DotSegment),
                s => segments.push(s.to_owned()),
            }
        }
    }
    let version = match segments.first() {
        Some(first) if is_version(first) => Some(segments.remove(0)),
        _ => None,
    };
    let query = Query::parse(uri.query())?;
    Ok(Target {
        version,
        segments,
        query,
    })
}

fn is_form_body(headers: &HeaderMap) -> bool {
    headers.get_all(http::header::CONTENT_TYPE).iter().any(|v| {
        v.to_str().map_or(true, |s| {
            s.trim()
                .to_ascii_lowercase()
                .starts_with("application/x-www-form-urlencoded")
        })
    })
}

/// `vN.NN`: the API version segment dockerd's router accepts.
fn is_version(seg: &str) -> bool {
    let Some(rest) = seg.strip_prefix('v') else {
        return false;
    };
    let mut parts = rest.splitn(2, '.');
    let major = parts.next().unwrap_or("");
    let minor = parts.next().unwrap_or("");
    !major.is_empty()
        && !minor.is_empty()
        && major.bytes().all(|b| b.is_ascii_digit())
        && minor.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(target: &str) -> Result<Target, BadRequest> {
        let uri: Uri = target.parse().expect("test URIs parse");
        canonicalize(&uri, &HeaderMap::new())
    }

    #[test]
    fn accepted_targets() {
        let t = canon("/v1.41/containers/json?all=1&filters=%7B%7D").expect("ok");
        assert_eq!(t.version.as_deref(), Some("v1.41"));
        assert_eq!(t.segments, ["containers", "json"]);
        assert_eq!(t.query.get("filters"), Some("{}"));
        assert_eq!(t.path(), "/v1.41/containers/json");
        let t = canon("/_ping").expect("ok");
        assert_eq!(t.version, None);
        assert_eq!(t.segments, ["_ping"]);
        assert!(canon("/").expect("ok").segments.is_empty());
    }

    #[test]
    fn refused_targets() {
        let cases = [
            ("http://docker/containers/json", BadRequest::NotOriginForm),
            ("/containers//json", BadRequest::EmptySegment),
            ("/containers/json/", BadRequest::EmptySegment),
            ("/containers/./json", BadRequest::DotSegment),
            ("/containers/../info", BadRequest::DotSegment),
            ("/containers/a%2Fb/stop", BadRequest::PercentInPath),
            (
                "/containers/json?all=1&all=0",
                BadRequest::RepeatedParam("all"),
            ),
            (
                "/containers/x?force=1&force=0",
                BadRequest::RepeatedParam("force"),
            ),
            (
                "/containers/create?name=a&name=b",
                BadRequest::RepeatedParam("name"),
            ),
            (
                "/containers/x/top?ps_args=-ef&ps_args=eww",
                BadRequest::RepeatedParam("ps_args"),
            ),
            (
                "/containers/json?filters=1&filters=2",
                BadRequest::RepeatedParam("filters"),
            ),
            ("/containers/json?all=1;all=0", BadRequest::SemicolonInQuery),
            ("/containers/json?all=%zz", BadRequest::BadQueryEscape),
        ];
        for (target, want) in cases {
            assert_eq!(canon(target), Err(want), "{target}");
        }
    }

    #[test]
    fn form_bodies_refused() {
        let uri: Uri = "/containers/create?name=x".parse().expect("uri");
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("Application/X-WWW-Form-Urlencoded; charset=utf-8"),
        );
        assert_eq!(canonicalize(&uri, &headers), Err(BadRequest::FormBody));
    }

    #[test]
    fn query_reserialization_drops_only_named_keys() {
        let q = Query::parse(Some(
            "all=1&limit=3&filters=%7B%22name%22%3A%5B%22x%22%5D%7D",
        ))
        .expect("ok");
        let out = q.encode_without(&["limit"]);
        let again = Query::parse(Some(&out)).expect("ok");
        assert_eq!(again.get("limit"), None);
        assert_eq!(again.get("all"), Some("1"));
        assert_eq!(again.get("filters"), Some(r#"{"name":["x"]}"#));
    }
}
