//! A `lifecycle serve` provider for tests, in process: the fake engine behind the real sockproxy
//! (`LcStack`), optionally a fault relay between lifecycle and the proxy, a `FakeClock` the test
//! steps, and the HTTP API on a Unix socket in a temp dir. Background passes (reaper,
//! heartbeat) are not started: a test calls them when it wants them, so nothing depends on timing.
//! The socket's limits are serve's defaults unless a test gives its own (`start_limited`).
//! `call` is the gateway's side: one HTTP request on the provider's socket.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lifecycle::decide::Mode;
use lifecycle::engine::Engine as Client;
use lifecycle::ops::Lifecycle;
use lifecycle::serve::clock::FakeClock;
use lifecycle::serve::limits::Limits;
use lifecycle::serve::provider::{Provider, ProviderConfig};
use lifecycle::serve::store::{Memory, Ownership, Store};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::lc::fault_relay::FaultRelay;
use crate::lc::{settings, LcStack};
use crate::raw;

#[derive(Debug)]
pub struct Served {
    pub stack: LcStack,
    pub provider: Arc<Provider>,
    pub clock: Arc<FakeClock>,
    pub relay: Option<FaultRelay>,
    pub dir: tempfile::TempDir,
    stop: watch::Sender<bool>,
}

pub fn config(idle_secs: u64, max_replicas: usize) -> ProviderConfig {
    ProviderConfig {
        idle_timeout: Duration::from_secs(idle_secs),
        max_replicas,
        adopt_grace: Duration::from_secs(1),
        lease_timeout: Duration::ZERO,
        shutdown_parallel: 8,
    }
}

impl Served {
    /// A provider with the memory store on a fresh stack.
    pub async fn start(config: ProviderConfig) -> Self {
        Self::start_with(config, false).await
    }

    /// `relayed`: lifecycle reaches the proxy through a `FaultRelay` (see `relay`).
    pub async fn start_with(config: ProviderConfig, relayed: bool) -> Self {
        let own = Ownership::new(
            Store::Memory(Memory::default()),
            format!("test-{}", std::process::id()),
            Duration::from_secs(600),
        );
        Self::start_owned(config, relayed, own).await
    }

    /// A provider with the given ownership store (open mode).
    pub async fn start_owned(config: ProviderConfig, relayed: bool, own: Ownership) -> Self {
        Self::start_full(
            config,
            relayed,
            own,
            Mode::Open,
            Duration::ZERO,
            Limits::default(),
        )
        .await
    }

    /// A relayed provider (memory store) whose socket has the given limits.
    pub async fn start_limited(config: ProviderConfig, limits: Limits) -> Self {
        let own = Ownership::new(
            Store::Memory(Memory::default()),
            format!("test-{}", std::process::id()),
            Duration::from_secs(600),
        );
        Self::start_full(config, true, own, Mode::Open, Duration::ZERO, limits).await
    }

    /// A relayed open-mode provider whose creates wait up to `ready_timeout` for an HTTP answer
    /// at the sandbox's URL (and whose warm reclaims probe it): nothing answers there unless
    /// the test listens on the sandbox's port itself.
    pub async fn start_probing(
        config: ProviderConfig,
        own: Ownership,
        ready_timeout: Duration,
    ) -> Self {
        Self::start_full(
            config,
            true,
            own,
            Mode::Open,
            ready_timeout,
            Limits::default(),
        )
        .await
    }

    /// A restricted-mode provider behind a `--restricted` proxy.
    pub async fn start_restricted(config: ProviderConfig) -> Self {
        let own = Ownership::new(
            Store::Memory(Memory::default()),
            format!("test-{}", std::process::id()),
            Duration::from_secs(600),
        );
        Self::start_full(
            config,
            false,
            own,
            Mode::Restricted,
            Duration::ZERO,
            Limits::default(),
        )
        .await
    }

    async fn start_full(
        config: ProviderConfig,
        relayed: bool,
        own: Ownership,
        mode: Mode,
        ready_timeout: Duration,
        limits: Limits,
    ) -> Self {
        let stack = LcStack::new(mode == Mode::Restricted);
        let relay = relayed.then(|| FaultRelay::start(stack.proxy.socket()));
        let engine_sock = relay
            .as_ref()
            .map(|r| r.socket().to_owned())
            .unwrap_or_else(|| stack.proxy.socket().to_owned());
        let mut settings = settings(&stack.prefix, mode);
        settings.ready_timeout = ready_timeout;
        let lc = Lifecycle::new(
            Client::new(&format!("unix://{}", engine_sock.display())).expect("address"),
            stack.state.path(),
            settings,
        );
        let clock = Arc::new(FakeClock::default());
        let provider = Arc::new(Provider::new(lc, own, clock.clone(), config));
        let dir = tempfile::tempdir().expect("socket dir");
        let sock = dir.path().join("serve.sock");
        let listener = tokio::net::UnixListener::bind(&sock).expect("bind");
        let (stop, rx) = watch::channel(false);
        serve_metrics(&provider, &dir.path().join("metrics.sock"), rx.clone());
        tokio::spawn(lifecycle::serve::http::serve(
            listener,
            provider.clone(),
            limits,
            rx,
        ));
        Self {
            stack,
            provider,
            clock,
            relay,
            dir,
            stop,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("serve.sock")
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        call(&self.socket(), method, path, body).await
    }

    /// `GET /metrics` on the provider's metrics endpoint (`--metrics-listen`).
    pub async fn metrics(&self) -> (u16, Value) {
        call(
            &self.dir.path().join("metrics.sock"),
            "GET",
            "/metrics",
            None,
        )
        .await
    }

    /// One request with a raw body; the whole answer, headers included.
    pub async fn call_raw(&self, method: &str, path: &str, body: &[u8]) -> raw::RawResponse {
        let (sock, method, path, body) = (
            self.socket(),
            method.to_owned(),
            path.to_owned(),
            body.to_vec(),
        );
        tokio::task::spawn_blocking(move || {
            raw::request(&sock, &method, &path, Some(&body)).expect("the provider answers")
        })
        .await
        .expect("request task")
    }

    /// `POST /v1/acquire`; returns (status, answer).
    pub async fn acquire(&self, user: &str, thread: &str, holder: &str) -> (u16, Value) {
        let body = json!({ "user_id": user, "thread_id": thread, "holder": holder });
        self.call("POST", "/v1/acquire", Some(body)).await
    }

    /// An acquire of (user-1, `thread`) for holder `run`, started in the background with the
    /// first request matching `method` and `path` held at the relay: once the gate has
    /// `arrived`, the acquire is under way at that step.
    pub fn acquire_held(
        &self,
        method: &str,
        path: &str,
        thread: &str,
    ) -> (
        crate::lc::fault_relay::Gate,
        tokio::task::JoinHandle<(u16, Value)>,
    ) {
        let gate = self
            .relay
            .as_ref()
            .expect("relayed")
            .hold_once(method, path);
        let sock = self.socket();
        let body = json!({ "user_id": "user-1", "thread_id": thread, "holder": "run" });
        let acquire =
            tokio::spawn(async move { call(&sock, "POST", "/v1/acquire", Some(body)).await });
        (gate, acquire)
    }

    /// Acquire that must succeed; returns the answer.
    pub async fn acquired(&self, user: &str, thread: &str, holder: &str) -> Value {
        let (status, v) = self.acquire(user, thread, holder).await;
        assert_eq!(status, 200, "{v}");
        v
    }

    pub async fn release(&self, lease: &Value) -> (u16, Value) {
        let lease = lease.as_str().expect("lease is a string");
        self.call("POST", &format!("/v1/leases/{lease}/release"), None)
            .await
    }

    pub async fn destroy(&self, id: &Value) -> (u16, Value) {
        let id = id.as_str().expect("sandbox_id is a string");
        self.call("POST", &format!("/v1/sandboxes/{id}/destroy"), None)
            .await
    }

    /// `GET /v1/sandboxes`, the entry of `id` (or Null).
    pub async fn listed(&self, id: &Value) -> Value {
        let (status, v) = self.call("GET", "/v1/sandboxes", None).await;
        assert_eq!(status, 200, "{v}");
        v["sandboxes"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["sandbox_id"] == *id).cloned())
            .unwrap_or(Value::Null)
    }

    /// Whether a container with this ID exists on the engine, and runs.
    pub fn running(&self, container_id: &Value) -> bool {
        let cid = container_id.as_str().unwrap_or_default();
        raw::get(
            &self.stack.engine.socket,
            &format!("/containers/{cid}/json"),
        )
        .is_ok_and(|r| r.status == 200 && r.json()["State"]["Running"] == true)
    }

    pub fn exists(&self, container_id: &Value) -> bool {
        let cid = container_id.as_str().unwrap_or_default();
        self.stack.exists(&format!("/containers/{cid}/json"))
    }

    /// Stops a container behind the provider's back (a crash, an OOM kill).
    pub fn kill_behind_its_back(&self, container_id: &Value) {
        let cid = container_id.as_str().unwrap_or_default();
        let r = raw::request(
            &self.stack.engine.socket,
            "POST",
            &format!("/containers/{cid}/stop?t=0"),
            None,
        )
        .expect("answer");
        assert!(r.status == 204 || r.status == 304, "{}", r.text());
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// Serves `provider`'s `--metrics-listen` endpoint on the Unix socket `at` until `stop` turns
/// true, as `lifecycle serve` does.
pub fn serve_metrics(provider: &Arc<Provider>, at: &Path, mut stop: watch::Receiver<bool>) {
    let listener = scrape::bind(
        &scrape::Listen::Unix(at.to_owned()),
        scrape::METRICS_MODE,
        None,
    )
    .expect("bind the metrics endpoint");
    let exposed = Arc::new(lifecycle::serve::exposed::Exposed(provider.clone()));
    tokio::spawn(scrape::serve(listener, exposed, async move {
        let _ = stop.wait_for(|s| *s).await;
    }));
}

/// One request on a provider's socket, from a blocking thread (the raw client is blocking).
pub async fn call(sock: &Path, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let (sock, method, path) = (sock.to_owned(), method.to_owned(), path.to_owned());
    tokio::task::spawn_blocking(move || {
        let body = body.map(|b| b.to_string());
        let r = raw::request(&sock, &method, &path, body.as_deref().map(str::as_bytes))
            .expect("the provider answers");
        let v = serde_json::from_slice(&r.body).unwrap_or(Value::String(r.text()));
        (r.status, v)
    })
    .await
    .expect("request thread")
}
