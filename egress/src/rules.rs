//! Egress rules: `example.com` (that name only), `*.example.com` (subdomains only, never the
//! apex), an IP (`11.0.0.1`, `[2600::1]`), and for deny rules a network (`11.0.0.0/24`,
//! `[2600::/32]`); optional `:PORT[,PORT]` (default 80,443 for an allow rule, every port for a
//! deny rule). Deny rules win over allow rules. A deny rule naming an IP or a network refuses
//! the request that spells an address in it and, through `Rule::denies_address`, every
//! resolved address in it (netproxy vets each answer with it): an allowed name never reaches
//! an address the operator denied. Pure.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::target::{canonical_host, Host};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rule {rule:?}: {}", self.reason())]
pub struct RuleError {
    pub rule: String,
    pub why: &'static str,
    /// What the operator probably meant, for a rule written as something else (a URL, a
    /// list, a wildcard without its dot).
    pub hint: Option<String>,
}

impl RuleError {
    /// Why the rule was refused, with the fix when one is known.
    pub fn reason(&self) -> String {
        match &self.hint {
            Some(hint) => format!("{}; {hint}", self.why),
            None => self.why.to_owned(),
        }
    }
}

/// A rule is `NAME`, `*.NAME`, an IP or (deny) a network, with optional `:PORT[,PORT]`; what
/// it was written as when it is a common something else, and the rule meant.
fn written_as_something_else(text: &str) -> Option<(&'static str, String)> {
    if let Some((_, rest)) = text.split_once("://") {
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host = host.rsplit('@').next().unwrap_or(host);
        let has_port = host.rsplit_once(':').is_some_and(|(_, p)| {
            !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !p.contains(']')
        });
        let meant = if has_port {
            format!("write {host}")
        } else {
            format!("write {host} (ports 80 and 443), or {host}:PORT")
        };
        return Some(("a rule is a host, not a URL", meant));
    }
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == ';')
        .filter(|w| !w.is_empty())
        .collect();
    // Only when each word looks like a host of its own (`exa mple.com` is one bad name).
    if words.len() > 1 && words.iter().all(|w| w.contains('.') || w.starts_with('[')) {
        return Some((
            "a rule names one host",
            format!("give each its own rule: {}", words.join(" and ")),
        ));
    }
    // A comma before any port: `a.com,b.com` (ports are `NAME:80,443`).
    let host_part = if text.starts_with('[') {
        text.split(']').next().unwrap_or(text)
    } else {
        text.split(':').next().unwrap_or(text)
    };
    if host_part.contains(',') {
        let hosts: Vec<&str> = host_part.split(',').filter(|h| !h.is_empty()).collect();
        return Some((
            "a rule names one host",
            format!(
                "give each its own rule: {} (a comma separates ports: NAME:80,443)",
                hosts.join(" and ")
            ),
        ));
    }
    if let Some(rest) = text.strip_prefix('*') {
        if !rest.is_empty() && !rest.starts_with('.') {
            return Some((
                "a wildcard is *.NAME",
                format!("write *.{rest} for its subdomains, and {rest} for the name itself"),
            ));
        }
    }
    None
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Exact(Host),
    /// `*.suffix`: any name ending in `.suffix`.
    Subdomains(String),
    /// Every address in a network (deny rules only), as addresses are judged (IPv4-mapped
    /// space read as IPv4: `cidr::unmapped_net`).
    Network(IpNet),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub text: String,
    pattern: Pattern,
    /// `None`: every port (a deny rule that names no port).
    ports: Option<Vec<u16>>,
}

pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

impl Rule {
    /// An allow rule: without ports it allows 80 and 443.
    pub fn parse(text: &str) -> Result<Self, RuleError> {
        Self::parse_with(text, Some(DEFAULT_PORTS.to_vec()))
    }

    /// A deny rule: without ports it denies every port.
    pub fn parse_deny(text: &str) -> Result<Self, RuleError> {
        Self::parse_with(text, None)
    }

    fn parse_with(text: &str, default_ports: Option<Vec<u16>>) -> Result<Self, RuleError> {
        let err = |why| RuleError {
            rule: text.to_owned(),
            why,
            hint: None,
        };
        if let Some((why, hint)) = written_as_something_else(text) {
            return Err(RuleError {
                rule: text.to_owned(),
                why,
                hint: Some(hint),
            });
        }
        // Without ports an allow rule allows 80 and 443; a deny rule denies every port.
        let allowing = default_ports.is_some();
        let (host, ports) = match split_rule(text) {
            Some((h, Some(p))) => {
                let ports: Result<Vec<u16>, _> = p
                    .split(',')
                    .map(|x| {
                        let ok = !x.is_empty()
                            && x.bytes().all(|b| b.is_ascii_digit())
                            && !(x.len() > 1 && x.starts_with('0'));
                        x.parse::<u16>().ok().filter(|n| ok && *n > 0).ok_or(())
                    })
                    .collect();
                (h, Some(ports.map_err(|()| err("ports must be 1-65535"))?))
            }
            Some((h, None)) => (h, default_ports),
            None => return Err(err("IPv6 addresses must be in brackets")),
        };
        let pattern = match (host.strip_prefix("*."), network(host)) {
            (Some(suffix), _) => match canonical_host(suffix).map_err(|_| err("malformed name"))? {
                Host::Name(n) => Pattern::Subdomains(n),
                Host::Ip(_) => return Err(err("a wildcard needs a name")),
            },
            // A network is a deny rule's: an allow rule trusting a range would bypass the
            // special-range check that only `--allow-cidr` may lift.
            (None, Some(_)) if allowing => {
                return Err(err(
                    "a network can only be denied (trust ranges with --allow-cidr)",
                ))
            }
            (None, Some(net)) => Pattern::Network(net.map_err(err)?),
            (None, None) => {
                Pattern::Exact(canonical_host(host).map_err(|_| err("malformed host"))?)
            }
        };
        Ok(Self {
            text: text.to_owned(),
            pattern,
            ports,
        })
    }

    pub fn matches(&self, host: &Host, port: u16) -> bool {
        if self.ports.as_ref().is_some_and(|p| !p.contains(&port)) {
            return false;
        }
        match (&self.pattern, host) {
            (Pattern::Exact(h), _) => h == host,
            (Pattern::Subdomains(suffix), Host::Name(n)) => n
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
            (Pattern::Subdomains(_), Host::Ip(_)) => false,
            (Pattern::Network(net), Host::Ip(ip)) => net.contains(ip),
            (Pattern::Network(_), Host::Name(_)) => false,
        }
    }

    /// Whether this rule refuses the resolved address `ip` on `port`: it names that IP, or a
    /// network holding it. `ip` as addresses are judged (IPv4-mapped folded to IPv4); name
    /// rules never match an address.
    pub fn denies_address(&self, ip: IpAddr, port: u16) -> bool {
        match &self.pattern {
            Pattern::Exact(Host::Ip(_)) | Pattern::Network(_) => self.matches(&Host::Ip(ip), port),
            Pattern::Exact(Host::Name(_)) | Pattern::Subdomains(_) => false,
        }
    }
}

/// A rule's host part as a network (`11.0.0.0/24`, `[2600::/32]`), if it is written as one:
/// `None` when it has no `/`; `Some(Err)` when it does but is no network we judge by.
fn network(host: &str) -> Option<Result<IpNet, &'static str>> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if !bare.contains('/') {
        return None;
    }
    let v6 = bare.contains(':');
    if v6 != host.starts_with('[') {
        // `[11.0.0.0/8]` or a bare IPv6 network: one spelling for each family, like hosts.
        return Some(Err("malformed network"));
    }
    Some(
        bare.parse::<IpNet>()
            .map_err(|_| "malformed network")
            .and_then(|n| {
                crate::cidr::unmapped_net(n)
                    .ok_or("a network reaching into IPv4-mapped space (::ffff:0:0/96) without being inside it")
            }),
    )
}

/// `HOST[:PORTS]` with a bracketed IPv6 host (`[2600::1]`, `[2600::1]:443`); `None` for an
/// unbracketed IPv6, which cannot be told apart from a port list.
fn split_rule(text: &str) -> Option<(&str, Option<&str>)> {
    if text.starts_with('[') {
        let close = text.find(']')?;
        let (host, rest) = text.split_at(close + 1);
        return match rest {
            "" => Some((host, None)),
            r => r.strip_prefix(':').map(|p| (host, Some(p))),
        };
    }
    match text.split_once(':') {
        None => Some((text, None)),
        Some((h, p)) if !p.contains(':') => Some((h, Some(p))),
        Some(_) => None,
    }
}

/// Why a name is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameDenial {
    /// A deny rule matched (it wins over any allow rule).
    DeniedByRule,
    /// No allow rule matched.
    NotAllowed,
}

impl NameDenial {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DeniedByRule => "denied_by_rule",
            Self::NotAllowed => "not_allowed",
        }
    }
}

/// What the name-level decision is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameDecision {
    Allow {
        rule: String,
    },
    Deny {
        reason: NameDenial,
        rule: Option<String>,
    },
}

/// Decides on the canonical name and port, before any DNS query.
pub fn decide(allow: &[Rule], deny: &[Rule], host: &Host, port: u16) -> NameDecision {
    if let Some(r) = deny.iter().find(|r| r.matches(host, port)) {
        return NameDecision::Deny {
            reason: NameDenial::DeniedByRule,
            rule: Some(r.text.clone()),
        };
    }
    match allow.iter().find(|r| r.matches(host, port)) {
        Some(r) => NameDecision::Allow {
            rule: r.text.clone(),
        },
        None => NameDecision::Deny {
            reason: NameDenial::NotAllowed,
            rule: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> Host {
        canonical_host(s).expect("host")
    }

    /// An unbracketed IPv6 literal is refused for what it is, not as a bad port list.
    #[test]
    fn unbracketed_ipv6_is_refused_by_name() {
        for text in ["2600::1", "2600::1:443", "::1"] {
            let e = Rule::parse(text).expect_err("refused");
            assert_eq!(e.why, "IPv6 addresses must be in brackets", "{text}");
        }
        assert_eq!(
            Rule::parse("example.com:0").expect_err("refused").why,
            "ports must be 1-65535"
        );
    }

    #[test]
    fn matcher_table() {
        let exact = Rule::parse("example.com").expect("rule");
        let wild = Rule::parse("*.example.com").expect("rule");
        let port = Rule::parse("api.example.net:8443,9443").expect("rule");
        // Case 11 of issue 14: an IPv6 literal without a port takes the default ports.
        let v6 = Rule::parse("[2600::1]").expect("rule");
        let v6port = Rule::parse("[2600::1]:8080").expect("rule");
        let cases = [
            (&exact, "example.com", 443, true),
            (&exact, "EXAMPLE.com.", 80, true),
            (&exact, "notexample.com", 443, false),
            (&exact, "a.example.com", 443, false),
            (&exact, "example.com", 8080, false),
            (&wild, "a.example.com", 443, true),
            (&wild, "a.b.example.com", 443, true),
            (&wild, "example.com", 443, false),
            (&wild, "notexample.com", 443, false),
            (&wild, "xexample.com", 443, false),
            (&port, "api.example.net", 8443, true),
            (&port, "api.example.net", 443, false),
            (&v6, "[2600::1]", 443, true),
            (&v6, "[2600::1]", 8080, false),
            (&v6port, "[2600::1]", 8080, true),
            (&v6port, "[2600::1]", 443, false),
        ];
        for (rule, host, p, want) in cases {
            assert_eq!(
                rule.matches(&h(host), p),
                want,
                "{} vs {host}:{p}",
                rule.text
            );
        }
        for (bad, why) in [
            ("", "malformed host"),
            ("*.", "malformed name"),
            ("*.1.2.3.4", "a wildcard needs a name"),
            ("example.com:0", "ports must be 1-65535"),
            ("example.com:080", "ports must be 1-65535"),
            ("exa mple.com", "malformed host"),
            ("*", "malformed host"),
            ("2600::1", "IPv6 addresses must be in brackets"),
            ("[2600::1]:", "ports must be 1-65535"),
            ("[2600::1]x", "IPv6 addresses must be in brackets"),
            ("[2600::1", "IPv6 addresses must be in brackets"),
        ] {
            assert_eq!(
                Rule::parse(bad).map(|r| r.text),
                Err(RuleError {
                    rule: bad.into(),
                    why,
                    hint: None,
                }),
                "{bad:?}"
            );
        }
    }

    /// Issue 50, finding 2: deny rules naming an IP or a network, and what they deny.
    #[test]
    fn ip_and_network_deny_rules_table() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let cases: &[(&str, &str, u16, bool)] = &[
            ("11.0.0.1", "11.0.0.1", 8080, true),
            ("11.0.0.1", "11.0.0.2", 443, false),
            ("11.0.0.1:443", "11.0.0.1", 443, true),
            ("11.0.0.1:443", "11.0.0.1", 80, false),
            ("11.0.0.0/24", "11.0.0.255", 1, true),
            ("11.0.0.0/24", "11.0.1.0", 1, false),
            ("11.0.0.0/24:80,443", "11.0.0.9", 443, true),
            ("11.0.0.0/24:80,443", "11.0.0.9", 8443, false),
            ("[2600::1]", "2600::1", 443, true),
            ("[2600::1]", "2600::2", 443, false),
            ("[2600::/16]", "2600:ffff::9", 22, true),
            ("[2600::/16]", "2601::9", 22, false),
            ("[2600::/16]:22", "2600::9", 22, true),
            // A network in IPv4-mapped form is the IPv4 one; addresses come folded.
            ("[::ffff:11.0.0.0/120]", "11.0.0.7", 80, true),
            // A name rule never matches an address.
            ("example.com", "11.0.0.1", 443, false),
            ("*.example.com", "11.0.0.1", 443, false),
        ];
        for (rule, addr, port, want) in cases {
            let r = Rule::parse_deny(rule).expect("rule");
            assert_eq!(
                r.denies_address(ip(addr), *port),
                *want,
                "{rule} {addr}:{port}"
            );
            // The literal spelled in a request is denied by the same rule before any lookup.
            let host = Host::Ip(ip(addr));
            assert_eq!(
                r.matches(&host, *port),
                *want,
                "{rule} vs literal {addr}:{port}"
            );
        }
        for (bad, why) in [
            ("11.0.0.0/33", "malformed network"),
            ("[11.0.0.0/8]", "malformed network"),
            ("2600::/16", "IPv6 addresses must be in brackets"),
            ("[2600::/129]", "malformed network"),
            (
                "[::ffff:0:0/95]",
                "a network reaching into IPv4-mapped space (::ffff:0:0/96) without being inside it",
            ),
            ("*.11.0.0.0/8", "malformed name"),
        ] {
            assert_eq!(
                Rule::parse_deny(bad).map(|r| r.text),
                Err(RuleError {
                    rule: bad.into(),
                    why,
                    hint: None,
                }),
                "{bad:?}"
            );
        }
        for allow in ["11.0.0.0/8", "[2600::/16]:443"] {
            assert_eq!(
                Rule::parse(allow).map(|r| r.text).map_err(|e| e.why),
                Err("a network can only be denied (trust ranges with --allow-cidr)"),
                "{allow}"
            );
        }
    }

    #[test]
    fn deny_wins() {
        let allow = vec![Rule::parse("*.example.com").expect("r")];
        let deny = vec![Rule::parse_deny("secret.example.com").expect("r")];
        assert!(
            matches!(
                decide(&allow, &deny, &h("secret.example.com"), 8443),
                NameDecision::Deny { .. }
            ),
            "any port"
        );
        assert!(matches!(
            decide(&allow, &deny, &h("secret.example.com"), 443),
            NameDecision::Deny {
                reason: NameDenial::DeniedByRule,
                ..
            }
        ));
        assert!(matches!(
            decide(&allow, &deny, &h("www.example.com"), 443),
            NameDecision::Allow { .. }
        ));
        assert!(matches!(
            decide(&allow, &deny, &h("example.org"), 443),
            NameDecision::Deny {
                reason: NameDenial::NotAllowed,
                ..
            }
        ));
    }

    /// Rules written as a URL, a list or a wildcard without its dot say what a rule is and
    /// the rule meant (issue 51: `https://pypi.org` was told "ports must be 1-65535").
    #[test]
    fn rules_written_as_something_else_say_what_was_meant() {
        for (text, want) in [
            (
                "https://pypi.org",
                "rule \"https://pypi.org\": a rule is a host, not a URL; write pypi.org (ports 80 and 443), or pypi.org:PORT",
            ),
            (
                "https://files.pythonhosted.org:443/simple/",
                "rule \"https://files.pythonhosted.org:443/simple/\": a rule is a host, not a URL; write files.pythonhosted.org:443",
            ),
            (
                "pypi.org,github.com",
                "rule \"pypi.org,github.com\": a rule names one host; give each its own rule: pypi.org and github.com (a comma separates ports: NAME:80,443)",
            ),
            (
                "pypi.org github.com",
                "rule \"pypi.org github.com\": a rule names one host; give each its own rule: pypi.org and github.com",
            ),
            (
                "*pypi.org",
                "rule \"*pypi.org\": a wildcard is *.NAME; write *.pypi.org for its subdomains, and pypi.org for the name itself",
            ),
        ] {
            assert_eq!(
                Rule::parse(text).expect_err("refused").to_string(),
                want
            );
        }
        // Ports after a colon are still a list.
        assert!(Rule::parse("api.example.net:8443,9443").is_ok());
        assert!(Rule::parse("*.pypi.org").is_ok());
    }
}
