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
    /// A JSON policy file `{"allow":[…],"deny":[…],"allow_cidr":[…]}`, added to the flags'
    /// rules; SIGHUP re-reads it (a bad file is refused and the running policy stays).
    #[arg(long, env = "NETPROXY_POLICY")]
    pub policy: Option<std::path::PathBuf>,
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
    #[arg(
        long,
        env = "NETPROXY_MAX_CONNECTIONS_PER_CLIENT",
        default_value_t = 64
    )]
    pub max_connections_per_client: usize,
    /// A tunnel with no bytes either way for this long is closed.
    #[arg(
        long,
        env = "NETPROXY_TUNNEL_IDLE_TIMEOUT_MS",
        default_value_t = 300_000
    )]
    pub tunnel_idle_timeout_ms: u64,
    #[arg(long, env = "NETPROXY_MAX_HEADERS", default_value_t = 100)]
    pub max_headers: usize,
    #[arg(long, env = "NETPROXY_MAX_HEADER_BYTES", default_value_t = 16384)]
    pub max_header_bytes: usize,
    #[arg(long, env = "NETPROXY_HEADER_TIMEOUT_MS", default_value_t = 10000)]
    pub header_timeout_ms: u64,
    #[arg(long, env = "NETPROXY_LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormat,
}

/// The policy file's shape.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub allow_cidr: Vec<IpNet>,
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{0}")]
    Rule(#[from] RuleError),
    #[error("policy file {path}: {why}")]
    File { path: String, why: String },
}

impl Args {
    /// Flags plus the policy file (if any), validated whole: one bad rule refuses all of it.
    pub fn policy(&self, own_networks: &[IpNet]) -> Result<Policy, PolicyError> {
        let file = match &self.policy {
            None => PolicyFile::default(),
            Some(path) => {
                let e = |why: String| PolicyError::File {
                    path: path.display().to_string(),
                    why,
                };
                let text = std::fs::read_to_string(path).map_err(|x| e(x.to_string()))?;
                serde_json::from_str(&text).map_err(|x| e(x.to_string()))?
            }
        };
        let mut own = self.own_cidr.clone();
        own.extend_from_slice(own_networks);
        Ok(Policy {
            allow: self
                .allow
                .iter()
                .chain(&file.allow)
                .map(|r| Rule::parse(r))
                .collect::<Result<_, _>>()?,
            deny: self
                .deny
                .iter()
                .chain(&file.deny)
                .map(|r| Rule::parse_deny(r))
                .collect::<Result<_, _>>()?,
            allow_cidrs: self
                .allow_cidr
                .iter()
                .chain(&file.allow_cidr)
                .copied()
                .collect(),
            own_networks: own,
        })
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections.max(1),
            max_per_client: self.max_connections_per_client.max(1),
            max_headers: self.max_headers.max(8),
            tunnel_idle: Duration::from_millis(self.tunnel_idle_timeout_ms),
            max_header_bytes: self.max_header_bytes,
            header_timeout: Duration::from_millis(self.header_timeout_ms),
        }
    }
}
