//! Creating a sandbox (docs/architecture.md, "lifecycle"), under its lock: first what
//! `decide::before_create` says about quarantine records, then the create. Open mode publishes
//! the sandbox port on a reserved host port (the reservation moves to the container's
//! generation as soon as it has an ID); restricted mode makes the sandbox's internal
//! (host-less) and egress networks, the sidecar (on both, its relay published on the reserved
//! port) and the sandbox (internal only, its proxy variables pointing at the sidecar:
//! `create_restricted`). Then the readiness wait (or, for the provisioner API, only the check
//! that the container runs). Every object a create makes carries its intent token
//! (`intent`). A name conflict means another create won: the container found is discovered
//! (or replaced when it is exited, unhealthy, or has no way in). A failed create undoes what it
//! made, by ID; if that fails too, the error says what is left, which is quarantined with its
//! port kept.
//! A caller that owns the sandbox's ID elsewhere (the provider's ownership claim) is asked
//! first, through `BeforeUndo`, so the undo runs under its teardown claim like any teardown.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use bollard::container::Config;
use bollard::models::{HostConfig, PortBinding};

use crate::decide::{self, Discovery, Mode};
use crate::intent::{Step, LABEL_INTENT};
use crate::naming;
use crate::ops::{is_conflict, step, Created, Lifecycle, OpError};
use crate::ready;

/// What a create attempt made so far, for an honest undo.
#[derive(Debug, Default)]
pub(crate) struct Made {
    /// The sandbox container's ID, once the engine returned one.
    pub(crate) sandbox: Option<String>,
    /// Whether restricted objects (networks, sidecar) may exist.
    pub(crate) restricted: bool,
    /// The sidecar's ID, once the engine returned one.
    pub(crate) sidecar: Option<String>,
    /// Networks found under the sandbox's names and refused as not lifecycle's: an undo
    /// leaves them as they were, since this create did not make them.
    pub(crate) foreign: Vec<String>,
    /// The (user, thread) digest written as the sandbox's scope label; empty for a sandbox
    /// whose ID is not derived from a (user, thread) (the provisioner API's), which gets none.
    pub(crate) scope: String,
    /// This create's intent token, on every object it makes (`intent::LABEL_INTENT`).
    pub(crate) token: String,
}

/// What a create asks for beyond the stack's settings: the provisioner API's bind mounts
/// (`host:container[:ro]`, already validated under the mount root). Empty for `/v1/` and the
/// CLI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extras {
    pub binds: Vec<String>,
    /// Labels added to the sandbox's own (which they never replace).
    pub labels: Vec<(String, String)>,
    /// Environment added to the sandbox's own (`MAX_SHELL_SESSIONS=…`).
    pub env: Vec<String>,
    /// Answer as soon as the container runs (and, in open mode, its port is known), without
    /// the readiness wait: the provisioner API's client waits for readiness itself, after a
    /// create it gives 30 s.
    pub skip_ready: bool,
}

/// Asked before a create tears anything down: what a failed create made, or a dead container
/// it replaces. The teardown runs only on `Ok`; on `Err` (the reason) nothing is torn down:
/// what a failed create made is quarantined and reported as left, as when the undo itself
/// fails, and a replacement is refused, because tearing down unclaimed would let another
/// process take the ID while it is half gone. After a replacement's teardown,
/// `after_teardown` must answer `Ok` before the fresh container is created.
pub trait BeforeUndo: Sync {
    fn before_undo<'a>(
        &'a self,
        id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

    fn after_teardown<'a>(
        &'a self,
        _id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(async { Ok(()) })
    }
}

/// Runs `teardown` under `guard`'s teardown claim: asked first (a refusal is `NotOurs` and
/// nothing is removed), told after it succeeded.
pub(crate) async fn under_claim<T>(
    guard: &dyn BeforeUndo,
    id: &str,
    teardown: impl Future<Output = Result<T, OpError>>,
) -> Result<T, OpError> {
    let not_ours = |reason| OpError::NotOurs {
        id: id.to_owned(),
        reason,
    };
    guard.before_undo(id).await.map_err(not_ours)?;
    let done = teardown.await?;
    guard.after_teardown(id).await.map_err(not_ours)?;
    Ok(done)
}

/// Nobody to ask (the one-shot CLI): the undo always runs.
#[derive(Debug)]
pub struct Unguarded;

impl BeforeUndo for Unguarded {
    fn before_undo<'a>(
        &'a self,
        _id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(async { Ok(()) })
    }
}

impl Lifecycle {
    pub async fn create(&self, user: &str, thread: &str) -> Result<Created, OpError> {
        self.create_guarded(user, thread, &Unguarded).await
    }

    /// `create`, asking `guard` before any undo of a failed create.
    pub async fn create_guarded(
        &self,
        user: &str,
        thread: &str,
        guard: &dyn BeforeUndo,
    ) -> Result<Created, OpError> {
        let id = naming::sandbox_id(user, thread)?;
        let scope = naming::scope_digest(user, thread);
        self.create_sandbox(&id, &scope, &Extras::default(), guard)
            .await
    }

    /// Creates (or discovers) sandbox `id` whose scope label is `scope` (none when empty),
    /// with `extras`; `id` is already checked by the caller (a derived ID, or the provisioner
    /// API's `[a-z0-9_-]{1,64}`).
    pub async fn create_sandbox(
        &self,
        id: &str,
        scope: &str,
        extras: &Extras,
        guard: &dyn BeforeUndo,
    ) -> Result<Created, OpError> {
        let id = id.to_owned();
        let scope = scope.to_owned();
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
        let _lock = self.locks.acquire(&id).await?;
        self.with_intent(&id, guard, self.create_locked(&id, &scope, extras, guard))
            .await
    }

    /// `create_sandbox`'s body, under the lock and an intent record.
    async fn create_locked(
        &self,
        id: &str,
        scope: &str,
        extras: &Extras,
        guard: &dyn BeforeUndo,
    ) -> Result<Created, OpError> {
        if self.ledger.is_quarantined(id)? {
            if let Some(c) = self.retire_before_create(id).await? {
                return self.discover_or_replace(id, scope, extras, c, guard).await;
            }
        }
        match self.create_fresh(id, scope, extras, guard).await {
            Err(e) if is_conflict(&e) => match self.inspect_sandbox(id).await? {
                Some(c) => self.discover_or_replace(id, scope, extras, c, guard).await,
                // Not the sandbox but what is left of an earlier one under its derived names
                // (a lone sidecar or networks, from before intent records): removed if
                // lifecycle made it for this ID, then the create runs once more.
                None => {
                    tracing::warn!(sandbox_id = id, error = %e, "a create met leftovers under the sandbox's names: converging, then creating again");
                    let cleared =
                        under_claim(guard, id, self.converge(id, &Step::Teardown)).await?;
                    if cleared.removed.is_empty() {
                        return Err(e);
                    }
                    self.create_fresh(id, scope, extras, guard).await
                }
            },
            other => other,
        }
    }

    /// A container found under the sandbox's name: handed out if it runs, is not unhealthy and
    /// has a way in (`Lifecycle::way_in`), else destroyed by its ID and replaced by a fresh one,
    /// in this call.
    async fn discover_or_replace(
        &self,
        id: &str,
        scope: &str,
        extras: &Extras,
        c: crate::engine::Container,
        guard: &dyn BeforeUndo,
    ) -> Result<Created, OpError> {
        let way_in = self.way_in(id, &c).await?;
        let reachable = way_in.is_some() || !self.needs_relay(&c);
        match decide::discovery(c.running, c.health.as_deref(), reachable) {
            Discovery::Reuse => Ok(self.discovered(id, &c, way_in)),
            Discovery::Replace => {
                tracing::info!(sandbox_id = id, container_id = %c.id, running = c.running, health = ?c.health, way_in = ?way_in, "replacing a sandbox that is not running, unhealthy, or has no way in");
                // A teardown like any other: under the guard's teardown claim.
                under_claim(guard, id, async {
                    self.destroy_present(id, &c)
                        .await
                        .map_err(|e| crate::teardown::unfinished(id, e))
                })
                .await?;
                self.create_fresh(id, scope, extras, guard).await
            }
        }
    }

    async fn create_fresh(
        &self,
        id: &str,
        scope: &str,
        extras: &Extras,
        guard: &dyn BeforeUndo,
    ) -> Result<Created, OpError> {
        let step_ = Step::create();
        self.changing(id, &step_)?;
        let mut made = Made {
            scope: scope.to_owned(),
            token: match step_ {
                Step::Create { token } => token,
                Step::Teardown => String::new(),
            },
            ..Made::default()
        };
        let result = match self.settings.mode {
            Mode::Open => self.create_open(id, extras, &mut made).await,
            Mode::Restricted => self.create_restricted(id, extras, &mut made).await,
        };
        let created = match result {
            Ok(c) => c,
            // Someone else's objects: nothing of ours to undo but the pending port.
            Err(e) if is_conflict(&e) && made.sandbox.is_none() => {
                self.ports.release_pending(id)?;
                return Err(e);
            }
            Err(e) => return Err(self.undo(id, &made, e, guard).await),
        };
        if extras.skip_ready {
            // What the caller is told is running must be: a container that exited right
            // after its start is undone like any create that failed.
            return match self.confirm_running(id, &created).await {
                Ok(()) => Ok(created),
                Err(e) => Err(self.undo(id, &made, e, guard).await),
            };
        }
        let limit = self.settings.ready_timeout;
        if limit.is_zero() || ready::wait(&created.url, limit).await {
            return Ok(created);
        }
        let not_ready = OpError::NotReady {
            id: id.to_owned(),
            url: created.url.clone(),
            secs: limit.as_secs(),
        };
        Err(self.undo(id, &made, not_ready, guard).await)
    }

    /// `labels`, with this create's intent token.
    pub(crate) fn made_labels(&self, id: &str, role: &str, token: &str) -> HashMap<String, String> {
        let mut labels = self.labels(id, role);
        labels.insert(LABEL_INTENT.to_owned(), token.to_owned());
        labels
    }

    /// The container a create just started still runs (an inspect by its ID).
    async fn confirm_running(&self, id: &str, created: &Created) -> Result<(), OpError> {
        let cid = &created.container_id;
        let name = &created.container_name;
        let found = self
            .engine
            .inspect(cid)
            .await
            .map_err(step(format!("inspect {name} ({cid})")))?;
        match found {
            Some(c) if c.running => Ok(()),
            other => Err(OpError::Engine {
                step: format!("start {name} ({cid})"),
                source: crate::engine::EngineError::Unreadable(format!(
                    "sandbox {id} is not running right after its start (state {:?})",
                    other.map(|c| c.state).unwrap_or_else(|| "gone".into())
                )),
            }),
        }
    }

    pub(crate) fn sandbox_config(
        &self,
        id: &str,
        token: &str,
        scope: &str,
        extras: &Extras,
        host_config: HostConfig,
        env: Option<Vec<String>>,
    ) -> Config<String> {
        let port_key = format!("{}/tcp", self.settings.sandbox_port);
        let mut labels = self.made_labels(id, "sandbox", token);
        for (k, v) in &extras.labels {
            labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        // Who the sandbox is for, so a provider hands it to that (user, thread) only.
        if !scope.is_empty() {
            labels.insert(naming::LABEL_SCOPE.to_owned(), scope.to_owned());
        }
        let env = match (env, extras.env.is_empty()) {
            (env, true) => env,
            (env, false) => Some(
                env.into_iter()
                    .flatten()
                    .chain(extras.env.clone())
                    .collect(),
            ),
        };
        Config {
            image: self.settings.image.clone(),
            cmd: self.settings.sandbox_cmd.clone(),
            env,
            labels: Some(labels),
            exposed_ports: Some(HashMap::from([(port_key, HashMap::new())])),
            host_config: Some(host_config),
            ..Default::default()
        }
    }

    async fn create_open(
        &self,
        id: &str,
        extras: &Extras,
        made: &mut Made,
    ) -> Result<Created, OpError> {
        let port = self.ports.reserve(id)?;
        let binding = PortBinding {
            host_ip: Some(self.settings.publish_address.clone()),
            host_port: Some(port.to_string()),
        };
        let host = self.settings.sandbox_resources.apply(HostConfig {
            binds: binds(extras),
            port_bindings: Some(HashMap::from([(
                format!("{}/tcp", self.settings.sandbox_port),
                Some(vec![binding]),
            )])),
            ..Default::default()
        });
        self.create_and_start(
            id,
            self.sandbox_config(id, &made.token, &made.scope, extras, host, None),
            made,
        )
        .await?;
        let cid = made.sandbox.clone().unwrap_or_default();
        let mut created = self.created(id, &cid, Mode::Open, Some(port), false);
        created.scope = scope_of(made);
        Ok(created)
    }

    /// Creates and starts the sandbox; its ID goes into `made` (and the pending port
    /// reservation, its own in open mode or its sidecar's relay in restricted mode, to that
    /// generation) before the start, so an undo knows what to remove.
    pub(crate) async fn create_and_start(
        &self,
        id: &str,
        config: Config<String>,
        made: &mut Made,
    ) -> Result<(), OpError> {
        let name = &self.names(id).sandbox;
        let cid = self
            .engine
            .create(name, config)
            .await
            .map_err(step(format!("create {name}")))?;
        made.sandbox = Some(cid.clone());
        self.ports.assign(id, &cid)?;
        self.engine
            .start(&cid)
            .await
            .map_err(step(format!("start {name} ({cid})")))?;
        Ok(())
    }
}

/// The binds of a create, `None` when there are none (the body then carries no `Binds`).
pub(crate) fn binds(extras: &Extras) -> Option<Vec<String>> {
    (!extras.binds.is_empty()).then(|| extras.binds.clone())
}

pub(crate) fn scope_of(made: &Made) -> Option<String> {
    (!made.scope.is_empty()).then(|| made.scope.clone())
}
