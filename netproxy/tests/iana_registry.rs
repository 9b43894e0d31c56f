//! Case 4 of issue 14: the special-address table covers the whole IANA IPv4 and IPv6
//! Special-Purpose Address Registries. The registries are transcribed below row by row
//! (iana-ipv4-special-registry and iana-ipv6-special-registry, 2025 revisions, every row
//! including those that narrow a wider one); each must be a row of the table, exactly, and
//! its first and last address must be classified as special by that row or a narrower one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use netproxy::special::{classify, V4, V6};

/// Address block, name as the registry gives it.
const IPV4_REGISTRY: &[(&str, &str)] = &[
    ("0.0.0.0/8", "\"This network\""),
    ("0.0.0.0/32", "\"This host on this network\""),
    ("10.0.0.0/8", "Private-Use"),
    ("100.64.0.0/10", "Shared Address Space"),
    ("127.0.0.0/8", "Loopback"),
    ("169.254.0.0/16", "Link Local"),
    ("172.16.0.0/12", "Private-Use"),
    ("192.0.0.0/24", "IETF Protocol Assignments"),
    ("192.0.0.0/29", "IPv4 Service Continuity Prefix"),
    ("192.0.0.8/32", "IPv4 dummy address"),
    ("192.0.0.9/32", "Port Control Protocol Anycast"),
    ("192.0.0.10/32", "Traversal Using Relays around NAT Anycast"),
    ("192.0.0.170/32", "NAT64/DNS64 Discovery"),
    ("192.0.0.171/32", "NAT64/DNS64 Discovery"),
    ("192.0.2.0/24", "Documentation (TEST-NET-1)"),
    ("192.31.196.0/24", "AS112-v4"),
    ("192.52.193.0/24", "AMT"),
    ("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)"),
    ("192.88.99.2/32", "6a44-relay anycast address"),
    ("192.168.0.0/16", "Private-Use"),
    ("192.175.48.0/24", "Direct Delegation AS112 Service"),
    ("198.18.0.0/15", "Benchmarking"),
    ("198.51.100.0/24", "Documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "Documentation (TEST-NET-3)"),
    ("240.0.0.0/4", "Reserved"),
    ("255.255.255.255/32", "Limited Broadcast"),
];

const IPV6_REGISTRY: &[(&str, &str)] = &[
    ("::1/128", "Loopback Address"),
    ("::/128", "Unspecified Address"),
    ("::ffff:0:0/96", "IPv4-mapped Address"),
    ("64:ff9b::/96", "IPv4-IPv6 Translat."),
    ("64:ff9b:1::/48", "IPv4-IPv6 Translat."),
    ("100::/64", "Discard-Only Address Block"),
    ("100:0:0:1::/64", "Dummy IPv6 Prefix"),
    ("2001::/23", "IETF Protocol Assignments"),
    ("2001::/32", "TEREDO"),
    ("2001:1::1/128", "Port Control Protocol Anycast"),
    ("2001:1::2/128", "Traversal Using Relays around NAT Anycast"),
    (
        "2001:1::3/128",
        "DNS-SD Service Registration Protocol Anycast",
    ),
    ("2001:2::/48", "Benchmarking"),
    ("2001:3::/32", "AMT"),
    ("2001:4:112::/48", "AS112-v6"),
    ("2001:10::/28", "Deprecated (previously ORCHID)"),
    ("2001:20::/28", "ORCHIDv2"),
    (
        "2001:30::/28",
        "Drone Remote ID Protocol Entity Tags (DETs) Prefix",
    ),
    ("2001:db8::/32", "Documentation"),
    ("2002::/16", "6to4"),
    ("2620:4f:8000::/48", "Direct Delegation AS112 Service"),
    ("3fff::/20", "Documentation"),
    ("5f00::/16", "Segment Routing (SRv6) SIDs"),
    ("fc00::/7", "Unique-Local"),
    ("fe80::/10", "Link-Local Unicast"),
];

/// Not in the registries, never a public destination either.
const BEYOND: &[&str] = &[
    "224.0.0.0/4",
    "::/96",
    "::ffff:0:0:0/96",
    "fec0::/10",
    "ff00::/8",
];

fn in_table(net: IpNet) -> bool {
    match net {
        IpNet::V4(n) => V4
            .iter()
            .any(|r| Ipv4Net::new(r.base, r.len).ok() == Some(n)),
        IpNet::V6(n) => V6
            .iter()
            .any(|r| Ipv6Net::new(r.base, r.len).ok() == Some(n)),
    }
}

#[test]
fn every_registry_entry_is_in_the_table_and_classified() {
    let all = IPV4_REGISTRY
        .iter()
        .chain(IPV6_REGISTRY)
        .map(|(n, name)| (*n, *name))
        .chain(BEYOND.iter().map(|n| (*n, "beyond the registries")));
    let mut checked = 0;
    for (text, name) in all {
        let net: IpNet = text.parse().expect("a registry prefix");
        assert!(in_table(net), "{text} ({name}) is not a row of the table");
        let (first, last) = match net {
            IpNet::V4(n) => (IpAddr::V4(n.network()), IpAddr::V4(n.broadcast())),
            IpNet::V6(n) => (IpAddr::V6(n.network()), IpAddr::V6(n.broadcast())),
        };
        for ip in [first, last] {
            assert!(
                classify(ip).is_some(),
                "{ip} in {text} ({name}) not special"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 26 + 25 + 5);
    assert_eq!(
        V4.len() + V6.len(),
        checked,
        "and the table holds nothing else"
    );
    // Between the rows, ordinary addresses stay ordinary.
    for ip in [
        IpAddr::V4(Ipv4Addr::new(8, 8, 8, 8)),
        IpAddr::V4(Ipv4Addr::new(192, 0, 1, 1)),
        IpAddr::V6(Ipv6Addr::new(0x2606, 0x4700, 0, 0, 0, 0, 0, 0x1111)),
    ] {
        assert_eq!(classify(ip), None, "{ip}");
    }
}
