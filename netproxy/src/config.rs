//! Flags (each with a `NETPROXY_*` fallback), validated into rules, ranges and limits once.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use ipnet::IpNet;

use crate::proxy::Policy;
use crate::rules::{Rule, RuleError};
use crate::server::Limits;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

/// Egress sidecar: an HTTP/1.1 forward proxy that lets a sandbox reach only what it is allowed.
#[derive(Debug, Parser)]
#[command(name = "netproxy", version, about)]
pub struct Args {
    #[arg(long, env = "NETPROXY_LISTEN", default_value = "0.0.0.0:3128")]
    pub listen: SocketAddr,
    /// Allowed destination: example.com, *.example.com (subdomains only), optional :PORT[,PORT].
    #[arg(long, env = "NETPROXY_ALLOW", value_delimiter = ',')]
    pub allow: Vec<String>,
    /// Denied destination (wins over --allow).
    #[arg(long, env = "NETPROXY_DENY", value_delimiter = ',')]
    pub deny: Vec<String>,
    /// A special-purpose range the operator trusts (e.g. 127.0.0.1/32 for tests).
    #[arg(
        long = "allow-cidr",
        env = "NETPROXY_ALLOW_CIDR",
        value_delimiter = ','
    )]
    pub allow_cidr: Vec<IpNet>,
    /// The sidecar's own networks (never a destination).
    #[arg(long = "own-cidr", env = "NETPROXY_OWN_CIDR", value_delimiter = ',')]
    pub own_cidr: Vec<IpNet>,
    #[arg(long, env = "NETPROXY_DNS_TIMEOUT_MS", default_value_t = 5000)]
    pub dns_timeout_ms: u64,
    #[arg(long, env = "NETPROXY_CONNECT_TIMEOUT_MS", default_value_t = 10000)]
    pub connect_timeout_ms: u64,
    #[arg(long, env = "NETPROXY_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    #[arg(long, env = "NETPROXY_MAX_HEADER_BYTES", default_value_t = 16384)]
    pub max_header_bytes: usize,
    #[arg(long, env = "NETPROXY_HEADER_TIMEOUT_MS", default_value_t = 10000)]
    pub header_timeout_ms: u64,
    #[arg(long, env = "NETPROXY_LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormat,
}

impl Args {
    pub fn policy(&self) -> Result<Policy, RuleError> {
        Ok(Policy {
            allow: self
                .allow
                .iter()
                .map(|r| Rule::parse(r))
                .collect::<Result<_, _>>()?,
            deny: self
                .deny
                .iter()
                .map(|r| Rule::parse(r))
                .collect::<Result<_, _>>()?,
            allow_cidrs: self.allow_cidr.clone(),
            own_networks: self.own_cidr.clone(),
        })
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections.max(1),
            max_header_bytes: self.max_header_bytes,
            header_timeout: Duration::from_millis(self.header_timeout_ms),
        }
    }
}
