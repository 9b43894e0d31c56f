//! CIDR networks as egress rules name them (`--allow-cidr`, `--own-cidr`, lifecycle's
//! `--egress-allow-cidr`): parsed, and a network inside IPv4-mapped space read as the IPv4
//! network it means.

use std::net::Ipv6Addr;

use ipnet::IpNet;

/// Why a configured network is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("{flag} {value:?}: not a CIDR network")]
    Unparsed { flag: &'static str, value: String },
    #[error(
        "{flag} {value:?}: reaches into IPv4-mapped space (::ffff:0:0/96) without being inside \
         it; addresses are judged as IPv4 there, so write the IPv4 network itself"
    )]
    Mapped { flag: &'static str, value: String },
}

/// The networks `list` names for `flag`, each as `unmapped_net` reads it.
pub fn cidrs<'a>(
    flag: &'static str,
    list: impl IntoIterator<Item = &'a String>,
) -> Result<Vec<IpNet>, CidrError> {
    list.into_iter()
        .map(|v| {
            let net: IpNet = v.parse().map_err(|_| CidrError::Unparsed {
                flag,
                value: v.clone(),
            })?;
            unmapped_net(net).ok_or_else(|| CidrError::Mapped {
                flag,
                value: v.clone(),
            })
        })
        .collect()
}

/// A configured network as addresses are judged: one inside IPv4-mapped space
/// (`::ffff:0:0/96`) as the IPv4 network it means, since addresses are `fold`ed before any
/// check and a mapped-form network would never match; `None` for one that covers part of
/// mapped space without being inside it (`::ffff:0:0/95` and the like, but not `::/0`, which
/// names all of IPv6 and is read as that).
pub fn unmapped_net(net: IpNet) -> Option<IpNet> {
    let IpNet::V6(v6) = net else {
        return Some(net);
    };
    let len = v6.prefix_len();
    if let (Some(v4), true) = (v6.network().to_ipv4_mapped(), len >= 96) {
        return ipnet::Ipv4Net::new(v4, len - 96).ok().map(IpNet::V4);
    }
    let mapped = ipnet::Ipv6Net::new(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96).ok()?;
    if len > 0 && v6.contains(&mapped) {
        return None;
    }
    Some(net)
}
