//! The provider's errors (each with its HTTP status), metric words, and the identity rule.

use std::collections::HashMap;

use super::claims::{Renew, StoreError};
use crate::naming::{self, IdError};
use crate::ops::OpError;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Invalid(#[from] IdError),
    #[error("sandbox {id} belongs to another (user, thread); refused")]
    Collision { id: String },
    #[error("sandbox {id} is being destroyed; try again")]
    Busy { id: String },
    #[error("sandbox {id} is owned by {owner} (another provider)")]
    Owned { id: String, owner: String },
    /// The sandbox is the other API's: made through the provisioner API (deer-flow's, never
    /// leased through `/v1/`), or leased through `/v1/` right now (not handed to the
    /// provisioner API while a lease holds it).
    #[error("sandbox {id} {why}")]
    OtherApi { id: String, why: &'static str },
    /// A provisioner create found its sandbox made with other mounts than it asks for.
    #[error("sandbox {id} was made with other mounts than this create asks for (skills path, thread data or extra mounts); delete it first")]
    Mounts { id: String },
    #[error("no such lease {0}")]
    UnknownLease(String),
    /// `--max-replicas` is reached and nothing warm could be evicted.
    #[error("the replica cap (--max-replicas {max}) is reached and no warm sandbox can be evicted; try again later")]
    Full { max: usize },
    /// An untracked destroy found a container with no `lifecycle.scope` label.
    #[error("sandbox {id}: the container under its name is not a lifecycle sandbox (no lifecycle.scope label); not destroyed (add ?force=true to destroy it anyway)")]
    NotLifecycle { id: String },
    /// Request input outside what the API accepts (a field too long, say).
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Op(#[from] OpError),
}

impl ServeError {
    pub fn status(&self) -> u16 {
        match self {
            ServeError::Invalid(_) | ServeError::BadInput(_) => 400,
            ServeError::UnknownLease(_) => 404,
            ServeError::Collision { .. }
            | ServeError::Busy { .. }
            | ServeError::Owned { .. }
            | ServeError::OtherApi { .. }
            | ServeError::Mounts { .. }
            | ServeError::NotLifecycle { .. } => 409,
            ServeError::Store(_) | ServeError::Full { .. } => 503,
            ServeError::Op(OpError::NoSuchSandbox(_)) => 404,
            ServeError::Op(OpError::NotOurs { .. }) => 409,
            ServeError::Op(_) => 502,
        }
    }
}

/// A sandbox's labels name sandbox `id` and the (user, thread) digest `scope`.
pub fn labels_name(labels: &HashMap<String, String>, id: &str, scope: &str) -> bool {
    labels.get(naming::LABEL_SCOPE).map(String::as_str) == Some(scope)
        && labels.get(naming::LABEL_SANDBOX_ID).map(String::as_str) == Some(id)
}

pub fn renew_word(r: Renew) -> &'static str {
    match r {
        Renew::Renewed => "renewed",
        Renew::Lapsed => "lapsed",
        Renew::Lost => "lost",
    }
}

/// Every kind `failure_kind` answers, for the metric's series at 0.
pub const FAILURE_KINDS: [&str; 12] = [
    "invalid",
    "full",
    "not_lifecycle",
    "collision",
    "busy",
    "other_api",
    "mounts",
    "owned",
    "lease",
    "store",
    "rollback",
    "engine",
];

pub fn failure_kind(e: &ServeError) -> &'static str {
    match e {
        ServeError::Invalid(_) | ServeError::BadInput(_) => "invalid",
        ServeError::Full { .. } => "full",
        ServeError::NotLifecycle { .. } => "not_lifecycle",
        ServeError::Collision { .. } => "collision",
        ServeError::Busy { .. } => "busy",
        ServeError::OtherApi { .. } => "other_api",
        ServeError::Mounts { .. } => "mounts",
        ServeError::Owned { .. } => "owned",
        ServeError::UnknownLease(_) => "lease",
        ServeError::Store(_) => "store",
        ServeError::Op(OpError::RollbackFailed { .. }) => "rollback",
        ServeError::Op(OpError::NotOurs { .. }) => "owned",
        ServeError::Op(_) => "engine",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_table() {
        let l = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let cases = [
            (
                l(&[("lifecycle.scope", "s"), ("deerflow.sandbox_id", "i")]),
                true,
            ),
            (
                l(&[("lifecycle.scope", "other"), ("deerflow.sandbox_id", "i")]),
                false,
            ),
            (
                l(&[("lifecycle.scope", "s"), ("deerflow.sandbox_id", "j")]),
                false,
            ),
            (l(&[("deerflow.sandbox_id", "i")]), false),
            (l(&[("lifecycle.scope", "s")]), false),
        ];
        for (labels, want) in cases {
            assert_eq!(labels_name(&labels, "i", "s"), want, "{labels:?}");
        }
    }
}
