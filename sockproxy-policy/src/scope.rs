//! The stack's name scopes (docs/architecture.md, "Names"): which container and network names a stack may see and
//! which it may change, from the family table in `stackmodel`. Pure string logic.

pub use stackmodel::{Kind, Prefix, PrefixError};

/// The label every created container carries.
pub const STACK_LABEL: &str = "sockproxy.stack";

/// Networks every engine has; a stack may read them, never change them.
pub const PREDEFINED_NETWORKS: [&str; 3] = ["bridge", "host", "none"];

/// What a request wants to do to an object: look at it, or change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Change,
}

/// A stack's scope: its prefix, whether restricted-mode objects are its to change, and (under
/// `--require-stack-label`) the `sockproxy.stack` label its objects must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    prefix: Prefix,
    restricted: bool,
    info: bool,
    required_label: Option<String>,
}

impl Scope {
    pub fn new(prefix: Prefix, restricted: bool) -> Self {
        Self {
            prefix,
            restricted,
            info: true,
            required_label: None,
        }
    }

    /// `--require-stack-label`: an object is the stack's only if its `sockproxy.stack` label
    /// is `stack`, for lists and events as for inspects (`pinning`).
    pub fn with_required_label(mut self, stack: Option<&str>) -> Self {
        self.required_label = stack.map(str::to_owned);
        self
    }

    /// Whether an object named `name` whose `sockproxy.stack` label is `label` passes the
    /// label rule: always without `--require-stack-label`; under it, only with the stack's own
    /// label. The engine's predefined networks carry none and stay readable by every stack.
    pub fn label_allows(&self, kind: Kind, name: &str, label: Option<&str>) -> bool {
        match &self.required_label {
            None => true,
            Some(_) if kind == Kind::Network && PREDEFINED_NETWORKS.contains(&name) => true,
            Some(stack) => label == Some(stack.as_str()),
        }
    }

    pub fn requires_label(&self) -> bool {
        self.required_label.is_some()
    }

    /// `--info deny`: refuse `GET /info` instead of answering it for the stack.
    pub fn with_info(mut self, for_stack: bool) -> Self {
        self.info = for_stack;
        self
    }

    pub fn info_for_stack(&self) -> bool {
        self.info
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
        match (access, kind) {
            // The engine's predefined networks are readable (their containers are filtered).
            (Access::Read, Kind::Network) if PREDEFINED_NETWORKS.contains(&name) => true,
            (Access::Read, _) => self.visible(name),
            (Access::Change, _) => {
                stackmodel::may_change(&self.prefix, kind, name, self.restricted)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under `--require-stack-label` only the stack's label passes, except the engine's
    /// predefined networks (which carry none), and only as networks.
    #[test]
    fn the_label_rule_table() {
        let p = Prefix::parse("deer-flow-").expect("valid");
        let loose = Scope::new(p.clone(), false);
        let strict = Scope::new(p, false).with_required_label(Some("atlas"));
        let cases = [
            (Kind::Network, "bridge", None, true),
            (Kind::Network, "host", Some("other"), true),
            (Kind::Container, "bridge", None, false),
            (Kind::Network, "deer-flow-net-1", None, false),
            (Kind::Network, "deer-flow-net-1", Some("other"), false),
            (Kind::Network, "deer-flow-net-1", Some("atlas"), true),
            (Kind::Container, "deer-flow-sandbox-1", Some("atlas"), true),
            (Kind::Container, "deer-flow-sandbox-1", Some("Atlas"), false),
        ];
        for (kind, name, label, want) in cases {
            assert_eq!(
                strict.label_allows(kind, name, label),
                want,
                "{kind:?} {name} {label:?}"
            );
            assert!(
                loose.label_allows(kind, name, label),
                "no rule: {kind:?} {name}"
            );
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
            ("bridge", Network, Read, true, true),
            ("bridge", Network, Change, false, false),
            ("bridge", Container, Read, false, false),
            ("other-net", Network, Read, false, false),
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
