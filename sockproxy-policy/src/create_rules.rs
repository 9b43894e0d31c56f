//! What the operator lets a stack's creates ask for (`CreateRules`), and the context every field
//! rule of a create or update is read in (`Ctx`): shared by `create_body`, `host_config`,
//! `mounts` and `write_rules`, which otherwise need nothing of each other's.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::scope::Scope;
use crate::spend::Spend;
use crate::subnet_pool::NetworkPool;

/// Default cap on `HostConfig.ShmSize` (1 GiB).
pub const DEFAULT_MAX_SHM: u64 = 1 << 30;

/// Operator choices about what a stack's creates may ask for: doors the defaults keep shut,
/// and `--require-stack-label`, which shuts one more (pinning reads it too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRules {
    /// Capabilities `CapAdd` may name (`--allow-cap`).
    pub allow_caps: Vec<String>,
    /// Host directories bind mounts may come from (`--allow-bind-root`), canonical paths.
    pub bind_roots: Vec<PathBuf>,
    /// Publish ports on addresses other than loopback (`--allow-public-ports`).
    pub public_ports: bool,
    /// Host addresses besides loopback ports may be published on (`--allow-publish-address`):
    /// narrower than `public_ports`, which allows every address.
    pub publish_addresses: Vec<IpAddr>,
    /// Put containers on the engine's default bridge, which every stack's containers may share
    /// (`--allow-default-bridge`); without it they go on the stack's own network (`stack_net`).
    pub allow_default_bridge: bool,
    /// `seccomp=unconfined` (`--allow-seccomp-unconfined`).
    pub allow_seccomp_unconfined: bool,
    /// SHA-256 (lowercase hex) of the canonical JSON of custom seccomp profiles a stack may
    /// send (`--allow-seccomp-profile`, `seccomp`).
    pub seccomp_profiles: Vec<String>,
    /// Namespaced sysctls a container may set (`--allow-sysctl`).
    pub allow_sysctls: Vec<String>,
    /// Largest `ShmSize` in bytes (`--max-shm-size`).
    pub max_shm_size: u64,
    /// Logging drivers `LogConfig.Type` may name (`--allow-log-driver`).
    pub allow_log_drivers: Vec<String>,
    /// When not empty, the only images a container may be created from (`--allow-image`),
    /// normalized as `images::normalize_image` does.
    pub allow_images: Vec<String>,
    /// `--require-stack-label`: a container another setting names (`VolumesFrom`, `Links`,
    /// `container:` modes) cannot be checked for the label here, so such settings are refused.
    pub require_stack_label: bool,
    /// Bounds on what a request may make the engine and the proxy spend (docs/architecture.md, "What a stack may spend").
    pub spend: Spend,
    /// Where the stack's networks get their subnets (`--network-pool`); without it, the
    /// engine's own pools.
    pub network_pool: Option<NetworkPool>,
}

impl Default for CreateRules {
    fn default() -> Self {
        Self {
            allow_caps: vec![],
            bind_roots: vec![],
            public_ports: false,
            publish_addresses: vec![],
            allow_default_bridge: false,
            allow_seccomp_unconfined: false,
            seccomp_profiles: vec![],
            allow_sysctls: vec![],
            max_shm_size: DEFAULT_MAX_SHM,
            allow_log_drivers: default_log_drivers(),
            allow_images: vec![],
            require_stack_label: false,
            spend: Spend::default(),
            network_pool: None,
        }
    }
}

impl CreateRules {
    /// Whether `--allow-cap` lets a container have `cap` (named either way, `CAP_X` or `X`, in
    /// any case; `ALL` allows every one).
    pub fn allows_cap(&self, cap: &str) -> bool {
        let want = bare_cap(cap);
        self.allow_caps
            .iter()
            .map(|a| bare_cap(a))
            .any(|a| a == want || a == "ALL")
    }
}

/// Whether a port binding's `HostIp` is one a stack may publish on: loopback (`127.0.0.1`,
/// `::1`), every address with `--allow-public-ports`, else only an address
/// `--allow-publish-address` lists, compared as parsed (`HostIp` as the engine reads it: an
/// empty one is every address, so it needs `--allow-public-ports`; one that does not parse
/// here is refused).
pub fn may_publish_on(rules: &CreateRules, host_ip: &str) -> bool {
    matches!(host_ip, "127.0.0.1" | "::1")
        || rules.public_ports
        || host_ip
            .parse::<IpAddr>()
            .is_ok_and(|ip| rules.publish_addresses.contains(&ip))
}

/// A capability's name as dockerd compares it: upper case, without `CAP_`.
pub fn bare_cap(cap: &str) -> String {
    let upper = cap.to_ascii_uppercase();
    upper.strip_prefix("CAP_").unwrap_or(&upper).to_owned()
}

/// `json-file`, `local`, `none`: drivers that keep the output on the host, or drop it.
pub fn default_log_drivers() -> Vec<String> {
    ["json-file", "local", "none"].map(String::from).to_vec()
}

/// What the field rules need to know about the stack.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    pub op: &'a str,
    pub scope: &'a Scope,
    pub rules: &'a CreateRules,
    pub engine_socket: &'a Path,
    /// The stack's own network (`stack_net::name`), which its containers may join.
    pub stack_network: &'a str,
    /// The proxy's view of the host's paths, which a bind source is walked on.
    pub host: &'a dyn HostPaths,
}

/// The one thing a create's check reads off the host: whether a path is a symbolic link (not
/// followed). The transport answers from the filesystem; the decision and its wording stay here.
pub trait HostPaths: std::fmt::Debug + Send + Sync {
    /// Whether `path` itself is a symbolic link; an error when it cannot be read.
    fn is_symlink(&self, path: &Path) -> std::io::Result<bool>;
}

/// A view with no paths in it, for checks that never reach a bind source (a network
/// attachment's endpoint settings): every path is unreadable.
#[derive(Debug)]
pub struct NoPaths;

impl HostPaths for NoPaths {
    fn is_symlink(&self, path: &Path) -> std::io::Result<bool> {
        Err(std::io::Error::other(format!(
            "{} is not read here",
            path.display()
        )))
    }
}

/// The filesystem as the transport reads it, for the tables whose bind roots are real
/// directories.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Disk;

#[cfg(test)]
impl HostPaths for Disk {
    fn is_symlink(&self, path: &Path) -> std::io::Result<bool> {
        std::fs::symlink_metadata(path).map(|m| m.file_type().is_symlink())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `HostIp` against each operator choice: loopback always, a listed address only as
    /// itself, every other (an empty one is every address) only with `--allow-public-ports`.
    #[test]
    fn which_host_addresses_a_port_may_be_published_on() {
        let listed = CreateRules {
            publish_addresses: vec![
                "172.30.0.1".parse().expect("ip"),
                "fd00::1".parse().expect("ip"),
            ],
            ..CreateRules::default()
        };
        let public = CreateRules {
            public_ports: true,
            ..CreateRules::default()
        };
        let none = CreateRules::default();
        // (HostIp, by default, with the two addresses listed, with --allow-public-ports)
        for (ip, default, with_listed, with_public) in [
            ("127.0.0.1", true, true, true),
            ("::1", true, true, true),
            ("172.30.0.1", false, true, true),
            ("fd00::1", false, true, true),
            ("fd00:0::1", false, true, true),
            ("172.30.0.2", false, false, true),
            ("172.17.0.1", false, false, true),
            ("0.0.0.0", false, false, true),
            ("::", false, false, true),
            ("", false, false, true),
            ("::ffff:172.30.0.1", false, false, true),
            (" 172.30.0.1", false, false, true),
            ("172.30.0.1 ", false, false, true),
            ("172.030.0.1", false, false, true),
            ("localhost", false, false, true),
        ] {
            assert_eq!(may_publish_on(&none, ip), default, "{ip:?} by default");
            assert_eq!(may_publish_on(&listed, ip), with_listed, "{ip:?} listed");
            assert_eq!(may_publish_on(&public, ip), with_public, "{ip:?} public");
        }
    }
}
