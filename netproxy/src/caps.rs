//! The connection caps a listener keeps: `--max-connections` in all and
//! `--max-connections-per-client` per client IP. The proxy's listener (`server`) and each
//! relay listener (`relay`) keep a `Caps` of their own under the same two limits; a connection
//! holds its share (`Held`) for as long as it is open, a tunnel or a relayed stream included.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::refusal::Reason;

/// Connections open, in all and per client IP.
#[derive(Debug)]
pub struct Caps {
    permits: Arc<Semaphore>,
    per_client: Arc<Mutex<HashMap<IpAddr, usize>>>,
    max_per_client: usize,
}

/// One connection's share of the caps; given back when dropped.
#[derive(Debug)]
pub struct Held {
    _permit: OwnedSemaphorePermit,
    _slot: ClientSlot,
}

impl Caps {
    pub fn new(max_connections: usize, max_per_client: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max_connections.max(1))),
            per_client: Arc::default(),
            max_per_client: max_per_client.max(1),
        }
    }

    /// A share for a connection from `ip`, or the cap it is over (its client's first, so a
    /// client over its share never takes a global permit).
    pub fn admit(&self, ip: IpAddr) -> Result<Held, Reason> {
        let slot = ClientSlot::take(&self.per_client, ip, self.max_per_client)
            .ok_or(Reason::ClientConnectionLimit)?;
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| Reason::ConnectionLimit)?;
        Ok(Held {
            _permit: permit,
            _slot: slot,
        })
    }
}

/// One client's share of the connections; released when dropped.
#[derive(Debug)]
struct ClientSlot {
    map: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl ClientSlot {
    fn take(map: &Arc<Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr, max: usize) -> Option<Self> {
        let mut m = map.lock().unwrap_or_else(PoisonError::into_inner);
        let n = m.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Self {
            map: map.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut m = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_client_then_in_all_and_given_back() {
        let caps = Caps::new(3, 2);
        let (a, b, c) = (
            "10.0.0.1".parse().expect("ip"),
            "10.0.0.2".parse().expect("ip"),
            "10.0.0.3".parse().expect("ip"),
        );
        let a1 = caps.admit(a).expect("a1");
        let _a2 = caps.admit(a).expect("a2");
        assert_eq!(caps.admit(a).err(), Some(Reason::ClientConnectionLimit));
        let _b1 = caps.admit(b).expect("b1");
        assert_eq!(caps.admit(c).err(), Some(Reason::ConnectionLimit));
        drop(a1);
        let _c1 = caps.admit(c).expect("a slot given back is taken again");
        assert_eq!(caps.admit(b).err(), Some(Reason::ConnectionLimit));
    }
}
