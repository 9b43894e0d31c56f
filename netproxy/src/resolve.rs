//! Name resolution behind a trait, so tests can inject answers (rebinding, mixed answers,
//! timeouts) and count queries. The stub resolver asks once per request; the answer
//! that was vetted is the one dialed, never a second lookup.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

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
        let resolver = hickory_resolver::Resolver::builder_tokio()
            .map_err(io::Error::other)?
            .build()
            .map_err(io::Error::other)?;
        Ok(Self(resolver))
    }
}

impl Resolve for Stub {
    fn lookup(&self, name: &str) -> Lookup {
        let resolver = self.0.clone();
        // Fully qualified: search domains never turn an allowed name into another one.
        let fqdn = format!("{name}.");
        Box::pin(async move {
            let answer = resolver.lookup_ip(fqdn).await.map_err(|e| {
                // The resolver answered that the name has no addresses (NXDOMAIN, no
                // records): `NotFound`, told apart from no answer for the metrics and
                // `/healthz` (the refusal is `dns_failure` either way).
                let kind = if e.is_no_records_found() {
                    io::ErrorKind::NotFound
                } else {
                    io::ErrorKind::Other
                };
                io::Error::new(kind, e)
            })?;
            Ok(answer.iter().collect())
        })
    }
}
