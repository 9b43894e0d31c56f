//! The sidecar's own networks as they are *now*: the networks of its non-loopback interfaces,
//! read again for every vetting, so an address or interface added after start (a container
//! connected to another network) is refused from the next request on. Reading them is one
//! netlink dump (`getifaddrs`), tens of microseconds, next to a DNS lookup and a TCP connect.
//! Loopback interfaces are left out: loopback is a special range already, and `--allow-cidr`
//! may trust it for tests.

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use nix::net::if_::InterfaceFlags;

/// Where the own networks come from (tests inject fixed ones).
pub trait Interfaces: Send + Sync + std::fmt::Debug {
    fn networks(&self) -> Vec<IpNet>;
}

/// The interfaces of this network namespace.
#[derive(Debug, Default, Clone, Copy)]
pub struct System;

impl Interfaces for System {
    fn networks(&self) -> Vec<IpNet> {
        let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
            // Fail closed would refuse everything; an unreadable interface list is a broken
            // namespace, and the explicit --own-cidr still applies. Say so loudly.
            tracing::warn!("cannot read the interfaces; only --own-cidr is enforced");
            return Vec::new();
        };
        addrs
            .filter(|a| !a.flags.contains(InterfaceFlags::IFF_LOOPBACK))
            .filter_map(|a| {
                let ip = a.address.as_ref()?;
                let mask = a.netmask.as_ref()?;
                if let (Some(ip), Some(mask)) = (ip.as_sockaddr_in(), mask.as_sockaddr_in()) {
                    let prefix = u32::from(mask.ip()).count_ones();
                    return Ipv4Net::new(ip.ip(), u8::try_from(prefix).ok()?)
                        .ok()
                        .map(|n| IpNet::V4(n.trunc()));
                }
                let (ip, mask) = (ip.as_sockaddr_in6()?, mask.as_sockaddr_in6()?);
                let prefix = u128::from(mask.ip()).count_ones();
                Ipv6Net::new(ip.ip(), u8::try_from(prefix).ok()?)
                    .ok()
                    .map(|n| IpNet::V6(n.trunc()))
            })
            .collect()
    }
}

/// A fixed list (tests; or no interfaces at all).
#[derive(Debug, Default, Clone)]
pub struct Fixed(pub Vec<IpNet>);

impl Interfaces for Fixed {
    fn networks(&self) -> Vec<IpNet> {
        self.0.clone()
    }
}
