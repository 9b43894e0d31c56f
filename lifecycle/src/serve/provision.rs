//! deer-flow's provisioner API, the pure part: its settings (`ApiConfig`) and origin label, the
//! create body as deer-flow's remote backend sends it, its checks (IDs, extra mounts), the bind mounts a sandbox gets under the mount
//! root (deer-flow's provisioner layout), and the engine state → pod phase table. No I/O:
//! `provisioner` does the filesystem checks, the engine work and the answers.

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
/// Most extra mounts one create may ask for (deer-flow's provisioner's limit).
pub const MAX_EXTRA_MOUNTS: usize = 10;

/// The container paths an extra mount may target: deer-flow's provisioner's list.
pub const EXTRA_MOUNT_PATHS: [&str; 7] = [
    "/mnt/acp-workspace",
    "/mnt/skills/custom",
    "/mnt/skills/integrations",
    "/mnt/integrations/lark-cli/config",
    "/mnt/integrations/lark-cli/config/locks",
    "/mnt/integrations/lark-cli/data",
    "/mnt/integrations/lark-cli/runtime",
];

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
    /// them; otherwise the user's (`naming::user_scope`), since deer-flow names a sandbox with
    /// no thread by a random ID that says nothing about whose it is: that ID then serves only
    /// the user who made it.
    pub scope: String,
    pub binds: Vec<Bind>,
    /// Directories to create empty when missing (the skills views and the thread's data).
    pub make_dirs: Vec<PathBuf>,
}

/// Why a create was refused before any engine call (a 400 naming the field).
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

/// Checks a create body and plans its mounts under `root` (already the directory's real
/// path). Pure: the symbolic-link check of each host path is the caller's.
pub fn plan(body: &CreateBody, root: &Path) -> Result<Provision, InputError> {
    check_sandbox_id(&body.sandbox_id)?;
    let user = body.user_id.clone().unwrap_or_else(|| DEFAULT_USER.into());
    // deer-flow's provisioner: a create without a thread is the sandbox's own thread.
    let thread = body
        .thread_id
        .clone()
        .unwrap_or_else(|| body.sandbox_id.clone());
    stackmodel::check_ids(&user, &thread)?;
    let scope = if stackmodel::sandbox_id(&user, &thread) == body.sandbox_id {
        crate::naming::scope_digest(&user, &thread)
    } else {
        crate::naming::user_scope(&user)
    };
    let extras = body.extra_mounts.as_deref().unwrap_or_default();
    if extras.len() > MAX_EXTRA_MOUNTS {
        return Err(InputError::TooManyMounts(extras.len()));
    }
    let mut seen: Vec<&str> = Vec::new();
    let mut extra_binds = Vec::new();
    for m in extras {
        let target = m.container_path.as_str();
        if !EXTRA_MOUNT_PATHS.contains(&target) {
            return Err(InputError::ContainerPath(m.container_path.clone()));
        }
        if seen.contains(&target) {
            return Err(InputError::Duplicate(m.container_path.clone()));
        }
        seen.push(target);
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
        extra_binds.push(Bind {
            host,
            container: m.container_path.clone(),
            read_only: m.read_only,
        });
    }
    let user_dir = root.join("users").join(&user);
    let standard = [
        (root.join("skills_view/public"), "/mnt/skills/public", true),
        (
            user_dir.join("skills_view/custom"),
            "/mnt/skills/custom",
            true,
        ),
        (
            user_dir.join("skills_view/legacy"),
            "/mnt/skills/legacy",
            true,
        ),
        (
            user_dir.join("threads").join(&thread).join("user-data"),
            "/mnt/user-data",
            false,
        ),
    ];
    let mut binds = Vec::new();
    let mut make_dirs = Vec::new();
    for (host, container, read_only) in standard {
        make_dirs.push(host.clone());
        // An extra mount at the same place takes its place (one mount point, one source).
        if !seen.contains(&container) {
            binds.push(Bind {
                host,
                container: container.to_owned(),
                read_only,
            });
        }
    }
    for b in &extra_binds {
        make_dirs.push(b.host.clone());
    }
    binds.extend(extra_binds);
    Ok(Provision {
        sandbox_id: body.sandbox_id.clone(),
        user_id: user,
        thread_id: thread,
        scope,
        binds,
        make_dirs,
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
mod tests {
    use super::*;

    fn body(v: serde_json::Value) -> CreateBody {
        serde_json::from_value(v).expect("a create body")
    }

    fn root() -> PathBuf {
        PathBuf::from("/srv/df")
    }

    #[test]
    fn deer_flows_body_plans_its_mounts() {
        let b = body(serde_json::json!({
            "sandbox_id": "7d9ac0ff9b98cd06", "thread_id": "thread-1", "user_id": "user-1",
            "extra_mounts": [{"host_path": "/srv/df/users/user-1/threads/thread-1/acp-workspace",
                              "container_path": "/mnt/acp-workspace", "read_only": false}],
            "include_legacy_skills": true, "provision_lark_cli_runtime": false,
            "required_mount_contract_version": 0, "some_future_field": {"x": 1}
        }));
        let p = plan(&b, &root()).expect("valid");
        // The derived ID: the sandbox carries its (user, thread)'s scope label.
        assert_eq!(p.scope, crate::naming::scope_digest("user-1", "thread-1"));
        let specs: Vec<String> = p.binds.iter().map(Bind::spec).collect();
        assert_eq!(
            specs,
            vec![
                "/srv/df/skills_view/public:/mnt/skills/public:ro",
                "/srv/df/users/user-1/skills_view/custom:/mnt/skills/custom:ro",
                "/srv/df/users/user-1/skills_view/legacy:/mnt/skills/legacy:ro",
                "/srv/df/users/user-1/threads/thread-1/user-data:/mnt/user-data",
                "/srv/df/users/user-1/threads/thread-1/acp-workspace:/mnt/acp-workspace",
            ]
        );
        assert_eq!(p.make_dirs.len(), 5);
    }

    #[test]
    fn defaults_and_an_underived_id() {
        let p = plan(
            &body(serde_json::json!({"sandbox_id": "my-box_1"})),
            &root(),
        )
        .expect("ok");
        assert_eq!(
            (p.user_id.as_str(), p.thread_id.as_str()),
            ("default", "my-box_1")
        );
        assert_eq!(
            p.scope,
            crate::naming::user_scope("default"),
            "not derived: the user's"
        );
        // An extra mount at a standard place replaces it.
        let p = plan(
            &body(serde_json::json!({"sandbox_id": "b", "extra_mounts": [
                {"host_path": "/srv/df/x", "container_path": "/mnt/skills/custom", "read_only": true}]})),
            &root(),
        )
        .expect("ok");
        let custom: Vec<&Bind> = p
            .binds
            .iter()
            .filter(|b| b.container == "/mnt/skills/custom")
            .collect();
        assert_eq!(custom.len(), 1);
        assert_eq!(custom[0].host, PathBuf::from("/srv/df/x"));
    }

    #[test]
    fn refusals_table() {
        let mount = |host: &str, container: &str| serde_json::json!({"host_path": host, "container_path": container});
        let eleven: Vec<_> = EXTRA_MOUNT_PATHS
            .iter()
            .cycle()
            .take(11)
            .enumerate()
            .map(|(i, _)| mount(&format!("/srv/df/{i}"), "/mnt/acp-workspace"))
            .collect();
        let cases = [
            (serde_json::json!({"sandbox_id": ""}), "sandbox_id \"\""),
            (
                serde_json::json!({"sandbox_id": "Upper"}),
                "sandbox_id \"Upper\"",
            ),
            (serde_json::json!({"sandbox_id": "a/b"}), "sandbox_id"),
            (
                serde_json::json!({"sandbox_id": "a".repeat(65)}),
                "sandbox_id",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "thread_id": "a:b"}),
                "thread ID may contain only",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "thread_id": "t".repeat(65)}),
                "thread ID must be at most 64",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "user_id": "../x"}),
                "user ID may contain only",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "user_id": ""}),
                "user ID must not be empty",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "extra_mounts": eleven}),
                "11 given; at most 10",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/df/a", "/etc")]}),
                "container_path \"/etc\"",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/df/a", "/mnt/acp-workspace/")]}),
                "is not one the provisioner mounts",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/df/a", "/mnt/acp-workspace"), mount("/srv/df/b", "/mnt/acp-workspace")]}),
                "given twice",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("srv/df/a", "/mnt/acp-workspace")]}),
                "absolute, clean",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/df/../etc", "/mnt/acp-workspace")]}),
                "absolute, clean",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/df/./a", "/mnt/acp-workspace")]}),
                "absolute, clean",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv//df/a", "/mnt/acp-workspace")]}),
                "absolute, clean",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/df/a/", "/mnt/acp-workspace")]}),
                "absolute, clean",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/srv/dfX/a", "/mnt/acp-workspace")]}),
                "not under the mount root",
            ),
            (
                serde_json::json!({"sandbox_id": "s", "extra_mounts": [mount("/etc", "/mnt/acp-workspace")]}),
                "not under the mount root",
            ),
        ];
        for (b, want) in cases {
            let got = plan(&body(b.clone()), &root())
                .expect_err("refused")
                .to_string();
            assert!(got.contains(want), "{b}: {got}");
        }
    }

    /// Ten extra mounts pass the count (the limit is "at most 10"): a body of ten is refused
    /// only for what else is wrong with it, here a repeated container path.
    #[test]
    fn ten_extra_mounts_pass_the_count() {
        let mounts = |n: usize| -> Vec<serde_json::Value> {
            (0..n)
                .map(|i| serde_json::json!({"host_path": format!("/srv/df/{i}"), "container_path": "/mnt/acp-workspace"}))
                .collect()
        };
        let err = |n: usize| {
            plan(
                &body(serde_json::json!({"sandbox_id": "s", "extra_mounts": mounts(n)})),
                &root(),
            )
            .expect_err("refused")
            .to_string()
        };
        assert!(err(10).contains("given twice"), "{}", err(10));
        assert!(err(11).contains("11 given; at most 10"), "{}", err(11));
        // Every allowed path once: seven binds of its own, one replacing a standard one.
        let all: Vec<serde_json::Value> = EXTRA_MOUNT_PATHS
            .iter()
            .enumerate()
            .map(|(i, c)| serde_json::json!({"host_path": format!("/srv/df/{i}"), "container_path": c}))
            .collect();
        let p = plan(
            &body(serde_json::json!({"sandbox_id": "s", "extra_mounts": all})),
            &root(),
        )
        .expect("valid");
        assert_eq!(p.binds.len(), 4 - 1 + 7);
    }

    #[test]
    fn phases_table() {
        for (state, want) in [
            ("running", "Running"),
            ("created", "Pending"),
            ("restarting", "Pending"),
            ("exited", "Failed"),
            ("dead", "Failed"),
            ("paused", "Unknown"),
            ("removing", "Unknown"),
            ("", "Unknown"),
        ] {
            assert_eq!(phase(state), want, "{state}");
        }
    }
}
