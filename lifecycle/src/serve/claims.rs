//! The pure ownership rule: what a take, claim, renew or release does to a sandbox's key
//! (`decide`), and how the store's answer words read back (`claim_answer`, `renew_answer`).
//! The memory store runs `decide` directly; the Redis store (`redis_store`) runs the same rule
//! as one Lua script, so both stores (`store`) read the same words.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("ownership store: {0}")]
    Unavailable(String),
    #[error("ownership store answered {0:?}")]
    Unreadable(String),
}

/// What a take/claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Now ours (was unowned, or ours already).
    Ours,
    /// `own:` of another owner.
    Owned(String),
    /// `del:` of someone (another owner's teardown, or our own in progress).
    Deleting(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Renew {
    Renewed,
    /// Our key had expired and nobody took it: it is ours again.
    Lapsed,
    /// Someone else holds it: never re-taken.
    Lost,
}

/// The change each operation asks for, decided from the key's current value. This is the rule
/// the Lua scripts implement; the memory store calls it directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Claim,
    /// Like claim, but to `del:`; allowed over our own `own:`/`del:` or an absent key.
    BeginDelete,
    /// Back from a teardown of ours to `own:` (a create replacing a dead container goes on to
    /// create): allowed over our own `own:`/`del:` or an absent key, like `BeginDelete`.
    EndDelete,
    Renew,
    /// Renew for a sandbox being torn down (or fenced after a failed rollback): like `Renew`,
    /// but what it keeps or re-takes is `del:`, so a key that lapsed never comes back as an
    /// `own:` that deer-flow's take would accept.
    RenewFenced,
    Release,
}

/// (new value or `None` to delete or keep, answer). `Keep` means leave the key as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Set(String),
    Delete,
    Keep,
}

pub fn decide(op: Op, current: Option<&str>, me: &str) -> (Change, &'static str) {
    let own = format!("own:{me}");
    let del = format!("del:{me}");
    let ours = current == Some(own.as_str()) || current == Some(del.as_str());
    match op {
        Op::Claim => match current {
            None => (Change::Set(own), "ours"),
            Some(v) if v == own => (Change::Set(own), "ours"),
            Some(v) if v.starts_with("del:") => (Change::Keep, "deleting"),
            Some(_) => (Change::Keep, "owned"),
        },
        Op::BeginDelete => match current {
            None => (Change::Set(del), "ours"),
            Some(_) if ours => (Change::Set(del), "ours"),
            Some(v) if v.starts_with("del:") => (Change::Keep, "deleting"),
            Some(_) => (Change::Keep, "owned"),
        },
        Op::EndDelete => match current {
            None => (Change::Set(own), "ours"),
            Some(_) if ours => (Change::Set(own), "ours"),
            Some(v) if v.starts_with("del:") => (Change::Keep, "deleting"),
            Some(_) => (Change::Keep, "owned"),
        },
        Op::Renew => match current {
            None => (Change::Set(own), "lapsed"),
            // A teardown of ours keeps its `del:` while it is renewed.
            Some(v) if ours => (Change::Set(v.to_owned()), "renewed"),
            Some(_) => (Change::Keep, "lost"),
        },
        Op::RenewFenced => match current {
            None => (Change::Set(del), "lapsed"),
            Some(_) if ours => (Change::Set(del), "renewed"),
            Some(_) => (Change::Keep, "lost"),
        },
        Op::Release => match current {
            Some(_) if ours => (Change::Delete, "released"),
            _ => (Change::Keep, "not-ours"),
        },
    }
}

pub fn owner_of(value: &str) -> String {
    value
        .split_once(':')
        .map(|(_, o)| o)
        .unwrap_or(value)
        .to_owned()
}

pub(crate) fn claim_answer(answer: &str, value: Option<&str>) -> Result<Claim, StoreError> {
    let owner = value.map(owner_of).unwrap_or_default();
    match answer {
        "ours" => Ok(Claim::Ours),
        "owned" => Ok(Claim::Owned(owner)),
        "deleting" => Ok(Claim::Deleting(owner)),
        other => Err(StoreError::Unreadable(other.to_owned())),
    }
}

pub(crate) fn renew_answer(answer: &str) -> Result<Renew, StoreError> {
    match answer {
        "renewed" => Ok(Renew::Renewed),
        "lapsed" => Ok(Renew::Lapsed),
        "lost" => Ok(Renew::Lost),
        other => Err(StoreError::Unreadable(other.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decide_table() {
        use Change::*;
        let me = "a";
        let cases: [(Op, Option<&str>, Change, &str); 25] = [
            (Op::Claim, None, Set("own:a".into()), "ours"),
            (Op::Claim, Some("own:a"), Set("own:a".into()), "ours"),
            (Op::Claim, Some("own:b"), Keep, "owned"),
            (Op::Claim, Some("del:b"), Keep, "deleting"),
            (Op::Claim, Some("del:a"), Keep, "deleting"),
            (Op::BeginDelete, None, Set("del:a".into()), "ours"),
            (Op::BeginDelete, Some("own:a"), Set("del:a".into()), "ours"),
            (Op::BeginDelete, Some("own:b"), Keep, "owned"),
            (Op::BeginDelete, Some("del:b"), Keep, "deleting"),
            (Op::EndDelete, None, Set("own:a".into()), "ours"),
            (Op::EndDelete, Some("del:a"), Set("own:a".into()), "ours"),
            (Op::EndDelete, Some("own:a"), Set("own:a".into()), "ours"),
            (Op::EndDelete, Some("own:b"), Keep, "owned"),
            (Op::EndDelete, Some("del:b"), Keep, "deleting"),
            (Op::Renew, Some("own:a"), Set("own:a".into()), "renewed"),
            (Op::Renew, Some("del:a"), Set("del:a".into()), "renewed"),
            (Op::Renew, None, Set("own:a".into()), "lapsed"),
            (Op::Renew, Some("own:b"), Keep, "lost"),
            (Op::RenewFenced, None, Set("del:a".into()), "lapsed"),
            (
                Op::RenewFenced,
                Some("del:a"),
                Set("del:a".into()),
                "renewed",
            ),
            (
                Op::RenewFenced,
                Some("own:a"),
                Set("del:a".into()),
                "renewed",
            ),
            (Op::RenewFenced, Some("own:b"), Keep, "lost"),
            (Op::Release, Some("own:a"), Delete, "released"),
            (Op::Release, Some("del:a"), Delete, "released"),
            (Op::Release, Some("own:b"), Keep, "not-ours"),
        ];
        for (op, current, change, answer) in cases {
            assert_eq!(
                decide(op, current, me),
                (change, answer),
                "{op:?} {current:?}"
            );
        }
    }
}
