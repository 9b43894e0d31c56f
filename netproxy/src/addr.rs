//! Which addresses a sandbox may never reach, whatever the name resolved to. Checked in this
//! order, first refusal wins:
//!
//! 1. the sidecar's own networks (explicit `--own-cidr` and its interfaces' networks): never
//!    dialable, whatever `--allow-cidr` says;
//! 2. the special-purpose ranges (`special`), loopback among them, unless an operator's
//!    `--allow-cidr` trusts the address.
//!
//! Both checks run on the address itself *and* on every IPv4 it embeds (NAT64 well-known and
//! local-use, the network-specific NAT64 prefixes of `--nat64-prefix`, 6to4, Teredo server and
//! client, SIIT, IPv4-compatible; IPv4-mapped is folded to IPv4 first): trusting a translator
//! prefix (e.g. `64:ff9b::/96` for IPv6-only egress) trusts the translation, never the metadata
//! service or loopback behind it. Pure.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use crate::nat64::{self, Nat64Prefix};
use crate::special::{classify, Special};

/// Why an address may not be dialed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrRefusal {
    /// In one of the sidecar's own networks.
    OwnNetwork,
    /// In a special-purpose range that no `--allow-cidr` trusts.
    Special(Special),
    /// Named by a deny rule (an IP or a network: `Policy::denial`).
    DeniedByRule,
}

impl AddrRefusal {
    /// The reason as logs and `X-Netproxy-Error` say it.
    pub fn reason(self) -> String {
        match self {
            Self::OwnNetwork => "proxy_network".to_owned(),
            Self::Special(s) => format!("special_address:{}", s.as_str()),
            Self::DeniedByRule => "denied_by_rule".to_owned(),
        }
    }
}

/// IPv4-mapped IPv6 as the IPv4 it is: one spelling for policy, dialing and logs.
pub fn fold(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

pub use egress::cidr::unmapped_net;

/// The IPv4 addresses an IPv6 address embeds: Teredo's server and client, the one a declared
/// NAT64 prefix (`nat64`) puts in it, and so on.
///
/// An address in the local-use NAT64 prefix (`64:ff9b:1::/48`, RFC 8215) that no declared
/// prefix covers may be under a /48, /56, /64 or /96 translator inside it. The /96 reading is
/// always returned; the others too unless they fall in 0.0.0.0/8, which is what a /96
/// address's zero middle reads as under them (a translator does not carry traffic to
/// 0.0.0.0/8). So `64:ff9b:1:a9fe:a9:fe00:808:808`, 8.8.8.8 to a /96 translator and
/// 169.254.169.254 to a /48 one, is judged as both.
pub fn embedded(v6: Ipv6Addr, nat64: &[Nat64Prefix]) -> Vec<Ipv4Addr> {
    let o = v6.octets();
    let tail = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    let declared: Vec<Ipv4Addr> = nat64.iter().filter_map(|p| p.unpack(v6)).collect();
    let mut out = match classify(IpAddr::V6(v6)) {
        Some(Special::Nat64Local) if declared.is_empty() => {
            let others = [48, 56, 64]
                .map(|len| nat64::carried(len, v6))
                .into_iter()
                .filter(|v4| v4.octets()[0] != 0);
            std::iter::once(tail).chain(others).collect()
        }
        Some(Special::Nat64Local) => Vec::new(),
        Some(Special::Ipv4Mapped | Special::Ipv4Translated | Special::Nat64) => vec![tail],
        // `::` and `::1` are in ::/96 too, but they are themselves, not 0.0.0.0 and 0.0.0.1.
        Some(Special::Ipv4Compatible) => vec![tail],
        Some(Special::SixToFour) => vec![Ipv4Addr::new(o[2], o[3], o[4], o[5])],
        Some(Special::Teredo) => vec![
            Ipv4Addr::new(o[4], o[5], o[6], o[7]),
            Ipv4Addr::from(!tail.to_bits()),
        ],
        _ => Vec::new(),
    };
    // ISATAP (RFC 5214): an interface ID of 0000:5efe or 0200:5efe (the u bit set) carries
    // the IPv4 of the tunnel end in its last 32 bits, under any /64 prefix, global ones too.
    if matches!(o[8..12], [0x00 | 0x02, 0x00, 0x5e, 0xfe]) {
        out.push(tail);
    }
    out.extend(declared);
    out
}

/// The special-purpose range `ip` is in, or for IPv6 outside `2000::/3` that no row names,
/// `NotGlobalUnicast`: nothing is allocated there, so nothing there is a public destination.
fn kind(ip: IpAddr) -> Option<Special> {
    classify(ip).or(match ip {
        IpAddr::V6(v6) if v6.segments()[0] & 0xe000 != 0x2000 => Some(Special::NotGlobalUnicast),
        _ => None,
    })
}

/// Whether `ip` may be dialed: `Ok` with the folded address to dial, or why not.
pub fn judge(
    ip: IpAddr,
    allow: &[IpNet],
    own: &[IpNet],
    nat64: &[Nat64Prefix],
) -> Result<IpAddr, AddrRefusal> {
    let ip = fold(ip);
    let mut all = vec![ip];
    if let IpAddr::V6(v6) = ip {
        all.extend(embedded(v6, nat64).into_iter().map(IpAddr::V4));
    }
    if all.iter().any(|a| own.iter().any(|n| n.contains(a))) {
        return Err(AddrRefusal::OwnNetwork);
    }
    for a in &all {
        if let Some(kind) = kind(*a) {
            if !allow.iter().any(|n| n.contains(a)) {
                return Err(AddrRefusal::Special(kind));
            }
        }
    }
    Ok(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|n| n.parse().expect("net")).collect()
    }

    #[test]
    fn judge_table() {
        use Special as S;
        let none: &[&str] = &[];
        let lo = &["127.0.0.1/32", "::1/128"];
        let nat64 = &["64:ff9b::/96"];
        let wide = &["10.0.0.0/8", "::/0", "0.0.0.0/0"];
        let own = &["10.77.0.0/24", "192.0.2.0/24"];
        let cases: &[(&str, &[&str], Result<&str, AddrRefusal>)] = &[
            ("8.8.8.8", none, Ok("8.8.8.8")),
            ("::ffff:8.8.8.8", none, Ok("8.8.8.8")),
            ("127.0.0.1", none, Err(AddrRefusal::Special(S::Loopback))),
            ("127.0.0.1", lo, Ok("127.0.0.1")),
            ("127.0.0.2", lo, Err(AddrRefusal::Special(S::Loopback))),
            ("::1", lo, Ok("::1")),
            ("::ffff:127.0.0.1", lo, Ok("127.0.0.1")),
            // Own networks are never overridable, not even by a trust-everything rule.
            ("10.77.0.5", wide, Err(AddrRefusal::OwnNetwork)),
            ("192.0.2.1", wide, Err(AddrRefusal::OwnNetwork)),
            ("10.78.0.5", wide, Ok("10.78.0.5")),
            // ...nor through a translator.
            ("64:ff9b::a4d:5", wide, Err(AddrRefusal::OwnNetwork)),
            // A trusted translator prefix still judges the IPv4 inside.
            ("64:ff9b::808:808", nat64, Ok("64:ff9b::808:808")),
            (
                "64:ff9b::a9fe:a9fe",
                nat64,
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            (
                "64:ff9b::7f00:1",
                nat64,
                Err(AddrRefusal::Special(S::Loopback)),
            ),
            (
                "64:ff9b::a00:1",
                nat64,
                Err(AddrRefusal::Special(S::Private)),
            ),
            (
                "64:ff9b::a9fe:a9fe",
                none,
                Err(AddrRefusal::Special(S::Nat64)),
            ),
            (
                "64:ff9b:1::a9fe:a9fe",
                &["64:ff9b:1::/48"],
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            (
                "2002:a9fe:a9fe::1",
                &["2002::/16"],
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            ("2002:808:808::1", &["2002::/16"], Ok("2002:808:808::1")),
            // Teredo: server 65.54.227.120, client !0x5601_5601 = 169.254.169.254.
            (
                "2001:0:4136:e378:8000:63bf:5601:5601",
                &["2001::/32"],
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            (
                "2001:0:a9fe:a9fe:8000:63bf:f7f7:f7f7",
                &["2001::/32"],
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            (
                "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
                &["2001::/32"],
                Ok("2001:0:4136:e378:8000:63bf:f7f7:f7f7"),
            ),
            (
                "::ffff:0:a9fe:a9fe",
                none,
                Err(AddrRefusal::Special(S::Ipv4Translated)),
            ),
            (
                "::ffff:0:a9fe:a9fe",
                &["::ffff:0:0:0/96"],
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            (
                "::a9fe:a9fe",
                &["::/96"],
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            ("::", &["::/128"], Ok("::")),
        ];
        for (ip, allow, want) in cases {
            let got = judge(ip.parse().expect("ip"), &nets(allow), &nets(own), &[]);
            let want = want.map(|w| w.parse::<IpAddr>().expect("ip"));
            assert_eq!(got, want, "{ip} with {allow:?}");
        }
    }

    #[test]
    fn declared_nat64_prefixes_table() {
        use Special as S;
        let nsp96 = ["2600:64::/96".parse().expect("prefix")];
        let nsp64 = ["2600:64:0:1::/64".parse().expect("prefix")];
        let local48 = ["64:ff9b:1::/48".parse().expect("prefix")];
        let local_a96 = ["64:ff9b:1:a::/96".parse().expect("prefix")];
        let local = &["64:ff9b:1::/48"];
        let none: &[&str] = &[];
        let own = &["10.77.0.0/24"];
        type Case<'a> = (
            &'a str,
            &'a [&'a str],
            &'a [Nat64Prefix],
            Result<&'a str, AddrRefusal>,
        );
        let cases: &[Case] = &[
            // A network-specific prefix is global space: only a declared one is unpacked.
            ("2600:64::a9fe:a9fe", none, &[], Ok("2600:64::a9fe:a9fe")),
            (
                "2600:64::a9fe:a9fe",
                none,
                &nsp96,
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            (
                "2600:64::a00:5",
                none,
                &nsp96,
                Err(AddrRefusal::Special(S::Private)),
            ),
            ("2600:64::a4d:5", none, &nsp96, Err(AddrRefusal::OwnNetwork)),
            ("2600:64::808:808", none, &nsp96, Ok("2600:64::808:808")),
            // A /64 layout puts the IPv4 after the u octet, not at the end.
            (
                "2600:64:0:1:a9:fea9:fe00:0",
                none,
                &nsp64,
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            (
                "2600:64:0:1:8:808:800:0",
                none,
                &nsp64,
                Ok("2600:64:0:1:8:808:800:0"),
            ),
            // The u octet and the suffix are the sender's to fill; the translator ignores them.
            (
                "2600:64:0:1:ffa9:fea9:feff:ffff",
                none,
                &nsp64,
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            // Any other /96 inside the local-use /48 reads as 10.0.0.0 at /56 until declared.
            (
                "64:ff9b:1:a::808:808",
                local,
                &[],
                Err(AddrRefusal::Special(S::Private)),
            ),
            (
                "64:ff9b:1:a::808:808",
                local,
                &local_a96,
                Ok("64:ff9b:1:a::808:808"),
            ),
            // Local-use, undeclared: the /48 reading (169.254.169.254) counts, not only the
            // /96 one (8.8.8.8).
            (
                "64:ff9b:1:a9fe:a9:fe00:808:808",
                local,
                &[],
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            // Declared as a /48 translator, only the /48 reading counts.
            (
                "64:ff9b:1:808:8:800:a9fe:a9fe",
                local,
                &[],
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            (
                "64:ff9b:1:808:8:800:a9fe:a9fe",
                local,
                &local48,
                Ok("64:ff9b:1:808:8:800:a9fe:a9fe"),
            ),
            ("64:ff9b:1::808:808", local, &[], Ok("64:ff9b:1::808:808")),
        ];
        for (ip, allow, nat64, want) in cases {
            let got = judge(ip.parse().expect("ip"), &nets(allow), &nets(own), nat64);
            let want = want.map(|w| w.parse::<IpAddr>().expect("ip"));
            assert_eq!(got, want, "{ip} with {allow:?} and {nat64:?}");
        }
    }

    /// Issue 38, finding 8: IPv6 outside 2000::/3 is refused unless an `--allow-cidr` names
    /// it; ISATAP's interface ID is read as the IPv4 it carries.
    #[test]
    fn outside_global_unicast_and_isatap_table() {
        use Special as S;
        let none: &[&str] = &[];
        let own = nets(&["10.77.0.0/24"]);
        let cases: &[(&str, &[&str], Result<&str, AddrRefusal>)] = &[
            (
                "4000::1",
                none,
                Err(AddrRefusal::Special(S::NotGlobalUnicast)),
            ),
            (
                "::1:0:0:0",
                none,
                Err(AddrRefusal::Special(S::NotGlobalUnicast)),
            ),
            (
                "e000::1",
                none,
                Err(AddrRefusal::Special(S::NotGlobalUnicast)),
            ),
            (
                "1fff:ffff::1",
                none,
                Err(AddrRefusal::Special(S::NotGlobalUnicast)),
            ),
            ("4000::1", &["4000::/16"], Ok("4000::1")),
            (
                "4000::1",
                &["4001::/16"],
                Err(AddrRefusal::Special(S::NotGlobalUnicast)),
            ),
            ("2000::1", none, Ok("2000::1")),
            ("3fff::1", none, Err(AddrRefusal::Special(S::Documentation))),
            ("2a00:1450::1", none, Ok("2a00:1450::1")),
            // The ULA/link-local rows still name themselves first.
            ("fd00::1", none, Err(AddrRefusal::Special(S::UniqueLocal))),
            // ISATAP, both u-bit forms, under a global prefix.
            (
                "2600:1::5efe:a9fe:a9fe",
                none,
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            (
                "2600:1::200:5efe:a9fe:a9fe",
                none,
                Err(AddrRefusal::Special(S::LinkLocal)),
            ),
            (
                "2600:1::200:5efe:7f00:1",
                none,
                Err(AddrRefusal::Special(S::Loopback)),
            ),
            ("2600:1::5efe:a4d:5", none, Err(AddrRefusal::OwnNetwork)),
            ("2600:1::5efe:808:808", none, Ok("2600:1::5efe:808:808")),
            // Not ISATAP: another interface ID.
            (
                "2600:1::100:5efe:a9fe:a9fe",
                none,
                Ok("2600:1::100:5efe:a9fe:a9fe"),
            ),
        ];
        for (ip, allow, want) in cases {
            let got = judge(ip.parse().expect("ip"), &nets(allow), &own, &[]);
            let want = want.map(|w| w.parse::<IpAddr>().expect("ip"));
            assert_eq!(got, want, "{ip} with {allow:?}");
        }
    }

    /// Issue 38, finding 8: a network in IPv4-mapped form is the IPv4 one it means.
    #[test]
    fn mapped_networks_are_read_as_ipv4() {
        let cases: &[(&str, Option<&str>)] = &[
            ("::ffff:11.0.0.0/120", Some("11.0.0.0/24")),
            ("::ffff:11.0.0.5/128", Some("11.0.0.5/32")),
            ("::ffff:0:0/96", Some("0.0.0.0/0")),
            ("::ffff:0:0/95", None),
            ("::/80", None),
            ("::/0", Some("::/0")),
            ("2600::/16", Some("2600::/16")),
            ("10.0.0.0/8", Some("10.0.0.0/8")),
            ("::/96", Some("::/96")),
        ];
        for (net, want) in cases {
            let got = unmapped_net(net.parse().expect("net"));
            let want = want.map(|w| w.parse::<IpNet>().expect("net"));
            assert_eq!(got, want, "{net}");
        }
    }
}
