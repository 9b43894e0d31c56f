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

/// The bridge option that gives the host no IPv4 address on a network: a restricted sandbox's
/// internal network carries it, so the sandbox reaches no host service through the bridge's
/// address (or any other host address), and the host does not reach the sandbox either.
pub const INHIBIT_IPV4: &str = "com.docker.network.bridge.inhibit_ipv4";

/// Whether a network's options give the host no IPv4 address on it: `INHIBIT_IPV4` read as the
/// bridge driver reads it (Go's `strconv.ParseBool`; a value it cannot parse is false).
pub fn host_less(options: &std::collections::HashMap<String, String>) -> bool {
    matches!(
        options.get(INHIBIT_IPV4).map(String::as_str),
        Some("1" | "t" | "T" | "TRUE" | "true" | "True")
    )
}

/// Whether a network found under one of a restricted sandbox's names (its create answered 409)
/// may be used as though this create had made it: a `bridge` network, internal exactly when the
/// one lifecycle makes is, and an internal one with no host address on it (`host_less`).
/// Anything else is refused with the reason (fail closed): a non-internal network under the
/// internal network's name would give the sandbox a default route around its proxy, and one
/// where the host holds an address would let it reach the host's services. Labels are not asked
/// for: anyone who can make the network can write them, so they prove nothing, and a network
/// another tool made for the same sandbox (a deer-flow gateway, an operator placing a neighbour
/// on the egress network) is as good as ours when it has those properties.
pub fn existing_network(
    driver: &str,
    internal: bool,
    host_less: bool,
    want_internal: bool,
) -> Result<(), String> {
    if driver != "bridge" {
        return Err(format!("its driver is {driver:?}, not \"bridge\""));
    }
    if internal != want_internal {
        return Err(match want_internal {
            true => "it is not internal (its members would have a default route)".to_owned(),
            false => "it is internal (the sidecar could not reach anything)".to_owned(),
        });
    }
    if want_internal && !host_less {
        return Err(format!(
            "it gives the host an address ({INHIBIT_IPV4} is not true: its members would reach the host's services)"
        ));
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

/// Only a running container whose health check (if it has one) does not say `unhealthy`, and
/// that the host has a way in to (`way_in`: its published port, or in restricted mode its
/// sidecar's relay port), is reused; `starting` is given the benefit of the doubt, as the
/// readiness wait would be. A restricted sandbox made before the relay (its sidecar publishes
/// nothing) sits on an internal network where the host holds an address: it is replaced.
pub fn discovery(running: bool, health: Option<&str>, way_in: bool) -> Discovery {
    if running && health != Some("unhealthy") && way_in {
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
        // (driver, internal, host-less, wanted internal, accepted or why not)
        let cases = [
            ("bridge", true, true, true, Ok(())),
            ("bridge", false, false, false, Ok(())),
            // The egress network is not host-less: its way out is through the host.
            ("bridge", false, true, false, Ok(())),
            // The finding: a non-internal network under the internal network's name.
            (
                "bridge",
                false,
                true,
                true,
                Err("it is not internal (its members would have a default route)".to_owned()),
            ),
            // Internal, but the host holds an address on it (made before issue 49, or by
            // another client): its sandbox would reach the host's services.
            (
                "bridge",
                true,
                false,
                true,
                Err(format!("it gives the host an address ({INHIBIT_IPV4} is not true: its members would reach the host's services)")),
            ),
            (
                "bridge",
                true,
                true,
                false,
                Err("it is internal (the sidecar could not reach anything)".to_owned()),
            ),
            (
                "macvlan",
                true,
                true,
                true,
                Err("its driver is \"macvlan\", not \"bridge\"".to_owned()),
            ),
            (
                "",
                true,
                true,
                true,
                Err("its driver is \"\", not \"bridge\"".to_owned()),
            ),
        ];
        for (driver, internal, host_less, want_internal, want) in cases {
            let got = existing_network(driver, internal, host_less, want_internal);
            assert_eq!(got, want, "{driver} {internal} {host_less} {want_internal}");
        }
    }

    /// The option as the bridge driver reads it (Go's `ParseBool`): only its true spellings.
    #[test]
    fn host_less_reads_the_option_as_the_driver_does() {
        use std::collections::HashMap;
        for (value, want) in [
            (Some("true"), true),
            (Some("1"), true),
            (Some("t"), true),
            (Some("TRUE"), true),
            (Some("True"), true),
            (Some("false"), false),
            (Some("yes"), false),
            (Some(""), false),
            (Some(" true"), false),
            (None, false),
        ] {
            let options: HashMap<String, String> = value
                .map(|v| HashMap::from([(INHIBIT_IPV4.to_owned(), v.to_owned())]))
                .unwrap_or_default();
            assert_eq!(host_less(&options), want, "{value:?}");
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
            (true, None, true, Reuse),
            (true, Some("healthy"), true, Reuse),
            (true, Some("starting"), true, Reuse),
            (true, Some("none"), true, Reuse),
            (true, Some("unhealthy"), true, Replace),
            (false, None, true, Replace),
            (false, Some("healthy"), true, Replace),
            // Running and healthy, but nothing published to reach it by.
            (true, None, false, Replace),
            (true, Some("healthy"), false, Replace),
        ];
        for (running, health, way_in, want) in cases {
            assert_eq!(
                discovery(running, health, way_in),
                want,
                "{running} {health:?} {way_in}"
            );
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
