//! CONNECT tunnels: once the client's connection is upgraded, bytes move both ways until both
//! directions end, an error, the idle limit without a byte either way, or a reloaded policy
//! that no longer allows them; then one `tunnel closed` line. On Linux the client's socket is taken back out of hyper and spliced
//! (`splice`); where that cannot be done the bytes are copied through 64 KiB buffers.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::idle::{Clock, Tracked};

/// Whose tunnel, for its end line.
#[derive(Debug, Clone)]
pub struct Who {
    pub client: String,
    pub host: String,
    pub chosen: SocketAddr,
}

impl Who {
    fn closed(&self, up: u64, down: u64, ended: &str, relay: &str, start: Instant) {
        tracing::info!(
            client = %self.client,
            host = %self.host,
            chosen = %self.chosen,
            bytes_up = up,
            bytes_down = down,
            ended,
            relay,
            duration_ms = start.elapsed().as_secs_f64() * 1000.0,
            "tunnel closed"
        );
    }
}

/// Resolves when a reloaded policy no longer allows the tunnel (`NetProxy::set_policy`).
pub type Revoked = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Per direction. tokio's default (8 KiB) costs a read and a write per 8 KiB; 64 KiB is what
/// loopback and most sockets deliver in one read under load (docs/benchmarks.md, part 4).
const TUNNEL_BUFFER: usize = 64 * 1024;

/// Carries a tunnel until both directions end, an error, or `idle` without a byte either way;
/// then logs one `tunnel closed` line and answers (bytes up, bytes down). On Linux the client's socket is taken back out of hyper
/// and the bytes are spliced (`splice`); if that cannot be done (the upgraded connection is not
/// ours, or no pipes can be made) they are copied through 64 KiB buffers.
pub async fn tunnel(
    on_upgrade: hyper::upgrade::OnUpgrade,
    upstream: TcpStream,
    who: Who,
    idle: Duration,
    mut revoked: Revoked,
) -> (u64, u64) {
    let start = Instant::now();
    let Ok(upgraded) = on_upgrade.await else {
        // The client went away before the 200 reached it: still one end line.
        who.closed(0, 0, "client_gone", "none", start);
        return (0, 0);
    };
    let clock = Clock::new();
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let upgraded = match spliced(upgraded, &upstream, &clock, idle, &mut revoked).await {
        Ok((up, down, ended)) => {
            who.closed(up, down, ended, "splice", start);
            return (up, down);
        }
        Err(upgraded) => upgraded,
    };
    let mut client = Tracked::new(TokioIo::new(upgraded), clock.clone());
    let mut upstream = Tracked::new(upstream, clock.clone());
    let (up, down, ended) = tokio::select! {
        r = tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, TUNNEL_BUFFER, TUNNEL_BUFFER) => {
            match r {
                Ok((u, d)) => (u, d, "closed"),
                Err(e) => {
                    tracing::debug!(error = %e, "tunnel copy failed");
                    (0, 0, "error")
                }
            }
        }
        () = clock.expired(idle) => (0, 0, "idle_timeout"),
        () = &mut revoked => (0, 0, "revoked"),
    };
    who.closed(up, down, ended, "copy", start);
    (up, down)
}

/// The spliced tunnel: `(bytes_up, bytes_down, ended)` once it is over, or the upgraded
/// connection back, whole, when it cannot be spliced. The counts are what was delivered, also
/// when the idle timer or an error ended it.
#[cfg(any(target_os = "linux", target_os = "android"))]
async fn spliced(
    upgraded: hyper::upgrade::Upgraded,
    upstream: &TcpStream,
    clock: &Clock,
    idle: Duration,
    revoked: &mut Revoked,
) -> Result<(u64, u64, &'static str), hyper::upgrade::Upgraded> {
    use std::sync::atomic::Ordering;
    // Pipes first: if they cannot be made, the connection is still whole for copying.
    let Ok(mut pipes) = crate::splice::Pipes::new() else {
        return Err(upgraded);
    };
    let Some((client, pending)) = crate::client::client_socket(upgraded)? else {
        return Ok((0, 0, "error"));
    };
    let moved = crate::splice::Moved::default();
    let ended = tokio::select! {
        r = crate::splice::relay(client.stream(), &pending, upstream, &mut pipes, clock, &moved) => match r {
            Ok(()) => "closed",
            Err(e) => {
                tracing::debug!(error = %e, "tunnel relay failed");
                "error"
            }
        },
        () = clock.expired(idle) => "idle_timeout",
        () = revoked => "revoked",
    };
    Ok((
        moved.up.load(Ordering::Relaxed),
        moved.down.load(Ordering::Relaxed),
        ended,
    ))
}
