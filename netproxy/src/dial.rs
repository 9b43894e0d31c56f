//! Dialing the vetted addresses, Happy Eyeballs style (RFC 8305): the families are interleaved
//! (starting with the family of the first answer, the resolver's preference), one attempt is
//! started every `STAGGER` or as soon as the previous one failed, the first connection wins and
//! the others are dropped. The caller bounds the whole race with the one connect timeout. Only
//! addresses that were vetted are ever passed in. At most `MAX_ATTEMPTS` addresses are tried
//! (RFC 8305 orders them; it does not ask for all 59 of a name), and each attempt holds a
//! `Budget` permit while its socket is connecting, so one client cannot fill the descriptor
//! table with half-open sockets.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// RFC 8305's recommended Connection Attempt Delay.
pub const STAGGER: Duration = Duration::from_millis(250);

/// The most addresses one race tries: two of each family after interleaving, and more.
pub const MAX_ATTEMPTS: usize = 6;

/// Connection attempts in flight: per client (by IP) and in all. An attempt waits for both
/// permits (within the connect timeout, which bounds the whole race) and holds them until its
/// socket has connected or failed.
#[derive(Debug)]
pub struct Budget {
    global: Arc<Semaphore>,
    per_client: usize,
    clients: Mutex<HashMap<IpAddr, Arc<Semaphore>>>,
}

/// An attempt's share of the `Budget`; given back when dropped.
#[derive(Debug)]
pub struct Permit {
    held: Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
    budget: Arc<Budget>,
    client: IpAddr,
}

impl Budget {
    pub fn new(global: usize, per_client: usize) -> Self {
        Self {
            global: Arc::new(Semaphore::new(global.max(1))),
            per_client: per_client.max(1),
            clients: Mutex::default(),
        }
    }

    /// Waits for a client permit, then a global one (so a client over its share never holds
    /// global permits while it waits).
    pub async fn permit(self: Arc<Self>, client: IpAddr) -> io::Result<Permit> {
        let mine = {
            let mut m = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
            m.entry(client)
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_client)))
                .clone()
        };
        // Made before the waits: a cancelled wait still tidies the map up.
        let mut permit = Permit {
            held: None,
            budget: self.clone(),
            client,
        };
        let closed = |_| io::Error::other("dial budget closed");
        let own = mine.acquire_owned().await.map_err(closed)?;
        let all = self.global.clone().acquire_owned().await.map_err(closed)?;
        permit.held = Some((own, all));
        Ok(permit)
    }

    /// Attempts in flight for `client` (tests).
    pub fn in_flight(&self, client: IpAddr) -> usize {
        let m = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        m.get(&client)
            .map_or(0, |s| self.per_client - s.available_permits())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        drop(self.held.take());
        let mut m = self
            .budget
            .clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Only the map holds it and nobody is connecting: the client's entry goes.
        let idle = m.get(&self.client).is_some_and(|s| {
            Arc::strong_count(s) == 1 && s.available_permits() == self.budget.per_client
        });
        if idle {
            m.remove(&self.client);
        }
    }
}

/// The attempt order: families alternate, each in answer order, starting with the first
/// answer's family.
pub fn order(addrs: &[SocketAddr]) -> Vec<SocketAddr> {
    let Some(first) = addrs.first() else {
        return Vec::new();
    };
    let (mut same, mut other): (Vec<SocketAddr>, Vec<SocketAddr>) =
        addrs.iter().partition(|a| a.is_ipv4() == first.is_ipv4());
    same.reverse();
    other.reverse();
    let mut out = Vec::with_capacity(addrs.len());
    loop {
        match (same.pop(), other.pop()) {
            (None, None) => return out,
            (a, b) => out.extend(a.into_iter().chain(b)),
        }
    }
}

/// Races connection attempts to the first `MAX_ATTEMPTS` of `addrs` (in `order`); the winner's stream and address, or the
/// last attempt's error when every one failed.
pub async fn race<S, F, Fut>(
    addrs: &[SocketAddr],
    stagger: Duration,
    connect: F,
) -> io::Result<(S, SocketAddr)>
where
    S: Send + 'static,
    F: Fn(SocketAddr) -> Fut,
    Fut: Future<Output = io::Result<S>> + Send + 'static,
{
    let mut queue = order(addrs);
    queue.truncate(MAX_ATTEMPTS);
    // One address (an IP literal, or a name with one answer): nothing to race, so no task is
    // spawned; its wake-up could land on the other worker thread and cost the set-up latency.
    if let [only] = queue.as_slice() {
        return connect(*only).await.map(|stream| (stream, *only));
    }
    let mut next = queue.iter();
    // Dropping the set (on return, or when the caller's timeout drops this future) aborts the
    // attempts still running.
    let mut running = JoinSet::new();
    let mut last_err = io::Error::new(io::ErrorKind::InvalidInput, "no address to dial");
    let mut start_next = true;
    loop {
        if start_next {
            if let Some(addr) = next.next().copied() {
                let attempt = connect(addr);
                running.spawn(async move { (addr, attempt.await) });
            }
        }
        if running.is_empty() {
            return Err(last_err);
        }
        let more = next.len() > 0;
        tokio::select! {
            done = running.join_next() => match done {
                Some(Ok((addr, Ok(stream)))) => return Ok((stream, addr)),
                Some(Ok((_, Err(e)))) => {
                    last_err = e;
                    // A failure starts the next attempt at once.
                    start_next = true;
                }
                Some(Err(e)) => {
                    last_err = io::Error::other(e);
                    start_next = true;
                }
                None => return Err(last_err),
            },
            () = tokio::time::sleep(stagger), if more => start_next = true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn a(s: &str) -> SocketAddr {
        s.parse().expect("addr")
    }

    #[test]
    fn families_alternate_from_the_first_answer() {
        let got = order(&[
            a("[2001:db8::1]:80"),
            a("[2001:db8::2]:80"),
            a("192.0.2.1:80"),
            a("[2001:db8::3]:80"),
            a("192.0.2.2:80"),
        ]);
        assert_eq!(
            got,
            [
                a("[2001:db8::1]:80"),
                a("192.0.2.1:80"),
                a("[2001:db8::2]:80"),
                a("192.0.2.2:80"),
                a("[2001:db8::3]:80"),
            ]
        );
        let got = order(&[a("192.0.2.1:80"), a("[2001:db8::1]:80")]);
        assert_eq!(got, [a("192.0.2.1:80"), a("[2001:db8::1]:80")]);
        assert!(order(&[]).is_empty());
    }

    /// Scripted attempts: `hang` never completes, `fail` fails at once, anything else connects.
    async fn scripted(
        addrs: &[SocketAddr],
        hang: &[SocketAddr],
        fail: &[SocketAddr],
    ) -> (io::Result<SocketAddr>, Vec<SocketAddr>) {
        let tried = Arc::new(Mutex::new(Vec::new()));
        let (hang, fail) = (hang.to_vec(), fail.to_vec());
        let log = tried.clone();
        let r = race(addrs, STAGGER, move |addr| {
            log.lock().expect("lock").push(addr);
            let (h, f) = (hang.contains(&addr), fail.contains(&addr));
            async move {
                if h {
                    std::future::pending::<()>().await;
                }
                if f {
                    return Err(io::Error::from(io::ErrorKind::ConnectionRefused));
                }
                Ok(())
            }
        })
        .await
        .map(|((), addr)| addr);
        let tried = tried.lock().expect("lock").clone();
        (r, tried)
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_to_connect_wins() {
        let v6 = a("[::1]:80");
        let v4 = a("127.0.0.1:80");
        // IPv6 refused at once: IPv4 is tried without waiting for the stagger.
        let (r, tried) = scripted(&[v6, v4], &[], &[v6]).await;
        assert_eq!(r.expect("connected"), v4);
        assert_eq!(tried, [v6, v4]);
        // IPv6 hangs (a network without an IPv6 route that drops instead of refusing): IPv4
        // is started after the stagger and wins.
        let (r, _) = scripted(&[v6, v4], &[v6], &[]).await;
        assert_eq!(r.expect("connected"), v4);
        // All fail: the error.
        let (r, tried) = scripted(&[v6, v4], &[], &[v6, v4]).await;
        assert_eq!(
            r.map_err(|e| e.kind()),
            Err(io::ErrorKind::ConnectionRefused)
        );
        assert_eq!(tried.len(), 2);
        // The first one connects: nothing else is tried.
        let (r, tried) = scripted(&[v4, v6], &[], &[]).await;
        assert_eq!((r.expect("connected"), tried), (v4, vec![v4]));
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_max_attempts_addresses_are_tried() {
        let many: Vec<SocketAddr> = (1..=59u8)
            .map(|i| SocketAddr::from(([192, 0, 2, i], 80)))
            .collect();
        let (r, tried) = scripted(&many, &[], &many).await;
        assert_eq!(
            r.map_err(|e| e.kind()),
            Err(io::ErrorKind::ConnectionRefused)
        );
        assert_eq!(tried, many[..MAX_ATTEMPTS].to_vec());
    }

    #[tokio::test]
    async fn the_budget_bounds_attempts_per_client_and_in_all() {
        let b = Arc::new(Budget::new(3, 2));
        let (a, c) = (
            "127.0.0.1".parse().expect("ip"),
            "127.0.0.2".parse().expect("ip"),
        );
        let a1 = b.clone().permit(a).await.expect("permit");
        let _a2 = b.clone().permit(a).await.expect("permit");
        assert_eq!(b.in_flight(a), 2);
        // A's third waits for its share; C is still served (global 3).
        let a3 = tokio::spawn(b.clone().permit(a));
        let _c1 = b.clone().permit(c).await.expect("permit");
        tokio::task::yield_now().await;
        assert!(!a3.is_finished());
        drop(a1);
        let a3 = a3.await.expect("join").expect("permit");
        // Global is full now (a2, a3, c1): C's second waits though C has a share left.
        let c2 = tokio::spawn(b.clone().permit(c));
        tokio::task::yield_now().await;
        assert!(!c2.is_finished());
        drop(a3);
        let _c2 = c2.await.expect("join").expect("permit");
        assert_eq!((b.in_flight(a), b.in_flight(c)), (1, 2));
    }
}
