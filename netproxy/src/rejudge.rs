//! What is judged again after the decision, and when. An allowed request's addresses were
//! vetted against the policy and the sidecar's own networks as they were then; either can
//! change before a byte moves or while bytes move:
//!
//! - at dial time: once an attempt has its dial permit (it may have waited for one), if a
//!   network change was announced since the vetting, the whole answer is vetted again before
//!   the socket connects (`Gate`);
//! - after the dial, before any byte is relayed: a reload or a network change since the
//!   vetting has the request judged again (`NetProxy::recheck`);
//! - while a tunnel or a streaming answer is open: every reload and every announced network
//!   change has it judged again, and it is closed when no longer allowed (`NetProxy::revoked`),
//!   the announcements coming from a task that waits on the netlink socket
//!   (`NetProxy::watch_interfaces`).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::audit::Exchange;
use crate::policy::Policy;
use crate::proxy::NetProxy;
use crate::refusal::{Reason, Refusal};
use crate::rules::NameDecision;
use crate::target::Target;
use crate::tunnel::Revoked;

/// The addresses that may be dialed, and the network epoch they were vetted at
/// (`own::Interfaces::epoch`).
#[derive(Debug, Clone)]
pub struct Vetted {
    pub addrs: Vec<SocketAddr>,
    pub epoch: u64,
}

/// What a request subscribed to before its decision: every reload and every network change
/// from then on is seen.
#[derive(Debug)]
pub struct Changes {
    pub policy: watch::Receiver<u64>,
    pub networks: watch::Receiver<u64>,
}

impl NetProxy {
    /// Subscribes to reloads and network changes (`Changes`).
    pub fn changes(&self) -> Changes {
        Changes {
            policy: self.policy_changes.subscribe(),
            networks: self.network_changes.subscribe(),
        }
    }

    /// `addrs` (on `port`) judged on `policy` and the own networks as they are now: `Ok`, or
    /// why not.
    fn judge_now(&self, policy: &Policy, addrs: &[IpAddr], port: u16) -> Result<(), Reason> {
        let own = self
            .interfaces
            .networks()
            .map_err(|_| Reason::OwnNetworksUnknown)?;
        policy
            .vet(&own, addrs, port)
            .map(|_| ())
            .map_err(Reason::Address)
    }

    /// Whether a tunnel to `t`, dialed at `chosen`, would be opened now: the same name
    /// decision, and the same address check on the address it is connected to. Own networks
    /// unknown: it cannot be shown to be allowed, so it is not.
    pub fn still_allows(&self, t: &Target, chosen: SocketAddr) -> bool {
        let policy = self.policy();
        matches!(policy.decide_name(t), NameDecision::Allow { .. })
            && self
                .judge_now(&policy, &[chosen.ip()], chosen.port())
                .is_ok()
    }

    /// Resolves once a reload or a network change leaves this exchange no longer allowed.
    /// `changes` were taken before the lookup (`process`), so none since can be missed.
    pub(crate) fn revoked(
        self: &Arc<Self>,
        t: Target,
        chosen: SocketAddr,
        mut changes: Changes,
    ) -> Revoked {
        let proxy = self.clone();
        Box::pin(async move {
            loop {
                let moved = tokio::select! {
                    r = changes.policy.changed() => r.is_ok(),
                    r = changes.networks.changed() => r.is_ok(),
                };
                if !moved {
                    break;
                }
                if !proxy.still_allows(&t, chosen) {
                    return;
                }
            }
            // The proxy is going away: the exchange ends by its own rules.
            std::future::pending::<()>().await;
        })
    }

    /// After the dial, before any byte is relayed: a reload since the decision has the
    /// address dialed judged again on the new policy (403 `revoked`); a network change since
    /// the vetting has the whole answer judged again on the own networks now (`proxy_network`,
    /// `own_networks_unknown`, …).
    pub(crate) fn recheck(
        &self,
        changes: &mut Changes,
        t: &Target,
        vetted: &Vetted,
        chosen: SocketAddr,
        exchange: &Exchange,
    ) -> Result<(), Refusal> {
        let refuse = |reason: Reason| {
            let r = Refusal::new(reason, t.host.to_string());
            exchange.status(r.status());
            exchange.end(r.reason.text());
            r
        };
        if changes.policy.has_changed().unwrap_or(false) {
            changes.policy.borrow_and_update();
            if !self.still_allows(t, chosen) {
                return Err(refuse(Reason::Revoked));
            }
        }
        if self.interfaces.epoch() != vetted.epoch {
            let addrs: Vec<IpAddr> = vetted.addrs.iter().map(SocketAddr::ip).collect();
            self.judge_now(&self.policy(), &addrs, t.port)
                .map_err(refuse)?;
        }
        Ok(())
    }

    /// Races the vetted addresses within the connect timeout (`dial::race`), each attempt
    /// through the `Gate` once it has its permit; records the winner.
    pub(crate) async fn dial(
        self: &Arc<Self>,
        vetted: &Vetted,
        t: &Target,
        exchange: &Exchange,
    ) -> Result<(TcpStream, SocketAddr), Refusal> {
        let client = exchange
            .client_ip()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        let gate = Arc::new(Gate {
            proxy: self.clone(),
            epoch: vetted.epoch,
            addrs: vetted.addrs.iter().map(SocketAddr::ip).collect(),
            port: t.port,
            refused: Mutex::default(),
        });
        let budget = &self.dials;
        let race = crate::dial::race(&vetted.addrs, crate::dial::STAGGER, |addr| {
            let permit = budget.clone().permit(client);
            let gate = gate.clone();
            async move {
                // Held while the socket connects: a half-open socket is a descriptor too.
                let _permit = permit.await?;
                gate.pass()?;
                TcpStream::connect(addr).await
            }
        });
        let failed = |reason: Reason| {
            let r = Refusal::new(reason, t.host.to_string());
            exchange.status(r.status());
            exchange.end(r.reason.text());
            r
        };
        let raced = tokio::time::timeout(self.connect_timeout, race).await;
        if let Some(reason) = gate.refused() {
            return Err(failed(reason));
        }
        match raced {
            Err(_) => Err(failed(Reason::ConnectTimeout)),
            Ok(Err(e)) => {
                tracing::debug!(host = %t.host, error = %e, "every vetted address failed");
                Err(failed(Reason::ConnectFailed))
            }
            Ok(Ok((stream, chosen))) => {
                exchange.chosen(chosen);
                Ok((stream, chosen))
            }
        }
    }

    /// Tells `network_changes` of every announced change, so open tunnels and streaming
    /// answers judge themselves again (`revoked`). Runs while the proxy does; started once by
    /// each listener (`watch`).
    async fn watch_interfaces(proxy: Weak<Self>, fd: std::os::fd::OwnedFd) {
        use tokio::io::unix::AsyncFd;
        use tokio::io::Interest;
        // The safe constructor, deprecated because a borrowed descriptor could be closed under
        // it; an `OwnedFd` is the AsyncFd's alone and closed only when it drops, which is the
        // contract `register` asks callers to keep (it is `unsafe`, and this crate forbids that).
        #[allow(deprecated)]
        let registered = AsyncFd::with_interest(fd, Interest::READABLE);
        let afd = match registered {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "network changes are not pushed to open tunnels");
                return;
            }
        };
        loop {
            let Ok(mut ready) = afd.readable().await else {
                return;
            };
            // Cleared before the queue is drained: an announcement after the drain wakes this
            // again.
            ready.clear_ready();
            let Some(p) = proxy.upgrade() else {
                return;
            };
            let epoch = p.interfaces.epoch();
            p.network_changes
                .send_if_modified(|seen| std::mem::replace(seen, epoch) != epoch);
        }
    }

    /// Starts `watch_interfaces` once for this proxy, on the runtime of the caller.
    pub fn watch(self: &Arc<Self>) {
        if !self
            .watching
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            // Taken here, before the caller accepts its first connection, not in the task: a
            // task that ran later could find the descriptor table full (changes then never
            // reach open tunnels) or take the descriptor the accept loop had just freed to
            // answer 503 at the limit.
            if let Some(fd) = self.interfaces.announcements() {
                tokio::spawn(Self::watch_interfaces(Arc::downgrade(self), fd));
            }
        }
    }
}

/// What an attempt passes once it has its dial permit and before its socket connects: if a
/// network change was announced since the vetting, the whole answer is vetted again on the
/// policy now in place, and a refusal fails every attempt (the first refusal is the request's).
#[derive(Debug)]
struct Gate {
    proxy: Arc<NetProxy>,
    epoch: u64,
    addrs: Vec<IpAddr>,
    port: u16,
    refused: Mutex<Option<Reason>>,
}

impl Gate {
    fn pass(&self) -> std::io::Result<()> {
        let proxy = &self.proxy;
        if proxy.interfaces.epoch() == self.epoch {
            return Ok(());
        }
        match proxy.judge_now(&proxy.policy(), &self.addrs, self.port) {
            Ok(()) => Ok(()),
            Err(reason) => {
                let text = reason.text();
                self.refused
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get_or_insert(reason);
                Err(std::io::Error::other(format!(
                    "judged again at dial time: {text}"
                )))
            }
        }
    }

    fn refused(&self) -> Option<Reason> {
        self.refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
