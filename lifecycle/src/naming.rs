//! Names, IDs and labels (DESIGN §1): the sandbox ID of a (user, thread) pair, the names of a
//! sandbox's container, sidecar and networks under the stack prefix, and the labels lifecycle
//! puts on what it creates.

use sha2::{Digest, Sha256};

pub const LABEL_ROLE: &str = "deerflow.role";
pub const LABEL_SANDBOX_ID: &str = "deerflow.sandbox_id";
pub const LABEL_NETWORK_MODE: &str = "deerflow.network_mode";
pub const LABEL_STACK: &str = "deerflow.stack";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{0} must not be empty")]
    Empty(&'static str),
    #[error("{0} must not contain a newline")]
    Newline(&'static str),
    #[error("{0:?} is not a sandbox ID (16 lowercase hex characters)")]
    NotSandboxId(String),
}

/// The first 16 hex characters of SHA-256 over `x`.
pub fn k(x: &str) -> String {
    let digest = Sha256::digest(x.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The sandbox ID of a thread: 16 hex of SHA-256 over `user_id + "\n" + thread_id`.
pub fn sandbox_id(user_id: &str, thread_id: &str) -> Result<String, IdError> {
    for (what, v) in [("user ID", user_id), ("thread ID", thread_id)] {
        if v.is_empty() {
            return Err(IdError::Empty(what));
        }
        if v.contains('\n') {
            return Err(IdError::Newline(what));
        }
    }
    Ok(k(&format!("{user_id}\n{thread_id}")))
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

/// The names one sandbox uses under prefix `P`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub sandbox: String,
    pub sidecar: String,
    pub network: String,
    pub egress: String,
}

impl Names {
    pub fn new(prefix: &str, id: &str) -> Self {
        Self {
            sandbox: format!("{prefix}sandbox-{id}"),
            sidecar: format!("{prefix}netproxy-{id}"),
            network: format!("{prefix}net-{id}"),
            egress: format!("{prefix}net-egress"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_16_hex_and_do_not_collide_where_8_did() {
        // The seed's legacy IDs, sha256("user:thread")[:8], collide for this pair.
        let legacy = |u: &str, t: &str| k(&format!("{u}:{t}"))[..8].to_owned();
        assert_eq!(
            legacy("user-9721", "thread-9721"),
            legacy("user-94361", "thread-94361")
        );
        let a = sandbox_id("user-9721", "thread-9721").expect("ok");
        let b = sandbox_id("user-94361", "thread-94361").expect("ok");
        assert_eq!(a.len(), 16);
        assert_ne!(a, b);
        assert_eq!(sandbox_id("", "t"), Err(IdError::Empty("user ID")));
        assert_eq!(sandbox_id("u", "a\nb"), Err(IdError::Newline("thread ID")));
        assert!(parse_sandbox_id(&a).is_ok());
        assert!(parse_sandbox_id("xyz").is_err());
        assert!(parse_sandbox_id(&a.to_uppercase()).is_err());
    }

    #[test]
    fn names_follow_the_design() {
        let n = Names::new("deer-flow-", "c1a44b2434411cc2");
        assert_eq!(n.sandbox, "deer-flow-sandbox-c1a44b2434411cc2");
        assert_eq!(n.sidecar, "deer-flow-netproxy-c1a44b2434411cc2");
        assert_eq!(n.network, "deer-flow-net-c1a44b2434411cc2");
        assert_eq!(n.egress, "deer-flow-net-egress");
    }
}
