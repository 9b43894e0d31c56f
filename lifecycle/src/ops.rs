//! The operations' shared parts: `Settings`, `OpError`, what operations return, the `Lifecycle`
//! value (made by `Lifecycle::new`), and the small operations (mark, list). Creating lives in
//! `create`, tearing down in `teardown`. Every engine call goes through `Engine`, i.e. through
//! the one address lifecycle was given; decisions come from `decide`; storage from `ledger` and
//! `ports`, whose errors fail closed; every operation on a sandbox ID runs under its `lock`.
//! A library caller should not drop an operation's future once it may hold the lock (the CLI
//! never does): the step in flight would be cut off, which the lock exists to prevent.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::decide::Mode;
use crate::engine::{Container, Engine, EngineError};
use crate::ledger::{Ledger, LedgerError, UNKNOWN_GENERATION};
use crate::lock::{LockError, Locks};
use crate::naming::{self, IdError, Names, Prefix};
use crate::ports::{PortError, Ports};

/// How lifecycle creates sandboxes; validated once from the flags.
#[derive(Debug, Clone)]
pub struct Settings {
    pub prefix: Prefix,
    pub mode: Mode,
    pub image: Option<String>,
    pub sandbox_port: u16,
    /// The host address an open-mode sandbox's port is published on (`--publish-address`).
    pub publish_address: String,
    pub sandbox_cmd: Option<Vec<String>>,
    pub sidecar_image: Option<String>,
    pub sidecar_cmd: Option<Vec<String>>,
    pub egress_allow: Vec<String>,
    /// Address ranges the sidecar may dial although they are special-purpose (its upstreams on
    /// a private network, say).
    pub egress_allow_cidr: Vec<String>,
    /// Networks the sidecar must never dial besides its interfaces' own (the host's addresses).
    pub egress_own_cidr: Vec<String>,
    /// The network's own NAT64 translator prefixes, for the sidecar to unpack.
    pub egress_nat64_prefix: Vec<String>,
    pub ready_timeout: Duration,
    pub list_timeout: Duration,
    pub stop_timeout: i64,
    /// How long an operation waits for another one on the same sandbox ID.
    pub lock_timeout: Duration,
    /// How long a removal the engine reports as already in progress may take.
    pub removal_wait: Duration,
    /// The memory, CPU and process limits of each sandbox.
    pub sandbox_resources: crate::resources::Resources,
    /// The same of each netproxy sidecar.
    pub sidecar_resources: crate::resources::Resources,
}

#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("{0}")]
    Invalid(#[from] IdError),
    #[error("{0}")]
    Usage(String),
    #[error("{step}: {source}")]
    Engine { step: String, source: EngineError },
    #[error("{0}")]
    Ledger(#[from] LedgerError),
    #[error("{0}")]
    Ports(#[from] PortError),
    #[error("{0}")]
    Intent(#[from] crate::intent::IntentError),
    #[error("{0}")]
    Lock(#[from] LockError),
    /// A network under one of the sandbox's names exists but is not what lifecycle makes
    /// (`decide::existing_network`); nothing was put on it and it is left as found.
    #[error("network {name} already exists but is not one lifecycle makes: {reason}; refusing to use it (remove it, or find out who made it)")]
    UnsafeNetwork { name: String, reason: String },
    #[error("no sandbox {0} on this stack (nothing to destroy)")]
    NoSuchSandbox(String),
    /// The ownership claim a teardown needs was refused (another process holds the ID) or
    /// could not be asked for; nothing was torn down.
    #[error("sandbox {id}: not torn down: {reason}")]
    NotOurs { id: String, reason: String },
    #[error("sandbox {id} failed to become ready within {secs}s at {url}; what was created is destroyed")]
    NotReady { id: String, url: String, secs: u64 },
    /// Teardown did not finish; the quarantine record is kept.
    #[error("sandbox {id}: teardown deferred, quarantine record kept: {reason}")]
    Deferred { id: String, reason: String },
    /// A create failed and undoing it failed too: what is left is named, quarantined under
    /// `generation`, and its port stays reserved.
    #[error("sandbox {id}: create failed ({cause}) and its rollback failed; left behind: {}; quarantined as generation {generation}, port kept reserved; rollback errors: {}", left.join(", "), errors.join("; "))]
    RollbackFailed {
        id: String,
        cause: String,
        left: Vec<String>,
        errors: Vec<String>,
        generation: String,
    },
}

pub(crate) fn step(what: String) -> impl FnOnce(EngineError) -> OpError {
    move |source| OpError::Engine { step: what, source }
}

/// What `create` returns and the CLI prints.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Created {
    pub sandbox_id: String,
    pub container_name: String,
    pub container_id: String,
    pub url: String,
    pub mode: Mode,
    /// The host port of its URL: its own published port (open mode) or its sidecar's relay
    /// (restricted mode).
    pub host_port: Option<u16>,
    /// `true` when the sandbox already existed and was discovered rather than made.
    pub discovered: bool,
    /// The container's `lifecycle.scope` label (whose (user, thread) it is), when it has one.
    /// Not printed: the CLI's output stays as it was.
    #[serde(skip)]
    pub scope: Option<String>,
}

/// What an absent teardown did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Teardown {
    pub strict: bool,
    /// The ports of the retired generations (every port of the sandbox for `unknown`).
    pub ports_released: Vec<u16>,
}

/// What `destroy` did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Destroyed {
    pub sandbox_id: String,
    /// The container stopped and removed, if one was present.
    pub container_id: Option<String>,
    pub ports_released: Vec<u16>,
    /// Whether quarantine records were retired by an absent teardown.
    pub absent_teardown: bool,
    /// What was left of the sandbox without its container (a sidecar, networks) and removed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leftovers: Vec<String>,
}

/// What `destroy_generation` did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "result", rename_all = "lowercase")]
pub enum GenerationTeardown {
    /// The tracked generation (or nothing, or only records) was there and is torn down.
    Destroyed(Destroyed),
    /// The name holds another generation, `found`, which was left running; the tracked one
    /// is confirmed gone and its record and port retired.
    Replaced {
        found: String,
        ports_released: Vec<u16>,
    },
}

/// One line of `retire`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "result", rename_all = "lowercase")]
pub enum Retired {
    Retired {
        sandbox_id: String,
        strict: bool,
        ports_released: Vec<u16>,
    },
    Kept {
        #[serde(skip_serializing_if = "Option::is_none")]
        sandbox_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        reason: String,
    },
    Deferred {
        sandbox_id: String,
        error: String,
    },
}

/// One sandbox in `ls`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Listed {
    pub sandbox_id: Option<String>,
    pub container_name: String,
    pub container_id: String,
    pub state: String,
    pub mode: Option<String>,
    /// The sandbox container's own published host port (open mode; a restricted sandbox's is
    /// its sidecar's, `Lifecycle::way_in`); not printed by `ls`.
    #[serde(skip)]
    pub host_port: Option<u16>,
    /// Whether it carries a `lifecycle.scope` label (lifecycle made it); not printed by `ls`.
    #[serde(skip)]
    pub scoped: bool,
    /// Whether the provisioner API made it (`lifecycle.origin=provisioner`); not printed.
    #[serde(skip)]
    pub provisioned: bool,
    /// Its labels; not printed.
    #[serde(skip)]
    pub labels: HashMap<String, String>,
}

#[derive(Debug)]
pub struct Lifecycle {
    pub engine: Engine,
    pub ledger: Ledger,
    pub intents: crate::intent::Intents,
    pub ports: Ports,
    pub locks: Locks,
    pub settings: Settings,
}

impl Lifecycle {
    /// A lifecycle talking to `engine`, keeping its ledger, ports and locks under `state_dir`.
    pub fn new(engine: Engine, state_dir: &Path, settings: Settings) -> Self {
        let prefix = settings.prefix.as_str();
        Self {
            engine,
            ledger: Ledger::new(state_dir, prefix),
            intents: crate::intent::Intents::new(state_dir, prefix),
            ports: Ports::new(state_dir),
            locks: Locks::new(state_dir, prefix, settings.lock_timeout),
            settings,
        }
    }

    /// Lock waits also give up once `cancel` turns `true` (the CLI's SIGINT/SIGTERM).
    pub fn with_cancel(mut self, cancel: tokio::sync::watch::Receiver<bool>) -> Self {
        self.locks = self.locks.with_cancel(cancel);
        self
    }

    pub(crate) fn names(&self, id: &str) -> Names {
        Names::new(&self.settings.prefix, id)
    }

    /// deer-flow's labels; lifecycle's restricted mode is written `allowlist`.
    pub(crate) fn labels(&self, id: &str, role: &str) -> HashMap<String, String> {
        let mode = match self.settings.mode {
            Mode::Open => naming::MODE_OPEN,
            Mode::Restricted => naming::MODE_ALLOWLIST,
        };
        HashMap::from([
            (naming::LABEL_ROLE.to_owned(), role.to_owned()),
            (naming::LABEL_SANDBOX_ID.to_owned(), id.to_owned()),
            (naming::LABEL_NETWORK_MODE.to_owned(), mode.to_owned()),
            (
                naming::LABEL_STACK.to_owned(),
                self.settings.prefix.as_str().to_owned(),
            ),
        ])
    }

    /// The one place a `Created` is built: from what was made, or from a found container. The
    /// URL is the host port on the publish address in both modes: the sandbox's own port in
    /// open mode, its sidecar's relay in restricted mode (the host has no address on the
    /// sandbox's internal network, so its IP is never a URL).
    pub(crate) fn created(
        &self,
        id: &str,
        container_id: &str,
        mode: Mode,
        host_port: Option<u16>,
        discovered: bool,
    ) -> Created {
        let url = format!(
            "http://{}:{}",
            url_host(&self.settings.publish_address),
            host_port.unwrap_or(0)
        );
        Created {
            sandbox_id: id.to_owned(),
            container_name: self.names(id).sandbox,
            container_id: container_id.to_owned(),
            url,
            mode,
            host_port,
            discovered,
            scope: None,
        }
    }

    /// A found container as `Created`, with `way_in` (`Lifecycle::way_in`) as its host port.
    pub(crate) fn discovered(&self, id: &str, c: &Container, way_in: Option<u16>) -> Created {
        let mut created = self.created(id, &c.id, mode_of(c), way_in, true);
        created.scope = c.labels.get(naming::LABEL_SCOPE).cloned();
        created
    }

    /// Whether found sandbox `c` is reached through its sidecar's relay (restricted by its
    /// label), so that without one (`way_in` is `None`) nothing reaches it.
    pub fn needs_relay(&self, c: &Container) -> bool {
        mode_of(c) == Mode::Restricted
    }

    /// The host port a found sandbox `c` is reached at: its published port (open mode), or
    /// the relay port its sidecar `{P}netproxy-{digest}` publishes (restricted mode, by its
    /// label), that sidecar being one lifecycle made for this sandbox ID and stack and running.
    /// `None`: there is no way in (a restricted sandbox made before the relay, or whose sidecar
    /// is gone or stopped).
    pub async fn way_in(&self, id: &str, c: &Container) -> Result<Option<u16>, OpError> {
        if mode_of(c) == Mode::Open {
            return Ok(c.host_port);
        }
        let name = self.names(id).sidecar;
        let sidecar = self
            .engine
            .inspect(&name)
            .await
            .map_err(step(format!("inspect {name}")))?;
        Ok(sidecar
            .filter(|s| {
                s.running
                    && s.labels.get(naming::LABEL_SANDBOX_ID).map(String::as_str) == Some(id)
                    && s.labels.get(naming::LABEL_STACK).map(String::as_str)
                        == Some(self.settings.prefix.as_str())
            })
            .and_then(|s| s.host_port))
    }

    /// Inspect of the sandbox's name: `None` only for "no such container" about that name.
    pub(crate) async fn inspect_sandbox(&self, id: &str) -> Result<Option<Container>, OpError> {
        let name = self.names(id).sandbox;
        self.engine
            .inspect(&name)
            .await
            .map_err(step(format!("inspect {name}")))
    }

    /// Exact-name inspect answering "no such container" means absent; anything else is not.
    pub async fn is_absent(&self, id: &str) -> Result<bool, OpError> {
        Ok(self.inspect_sandbox(id).await?.is_none())
    }

    /// `quarantine mark`: records `generation` (default: the container now under the name,
    /// else `unknown`) under the sandbox's lock. Returns the generation and the record's path.
    pub async fn mark(
        &self,
        id: &str,
        generation: Option<String>,
    ) -> Result<(String, std::path::PathBuf), OpError> {
        let id = naming::parse_sandbox_id(id)?;
        let _lock = self.locks.acquire(&id).await?;
        let generation = match generation {
            Some(g) => g,
            None => match self.inspect_sandbox(&id).await {
                Ok(Some(c)) if !c.id.is_empty() => c.id,
                // Not readable: `unknown` fences whatever container the next create finds.
                _ => UNKNOWN_GENERATION.to_owned(),
            },
        };
        let path = self.ledger.mark(&id, &generation)?;
        Ok((generation, path))
    }

    /// The stack's sandboxes.
    pub async fn list(&self) -> Result<Vec<Listed>, OpError> {
        let listed = self
            .engine
            .list_sandboxes(self.settings.prefix.as_str())
            .await
            .map_err(step("list sandboxes".into()))?;
        Ok(listed
            .into_iter()
            .map(|c| Listed {
                sandbox_id: c.labels.get(naming::LABEL_SANDBOX_ID).cloned(),
                container_name: c.name,
                container_id: c.id,
                state: c.state,
                mode: c.labels.get(naming::LABEL_NETWORK_MODE).cloned(),
                host_port: c.host_port,
                scoped: c.labels.contains_key(naming::LABEL_SCOPE),
                provisioned: c.labels.get(naming::LABEL_ORIGIN).map(String::as_str)
                    == Some(naming::ORIGIN_PROVISIONER),
                labels: c.labels,
            })
            .collect())
    }
}

/// How a found sandbox was made, by its `deerflow.network_mode` label (any value but `open`,
/// or none, is restricted).
fn mode_of(c: &Container) -> Mode {
    let label = c.labels.get(naming::LABEL_NETWORK_MODE).map(String::as_str);
    if naming::label_is_restricted(label) {
        Mode::Restricted
    } else {
        Mode::Open
    }
}

/// The host part of a sandbox's URL on this machine: the publish address, with the
/// loopback address for a wildcard one and brackets for IPv6.
pub fn url_host(publish: &str) -> String {
    match publish.parse::<std::net::IpAddr>() {
        Ok(ip) if ip.is_unspecified() => "127.0.0.1".to_owned(),
        Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
        _ => publish.to_owned(),
    }
}

/// A name conflict: the sandbox (or its sidecar) exists already, made by someone else, so a
/// failed create must not remove anything.
pub(crate) fn is_conflict(e: &OpError) -> bool {
    matches!(
        e,
        OpError::Engine {
            source: EngineError::Api { status: 409, .. },
            ..
        }
    )
}

pub(crate) fn deferred(id: &str, reason: String) -> OpError {
    OpError::Deferred {
        id: id.to_owned(),
        reason,
    }
}
