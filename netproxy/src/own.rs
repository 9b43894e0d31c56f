//! The sidecar's own networks as they are *now*: the networks of its non-loopback interfaces,
//! so an address or interface added after start (a container connected to another network) is
//! refused from the next request on. `Watched` reads them again (one netlink dump,
//! `getifaddrs`) only when the kernel has said that an address or link changed since the last
//! read: on a host with many interfaces the dump cost a tunnel set-up 0.1-0.3 ms.
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

/// `System`, read again only after the kernel announced a change of an address or a link.
///
/// The announcements come on a netlink socket subscribed (before the first read) to the
/// address and link groups; the kernel queues one for every change as it makes it, so a vetting
/// that finds the queue empty sees the interfaces the last read saw. Anything unexpected on
/// that socket (an error, a full queue the kernel dropped announcements from, no socket at all)
/// counts as a change: the worst case is the uncached read of `System`.
#[derive(Debug)]
pub struct Watched {
    changes: Option<std::os::fd::OwnedFd>,
    last: std::sync::Mutex<Option<Vec<IpNet>>>,
}

impl Default for Watched {
    fn default() -> Self {
        Self::new()
    }
}

impl Watched {
    pub fn new() -> Self {
        Self {
            changes: subscribe()
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "no netlink announcements; interfaces are read per dial")
                })
                .ok(),
            last: std::sync::Mutex::new(None),
        }
    }

    /// Whether anything was announced (or could have been missed) since the last call; empties
    /// the queue.
    fn changed(&self) -> bool {
        use nix::errno::Errno;
        use nix::sys::socket::{recv, MsgFlags};
        let Some(fd) = &self.changes else {
            return true;
        };
        let mut buf = [0u8; 8192];
        let mut changed = false;
        loop {
            match recv(
                std::os::fd::AsRawFd::as_raw_fd(fd),
                &mut buf,
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(0) => return changed,
                Ok(_) => changed = true,
                Err(Errno::EAGAIN) => return changed,
                Err(Errno::EINTR) => continue,
                // ENOBUFS: the kernel dropped announcements; anything else: unknown state.
                Err(_) => return true,
            }
        }
    }
}

/// A netlink route socket that receives address and link announcements.
fn subscribe() -> nix::Result<std::os::fd::OwnedFd> {
    use nix::sys::socket::{
        bind, socket, AddressFamily, NetlinkAddr, SockFlag, SockProtocol, SockType,
    };
    const RTMGRP_LINK: u32 = 0x1;
    const RTMGRP_IPV4_IFADDR: u32 = 0x10;
    const RTMGRP_IPV6_IFADDR: u32 = 0x100;
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &NetlinkAddr::new(0, RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR),
    )?;
    Ok(fd)
}

impl Interfaces for Watched {
    fn networks(&self) -> Vec<IpNet> {
        let Ok(mut last) = self.last.lock() else {
            return System.networks();
        };
        // Drained under the lock (a vetting on another thread must not find the queue emptied
        // and the old list still in place), and before the read, so a change made during the
        // read is announced for the next one.
        let changed = self.changed();
        match &*last {
            Some(nets) if !changed => nets.clone(),
            _ => {
                let nets = System.networks();
                *last = Some(nets.clone());
                nets
            }
        }
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
