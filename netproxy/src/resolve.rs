//! Name resolution behind a trait, so tests can inject answers (rebinding, mixed answers,
//! timeouts) and count queries. The system resolver asks the OS once per request; the answer
//! that was vetted is the one dialed, never a second lookup.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

pub type Lookup = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>>;

pub trait Resolve: Send + Sync + std::fmt::Debug {
    fn lookup(&self, name: &str) -> Lookup;
}

/// The operating system's resolver (`getaddrinfo` through tokio).
#[derive(Debug, Default)]
pub struct System;

impl Resolve for System {
    fn lookup(&self, name: &str) -> Lookup {
        let name = name.to_owned();
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((name.as_str(), 0)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}
