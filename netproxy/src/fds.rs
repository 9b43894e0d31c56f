//! The descriptor limit: raised to the hard limit at start-up (the soft limit is often 1024
//! while the hard one is far higher), and the global dial budget kept under it with a reserve
//! for accepts, lookups, interface reads and the splice pipes of open tunnels, so that
//! upstream attempts alone can never take the last descriptor.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Descriptors never given to the dial budget.
pub const RESERVE: u64 = 64;

/// Raises the soft `RLIMIT_NOFILE` to the hard one; the limit now in force. A failure leaves
/// the soft limit as it was (and says so by returning it).
pub fn raise_to_hard() -> nix::Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return Ok(hard);
    }
    Ok(soft)
}

/// The global dial budget under a descriptor limit of `limit`: what was asked, but never more
/// than the limit less the reserve, and at least one. Pure.
pub fn dial_cap(limit: u64, wanted: usize) -> usize {
    let room = usize::try_from(limit.saturating_sub(RESERVE)).unwrap_or(usize::MAX);
    wanted.min(room).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dial_budget_stays_under_the_limit() {
        for (limit, wanted, cap) in [
            (1_048_576, 256, 256),
            (1024, 256, 256),
            (256, 256, 192),
            (48, 256, 1),
            (64, 8, 1),
            (u64::MAX, usize::MAX, usize::MAX - 64),
        ] {
            assert_eq!(dial_cap(limit, wanted), cap, "{limit} {wanted}");
        }
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let limit = raise_to_hard().expect("getrlimit");
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
        assert_eq!((limit, soft), (hard, hard));
    }
}
