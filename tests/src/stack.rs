//! A stack's sockproxy, started in-process on a socket in its own temp dir.

use std::path::{Path, PathBuf};

use sockproxy::config::{Config, LogFormat};
use sockproxy::server::Background;
use sockproxy_policy::{Prefix, Scope};

#[derive(Debug)]
pub struct StackProxy {
    // Declared first so the proxy stops before its directory goes.
    background: Background,
    _dir: PinnedDir,
    pub prefix: String,
    /// The stack's own network, which the proxy makes at its first create that names none.
    pub stack_network: String,
    upstream: PathBuf,
}

impl Drop for StackProxy {
    /// The stack's network goes with the proxy when no container in any state names it (a
    /// test may start a container it made after its proxy is gone; the engine keeps a network
    /// only while a running container is on it); `engine::Cleanup` tries again after removing
    /// its containers: a run of the suite would otherwise use up the engine's address pools.
    fn drop(&mut self) {
        let filters: String = form_urlencoded::byte_serialize(
            serde_json::json!({ "network": [self.stack_network] })
                .to_string()
                .as_bytes(),
        )
        .collect();
        let named = crate::raw::get(
            &self.upstream,
            &format!("/containers/json?all=1&filters={filters}"),
        )
        .map(|r| r.status != 200 || r.json().as_array().is_none_or(|a| !a.is_empty()))
        .unwrap_or(true);
        if !named {
            let _ = crate::raw::request(
                &self.upstream,
                "DELETE",
                &format!("/networks/{}", self.stack_network),
                None,
            );
        }
    }
}

/// The proxy's temporary directory, holding its socket and, with bind roots, its pin
/// directory (`pins`). Before it is removed the pin directory's tmpfs is detached with every
/// pin under it: removing the tree with them still mounted would delete the bound directories'
/// files through the pins. Left in place (and said so) if a mount stays.
#[derive(Debug)]
pub struct PinnedDir(Option<tempfile::TempDir>);

impl PinnedDir {
    pub fn new(dir: tempfile::TempDir) -> Self {
        Self(Some(dir))
    }

    pub fn path(&self) -> &Path {
        self.0
            .as_ref()
            .map_or(Path::new("/nonexistent"), |d| d.path())
    }

    /// The pin directory the stack's proxy is given.
    pub fn pins(&self) -> PathBuf {
        self.path().join("pins")
    }
}

impl Drop for PinnedDir {
    fn drop(&mut self) {
        let Some(dir) = self.0.take() else {
            return;
        };
        let pins = dir.path().join("pins");
        let _ = rustix::mount::unmount(&pins, rustix::mount::UnmountFlags::DETACH);
        let mounted = std::fs::read_to_string("/proc/self/mountinfo")
            .map(|m| m.contains(&format!(" {} ", pins.display())))
            .unwrap_or(true);
        if mounted {
            let kept = dir.keep();
            eprintln!(
                "NOTICE: {} kept: its pin directory is still mounted",
                kept.display()
            );
        }
    }
}

impl StackProxy {
    pub fn start(upstream: &Path, prefix: &str, restricted: bool) -> Self {
        Self::start_with(upstream, prefix, restricted, |_| {})
    }

    /// Like `start`, after `adjust` has changed the configuration (rules, flags).
    pub fn start_with(
        upstream: &Path,
        prefix: &str,
        restricted: bool,
        adjust: impl FnOnce(&mut Config),
    ) -> Self {
        // Guarded from here on: a start that fails may have mounted the pin directory.
        let dir = PinnedDir::new(
            tempfile::Builder::new()
                .prefix("sp")
                .tempdir()
                .expect("temp dir"),
        );
        let cfg = Config {
            listen: dir.path().join("stack.sock"),
            upstream: upstream.to_owned(),
            scope: Scope::new(
                Prefix::parse(prefix).expect("valid test prefix"),
                restricted,
            ),
            stack: format!("test-{prefix}"),
            socket_mode: 0o660,
            socket_gid: None,
            log_format: LogFormat::Plain,
            max_list_bytes: 64 << 20,
            max_list_bytes_total: 256 << 20,
            min_api_version: (1, 24),
            header_timeout: std::time::Duration::from_secs(10),
            body_timeout: std::time::Duration::from_secs(30),
            stack_lock: Some(dir.path().join("stack.lock")),
            max_connections: 256,
            // What the binary runs on CI's two cores: two runtime workers.
            worker_threads: 2,
            old_worker_flag: false,
            shutdown_grace: std::time::Duration::from_secs(2),
            create_rules: Default::default(),
            name_cache: true,
            allow_images: vec![],
            metrics_listen: None,
            pins: sockproxy::pins::PinSettings {
                dir: dir.pins(),
                max: sockproxy::pins::DEFAULT_MAX_PINS,
            },
            // Off unless a test turns it on: its list and samples each second would be
            // requests the recorders see.
            log_flood: None,
            state_dir: None,
        };
        let mut cfg = cfg;
        adjust(&mut cfg);
        let stack_network =
            sockproxy_policy::facts::stack_network(&sockproxy::server::policy_of(&cfg));
        let upstream = cfg.upstream.clone();
        let background = Background::start(cfg).expect("proxy starts");
        Self {
            background,
            _dir: dir,
            prefix: prefix.to_owned(),
            stack_network,
            upstream,
        }
    }

    pub fn socket(&self) -> &Path {
        self.background.socket()
    }

    /// (allowed, denied) decisions so far.
    pub fn decisions(&self) -> (u64, u64) {
        self.background.decisions()
    }

    /// Client connections and upgrade streams the proxy still holds.
    pub fn inflight(&self) -> usize {
        self.background.inflight()
    }

    /// Waits (up to 10 s) until the proxy's name map is live, so that what a test does next
    /// is remembered; panics if it never comes up.
    pub fn wait_names_live(&self) {
        let start = std::time::Instant::now();
        while !self.names_live() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "the proxy's event subscription never came up"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Whether the proxy's name map is live (its event subscription is up).
    pub fn names_live(&self) -> bool {
        self.background.names().0
    }

    /// (containers, networks) the proxy's name map holds.
    pub fn remembered(&self) -> (usize, usize) {
        self.background.names().1
    }

    /// The pin directory the proxy was given by default (`PinnedDir::pins`).
    pub fn pin_dir(&self) -> PathBuf {
        self._dir.pins()
    }

    pub fn socket_buf(&self) -> PathBuf {
        self.socket().to_owned()
    }
}
