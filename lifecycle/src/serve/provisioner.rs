//! deer-flow's provisioner API on the provider (docs/architecture.md, "deer-flow's provisioner API"): create-or-return, status, destroy
//! and list of sandboxes, answered the way deer-flow's remote backend reads them (FastAPI's
//! `{"detail": …}` errors). The sandboxes are lifecycle's own (names, labels, ports, restricted
//! mode, teardown, quarantine), so `/v1/`, the CLI and this API see one set; the ones made here
//! are tracked but never reaped on the idle timer or evicted, since deer-flow keeps its pool
//! and idle state itself. Input is checked by `provision` before any engine call.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::claims::Claim;
use super::error::ServeError;
use super::plan::{provision_checked, Checked, ProvisionPlan};
use super::provider::{Planned, Provider};
use super::provision::{self, Bind, Provision};
use crate::create::Extras;
use crate::decide::Mode;
use crate::engine::Container;
use crate::naming;
use crate::ops::OpError;

pub use super::provision::{ApiConfig, LABEL_ORIGIN, ORIGIN_PROVISIONER};

/// One answer of the API: its status and JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiAnswer {
    pub status: u16,
    pub body: Value,
}

fn detail(status: u16, message: impl Into<String>) -> ApiAnswer {
    ApiAnswer {
        status,
        body: json!({ "detail": message.into() }),
    }
}

fn ok(body: Value) -> ApiAnswer {
    ApiAnswer { status: 200, body }
}

/// A provider error in the API's terms: who is at fault and FastAPI's shape.
fn failed(e: &ServeError) -> ApiAnswer {
    let status = match e {
        ServeError::Invalid(_) | ServeError::BadInput(_) => 400,
        ServeError::Collision { .. }
        | ServeError::Busy { .. }
        | ServeError::Owned { .. }
        | ServeError::OtherApi { .. }
        | ServeError::Mounts { .. } => 409,
        ServeError::NotLifecycle { .. } => 409,
        ServeError::Op(OpError::NotOurs { .. }) => 409,
        ServeError::Full { .. } | ServeError::Store(_) => 503,
        ServeError::Op(OpError::NoSuchSandbox(_)) | ServeError::UnknownLease(_) => 404,
        ServeError::Op(_) => 500,
    };
    detail(status, e.to_string())
}

/// A sandbox as the API answers it: where it is and its state, and what it was made for, read
/// back from its labels (`null` for what a sandbox made before they existed does not say).
fn answered(
    id: &str,
    url: &str,
    status: &str,
    labels: &std::collections::HashMap<String, String>,
) -> Value {
    let number = |k: &str| labels.get(k).and_then(|v| v.parse::<u64>().ok());
    json!({
        "sandbox_id": id,
        "sandbox_url": url,
        "status": status,
        "user_id": labels.get(provision::LABEL_USER),
        "thread_id": labels.get(provision::LABEL_THREAD),
        "mount_contract_version": number(provision::LABEL_CONTRACT),
        "max_shell_sessions": number(provision::LABEL_SHELL_SESSIONS),
    })
}

/// A sandbox handed out again must mount exactly what this create asks for (the skills root,
/// the thread's data, the extra mounts), as deer-flow's provisioner checks a pod's mount
/// signature: one made for other mounts is refused (409), never answered as this one. Its
/// mounts label says what it was made with; one made before the label existed is judged by
/// the binds the engine shows.
fn same_mounts(id: &str, plan: &Provision, c: &Container) -> Result<(), ServeError> {
    let mut have = c.binds.clone();
    have.sort();
    let same = match c.labels.get(provision::LABEL_MOUNTS) {
        Some(digest) => *digest == plan.mounts_digest(),
        None => have == plan.bind_specs(),
    };
    if same {
        return Ok(());
    }
    tracing::warn!(sandbox_id = id, have = ?have, want = ?plan.bind_specs(), "provisioner create: the sandbox under this ID mounts other paths; refused");
    Err(ServeError::Mounts { id: id.to_owned() })
}

/// Creates the directories a sandbox mounts (empty when missing), refusing any path under the
/// root that passes through a symbolic link: the proxy would refuse the bind anyway, but a link
/// must not make this process create directories elsewhere on the host first.
fn prepare_dirs(root: &Path, dirs: &[PathBuf]) -> Result<(), String> {
    for dir in dirs {
        let rel = dir
            .strip_prefix(root)
            .map_err(|_| format!("{} is not under the mount root", dir.display()))?;
        let mut at = root.to_path_buf();
        for part in rel.components() {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(format!(
                        "host path {}: {} is a symbolic link",
                        dir.display(),
                        at.display()
                    ))
                }
                Ok(m) if !m.is_dir() => {
                    return Err(format!(
                        "host path {}: {} is not a directory",
                        dir.display(),
                        at.display()
                    ))
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    match std::fs::create_dir(&at) {
                        Ok(()) => {}
                        // Made meanwhile by a concurrent create: a directory, checked again.
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                            let m = std::fs::symlink_metadata(&at)
                                .map_err(|e| format!("host path {}: {e}", dir.display()))?;
                            if !m.is_dir() {
                                return Err(format!(
                                    "host path {}: {} is not a directory",
                                    dir.display(),
                                    at.display()
                                ));
                            }
                        }
                        Err(e) => {
                            return Err(format!(
                                "host path {}: cannot create {}: {e}",
                                dir.display(),
                                at.display()
                            ))
                        }
                    }
                }
                Err(e) => return Err(format!("host path {}: {e}", dir.display())),
            }
        }
    }
    Ok(())
}

impl Provider {
    /// The URL a gateway reaches a sandbox at: the published port on `--sandbox-host` (open
    /// mode), or its address on its internal network (restricted mode).
    fn api_url(&self, id: &str, host_port: Option<u16>, internal_ip: Option<&str>) -> String {
        match (self.lc.settings.mode, host_port) {
            (Mode::Open, Some(port)) => format!("http://{}:{port}", self.api.sandbox_host),
            // Restricted: the host reaches the internal network directly (lifecycle's URL).
            _ => format!(
                "http://{}:{}",
                internal_ip.unwrap_or(self.lc.names(id).sandbox.as_str()),
                self.lc.settings.sandbox_port
            ),
        }
    }

    fn container_url(&self, id: &str, c: &Container) -> String {
        let ip = c
            .networks
            .get(&self.lc.names(id).network)
            .map(String::as_str);
        self.api_url(id, c.host_port, ip)
    }

    /// `POST /api/sandboxes`: idempotent create-or-return.
    pub async fn api_create(&self, raw: &[u8]) -> ApiAnswer {
        let body: provision::CreateBody = match serde_json::from_slice(raw) {
            Ok(b) => b,
            Err(e) => {
                return detail(
                    422,
                    format!("the body is not a sandbox create request: {e}"),
                )
            }
        };
        let Some(root) = self.api.mount_root.clone() else {
            return detail(
                503,
                "this provider runs without --mount-root; it cannot give a sandbox deer-flow's mounts",
            );
        };
        let plan = match provision::plan(&body, &root) {
            Ok(p) => p,
            Err(e) => {
                return ApiAnswer {
                    status: e.status(),
                    body: json!({ "detail": e.detail() }),
                }
            }
        };
        if let Err(why) = prepare_dirs(&root, &plan.make_dirs) {
            return detail(400, why);
        }
        match self.provision(&plan).await {
            Ok(a) => ok(a),
            Err(e) => {
                tracing::warn!(sandbox_id = %plan.sandbox_id, error = %e, "provisioner create failed");
                failed(&e)
            }
        }
    }

    async fn provision(&self, plan: &Provision) -> Result<Value, ServeError> {
        let id = plan.sandbox_id.clone();
        let scope = plan.scope.clone();
        let serial = self.serial(&id);
        let _serial = serial.lock().await;
        let decided = self.pool().plan_provision(&id, &scope);
        tracing::info!(sandbox_id = %id, plan = ?decided, "provisioner create");
        // However this create ends, its slot under the cap and its reclaim mark go with it.
        let _planned = Planned::new(self, &id);
        let evict = match decided {
            ProvisionPlan::Collision => return Err(ServeError::Collision { id }),
            ProvisionPlan::Busy => return Err(ServeError::Busy { id }),
            ProvisionPlan::Full => {
                self.metrics.cap_refusal();
                return Err(ServeError::Full {
                    max: self.config().max_replicas,
                });
            }
            ProvisionPlan::Leased => {
                return Err(ServeError::OtherApi {
                    id,
                    why: "is leased through /v1/ right now; it is not handed to the provisioner API while a lease holds it",
                })
            }
            ProvisionPlan::Check { container_id } => {
                let found = self.lc.inspect_sandbox(&id).await?;
                let seen = found.as_ref().map(|c| (c.id.as_str(), c.running));
                match provision_checked(&container_id, seen) {
                    Checked::Reuse => {
                        let Some(c) = found else {
                            return Err(ServeError::Busy { id });
                        };
                        same_mounts(&id, plan, &c)?;
                        let url = self
                            .pool()
                            .get(&id)
                            .map(|e| e.url.clone())
                            .unwrap_or_default();
                        self.pool()
                            .commit_provisioned(&id, &scope, &container_id, &url, self.now());
                        return Ok(self.answer(&id, &c));
                    }
                    Checked::Replace => {
                        // Dead or replaced under its name: torn down by the generation
                        // tracked, then made afresh in its slot.
                        self.pool().begin_destroy(&id);
                        self.pool().reserve_replacement(&id);
                        self.destroy_fenced(&id).await?;
                        Vec::new()
                    }
                }
            }
            ProvisionPlan::RetryTeardown => {
                // As for an acquire: a teardown that failed earlier is retried first, and a
                // fresh sandbox is made only once the tracked generation is gone.
                self.pool().reserve_replacement(&id);
                let torn = self.destroy_fenced(&id).await?;
                tracing::info!(sandbox_id = %id, result = torn.as_str(), "failed teardown retried before the provisioner create");
                Vec::new()
            }
            ProvisionPlan::Create { evict } => evict,
        };
        // The plan fenced its victims: they are torn down whatever this create finds next.
        self.evict(evict).await?;
        if let Some(c) = self.lc.inspect_sandbox(&id).await? {
            // The scope label must be this request's (its user's, for an ID not derived from
            // a thread): an ID collision never hands one tenant's sandbox to another.
            if c.labels
                .get(naming::LABEL_SCOPE)
                .cloned()
                .unwrap_or_default()
                != scope
            {
                tracing::warn!(sandbox_id = %id, "provisioner create: the container under this ID is another (user, thread)'s; refused");
                return Err(ServeError::Collision { id });
            }
            // A running one is handed out as it is (a dead one is replaced by the create): it
            // must have been made with what this create asks for.
            if c.running {
                same_mounts(&id, plan, &c)?;
            }
        }
        match self.own.claim(&id).await? {
            Claim::Ours => {}
            Claim::Owned(owner) | Claim::Deleting(owner) => {
                return Err(ServeError::Owned { id, owner })
            }
        }
        let mut labels = vec![(LABEL_ORIGIN.to_owned(), ORIGIN_PROVISIONER.to_owned())];
        labels.extend(plan.labels());
        let extras = Extras {
            binds: plan.binds.iter().map(Bind::spec).collect(),
            labels,
            env: plan.env(),
            // deer-flow waits for readiness itself, after a POST it gives 30 s.
            skip_ready: true,
        };
        let created = match self
            .lc
            .create_sandbox(&id, &scope, &extras, &self.own)
            .await
        {
            Ok(c) => c,
            Err(e) => return Err(self.create_failed(&id, &scope, e).await),
        };
        if created.scope.clone().unwrap_or_default() != scope {
            let _ = self.own.release(&id).await;
            return Err(ServeError::Collision { id });
        }
        let url = match created.host_port {
            Some(port) => self.api_url(&id, Some(port), None),
            None => created.url.clone(),
        };
        self.pool().commit_provisioned(
            &id,
            &scope,
            &created.container_id,
            &created.url,
            self.now(),
        );
        tracing::info!(sandbox_id = %id, container_id = %created.container_id, discovered = created.discovered, "provisioner: sandbox ready");
        Ok(json!({
            "sandbox_id": id,
            "sandbox_url": url,
            "status": "Running",
            "user_id": plan.user_id,
            "thread_id": plan.thread_id,
            "mount_contract_version": provision::MOUNT_CONTRACT_VERSION,
            "max_shell_sessions": plan.max_shell_sessions,
        }))
    }

    fn answer(&self, id: &str, c: &Container) -> Value {
        answered(
            id,
            &self.container_url(id, c),
            provision::phase(&c.state),
            &c.labels,
        )
    }

    /// `GET /api/sandboxes/{id}`: the sandbox under the ID if it runs. One that does not run
    /// (created, exited, dead) is answered as a missing one is (deer-flow registers what this
    /// returns without checking it) and handed to the reconciler.
    pub async fn api_get(&self, id: &str) -> ApiAnswer {
        let not_found = || detail(404, format!("Sandbox '{id}' not found"));
        if provision::check_sandbox_id(id).is_err() {
            return not_found();
        }
        match self.lc.inspect_sandbox(id).await {
            Ok(Some(c)) if c.running => ok(self.answer(id, &c)),
            Ok(Some(c)) => {
                tracing::info!(sandbox_id = id, container_id = %c.id, state = %c.state, "provisioner get: not running; answered 404 and handed to the reconciler");
                self.suspect(id);
                not_found()
            }
            Ok(None) => not_found(),
            Err(e) => detail(500, e.to_string()),
        }
    }

    /// `DELETE /api/sandboxes/{id}`: `{"ok":true}` once it is gone (also when it was already),
    /// with `result` saying what was done: `destroyed` (its container and what went with it),
    /// `cleaned` (no container was there, what was left of it is removed), `absent` (nothing of
    /// it was there). A teardown that fails keeps its quarantine record and answers 500.
    pub async fn api_delete(&self, id: &str) -> ApiAnswer {
        if let Err(e) = provision::check_sandbox_id(id) {
            return detail(400, e.to_string());
        }
        let did = match self.destroy_checked(id.to_owned(), true).await {
            Ok(torn) => torn.did(),
            Err(ServeError::Op(OpError::NoSuchSandbox(_))) => "absent",
            Err(e) => return failed(&e),
        };
        tracing::info!(sandbox_id = id, result = did, "provisioner delete");
        ok(json!({ "ok": true, "sandbox_id": id, "result": did }))
    }

    /// `GET /api/sandboxes`: every running sandbox of the stack, whichever route or process
    /// made it, so deer-flow's orphan reconciliation sees them all.
    pub async fn api_list(&self) -> ApiAnswer {
        let listed = match self.lc.list().await {
            Ok(l) => l,
            Err(e) => return detail(500, e.to_string()),
        };
        let prefix = format!("{}sandbox-", self.lc.settings.prefix);
        let mut out = Vec::new();
        for l in listed.into_iter().filter(|l| l.state == "running") {
            let Some(id) = l.container_name.strip_prefix(&prefix).map(str::to_owned) else {
                continue;
            };
            let url = match l.host_port {
                Some(port) => self.api_url(&id, Some(port), None),
                None => match self.lc.inspect_sandbox(&id).await {
                    Ok(Some(c)) => self.container_url(&id, &c),
                    _ => continue,
                },
            };
            out.push(answered(&id, &url, provision::phase(&l.state), &l.labels));
        }
        let count = out.len();
        ok(json!({ "sandboxes": out, "count": count }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirs_are_made_under_the_root_and_links_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let root = std::fs::canonicalize(dir.path()).expect("real path");
        let want = root.join("users/u/threads/t/user-data");
        prepare_dirs(&root, std::slice::from_ref(&want)).expect("made");
        assert!(want.is_dir());
        std::os::unix::fs::symlink("/etc", root.join("users/link")).expect("link");
        let via_link = root.join("users/link/x");
        let e = prepare_dirs(&root, &[via_link]).expect_err("refused");
        assert!(e.contains("is a symbolic link"), "{e}");
        assert!(
            !Path::new("/etc/x").exists(),
            "nothing made through the link"
        );
        std::fs::write(root.join("file"), b"x").expect("file");
        let e = prepare_dirs(&root, &[root.join("file/x")]).expect_err("refused");
        assert!(e.contains("is not a directory"), "{e}");
    }
}
