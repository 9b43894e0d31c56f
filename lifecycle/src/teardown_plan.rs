//! What tearing down a present sandbox container does, decided without I/O (docs/architecture.md, "lifecycle"): which
//! container to stop and remove (by the ID that was inspected, never by its name), whether the
//! restricted cleanup follows, which generation's quarantine record a failure writes, and which
//! generation's record and port a success retires. `teardown` runs the plan step by step and
//! does nothing the plan does not name, so these table tests pin the rules.

use crate::decide;
use crate::ledger::UNKNOWN_GENERATION;

/// One engine step of a teardown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Stop, remove and confirm gone: container `id`, the one named `name` when inspected.
    StopRemove { id: String, name: String },
    /// The sidecar (by the ID an inspect of its exact name gives) and both networks.
    RestrictedCleanup,
}

/// The plan for one present container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresentPlan {
    /// In order; the first failure stops the rest.
    pub steps: Vec<Step>,
    /// Refused before any step (nothing to pin a stop to): why.
    pub refuse: Option<&'static str>,
    /// The generation whose quarantine record a failure (or a refusal) writes.
    pub record_on_failure: String,
    /// The generation whose port and record a success releases and retires.
    pub retire_on_success: Option<String>,
}

/// The plan for container `id` (as inspected, possibly empty) found under `name`, whose
/// `deerflow.network_mode` label is `network_mode`.
pub fn present(id: &str, name: &str, network_mode: Option<&str>) -> PresentPlan {
    if id.is_empty() {
        // Without an ID there is nothing to pin a stop to: a name could be a replacement.
        return PresentPlan {
            steps: Vec::new(),
            refuse: Some("the container has no ID; nothing stopped"),
            record_on_failure: UNKNOWN_GENERATION.to_owned(),
            retire_on_success: None,
        };
    }
    let mut steps = vec![Step::StopRemove {
        id: id.to_owned(),
        name: name.to_owned(),
    }];
    if decide::destroy_needs_restricted_cleanup(network_mode) {
        steps.push(Step::RestrictedCleanup);
    }
    PresentPlan {
        steps,
        refuse: None,
        record_on_failure: id.to_owned(),
        retire_on_success: Some(id.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const NAME: &str = "deer-flow-sandbox-7d9ac0ff9b98cd06";

    fn stop(id: &str) -> Step {
        Step::StopRemove {
            id: id.to_owned(),
            name: NAME.to_owned(),
        }
    }

    #[test]
    fn present_plans_table() {
        let cases = [
            (Some("open"), vec![stop(ID)]),
            (Some("allowlist"), vec![stop(ID), Step::RestrictedCleanup]),
            (Some("isolated"), vec![stop(ID), Step::RestrictedCleanup]),
            (Some(""), vec![stop(ID), Step::RestrictedCleanup]),
            // Unreadable label: the cleanup runs (fail closed).
            (None, vec![stop(ID), Step::RestrictedCleanup]),
        ];
        for (label, steps) in cases {
            let p = present(ID, NAME, label);
            assert_eq!(p.steps, steps, "{label:?}");
            assert_eq!(p.refuse, None);
            // By the inspected ID, never the name; a failure records this very generation,
            // and a success retires exactly it.
            assert!(
                p.steps
                    .iter()
                    .all(|s| !matches!(s, Step::StopRemove { id, .. } if id == NAME)),
                "{label:?}"
            );
            assert_eq!(p.record_on_failure, ID, "{label:?}");
            assert_eq!(p.retire_on_success.as_deref(), Some(ID), "{label:?}");
        }
    }

    #[test]
    fn a_container_without_an_id_is_recorded_unknown_and_nothing_is_stopped() {
        let p = present("", NAME, Some("open"));
        assert_eq!(p.steps, Vec::<Step>::new());
        assert_eq!(p.refuse, Some("the container has no ID; nothing stopped"));
        assert_eq!(p.record_on_failure, "unknown");
        assert_eq!(p.retire_on_success, None);
    }
}
