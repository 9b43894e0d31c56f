//! Which addresses a sandbox may never reach, whatever the name resolved to: the IANA
//! special-purpose registries for IPv4 and IPv6 (loopback, private, link-local and the cloud
//! metadata address, CGNAT, multicast, reserved, documentation, benchmarking…), every IPv6 form
//! that embeds an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo), and the proxy's own
//! networks. An operator's `--allow-cidr` trusts a range explicitly. Pure.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// IANA IPv4 Special-Purpose Address Registry (plus multicast and the limited broadcast).
const V4: [(&str, &str); 19] = [
    ("0.0.0.0/8", "this_network"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "cgnat"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link_local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "ietf_protocol"),
    ("192.0.2.0/24", "documentation"),
    ("192.31.196.0/24", "as112"),
    ("192.52.193.0/24", "amt"),
    ("192.88.99.0/24", "6to4_relay"),
    ("192.168.0.0/16", "private"),
    ("192.175.48.0/24", "as112"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "broadcast"),
];

/// IANA IPv6 Special-Purpose Address Registry (plus multicast and site-local).
const V6: [(&str, &str); 17] = [
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::ffff:0:0/96", "ipv4_mapped"),
    ("::/96", "ipv4_compatible"),
    ("64:ff9b::/96", "nat64"),
    ("64:ff9b:1::/48", "nat64_local"),
    ("100::/64", "discard_only"),
    ("2001::/23", "ietf_protocol"),
    ("2001::/32", "teredo"),
    ("2001:db8::/32", "documentation"),
    ("2002::/16", "6to4"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "srv6_sids"),
    ("fc00::/7", "unique_local"),
    ("fe80::/10", "link_local"),
    ("fec0::/10", "site_local"),
    ("ff00::/8", "multicast"),
];

/// The special-purpose range `ip` is in, if any (most specific name first for v6 forms).
pub fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => V4
            .iter()
            .find(|(net, _)| contains4(net, v4))
            .map(|(_, n)| *n),
        IpAddr::V6(v6) => {
            // The most specific range names it: 2001::/32 is teredo, not the /23 around it.
            V6.iter()
                .filter_map(|(net, name)| {
                    let n: Ipv6Net = net.parse().ok()?;
                    n.contains(&v6).then_some((n.prefix_len(), *name))
                })
                .max_by_key(|(len, _)| *len)
                .map(|(_, n)| n)
        }
    }
}

fn contains4(net: &str, ip: Ipv4Addr) -> bool {
    net.parse::<Ipv4Net>().is_ok_and(|n| n.contains(&ip))
}

/// Why `ip` may not be dialed, unless an `--allow-cidr` range trusts it.
pub fn refuse(ip: IpAddr, allow: &[IpNet], own: &[IpNet]) -> Option<&'static str> {
    if allow.iter().any(|n| n.contains(&ip)) {
        return None;
    }
    if own.iter().any(|n| n.contains(&ip)) {
        return Some("proxy_network");
    }
    special(ip)
}

/// `Ipv6Addr` helper for tests and logs: the IPv4 inside an embedding form, if any.
pub fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let o = v6.octets();
    let tail = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    match special(IpAddr::V6(v6)) {
        Some("ipv4_mapped" | "ipv4_compatible" | "nat64" | "nat64_local") => Some(tail),
        Some("6to4") => Some(Ipv4Addr::new(o[2], o[3], o[4], o[5])),
        Some("teredo") => {
            let x = !u32::from(tail);
            Some(Ipv4Addr::from(x))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifier_table() {
        let cases = [
            ("127.0.0.1", Some("loopback")),
            ("169.254.169.254", Some("link_local")),
            ("100.100.100.200", Some("cgnat")),
            ("0.0.0.0", Some("this_network")),
            ("10.1.2.3", Some("private")),
            ("172.20.0.2", Some("private")),
            ("192.168.1.1", Some("private")),
            ("224.0.0.251", Some("multicast")),
            ("255.255.255.255", Some("reserved")),
            ("8.8.8.8", None),
            ("::1", Some("loopback")),
            ("::", Some("unspecified")),
            ("64:ff9b::a9fe:a9fe", Some("nat64")),
            ("2002:7f00:1::1", Some("6to4")),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Some("teredo")),
            ("fd00::1", Some("unique_local")),
            ("fe80::1", Some("link_local")),
            ("ff02::1", Some("multicast")),
            ("::7f00:1", Some("ipv4_compatible")),
            ("2606:4700::1111", None),
        ];
        for (ip, want) in cases {
            assert_eq!(special(ip.parse().expect("ip")), want, "{ip}");
        }
        assert_eq!(
            embedded_v4("2002:7f00:1::1".parse().expect("ip")),
            Some(Ipv4Addr::new(127, 0, 0, 1))
        );
        assert_eq!(
            embedded_v4("64:ff9b::a9fe:a9fe".parse().expect("ip")),
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
    }

    #[test]
    fn allow_cidr_trusts_and_own_networks_refuse() {
        let allow: Vec<IpNet> = vec!["127.0.0.1/32".parse().expect("net")];
        let own: Vec<IpNet> = vec!["8.8.8.0/24".parse().expect("net")];
        assert_eq!(refuse("127.0.0.1".parse().expect("ip"), &allow, &own), None);
        assert_eq!(
            refuse("127.0.0.2".parse().expect("ip"), &allow, &own),
            Some("loopback")
        );
        assert_eq!(
            refuse("8.8.8.8".parse().expect("ip"), &allow, &own),
            Some("proxy_network")
        );
    }
}
