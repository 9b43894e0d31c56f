//! The settings, each written once in `Args`: a flag with a `SOCKPROXY_*` environment
//! fallback (clap) and, for the policy settings, a key of the policy file (serde; `policy_file`
//! reads the file under the flags); and their validation into a `Config`, once, at start-up.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use serde::{Deserialize, Serialize};

use crate::bind_root::check_bind_root;
pub use crate::config_error::{ConfigError, MAX_WORKER_THREADS};
use sockproxy_policy::settings::{normalize_image, CreateRules};
use sockproxy_policy::{Prefix, Scope};

const DEFAULT_UPSTREAM: &str = "unix:///var/run/docker.sock";
/// Largest list answer the proxy buffers to filter; over it the list fails closed (502).
const DEFAULT_MAX_LIST_BYTES: usize = 64 << 20;
/// Lists buffered at once, all requests together.
const DEFAULT_MAX_LIST_BYTES_TOTAL: usize = 128 << 20;

/// What `GET /info` gets (in a policy file too: `info = "stack"` or `"deny"`, nothing else).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InfoMode {
    /// The engine's description with the stack's own counts and name (docs/architecture.md, "sockproxy: a request's way through").
    Stack,
    /// Refused, like other host-wide endpoints.
    Deny,
}

/// `--log-format`: the toolkit's one (`scrape::logging`).
pub use scrape::LogFormat;

/// Per-stack Docker Engine API proxy: a stack sees and changes only its own containers.
#[derive(Debug, Default, Parser, Serialize, Deserialize)]
#[command(name = "sockproxy", version, about)]
// Every setting is a flag and, unless `skip`ped here, a key of the policy file (`--policy`): the
// flag's name without `--`. A key the proxy does not know is an error, not ignored.
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Args {
    /// Unix socket to listen on (the stack's DOCKER_HOST); not needed with --print-policy.
    #[arg(
        help_heading = "Listening",
        long,
        env = "SOCKPROXY_LISTEN",
        required_unless_present = "print_policy"
    )]
    #[serde(skip)]
    pub listen: Option<PathBuf>,
    /// Engine to forward to [default: $DOCKER_HOST, else unix:///var/run/docker.sock].
    #[arg(help_heading = "Listening", long, env = "SOCKPROXY_UPSTREAM")]
    #[serde(skip)]
    pub upstream: Option<String>,
    /// The stack's name prefix P, e.g. deer-flow-.
    #[arg(help_heading = "Scope", long, env = "SOCKPROXY_PREFIX")]
    #[serde(skip)]
    pub prefix: String,
    /// Let the stack change its netproxy sidecars and networks (restricted mode).
    #[arg(help_heading = "Scope", long, env = "SOCKPROXY_RESTRICTED")]
    pub restricted: bool,
    /// Stack name, for the logs and the `sockproxy.stack` label [default: the prefix].
    #[arg(help_heading = "Scope", long, env = "SOCKPROXY_STACK")]
    #[serde(skip)]
    pub stack: Option<String>,
    /// Permission bits of the socket, in octal.
    #[arg(
        help_heading = "Listening",
        long,
        env = "SOCKPROXY_SOCKET_MODE",
        default_value = "0660"
    )]
    #[serde(skip)]
    pub socket_mode: String,
    /// Group (name or number) that owns the socket.
    #[arg(help_heading = "Listening", long, env = "SOCKPROXY_SOCKET_GROUP")]
    #[serde(skip)]
    pub socket_group: Option<String>,
    /// Serve GET /metrics (Prometheus text) and GET /healthz here: a Unix socket path or
    /// tcp://HOST:PORT with a numeric address (docs/metrics.md) [default: off].
    #[arg(help_heading = "Metrics", long, env = "SOCKPROXY_METRICS_LISTEN")]
    #[serde(skip)]
    pub metrics_listen: Option<String>,
    /// Log format.
    #[arg(
        help_heading = "Logging",
        long,
        env = "SOCKPROXY_LOG_FORMAT",
        value_enum,
        default_value = "plain"
    )]
    #[serde(skip)]
    pub log_format: LogFormat,
    /// A capability `CapAdd` may name (repeatable).
    #[arg(
        help_heading = "Create policy",
        long = "allow-cap",
        env = "SOCKPROXY_ALLOW_CAP",
        value_delimiter = ','
    )]
    pub allow_cap: Vec<String>,
    /// A host directory bind mounts may come from (repeatable; whole path components).
    #[arg(
        help_heading = "Create policy",
        long = "allow-bind-root",
        env = "SOCKPROXY_ALLOW_BIND_ROOT",
        value_delimiter = ','
    )]
    pub allow_bind_root: Vec<PathBuf>,
    /// Where bind sources are pinned: a directory only the proxy writes, on which it mounts a
    /// small tmpfs of its own (docs/sockproxy.md, "Pinned bind sources") [default:
    /// /run/sockproxy-pins/STACK].
    #[arg(help_heading = "Create policy", long, env = "SOCKPROXY_PIN_DIR")]
    #[serde(skip)]
    pub pin_dir: Option<PathBuf>,
    /// A directory only the proxy writes, where it keeps what should outlive a restart: when
    /// the log guard last stopped one of the stack's containers, so a restarted proxy keeps the
    /// repeat window (docs/sockproxy.md, "The log guard") [default: none, kept in memory].
    #[arg(help_heading = "Limits", long, env = "SOCKPROXY_STATE_DIR")]
    #[serde(skip)]
    pub state_dir: Option<PathBuf>,
    /// Let containers publish ports on addresses other than loopback.
    #[arg(
        help_heading = "Create policy",
        long,
        env = "SOCKPROXY_ALLOW_PUBLIC_PORTS"
    )]
    pub allow_public_ports: bool,
    /// A host address besides loopback containers may publish ports on (repeatable; an IP
    /// address, compared as parsed): narrower than --allow-public-ports, e.g. the bridge
    /// gateway address a stack's gateway reaches its sandboxes on.
    #[arg(
        help_heading = "Create policy",
        long = "allow-publish-address",
        env = "SOCKPROXY_ALLOW_PUBLISH_ADDRESS",
        value_delimiter = ','
    )]
    pub allow_publish_address: Vec<String>,
    /// Let containers join the engine's default bridge (NetworkMode bridge), which every
    /// stack's containers may share; without it a container that names no network goes on the
    /// stack's own network {P}net and bridge is refused.
    #[arg(
        help_heading = "Create policy",
        long,
        env = "SOCKPROXY_ALLOW_DEFAULT_BRIDGE"
    )]
    pub allow_default_bridge: bool,
    /// An IPv4 range of this stack's own (e.g. 10.213.0.0/16) its networks get their subnets
    /// and gateways from; without it the engine picks, and dockerd before 23.0 may not start
    /// again after a restart during a network removal (docs/sockproxy.md, "Network subnets").
    #[arg(help_heading = "Create policy", long, env = "SOCKPROXY_NETWORK_POOL")]
    #[serde(skip)]
    pub network_pool: Option<String>,
    /// The prefix length of each network's subnet cut from --network-pool [default: 24].
    #[arg(
        help_heading = "Create policy",
        long,
        env = "SOCKPROXY_NETWORK_POOL_SIZE"
    )]
    #[serde(skip)]
    pub network_pool_size: Option<u8>,
    /// Treat a container or network without this stack's `sockproxy.stack` label as another
    /// stack's (not listed, inspected, changed or joined; its events dropped), and refuse named
    /// volumes: for stacks that share a prefix.
    #[arg(help_heading = "Scope", long, env = "SOCKPROXY_REQUIRE_STACK_LABEL")]
    pub require_stack_label: bool,
    /// An image reference (repository[:tag]) the stack may pull (repeatable).
    #[arg(
        help_heading = "Create policy",
        long = "allow-image",
        env = "SOCKPROXY_ALLOW_IMAGE",
        value_delimiter = ','
    )]
    pub allow_image: Vec<String>,
    /// On SIGTERM/SIGINT: seconds in-flight streams may take to finish after the socket closes.
    #[arg(
        help_heading = "Listening",
        long,
        env = "SOCKPROXY_SHUTDOWN_GRACE",
        default_value_t = 30
    )]
    #[serde(skip)]
    pub shutdown_grace: u64,
    /// How `GET /info` is answered: for the stack alone, or refused [default: stack].
    #[arg(help_heading = "Scope", long, env = "SOCKPROXY_INFO", value_enum)]
    pub info: Option<InfoMode>,
    /// Let containers run with `seccomp=unconfined`.
    #[arg(
        help_heading = "Create policy",
        long,
        env = "SOCKPROXY_ALLOW_SECCOMP_UNCONFINED"
    )]
    pub allow_seccomp_unconfined: bool,
    /// A custom seccomp profile containers may use: the profile file's path, or sha256:HEX of
    /// its canonical JSON (sorted keys, no spaces; --print-policy shows it), so it matches
    /// however the client formats it (repeatable).
    #[arg(
        help_heading = "Create policy",
        long = "allow-seccomp-profile",
        env = "SOCKPROXY_ALLOW_SECCOMP_PROFILE",
        value_delimiter = ','
    )]
    pub allow_seccomp_profile: Vec<String>,
    /// A namespaced sysctl containers may set, e.g. net.ipv4.ip_unprivileged_port_start (repeatable).
    #[arg(
        help_heading = "Create policy",
        long = "allow-sysctl",
        env = "SOCKPROXY_ALLOW_SYSCTL",
        value_delimiter = ','
    )]
    pub allow_sysctl: Vec<String>,
    /// Largest HostConfig.ShmSize, in bytes [default: 1073741824].
    #[arg(help_heading = "Create policy", long, env = "SOCKPROXY_MAX_SHM_SIZE")]
    pub max_shm_size: Option<u64>,
    /// A logging driver containers may use (repeatable) [default: json-file, local, none].
    #[arg(
        help_heading = "Create policy",
        long = "allow-log-driver",
        env = "SOCKPROXY_ALLOW_LOG_DRIVER",
        value_delimiter = ','
    )]
    pub allow_log_driver: Vec<String>,
    /// Lowest API version a request may use (`/vX.Y/...`); older ones are refused (400)
    /// [default: 1.24].
    #[arg(help_heading = "Scope", long, env = "SOCKPROXY_MIN_API_VERSION")]
    pub min_api_version: Option<String>,
    /// Seconds a client has to send a complete request head [default: 10].
    #[arg(help_heading = "Listening", long, env = "SOCKPROXY_HEADER_TIMEOUT")]
    pub header_timeout: Option<u64>,
    /// Seconds a client has to send a whole JSON body after its head (an archive upload
    /// streams on); slower is answered 408 and closed [default: 30].
    #[arg(help_heading = "Listening", long, env = "SOCKPROXY_BODY_TIMEOUT")]
    pub body_timeout: Option<u64>,
    /// File locked (flock) around a create's checks of the stack's network and totals; give
    /// proxies of one stack the same [default: .sockproxy-HASH.lock beside --listen].
    #[arg(help_heading = "Listening", long, env = "SOCKPROXY_STACK_LOCK")]
    #[serde(skip)]
    pub stack_lock: Option<PathBuf>,
    /// Worker threads of the multi-thread runtime that serves client connections (threads
    /// sp-loop-0…) [default: 1].
    #[arg(help_heading = "Listening", long, env = "SOCKPROXY_WORKER_THREADS")]
    #[serde(skip)]
    pub worker_threads: Option<usize>,
    /// The old name of --worker-threads (and SOCKPROXY_EVENT_LOOPS of its variable), kept for
    /// one release; --worker-threads wins where both are given.
    #[arg(long, env = "SOCKPROXY_EVENT_LOOPS", hide = true)]
    #[serde(skip)]
    pub event_loops: Option<usize>,
    /// Client connections served at once; more are answered 503 and closed [default: 256].
    #[arg(help_heading = "Listening", long, env = "SOCKPROXY_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Bytes of list answers buffered at once across all requests; over it a list is 503
    /// [default: 134217728].
    #[arg(help_heading = "Limits", long, env = "SOCKPROXY_MAX_LIST_BYTES_TOTAL")]
    pub max_list_bytes_total: Option<usize>,
    /// A TOML file with the same settings as the flags (`sockproxy --print-policy` writes
    /// one); flags add to its lists and switches and override its numbers.
    #[arg(help_heading = "Create policy", long, env = "SOCKPROXY_POLICY")]
    #[serde(skip)]
    pub policy: Option<PathBuf>,
    /// Print the effective policy (name families, every setting) as TOML and exit.
    #[arg(help_heading = "Create policy", long)]
    #[serde(skip)]
    pub print_policy: bool,
    /// Inspect every named object on every request instead of remembering the stack's own
    /// names and IDs (kept coherent by the engine's events; see docs/security-model.md, "Name map").
    #[arg(help_heading = "Scope", long, env = "SOCKPROXY_NO_NAME_CACHE")]
    // In the file, the switch says what is kept: `name-cache = false`.
    #[serde(rename = "name-cache", with = "turned_off")]
    pub no_name_cache: bool,
    /// Bind sources the stack may hold pinned at once, over all its containers [default: 4096].
    #[arg(help_heading = "Limits", long, env = "SOCKPROXY_MAX_BIND_PINS")]
    pub max_bind_pins: Option<usize>,
    /// Largest container or network list (bytes) the proxy will filter [default: 67108864].
    #[arg(help_heading = "Limits", long, env = "SOCKPROXY_MAX_LIST_BYTES")]
    pub max_list_bytes: Option<usize>,
    /// What a request may make the engine spend (`spend`).
    #[command(flatten, next_help_heading = "Limits")]
    #[serde(flatten)]
    pub spend: crate::spend_args::SpendArgs,
}

/// `--no-name-cache`, which the file writes as what is kept (`name-cache = false`).
mod turned_off {
    pub fn serialize<S: serde::Serializer>(off: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(!off)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        <bool as serde::Deserialize>::deserialize(d).map(|on| !on)
    }
}

/// One worker: on a two-core host shared with dockerd a second one made `/_ping` cost 24-28 µs
/// of CPU instead of 19.4-19.6, with fewer requests answered (docs/benchmarks.md, "Issue 39"):
/// the request's task and the engine connection's task woke each other across threads.
fn default_worker_threads() -> usize {
    1
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
    pub max_list_bytes_total: usize,
    /// Requests naming an older `/vX.Y` are refused.
    pub min_api_version: (u32, u32),
    pub header_timeout: std::time::Duration,
    pub body_timeout: std::time::Duration,
    /// The file proxies of one stack lock around a create's checks (`stack_lock`).
    pub stack_lock: Option<PathBuf>,
    pub max_connections: usize,
    /// Worker threads of the runtime serving client connections (`server::runtime`).
    pub worker_threads: usize,
    /// Whether the workers were set by their old name (`--event-loops`), which the log says.
    pub old_worker_flag: bool,
    pub shutdown_grace: std::time::Duration,
    /// What creates may ask for, and `--require-stack-label` (which pinning reads too).
    pub create_rules: CreateRules,
    /// Remember the stack's own names and IDs between requests (`names`, `watch`).
    pub name_cache: bool,
    /// Pullable references, normalized (`docker.io/library/` dropped, `:latest` added).
    pub allow_images: Vec<String>,
    /// Where `/metrics` and `/healthz` are served (`--metrics-listen`); `None`: nowhere.
    pub metrics_listen: Option<scrape::Listen>,
    /// Where and how many bind sources are pinned (used with `--allow-bind-root`).
    pub pins: crate::pins::PinSettings,
    /// The log guard's limit (`log_guard`); `None` with `--log-flood-lines 0`.
    pub log_flood: Option<sockproxy_policy::log_flood::LogFlood>,
    /// Where the proxy keeps what outlives a restart (`--state-dir`), checked writable.
    pub state_dir: Option<PathBuf>,
}

impl Config {
    /// `args` are the settings with the policy file read into them (`policy_file::merged`);
    /// `docker_host` is `$DOCKER_HOST`, passed in so validation stays free of the environment.
    pub fn from_args(args: Args, docker_host: Option<String>) -> Result<Self, ConfigError> {
        if let Some(path) = args.policy {
            // Settings straight from clap: the file's would be missing without a word.
            return Err(ConfigError::PolicyFile(
                path,
                "not read: policy_file::merged reads it into the settings first".into(),
            ));
        }
        let prefix = Prefix::parse(&args.prefix)?;
        let upstream_raw = args
            .upstream
            .or(docker_host.filter(|h| !h.is_empty()))
            .unwrap_or_else(|| DEFAULT_UPSTREAM.to_owned());
        let upstream = parse_unix_addr(&upstream_raw)?;
        let socket_mode = parse_mode(&args.socket_mode)?;
        let socket_gid = args.socket_group.as_deref().map(parse_group).transpose()?;
        for root in &args.allow_bind_root {
            check_bind_root(root)?;
        }
        let seccomp_profiles = args
            .allow_seccomp_profile
            .iter()
            .map(|raw| {
                crate::seccomp_profile::allowed_digest(raw)
                    .map_err(|why| ConfigError::SeccompProfile(raw.clone(), why))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let publish_addresses = args
            .allow_publish_address
            .iter()
            .map(|raw| {
                raw.parse::<std::net::IpAddr>()
                    .map_err(|_| ConfigError::PublishAddress(raw.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let min_raw = args.min_api_version.as_deref().unwrap_or("1.24");
        let min_api_version = sockproxy_policy::settings::api_version(min_raw)
            .filter(|v| *v >= (1, 24))
            .ok_or_else(|| ConfigError::MinApiVersion(min_raw.to_owned()))?;
        let old_worker_flag = args.worker_threads.is_none() && args.event_loops.is_some();
        let worker_threads = args
            .worker_threads
            .or(args.event_loops)
            .unwrap_or_else(default_worker_threads);
        if !(1..=MAX_WORKER_THREADS).contains(&worker_threads) {
            return Err(ConfigError::WorkerThreads(worker_threads));
        }
        let spend = args.spend.spend().map_err(ConfigError::Spend)?;
        let log_flood = args.spend.log_flood().map_err(ConfigError::Spend)?;
        let body_timeout = crate::body::timeout(args.body_timeout).map_err(ConfigError::Spend)?;
        let stack = args.stack.unwrap_or_else(|| prefix.to_string());
        let stack_lock = args
            .stack_lock
            .or_else(|| crate::stack_lock::beside(args.listen.as_deref()?, &stack));
        let metrics_listen = args
            .metrics_listen
            .as_deref()
            .map(scrape::Listen::parse)
            .transpose()?;
        let allow_images: Vec<String> = args
            .allow_image
            .iter()
            .map(|r| normalize_image(r))
            .collect();
        let pins = crate::pins::settings(args.pin_dir, args.max_bind_pins, &stack)
            .map_err(ConfigError::PinDir)?;
        // --print-policy makes nothing.
        let state_dir = args
            .state_dir
            .filter(|_| !args.print_policy)
            .as_deref()
            .map(crate::guard_memory::state_dir)
            .transpose()
            .map_err(ConfigError::StateDir)?;
        Ok(Self {
            // Clap requires it unless --print-policy, which never listens.
            listen: args.listen.unwrap_or_default(),
            upstream,
            stack,
            scope: Scope::new(prefix, args.restricted)
                .with_info(args.info.unwrap_or(InfoMode::Stack) == InfoMode::Stack),
            socket_mode,
            socket_gid,
            log_format: args.log_format,
            max_list_bytes: args.max_list_bytes.unwrap_or(DEFAULT_MAX_LIST_BYTES),
            shutdown_grace: std::time::Duration::from_secs(args.shutdown_grace),
            max_list_bytes_total: args
                .max_list_bytes_total
                .unwrap_or(DEFAULT_MAX_LIST_BYTES_TOTAL),
            min_api_version,
            header_timeout: std::time::Duration::from_secs(args.header_timeout.unwrap_or(10)),
            body_timeout,
            stack_lock,
            max_connections: args.max_connections.unwrap_or(256).max(1),
            worker_threads,
            old_worker_flag,
            create_rules: CreateRules {
                allow_caps: args.allow_cap,
                bind_roots: args.allow_bind_root,
                public_ports: args.allow_public_ports,
                publish_addresses,
                allow_default_bridge: args.allow_default_bridge,
                allow_seccomp_unconfined: args.allow_seccomp_unconfined,
                seccomp_profiles,
                allow_sysctls: args.allow_sysctl,
                max_shm_size: args
                    .max_shm_size
                    .unwrap_or(sockproxy_policy::settings::DEFAULT_MAX_SHM),
                allow_log_drivers: if args.allow_log_driver.is_empty() {
                    sockproxy_policy::settings::default_log_drivers()
                } else {
                    args.allow_log_driver
                },
                allow_images: allow_images.clone(),
                require_stack_label: args.require_stack_label,
                spend,
                network_pool: crate::pooled_create::settings(
                    args.network_pool.as_deref(),
                    args.network_pool_size,
                )
                .map_err(ConfigError::NetworkPool)?,
            },
            name_cache: !args.no_name_cache,
            allow_images,
            metrics_listen,
            pins,
            log_flood,
            state_dir,
        })
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
#[path = "config_tests.rs"]
pub(crate) mod tests;
