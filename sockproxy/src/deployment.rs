//! The start-up check of the proxy's own deployment: run in a container, the proxy asks the
//! engine for that container (its name, its named volumes) and, when compose made it, for every
//! container, volume and network of its compose project, and does not start if the stack's
//! prefix covers any of them (`sockproxy_policy::deployment` says what that would hand the
//! stack). Outside a container, on an engine that does not hold the proxy's container, and
//! under `--require-stack-label` (where an object without the stack's label is not the stack's,
//! whatever its name) there is nothing to check. In a container whose engine cannot be asked,
//! the proxy waits without serving: the check fails closed.

use std::time::{Duration, Instant};

use sockproxy_policy::deployment::{self, Listed};
use sockproxy_policy::Scope;

use crate::upstream::{Buffered, Upstream};
use crate::wire::UpstreamError;

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// An engine answer read for the check is at most this long.
const CAP: usize = 4 << 20;
/// How often the wait for the engine says it still waits.
const WAIT_LINE_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum DeploymentError {
    #[error(
        "the stack's prefix {prefix} covers the proxy's own deployment ({}): the stack would \
         be handed them (a container's inspect, environment included, and logs, and exec where \
         its name is in a family the stack may change; a volume in its sandboxes' mounts); \
         choose a prefix that begins none of their names{}",
        covered.join(", "),
        project.as_ref().map(|p| format!(" (compose project {p}: keep the prefix apart from \
         {p}- and {p}_)")).unwrap_or_default()
    )]
    Covered {
        prefix: String,
        covered: Vec<String>,
        project: Option<String>,
    },
    #[error("cannot read {MOUNTINFO} (whether the proxy runs in a container): {0}")]
    Mounts(std::io::Error),
    #[error("cannot check the proxy's own container {id} on the engine: {why}")]
    Unchecked { id: String, why: String },
    #[error("the engine cannot be asked about the proxy's own container {id}: {why}")]
    Unreachable { id: String, why: String },
}

impl DeploymentError {
    /// Whether the operator's settings are what is wrong (the exit code of a bad setting).
    pub fn is_config(&self) -> bool {
        matches!(self, Self::Covered { .. })
    }
}

/// What the check found; logged by the caller.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    NotInAContainer,
    NotOnThisEngine,
    LabelRequired,
    Apart {
        name: String,
        project: Option<String>,
        objects: usize,
    },
}

/// Runs the check until the engine answers it: in a container the proxy does not serve
/// before, and an engine that is starting, or a socket the proxy is not yet let into, is
/// waited for (a line when the wait begins, one a minute after) rather than ended on. Every
/// other failure, and a covered object, is returned.
pub async fn check_until_answered(
    upstream: &Upstream,
    scope: &Scope,
) -> Result<Checked, DeploymentError> {
    let mut said: Option<Instant> = None;
    loop {
        match check(upstream, scope).await {
            Err(e @ DeploymentError::Unreachable { .. }) => {
                if said.is_none_or(|at| at.elapsed() >= WAIT_LINE_EVERY) {
                    tracing::warn!(error = %e, "not serving until the engine answers");
                    said = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            done => return done,
        }
    }
}

/// Runs the check once (see the module's doc).
pub async fn check(upstream: &Upstream, scope: &Scope) -> Result<Checked, DeploymentError> {
    // Read in place: a file of the kernel's, read once before anything is served. Unread, the
    // proxy cannot tell whether it runs in a container: it does not start.
    let mountinfo = std::fs::read_to_string(MOUNTINFO).map_err(DeploymentError::Mounts)?;
    // The engine's `/etc/hostname` is the sign; `/.dockerenv` is not (other runtimes leave one:
    // the machines this project's CI runs on have it and are no container of an engine).
    let Some(id) = deployment::own_container_id(&mountinfo) else {
        return Ok(Checked::NotInAContainer);
    };
    if scope.requires_label() {
        return Ok(Checked::LabelRequired);
    }
    let inspect = ask(upstream, &id, &format!("/containers/{id}/json")).await?;
    if inspect.status == http::StatusCode::NOT_FOUND {
        // The upstream is another engine than the one running this container (a proxy for an
        // engine in a container beside it): the stack cannot reach this container through it.
        return Ok(Checked::NotOnThisEngine);
    }
    if !inspect.status.is_success() {
        let why = format!("the inspect answered {}", inspect.status);
        return Err(failed(&id, why, inspect.status.is_server_error()));
    }
    let own = deployment::own_container(&inspect.body).map_err(|why| failed(&id, why, false))?;
    let mut covered =
        deployment::covered(scope, Listed::Containers, std::slice::from_ref(&own.name));
    covered.extend(deployment::covered(scope, Listed::Volumes, &own.volumes));
    let mut objects = 1 + own.volumes.len();
    if let Some(project) = &own.project {
        if deployment::project_covered(scope, project, &own.name) {
            covered.push(format!("every name compose gives project {project}"));
        }
        for kind in Listed::ALL {
            let listed = ask(upstream, &id, &kind.path(project)).await?;
            if !listed.status.is_success() {
                let why = format!("the {} list answered {}", kind.noun(), listed.status);
                return Err(failed(&id, why, listed.status.is_server_error()));
            }
            let mut names = kind
                .names(&listed.body)
                .map_err(|why| failed(&id, why, false))?;
            // Judged above already: the proxy's own container and volumes.
            names.retain(|n| match kind {
                Listed::Containers => *n != own.name,
                Listed::Volumes => !own.volumes.contains(n),
                Listed::Networks => true,
            });
            objects += names.len();
            covered.extend(deployment::covered(scope, kind, &names));
        }
    }
    if covered.is_empty() {
        return Ok(Checked::Apart {
            name: own.name,
            project: own.project,
            objects,
        });
    }
    Err(DeploymentError::Covered {
        prefix: scope.prefix().as_str().to_owned(),
        covered,
        project: own.project,
    })
}

/// One engine answer for the check of container `id`.
async fn ask(upstream: &Upstream, id: &str, path: &str) -> Result<Buffered, DeploymentError> {
    upstream.get(path, CAP).await.map_err(|e| {
        // An answer past the cap is no engine that is starting: waiting would not help.
        let retry = !matches!(e, UpstreamError::TooLarge(_));
        failed(id, e.to_string(), retry)
    })
}

/// A failure of the check: waited out (`retry`: the engine is not answering) or ended on.
fn failed(id: &str, why: String, retry: bool) -> DeploymentError {
    let id = id.to_owned();
    if retry {
        DeploymentError::Unreachable { id, why }
    } else {
        DeploymentError::Unchecked { id, why }
    }
}
