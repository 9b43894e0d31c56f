//! The operations: create (retiring a quarantined generation first), discover, is_absent,
//! destroy, complete_absent_teardown and retire. Every engine call goes through `Engine`, i.e.
//! through the one address lifecycle was given. Decisions come from `decide`; storage from
//! `ledger` and `ports`, whose errors fail closed.

use std::collections::HashMap;
use std::time::Duration;

use crate::decide::{self, AbsentPlan, Listing, Mode};
use crate::engine::{Container, Engine, EngineError};
use crate::ledger::{Ledger, LedgerError, UNKNOWN_GENERATION};
use crate::naming::{self, IdError, Names};
use crate::ports::{PortError, Ports};

/// How lifecycle creates sandboxes; validated once from the flags.
#[derive(Debug, Clone)]
pub struct Settings {
    pub prefix: String,
    pub mode: Mode,
    pub image: Option<String>,
    pub sandbox_port: u16,
    pub sandbox_cmd: Option<Vec<String>>,
    pub sidecar_image: Option<String>,
    pub sidecar_cmd: Option<Vec<String>>,
    pub egress_allow: Vec<String>,
    /// Address ranges the sidecar may dial although they are special-purpose (its upstreams on
    /// a private network, say).
    pub egress_allow_cidr: Vec<String>,
    pub ready_timeout: Duration,
    pub list_timeout: Duration,
    pub stop_timeout: i64,
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
    #[error("no sandbox {0} on this stack (nothing to destroy)")]
    NoSuchSandbox(String),
    #[error("sandbox {id} failed to become ready within {secs}s at {url}; what was created is destroyed")]
    NotReady { id: String, url: String, secs: u64 },
    /// Teardown did not finish; the quarantine record is kept.
    #[error("sandbox {id}: teardown deferred, quarantine record kept: {reason}")]
    Deferred { id: String, reason: String },
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
    pub host_port: Option<u16>,
    /// `true` when the sandbox already existed and was discovered rather than made.
    pub discovered: bool,
}

/// What an absent teardown did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Teardown {
    pub strict: bool,
    pub port_released: Option<u16>,
}

#[derive(Debug)]
pub struct Lifecycle {
    pub engine: Engine,
    pub ledger: Ledger,
    pub ports: Ports,
    pub settings: Settings,
}

impl Lifecycle {
    pub(crate) fn names(&self, id: &str) -> Names {
        Names::new(&self.settings.prefix, id)
    }

    pub(crate) fn labels(&self, id: &str, role: &str) -> HashMap<String, String> {
        HashMap::from([
            (naming::LABEL_ROLE.to_owned(), role.to_owned()),
            (naming::LABEL_SANDBOX_ID.to_owned(), id.to_owned()),
            (
                naming::LABEL_NETWORK_MODE.to_owned(),
                self.settings.mode.as_str().to_owned(),
            ),
            (naming::LABEL_STACK.to_owned(), self.settings.prefix.clone()),
        ])
    }

    /// Exact-name inspect answering "no such container" means absent; anything else is not.
    pub async fn is_absent(&self, id: &str) -> Result<bool, OpError> {
        let name = self.names(id).sandbox;
        Ok(self
            .engine
            .inspect(&name)
            .await
            .map_err(step(format!("inspect {name}")))?
            .is_none())
    }

    pub async fn create(&self, user: &str, thread: &str) -> Result<Created, OpError> {
        let id = naming::sandbox_id(user, thread)?;
        if self.settings.image.is_none() {
            return Err(OpError::Usage("create needs --image".into()));
        }
        if self.settings.mode == Mode::Restricted && self.settings.sidecar_image.is_none() {
            return Err(OpError::Usage(
                "restricted mode needs --sidecar-image".into(),
            ));
        }
        // Nothing is written before the engine is known to answer.
        self.engine.ping().await.map_err(step("ping".into()))?;
        if self.ledger.is_quarantined(&id)? {
            if let Some(existing) = self.retire_before_create(&id).await? {
                return Ok(existing);
            }
        }
        let result = match self.settings.mode {
            Mode::Open => self.create_open(&id).await,
            Mode::Restricted => self.create_restricted(&id).await,
        };
        if let Err(OpError::Engine {
            source: EngineError::Api { status: 409, .. },
            ..
        }) = &result
        {
            // The sandbox exists already (another create won): discover it.
            let names = self.names(&id);
            if let Some(c) = self
                .engine
                .inspect(&names.sandbox)
                .await
                .map_err(step(format!("inspect {}", names.sandbox)))?
            {
                return Ok(self.discovered(&id, &c));
            }
        }
        result
    }

    /// A quarantined sandbox: confirm absence (or stop and remove a quarantined generation),
    /// run the absent teardown, retire the record. A live container of another generation
    /// proves the old ones gone: their records retire and it is returned as discovered.
    async fn retire_before_create(&self, id: &str) -> Result<Option<Created>, OpError> {
        let names = self.names(id);
        let present = self.engine.inspect(&names.sandbox).await.map_err(|e| {
            deferred(
                id,
                format!("cannot confirm {} is absent: {e}", names.sandbox),
            )
        })?;
        if let Some(c) = present {
            if !self.ledger.fences(id, &c.id)? {
                self.ledger.retire(id)?;
                return Ok(Some(self.discovered(id, &c)));
            }
            self.destroy_present(id, &c)
                .await
                .map_err(|e| deferred(id, e.to_string()))?;
        }
        self.complete_absent_teardown(id)
            .await
            .map_err(|e| match e {
                OpError::Ledger(_) | OpError::Ports(_) | OpError::Deferred { .. } => e,
                other => deferred(id, other.to_string()),
            })?;
        Ok(None)
    }

    fn discovered(&self, id: &str, c: &Container) -> Created {
        let names = self.names(id);
        let mode = match c.labels.get(naming::LABEL_NETWORK_MODE).map(String::as_str) {
            Some("restricted") => Mode::Restricted,
            _ => Mode::Open,
        };
        let url = match mode {
            Mode::Open => format!("http://127.0.0.1:{}", c.host_port.unwrap_or(0)),
            Mode::Restricted => format!(
                "http://{}:{}",
                c.networks.get(&names.network).cloned().unwrap_or_default(),
                self.settings.sandbox_port
            ),
        };
        Created {
            sandbox_id: id.to_owned(),
            container_name: names.sandbox,
            container_id: c.id.clone(),
            url,
            mode,
            host_port: c.host_port,
            discovered: true,
        }
    }

    /// `destroy ID`: the sandbox must exist.
    pub async fn destroy(&self, id: &str) -> Result<Option<u16>, OpError> {
        let id = naming::parse_sandbox_id(id)?;
        let name = self.names(&id).sandbox;
        match self
            .engine
            .inspect(&name)
            .await
            .map_err(step(format!("inspect {name}")))?
        {
            Some(c) => self.destroy_present(&id, &c).await,
            None => Err(OpError::NoSuchSandbox(id)),
        }
    }

    /// Stop and remove a present sandbox; the restricted cleanup runs unless its label says
    /// `open`. Any failure is returned and leaves a quarantine record for this generation.
    pub async fn destroy_present(&self, id: &str, c: &Container) -> Result<Option<u16>, OpError> {
        let names = self.names(id);
        let generation = if c.id.is_empty() {
            UNKNOWN_GENERATION
        } else {
            c.id.as_str()
        };
        let label = c.labels.get(naming::LABEL_NETWORK_MODE).map(String::as_str);
        let result = async {
            self.engine
                .stop(&names.sandbox, self.settings.stop_timeout)
                .await
                .map_err(step(format!("stop {}", names.sandbox)))?;
            self.engine
                .remove(&names.sandbox)
                .await
                .map_err(step(format!("remove {}", names.sandbox)))?;
            if decide::destroy_needs_restricted_cleanup(label) {
                self.strict_cleanup(&names).await?;
            }
            Ok::<_, OpError>(())
        }
        .await;
        if let Err(e) = result {
            self.ledger.mark(id, generation)?;
            return Err(e);
        }
        Ok(self.ports.release(id)?)
    }

    async fn strict_cleanup(&self, names: &Names) -> Result<(), OpError> {
        let t = self.settings.stop_timeout;
        self.engine
            .stop(&names.sidecar, t)
            .await
            .map_err(step(format!("stop {}", names.sidecar)))?;
        self.engine
            .remove(&names.sidecar)
            .await
            .map_err(step(format!("remove {}", names.sidecar)))?;
        self.engine
            .remove_network(&names.network)
            .await
            .map_err(step(format!("remove network {}", names.network)))?;
        Ok(())
    }

    /// Teardown of a sandbox whose container is gone (DESIGN §4), then the port and the record.
    pub async fn complete_absent_teardown(&self, id: &str) -> Result<Teardown, OpError> {
        let names = self.names(id);
        let listing = if decide::needs_listing(self.settings.mode) {
            Some(
                match self
                    .engine
                    .list_names(&names.sidecar, self.settings.list_timeout)
                    .await
                {
                    Ok(n) => Listing::Names(n),
                    Err(e) => Listing::Failed(e.to_string()),
                },
            )
        } else {
            None
        };
        let plan = decide::absent_plan(self.settings.mode, listing.as_ref(), &names.sidecar);
        if let Some(Listing::Failed(why)) = &listing {
            tracing::warn!(sandbox_id = id, error = %why, "listing the network proxy failed; keeping the restricted cleanup");
        }
        match plan {
            AbsentPlan::Strict => self.strict_cleanup(&names).await?,
            AbsentPlan::Skip => tracing::info!(
                "Retiring open-mode sandbox {id} without restricted cleanup: no network proxy {} is listed.",
                names.sidecar
            ),
        }
        let port_released = self.ports.release(id)?;
        self.ledger.retire(id)?;
        Ok(Teardown {
            strict: plan == AbsentPlan::Strict,
            port_released,
        })
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

fn deferred(id: &str, reason: String) -> OpError {
    OpError::Deferred {
        id: id.to_owned(),
        reason,
    }
}
