//! Pure teardown decisions (DESIGN §4): whether a destroy needs the restricted cleanup, whether
//! an absent sandbox's teardown must be strict, and whether an engine error means "no such
//! object" for exactly the name that was asked about.

/// The process's network mode, from its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Open,
    Restricted,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Restricted => "restricted",
        }
    }
}

/// What a listing of the sidecar's name gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// The `Names` entries of every listed container.
    Names(Vec<String>),
    /// Socket missing or refused, timeout, non-2xx, unparsable body.
    Failed(String),
}

/// How an absent sandbox's restricted resources are handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbsentPlan {
    /// Stop and remove the sidecar, remove the sandbox's network; "no such" counts as done.
    Strict,
    /// Nothing restricted can exist: skip straight to releasing the port and the record.
    Skip,
}

/// Only an open-mode process asks the engine before deciding; a restricted one is always strict.
pub fn needs_listing(mode: Mode) -> bool {
    mode == Mode::Open
}

/// Strict unless an open-mode process saw a listing in which the sidecar's exact name is absent.
pub fn absent_plan(mode: Mode, listing: Option<&Listing>, sidecar: &str) -> AbsentPlan {
    match (mode, listing) {
        (Mode::Restricted, _) | (Mode::Open, None | Some(Listing::Failed(_))) => AbsentPlan::Strict,
        (Mode::Open, Some(Listing::Names(names))) => {
            let listed = names
                .iter()
                .any(|n| n == sidecar || n.strip_prefix('/') == Some(sidecar));
            if listed {
                AbsentPlan::Strict
            } else {
                AbsentPlan::Skip
            }
        }
    }
}

/// The restricted cleanup of a present container runs unless its label says `open`.
pub fn destroy_needs_restricted_cleanup(network_mode_label: Option<&str>) -> bool {
    network_mode_label != Some("open")
}

/// What an absent object's error looks like, for exactly this name (both the 20.10 and the
/// lower-cased wordings). A substring match would let `…-x2`'s absence answer for `…-x`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    Container,
    Network,
}

pub fn is_no_such(object: Object, name: &str, status: u16, message: &str) -> bool {
    if status != 404 {
        return false;
    }
    let m = message.trim();
    match object {
        Object::Container => m.eq_ignore_ascii_case(&format!("No such container: {name}")),
        Object::Network => {
            m == format!("network {name} not found")
                || m.eq_ignore_ascii_case(&format!("No such network: {name}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIDECAR: &str = "deer-flow-netproxy-c1a44b2434411cc2";

    fn names(v: &[&str]) -> Listing {
        Listing::Names(v.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn absent_plan_table() {
        use AbsentPlan::*;
        let lookalike_long = format!("{SIDECAR}0");
        let lookalike_prefixed = format!("x{SIDECAR}");
        let slashed = format!("/{SIDECAR}");
        let cases: Vec<(Mode, Option<Listing>, AbsentPlan)> = vec![
            (Mode::Restricted, None, Strict),
            (Mode::Restricted, Some(names(&[])), Strict),
            (Mode::Open, Some(names(&[])), Skip),
            (Mode::Open, Some(names(&[SIDECAR])), Strict),
            (Mode::Open, Some(names(&[&slashed])), Strict),
            (
                Mode::Open,
                Some(names(&["/other", &slashed, "/more"])),
                Strict,
            ),
            (Mode::Open, Some(names(&[&lookalike_long])), Skip),
            (
                Mode::Open,
                Some(names(&[&format!("/{lookalike_long}")])),
                Skip,
            ),
            (Mode::Open, Some(names(&[&lookalike_prefixed])), Skip),
            (Mode::Open, Some(names(&[&format!("//{SIDECAR}")])), Skip),
            (Mode::Open, Some(Listing::Failed("refused".into())), Strict),
            (Mode::Open, None, Strict),
        ];
        for (mode, listing, want) in cases {
            assert_eq!(
                absent_plan(mode, listing.as_ref(), SIDECAR),
                want,
                "{mode:?} {listing:?}"
            );
        }
        assert!(needs_listing(Mode::Open));
        assert!(!needs_listing(Mode::Restricted));
    }

    #[test]
    fn destroy_cleanup_table() {
        assert!(destroy_needs_restricted_cleanup(Some("restricted")));
        assert!(destroy_needs_restricted_cleanup(None));
        assert!(destroy_needs_restricted_cleanup(Some("")));
        assert!(!destroy_needs_restricted_cleanup(Some("open")));
    }

    #[test]
    fn no_such_is_exact() {
        let n = "deer-flow-netproxy-1";
        assert!(is_no_such(
            Object::Container,
            n,
            404,
            "No such container: deer-flow-netproxy-1"
        ));
        assert!(is_no_such(
            Object::Container,
            n,
            404,
            "no such container: deer-flow-netproxy-1"
        ));
        assert!(!is_no_such(
            Object::Container,
            n,
            404,
            "No such container: deer-flow-netproxy-10"
        ));
        assert!(!is_no_such(
            Object::Container,
            n,
            403,
            "No such container: deer-flow-netproxy-1"
        ));
        assert!(!is_no_such(
            Object::Container,
            n,
            404,
            "sockproxy: containers.stop: deer-flow-netproxy-1 is not one of this stack's sandboxes"
        ));
        assert!(is_no_such(
            Object::Network,
            "deer-flow-net-1",
            404,
            "network deer-flow-net-1 not found"
        ));
        assert!(!is_no_such(
            Object::Network,
            "deer-flow-net-1",
            404,
            "network deer-flow-net-12 not found"
        ));
    }
}
