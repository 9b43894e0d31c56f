//! deer-flow's provisioner API, the pure part: its settings (`ApiConfig`) and origin label, the
//! create body as deer-flow's remote backend sends it, its checks (IDs, the mount contract,
//! extra mounts, the skills root, shell sessions), the bind mounts a sandbox gets under the
//! mount root (deer-flow's provisioner layout), the labels discovery reads back, and the engine
//! state → pod phase table. No I/O: `provisioner` does the filesystem checks, the engine work
//! and the answers.

use std::path::{Path, PathBuf};

use super::apikey::ApiKey;

/// The label that marks a sandbox made through this API, so a restarted provider adopts it as
/// deer-flow's (never reaped) rather than into its own warm pool.
pub use crate::naming::{LABEL_ORIGIN, ORIGIN_PROVISIONER};

/// What the provisioner API needs beyond the provider.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// deer-flow's host base directory (`DEER_FLOW_HOST_BASE_DIR`), its real path: every bind
    /// comes from under it. Without it, creates are refused (503).
    pub mount_root: Option<PathBuf>,
    /// The host name a gateway reaches published sandbox ports at.
    pub sandbox_host: String,
    /// Required on every `/api/` request when set.
    pub api_key: Option<ApiKey>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            mount_root: None,
            sandbox_host: "localhost".into(),
            api_key: None,
        }
    }
}

/// deer-flow's default user when a create names none.
pub const DEFAULT_USER: &str = "default";
/// Most extra mounts one create may ask for (deer-flow's provisioner's limit was 10; its mount
/// contract 2 allows 9, a subset of this).
pub const MAX_EXTRA_MOUNTS: usize = 10;

/// The mount contract whose layout these sandboxes have (deer-flow's `mount_contract_version`):
/// the thread's data at `users/{user}/threads/{thread}/user-data`, the three skills views, the
/// upload conversions read-only inside the thread's data, and a sandbox handed out again only to
/// the (user, thread) and the mounts it was made with.
pub const MOUNT_CONTRACT_VERSION: u32 = 2;

/// Where deer-flow's sandboxes see their skills unless a create says otherwise
/// (`skills_container_path`, deer-flow's `skills.container_path`).
pub const DEFAULT_SKILLS_PATH: &str = "/mnt/skills";

/// The most shell sessions a create may ask a sandbox to hold (`max_shell_sessions`; the AIO
/// sandbox's own default is 10).
pub const MAX_SHELL_SESSIONS: u64 = 1024;

/// Where deer-flow's upload conversions are mounted, read-only, inside the thread's data.
const UPLOAD_CONVERSIONS: &str = "/mnt/user-data/.upload-conversions";

/// The container paths an extra mount may target: deer-flow's provisioner's list, the upload
/// conversions of its mount contract 2, and the lark-cli lock directory of its older one.
/// `/mnt/skills/…` ones are the skills views' and follow `skills_container_path`.
pub const EXTRA_MOUNT_PATHS: [&str; 8] = [
    UPLOAD_CONVERSIONS,
    "/mnt/acp-workspace",
    "/mnt/skills/custom",
    "/mnt/skills/integrations",
    "/mnt/integrations/lark-cli/config",
    "/mnt/integrations/lark-cli/config/locks",
    "/mnt/integrations/lark-cli/data",
    "/mnt/integrations/lark-cli/runtime",
];

/// Mount targets that may sit inside another (parent, child): everything else is disjoint.
const NESTED: [(&str, &str); 2] = [
    ("/mnt/user-data", UPLOAD_CONVERSIONS),
    (
        "/mnt/integrations/lark-cli/config",
        "/mnt/integrations/lark-cli/config/locks",
    ),
];

/// Labels a provisioner sandbox carries, read back by discovery and the list.
pub const LABEL_USER: &str = "lifecycle.user_id";
pub const LABEL_THREAD: &str = "lifecycle.thread_id";
pub const LABEL_CONTRACT: &str = "lifecycle.mount_contract";
pub const LABEL_SHELL_SESSIONS: &str = "lifecycle.max_shell_sessions";
/// The digest of the binds a provisioner sandbox was made with (`Provision::mounts_digest`):
/// what a later create of the ID must ask for to be handed it, whatever path the engine shows
/// for a bind.
pub const LABEL_MOUNTS: &str = "lifecycle.mounts";

/// `POST /api/sandboxes`'s body. Unknown fields are ignored (deer-flow adds fields over
/// time); a body that is not this shape is a 422.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct CreateBody {
    pub sandbox_id: String,
    #[serde(default)]
    pub thread_id: Option<String>,
    #[serde(default)]
    pub user_id: Option<String>,
    #[serde(default)]
    pub extra_mounts: Option<Vec<ExtraMount>>,
    #[serde(default)]
    pub include_legacy_skills: Option<bool>,
    #[serde(default)]
    pub provision_lark_cli_runtime: Option<bool>,
    #[serde(default)]
    pub provision_lark_cli_broker: Option<bool>,
    /// The mount contract the client derived this create from (deer-flow's rolling-upgrade
    /// guard): another version than `MOUNT_CONTRACT_VERSION` is refused before anything.
    #[serde(default)]
    pub required_mount_contract_version: Option<i64>,
    /// Where the sandbox sees its skills (default `/mnt/skills`).
    #[serde(default)]
    pub skills_container_path: Option<String>,
    /// The shell sessions the sandbox must hold (`MAX_SHELL_SESSIONS` in its environment); read
    /// back by deer-flow from the answers.
    #[serde(default)]
    pub max_shell_sessions: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct ExtraMount {
    pub host_path: String,
    pub container_path: String,
    #[serde(default)]
    pub read_only: bool,
}

/// One bind mount of a sandbox: host path, container path, read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub host: PathBuf,
    pub container: String,
    pub read_only: bool,
}

impl Bind {
    /// dockerd's `HostConfig.Binds` form.
    pub fn spec(&self) -> String {
        let mode = if self.read_only { ":ro" } else { "" };
        format!("{}:{}{mode}", self.host.display(), self.container)
    }
}

/// A create that passed every check: who it is for and what it mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provision {
    pub sandbox_id: String,
    pub user_id: String,
    pub thread_id: String,
    /// `lifecycle.scope`: the (user, thread)'s when `sandbox_id` is deer-flow's derivation of
    /// them (`sha256("{user}:{thread}")` or its mount contract's `sha256("mount-v2:{user}:
    /// {thread}")`, first 16 hex); otherwise the user's (`naming::user_scope`), since
    /// deer-flow names a sandbox with no thread by a random ID that says nothing about whose it
    /// is: that ID then serves only the user who made it.
    pub scope: String,
    pub binds: Vec<Bind>,
    /// Directories to create empty when missing (the skills views and the thread's data).
    pub make_dirs: Vec<PathBuf>,
    /// `MAX_SHELL_SESSIONS` for the sandbox's environment, when asked for.
    pub max_shell_sessions: Option<u64>,
}

impl Provision {
    /// The sandbox's environment beyond lifecycle's own.
    pub fn env(&self) -> Vec<String> {
        self.max_shell_sessions
            .map(|n| format!("MAX_SHELL_SESSIONS={n}"))
            .into_iter()
            .collect()
    }

    /// The labels discovery and the list read back (the origin label aside).
    pub fn labels(&self) -> Vec<(String, String)> {
        let mut labels = vec![
            (LABEL_USER.to_owned(), self.user_id.clone()),
            (LABEL_THREAD.to_owned(), self.thread_id.clone()),
            (
                LABEL_CONTRACT.to_owned(),
                MOUNT_CONTRACT_VERSION.to_string(),
            ),
            (LABEL_MOUNTS.to_owned(), self.mounts_digest()),
        ];
        if let Some(n) = self.max_shell_sessions {
            labels.push((LABEL_SHELL_SESSIONS.to_owned(), n.to_string()));
        }
        labels
    }

    /// The binds in dockerd's form, sorted: what an existing sandbox's must equal for it to be
    /// handed out again.
    pub fn bind_specs(&self) -> Vec<String> {
        let mut specs: Vec<String> = self.binds.iter().map(Bind::spec).collect();
        specs.sort();
        specs
    }

    /// The SHA-256 hex of the sorted binds, one per line (`LABEL_MOUNTS`).
    pub fn mounts_digest(&self) -> String {
        use sha2::{Digest, Sha256};
        Sha256::digest(self.bind_specs().join("\n").as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Why a create was refused before any engine call (a 400 naming the field; a changed mount
/// contract a 409).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("sandbox_id {0:?}: expected 1 to 64 of a-z, 0-9, '_' and '-'")]
    SandboxId(String),
    #[error("{0}")]
    Ids(#[from] stackmodel::IdRuleError),
    #[error("extra_mounts: {0} given; at most {MAX_EXTRA_MOUNTS}")]
    TooManyMounts(usize),
    #[error("extra_mounts: container_path {0:?} is not one the provisioner mounts (allowed: {allowed})", allowed = EXTRA_MOUNT_PATHS.join(", "))]
    ContainerPath(String),
    #[error("extra_mounts: container_path {0:?} given twice")]
    Duplicate(String),
    #[error("extra_mounts: host_path {0:?} must be an absolute, clean path (no '.', '..', '//' or trailing '/')")]
    HostPath(String),
    #[error("extra_mounts: host_path {0:?} is not under the mount root {1:?}")]
    OutsideRoot(String, String),
    #[error("extra_mounts: {UPLOAD_CONVERSIONS} must be read-only and come from {0:?} (the requested user's and thread's data)")]
    UploadConversions(String),
    #[error("mount contract {0} was required; this provisioner serves {MOUNT_CONTRACT_VERSION}")]
    ContractChanged(i64),
    #[error("skills_container_path {0:?}: expected an absolute, clean path of a-z, A-Z, 0-9, '.', '_', '-' (at most 255 bytes), not '/' and not under /proc, /sys or /dev")]
    SkillsPath(String),
    #[error("mount targets {0:?} and {1:?} overlap (skills_container_path must stay clear of the other mounts)")]
    Overlap(String, String),
    #[error("max_shell_sessions {0}: expected 1 to {MAX_SHELL_SESSIONS}")]
    ShellSessions(i64),
    #[error("provision_lark_cli_broker: this provisioner runs no lark-cli broker (its capabilities say lark_cli_broker_image: false)")]
    Broker,
}

impl InputError {
    /// The status deer-flow's provisioner answers it with.
    pub fn status(&self) -> u16 {
        match self {
            InputError::ContractChanged(_) => 409,
            _ => 400,
        }
    }

    /// The `detail` of the answer: deer-flow's object for a changed contract (its client reads
    /// `code` and `actual`), the message otherwise.
    pub fn detail(&self) -> serde_json::Value {
        match self {
            InputError::ContractChanged(expected) => serde_json::json!({
                "code": "mount_contract_changed",
                "expected": expected,
                "actual": MOUNT_CONTRACT_VERSION,
            }),
            other => serde_json::Value::String(other.to_string()),
        }
    }
}

/// `sandbox_id`: 1–64 of `[a-z0-9_-]` (a valid tail for a container name, lower case so two
/// spellings cannot name two sandboxes).
pub fn check_sandbox_id(id: &str) -> Result<(), InputError> {
    crate::naming::parse_stack_sandbox_id(id)
        .map(|_| ())
        .map_err(|_| InputError::SandboxId(id.to_owned()))
}

/// An absolute path with no `.`/`..` component, no empty component and no trailing `/`.
fn is_clean_absolute(raw: &str) -> bool {
    // Split by hand: `Path::components` quietly drops an inner `.`.
    raw.strip_prefix('/').is_some_and(|rest| {
        rest.split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
    })
}

/// `skills_container_path`, checked: a clean absolute path of plain characters, off the
/// kernel's and devices' trees.
fn skills_path(raw: Option<&str>) -> Result<String, InputError> {
    let raw = raw.unwrap_or(DEFAULT_SKILLS_PATH);
    let plain = raw
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'));
    let kernel = ["/proc", "/sys", "/dev"]
        .iter()
        .any(|k| raw == *k || raw.starts_with(&format!("{k}/")));
    if !plain || raw.len() > 255 || !is_clean_absolute(raw) || raw == "/" || kernel {
        return Err(InputError::SkillsPath(raw.to_owned()));
    }
    Ok(raw.to_owned())
}

/// Whether `sandbox_id` is deer-flow's derivation of (user, thread): its classic one, or its
/// mount contract's.
fn derived(sandbox_id: &str, user: &str, thread: &str) -> bool {
    use sha2::{Digest, Sha256};
    let contract = format!("mount-v{MOUNT_CONTRACT_VERSION}:{user}:{thread}");
    let hex: String = Sha256::digest(contract.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    stackmodel::sandbox_id(user, thread) == sandbox_id || hex[..16] == *sandbox_id
}

/// The container path an extra mount lands at: a skills view's follows the skills root.
fn extra_target(container_path: &str, skills: &str) -> Option<String> {
    if let Some(view) = container_path.strip_prefix("/mnt/skills/") {
        return EXTRA_MOUNT_PATHS
            .contains(&container_path)
            .then(|| format!("{skills}/{view}"));
    }
    if let Some(view) = container_path.strip_prefix(&format!("{skills}/")) {
        let standard = format!("/mnt/skills/{view}");
        return EXTRA_MOUNT_PATHS
            .contains(&standard.as_str())
            .then(|| container_path.to_owned());
    }
    EXTRA_MOUNT_PATHS
        .contains(&container_path)
        .then(|| container_path.to_owned())
}

/// No two mount targets are one, and none is inside another but `NESTED`'s.
fn disjoint(binds: &[Bind]) -> Result<(), InputError> {
    for a in binds {
        for b in binds {
            let (a, b) = (a.container.as_str(), b.container.as_str());
            let inside = b.starts_with(a) && b.as_bytes().get(a.len()) == Some(&b'/');
            if inside && !NESTED.contains(&(a, b)) {
                return Err(InputError::Overlap(a.to_owned(), b.to_owned()));
            }
        }
    }
    Ok(())
}

/// Checks a create body and plans its mounts under `root` (already the directory's real
/// path). Pure: the symbolic-link check of each host path is the caller's.
pub fn plan(body: &CreateBody, root: &Path) -> Result<Provision, InputError> {
    if let Some(v) = body.required_mount_contract_version {
        if v != i64::from(MOUNT_CONTRACT_VERSION) {
            return Err(InputError::ContractChanged(v));
        }
    }
    check_sandbox_id(&body.sandbox_id)?;
    let user = body.user_id.clone().unwrap_or_else(|| DEFAULT_USER.into());
    // deer-flow's provisioner: a create without a thread is the sandbox's own thread.
    let thread = body
        .thread_id
        .clone()
        .unwrap_or_else(|| body.sandbox_id.clone());
    stackmodel::check_ids(&user, &thread)?;
    if body.provision_lark_cli_broker == Some(true) {
        return Err(InputError::Broker);
    }
    let max_shell_sessions = match body.max_shell_sessions {
        None => None,
        Some(n) => match u64::try_from(n) {
            Ok(v) if (1..=MAX_SHELL_SESSIONS).contains(&v) => Some(v),
            _ => return Err(InputError::ShellSessions(n)),
        },
    };
    let skills = skills_path(body.skills_container_path.as_deref())?;
    let scope = if derived(&body.sandbox_id, &user, &thread) {
        crate::naming::scope_digest(&user, &thread)
    } else {
        crate::naming::user_scope(&user)
    };
    let user_dir = root.join("users").join(&user);
    let data_dir = user_dir.join("threads").join(&thread).join("user-data");
    let extras = body.extra_mounts.as_deref().unwrap_or_default();
    if extras.len() > MAX_EXTRA_MOUNTS {
        return Err(InputError::TooManyMounts(extras.len()));
    }
    let mut seen: Vec<String> = Vec::new();
    let mut extra_binds = Vec::new();
    for m in extras {
        let target = extra_target(&m.container_path, &skills)
            .ok_or_else(|| InputError::ContainerPath(m.container_path.clone()))?;
        if seen.contains(&target) {
            return Err(InputError::Duplicate(m.container_path.clone()));
        }
        if !is_clean_absolute(&m.host_path) {
            return Err(InputError::HostPath(m.host_path.clone()));
        }
        let host = PathBuf::from(&m.host_path);
        // Component-wise, so `/srv/rootX/a` is not under `/srv/root`.
        if !host.starts_with(root) {
            return Err(InputError::OutsideRoot(
                m.host_path.clone(),
                root.display().to_string(),
            ));
        }
        if target == UPLOAD_CONVERSIONS {
            let want = data_dir.join(".upload-conversions");
            if !m.read_only || host != want {
                return Err(InputError::UploadConversions(want.display().to_string()));
            }
        }
        seen.push(target.clone());
        extra_binds.push(Bind {
            host,
            container: target,
            read_only: m.read_only,
        });
    }
    let standard = [
        (
            root.join("skills_view/public"),
            format!("{skills}/public"),
            true,
        ),
        (
            user_dir.join("skills_view/custom"),
            format!("{skills}/custom"),
            true,
        ),
        (
            user_dir.join("skills_view/legacy"),
            format!("{skills}/legacy"),
            true,
        ),
        (data_dir, "/mnt/user-data".to_owned(), false),
    ];
    let mut binds = Vec::new();
    let mut make_dirs = Vec::new();
    for (host, container, read_only) in standard {
        make_dirs.push(host.clone());
        // An extra mount at the same place takes its place (one mount point, one source).
        if !seen.contains(&container) {
            binds.push(Bind {
                host,
                container,
                read_only,
            });
        }
    }
    for b in &extra_binds {
        make_dirs.push(b.host.clone());
    }
    binds.extend(extra_binds);
    disjoint(&binds)?;
    Ok(Provision {
        sandbox_id: body.sandbox_id.clone(),
        user_id: user,
        thread_id: thread,
        scope,
        binds,
        make_dirs,
        max_shell_sessions,
    })
}

/// deer-flow's pod phase for an engine container state (`State.Status`): what its remote
/// backend reads (`Running` means alive).
pub fn phase(engine_state: &str) -> &'static str {
    match engine_state {
        "running" => "Running",
        "created" | "restarting" => "Pending",
        "exited" | "dead" => "Failed",
        // paused, removing, or a state this engine version adds.
        _ => "Unknown",
    }
}

#[cfg(test)]
#[path = "provision_tests.rs"]
mod tests;
