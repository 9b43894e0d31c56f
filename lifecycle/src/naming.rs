//! Names, IDs and labels (docs/architecture.md, "Names") come from `stackmodel`, the one place they are defined (and
//! shared with sockproxy); this module only adds what the command line needs: rejecting IDs
//! that cannot be a user's or thread's, and checking a sandbox ID typed by an operator.

pub use stackmodel::{
    digest, k, label_is_restricted, IdRuleError, Names, Prefix, PrefixError, LABEL_NETWORK_MODE,
    LABEL_ROLE, LABEL_SANDBOX_ID, LABEL_STACK, MODE_ALLOWLIST, MODE_OPEN,
};

/// The label lifecycle adds to a sandbox: the full SHA-256 hex of `"{user_id}:{thread_id}"`.
/// The sandbox ID keeps only 16 hex of it, so two (user, thread) pairs can share an ID; this
/// label tells them apart, and a provider hands a sandbox only to the pair it names.
pub const LABEL_SCOPE: &str = "lifecycle.scope";

/// The label the provider puts on a sandbox made through deer-flow's provisioner API, and its
/// value: such a sandbox is deer-flow's (never leased, reaped or evicted by the provider).
pub const LABEL_ORIGIN: &str = "lifecycle.origin";
pub const ORIGIN_PROVISIONER: &str = "provisioner";

/// The value of `LABEL_SCOPE` for a user's thread.
pub fn scope_digest(user_id: &str, thread_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("{user_id}:{thread_id}").as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The value of `LABEL_SCOPE` for a sandbox whose ID is not derived from a (user, thread) (the
/// provisioner API's random IDs): the full SHA-256 hex of the user ID alone. A user ID never
/// holds ':' and a (user, thread)'s preimage always does, so the two kinds never collide.
pub fn user_scope(user_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(user_id.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{0}")]
    Rule(#[from] IdRuleError),
    #[error("{0:?} is not a sandbox ID (16 lowercase hex characters)")]
    NotSandboxId(String),
    #[error("{0:?} is not a sandbox ID of this stack (1 to 64 of a-z, 0-9, '_' and '-')")]
    NotStackSandboxId(String),
}

/// A sandbox ID the stack may hold: a derived one, or one deer-flow's provisioner API named
/// (`[a-z0-9_-]{1,64}`, every derived ID among them). The provider's teardowns take these; the
/// CLI's commands keep to `parse_sandbox_id`.
pub fn parse_stack_sandbox_id(raw: &str) -> Result<String, IdError> {
    let ok = !raw.is_empty()
        && raw.len() <= 64
        && raw
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'));
    if ok {
        Ok(raw.to_owned())
    } else {
        Err(IdError::NotStackSandboxId(raw.to_owned()))
    }
}

/// deer-flow's sandbox ID of a thread (`stackmodel::sandbox_id`), for input that can be a
/// user's and a thread's: both must pass `stackmodel::check_ids` before anything is derived.
pub fn sandbox_id(user_id: &str, thread_id: &str) -> Result<String, IdError> {
    stackmodel::check_ids(user_id, thread_id)?;
    Ok(stackmodel::sandbox_id(user_id, thread_id))
}

/// Checks a sandbox ID given on the command line.
pub fn parse_sandbox_id(raw: &str) -> Result<String, IdError> {
    if raw.len() == 16
        && raw
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(raw.to_owned())
    } else {
        Err(IdError::NotSandboxId(raw.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_are_deer_flows() {
        // deer-flow upstream's vectors: `derive_sandbox_scope_token("user-1", "thread-1")` and
        // the digest its container names use with `container_prefix = "deer-flow-sandbox"`.
        let p = Prefix::parse("deer-flow-").expect("valid");
        let id = sandbox_id("user-1", "thread-1").expect("ok");
        assert_eq!(id, "7d9ac0ff9b98cd06");
        assert_eq!(digest(&p, &id), "a39cbf0e8f2eeca4");
        let n = Names::new(&p, &id);
        assert_eq!(n.sandbox, "deer-flow-sandbox-7d9ac0ff9b98cd06");
        assert_eq!(n.sidecar, "deer-flow-netproxy-a39cbf0e8f2eeca4");
        assert_eq!(n.network, "deer-flow-sandbox-net-a39cbf0e8f2eeca4");
        assert_eq!(n.egress, "deer-flow-sandbox-egress-a39cbf0e8f2eeca4");
        // The prefix stays configurable: only the prefix part of the names changes... and the
        // digest, which hashes the container prefix.
        let q = Prefix::parse("other_").expect("valid");
        let m = Names::new(&q, &id);
        assert_eq!(m.sandbox, "other_sandbox-7d9ac0ff9b98cd06");
        assert_eq!(m.digest, k(&format!("other_sandbox:{id}")));
        assert_eq!(m.egress, format!("other_sandbox-egress-{}", m.digest));
    }

    /// The scope label's value is part of what the outside world sees (a provider hands a
    /// sandbox only to the (user, thread) it names, across upgrades and processes): pinned as a
    /// literal, the full SHA-256 hex of `"user-1:thread-1"`.
    #[test]
    fn the_scope_label_is_a_known_answer() {
        assert_eq!(
            scope_digest("user-1", "thread-1"),
            "7d9ac0ff9b98cd06d30003ec938af5799f4541f9fdfa284a34d34a71c76b12cd"
        );
        assert_eq!(LABEL_SCOPE, "lifecycle.scope");
        // The sandbox ID is the label's first 16 hex, as deer-flow derives it.
        assert_eq!(
            sandbox_id("user-1", "thread-1").expect("ok"),
            "7d9ac0ff9b98cd06"
        );
    }

    #[test]
    fn ids_are_16_hex_and_do_not_collide_where_8_did() {
        let a = sandbox_id("user-9721", "thread-9721").expect("ok");
        let b = sandbox_id("user-94361", "thread-94361").expect("ok");
        assert_eq!(a[..8], b[..8]);
        assert_ne!(a, b);
        assert_eq!(
            sandbox_id("", "t"),
            Err(IdError::Rule(IdRuleError::Empty("user ID")))
        );
        assert_eq!(
            sandbox_id("u", "a\nb"),
            Err(IdError::Rule(IdRuleError::Newline("thread ID")))
        );
        assert_eq!(parse_sandbox_id(&a), Ok(a.clone()));
        for bad in [
            "xyz".to_owned(),
            a.to_uppercase(),
            format!("{a}0"),
            a[..15].to_owned(),
        ] {
            assert_eq!(
                parse_sandbox_id(&bad).map_err(|e| e.to_string()),
                Err(format!(
                    "{bad:?} is not a sandbox ID (16 lowercase hex characters)"
                ))
            );
        }
        // A stack's IDs (the provisioner API's too) are 1-64 of [a-z0-9_-].
        assert_eq!(
            parse_stack_sandbox_id("my-box_1"),
            Ok("my-box_1".to_owned())
        );
        for bad in ["", "Upper", "a/b", "a.b", &"a".repeat(65)] {
            assert_eq!(
                parse_stack_sandbox_id(bad),
                Err(IdError::NotStackSandboxId(bad.to_owned())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn restricted_is_written_allowlist_and_anything_but_open_reads_restricted() {
        assert_eq!(MODE_ALLOWLIST, "allowlist");
        for (v, restricted) in [
            (Some("open"), false),
            (Some("allowlist"), true),
            (Some("isolated"), true),
            (Some("restricted"), true),
            (Some(""), true),
            (None, true),
        ] {
            assert_eq!(label_is_restricted(v), restricted, "{v:?}");
        }
    }
}
