//! Connections that have not shown the API key yet, on a listener with one (always on TCP):
//! before its key is read a client is nobody, so that nobody cannot take every slot from the
//! key holder. Each peer address may hold at most `MAX_UNAUTHENTICATED_PER_PEER` such
//! connections at once (more are closed unanswered), and each must send its first request head
//! within `UNAUTHENTICATED_HEAD_DEADLINE` of connecting (or the socket's header timeout, if
//! shorter). A connection leaves the count as soon as a request on it carries the key, so the
//! key holder's connections are never capped per peer (behind a reverse proxy every call comes
//! from one address); one that ends is forgotten. IPv6 peers are counted by their /64, which
//! one host usually holds whole.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Connections one peer address may hold before any of them shows the key.
pub const MAX_UNAUTHENTICATED_PER_PEER: usize = 8;

/// How long a connection that has not shown the key may take to send its first whole request
/// head (from the accept).
pub const UNAUTHENTICATED_HEAD_DEADLINE: Duration = Duration::from_secs(2);

/// The address a TCP peer is counted under: an IPv4 address (or the IPv4 inside a mapped IPv6
/// one) as it is, an IPv6 address by its /64.
pub fn peer_address(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

/// Whether a peer that holds `held` unauthenticated connections may open one more.
pub fn admits(held: usize) -> bool {
    held < MAX_UNAUTHENTICATED_PER_PEER
}

/// The count of unauthenticated connections per peer address.
#[derive(Debug, Default)]
pub struct Gate {
    held: Mutex<HashMap<String, usize>>,
}

impl Gate {
    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a new connection from `peer`, or `None` when that peer already holds the most.
    pub fn admit(self: &Arc<Self>, peer: &str) -> Option<Arc<Pending>> {
        let mut counts = self.counts();
        let held = counts.entry(peer.to_owned()).or_insert(0);
        if !admits(*held) {
            return None;
        }
        *held += 1;
        Some(Arc::new(Pending {
            gate: self.clone(),
            peer: peer.to_owned(),
            counted: AtomicBool::new(true),
            head_seen: AtomicBool::new(false),
        }))
    }

    /// Unauthenticated connections `peer` holds now.
    pub fn held(&self, peer: &str) -> usize {
        self.counts().get(peer).copied().unwrap_or(0)
    }

    fn leave(&self, peer: &str) {
        let mut counts = self.counts();
        if let Some(n) = counts.get_mut(peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(peer);
            }
        }
    }
}

/// One connection that has not shown the key yet: counted until it does, or ends.
#[derive(Debug)]
pub struct Pending {
    gate: Arc<Gate>,
    peer: String,
    counted: AtomicBool,
    head_seen: AtomicBool,
}

impl Pending {
    /// A request head arrived (the head deadline no longer applies).
    pub fn saw_head(&self) {
        self.head_seen.store(true, Ordering::SeqCst);
    }

    pub fn head_seen(&self) -> bool {
        self.head_seen.load(Ordering::SeqCst)
    }

    /// A request on this connection carried the key: it no longer counts against its peer.
    pub fn showed_key(&self) {
        if self.counted.swap(false, Ordering::SeqCst) {
            self.gate.leave(&self.peer);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.showed_key();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_counted_by_address_and_ipv6_by_its_64() {
        let cases = [
            ("127.0.0.1", "127.0.0.1"),
            ("::ffff:10.1.2.3", "10.1.2.3"),
            ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
            ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
            ("::1", "0:0:0:0::/64"),
        ];
        for (ip, want) in cases {
            let ip: IpAddr = ip.parse().expect("an address");
            assert_eq!(peer_address(ip), want, "{ip}");
        }
    }

    #[test]
    fn a_peer_holds_at_most_the_cap_until_one_shows_the_key_or_ends() {
        assert!(admits(MAX_UNAUTHENTICATED_PER_PEER - 1));
        assert!(!admits(MAX_UNAUTHENTICATED_PER_PEER));
        let gate = Arc::new(Gate::default());
        let held: Vec<Arc<Pending>> = (0..MAX_UNAUTHENTICATED_PER_PEER)
            .map(|_| gate.admit("a").expect("under the cap"))
            .collect();
        assert!(gate.admit("a").is_none(), "the cap holds");
        assert!(gate.admit("b").is_some(), "another peer is counted apart");
        held[0].showed_key();
        held[0].showed_key();
        assert_eq!(gate.held("a"), MAX_UNAUTHENTICATED_PER_PEER - 1, "once");
        let next = gate.admit("a").expect("a slot freed by the key");
        drop(held);
        assert_eq!(gate.held("a"), 1, "ended connections are forgotten");
        drop(next);
        assert_eq!(gate.held("a"), 0);
        assert!(gate.counts().is_empty(), "no entry per peer ever seen");
    }
}
