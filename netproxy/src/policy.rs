//! The policy a request is judged by, and the pure halves of the pipeline around the two
//! effects (the lookup and the dial): `decide_name` before any lookup, `vet` on what the lookup
//! answered, giving exactly the addresses that may be dialed, in answer order.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::addr::{self, AddrRefusal};
use crate::nat64::Nat64Prefix;
use crate::rules::{self, NameDecision, Rule};
use crate::target::Target;

#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub allow: Vec<Rule>,
    pub deny: Vec<Rule>,
    /// Special-purpose ranges the operator trusts (`--allow-cidr`).
    pub allow_cidrs: Vec<IpNet>,
    /// Networks never to dial besides the interfaces' own (`--own-cidr`): never a
    /// destination, whatever `allow_cidrs` says.
    pub own_networks: Vec<IpNet>,
    /// The network's own NAT64 translator prefixes (`--nat64-prefix`): the IPv4 an address in
    /// one carries is judged too.
    pub nat64_prefixes: Vec<Nat64Prefix>,
}

impl Policy {
    /// The name-level decision, before any lookup.
    pub fn decide_name(&self, t: &Target) -> NameDecision {
        rules::decide(&self.allow, &self.deny, &t.host, t.port)
    }

    /// Every answer vetted for `port`; one refused answer refuses the name whole, so a
    /// rebinding answer can never be picked by a later attempt. `interfaces`: the sidecar's
    /// interface networks as read now. `Ok` holds the addresses to dial (IPv4-mapped folded),
    /// in answer order. Each answer is judged by `addr::judge` (own networks, special ranges),
    /// then by the deny rules naming an IP or a network (`denial`).
    pub fn vet(
        &self,
        interfaces: &[IpNet],
        answers: &[IpAddr],
        port: u16,
    ) -> Result<Vec<IpAddr>, AddrRefusal> {
        let mut own = self.own_networks.clone();
        own.extend_from_slice(interfaces);
        answers
            .iter()
            .map(|ip| {
                let ip = addr::judge(*ip, &self.allow_cidrs, &own, &self.nat64_prefixes)?;
                match self.denial(ip, port) {
                    Some(_) => Err(AddrRefusal::DeniedByRule),
                    None => Ok(ip),
                }
            })
            .collect()
    }

    /// The first deny rule that refuses the address `ip` on `port`: one naming it or a network
    /// holding it, or holding an IPv4 it carries (a translator prefix's, as `addr::embedded`
    /// reads them: the translator would carry the connection there).
    pub fn denial(&self, ip: IpAddr, port: u16) -> Option<&Rule> {
        let ip = addr::fold(ip);
        let mut all = vec![ip];
        if let IpAddr::V6(v6) = ip {
            all.extend(
                addr::embedded(v6, &self.nat64_prefixes)
                    .into_iter()
                    .map(IpAddr::V4),
            );
        }
        self.deny
            .iter()
            .find(|r| all.iter().any(|a| r.denies_address(*a, port)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::special::Special;
    use crate::target::parse_authority;

    #[test]
    fn the_pipeline_table() {
        let p = Policy {
            allow: vec![
                Rule::parse("*.allowed.test").expect("rule"),
                Rule::parse("[2600::1]").expect("rule"),
            ],
            deny: vec![
                Rule::parse_deny("secret.allowed.test").expect("rule"),
                Rule::parse_deny("9.9.9.9").expect("rule"),
                Rule::parse_deny("[2a00::/16]:443").expect("rule"),
            ],
            allow_cidrs: vec!["10.0.0.0/8".parse().expect("net")],
            own_networks: vec!["10.1.0.0/16".parse().expect("net")],
            nat64_prefixes: vec![],
        };
        let ifaces: Vec<IpNet> = vec!["10.2.0.0/16".parse().expect("net")];
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        type Want = Result<Vec<&'static str>, &'static str>;
        let cases: &[(&str, &[&str], Want)] = &[
            ("a.allowed.test:443", &["8.8.8.8"], Ok(vec!["8.8.8.8"])),
            (
                "a.allowed.test:443",
                &["::ffff:8.8.8.8", "2600::2"],
                Ok(vec!["8.8.8.8", "2600::2"]),
            ),
            ("a.allowed.test:8080", &["8.8.8.8"], Err("not_allowed")),
            (
                "secret.allowed.test:443",
                &["8.8.8.8"],
                Err("denied_by_rule"),
            ),
            (
                "a.allowed.test:443",
                &["8.8.8.8", "127.0.0.1"],
                Err("special_address:loopback"),
            ),
            ("a.allowed.test:443", &["10.9.0.1"], Ok(vec!["10.9.0.1"])),
            ("a.allowed.test:443", &["10.1.0.1"], Err("proxy_network")),
            ("a.allowed.test:443", &["10.2.0.1"], Err("proxy_network")),
            ("[2600::1]:443", &["2600::1"], Ok(vec!["2600::1"])),
            // Issue 50, finding 2: deny rules naming an IP or a network judge every answer.
            ("a.allowed.test:443", &["9.9.9.9"], Err("denied_by_rule")),
            (
                "a.allowed.test:443",
                &["8.8.8.8", "2a00::5"],
                Err("denied_by_rule"),
            ),
            ("a.allowed.test:80", &["2a00::5"], Ok(vec!["2a00::5"])),
            ("9.9.9.9:443", &["9.9.9.9"], Err("denied_by_rule")),
        ];
        for (target, answers, want) in cases {
            let t = parse_authority(target).expect("target");
            let got = match p.decide_name(&t) {
                NameDecision::Deny { reason, .. } => Err(reason.as_str().to_owned()),
                NameDecision::Allow { .. } => {
                    let answers: Vec<IpAddr> = answers.iter().map(|a| ip(a)).collect();
                    p.vet(&ifaces, &answers, t.port)
                        .map_err(AddrRefusal::reason)
                }
            };
            let want = want
                .clone()
                .map(|v| v.iter().map(|a| ip(a)).collect::<Vec<_>>())
                .map_err(str::to_owned);
            assert_eq!(got, want, "{target} {answers:?}");
        }
        assert_eq!(
            AddrRefusal::Special(Special::Ipv4Translated).reason(),
            "special_address:siit"
        );
    }
}
