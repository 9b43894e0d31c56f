//! The stack's name scopes (DESIGN §1): which container and network names a stack may see and
//! which it may change. Pure string logic, byte-exact and case-sensitive.

use std::fmt;

/// Why a prefix was refused at start-up. The message names the rule so an operator can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    #[error("prefix {0:?} must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*[-_.]$ (start alphanumeric, end with '-', '_' or '.')")]
    Shape(String),
    #[error("prefix {0:?} must contain at least one character that is not a hex digit, so it can never be read as a container-ID prefix")]
    AllHex(String),
}

/// A validated stack prefix `P`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefix(String);

impl Prefix {
    pub fn parse(raw: &str) -> Result<Self, PrefixError> {
        let bytes = raw.as_bytes();
        let shape_ok = bytes.len() >= 2
            && bytes[0].is_ascii_alphanumeric()
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            && matches!(bytes[bytes.len() - 1], b'-' | b'_' | b'.');
        if !shape_ok {
            return Err(PrefixError::Shape(raw.to_owned()));
        }
        if bytes.iter().all(u8::is_ascii_hexdigit) {
            return Err(PrefixError::AllHex(raw.to_owned()));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a request wants to do to an object: look at it, or change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Change,
}

/// The kind of object a reference points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Container,
    Network,
}

/// A stack's scope: its prefix and whether restricted-mode objects are its to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    prefix: Prefix,
    restricted: bool,
}

impl Scope {
    pub fn new(prefix: Prefix, restricted: bool) -> Self {
        Self { prefix, restricted }
    }

    pub fn prefix(&self) -> &Prefix {
        &self.prefix
    }

    pub fn restricted(&self) -> bool {
        self.restricted
    }

    /// Lists show everything under `P`, including leftovers the stack may not change.
    pub fn visible(&self, name: &str) -> bool {
        name.starts_with(self.prefix.as_str())
    }

    /// Whether `name` (no leading `/`) is in scope for `access` on an object of `kind`.
    pub fn allows(&self, kind: Kind, access: Access, name: &str) -> bool {
        let Some(rest) = name.strip_prefix(self.prefix.as_str()) else {
            return false;
        };
        match (kind, access) {
            (_, Access::Read) => true,
            (Kind::Container, Access::Change) => {
                has_suffix_after(rest, "sandbox-")
                    || (self.restricted && has_suffix_after(rest, "netproxy-"))
            }
            (Kind::Network, Access::Change) => self.restricted && has_suffix_after(rest, "net-"),
        }
    }
}

/// `rest` starts with `role` and has at least one more character (the sandbox ID or `egress`).
fn has_suffix_after(rest: &str, role: &str) -> bool {
    rest.strip_prefix(role).is_some_and(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_rule_table() {
        let cases = [
            ("deer-flow-", true),
            ("df_", true),
            ("a.", true),
            ("stack1-", true),
            ("abc-", true), // '-' is not hex
            ("-x-", false),
            ("deer-flow", false),
            ("", false),
            ("-", false),
            ("deer flow-", false),
            ("deer/flow-", false),
            ("déer-", false),
            ("DEER-", true),
        ];
        for (raw, ok) in cases {
            assert_eq!(Prefix::parse(raw).is_ok(), ok, "{raw:?}");
        }
    }

    #[test]
    fn scope_table() {
        let open = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
        let restricted = Scope::new(Prefix::parse("deer-flow-").expect("valid"), true);
        use Access::*;
        use Kind::*;
        let cases = [
            ("deer-flow-sandbox-abc", Container, Change, true, true),
            ("deer-flow-sandbox-", Container, Change, false, false),
            ("deer-flow-netproxy-abc", Container, Change, false, true),
            ("deer-flow-netproxy-abc", Container, Read, true, true),
            ("deer-flow-other", Container, Read, true, true),
            ("deer-flow-other", Container, Change, false, false),
            ("Deer-flow-sandbox-abc", Container, Read, false, false),
            ("x-deer-flow-sandbox-abc", Container, Change, false, false),
            ("deer-flow-net-abc", Network, Change, false, true),
            ("deer-flow-net-egress", Network, Change, false, true),
            ("deer-flow-net-egress", Network, Read, true, true),
            ("bridge", Network, Read, false, false),
            ("deer-flow-sandbox-abc", Network, Change, false, false),
        ];
        for (name, kind, access, in_open, in_restricted) in cases {
            assert_eq!(open.allows(kind, access, name), in_open, "open {name}");
            assert_eq!(
                restricted.allows(kind, access, name),
                in_restricted,
                "restricted {name}"
            );
        }
    }
}
