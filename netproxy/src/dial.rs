//! Dialing the vetted addresses, Happy Eyeballs style (RFC 8305): the families are interleaved
//! (starting with the family of the first answer, the resolver's preference), one attempt is
//! started every `STAGGER` or as soon as the previous one failed, the first connection wins and
//! the others are dropped. The caller bounds the whole race with the one connect timeout. Only
//! addresses that were vetted are ever passed in.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::task::JoinSet;

/// RFC 8305's recommended Connection Attempt Delay.
pub const STAGGER: Duration = Duration::from_millis(250);

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

/// Races connection attempts to `addrs` (in `order`); the winner's stream and address, or the
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
    let queue = order(addrs);
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
        assert!(r.is_err());
        assert_eq!(tried.len(), 2);
        // The first one connects: nothing else is tried.
        let (r, tried) = scripted(&[v4, v6], &[], &[]).await;
        assert_eq!((r.expect("connected"), tried), (v4, vec![v4]));
    }
}
