//! A `lifecycle serve` provider answering deer-flow's provisioner API on TCP, in process, for
//! tests: any engine (a fake, or the real dockerd) behind the real sockproxy with the mount root
//! as its bind root, lifecycle through that proxy, the API key (if any), and a loopback port
//! the system chose. `call` is the gateway's side: one HTTP request with an optional key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lifecycle::decide::Mode;
use lifecycle::engine::Engine as Client;
use lifecycle::ops::Lifecycle;
use lifecycle::serve::apikey::ApiKey;
use lifecycle::serve::clock::FakeClock;
use lifecycle::serve::limits::Limits;
use lifecycle::serve::provider::{Provider, ProviderConfig};
use lifecycle::serve::provisioner::ApiConfig;
use lifecycle::serve::store::{Memory, Ownership, Store};
use serde_json::Value;
use tokio::sync::watch;

use crate::engine::Engine;
use crate::lc::settings;
use crate::stack::StackProxy;
use crate::unique_prefix;

/// What a real-engine sandbox runs: busybox's httpd answers every request.
pub const SERVING_CMD: &str = "httpd -f -p 8080 -h /tmp";

#[derive(Debug)]
pub struct ApiStack {
    pub provider: Arc<Provider>,
    pub proxy: StackProxy,
    pub prefix: String,
    /// The engine's own socket, for assertions on what it holds.
    pub engine: PathBuf,
    /// deer-flow's host base directory (real path), the proxy's bind root.
    pub root: PathBuf,
    pub addr: SocketAddr,
    /// The provider's monotonic clock, stepped by the test.
    pub clock: Arc<FakeClock>,
    fake: bool,
    _root: crate::bindroot::BindRootDir,
    _state: tempfile::TempDir,
    /// Holds the metrics endpoint's socket (`--metrics-listen`).
    sockets: tempfile::TempDir,
    stop: watch::Sender<bool>,
}

impl ApiStack {
    /// `key`: the API key the provider requires (`None`: none). On the real engine the
    /// sandboxes serve HTTP and creates wait for it; on a fake nothing serves, so nothing waits.
    pub async fn start(e: &Engine, mode: Mode, key: Option<&str>) -> Self {
        Self::start_limited(e, mode, key, Limits::default()).await
    }

    /// `start` with the socket's limits (timeouts, connection cap) given.
    pub async fn start_limited(e: &Engine, mode: Mode, key: Option<&str>, limits: Limits) -> Self {
        let own = Ownership::new(
            Store::Memory(Memory::default()),
            format!("api-{}", std::process::id()),
            Duration::from_secs(600),
        );
        Self::start_full(e, mode, key, limits, own, 0).await
    }

    /// `start` with the given ownership store (Redis, for the claims).
    pub async fn start_owned(e: &Engine, mode: Mode, key: Option<&str>, own: Ownership) -> Self {
        Self::start_full(e, mode, key, Limits::default(), own, 0).await
    }

    /// `start` (open mode, memory store) with a replica cap (`--max-replicas`).
    pub async fn start_capped(e: &Engine, key: &str, max_replicas: usize) -> Self {
        let own = Ownership::new(
            Store::Memory(Memory::default()),
            format!("api-{}", std::process::id()),
            Duration::from_secs(600),
        );
        Self::start_full(
            e,
            Mode::Open,
            Some(key),
            Limits::default(),
            own,
            max_replicas,
        )
        .await
    }

    /// `start` (memory store) whose sandboxes never answer HTTP (the fake's never do; on the
    /// real engine they sleep) while creates would wait `ready_timeout` for an answer.
    pub async fn start_never_ready(e: &Engine, mode: Mode, ready_timeout: Duration) -> Self {
        let own = Ownership::new(
            Store::Memory(Memory::default()),
            format!("api-{}", std::process::id()),
            Duration::from_secs(600),
        );
        Self::start_tuned(e, mode, Some(KEY), Limits::default(), own, 0, |settings| {
            settings.ready_timeout = ready_timeout;
            settings.sandbox_cmd = Some(vec!["sleep".into(), "600".into()]);
        })
        .await
    }

    /// `start` (open mode, memory store) whose sandboxes exit as soon as they start.
    pub async fn start_exiting(e: &Engine) -> Self {
        let own = Ownership::new(
            Store::Memory(Memory::default()),
            format!("api-{}", std::process::id()),
            Duration::from_secs(600),
        );
        Self::start_tuned(
            e,
            Mode::Open,
            Some(KEY),
            Limits::default(),
            own,
            0,
            |settings| {
                settings.sandbox_cmd = Some(vec!["false".into()]);
            },
        )
        .await
    }

    async fn start_full(
        e: &Engine,
        mode: Mode,
        key: Option<&str>,
        limits: Limits,
        own: Ownership,
        max_replicas: usize,
    ) -> Self {
        Self::start_tuned(e, mode, key, limits, own, max_replicas, |_| {}).await
    }

    /// `start_full` with lifecycle's settings changed by `tune` last.
    #[allow(clippy::too_many_arguments)]
    async fn start_tuned(
        e: &Engine,
        mode: Mode,
        key: Option<&str>,
        limits: Limits,
        own: Ownership,
        max_replicas: usize,
        tune: impl FnOnce(&mut lifecycle::ops::Settings),
    ) -> Self {
        let root_dir = crate::bindroot::BindRootDir::new("dfroot");
        let root = root_dir.path().to_owned();
        let prefix = unique_prefix();
        let bind_root = root.clone();
        let proxy = StackProxy::start_with(&e.socket, &prefix, mode == Mode::Restricted, |c| {
            c.create_rules.bind_roots = vec![bind_root];
        });
        proxy.wait_names_live();
        let state = tempfile::tempdir().expect("state");
        let mut s = settings(&prefix, mode);
        s.image = Some(e.image.clone());
        if !e.is_fake() {
            s.sandbox_cmd = Some(vec!["sh".into(), "-c".into(), SERVING_CMD.into()]);
            s.ready_timeout = Duration::from_secs(30);
            if mode == Mode::Restricted {
                // The real sidecar: the sandbox is reached only through its relay.
                s.sidecar_image = Some(crate::engine::ensure_netproxy_image(&e.socket));
                s.sidecar_cmd = None;
            }
        }
        tune(&mut s);
        let lc = Lifecycle::new(
            Client::new(&format!("unix://{}", proxy.socket().display())).expect("address"),
            state.path(),
            s,
        );
        let config = ProviderConfig {
            idle_timeout: Duration::from_secs(1),
            max_replicas,
            adopt_grace: Duration::from_secs(1),
            lease_timeout: Duration::ZERO,
            shutdown_parallel: 8,
        };
        let api = ApiConfig {
            mount_root: Some(root.clone()),
            sandbox_host: "localhost".into(),
            api_key: key.map(ApiKey::new),
        };
        let clock = Arc::new(FakeClock::default());
        let provider = Arc::new(Provider::new(lc, own, clock.clone(), config).with_api(api));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let (stop, rx) = watch::channel(false);
        let sockets = tempfile::tempdir().expect("socket dir");
        crate::serve::serve_metrics(&provider, &sockets.path().join("metrics.sock"), rx.clone());
        if mode == Mode::Restricted {
            // As `lifecycle serve` runs it: the stack's sidecars' refusals counted.
            tokio::spawn(lifecycle::serve::egress_log::run(
                provider.clone(),
                Duration::from_millis(200),
                rx.clone(),
            ));
        }
        tokio::spawn(lifecycle::serve::http::serve(
            listener,
            provider.clone(),
            limits,
            rx,
        ));
        Self {
            provider,
            proxy,
            prefix,
            engine: e.socket.clone(),
            root,
            addr,
            clock,
            fake: e.is_fake(),
            _root: root_dir,
            _state: state,
            sockets,
            stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The sandbox container's name for `id`.
    pub fn name(&self, id: &str) -> String {
        format!("{}sandbox-{id}", self.prefix)
    }

    /// `GET /containers/NAME/json` on the engine itself (`Null` when absent).
    pub fn inspect(&self, name: &str) -> Value {
        match crate::raw::get(&self.engine, &format!("/containers/{name}/json")) {
            Ok(r) if r.status == 200 => r.json(),
            _ => Value::Null,
        }
    }

    /// A running container made on the engine itself, behind the provider's back (what an
    /// earlier provider process left); returns its ID.
    pub fn make(&self, name: &str, labels: Value) -> String {
        crate::engine::make_container(&self.engine, name, labels)
    }

    /// Whether the engine holds object `path` (`/networks/N`, `/containers/N/json`).
    pub fn exists(&self, path: &str) -> bool {
        crate::raw::get(&self.engine, path).is_ok_and(|r| r.status == 200)
    }

    /// `POST /api/sandboxes` of `body` with the test key: (status, body as text).
    pub async fn create(&self, body: &Value) -> (u16, String) {
        self.call(
            "POST",
            "/api/sandboxes",
            &[("X-API-Key", KEY)],
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    /// lifecycle's state directory.
    pub fn state(&self) -> &Path {
        self._state.path()
    }

    /// Every port reservation file under the state directory (`ports/…`), as paths.
    pub fn port_reservations(&self) -> Vec<String> {
        crate::crash::scan_ports(self.state())
            .into_iter()
            .map(|(p, _)| p.display().to_string())
            .collect()
    }

    /// `GET /metrics` on the provider's metrics endpoint: the text.
    pub async fn metrics(&self) -> String {
        let at = self.sockets.path().join("metrics.sock");
        let (status, v) = crate::serve::call(&at, "GET", "/metrics", None).await;
        assert_eq!(status, 200, "{v}");
        v.as_str().unwrap_or_default().to_owned()
    }

    /// One request to the API: (status, body as text).
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> (u16, String) {
        call(self.addr, method, path, headers, body).await
    }
}

impl Drop for ApiStack {
    /// Stops the provider; on a real engine every container and network of the stack goes too,
    /// however the test ended (a fake engine goes with its process).
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if !self.fake {
            crate::engine::remove_stack(&self.engine, &self.prefix);
        }
    }
}

/// One HTTP/1.1 request over TCP with `Connection: close`; (status, body).
pub async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> (u16, String) {
    let (method, path) = (method.to_owned(), path.to_owned());
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        try_call(
            addr,
            &method,
            &path,
            &headers,
            body,
            Duration::from_secs(120),
        )
        .expect("an HTTP answer")
    })
    .await
    .expect("request thread")
}

/// `call` without a runtime and without panicking: a provider that is down (killed, restarting)
/// is an error, for the chaos run's clients. `timeout` bounds each read.
pub fn try_call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    let body = body.unwrap_or_default();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: provisioner\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    // A write may fail where the server answered early and closed; its answer is still read.
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(&body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let r = crate::raw::parse(&out)?;
    Ok((r.status, r.text()))
}

/// Runs the Python `script` (deer-flow's side, with `requests`) with `args`; its stdout, or a
/// panic with everything it printed.
pub fn python(script: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} {args:?} failed:\n{stdout}\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The API key the provisioner tests configure.
pub const KEY: &str = "k3y-for-tests-only";

/// deer-flow's side of the contract test: `tests/tests/serve/deerflow_remote.py`.
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/serve/deerflow_remote.py")
}

/// Lower-case hex of `bytes` (known answers are computed here, never by the code under test).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the provider asked the fake engine (the proxy's own event subscriptions, pings,
/// version negotiation, and its pinned bind sources' start-up probe, an unnamed create, and
/// release passes, lists filtered by `volume`, aside).
pub fn engine_asked(e: &Engine) -> Vec<String> {
    e.fake
        .as_ref()
        .map(|f| {
            f.request_lines()
                .into_iter()
                .filter(|l| {
                    let pin_list = l.starts_with("GET /containers/json?") && l.contains("volume");
                    !(l.starts_with("GET /events")
                        || l.contains("/_ping")
                        || l.starts_with("GET /version")
                        || l == "POST /containers/create"
                        || pin_list)
                })
                .collect()
        })
        .unwrap_or_default()
}
