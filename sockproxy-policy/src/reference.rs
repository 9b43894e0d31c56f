//! How a request names an object: by name or by (a prefix of) its ID (`ObjRef`), and the
//! link-alias rule, written once (`CanonicalName`): an engine name carries one leading `/`
//! (`/NAME`), which is no part of it, and a name with an inner `/` is a link alias
//! (`/other/alias`), which could name another stack's container: never the name of an object
//! the stack may touch.

/// A container's or network's own name, its leading `/` gone and no inner `/` in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CanonicalName<'a>(&'a str);

impl<'a> CanonicalName<'a> {
    /// `raw` without one leading `/`; `None` for a link alias (an inner `/`).
    pub fn parse(raw: &'a str) -> Option<Self> {
        let name = Self::stripped(raw);
        (!name.contains('/')).then_some(Self(name))
    }

    /// `raw` without one leading `/`, alias or not: what a refusal names.
    pub fn stripped(raw: &'a str) -> &'a str {
        raw.strip_prefix('/').unwrap_or(raw)
    }

    pub fn as_str(self) -> &'a str {
        self.0
    }
}

/// A reference to a container or network as dockerd will resolve it: a hex string may be a
/// full ID or an ID prefix (resolved upstream); anything else is a name (checked locally).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjRef {
    Name(String),
    Hex(String),
}

impl ObjRef {
    /// Reads a reference from a path segment or a body field. A leading `/` is stripped once (the
    /// engine's canonical names carry one); `None` for an empty name or one with an inner `/`
    /// (a link alias, which could name another stack's container).
    pub fn parse(raw: &str) -> Option<Self> {
        let name = CanonicalName::parse(raw)?.as_str();
        if name.is_empty() {
            return None;
        }
        if name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Some(Self::Hex(name.to_owned()))
        } else {
            Some(Self::Name(name.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Name(s) | Self::Hex(s) => s,
        }
    }
}

/// A full 64-hex engine ID, as dockerd writes them (lowercase).
pub fn is_full_id(id: &str) -> bool {
    id.len() == 64
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_slash_goes_an_inner_one_refuses() {
        for (raw, want) in [
            ("a", Some("a")),
            ("/a", Some("a")),
            ("", Some("")),
            ("/", Some("")),
            ("//a", None),
            ("/a/b", None),
            ("a/b", None),
        ] {
            assert_eq!(
                CanonicalName::parse(raw).map(CanonicalName::as_str),
                want,
                "{raw}"
            );
        }
        assert_eq!(CanonicalName::stripped("/a/b"), "a/b");
    }
}
