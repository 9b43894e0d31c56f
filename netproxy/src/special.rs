//! The special-purpose address table as typed constants: every entry of the IANA IPv4 and IPv6
//! Special-Purpose Address Registries (as of 2025, including the entries that RFCs later narrowed
//! inside a wider one), plus the ranges that are not in the registries but are never a public
//! destination either: IPv4 multicast, IPv6 multicast, site-local, IPv4-compatible IPv6 and
//! SIIT's IPv4-translated form. An address is named by the *most specific* range that holds it,
//! so a narrow row (255.255.255.255/32 inside 240.0.0.0/4, Teredo inside 2001::/23) is never
//! shadowed by a wider one. Pure; `tests/iana_registry.rs` walks the registries against it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is special. The names are what logs and `X-Netproxy-Error` say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Special {
    ThisNetwork,
    ThisHost,
    Private,
    SharedCgnat,
    Loopback,
    LinkLocal,
    IetfProtocol,
    ServiceContinuity,
    DummyAddress,
    PcpAnycast,
    TurnAnycast,
    DnsSdSrpAnycast,
    Nat64Discovery,
    Documentation,
    As112,
    Amt,
    Relay6to4,
    Relay6a44,
    Benchmarking,
    Multicast,
    Reserved,
    Broadcast,
    Unspecified,
    Ipv4Mapped,
    Ipv4Compatible,
    Ipv4Translated,
    Nat64,
    Nat64Local,
    DiscardOnly,
    DummyPrefix,
    Teredo,
    Orchid,
    OrchidV2,
    DroneDet,
    SixToFour,
    Srv6Sids,
    UniqueLocal,
    SiteLocal,
    /// IPv6 outside `2000::/3`, the only space IANA allocates global unicast from, that no row
    /// names (e.g. `4000::1`, `::1:0:0:0`). Not a row of the tables: `addr::judge` says it
    /// after `classify` found nothing.
    NotGlobalUnicast,
}

impl Special {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ThisNetwork => "this_network",
            Self::ThisHost => "this_host",
            Self::Private => "private",
            Self::SharedCgnat => "cgnat",
            Self::Loopback => "loopback",
            Self::LinkLocal => "link_local",
            Self::IetfProtocol => "ietf_protocol",
            Self::ServiceContinuity => "service_continuity",
            Self::DummyAddress => "dummy_address",
            Self::PcpAnycast => "pcp_anycast",
            Self::TurnAnycast => "turn_anycast",
            Self::DnsSdSrpAnycast => "dns_sd_srp_anycast",
            Self::Nat64Discovery => "nat64_discovery",
            Self::Documentation => "documentation",
            Self::As112 => "as112",
            Self::Amt => "amt",
            Self::Relay6to4 => "6to4_relay",
            Self::Relay6a44 => "6a44_relay",
            Self::Benchmarking => "benchmarking",
            Self::Multicast => "multicast",
            Self::Reserved => "reserved",
            Self::Broadcast => "broadcast",
            Self::Unspecified => "unspecified",
            Self::Ipv4Mapped => "ipv4_mapped",
            Self::Ipv4Compatible => "ipv4_compatible",
            Self::Ipv4Translated => "siit",
            Self::Nat64 => "nat64",
            Self::Nat64Local => "nat64_local",
            Self::DiscardOnly => "discard_only",
            Self::DummyPrefix => "dummy_prefix",
            Self::Teredo => "teredo",
            Self::Orchid => "orchid",
            Self::OrchidV2 => "orchid_v2",
            Self::DroneDet => "drone_det",
            Self::SixToFour => "6to4",
            Self::Srv6Sids => "srv6_sids",
            Self::UniqueLocal => "unique_local",
            Self::SiteLocal => "site_local",
            Self::NotGlobalUnicast => "not_global_unicast",
        }
    }
}

/// An IPv4 range: `base/len` (base has no bits past `len`; a unit test checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range4 {
    pub base: Ipv4Addr,
    pub len: u8,
    pub kind: Special,
}

/// An IPv6 range: `base/len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range6 {
    pub base: Ipv6Addr,
    pub len: u8,
    pub kind: Special,
}

impl Range4 {
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
        ip.to_bits() & mask == self.base.to_bits() & mask
    }
}

impl Range6 {
    pub fn contains(&self, ip: Ipv6Addr) -> bool {
        let mask = u128::MAX
            .checked_shl(128 - u32::from(self.len))
            .unwrap_or(0);
        ip.to_bits() & mask == self.base.to_bits() & mask
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8, kind: Special) -> Range4 {
    Range4 {
        base: Ipv4Addr::new(a, b, c, d),
        len,
        kind,
    }
}

#[allow(clippy::too_many_arguments)]
const fn v6(s: [u16; 8], len: u8, kind: Special) -> Range6 {
    Range6 {
        base: Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        len,
        kind,
    }
}

use Special as S;

/// IANA IPv4 Special-Purpose Address Registry, every row, plus multicast (RFC 5771).
pub const V4: &[Range4] = &[
    v4(0, 0, 0, 0, 8, S::ThisNetwork),
    v4(0, 0, 0, 0, 32, S::ThisHost),
    v4(10, 0, 0, 0, 8, S::Private),
    v4(100, 64, 0, 0, 10, S::SharedCgnat),
    v4(127, 0, 0, 0, 8, S::Loopback),
    v4(169, 254, 0, 0, 16, S::LinkLocal),
    v4(172, 16, 0, 0, 12, S::Private),
    v4(192, 0, 0, 0, 24, S::IetfProtocol),
    v4(192, 0, 0, 0, 29, S::ServiceContinuity),
    v4(192, 0, 0, 8, 32, S::DummyAddress),
    v4(192, 0, 0, 9, 32, S::PcpAnycast),
    v4(192, 0, 0, 10, 32, S::TurnAnycast),
    v4(192, 0, 0, 170, 32, S::Nat64Discovery),
    v4(192, 0, 0, 171, 32, S::Nat64Discovery),
    v4(192, 0, 2, 0, 24, S::Documentation),
    v4(192, 31, 196, 0, 24, S::As112),
    v4(192, 52, 193, 0, 24, S::Amt),
    v4(192, 88, 99, 0, 24, S::Relay6to4),
    v4(192, 88, 99, 2, 32, S::Relay6a44),
    v4(192, 168, 0, 0, 16, S::Private),
    v4(192, 175, 48, 0, 24, S::As112),
    v4(198, 18, 0, 0, 15, S::Benchmarking),
    v4(198, 51, 100, 0, 24, S::Documentation),
    v4(203, 0, 113, 0, 24, S::Documentation),
    v4(224, 0, 0, 0, 4, S::Multicast),
    v4(240, 0, 0, 0, 4, S::Reserved),
    v4(255, 255, 255, 255, 32, S::Broadcast),
];

/// IANA IPv6 Special-Purpose Address Registry, every row, plus IPv4-compatible (deprecated,
/// RFC 4291), SIIT's IPv4-translated form (RFC 2765), site-local (RFC 3879) and multicast.
pub const V6: &[Range6] = &[
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, S::Unspecified),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, S::Loopback),
    v6([0, 0, 0, 0, 0, 0, 0, 0], 96, S::Ipv4Compatible),
    v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, S::Ipv4Mapped),
    v6([0, 0, 0, 0, 0xffff, 0, 0, 0], 96, S::Ipv4Translated),
    v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, S::Nat64),
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, S::Nat64Local),
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, S::DiscardOnly),
    v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64, S::DummyPrefix),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, S::IetfProtocol),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, S::Teredo),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 1], 128, S::PcpAnycast),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 2], 128, S::TurnAnycast),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 3], 128, S::DnsSdSrpAnycast),
    v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48, S::Benchmarking),
    v6([0x2001, 3, 0, 0, 0, 0, 0, 0], 32, S::Amt),
    v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48, S::As112),
    v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28, S::Orchid),
    v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28, S::OrchidV2),
    v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0], 28, S::DroneDet),
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, S::Documentation),
    v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, S::SixToFour),
    v6([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48, S::As112),
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, S::Documentation),
    v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, S::Srv6Sids),
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, S::UniqueLocal),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, S::LinkLocal),
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, S::SiteLocal),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, S::Multicast),
];

/// The most specific special-purpose range `ip` is in, if any.
pub fn classify(ip: IpAddr) -> Option<Special> {
    match ip {
        IpAddr::V4(a) => V4
            .iter()
            .filter(|r| r.contains(a))
            .max_by_key(|r| r.len)
            .map(|r| r.kind),
        IpAddr::V6(a) => V6
            .iter()
            .filter(|r| r.contains(a))
            .max_by_key(|r| r.len)
            .map(|r| r.kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_base_is_its_network_and_no_row_is_repeated() {
        for r in V4 {
            assert!(r.len <= 32 && r.contains(r.base), "{r:?}");
            let mask = u32::MAX.checked_shl(32 - u32::from(r.len)).unwrap_or(0);
            assert_eq!(r.base.to_bits() & !mask, 0, "{r:?}");
            assert_eq!(
                V4.iter()
                    .filter(|o| (o.base, o.len) == (r.base, r.len))
                    .count(),
                1
            );
        }
        for r in V6 {
            let mask = u128::MAX.checked_shl(128 - u32::from(r.len)).unwrap_or(0);
            assert_eq!(r.base.to_bits() & !mask, 0, "{r:?}");
            assert_eq!(
                V6.iter()
                    .filter(|o| (o.base, o.len) == (r.base, r.len))
                    .count(),
                1
            );
        }
    }

    #[test]
    fn the_most_specific_row_names_an_address() {
        let cases = [
            ("127.0.0.1", Some(S::Loopback)),
            ("169.254.169.254", Some(S::LinkLocal)),
            ("100.100.100.200", Some(S::SharedCgnat)),
            ("0.0.0.0", Some(S::ThisHost)),
            ("0.1.2.3", Some(S::ThisNetwork)),
            ("10.1.2.3", Some(S::Private)),
            ("172.20.0.2", Some(S::Private)),
            ("192.168.1.1", Some(S::Private)),
            ("192.0.0.9", Some(S::PcpAnycast)),
            ("192.0.0.100", Some(S::IetfProtocol)),
            ("192.88.99.2", Some(S::Relay6a44)),
            ("224.0.0.251", Some(S::Multicast)),
            ("255.255.255.255", Some(S::Broadcast)),
            ("255.255.255.254", Some(S::Reserved)),
            ("8.8.8.8", None),
            ("::1", Some(S::Loopback)),
            ("::", Some(S::Unspecified)),
            ("::7f00:1", Some(S::Ipv4Compatible)),
            ("::ffff:0:a9fe:a9fe", Some(S::Ipv4Translated)),
            ("64:ff9b::a9fe:a9fe", Some(S::Nat64)),
            ("64:ff9b:1::1", Some(S::Nat64Local)),
            ("2002:7f00:1::1", Some(S::SixToFour)),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Some(S::Teredo)),
            ("2001:1::1", Some(S::PcpAnycast)),
            ("2001:100::1", Some(S::IetfProtocol)),
            ("fd00::1", Some(S::UniqueLocal)),
            ("fe80::1", Some(S::LinkLocal)),
            ("fec0::1", Some(S::SiteLocal)),
            ("ff02::1", Some(S::Multicast)),
            ("2606:4700::1111", None),
        ];
        for (ip, want) in cases {
            assert_eq!(classify(ip.parse().expect("ip")), want, "{ip}");
        }
    }
}
