//! The link-alias rule, written once: an engine name carries one leading `/` (`/NAME`), which
//! is no part of it, and a name with an inner `/` is a link alias (`/other/alias`), which
//! could name another stack's container: never the name of an object the stack may touch.

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
