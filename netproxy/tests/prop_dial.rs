//! The property of issue 14: whatever the target string and whatever the resolver answers,
//! the addresses the pipeline would dial (`Policy::decide_name`, then `Policy::vet`, exactly
//! what `proxy` runs between the lookup and the dial) hold no special-purpose address, and no
//! IPv6 address embedding one, unless an operator `--allow-cidr` names exactly that address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use netproxy::addr::embedded;
use netproxy::nat64::{Nat64Prefix, LENGTHS};
use netproxy::policy::Policy;
use netproxy::rules::{NameDecision, Rule};
use netproxy::special::{classify, V4, V6};
use netproxy::target::{parse_authority, Host};
use proptest::prelude::*;

/// An IPv4 address: often inside a special row, sometimes anywhere.
fn v4() -> impl Strategy<Value = Ipv4Addr> {
    prop_oneof![
        (0..V4.len(), any::<u32>()).prop_map(|(i, bits)| {
            let r = V4[i];
            let mask = u32::MAX.checked_shl(32 - u32::from(r.len)).unwrap_or(0);
            Ipv4Addr::from(r.base.to_bits() & mask | bits & !mask)
        }),
        any::<u32>().prop_map(Ipv4Addr::from),
    ]
}

/// An IPv6 address: inside a special row, a translator form around an IPv4 from `v4`, or
/// anywhere.
fn v6() -> impl Strategy<Value = Ipv6Addr> {
    prop_oneof![
        (0..V6.len(), any::<u128>()).prop_map(|(i, bits)| {
            let r = V6[i];
            let mask = u128::MAX.checked_shl(128 - u32::from(r.len)).unwrap_or(0);
            Ipv6Addr::from(r.base.to_bits() & mask | bits & !mask)
        }),
        (v4(), 0..6u8, any::<u64>()).prop_map(|(a, form, rest)| {
            let x = u128::from(a.to_bits());
            let r = u128::from(rest);
            Ipv6Addr::from(match form {
                0 => 0x0064_ff9b_0000_0000_0000_0000_0000_0000 | x,
                1 => 0x0064_ff9b_0001_0000_0000_0000_0000_0000 | x,
                2 => 0x2002_0000_0000_0000_0000_0000_0000_0000 | x << 80 | r & 0xffff_ffff_ffff,
                3 => 0x2001_0000_0000_0000_0000_0000_0000_0000 | x << 64 | u128::from(!a.to_bits()),
                4 => 0x0000_0000_0000_0000_ffff_0000_0000_0000 | x,
                _ => 0x0000_0000_0000_0000_0000_ffff_0000_0000 | x,
            })
        }),
        any::<u128>().prop_map(Ipv6Addr::from),
    ]
}

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![v4().prop_map(IpAddr::V4), v6().prop_map(IpAddr::V6)]
}

/// A target string: well formed around a name or an address in its many spellings, or junk.
fn target() -> impl Strategy<Value = String> {
    let port = 1..=65535u16;
    prop_oneof![
        ("[a-z]{1,8}", port.clone()).prop_map(|(n, p)| format!("{n}.test:{p}")),
        (v4(), port.clone()).prop_map(|(a, p)| format!("{a}:{p}")),
        (any::<u32>(), port.clone()).prop_map(|(a, p)| format!("{a}:{p}")),
        (any::<u32>(), port.clone()).prop_map(|(a, p)| format!("0x{a:x}:{p}")),
        (v6(), port).prop_map(|(a, p)| format!("[{a}]:{p}")),
        "\\PC{0,40}",
    ]
}

/// Whether `a` may be dialed under the property: not special, or named exactly.
fn named_or_ordinary(a: IpAddr, allow: &[IpNet]) -> bool {
    let exact = |a: IpAddr| {
        allow
            .iter()
            .any(|n| n.addr() == a && n.prefix_len() == n.max_prefix_len())
    };
    !(classify(a).is_some() || std_special(a)) || exact(a)
}

/// A second opinion, independent of the table: what the standard library calls special.
fn std_special(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => {
            v.is_private()
                || v.is_loopback()
                || v.is_link_local()
                || v.is_multicast()
                || v.is_unspecified()
                || v.is_broadcast()
                || v.is_documentation()
        }
        IpAddr::V6(v) => {
            v.is_loopback()
                || v.is_unspecified()
                || v.is_multicast()
                || v.to_ipv4_mapped().is_some()
                || v.is_unique_local()
                || v.is_unicast_link_local()
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn nothing_special_is_dialed_unless_named_exactly(
        target in target(),
        answers in prop::collection::vec(ip(), 1..5),
        named in prop::collection::vec(ip(), 0..4),
        name_answers_too in any::<bool>(),
    ) {
        let Ok(t) = parse_authority(&target) else {
            return Ok(());
        };
        // Operator rules: every name and the target's own address are allowed by name, so
        // the address vetting is what decides; some addresses are trusted exactly.
        let mut allow_cidrs: Vec<IpNet> = named.iter().map(|a| IpNet::from(*a)).collect();
        if name_answers_too {
            allow_cidrs.extend(answers.iter().take(1).map(|a| IpNet::from(*a)));
        }
        let policy = Policy {
            allow: vec![
                Rule::parse(&format!("*.test:{}", t.port)).expect("rule"),
                Rule::parse(&format!("{}:{}", t.host, t.port)).expect("rule"),
            ],
            allow_cidrs: allow_cidrs.clone(),
            ..Policy::default()
        };
        let NameDecision::Allow { .. } = policy.decide_name(&t) else {
            return Ok(());
        };
        let answers = match t.host {
            Host::Ip(a) => vec![a],
            Host::Name(_) => answers,
        };
        if let Ok(dial) = policy.vet(&[], &answers, 443) {
            for a in dial {
                prop_assert!(named_or_ordinary(a, &allow_cidrs), "{a} dialed for {target}");
                if let IpAddr::V6(v6) = a {
                    for inner in embedded(v6, &[]) {
                        prop_assert!(
                            named_or_ordinary(IpAddr::V4(inner), &allow_cidrs),
                            "{a} (embedding {inner}) dialed for {target}"
                        );
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Under a declared network-specific NAT64 prefix of any RFC 6052 length, a synthesized
    /// address is dialed exactly when the IPv4 it carries would be.
    #[test]
    fn a_declared_translator_is_judged_by_the_ipv4_it_carries(
        len_at in 0..LENGTHS.len(),
        inner in v4(),
        u_octet in any::<u8>(),
        suffix in any::<u64>(),
    ) {
        let len = LENGTHS[len_at];
        let prefix: Nat64Prefix = format!("2600:64::/{len}").parse().expect("prefix");
        let policy = Policy {
            nat64_prefixes: vec![prefix],
            ..Policy::default()
        };
        // What the translator ignores is the sender's to fill: the u octet, and every bit
        // after the IPv4 (none for /96).
        let mut o = prefix.pack(inner).octets();
        o[8] = if len == 96 { 0 } else { u_octet };
        let ipv4_end = if len == 96 { 16 } else { usize::from(len / 8) + 5 };
        for (i, byte) in o.iter_mut().enumerate().skip(ipv4_end) {
            *byte = suffix.to_be_bytes()[i % 8];
        }
        let outer = IpAddr::V6(Ipv6Addr::from(o));
        prop_assert_eq!(
            policy.vet(&[], &[outer], 443).is_ok(),
            named_or_ordinary(IpAddr::V4(inner), &[]),
            "{} carrying {}", outer, inner
        );
    }
}
