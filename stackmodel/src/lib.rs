//! The stack model (docs/architecture.md, "Names"), defined once for sockproxy and lifecycle: the prefix rule, the
//! declarative table of name families (who may change what, in open and restricted mode), the
//! sandbox ID and digest derivations deer-flow upstream uses, and the labels lifecycle writes.
//! Pure string logic, byte-exact and case-sensitive.

use std::fmt;

use sha2::{Digest, Sha256};

/// Why a prefix was refused at start-up. The message names the rule so an operator can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    #[error("prefix {0:?} must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*[-_.]$ (start alphanumeric, end with '-', '_' or '.')")]
    Shape(String),
    #[error("prefix {0:?} must contain at least one character that is not a hex digit, so it can never be read as a container-ID prefix")]
    AllHex(String),
}

/// A validated stack prefix `P`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
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

    /// `C = {P}sandbox`, deer-flow's `container_prefix` (no trailing dash).
    pub fn container_prefix(&self) -> String {
        format!("{}sandbox", self.0)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The kind of object a name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Container,
    Network,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Container => "container",
            Self::Network => "network",
        }
    }
}

/// In which proxy mode a family's objects are the stack's to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangedIn {
    /// Open and restricted mode.
    Always,
    /// Only when the proxy runs with `--restricted`.
    Restricted,
}

/// One family of names: `{P}{role}*`, with at least one character after `role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    pub kind: Kind,
    pub role: &'static str,
    pub changed_in: ChangedIn,
    pub what: &'static str,
}

/// Every family a stack may change (docs/architecture.md, "Names"). Everything else under `P` is visible only.
pub const FAMILIES: [Family; 5] = [
    Family {
        kind: Kind::Container,
        role: "sandbox-",
        changed_in: ChangedIn::Always,
        what: "sandbox containers",
    },
    Family {
        kind: Kind::Container,
        role: "netproxy-",
        changed_in: ChangedIn::Restricted,
        what: "netproxy sidecars",
    },
    Family {
        kind: Kind::Network,
        role: "net-",
        changed_in: ChangedIn::Restricted,
        what: "networks (older names)",
    },
    Family {
        kind: Kind::Network,
        role: "sandbox-net-",
        changed_in: ChangedIn::Restricted,
        what: "sandbox internal networks",
    },
    Family {
        kind: Kind::Network,
        role: "sandbox-egress-",
        changed_in: ChangedIn::Restricted,
        what: "sandbox egress networks",
    },
];

/// The family `name` belongs to under `prefix`, if any.
pub fn family_of(prefix: &Prefix, kind: Kind, name: &str) -> Option<&'static Family> {
    let rest = name.strip_prefix(prefix.as_str())?;
    FAMILIES.iter().find(|f| {
        f.kind == kind
            && rest
                .strip_prefix(f.role)
                .is_some_and(|tail| !tail.is_empty())
    })
}

/// Whether a stack with `prefix`, in restricted mode or not, may change the object `name`.
pub fn may_change(prefix: &Prefix, kind: Kind, name: &str, restricted: bool) -> bool {
    family_of(prefix, kind, name).is_some_and(|f| match f.changed_in {
        ChangedIn::Always => true,
        ChangedIn::Restricted => restricted,
    })
}

/// The first 16 hex characters of SHA-256 over `x`.
pub fn k(x: &str) -> String {
    let digest = Sha256::digest(x.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Longest user ID deer-flow accepts (its `config/paths.py`).
pub const MAX_USER_ID: usize = 128;
/// Longest thread ID deer-flow accepts.
pub const MAX_THREAD_ID: usize = 64;

/// Why a user or thread ID was refused. deer-flow validates both against `[A-Za-z0-9_-]`; so
/// do we, before anything is derived: the sandbox ID hashes `"{user}:{thread}"`, and a `:` (or
/// any byte outside that set) inside either would let two tenants derive the same sandbox.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdRuleError {
    #[error("{0} must not be empty")]
    Empty(&'static str),
    #[error("{0} must not contain a newline")]
    Newline(&'static str),
    #[error("{what} must be at most {max} characters (got {len})")]
    TooLong {
        what: &'static str,
        max: usize,
        len: usize,
    },
    #[error("{what} may contain only A-Z, a-z, 0-9, '_' and '-' (found {found:?})")]
    Charset { what: &'static str, found: char },
}

/// The one rule for the IDs a sandbox is derived from: `user_id` matches
/// `^[A-Za-z0-9_-]{1,128}$` and `thread_id` `^[A-Za-z0-9_-]{1,64}$`, as in deer-flow. Every
/// entry point (the CLI, `/v1/`, the provisioner routes) calls this before any engine call.
pub fn check_ids(user_id: &str, thread_id: &str) -> Result<(), IdRuleError> {
    for (what, v, max) in [
        ("user ID", user_id, MAX_USER_ID),
        ("thread ID", thread_id, MAX_THREAD_ID),
    ] {
        if v.is_empty() {
            return Err(IdRuleError::Empty(what));
        }
        if let Some(found) = v
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-')))
        {
            if found == '\n' {
                return Err(IdRuleError::Newline(what));
            }
            return Err(IdRuleError::Charset { what, found });
        }
        if v.len() > max {
            return Err(IdRuleError::TooLong {
                what,
                max,
                len: v.len(),
            });
        }
    }
    Ok(())
}

/// deer-flow's `derive_sandbox_scope_token`: 16 hex of SHA-256 over `"{user_id}:{thread_id}"`.
/// Changing separator, encoding, digest, case or length is a breaking migration.
pub fn sandbox_id(user_id: &str, thread_id: &str) -> String {
    k(&format!("{user_id}:{thread_id}"))
}

/// 16 hex of SHA-256 over `"{C}:{sandbox_id}"`, naming a sandbox's sidecar and networks.
pub fn digest(prefix: &Prefix, sandbox_id: &str) -> String {
    k(&format!("{}:{sandbox_id}", prefix.container_prefix()))
}

/// The names one sandbox uses, exactly as deer-flow upstream derives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub sandbox: String,
    pub sidecar: String,
    pub network: String,
    pub egress: String,
    pub digest: String,
}

impl Names {
    pub fn new(prefix: &Prefix, sandbox_id: &str) -> Self {
        let p = prefix.as_str();
        let d = digest(prefix, sandbox_id);
        Self {
            sandbox: format!("{p}sandbox-{sandbox_id}"),
            sidecar: format!("{p}netproxy-{d}"),
            network: format!("{p}sandbox-net-{d}"),
            egress: format!("{p}sandbox-egress-{d}"),
            digest: d,
        }
    }
}

pub const LABEL_ROLE: &str = "deerflow.role";
pub const LABEL_SANDBOX_ID: &str = "deerflow.sandbox_id";
pub const LABEL_NETWORK_MODE: &str = "deerflow.network_mode";
pub const LABEL_STACK: &str = "deerflow.stack";

/// `deerflow.network_mode`: `open`, or one of deer-flow's restricted modes. lifecycle's
/// restricted mode is written `allowlist`; any value but `open` (or none) reads as restricted.
pub const MODE_OPEN: &str = "open";
pub const MODE_ALLOWLIST: &str = "allowlist";
pub const MODE_ISOLATED: &str = "isolated";

/// Whether a `deerflow.network_mode` label value (or its absence) means a restricted sandbox.
pub fn label_is_restricted(value: Option<&str>) -> bool {
    value != Some(MODE_OPEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> Prefix {
        Prefix::parse("deer-flow-").expect("valid")
    }

    #[test]
    fn deer_flow_vectors() {
        let id = sandbox_id("user-1", "thread-1");
        assert_eq!(id, "7d9ac0ff9b98cd06");
        assert_eq!(digest(&p(), &id), "a39cbf0e8f2eeca4");
        let n = Names::new(&p(), &id);
        assert_eq!(n.sandbox, "deer-flow-sandbox-7d9ac0ff9b98cd06");
        assert_eq!(n.sidecar, "deer-flow-netproxy-a39cbf0e8f2eeca4");
        assert_eq!(n.network, "deer-flow-sandbox-net-a39cbf0e8f2eeca4");
        assert_eq!(n.egress, "deer-flow-sandbox-egress-a39cbf0e8f2eeca4");
    }

    #[test]
    fn sixteen_hex_where_eight_collided() {
        let a = sandbox_id("user-9721", "thread-9721");
        let b = sandbox_id("user-94361", "thread-94361");
        assert_eq!(a[..8], b[..8]);
        assert_ne!(a, b);
    }

    #[test]
    fn id_rule_table() {
        let long = |n: usize| "a".repeat(n);
        let cases: Vec<(String, String, Result<(), IdRuleError>)> = vec![
            ("user-1".into(), "thread-1".into(), Ok(())),
            ("U_9-x".into(), "T_0-y".into(), Ok(())),
            (long(128), long(64), Ok(())),
            (
                long(129),
                "t".into(),
                Err(IdRuleError::TooLong {
                    what: "user ID",
                    max: 128,
                    len: 129,
                }),
            ),
            (
                "u".into(),
                long(65),
                Err(IdRuleError::TooLong {
                    what: "thread ID",
                    max: 64,
                    len: 65,
                }),
            ),
            ("".into(), "t".into(), Err(IdRuleError::Empty("user ID"))),
            ("u".into(), "".into(), Err(IdRuleError::Empty("thread ID"))),
            (
                "u".into(),
                "a\nb".into(),
                Err(IdRuleError::Newline("thread ID")),
            ),
            // The tenant merge: ("org1:bob", "t1") and ("org1", "bob:t1") hash the same input.
            (
                "org1:bob".into(),
                "t1".into(),
                Err(IdRuleError::Charset {
                    what: "user ID",
                    found: ':',
                }),
            ),
            (
                "org1".into(),
                "bob:t1".into(),
                Err(IdRuleError::Charset {
                    what: "thread ID",
                    found: ':',
                }),
            ),
            (
                "u".into(),
                "../t".into(),
                Err(IdRuleError::Charset {
                    what: "thread ID",
                    found: '.',
                }),
            ),
            (
                "u s".into(),
                "t".into(),
                Err(IdRuleError::Charset {
                    what: "user ID",
                    found: ' ',
                }),
            ),
            (
                "u".into(),
                "t/x".into(),
                Err(IdRuleError::Charset {
                    what: "thread ID",
                    found: '/',
                }),
            ),
            (
                "ü".into(),
                "t".into(),
                Err(IdRuleError::Charset {
                    what: "user ID",
                    found: 'ü',
                }),
            ),
        ];
        for (user, thread, want) in cases {
            assert_eq!(check_ids(&user, &thread), want, "{user:?} {thread:?}");
        }
        // The two spellings the rule exists for really do hash alike.
        assert_eq!(sandbox_id("org1:bob", "t1"), sandbox_id("org1", "bob:t1"));
    }

    #[test]
    fn prefix_rule_table() {
        // Ok: the prefix as given; Err: the rule that refuses it.
        let shape: Result<(), fn(String) -> PrefixError> = Err(PrefixError::Shape);
        let cases = [
            ("deer-flow-", Ok(())),
            ("df_", Ok(())),
            ("a.", Ok(())),
            ("abc-", Ok(())),
            ("-x-", shape),
            ("deer-flow", shape),
            ("", shape),
            ("-", shape),
            ("deer flow-", shape),
            ("deer/flow-", shape),
            ("déer-", shape),
            ("DEER-", Ok(())),
            ("abc12", shape),
        ];
        for (raw, want) in cases {
            assert_eq!(
                Prefix::parse(raw).map(|p| p.as_str().to_owned()),
                want.map(|()| raw.to_owned())
                    .map_err(|why| why(raw.to_owned())),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn families_table() {
        use Kind::*;
        // (name, kind, open, restricted)
        let cases = [
            ("deer-flow-sandbox-abc", Container, true, true),
            ("deer-flow-sandbox-", Container, false, false),
            ("deer-flow-netproxy-abc", Container, false, true),
            ("deer-flow-other", Container, false, false),
            ("Deer-flow-sandbox-abc", Container, false, false),
            ("x-deer-flow-sandbox-abc", Container, false, false),
            ("deer-flow-net-abc", Network, false, true),
            ("deer-flow-sandbox-net-abc", Network, false, true),
            ("deer-flow-sandbox-egress-abc", Network, false, true),
            ("deer-flow-sandbox-abc", Network, false, false),
            ("deer-flow-sandbox-net-", Network, false, false),
            ("bridge", Network, false, false),
        ];
        for (name, kind, open, restricted) in cases {
            assert_eq!(may_change(&p(), kind, name, false), open, "open {name}");
            assert_eq!(
                may_change(&p(), kind, name, true),
                restricted,
                "restricted {name}"
            );
        }
    }

    /// What the proxy's refusals and logs print for a prefix and a kind.
    #[test]
    fn prefixes_and_kinds_print_as_written() {
        assert_eq!(p().to_string(), "deer-flow-");
        assert_eq!(format!("{}", p()), p().as_str());
        assert_eq!(Kind::Container.as_str(), "container");
        assert_eq!(Kind::Network.as_str(), "network");
    }

    #[test]
    fn network_mode_labels() {
        assert!(!label_is_restricted(Some("open")));
        assert!(label_is_restricted(Some("allowlist")));
        assert!(label_is_restricted(Some("isolated")));
        assert!(label_is_restricted(Some("restricted")));
        assert!(label_is_restricted(None));
    }
}
