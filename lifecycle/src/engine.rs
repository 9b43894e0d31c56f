//! The engine client: bollard over the one address lifecycle is given (the stack's sockproxy),
//! nothing else. Answers are reduced to what the operations decide on, and every failure keeps
//! what the engine (or the proxy) said, so a refusal reaches the caller verbatim. Stops and
//! removes of sandboxes are given the container ID the caller inspected (the proxy pins it),
//! never a name that a replacement could have taken since.

use std::collections::HashMap;
use std::time::Duration;

use bollard::container::{
    Config, CreateContainerOptions, InspectContainerOptions, ListContainersOptions,
    RemoveContainerOptions, StartContainerOptions, StopContainerOptions,
};
use bollard::Docker;

use crate::decide::{is_no_such, is_removal_in_progress, Object};

#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    /// The engine, or the proxy in front of it, answered with an error.
    #[error("Error response from daemon: {message} (status {status})")]
    Api { status: u16, message: String },
    #[error("cannot reach the engine at {0}")]
    Unreachable(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("unreadable answer: {0}")]
    Unreadable(String),
    #[error("--docker-host {0:?}: only unix:// addresses are supported")]
    Address(String),
}

impl EngineError {
    pub(crate) fn from_bollard(e: bollard::errors::Error, what: &str) -> Self {
        use bollard::errors::Error as B;
        match e {
            B::DockerResponseServerError {
                status_code,
                message,
            } => Self::Api {
                status: status_code,
                message,
            },
            B::JsonDataError { .. } | B::JsonSerdeError { .. } => Self::Unreadable(e.to_string()),
            other => Self::Unreachable(format!("{what}: {other}")),
        }
    }
}

/// What lifecycle reads from a container inspect.
#[derive(Debug, Clone)]
pub struct Container {
    pub id: String,
    pub running: bool,
    /// `State.Status` (`running`, `created`, `exited`, …).
    pub state: String,
    /// `State.Health.Status` when the container has a health check.
    pub health: Option<String>,
    pub labels: HashMap<String, String>,
    pub networks: HashMap<String, String>,
    pub host_port: Option<u16>,
    /// `HostConfig.Binds` as the engine holds them.
    pub binds: Vec<String>,
}

/// One container of a stack listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedContainer {
    pub name: String,
    pub id: String,
    pub state: String,
    pub labels: HashMap<String, String>,
    /// The first published host port, if any.
    pub host_port: Option<u16>,
}

/// Whether a stop or remove found the object, it was already gone, or the engine is already
/// removing it (dockerd's 409 "removal … is already in progress"; wait for its absence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    Done,
    AlreadyGone,
    InProgress,
}

/// Whether `create_network` made the network or found one under its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkMade {
    Made,
    Existed,
}

/// What lifecycle reads from a network inspect.
#[derive(Debug, Clone, Default)]
pub struct Network {
    pub name: String,
    pub driver: String,
    pub internal: bool,
    /// The driver's options (`com.docker.network.bridge.inhibit_ipv4`, …).
    pub options: HashMap<String, String>,
    pub labels: HashMap<String, String>,
}

#[derive(Debug)]
pub struct Engine {
    path: String,
    address: String,
    /// Made on first use, once version negotiation succeeds; a missing or refusing socket is
    /// the failure of the call that needed it, not of construction.
    docker: tokio::sync::OnceCell<Docker>,
}

impl Engine {
    /// Checks the address (`unix://PATH` only); opens nothing yet.
    pub fn new(address: &str) -> Result<Self, EngineError> {
        let path = address
            .strip_prefix("unix://")
            .filter(|p| p.starts_with('/'))
            .ok_or_else(|| EngineError::Address(address.to_owned()))?;
        Ok(Self {
            path: path.to_owned(),
            address: address.to_owned(),
            docker: tokio::sync::OnceCell::new(),
        })
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    pub(crate) async fn client(&self) -> Result<&Docker, EngineError> {
        self.docker
            .get_or_try_init(|| async {
                let docker =
                    Docker::connect_with_unix(&self.path, 120, bollard::API_DEFAULT_VERSION)
                        .map_err(|e| EngineError::Unreachable(format!("{}: {e}", self.address)))?;
                docker
                    .negotiate_version()
                    .await
                    .map_err(|e| EngineError::from_bollard(e, &self.address))
            })
            .await
    }

    pub async fn ping(&self) -> Result<(), EngineError> {
        self.client()
            .await?
            .ping()
            .await
            .map(|_| ())
            .map_err(|e| EngineError::from_bollard(e, &self.address))
    }

    /// Inspect by exact name; `None` only for "No such container: NAME" about this name.
    pub async fn inspect(&self, name: &str) -> Result<Option<Container>, EngineError> {
        match self
            .client()
            .await?
            .inspect_container(name, None::<InspectContainerOptions>)
            .await
        {
            Ok(c) => {
                let labels = c
                    .config
                    .as_ref()
                    .and_then(|c| c.labels.clone())
                    .unwrap_or_default();
                let networks = c
                    .network_settings
                    .as_ref()
                    .and_then(|n| n.networks.as_ref())
                    .map(|n| {
                        n.iter()
                            .map(|(k, v)| (k.clone(), v.ip_address.clone().unwrap_or_default()))
                            .collect()
                    })
                    .unwrap_or_default();
                let host_port = c
                    .host_config
                    .as_ref()
                    .and_then(|h| h.port_bindings.as_ref())
                    .and_then(|p| {
                        p.values()
                            .flatten()
                            .flatten()
                            .find_map(|b| b.host_port.clone())
                    })
                    .and_then(|p| p.parse().ok());
                let binds = c
                    .host_config
                    .as_ref()
                    .and_then(|h| h.binds.clone())
                    .unwrap_or_default();
                let health = c
                    .state
                    .as_ref()
                    .and_then(|s| s.health.as_ref())
                    .and_then(|h| h.status)
                    .map(|h| h.to_string());
                let state = c
                    .state
                    .as_ref()
                    .and_then(|s| s.status)
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                Ok(Some(Container {
                    id: c.id.unwrap_or_default(),
                    running: c.state.and_then(|s| s.running).unwrap_or(false),
                    state,
                    health,
                    labels,
                    networks,
                    host_port,
                    binds,
                }))
            }
            Err(e) => {
                let e = EngineError::from_bollard(e, &self.address);
                if absent(&e, Object::Container, name) {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// `GET /containers/json?all=1&filters={"name":[name]}`: every `Names` entry listed.
    pub async fn list_names(
        &self,
        name: &str,
        limit: Duration,
    ) -> Result<Vec<String>, EngineError> {
        let mut filters = HashMap::new();
        filters.insert("name".to_owned(), vec![name.to_owned()]);
        let opts = ListContainersOptions {
            all: true,
            filters,
            ..Default::default()
        };
        let listing = async {
            self.client()
                .await?
                .list_containers(Some(opts))
                .await
                .map_err(|e| EngineError::from_bollard(e, &self.address))
        };
        let listed = tokio::time::timeout(limit, listing)
            .await
            .map_err(|_| EngineError::Timeout(limit))??;
        Ok(listed
            .into_iter()
            .flat_map(|c| c.names.unwrap_or_default())
            .collect())
    }

    /// Sandboxes of this stack: (name, ID, state, labels).
    pub async fn list_sandboxes(&self, prefix: &str) -> Result<Vec<ListedContainer>, EngineError> {
        self.list_role(prefix, "sandbox", &format!("{prefix}sandbox-"))
            .await
    }

    /// Containers of the stack (`prefix`) whose `deerflow.role` is `role` and whose names
    /// start `name_prefix`, in any state.
    pub async fn list_role(
        &self,
        prefix: &str,
        role: &str,
        name_prefix: &str,
    ) -> Result<Vec<ListedContainer>, EngineError> {
        let mut filters = HashMap::new();
        filters.insert(
            "label".to_owned(),
            vec![format!("{}={role}", crate::naming::LABEL_ROLE)],
        );
        filters.insert("name".to_owned(), vec![name_prefix.to_owned()]);
        let opts = ListContainersOptions {
            all: true,
            filters,
            ..Default::default()
        };
        let listed = self
            .client()
            .await?
            .list_containers(Some(opts))
            .await
            .map_err(|e| EngineError::from_bollard(e, &self.address))?;
        Ok(listed
            .into_iter()
            .filter_map(|c| {
                let name = c
                    .names?
                    .into_iter()
                    .map(|n| n.trim_start_matches('/').to_owned())
                    .find(|n| !n.contains('/') && n.starts_with(prefix))?;
                let host_port = c
                    .ports
                    .unwrap_or_default()
                    .iter()
                    .find_map(|p| p.public_port);
                Some(ListedContainer {
                    name,
                    id: c.id.unwrap_or_default(),
                    state: c.state.unwrap_or_default(),
                    labels: c.labels.unwrap_or_default(),
                    host_port,
                })
            })
            .collect())
    }

    pub async fn create(&self, name: &str, config: Config<String>) -> Result<String, EngineError> {
        let opts = CreateContainerOptions {
            name: name.to_owned(),
            platform: None,
        };
        self.client()
            .await?
            .create_container(Some(opts), config)
            .await
            .map(|r| r.id)
            .map_err(|e| EngineError::from_bollard(e, &self.address))
    }

    pub async fn start(&self, name: &str) -> Result<(), EngineError> {
        self.client()
            .await?
            .start_container(name, None::<StartContainerOptions<String>>)
            .await
            .map_err(|e| EngineError::from_bollard(e, &self.address))
    }

    /// Polls an inspect of `name` until the container `id` (any container, when `None`) no
    /// longer holds it (`Ok(true)`) or `limit` passes (`Ok(false)`); any other error ends the
    /// wait. By name, not by ID: names are unique, so an absent name or another container under
    /// it proves `id` gone, and a name in scope never reads as a refusal in the proxy's log the
    /// way an unknown ID's 404 does.
    pub async fn wait_gone(
        &self,
        name: &str,
        id: Option<&str>,
        limit: Duration,
    ) -> Result<bool, EngineError> {
        let start = std::time::Instant::now();
        loop {
            match self.inspect(name).await? {
                None => return Ok(true),
                Some(c) if id.is_some_and(|id| c.id != id) => return Ok(true),
                Some(_) => {}
            }
            if start.elapsed() >= limit {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stop; a stopped container (304) is done, an absent one (exact name) already gone.
    pub async fn stop(&self, name: &str, timeout_secs: i64) -> Result<Done, EngineError> {
        match self
            .client()
            .await?
            .stop_container(name, Some(StopContainerOptions { t: timeout_secs }))
            .await
        {
            Ok(()) => Ok(Done::Done),
            Err(e) => gone_or(
                EngineError::from_bollard(e, &self.address),
                Object::Container,
                name,
            ),
        }
    }

    pub async fn remove(&self, name: &str) -> Result<Done, EngineError> {
        let opts = RemoveContainerOptions {
            force: true,
            ..Default::default()
        };
        match self
            .client()
            .await?
            .remove_container(name, Some(opts))
            .await
        {
            Ok(()) => Ok(Done::Done),
            Err(e) => gone_or(
                EngineError::from_bollard(e, &self.address),
                Object::Container,
                name,
            ),
        }
    }
}

pub(crate) fn absent(e: &EngineError, object: Object, name: &str) -> bool {
    matches!(e, EngineError::Api { status, message } if is_no_such(object, name, *status, message))
}

pub(crate) fn gone_or(e: EngineError, object: Object, name: &str) -> Result<Done, EngineError> {
    match e {
        EngineError::Api { status: 304, .. } => Ok(Done::Done),
        EngineError::Api {
            status,
            ref message,
        } if is_removal_in_progress(status, message) => Ok(Done::InProgress),
        e if absent(&e, object, name) => Ok(Done::AlreadyGone),
        e => Err(e),
    }
}
