//! The host's paths as the proxy sees them: the filesystem read the policy's bind-source walk
//! asks for (`sockproxy_policy::settings::HostPaths`), answered without following links.

use std::path::Path;

use sockproxy_policy::settings::HostPaths;

/// The filesystem as the proxy process sees it (deploy/README.md: the bind roots must look the
/// same from the proxy as from the engine).
#[derive(Debug)]
pub struct ProxyView;

impl HostPaths for ProxyView {
    fn is_symlink(&self, path: &Path) -> std::io::Result<bool> {
        std::fs::symlink_metadata(path).map(|m| m.file_type().is_symlink())
    }
}
