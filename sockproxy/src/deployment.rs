//! The start-up check of the proxy's own deployment: run in a container, the proxy asks the
//! engine for that container and, when compose made it, for every container, volume and
//! network of its compose project, and does not start if the stack's prefix covers any of them
//! (`sockproxy_policy::deployment` says why that would hand the stack the engine). Outside a
//! container, on an engine that does not hold the proxy's container, and under
//! `--require-stack-label` (where an object without the stack's label is not the stack's,
//! whatever its name) there is nothing to check. In a container whose engine cannot be asked,
//! the proxy does not start either: the check fails closed.

use sockproxy_policy::deployment::{self, Listed};
use sockproxy_policy::Scope;

use crate::upstream::Upstream;

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// An engine answer read for the check is at most this long.
const CAP: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum DeploymentError {
    #[error(
        "the stack's prefix {prefix} covers the proxy's own deployment ({}): the stack could \
         exec into, stop or mount them; choose a prefix that begins none of its names{}",
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
/// waited for (a line when the wait begins, one every minute) rather than ended on. Every other
/// failure, and a covered object, is returned.
pub async fn check_until_answered(
    upstream: &Upstream,
    scope: &Scope,
) -> Result<Checked, DeploymentError> {
    let mut waited = 0u32;
    loop {
        match check(upstream, scope).await {
            Err(e @ DeploymentError::Unreachable { .. }) => {
                if waited % 30 == 0 {
                    tracing::warn!(error = %e, "not serving until the engine answers");
                }
                waited += 1;
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
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
    let Some(id) = deployment::own_container_id(&mountinfo) else {
        return Ok(Checked::NotInAContainer);
    };
    if scope.requires_label() {
        return Ok(Checked::LabelRequired);
    }
    let unchecked = |why: String| DeploymentError::Unchecked {
        id: id.clone(),
        why,
    };
    let unreachable = |why: String| DeploymentError::Unreachable {
        id: id.clone(),
        why,
    };
    let inspect = upstream
        .get(&format!("/containers/{id}/json"), CAP)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    if inspect.status == http::StatusCode::NOT_FOUND {
        // The upstream is another engine than the one running this container (a proxy for an
        // engine in a container beside it): the stack cannot reach this container through it.
        return Ok(Checked::NotOnThisEngine);
    }
    if !inspect.status.is_success() {
        let why = format!("the inspect answered {}", inspect.status);
        return Err(if inspect.status.is_server_error() {
            unreachable(why)
        } else {
            unchecked(why)
        });
    }
    let own = deployment::own_container(&inspect.body).map_err(unchecked)?;
    let mut covered =
        deployment::covered(scope, Listed::Containers, std::slice::from_ref(&own.name));
    let mut objects = 1;
    if let Some(project) = &own.project {
        for kind in Listed::ALL {
            let listed = upstream
                .get(&kind.path(project), CAP)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            if !listed.status.is_success() {
                let why = format!("the {} list answered {}", kind.noun(), listed.status);
                return Err(if listed.status.is_server_error() {
                    unreachable(why)
                } else {
                    unchecked(why)
                });
            }
            let mut names = kind.names(&listed.body).map_err(unchecked)?;
            // The proxy's own container is in its project's list: judged above already.
            names.retain(|n| kind != Listed::Containers || *n != own.name);
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
