//! The sidecar's own networks as they are *now*: the networks of its non-loopback interfaces,
//! so an address or interface added after start (a container connected to another network) is
//! refused from the next request on. `Watched` reads them again (one netlink dump,
//! `getifaddrs`) only when the kernel has said that an address or link changed since the last
//! read: on a host with many interfaces the dump cost a tunnel set-up 0.1-0.3 ms.
//! Loopback interfaces are left out: loopback is a special range already, and `--allow-cidr`
//! may trust it for tests.
//!
//! Every announced change moves an epoch on (`Interfaces::epoch`): whoever judged an address
//! at one epoch judges it again once the epoch has moved (the dial, an open tunnel), and a list
//! read at an older epoch never stands in for the present. A read can fail (EMFILE at the
//! descriptor limit): the networks are then unknown and a request is refused
//! (`own_networks_unknown`), never judged against the list from before the change nor an empty
//! one. One warning per episode of failures.

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use nix::net::if_::InterfaceFlags;

/// The own networks could not be read, and no earlier read is there to stand in: a request
/// that needs them is refused (`own_networks_unknown`), never judged against an empty list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the sidecar's own networks are unknown: {0}")]
pub struct OwnUnknown(pub String);

/// Where the own networks come from (tests inject fixed ones).
pub trait Interfaces: Send + Sync + std::fmt::Debug {
    /// The networks as they are now.
    fn networks(&self) -> Result<Vec<IpNet>, OwnUnknown>;

    /// How many changes have been announced so far (taking in those queued): an address
    /// judged when this was `e` must be judged again once it is no longer `e`. Read it before
    /// `networks`, so that a change made meanwhile counts as one since the judgement.
    fn epoch(&self) -> u64 {
        0
    }

    /// A descriptor that turns readable when a change is announced, for a task that judges the
    /// open tunnels again (`NetProxy::watch_interfaces`); `None`: changes are never pushed.
    fn announcements(&self) -> Option<std::os::fd::OwnedFd> {
        None
    }
}

/// How the interfaces are read: `System::read` in the proxy; a test puts a failing one in
/// (`Watched::with_reader`) to show that a failed read never opens the own networks.
pub type Reader = fn() -> std::io::Result<Vec<IpNet>>;

/// The interfaces of this network namespace.
#[derive(Debug, Default, Clone, Copy)]
pub struct System;

impl System {
    /// One read (`getifaddrs`: a netlink dump, so it needs descriptors and can fail with
    /// EMFILE) of the non-loopback interfaces' networks, each written with the interface's own
    /// address (`10.1.0.7/16`: `addr()` is the sidecar's, `contains` the whole network), which
    /// the relay never dials.
    pub fn read() -> std::io::Result<Vec<IpNet>> {
        let addrs = nix::ifaddrs::getifaddrs().map_err(std::io::Error::from)?;
        Ok(addrs
            .filter(|a| !a.flags.contains(InterfaceFlags::IFF_LOOPBACK))
            .filter_map(|a| {
                let ip = a.address.as_ref()?;
                let mask = a.netmask.as_ref()?;
                if let (Some(ip), Some(mask)) = (ip.as_sockaddr_in(), mask.as_sockaddr_in()) {
                    let prefix = u32::from(mask.ip()).count_ones();
                    return Ipv4Net::new(ip.ip(), u8::try_from(prefix).ok()?)
                        .ok()
                        .map(IpNet::V4);
                }
                let (ip, mask) = (ip.as_sockaddr_in6()?, mask.as_sockaddr_in6()?);
                let prefix = u128::from(mask.ip()).count_ones();
                Ipv6Net::new(ip.ip(), u8::try_from(prefix).ok()?)
                    .ok()
                    .map(IpNet::V6)
            })
            .collect())
    }
}

impl Interfaces for System {
    fn networks(&self) -> Result<Vec<IpNet>, OwnUnknown> {
        Self::read().map_err(|e| OwnUnknown(e.to_string()))
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
    reader: Reader,
    state: std::sync::Mutex<Known>,
}

/// What the last reads found.
#[derive(Debug, Default)]
struct Known {
    /// Changes announced so far (or suspected: an error on the announcement socket).
    epoch: u64,
    /// The last list read whole, and the epoch it was read at: it stands only while no change
    /// has been announced since.
    last: Option<(Vec<IpNet>, u64)>,
    /// The last read failed (for one warning per episode, and a line when reads work again).
    failing: bool,
}

impl Default for Watched {
    fn default() -> Self {
        Self::new()
    }
}

impl Watched {
    pub fn new() -> Self {
        Self::with_reader(System::read)
    }

    /// Reading the interfaces with `reader` (tests inject failures through it). The first
    /// read is made now, at start-up, while descriptors are plentiful: requests before any
    /// change find a good list.
    pub fn with_reader(reader: Reader) -> Self {
        let w = Self {
            changes: subscribe()
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "no netlink announcements; interfaces are read per dial")
                })
                .ok(),
            reader,
            state: std::sync::Mutex::new(Known::default()),
        };
        // A failure is remembered (and warned about) like any other; the next vetting reads.
        let _ = w.networks();
        w
    }

    /// Takes in the announcements queued (or that could have been missed): the epoch moves on
    /// once if there were any. Called under the state's lock.
    fn drain(&self, known: &mut Known) {
        use nix::errno::Errno;
        use nix::sys::socket::{recv, MsgFlags};
        let Some(fd) = &self.changes else {
            // Nothing announces changes: every call counts as one.
            known.epoch += 1;
            return;
        };
        let mut buf = [0u8; 8192];
        let mut changed = false;
        loop {
            match recv(
                std::os::fd::AsRawFd::as_raw_fd(fd),
                &mut buf,
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(0) | Err(Errno::EAGAIN) => break,
                Ok(_) => changed = true,
                Err(Errno::EINTR) => continue,
                // ENOBUFS: the kernel dropped announcements; anything else: unknown state.
                Err(_) => {
                    changed = true;
                    break;
                }
            }
        }
        if changed {
            known.epoch += 1;
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Known> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
    /// The list as it is now: the last one read while no change has been announced since, else
    /// a new read; `OwnUnknown` when that read fails. One warning per episode of failures, one
    /// line when reads work again.
    fn networks(&self) -> Result<Vec<IpNet>, OwnUnknown> {
        let mut known = self.state();
        // Drained under the lock (a vetting on another thread must not find the queue emptied
        // and the old list still in place), and before the read, so a change made during the
        // read is announced for the next one.
        self.drain(&mut known);
        let epoch = known.epoch;
        if let Some((nets, at)) = &known.last {
            if *at == epoch {
                return Ok(nets.clone());
            }
        }
        match (self.reader)() {
            Ok(nets) => {
                if std::mem::replace(&mut known.failing, false) {
                    tracing::info!("the interfaces can be read again");
                }
                known.last = Some((nets.clone(), epoch));
                Ok(nets)
            }
            Err(e) => {
                if !std::mem::replace(&mut known.failing, true) {
                    tracing::warn!(
                        error = %e,
                        "cannot read the interfaces after a change: requests are refused \
                         (own_networks_unknown) until they can be read again"
                    );
                }
                Err(OwnUnknown(e.to_string()))
            }
        }
    }

    fn epoch(&self) -> u64 {
        let mut known = self.state();
        self.drain(&mut known);
        known.epoch
    }

    fn announcements(&self) -> Option<std::os::fd::OwnedFd> {
        let fd = self.changes.as_ref()?;
        fd.try_clone()
            .inspect_err(
                |e| tracing::warn!(error = %e, "network changes are not pushed to open tunnels"),
            )
            .ok()
    }
}

/// A fixed list (tests; or no interfaces at all).
#[derive(Debug, Default, Clone)]
pub struct Fixed(pub Vec<IpNet>);

impl Interfaces for Fixed {
    fn networks(&self) -> Result<Vec<IpNet>, OwnUnknown> {
        Ok(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Scripted reads for `a_failed_read_after_a_change_is_unknown`: 0 fails, 1 reads one
    /// network, 2 fails again, 3 reads another. (One test uses it: a `fn` has no state.)
    static STEP: AtomicUsize = AtomicUsize::new(0);

    fn scripted() -> std::io::Result<Vec<IpNet>> {
        match STEP.load(Ordering::SeqCst) {
            1 => Ok(vec!["10.1.0.0/16".parse().expect("net")]),
            3 => Ok(vec!["10.3.0.0/16".parse().expect("net")]),
            _ => Err(std::io::Error::from_raw_os_error(nix::libc::EMFILE)),
        }
    }

    /// Issue 38, finding 2, and issue 50, finding 1: a failed read never yields an empty list,
    /// nor the list from before the change it was to take in: the networks are unknown until a
    /// read succeeds. Every call here counts as a change (no announcement socket), and moves
    /// the epoch on.
    #[test]
    fn a_failed_read_after_a_change_is_unknown() {
        let w = Watched {
            changes: None,
            reader: scripted,
            state: std::sync::Mutex::new(Known::default()),
        };
        let ten1: Vec<IpNet> = vec!["10.1.0.0/16".parse().expect("net")];
        STEP.store(0, Ordering::SeqCst);
        let unknown = Err(OwnUnknown("Too many open files (os error 24)".into()));
        assert_eq!(w.networks(), unknown, "no list yet: unknown, not empty");
        assert_eq!(w.networks(), unknown, "and still unknown");
        STEP.store(1, Ordering::SeqCst);
        assert_eq!(w.networks(), Ok(ten1), "retried after the failure");
        STEP.store(2, Ordering::SeqCst);
        let before = w.epoch();
        assert_eq!(
            w.networks(),
            unknown,
            "a failed read after a change does not keep the old list"
        );
        assert!(w.epoch() > before, "the epoch moved on");
        STEP.store(3, Ordering::SeqCst);
        assert_eq!(
            w.networks(),
            Ok(vec!["10.3.0.0/16".parse().expect("net")]),
            "read again after the failure"
        );
    }
}
