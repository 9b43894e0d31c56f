//! NAT64 translator prefixes and where each puts the IPv4 address it carries (RFC 6052 §2.2).
//!
//! A DNS64 resolver answers a name that has only an A record with an IPv6 address made of the
//! network's translator prefix and that IPv4 address; the translator then connects to the IPv4
//! one. The well-known prefix `64:ff9b::/96` is special-purpose and unpacked by `addr` without
//! any setting. A network-specific prefix (`--nat64-prefix`, e.g. `2001:db8:64::/96`) is
//! ordinary global space, so without this module an address in it would be judged only as
//! itself, and a name pointing at `10.0.0.5` or `169.254.169.254` would reach it through the
//! translator. Pure.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::Ipv6Net;

/// The prefix lengths RFC 6052 defines, each with its own placement of the IPv4 address.
pub const LENGTHS: [u8; 6] = [32, 40, 48, 56, 64, 96];

/// A translator prefix the operator declared, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nat64Prefix(Ipv6Net);

/// Why a `--nat64-prefix` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Nat64Error {
    #[error("{0:?}: not an IPv6 network (e.g. 2001:db8:64::/96)")]
    NotIpv6(String),
    #[error("{0:?}: a NAT64 prefix is /32, /40, /48, /56, /64 or /96 (RFC 6052)")]
    Length(String),
    #[error("{0:?}: host bits are set; write the network itself")]
    HostBits(String),
    #[error("{0:?}: bits 64 to 71 must be zero in a NAT64 prefix (RFC 6052)")]
    UOctet(String),
}

impl std::str::FromStr for Nat64Prefix {
    type Err = Nat64Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let net: Ipv6Net = s.parse().map_err(|_| Nat64Error::NotIpv6(s.to_owned()))?;
        if !LENGTHS.contains(&net.prefix_len()) {
            return Err(Nat64Error::Length(s.to_owned()));
        }
        if net.addr() != net.network() {
            return Err(Nat64Error::HostBits(s.to_owned()));
        }
        // Only a /96 prefix reaches into the u octet; a shorter one leaves it to the address.
        if net.addr().octets()[8] != 0 {
            return Err(Nat64Error::UOctet(s.to_owned()));
        }
        Ok(Self(net))
    }
}

impl fmt::Display for Nat64Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Nat64Prefix {
    /// The IPv4 address `v6` carries, if `v6` is in this prefix.
    pub fn unpack(&self, v6: Ipv6Addr) -> Option<Ipv4Addr> {
        self.0
            .contains(&v6)
            .then(|| carried(self.0.prefix_len(), v6))
    }

    /// The address a DNS64 resolver would synthesize for `v4` under this prefix (the suffix
    /// and the u octet zero).
    pub fn pack(&self, v4: Ipv4Addr) -> Ipv6Addr {
        let mut o = self.0.addr().octets();
        for (at, byte) in positions(self.0.prefix_len()).into_iter().zip(v4.octets()) {
            o[at] = byte;
        }
        Ipv6Addr::from(o)
    }
}

/// Where the four IPv4 bytes sit after a prefix of `len` bits: straight after it, skipping
/// byte 8 (the u octet).
fn positions(len: u8) -> [usize; 4] {
    let start = usize::from(len / 8);
    let mut at = [0; 4];
    let mut i = start;
    for slot in &mut at {
        if i == 8 {
            i += 1;
        }
        *slot = i;
        i += 1;
    }
    at
}

/// The IPv4 address an address under a prefix of `len` bits carries (`len` one of `LENGTHS`).
pub fn carried(len: u8, v6: Ipv6Addr) -> Ipv4Addr {
    let o = v6.octets();
    let [a, b, c, d] = positions(len).map(|i| o[i]);
    Ipv4Addr::new(a, b, c, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Nat64Prefix {
        s.parse().expect("prefix")
    }

    #[test]
    fn rfc6052_examples_unpack_to_192_0_2_33() {
        // RFC 6052 §2.4's table: 192.0.2.33 under each prefix length.
        let cases = [
            ("2001:db8::/32", "2001:db8:c000:221::"),
            ("2001:db8:100::/40", "2001:db8:1c0:2:21::"),
            ("2001:db8:122::/48", "2001:db8:122:c000:2:2100::"),
            ("2001:db8:122:300::/56", "2001:db8:122:3c0:0:221::"),
            ("2001:db8:122:344::/64", "2001:db8:122:344:c0:2:2100:0"),
            ("2001:db8:122:344::/96", "2001:db8:122:344::192.0.2.33"),
        ];
        let v4: Ipv4Addr = "192.0.2.33".parse().expect("v4");
        for (prefix, v6) in cases {
            let v6: Ipv6Addr = v6.parse().expect("v6");
            assert_eq!(p(prefix).unpack(v6), Some(v4), "{prefix}");
            assert_eq!(p(prefix).pack(v4), v6, "{prefix}");
        }
    }

    #[test]
    fn an_address_outside_the_prefix_carries_nothing() {
        let v6: Ipv6Addr = "2001:db9::a9fe:a9fe".parse().expect("v6");
        assert_eq!(p("2001:db8::/96").unpack(v6), None);
    }

    #[test]
    fn bad_prefixes_are_refused_with_a_reason() {
        let cases = [
            ("10.0.0.0/8", Nat64Error::NotIpv6("10.0.0.0/8".into())),
            ("2001:db8::", Nat64Error::NotIpv6("2001:db8::".into())),
            ("2001:db8::/33", Nat64Error::Length("2001:db8::/33".into())),
            (
                "2001:db8::/128",
                Nat64Error::Length("2001:db8::/128".into()),
            ),
            (
                "2001:db8::1/96",
                Nat64Error::HostBits("2001:db8::1/96".into()),
            ),
            (
                "2001:db8:0:0:100::/96",
                Nat64Error::UOctet("2001:db8:0:0:100::/96".into()),
            ),
        ];
        for (s, want) in cases {
            assert_eq!(s.parse::<Nat64Prefix>(), Err(want), "{s}");
        }
    }

    proptest! {
        #[test]
        fn pack_then_unpack_gives_the_ipv4_back(
            len_at in 0..LENGTHS.len(),
            net in any::<u128>(),
            v4 in any::<u32>(),
        ) {
            let len = LENGTHS[len_at];
            let mut o = (net & (u128::MAX << (128 - u32::from(len)))).to_be_bytes();
            o[8] = 0;
            let prefix = Nat64Prefix(Ipv6Net::new(Ipv6Addr::from(o), len).expect("len"));
            let v4 = Ipv4Addr::from(v4);
            prop_assert_eq!(prefix.unpack(prefix.pack(v4)), Some(v4));
        }
    }
}
