//! The `serve` subcommand: its flags (each with a `LIFECYCLE_*` fallback), the socket (mode and
//! group like sockproxy's), the store, and the run: serve until SIGINT/SIGTERM, then stop
//! accepting, shut down what this process owns (destroy, or keep warm by flag), print one JSON
//! line per sandbox and exit 0, or 3 when any teardown failed (kept, and named on stderr).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::apikey::{ApiKey, KeyError};
use super::background;
use super::clock::SystemClock;
use super::limits::{self, LimitError, Limits};
use super::listen::{Listen, Listener};
use super::provider::{Provider, ProviderConfig};
use super::provision::ApiConfig;
use super::redis_store::{default_key_prefix, key_namespace, RedisStore};
use super::store::{Memory, Ownership, Store};
use crate::ops::Lifecycle;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnShutdown {
    /// Destroy every sandbox this process owns.
    Destroy,
    /// Leave them running and drop our claims (another provider adopts them after its grace).
    KeepWarm,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to serve the HTTP/JSON API: a Unix socket path, or `tcp://HOST:PORT` (a numeric
    /// IPv4 address or a bracketed IPv6 one; needs --api-key-file).
    #[arg(long, env = "LIFECYCLE_LISTEN")]
    pub listen: String,
    /// File holding the provisioner API's key on one line (mode 0600 or 0640). Every `/api/`
    /// request must carry it in `X-API-Key`. Required with a tcp:// --listen.
    #[arg(long, env = "LIFECYCLE_API_KEY_FILE")]
    pub api_key_file: Option<PathBuf>,
    /// deer-flow's host base directory (its `DEER_FLOW_HOST_BASE_DIR`): the provisioner API's
    /// sandboxes get their skills, thread data and extra mounts from under it. The stack's
    /// sockproxy must run with `--allow-bind-root` on the same directory.
    #[arg(long, env = "LIFECYCLE_MOUNT_ROOT")]
    pub mount_root: Option<PathBuf>,
    /// Host name in the provisioner API's sandbox URLs (`http://HOST:PORT`, deer-flow's
    /// `DEER_FLOW_SANDBOX_HOST`): `localhost` for a gateway on this host,
    /// `host.docker.internal` (or an address it reaches) for one in a container.
    #[arg(long, env = "LIFECYCLE_SANDBOX_HOST", default_value = "localhost")]
    pub sandbox_host: String,
    /// Permission bits of the socket (octal).
    #[arg(long, env = "LIFECYCLE_SOCKET_MODE", default_value = "0660")]
    pub socket_mode: String,
    /// Group (name or number) that owns the socket.
    #[arg(long, env = "LIFECYCLE_SOCKET_GROUP")]
    pub socket_group: Option<String>,
    /// Seconds a released sandbox stays warm (0: until evicted).
    #[arg(long, env = "LIFECYCLE_IDLE_TIMEOUT", default_value_t = 600.0)]
    pub idle_timeout: f64,
    /// Seconds a lease may go neither released nor renewed (`POST /v1/leases/ID/renew`) before
    /// the reaper releases it, as a crashed gateway never will (0: leases last until released).
    #[arg(long, env = "LIFECYCLE_LEASE_TIMEOUT", default_value_t = 0.0)]
    pub lease_timeout: f64,
    /// Most sandboxes tracked at once, creates under way included; the oldest warm one is
    /// destroyed before a create, and with nothing warm a create is refused with 503 (0: no cap).
    #[arg(long, env = "LIFECYCLE_MAX_REPLICAS", default_value_t = 0)]
    pub max_replicas: usize,
    /// `memory` (one process), or a Redis URL (`redis://…`, `unix:///…/redis.sock`) shared by several.
    #[arg(long, env = "LIFECYCLE_OWNERSHIP", default_value = "memory")]
    pub ownership: String,
    /// What each sandbox's key in the store starts with (its ID follows after one ':'); set
    /// `deerflow:sandbox:owner` to share ownership with deer-flow's gateways [default:
    /// lifecycle:PREFIX:sandbox].
    #[arg(long, env = "LIFECYCLE_OWNERSHIP_KEY_PREFIX")]
    pub ownership_key_prefix: Option<String>,
    /// This process's owner name in the store [default: host name and process ID].
    #[arg(long, env = "LIFECYCLE_OWNER_ID")]
    pub owner_id: Option<String>,
    /// Seconds an ownership claim lives without renewal.
    #[arg(long, env = "LIFECYCLE_OWNERSHIP_TTL", default_value_t = 30.0)]
    pub ownership_ttl: f64,
    /// Seconds a sandbox must stay unowned before reconciliation adopts it.
    #[arg(long, env = "LIFECYCLE_ADOPT_GRACE", default_value_t = 30.0)]
    pub adopt_grace: f64,
    /// Bound on every ownership-store call, in seconds.
    #[arg(long, env = "LIFECYCLE_STORE_TIMEOUT", default_value_t = 2.0)]
    pub store_timeout: f64,
    /// Seconds between heartbeat / reaper / reconciliation passes (default: a third of the TTL).
    #[arg(long, env = "LIFECYCLE_TICK")]
    pub tick: Option<f64>,
    /// Seconds a client has to send a whole request head (from connecting, or from its previous
    /// answer), and again for its body; a kept-alive connection idle that long is closed too.
    /// 0.1 to 3600.
    #[arg(long, env = "LIFECYCLE_HEADER_TIMEOUT", default_value_t = limits::DEFAULT_HEADER_TIMEOUT_SECS)]
    pub header_timeout: f64,
    /// Seconds an answer may wait on a client that takes none of its bytes (one that sends
    /// requests and never reads the answers); its connection is then closed. 0.1 to 3600.
    #[arg(long, env = "LIFECYCLE_WRITE_TIMEOUT", default_value_t = limits::DEFAULT_WRITE_TIMEOUT_SECS)]
    pub write_timeout: f64,
    /// Client connections served at once; more are answered 503 and closed.
    #[arg(long, env = "LIFECYCLE_MAX_CONNECTIONS", default_value_t = limits::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Serve GET /metrics (Prometheus text) and GET /healthz here, apart from the API (a
    /// scraper cannot send the API key): a Unix socket path or tcp://HOST:PORT with a numeric
    /// address, where only the scraper reaches (docs/metrics.md) [default: off].
    #[arg(long, env = "LIFECYCLE_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// Teardowns a shutdown runs at once; a unit's stop grace must cover
    /// ceil(--max-replicas / this) × (2 × --stop-timeout + 5) + 30 seconds. 1 to 64.
    #[arg(long, env = "LIFECYCLE_SHUTDOWN_PARALLEL", default_value_t = 8)]
    pub shutdown_parallel: usize,
    /// This host's provisioner API address as the gateway and HAProxy reach it
    /// (`http://HOST:PORT`), for one provisioner URL over several Docker hosts, each with its
    /// own engine (docs/multi-host.md): needs a Redis --ownership; --owner-id defaults to the
    /// host name [default: one host].
    #[arg(long, env = "LIFECYCLE_ADVERTISE_URL")]
    pub advertise_url: Option<String>,
    /// What SIGTERM does with the sandboxes this process owns (`/v1/` ones: the provisioner
    /// API's are deer-flow's and always kept).
    #[arg(
        long,
        env = "LIFECYCLE_ON_SHUTDOWN",
        value_enum,
        default_value = "destroy"
    )]
    pub on_shutdown: OnShutdown,
}

/// Why `serve` did not start. All but `Bind` are bad configuration (exit 2); `Bind` is a
/// failure at run time (exit 1), as sockproxy's `cannot listen`.
#[derive(Debug, thiserror::Error)]
pub enum ServeSetupError {
    #[error("--{0}: {1}")]
    Flag(&'static str, String),
    #[error("{0}")]
    Limits(#[from] LimitError),
    #[error("{0}")]
    Api(String),
    /// The socket could not be had: the address is taken, another provider serves on it, its
    /// directory is missing, or its group or mode could not be set.
    #[error("cannot listen on {0}")]
    Bind(String),
}

impl ServeSetupError {
    /// A failure at run time, not a bad flag or file: exit 1 rather than 2.
    pub fn is_runtime(&self) -> bool {
        matches!(self, Self::Bind(_))
    }
}

fn secs(flag: &'static str, v: f64) -> Result<Duration, ServeSetupError> {
    Duration::try_from_secs_f64(v).map_err(|e| ServeSetupError::Flag(flag, e.to_string()))
}

/// Longest `--tick`: past it the reaper and reconciliation would hardly run, and a timer that
/// far ahead could overflow the clock (a panic, after the socket was bound).
const MAX_TICK_SECS: f64 = 3600.0;

/// The period of the heartbeat, reaper and reconciliation passes: `--tick`, or a third of the
/// ownership TTL, at least 50 ms; checked once at start-up.
pub fn tick(a: &ServeArgs) -> Result<Duration, ServeSetupError> {
    let raw = a.tick.unwrap_or((a.ownership_ttl / 3.0).min(MAX_TICK_SECS));
    // NaN is refused too (checked before `max`, which would hide it).
    if raw.is_nan() || raw > MAX_TICK_SECS {
        return Err(ServeSetupError::Flag(
            "tick",
            format!("{raw}: expected seconds up to {MAX_TICK_SECS}"),
        ));
    }
    secs("tick", raw.max(0.05))
}

fn group(raw: &str) -> Result<u32, ServeSetupError> {
    if let Ok(n) = raw.parse::<u32>() {
        return Ok(n);
    }
    match nix::unistd::Group::from_name(raw) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        _ => Err(ServeSetupError::Flag(
            "socket-group",
            format!("{raw:?}: no such group"),
        )),
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into())
}

fn owner_name() -> String {
    format!("{}-{}", host_name(), std::process::id())
}

/// The socket's limits from their flags, checked before anything is bound or started.
pub fn limits(a: &ServeArgs) -> Result<Limits, ServeSetupError> {
    Ok(Limits::new(
        a.header_timeout,
        a.write_timeout,
        a.max_connections,
    )?)
}

pub fn provider(lc: Lifecycle, a: &ServeArgs) -> Result<Provider, ServeSetupError> {
    let ttl = secs("ownership-ttl", a.ownership_ttl)?;
    let store = if a.ownership == "memory" {
        if a.ownership_key_prefix.is_some() {
            return Err(ServeSetupError::Flag(
                "ownership-key-prefix",
                "only with a Redis --ownership (the memory store is this process's own)".into(),
            ));
        }
        Store::Memory(Memory::default())
    } else {
        let timeout = secs("store-timeout", a.store_timeout)?;
        let key_prefix = a
            .ownership_key_prefix
            .clone()
            .unwrap_or_else(|| default_key_prefix(lc.settings.prefix.as_str()));
        let namespace = key_namespace(&key_prefix)
            .map_err(|e| ServeSetupError::Flag("ownership-key-prefix", e.to_string()))?;
        let r = RedisStore::new(&a.ownership, namespace, timeout)
            .map_err(|e| ServeSetupError::Flag("ownership", e.to_string()))?;
        Store::Redis(r)
    };
    let hosts = match &a.advertise_url {
        None => None,
        Some(_) if a.ownership == "memory" => {
            return Err(ServeSetupError::Flag(
                "advertise-url",
                "needs a Redis --ownership shared by every host".into(),
            ))
        }
        Some(raw) => Some(
            super::hosts::check_advertise(raw)
                .map_err(|e| ServeSetupError::Flag("advertise-url", e))?,
        ),
    };
    // Several hosts: a host keeps its name across restarts, so its claims stay its own.
    let me = match (&a.owner_id, &hosts) {
        (Some(o), _) => o.clone(),
        (None, Some(_)) => host_name(),
        (None, None) => owner_name(),
    };
    tick(a)?;
    metrics_listen(a)?;
    let config = ProviderConfig {
        idle_timeout: secs("idle-timeout", a.idle_timeout)?,
        max_replicas: a.max_replicas,
        adopt_grace: secs("adopt-grace", a.adopt_grace)?,
        lease_timeout: secs("lease-timeout", a.lease_timeout)?,
        shutdown_parallel: match a.shutdown_parallel {
            n @ 1..=64 => n,
            n => {
                return Err(ServeSetupError::Flag(
                    "shutdown-parallel",
                    format!("{n}: expected 1 to 64"),
                ))
            }
        },
    };
    let own = Ownership::new(store, me, ttl);
    let p = Provider::new(lc, own, Arc::new(SystemClock::default()), config).with_api(api(a)?);
    Ok(match hosts {
        Some(url) => p.with_hosts(super::hosts::MultiHost::new(url)),
        None => p,
    })
}

/// The provisioner API's settings, checked at start-up: a key is required on TCP, the key file
/// must be private, and the mount root must be a directory's real path that this process's
/// user may make directories in, on a `nosuid,nodev` mount (what the proxy's bind root must be).
pub fn api(a: &ServeArgs) -> Result<ApiConfig, ServeSetupError> {
    let listen = listen(a)?;
    let api_key = match &a.api_key_file {
        Some(path) => Some(ApiKey::load(path).map_err(|e| ServeSetupError::Api(e.to_string()))?),
        None if listen.is_tcp() => return Err(ServeSetupError::Api(KeyError::Missing.to_string())),
        None => None,
    };
    let mount_root = match &a.mount_root {
        Some(root) => {
            let uid = nix::unistd::geteuid();
            let real = std::fs::canonicalize(root).map_err(|e| {
                let why = match e.kind() {
                    std::io::ErrorKind::NotFound => format!(
                        "no such directory; create it, writable by uid {uid} (the user lifecycle serve runs as)"
                    ),
                    _ => e.to_string(),
                };
                ServeSetupError::Flag("mount-root", format!("{}: {why}", root.display()))
            })?;
            if real != *root || !real.is_dir() {
                return Err(ServeSetupError::Flag(
                    "mount-root",
                    format!(
                        "{}: must be a directory given by its real path ({}), with no symbolic link in it",
                        root.display(),
                        real.display()
                    ),
                ));
            }
            // Checked now, not at the first user's create: there it could only be a 500.
            let rwx = nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK;
            if nix::unistd::access(&real, rwx).is_err() {
                return Err(ServeSetupError::Flag(
                    "mount-root",
                    format!(
                        "{}: not writable by uid {uid} (the user lifecycle serve runs as), so no user's directories can be made in it; give that uid write access to it",
                        real.display()
                    ),
                ));
            }
            // The stack's proxy refuses a bind root without nosuid and nodev, so every create
            // would be refused: said now, with the mount that fixes it.
            let flags = nix::sys::statvfs::statvfs(&real)
                .map(|st| st.flags())
                .map_err(|e| {
                    ServeSetupError::Flag("mount-root", format!("{}: {e}", real.display()))
                })?;
            let wanted =
                nix::sys::statvfs::FsFlags::ST_NOSUID | nix::sys::statvfs::FsFlags::ST_NODEV;
            if !flags.contains(wanted) {
                return Err(ServeSetupError::Flag(
                    "mount-root",
                    format!(
                        "{0}: on a mount without nosuid and nodev, which the stack's sockproxy refuses as a bind root (every create would be refused); make it one: mount --bind {0} {0} && mount -o remount,bind,nosuid,nodev {0}",
                        real.display()
                    ),
                ));
            }
            Some(real)
        }
        None => None,
    };
    if a.sandbox_host.is_empty() || a.sandbox_host.contains(['/', ' ', '@', '?', '#']) {
        return Err(ServeSetupError::Flag(
            "sandbox-host",
            format!("{:?}: expected a host name or address", a.sandbox_host),
        ));
    }
    Ok(ApiConfig {
        mount_root,
        sandbox_host: a.sandbox_host.clone(),
        api_key,
    })
}

/// What `bind` gives `run`: the listener, and whether this process made its socket file (and
/// so removes it at exit) or systemd passed the socket (which stays for the next start).
#[derive(Debug)]
pub struct Bound {
    pub listener: Listener,
    pub made_here: bool,
}

/// `--listen`, parsed (the one place its error is worded).
fn listen(a: &ServeArgs) -> Result<Listen, ServeSetupError> {
    Listen::parse(&a.listen).map_err(|e| ServeSetupError::Flag("listen", e.to_string()))
}

/// The socket systemd passed (socket activation, `scrape::activation`), as a listener: a
/// disagreement with `--listen` is bad configuration, an unusable socket a failure at run time.
fn inherited(at: &Listen) -> Result<Option<Listener>, ServeSetupError> {
    use scrape::activation::Inherited;
    let failed = |why: String| ServeSetupError::Bind(format!("the socket systemd passed: {why}"));
    let socket = scrape::activation::inherited(at).map_err(|e| {
        if e.is_configuration() {
            ServeSetupError::Flag("listen", e.to_string())
        } else {
            failed(e.to_string())
        }
    })?;
    Ok(match socket {
        None => None,
        Some(Inherited::Unix(l)) => Some(Listener::Unix(
            tokio::net::UnixListener::from_std(l).map_err(|e| failed(e.to_string()))?,
        )),
        Some(Inherited::Tcp(l)) => Some(Listener::Tcp(
            tokio::net::TcpListener::from_std(l).map_err(|e| failed(e.to_string()))?,
        )),
    })
}

/// Binds `--listen`: the socket systemd passed, else a TCP address, or the Unix socket with its
/// mode and group (a stale socket file is replaced; one that answers is refused).
pub async fn bind(a: &ServeArgs) -> Result<Bound, ServeSetupError> {
    let at = listen(a)?;
    if let Some(listener) = inherited(&at)? {
        return Ok(Bound {
            listener,
            made_here: false,
        });
    }
    let mode = u32::from_str_radix(a.socket_mode.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| {
            ServeSetupError::Flag(
                "socket-mode",
                format!("{:?}: expected octal bits such as 0660", a.socket_mode),
            )
        })?;
    let gid = a.socket_group.as_deref().map(group).transpose()?;
    let listener =
        scrape::bind(&at, mode, gid).map_err(|e| ServeSetupError::Bind(e.to_string()))?;
    Ok(Bound {
        listener: listener.into(),
        made_here: true,
    })
}

/// `--metrics-listen`, parsed (a bad address is bad configuration).
pub fn metrics_listen(a: &ServeArgs) -> Result<Option<scrape::Listen>, ServeSetupError> {
    a.metrics_listen
        .as_deref()
        .map(scrape::Listen::parse)
        .transpose()
        .map_err(|e| ServeSetupError::Flag("metrics-listen", e.to_string()))
}

/// Binds `--metrics-listen` (`scrape::bind`), if given; must run inside the runtime.
pub fn bind_metrics(a: &ServeArgs) -> Result<Option<scrape::Listener>, ServeSetupError> {
    let Some(at) = metrics_listen(a)? else {
        return Ok(None);
    };
    scrape::bind(&at, scrape::METRICS_MODE, None)
        .map(Some)
        .map_err(|e| ServeSetupError::Bind(format!("--metrics-listen {e}")))
}

/// The longest time between two scans for the stack's sidecars (`egress_log`).
const EGRESS_SCAN: Duration = Duration::from_secs(2);

/// Serves until `stop` turns true; returns whether every shutdown teardown succeeded.
pub async fn run(
    p: Arc<Provider>,
    bound: Bound,
    metrics: Option<scrape::Listener>,
    a: &ServeArgs,
    limits: Limits,
    stop: tokio::sync::watch::Receiver<bool>,
) -> bool {
    // Checked by `provider` at start-up; the fallback is never reached.
    let tick = tick(a).unwrap_or(Duration::from_secs(10));
    let bg = tokio::spawn(background::run(p.clone(), tick, stop.clone()));
    if p.lc.settings.mode == crate::decide::Mode::Restricted {
        // Sidecars are looked for more often than the maintenance tick: one made and destroyed
        // between two scans is never followed.
        let every = tick.min(EGRESS_SCAN);
        tokio::spawn(super::egress_log::run(p.clone(), every, stop.clone()));
    }
    if let Some(listener) = metrics {
        let mut until = stop.clone();
        let exposed = Arc::new(super::exposed::Exposed(p.clone()));
        tokio::spawn(scrape::serve(listener, exposed, async move {
            let _ = until.wait_for(|s| *s).await;
        }));
    }
    let Bound {
        listener,
        made_here,
    } = bound;
    let shown = listener
        .local_tcp()
        .map(|addr| format!("tcp://{addr}"))
        .unwrap_or_else(|| a.listen.clone());
    tracing::info!(listen = %shown, owner = %p.own.me, api_key = p.api.api_key.is_some(), mount_root = ?p.api.mount_root, socket_activation = !made_here, "serving");
    super::http::serve(listener, p.clone(), limits, stop).await;
    let _ = bg.await;
    // A socket systemd passed is systemd's: it stays for the next start.
    if let (true, Ok(Listen::Unix(path))) = (made_here, listen(a)) {
        let _ = std::fs::remove_file(path);
    }
    let lines = background::shutdown(&p, a.on_shutdown == OnShutdown::KeepWarm).await;
    let mut ok = true;
    for l in &lines {
        println!("{}", serde_json::json!(l));
        if let Some(report) = l.failure() {
            ok = false;
            eprintln!("{report}");
        }
    }
    ok
}

#[cfg(test)]
#[path = "cmd_tests.rs"]
mod tests;
