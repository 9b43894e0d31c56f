//! Name resolution behind a trait, so tests can inject answers (rebinding, mixed answers,
//! timeouts) and count queries. The stub resolver asks once per request; the answer
//! that was vetted is the one dialed, never a second lookup.
//!
//! The name asked is the canonical name as it is (`target::canonical_host`: ASCII letters,
//! digits, `-` and `_`), made a DNS name without IDNA's host name rules, which refuse `_`
//! (Docker's embedded DNS answers for compose's `project_service_1` containers). Of what the
//! server answers, only the A and AAAA records of the name asked, or of a name its CNAME chain
//! leads to, are its addresses (`addresses_for`): a record for another name in the same answer
//! is never dialed.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

use hickory_resolver::proto::rr::{Name, RData, Record};

pub type Lookup = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>>;

pub trait Resolve: Send + Sync + std::fmt::Debug {
    fn lookup(&self, name: &str) -> Lookup;
}

/// A stub resolver in process (hickory) reading `/etc/resolv.conf`: no libc NSS, so it works
/// in a `FROM scratch` image, where Docker's embedded DNS names the stack's containers.
#[derive(Debug, Clone)]
pub struct Stub(hickory_resolver::TokioResolver);

impl Stub {
    pub fn from_system_conf() -> io::Result<Self> {
        let mut builder = hickory_resolver::Resolver::builder_tokio().map_err(io::Error::other)?;
        // The CNAME records stay in the answer: `addresses_for` follows the chain by them.
        builder.options_mut().preserve_intermediates = true;
        Ok(Self(builder.build().map_err(io::Error::other)?))
    }

    /// Asking only the server at `at`, over UDP (tests: a scripted server on loopback).
    pub fn with_nameserver(at: std::net::SocketAddr) -> io::Result<Self> {
        use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
        let mut udp = ConnectionConfig::udp();
        udp.port = at.port();
        let config = ResolverConfig::from_name_servers(vec![NameServerConfig::new(
            at.ip(),
            true,
            vec![udp],
        )]);
        let mut builder = hickory_resolver::Resolver::builder_with_config(
            config,
            hickory_resolver::net::runtime::TokioRuntimeProvider::default(),
        );
        builder.options_mut().preserve_intermediates = true;
        Ok(Self(builder.build().map_err(io::Error::other)?))
    }
}

impl Resolve for Stub {
    fn lookup(&self, name: &str) -> Lookup {
        let resolver = self.0.clone();
        // Fully qualified: search domains never turn an allowed name into another one.
        let query = Name::from_ascii(format!("{name}."));
        Box::pin(async move {
            let query = query.map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let answer = resolver.lookup_ip(query.clone()).await.map_err(|e| {
                // The resolver answered that the name has no addresses (NXDOMAIN, no
                // records): `NotFound`, told apart from no answer for the metrics (the
                // refusal is `dns_failure` either way).
                let kind = if e.is_no_records_found() {
                    io::ErrorKind::NotFound
                } else {
                    io::ErrorKind::Other
                };
                io::Error::new(kind, e)
            })?;
            Ok(addresses_for(&query, answer.as_lookup().answers()))
        })
    }
}

/// The addresses `records` give `query`: the A and AAAA records whose owner is `query` or a
/// name its CNAME chain (as these records spell it) leads to, in answer order. Records for
/// any other name are left out, whatever section or order they came in. Pure.
pub fn addresses_for(query: &Name, records: &[Record]) -> Vec<IpAddr> {
    let mut names = vec![query.clone()];
    // Each pass adds at least one name or ends; a chain is at most as long as the records.
    for _ in 0..records.len() {
        let next = records.iter().find_map(|r| match &r.data {
            RData::CNAME(target) if names.contains(&r.name) && !names.contains(&target.0) => {
                Some(target.0.clone())
            }
            _ => None,
        });
        match next {
            Some(n) => names.push(n),
            None => break,
        }
    }
    records
        .iter()
        .filter(|r| names.contains(&r.name))
        .filter_map(|r| r.data.ip_addr())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_resolver::proto::rr::rdata::{A, AAAA, CNAME};

    fn name(n: &str) -> Name {
        Name::from_ascii(n).expect("name")
    }

    fn a(owner: &str, ip: &str) -> Record {
        Record::from_rdata(name(owner), 60, RData::A(A(ip.parse().expect("ip"))))
    }

    fn aaaa(owner: &str, ip: &str) -> Record {
        Record::from_rdata(name(owner), 60, RData::AAAA(AAAA(ip.parse().expect("ip"))))
    }

    fn cname(owner: &str, to: &str) -> Record {
        Record::from_rdata(name(owner), 60, RData::CNAME(CNAME(name(to))))
    }

    #[test]
    fn only_the_asked_names_addresses_table() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let cases: &[(&str, Vec<Record>, &[&str])] = &[
            ("a.test.", vec![a("a.test.", "12.0.0.1")], &["12.0.0.1"]),
            (
                "a.test.",
                vec![a("b.test.", "11.0.0.1"), a("a.test.", "12.0.0.1")],
                &["12.0.0.1"],
            ),
            // Owner names compare without regard to case.
            ("a.test.", vec![aaaa("A.TEST.", "2600::1")], &["2600::1"]),
            (
                "alias.test.",
                vec![
                    a("other.test.", "11.0.0.1"),
                    cname("alias.test.", "mid.test."),
                    cname("mid.test.", "real.test."),
                    a("real.test.", "12.0.0.1"),
                    aaaa("real.test.", "2600::1"),
                ],
                &["12.0.0.1", "2600::1"],
            ),
            // A CNAME from another name leads nowhere for this one.
            (
                "a.test.",
                vec![cname("b.test.", "c.test."), a("c.test.", "11.0.0.1")],
                &[],
            ),
            // A loop ends.
            (
                "a.test.",
                vec![cname("a.test.", "b.test."), cname("b.test.", "a.test.")],
                &[],
            ),
            (
                "my_svc.test.",
                vec![a("my_svc.test.", "12.0.0.1")],
                &["12.0.0.1"],
            ),
        ];
        for (q, records, want) in cases {
            let want: Vec<IpAddr> = want.iter().map(|w| ip(w)).collect();
            assert_eq!(addresses_for(&name(q), records), want, "{q}");
        }
    }
}
