//! Where a relayed connection may go: its relay's one configured target, and only once the
//! target's addresses are shown to be a peer on one of the sidecar's own networks (the
//! sandbox's internal network). A name is looked up at each connection (the sandbox may be
//! created after the sidecar, and gets a new address when it is re-created), with the same
//! resolver and timeout as the proxy's; the answer vetted is the one dialed (pinned for that
//! connection, never looked up twice), and every address of it must pass `judge`: one refused
//! address refuses the connection. An IP target is judged the same way at each connection
//! (the sidecar may not be on the sandbox's network yet when it starts).
//!
//! `judge` is pure: an address is refused if it is special (loopback, unspecified,
//! multicast, link-local: nothing a sandbox answers on), one of the sidecar's own addresses (a
//! relay into the sidecar itself), or outside every network of the sidecar's interfaces, or
//! their network or broadcast address. The interfaces are read now (`own`), and judged again at
//! dial time and while the connection is open if a change is announced.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use tokio::net::TcpStream;

use crate::addr::fold;
use crate::proxy::NetProxy;
use crate::target::{Host, Target};

/// Why a relayed connection was not carried (the `reason` of its log line, and its metric's
/// `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayRefusal {
    ConnectionLimit,
    ClientConnectionLimit,
    DnsTimeout,
    DnsFailure,
    DnsNoAnswer,
    OwnNetworksUnknown,
    /// Loopback, unspecified, multicast or link-local.
    SpecialAddress,
    /// One of the sidecar's own addresses.
    SidecarAddress,
    /// Outside every network of the sidecar's interfaces (or their network or broadcast
    /// address).
    NotSidecarNetwork,
    ConnectTimeout,
    ConnectFailed,
}

impl RelayRefusal {
    pub const ALL: [Self; 11] = [
        Self::ConnectionLimit,
        Self::ClientConnectionLimit,
        Self::DnsTimeout,
        Self::DnsFailure,
        Self::DnsNoAnswer,
        Self::OwnNetworksUnknown,
        Self::SpecialAddress,
        Self::SidecarAddress,
        Self::NotSidecarNetwork,
        Self::ConnectTimeout,
        Self::ConnectFailed,
    ];

    pub const fn text(self) -> &'static str {
        match self {
            Self::ConnectionLimit => "connection_limit",
            Self::ClientConnectionLimit => "client_connection_limit",
            Self::DnsTimeout => "dns_timeout",
            Self::DnsFailure => "dns_failure",
            Self::DnsNoAnswer => "dns_no_answer",
            Self::OwnNetworksUnknown => "own_networks_unknown",
            Self::SpecialAddress => "special_address",
            Self::SidecarAddress => "sidecar_address",
            Self::NotSidecarNetwork => "not_sidecar_network",
            Self::ConnectTimeout => "connect_timeout",
            Self::ConnectFailed => "connect_failed",
        }
    }
}

/// Whether the relay may dial `ip`, given the sidecar's interface networks (each with the
/// sidecar's own address in it, as `own::System` reads them): `Ok` with the folded address.
/// Pure.
pub fn judge(ip: IpAddr, interfaces: &[IpNet]) -> Result<IpAddr, RelayRefusal> {
    let ip = fold(ip);
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local() || v4.is_broadcast(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    };
    if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || link_local {
        return Err(RelayRefusal::SpecialAddress);
    }
    if interfaces.iter().any(|n| n.addr() == ip) {
        return Err(RelayRefusal::SidecarAddress);
    }
    let host_of = |n: &IpNet| {
        // A /31 or /32 (/127, /128) has no network or broadcast address to leave out.
        let edges = n.prefix_len() + 1 < n.max_prefix_len();
        n.contains(&ip) && !(edges && (ip == n.network() || ip == n.broadcast()))
    };
    if !interfaces.iter().any(host_of) {
        return Err(RelayRefusal::NotSidecarNetwork);
    }
    Ok(ip)
}

/// The addresses `target` may be dialed at now, and the network epoch they were judged at.
pub(crate) async fn vet(
    proxy: &NetProxy,
    target: &Target,
) -> Result<(Vec<IpAddr>, u64), (RelayRefusal, Vec<IpAddr>)> {
    let answers = match &target.host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(name) => {
            use crate::metrics::Lookup;
            let started = std::time::Instant::now();
            let looked = tokio::time::timeout(proxy.dns_timeout, proxy.resolver.lookup(name)).await;
            let (how, answer) = match looked {
                Err(_) => (Lookup::Timeout, Err(RelayRefusal::DnsTimeout)),
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                    (Lookup::NoAddresses, Err(RelayRefusal::DnsFailure))
                }
                Ok(Err(_)) => (Lookup::Failed, Err(RelayRefusal::DnsFailure)),
                Ok(Ok(a)) if a.is_empty() => (Lookup::NoAddresses, Err(RelayRefusal::DnsNoAnswer)),
                Ok(Ok(a)) => (Lookup::Answered, Ok(a)),
            };
            proxy.metrics.lookup(started, how);
            answer.map_err(|r| (r, Vec::new()))?
        }
    };
    let epoch = proxy.interfaces.epoch();
    let judged = judge_all(proxy, &answers).map_err(|r| (r, answers.clone()))?;
    Ok((judged, epoch))
}

/// Every address judged on the interfaces as they are now.
pub(crate) fn judge_all(proxy: &NetProxy, addrs: &[IpAddr]) -> Result<Vec<IpAddr>, RelayRefusal> {
    let own = proxy
        .interfaces
        .networks()
        .map_err(|_| RelayRefusal::OwnNetworksUnknown)?;
    addrs.iter().map(|ip| judge(*ip, &own)).collect()
}

/// Races the vetted addresses within the connect timeout, each attempt holding a dial permit
/// for `client`; an attempt that has its permit judges the answer again first if a network
/// change was announced since `epoch` (and a refusal there is the connection's).
pub(crate) async fn dial(
    proxy: &Arc<NetProxy>,
    addrs: &[IpAddr],
    port: u16,
    epoch: u64,
    client: IpAddr,
) -> Result<(TcpStream, SocketAddr), RelayRefusal> {
    let refused = Arc::new(std::sync::Mutex::new(None::<RelayRefusal>));
    let all: Arc<[IpAddr]> = addrs.into();
    let targets: Vec<SocketAddr> = addrs.iter().map(|ip| SocketAddr::new(*ip, port)).collect();
    let race = crate::dial::race(&targets, crate::dial::STAGGER, |addr| {
        let permit = proxy.dials.clone().permit(client);
        let (proxy, refused, all) = (proxy.clone(), refused.clone(), all.clone());
        async move {
            let _permit = permit.await?;
            if proxy.interfaces.epoch() != epoch {
                if let Err(r) = judge_all(&proxy, &all) {
                    refused
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .get_or_insert(r);
                    return Err(std::io::Error::other(r.text()));
                }
            }
            TcpStream::connect(addr).await
        }
    });
    let raced = tokio::time::timeout(proxy.connect_timeout, race).await;
    if let Some(r) = *refused
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
    {
        return Err(r);
    }
    match raced {
        Err(_) => Err(RelayRefusal::ConnectTimeout),
        Ok(Err(_)) => Err(RelayRefusal::ConnectFailed),
        Ok(Ok(won)) => Ok(won),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judge_table() {
        use RelayRefusal as R;
        let ifaces: Vec<IpNet> = [
            "10.88.0.1/24",
            "172.18.0.3/16",
            "fd00:88::1/64",
            "10.9.9.9/32",
        ]
        .iter()
        .map(|n| n.parse().expect("net"))
        .collect();
        let cases: &[(&str, Result<&str, R>)] = &[
            ("10.88.0.2", Ok("10.88.0.2")),
            ("::ffff:10.88.0.2", Ok("10.88.0.2")),
            ("172.18.200.7", Ok("172.18.200.7")),
            ("fd00:88::5", Ok("fd00:88::5")),
            ("10.88.0.1", Err(R::SidecarAddress)),
            ("172.18.0.3", Err(R::SidecarAddress)),
            ("fd00:88::1", Err(R::SidecarAddress)),
            ("10.9.9.9", Err(R::SidecarAddress)),
            ("10.88.0.0", Err(R::NotSidecarNetwork)),
            ("10.88.0.255", Err(R::NotSidecarNetwork)),
            ("10.88.1.2", Err(R::NotSidecarNetwork)),
            ("8.8.8.8", Err(R::NotSidecarNetwork)),
            ("fd00:89::5", Err(R::NotSidecarNetwork)),
            ("127.0.0.1", Err(R::SpecialAddress)),
            ("::1", Err(R::SpecialAddress)),
            ("0.0.0.0", Err(R::SpecialAddress)),
            ("169.254.169.254", Err(R::SpecialAddress)),
            ("fe80::1", Err(R::SpecialAddress)),
            ("224.0.0.1", Err(R::SpecialAddress)),
            ("255.255.255.255", Err(R::SpecialAddress)),
        ];
        for (ip, want) in cases {
            let got = judge(ip.parse().expect("ip"), &ifaces);
            let want = want.map(|w| w.parse::<IpAddr>().expect("ip"));
            assert_eq!(got, want, "{ip}");
        }
        assert_eq!(
            judge("10.88.0.2".parse().expect("ip"), &[]),
            Err(R::NotSidecarNetwork),
            "no interfaces: nothing is the sandbox"
        );
    }
}
