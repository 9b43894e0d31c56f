//! Pure decisions (docs/architecture.md, "lifecycle"): what a create does first when the sandbox has quarantine records
//! ("retire before create"), whether a found container is reused or replaced, whether a destroy
//! needs the restricted cleanup, whether an absent sandbox's teardown must be strict, and
//! whether an engine error means "no such object" for exactly the name that was asked about, or
//! a removal the engine is already doing.

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

/// The restricted cleanup of a present container runs unless its label says `open`
/// (`allowlist`, `isolated`, an old `restricted`, or no label at all are restricted).
pub fn destroy_needs_restricted_cleanup(network_mode_label: Option<&str>) -> bool {
    stackmodel::label_is_restricted(network_mode_label)
}

/// Whether a network found under one of a restricted sandbox's names (its create answered 409)
/// may be used as though this create had made it: a `bridge` network, internal exactly when the
/// one lifecycle makes is. Anything else is refused with the reason (fail closed): a
/// non-internal network under the internal network's name would give the sandbox a default
/// route around its proxy. Labels are not asked for: anyone who can make the network can write
/// them, so they prove nothing, and a network another tool made for the same sandbox (a
/// deer-flow gateway, an operator placing a neighbour on the egress network) is as good as ours
/// when it has those two properties.
pub fn existing_network(driver: &str, internal: bool, want_internal: bool) -> Result<(), String> {
    if driver != "bridge" {
        return Err(format!("its driver is {driver:?}, not \"bridge\""));
    }
    if internal != want_internal {
        return Err(match want_internal {
            true => "it is not internal (its members would have a default route)".to_owned(),
            false => "it is internal (the sidecar could not reach anything)".to_owned(),
        });
    }
    Ok(())
}

/// What a create does first, by the sandbox's quarantine records and the container (if any)
/// under its name ("retire before create").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeforeCreate {
    /// No record: create straight away; the engine is asked nothing about old records.
    Create,
    /// Records, and the name is confirmed absent: absent teardown, retire, then create.
    TeardownThenCreate,
    /// Records, and a quarantined generation is still there: destroy that container (by its
    /// ID), run the absent teardown, retire, then create, all in this call.
    DestroyThenCreate,
    /// Records, but the name holds a generation that is not quarantined: the recorded ones
    /// are proven gone (names are unique), so their records retire without any cleanup (which
    /// would hit the live generation's sidecar), and the found container goes to discovery.
    RetireStaleThenDiscover,
}

/// `present`: `None` when the name is confirmed absent, else whether the ledger fences the
/// container found (its generation is recorded, or an `unknown` generation is).
pub fn before_create(quarantined: bool, present: Option<bool>) -> BeforeCreate {
    match (quarantined, present) {
        (false, _) => BeforeCreate::Create,
        (true, None) => BeforeCreate::TeardownThenCreate,
        (true, Some(true)) => BeforeCreate::DestroyThenCreate,
        (true, Some(false)) => BeforeCreate::RetireStaleThenDiscover,
    }
}

/// Whether a container found under the sandbox's name is handed out or replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discovery {
    Reuse,
    /// Exited, dead or unhealthy: destroy it (by ID), then create a fresh one.
    Replace,
}

/// Only a running container whose health check (if it has one) does not say `unhealthy` is
/// reused; `starting` is given the benefit of the doubt, as the readiness wait would be.
pub fn discovery(running: bool, health: Option<&str>) -> Discovery {
    if running && health != Some("unhealthy") {
        Discovery::Reuse
    } else {
        Discovery::Replace
    }
}

/// dockerd's 409 "removal of container X is already in progress" (an `--rm` container that was
/// just stopped removes itself): not a failure, the container is going; wait for its absence.
pub fn is_removal_in_progress(status: u16, message: &str) -> bool {
    status == 409 && message.contains("already in progress")
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

    #[test]
    fn modes_print_as_the_cli_spells_them() {
        assert_eq!(Mode::Open.as_str(), "open");
        assert_eq!(Mode::Restricted.as_str(), "restricted");
    }

    const SIDECAR: &str = "deer-flow-netproxy-c1a44b2434411cc2";

    fn names(v: &[&str]) -> Listing {
        Listing::Names(v.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn an_existing_network_is_used_only_if_it_is_what_lifecycle_makes() {
        // (driver, internal, wanted internal, accepted or why not)
        let cases = [
            ("bridge", true, true, Ok(())),
            ("bridge", false, false, Ok(())),
            // The finding: a non-internal network under the internal network's name.
            (
                "bridge",
                false,
                true,
                Err("it is not internal (its members would have a default route)"),
            ),
            (
                "bridge",
                true,
                false,
                Err("it is internal (the sidecar could not reach anything)"),
            ),
            (
                "macvlan",
                true,
                true,
                Err("its driver is \"macvlan\", not \"bridge\""),
            ),
            ("", true, true, Err("its driver is \"\", not \"bridge\"")),
        ];
        for (driver, internal, want_internal, want) in cases {
            let got = existing_network(driver, internal, want_internal);
            assert_eq!(
                got,
                want.map_err(str::to_owned),
                "{driver} {internal} {want_internal}"
            );
        }
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
    fn before_create_table() {
        use BeforeCreate::*;
        let cases = [
            (false, None, Create),
            (false, Some(true), Create),
            (false, Some(false), Create),
            (true, None, TeardownThenCreate),
            (true, Some(true), DestroyThenCreate),
            (true, Some(false), RetireStaleThenDiscover),
        ];
        for (quarantined, present, want) in cases {
            assert_eq!(
                before_create(quarantined, present),
                want,
                "{quarantined} {present:?}"
            );
        }
    }

    #[test]
    fn discovery_table() {
        use Discovery::*;
        let cases = [
            (true, None, Reuse),
            (true, Some("healthy"), Reuse),
            (true, Some("starting"), Reuse),
            (true, Some("none"), Reuse),
            (true, Some("unhealthy"), Replace),
            (false, None, Replace),
            (false, Some("healthy"), Replace),
        ];
        for (running, health, want) in cases {
            assert_eq!(discovery(running, health), want, "{running} {health:?}");
        }
    }

    #[test]
    fn removal_in_progress_table() {
        let msg = "removal of container 0123abcd is already in progress";
        assert!(is_removal_in_progress(409, msg));
        assert!(!is_removal_in_progress(500, msg));
        assert!(!is_removal_in_progress(
            409,
            "Conflict. The container name is already in use"
        ));
    }

    #[test]
    fn destroy_cleanup_table() {
        assert!(destroy_needs_restricted_cleanup(Some("allowlist")));
        assert!(destroy_needs_restricted_cleanup(Some("isolated")));
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
