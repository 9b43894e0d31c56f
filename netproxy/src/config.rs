//! Flags (each with a `NETPROXY_*` fallback), validated into rules, ranges and limits once.
//! List flags repeat (`--allow a.test --allow b.test:80,8080`); they never split on commas,
//! which belong to a rule's port list. Their environment variables hold whitespace-separated
//! lists (`NETPROXY_ALLOW="a.test b.test:80,8080"`).

use std::net::SocketAddr;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};
use ipnet::IpNet;

use crate::forward::Timeouts;
use crate::nat64::Nat64Error;
use crate::policy::Policy;
use crate::rules::{Rule, RuleError};
use crate::server::Limits;

/// `--log-format`: the toolkit's one (`scrape::logging`).
pub use scrape::LogFormat;

/// Egress sidecar: an HTTP/1.1 forward proxy that lets a sandbox reach only what it is allowed.
#[derive(Debug, Clone, Parser)]
#[command(name = "netproxy", version, about)]
pub struct Args {
    /// Address and port to accept proxy clients on.
    #[arg(
        help_heading = "Listening",
        long,
        env = "NETPROXY_LISTEN",
        default_value = "0.0.0.0:3128"
    )]
    pub listen: SocketAddr,
    /// An inbound relay, LISTEN_ADDR:PORT=TARGET_HOST:PORT (0.0.0.0:8080=sandbox:8080): every
    /// connection accepted on LISTEN is carried, byte for byte, to TARGET and nowhere else; a
    /// name target is looked up at each connection and must be a peer on one of the sidecar's
    /// own networks (docs/netproxy.md). Repeatable; the env var is whitespace-separated.
    #[arg(help_heading = "Listening", long, env = "NETPROXY_RELAY")]
    pub relay: Vec<String>,
    /// Allowed destination: example.com, *.example.com (subdomains only), [2600::1], optional
    /// :PORT[,PORT] (default 80,443). Repeat the flag; the env var is whitespace-separated.
    #[arg(help_heading = "Egress rules", long, env = "NETPROXY_ALLOW")]
    pub allow: Vec<String>,
    /// Denied destination (wins over --allow; without ports every port): a name, *.name, an
    /// IP or a network (11.0.0.0/8, [2600::/32]); an IP or network also refuses every name
    /// that resolves into it. Repeatable.
    #[arg(help_heading = "Egress rules", long, env = "NETPROXY_DENY")]
    pub deny: Vec<String>,
    /// A JSON policy file `{"allow":[…],"deny":[…],"allow_cidr":[…]}`, added to the flags'
    /// rules; SIGHUP re-reads it (a bad file is refused and the running policy stays).
    #[arg(help_heading = "Egress rules", long, env = "NETPROXY_POLICY")]
    pub policy: Option<std::path::PathBuf>,
    /// A special-purpose range the operator trusts (e.g. 127.0.0.1/32 for tests). Never
    /// trusts the sidecar's own networks. Repeatable.
    #[arg(
        help_heading = "Egress rules",
        long = "allow-cidr",
        env = "NETPROXY_ALLOW_CIDR"
    )]
    pub allow_cidr: Vec<String>,
    /// More networks never to dial, besides the sidecar's interfaces. Repeatable.
    #[arg(
        help_heading = "Egress rules",
        long = "own-cidr",
        env = "NETPROXY_OWN_CIDR"
    )]
    pub own_cidr: Vec<String>,
    /// The network's own NAT64 translator prefix (RFC 6052: /32, /40, /48, /56, /64 or /96),
    /// as its DNS64 resolver synthesizes with: the IPv4 an address in it carries is judged too.
    /// 64:ff9b::/96 needs no flag. Repeatable.
    #[arg(long = "nat64-prefix", env = "NETPROXY_NAT64_PREFIX")]
    pub nat64_prefix: Vec<String>,
    /// How long a name lookup may take (504 `dns_timeout`).
    #[arg(
        help_heading = "Timeouts",
        long,
        env = "NETPROXY_DNS_TIMEOUT_MS",
        default_value_t = 5000
    )]
    pub dns_timeout_ms: u64,
    /// How long the whole Happy Eyeballs race over the vetted addresses may take (504
    /// `connect_timeout`).
    #[arg(
        help_heading = "Timeouts",
        long,
        env = "NETPROXY_CONNECT_TIMEOUT_MS",
        default_value_t = 10000
    )]
    pub connect_timeout_ms: u64,
    /// Client connections open at once, tunnels included (over it: 503 `connection_limit`).
    #[arg(
        help_heading = "Limits",
        long,
        env = "NETPROXY_MAX_CONNECTIONS",
        default_value_t = 1024
    )]
    pub max_connections: usize,
    /// Client connections open at once from one client IP, tunnels included (over it: 503
    /// `client_connection_limit`).
    #[arg(
        help_heading = "Limits",
        long,
        env = "NETPROXY_MAX_CONNECTIONS_PER_CLIENT",
        default_value_t = 64
    )]
    pub max_connections_per_client: usize,
    /// Upstream connection attempts in flight for one client IP; more wait (within the
    /// connect timeout) for one to finish.
    #[arg(
        help_heading = "Limits",
        long,
        env = "NETPROXY_MAX_DIALS_PER_CLIENT",
        default_value_t = crate::proxy::DEFAULT_MAX_DIALS_PER_CLIENT
    )]
    pub max_dials_per_client: usize,
    /// Upstream connection attempts in flight in all (lowered at start-up to what the
    /// descriptor limit leaves after a reserve).
    #[arg(help_heading = "Limits", long, env = "NETPROXY_MAX_DIALS", default_value_t = crate::proxy::DEFAULT_MAX_DIALS)]
    pub max_dials: usize,
    /// A tunnel with no bytes either way for this long is closed.
    #[arg(
        help_heading = "Timeouts",
        long,
        env = "NETPROXY_TUNNEL_IDLE_TIMEOUT_MS",
        default_value_t = 300_000
    )]
    pub tunnel_idle_timeout_ms: u64,
    /// An absolute-form request whose body from the client stalls this long between bytes is
    /// cut off (504 `request_body_timeout` if no answer has started).
    #[arg(
        help_heading = "Timeouts",
        long,
        env = "NETPROXY_REQUEST_BODY_IDLE_TIMEOUT_MS",
        default_value_t = 30_000
    )]
    pub request_body_idle_timeout_ms: u64,
    /// How long the upstream may take to start its answer once the request is sent whole
    /// (504 `upstream_response_timeout`).
    #[arg(
        help_heading = "Timeouts",
        long,
        env = "NETPROXY_UPSTREAM_RESPONSE_TIMEOUT_MS",
        default_value_t = 60_000
    )]
    pub upstream_response_timeout_ms: u64,
    /// The most an absolute-form request may take, answer included (504 `request_timeout`
    /// before the answer starts; cut off after).
    #[arg(
        help_heading = "Timeouts",
        long,
        env = "NETPROXY_REQUEST_TIMEOUT_MS",
        default_value_t = 600_000
    )]
    pub request_timeout_ms: u64,
    /// How long one write to a client may wait for the client to take bytes; past it the
    /// connection is dropped and the exchange ends with `write_timeout`.
    #[arg(
        help_heading = "Timeouts",
        long,
        env = "NETPROXY_WRITE_TIMEOUT_MS",
        default_value_t = 60_000
    )]
    pub write_timeout_ms: u64,
    /// Header lines a request head may have (431 `too many headers`).
    #[arg(
        help_heading = "Limits",
        long,
        env = "NETPROXY_MAX_HEADERS",
        default_value_t = 100
    )]
    pub max_headers: usize,
    /// Bytes a request head may have (431 `request head too large`).
    #[arg(
        help_heading = "Limits",
        long,
        env = "NETPROXY_MAX_HEADER_BYTES",
        default_value_t = 16384
    )]
    pub max_header_bytes: usize,
    /// How long a request head may take to arrive once begun (408 `request head too slow`).
    #[arg(
        help_heading = "Timeouts",
        long,
        env = "NETPROXY_HEADER_TIMEOUT_MS",
        default_value_t = 10000
    )]
    pub header_timeout_ms: u64,
    /// Log lines as JSON objects (one per line) or plain text; `NETPROXY_LOG` filters them
    /// (an EnvFilter, default `info`).
    #[arg(
        help_heading = "Logging",
        long,
        env = "NETPROXY_LOG_FORMAT",
        value_enum,
        default_value = "json"
    )]
    pub log_format: LogFormat,
    /// Serve GET /metrics (Prometheus text) and GET /healthz here: a Unix socket path or
    /// tcp://HOST:PORT with a numeric address (docs/metrics.md) [default: off].
    #[arg(help_heading = "Metrics", long, env = "NETPROXY_METRICS_LISTEN", value_parser = scrape::Listen::parse)]
    pub metrics_listen: Option<scrape::Listen>,
}

/// The policy file's shape.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    /// Read like `--allow-cidr` (`cidrs`): an IPv4-mapped network is written as IPv4.
    #[serde(default)]
    pub allow_cidr: Vec<String>,
}

impl PolicyFile {
    /// The file's text, which must be one JSON object. serde would also read a struct from a
    /// JSON array (its fields in order), so `[["a.test"],[]]` would install allows and drop
    /// denies unseen: anything but an object is refused before serde sees it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|x| x.to_string())?;
        let shape = match &value {
            serde_json::Value::Object(_) => {
                return serde_json::from_value(value).map_err(|x| x.to_string())
            }
            serde_json::Value::Array(_) => "an array",
            serde_json::Value::String(_) => "a string",
            serde_json::Value::Number(_) => "a number",
            serde_json::Value::Bool(_) => "a boolean",
            serde_json::Value::Null => "null",
        };
        Err(format!(
            "must be a JSON object {{\"allow\":[…],\"deny\":[…],\"allow_cidr\":[…]}}, not {shape}"
        ))
    }
}

/// Why a policy was refused. Each message names where the bad value came from (the flag, or the
/// policy file and its key) and holds no cause of its own, so the start-up line and the reload
/// warning say it once.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A rule from `--allow` or `--deny`.
    #[error("{flag} {:?}: {}", .rule.rule, .rule.reason())]
    Rule { flag: &'static str, rule: RuleError },
    #[error(transparent)]
    Cidr(#[from] egress::cidr::CidrError),
    #[error("policy file {path}: {why}")]
    File { path: String, why: String },
    #[error("--nat64-prefix {0}")]
    Nat64(Nat64Error),
    #[error("--relay {:?}: {}", .0.rule, .0.why)]
    Relay(egress::relay::RelayError),
}

/// The networks `list` names for `flag` (`egress::cidr::cidrs`), refused as a policy error.
pub fn cidrs<'a>(
    flag: &'static str,
    list: impl IntoIterator<Item = &'a String>,
) -> Result<Vec<IpNet>, PolicyError> {
    Ok(egress::cidr::cidrs(flag, list)?)
}

impl Args {
    /// The flags of this process (`--help` and `--version` are errors of clap's to `exit`).
    pub fn try_load() -> Result<Self, clap::Error> {
        Self::load_from(std::env::args_os())
    }

    /// The flags from `argv` and the environment: a list from an environment variable is split
    /// on whitespace; a list from flags is taken value by value.
    pub fn load_from<I, T>(argv: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let m = Self::command().try_get_matches_from(argv)?;
        let mut a = Self::from_arg_matches(&m)?;
        for (id, list) in [
            ("allow", &mut a.allow),
            ("deny", &mut a.deny),
            ("allow_cidr", &mut a.allow_cidr),
            ("own_cidr", &mut a.own_cidr),
            ("nat64_prefix", &mut a.nat64_prefix),
            ("relay", &mut a.relay),
        ] {
            if m.value_source(id) == Some(ValueSource::EnvVariable) {
                *list = list
                    .iter()
                    .flat_map(|v| v.split_whitespace().map(str::to_owned))
                    .collect();
            }
        }
        Ok(a)
    }

    /// Flags plus the policy file (if any), validated whole: one bad rule refuses all of it.
    pub fn policy(&self) -> Result<Policy, PolicyError> {
        let path = self.policy.as_ref().map(|p| p.display().to_string());
        let in_file = |why: String| PolicyError::File {
            path: path.clone().unwrap_or_default(),
            why,
        };
        let file = match &self.policy {
            None => PolicyFile::default(),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|x| in_file(x.to_string()))?;
                PolicyFile::parse(&text).map_err(in_file)?
            }
        };
        // The flag's rules, then the file's key's, each refusal saying which it came from.
        type Parse = fn(&str) -> Result<Rule, RuleError>;
        let rules =
            |parse: Parse, flag: &'static str, flags: &[String], key: &str, from: &[String]| {
                let mut out = Vec::with_capacity(flags.len() + from.len());
                for r in flags {
                    out.push(parse(r).map_err(|rule| PolicyError::Rule { flag, rule })?);
                }
                for r in from {
                    out.push(
                        parse(r)
                            .map_err(|e| in_file(format!("{key} {:?}: {}", e.rule, e.reason())))?,
                    );
                }
                Ok::<_, PolicyError>(out)
            };
        Ok(Policy {
            allow: rules(Rule::parse, "--allow", &self.allow, "allow", &file.allow)?,
            deny: rules(Rule::parse_deny, "--deny", &self.deny, "deny", &file.deny)?,
            allow_cidrs: cidrs("--allow-cidr", &self.allow_cidr)?
                .into_iter()
                .chain(cidrs("allow_cidr", &file.allow_cidr).map_err(|e| in_file(e.to_string()))?)
                .collect(),
            own_networks: cidrs("--own-cidr", &self.own_cidr)?,
            nat64_prefixes: self
                .nat64_prefix
                .iter()
                .map(|p| p.parse().map_err(PolicyError::Nat64))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The relays (`--relay`), each checked whole; two on one listening address are refused.
    pub fn relays(&self) -> Result<Vec<egress::relay::Relay>, PolicyError> {
        let mut out: Vec<egress::relay::Relay> = Vec::with_capacity(self.relay.len());
        for rule in &self.relay {
            let r = egress::relay::Relay::parse(rule).map_err(PolicyError::Relay)?;
            if out.iter().any(|o| o.listen == r.listen) {
                return Err(PolicyError::Relay(egress::relay::RelayError {
                    rule: rule.clone(),
                    why: format!("another relay listens on {}", r.listen),
                }));
            }
            out.push(r);
        }
        Ok(out)
    }

    pub fn timeouts(&self) -> Timeouts {
        Timeouts {
            body_idle: Duration::from_millis(self.request_body_idle_timeout_ms),
            response_head: Duration::from_millis(self.upstream_response_timeout_ms),
            request: Duration::from_millis(self.request_timeout_ms),
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections.max(1),
            max_per_client: self.max_connections_per_client.max(1),
            max_headers: self.max_headers.max(8),
            max_header_bytes: self.max_header_bytes,
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            write_timeout: Duration::from_millis(self.write_timeout_ms.max(1)),
        }
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
