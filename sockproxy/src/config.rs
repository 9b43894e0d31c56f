//! Command-line flags (each with a `SOCKPROXY_*` environment fallback) and their validation
//! into a `Config`, once, at start-up.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use crate::create_body::CreateRules;
use crate::scope::{Prefix, PrefixError, Scope};

const DEFAULT_UPSTREAM: &str = "unix:///var/run/docker.sock";
/// Largest list answer the proxy buffers to filter; over it the list fails closed (502).
const DEFAULT_MAX_LIST_BYTES: usize = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

/// Per-stack Docker Engine API proxy: a stack sees and changes only its own containers.
#[derive(Debug, Parser)]
#[command(name = "sockproxy", version, about)]
pub struct Args {
    /// Unix socket to listen on (the stack's DOCKER_HOST).
    #[arg(long, env = "SOCKPROXY_LISTEN")]
    pub listen: PathBuf,
    /// Engine to forward to [default: $DOCKER_HOST, else unix:///var/run/docker.sock].
    #[arg(long, env = "SOCKPROXY_UPSTREAM")]
    pub upstream: Option<String>,
    /// The stack's name prefix P, e.g. deer-flow-.
    #[arg(long, env = "SOCKPROXY_PREFIX")]
    pub prefix: String,
    /// Let the stack change its netproxy sidecars and networks (restricted mode).
    #[arg(long, env = "SOCKPROXY_RESTRICTED")]
    pub restricted: bool,
    /// Stack name for the logs [default: the prefix].
    #[arg(long, env = "SOCKPROXY_STACK")]
    pub stack: Option<String>,
    /// Permission bits of the socket, in octal.
    #[arg(long, env = "SOCKPROXY_SOCKET_MODE", default_value = "0660")]
    pub socket_mode: String,
    /// Group (name or number) that owns the socket.
    #[arg(long, env = "SOCKPROXY_SOCKET_GROUP")]
    pub socket_group: Option<String>,
    /// Log format.
    #[arg(
        long,
        env = "SOCKPROXY_LOG_FORMAT",
        value_enum,
        default_value = "plain"
    )]
    pub log_format: LogFormat,
    /// A capability `CapAdd` may name (repeatable).
    #[arg(long = "allow-cap", env = "SOCKPROXY_ALLOW_CAP", value_delimiter = ',')]
    pub allow_cap: Vec<String>,
    /// A host directory bind mounts may come from (repeatable; whole path components).
    #[arg(
        long = "allow-bind-root",
        env = "SOCKPROXY_ALLOW_BIND_ROOT",
        value_delimiter = ','
    )]
    pub allow_bind_root: Vec<PathBuf>,
    /// Let containers publish ports on addresses other than loopback.
    #[arg(long, env = "SOCKPROXY_ALLOW_PUBLIC_PORTS")]
    pub allow_public_ports: bool,
    /// Treat a container without this stack's `sockproxy.stack` label as out of scope for changes.
    #[arg(long, env = "SOCKPROXY_REQUIRE_STACK_LABEL")]
    pub require_stack_label: bool,
    /// An image reference (repository[:tag]) the stack may pull (repeatable).
    #[arg(
        long = "allow-image",
        env = "SOCKPROXY_ALLOW_IMAGE",
        value_delimiter = ','
    )]
    pub allow_image: Vec<String>,
    /// On SIGTERM/SIGINT: seconds in-flight streams may take to finish after the socket closes.
    #[arg(long, env = "SOCKPROXY_SHUTDOWN_GRACE", default_value_t = 30)]
    pub shutdown_grace: u64,
    /// Largest container or network list (bytes) the proxy will filter.
    #[arg(long, env = "SOCKPROXY_MAX_LIST_BYTES", default_value_t = DEFAULT_MAX_LIST_BYTES)]
    pub max_list_bytes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--prefix: {0}")]
    Prefix(#[from] PrefixError),
    #[error("--upstream {0:?}: only unix:// addresses are supported")]
    Upstream(String),
    #[error("--socket-mode {0:?}: expected octal permission bits such as 0660")]
    SocketMode(String),
    #[error("--socket-group {0:?}: no such group")]
    SocketGroup(String),
    #[error("--socket-group {0:?}: {1}")]
    GroupLookup(String, String),
    #[error("--allow-bind-root {0:?}: must be an absolute path without '..'")]
    BindRoot(PathBuf),
}

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: PathBuf,
    pub upstream: PathBuf,
    pub scope: Scope,
    pub stack: String,
    pub socket_mode: u32,
    pub socket_gid: Option<u32>,
    pub log_format: LogFormat,
    pub max_list_bytes: usize,
    pub shutdown_grace: std::time::Duration,
    pub create_rules: CreateRules,
    pub require_stack_label: bool,
    /// Pullable references, normalized (`docker.io/library/` dropped, `:latest` added).
    pub allow_images: Vec<String>,
}

impl Config {
    /// `docker_host` is `$DOCKER_HOST`, passed in so validation stays free of the environment.
    pub fn from_args(args: Args, docker_host: Option<String>) -> Result<Self, ConfigError> {
        let prefix = Prefix::parse(&args.prefix)?;
        let upstream_raw = args
            .upstream
            .or(docker_host.filter(|h| !h.is_empty()))
            .unwrap_or_else(|| DEFAULT_UPSTREAM.to_owned());
        let upstream = parse_unix_addr(&upstream_raw)?;
        let socket_mode = parse_mode(&args.socket_mode)?;
        let socket_gid = args.socket_group.as_deref().map(parse_group).transpose()?;
        for root in &args.allow_bind_root {
            let ok = root.is_absolute()
                && !root
                    .components()
                    .any(|c| matches!(c, std::path::Component::ParentDir));
            if !ok {
                return Err(ConfigError::BindRoot(root.clone()));
            }
        }
        Ok(Self {
            listen: args.listen,
            upstream,
            stack: args.stack.unwrap_or_else(|| prefix.to_string()),
            scope: Scope::new(prefix, args.restricted),
            socket_mode,
            socket_gid,
            log_format: args.log_format,
            max_list_bytes: args.max_list_bytes,
            shutdown_grace: std::time::Duration::from_secs(args.shutdown_grace),
            create_rules: CreateRules {
                allow_caps: args.allow_cap,
                bind_roots: args.allow_bind_root,
                public_ports: args.allow_public_ports,
            },
            require_stack_label: args.require_stack_label,
            allow_images: args
                .allow_image
                .iter()
                .map(|r| normalize_image(r))
                .collect(),
        })
    }
}

/// `busybox` → `busybox:latest`; `docker.io/library/x` → `x`; a digest is kept as it is.
pub fn normalize_image(reference: &str) -> String {
    let r = reference
        .strip_prefix("docker.io/library/")
        .or_else(|| reference.strip_prefix("docker.io/"))
        .unwrap_or(reference);
    let last = r.rsplit('/').next().unwrap_or(r);
    if last.contains(':') || r.contains('@') {
        r.to_owned()
    } else {
        format!("{r}:latest")
    }
}

pub fn parse_unix_addr(raw: &str) -> Result<PathBuf, ConfigError> {
    match raw.strip_prefix("unix://") {
        Some(path) if path.starts_with('/') => Ok(PathBuf::from(path)),
        _ => Err(ConfigError::Upstream(raw.to_owned())),
    }
}

fn parse_mode(raw: &str) -> Result<u32, ConfigError> {
    u32::from_str_radix(raw.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| ConfigError::SocketMode(raw.to_owned()))
}

fn parse_group(raw: &str) -> Result<u32, ConfigError> {
    if let Ok(gid) = raw.parse::<u32>() {
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(raw) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(ConfigError::SocketGroup(raw.to_owned())),
        Err(e) => Err(ConfigError::GroupLookup(raw.to_owned(), e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec![
            "sockproxy",
            "--listen",
            "/tmp/x.sock",
            "--prefix",
            "deer-flow-",
        ];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).expect("parses")
    }

    #[test]
    fn defaults_and_upstream_fallbacks() {
        let c = Config::from_args(args(&[]), None).expect("ok");
        assert_eq!(c.upstream, PathBuf::from("/var/run/docker.sock"));
        assert_eq!(c.socket_mode, 0o660);
        assert_eq!(c.stack, "deer-flow-");
        let c = Config::from_args(args(&[]), Some("unix:///run/d.sock".into())).expect("ok");
        assert_eq!(c.upstream, PathBuf::from("/run/d.sock"));
        let c = Config::from_args(
            args(&["--upstream", "unix:///a.sock"]),
            Some("unix:///b.sock".into()),
        )
        .expect("ok");
        assert_eq!(c.upstream, PathBuf::from("/a.sock"));
    }

    #[test]
    fn invalid_settings_are_refused_with_the_rule() {
        let e = Config::from_args(
            Args::try_parse_from(["sockproxy", "--listen", "/x", "--prefix", "abc"])
                .expect("parses"),
            None,
        )
        .expect_err("bad prefix");
        assert!(
            e.to_string().contains("^[a-zA-Z0-9][a-zA-Z0-9_.-]*[-_.]$"),
            "{e}"
        );
        let e = Config::from_args(
            Args::try_parse_from(["sockproxy", "--listen", "/x", "--prefix", "abc123-"])
                .expect("parses"),
            None,
        );
        assert!(e.is_ok(), "'-' is not a hex digit");
        let e = Config::from_args(
            Args::try_parse_from(["sockproxy", "--listen", "/x", "--prefix", "abc12_"])
                .expect("parses"),
            None,
        );
        assert!(e.is_ok());
        assert!(Config::from_args(args(&["--upstream", "tcp://1.2.3.4:2375"]), None).is_err());
        assert!(Config::from_args(args(&["--socket-mode", "999"]), None).is_err());
        assert!(Config::from_args(args(&["--socket-group", "no-such-group-xyz"]), None).is_err());
        let c = Config::from_args(
            args(&["--socket-group", "0", "--socket-mode", "0600"]),
            None,
        )
        .expect("ok");
        assert_eq!((c.socket_gid, c.socket_mode), (Some(0), 0o600));
    }
}
