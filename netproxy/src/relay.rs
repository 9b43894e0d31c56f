//! The inbound relay (`--relay LISTEN=TARGET`): a way in to the sandbox for the host, which
//! has no address on a restricted sandbox's internal network. Each relay listens on its own
//! address (the sidecar's container publishes it from its egress network) and carries every
//! connection, byte for byte, to its one fixed target (`relay_target`: the sandbox's port,
//! resolved and judged at each connection). Nothing a client sends is read or chooses
//! anything: there is no request to parse, and no other destination.
//!
//! Per connection: the listener's caps (`caps`, the same two limits as the proxy's listener,
//! counted apart), the target vetted and dialed within the dial budget and connect timeout,
//! then the bytes moved with `splice` (Linux) or copied, half-close preserved both ways, until
//! both directions end, an error, `--tunnel-idle-timeout-ms` without a byte, or a network
//! change after which the target is no longer a peer of the sidecar. One line per connection:
//! `relay refused` with its reason, or `relay closed` when it ends.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};

use crate::caps::{Caps, Held};
use crate::idle::Clock;
use crate::proxy::NetProxy;
use crate::refusal::Reason;
use crate::relay_target::{self, RelayRefusal};
use crate::server::Limits;

pub use egress::relay::{Relay, RelayError};

/// Every `outcome` of `netproxy_relay_connections_total`: `relayed`, or a refusal.
pub const OUTCOMES: [&str; 12] = {
    let mut all = ["relayed"; 12];
    let mut i = 0;
    while i < RelayRefusal::ALL.len() {
        all[i + 1] = RelayRefusal::ALL[i].text();
        i += 1;
    }
    all
};

/// Serves `relay` on `listener` until `shutdown`: each accepted connection carried to the
/// relay's target on a task of its own.
pub async fn serve(
    listener: TcpListener,
    relay: Relay,
    proxy: Arc<NetProxy>,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    // Network changes reach the open relayed connections from here on.
    proxy.watch();
    let relay = Arc::new(relay);
    let caps = Caps::new(limits.max_connections, limits.max_per_client);
    let mut backoff = crate::server::BACKOFF_MIN;
    let mut at_limit = false;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => return,
            a = listener.accept() => a,
        };
        let (client, peer) = match accepted {
            Ok(a) => {
                backoff = crate::server::BACKOFF_MIN;
                at_limit = false;
                a
            }
            Err(e) => {
                if crate::server::is_fd_limit(&e) && !std::mem::replace(&mut at_limit, true) {
                    tracing::warn!(error = %e, listen = %relay.listen, "relay at the file descriptor limit");
                }
                // The waiting connection stays queued; retrying at once would spin.
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(crate::server::BACKOFF_MAX);
                continue;
            }
        };
        let who = Who {
            client: peer,
            relay: relay.clone(),
        };
        match caps.admit(peer.ip()) {
            Ok(held) => {
                tokio::spawn(connection(client, who, proxy.clone(), held));
            }
            Err(reason) => {
                let r = match reason {
                    Reason::ClientConnectionLimit => RelayRefusal::ClientConnectionLimit,
                    _ => RelayRefusal::ConnectionLimit,
                };
                // Closed at once: a raw stream has no refusal to write.
                drop(client);
                who.refused(r, &[], &proxy);
            }
        }
    }
}

/// Whose connection, for its log line.
#[derive(Debug)]
struct Who {
    client: SocketAddr,
    relay: Arc<Relay>,
}

impl Who {
    fn target(&self) -> String {
        format!("{}:{}", self.relay.target.host, self.relay.target.port)
    }

    fn refused(&self, r: RelayRefusal, resolved: &[IpAddr], proxy: &NetProxy) {
        proxy.metrics.relay_connection(r.text());
        tracing::info!(
            client = %self.client,
            listen = %self.relay.listen,
            relay_target = %self.target(),
            resolved = ?resolved,
            reason = r.text(),
            "relay refused"
        );
    }

    fn closed(
        &self,
        chosen: SocketAddr,
        (up, down): (u64, u64),
        ended: &str,
        relay: &str,
        start: Instant,
    ) {
        tracing::info!(
            client = %self.client,
            listen = %self.relay.listen,
            relay_target = %self.target(),
            chosen = %chosen,
            bytes_up = up,
            bytes_down = down,
            ended,
            relay,
            duration_ms = start.elapsed().as_secs_f64() * 1000.0,
            "relay closed"
        );
    }
}

/// One relayed connection, from the vetting of its target to its end line. `held`: its share
/// of the caps, kept until it ends.
async fn connection(client: TcpStream, who: Who, proxy: Arc<NetProxy>, held: Held) {
    let start = Instant::now();
    let target = &who.relay.target;
    // Subscribed before the vetting: a change from here on is seen by the watch below.
    let mut changes = proxy.network_changes.subscribe();
    let (addrs, epoch) = match relay_target::vet(&proxy, target).await {
        Ok(v) => v,
        Err((r, resolved)) => return who.refused(r, &resolved, &proxy),
    };
    let dialed = relay_target::dial(&proxy, &addrs, target.port, epoch, who.client.ip()).await;
    let (upstream, chosen) = match dialed {
        Ok(d) => d,
        Err(r) => return who.refused(r, &addrs, &proxy),
    };
    // A change between the last check and the connect: judged again before any byte.
    if proxy.interfaces.epoch() != epoch {
        if let Err(r) = relay_target::judge_all(&proxy, &[chosen.ip()]) {
            return who.refused(r, &addrs, &proxy);
        }
    }
    proxy.metrics.relay_connection("relayed");
    let open = proxy.metrics.relay_opened();
    let still_allowed = {
        let proxy = proxy.clone();
        async move {
            while changes.changed().await.is_ok() {
                if relay_target::judge_all(&proxy, &[chosen.ip()]).is_err() {
                    return;
                }
            }
            std::future::pending::<()>().await;
        }
    };
    let (moved, ended, how) = carry(client, upstream, proxy.tunnel_idle, still_allowed).await;
    drop(open);
    proxy.metrics.relay_closed(moved.0, moved.1);
    who.closed(chosen, moved, ended, how, start);
    drop(held);
}

/// Moves bytes both ways until both directions end, an error, `idle` without a byte, or
/// `revoked`: `((up, down), ended, relay)` with `relay` `splice` or `copy`.
async fn carry(
    client: TcpStream,
    upstream: TcpStream,
    idle: Duration,
    revoked: impl std::future::Future<Output = ()>,
) -> ((u64, u64), &'static str, &'static str) {
    let clock = Clock::new();
    tokio::pin!(revoked);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Ok(mut pipes) = crate::splice::Pipes::new() {
        use std::sync::atomic::Ordering;
        let moved = crate::splice::Moved::default();
        let ended = tokio::select! {
            r = crate::splice::relay(&client, &[], &upstream, &mut pipes, &clock, &moved) => match r {
                Ok(()) => "closed",
                Err(e) => {
                    tracing::debug!(error = %e, "relay splice failed");
                    "error"
                }
            },
            () = clock.expired(idle) => "idle_timeout",
            () = &mut revoked => "revoked",
        };
        let counts = (
            moved.up.load(Ordering::Relaxed),
            moved.down.load(Ordering::Relaxed),
        );
        return (counts, ended, "splice");
    }
    let mut client = crate::idle::Tracked::new(client, clock.clone());
    let mut upstream = crate::idle::Tracked::new(upstream, clock.clone());
    let (counts, ended) = tokio::select! {
        r = tokio::io::copy_bidirectional(&mut client, &mut upstream) => match r {
            Ok(c) => (c, "closed"),
            Err(_) => ((0, 0), "error"),
        },
        () = clock.expired(idle) => ((0, 0), "idle_timeout"),
        () = &mut revoked => ((0, 0), "revoked"),
    };
    (counts, ended, "copy")
}
