//! A fake Docker engine for tests and for trying the toolkit without a Docker host: an HTTP
//! server on a Unix socket that answers like dockerd for what the toolkit and the docker CLI use
//! (`routes`, `streams`), over an in-memory model (`state`) whose containers run a tiny command
//! interpreter (`program`). `flavor` holds the version-dependent wordings. Every request is
//! logged, and faults (delay, reset, 500, truncated or malformed JSON) can be injected per
//! endpoint, so tests can assert what an operation asked the engine and how it copes.

mod containers;
pub mod flavor;
pub mod hostconfig;
pub mod mounts;
mod networks;
pub mod program;
mod render;
mod routes;
pub mod state;
mod streams;
mod system;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{broadcast, watch};

pub use flavor::Flavor;
use state::State;

/// One request as the fake received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub method: String,
    /// Path without the `/vN.NN` segment.
    pub path: String,
    pub query: String,
}

impl std::fmt::Display for Logged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.query.is_empty() {
            write!(f, "{} {}", self.method, self.path)
        } else {
            write!(f, "{} {}?{}", self.method, self.path, self.query)
        }
    }
}

/// What to do to a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer normally, after this long.
    Delay(Duration),
    /// Close the connection without answering.
    Reset,
    /// Answer 500 with a dockerd-shaped error.
    Status500,
    /// Answer 404 with a dockerd-shaped error, without doing the work.
    Status404,
    /// Answer 200 with the first half of the normal JSON body.
    Truncated,
    /// Answer 200 with a body that is not JSON.
    Malformed,
}

/// A fault for requests whose method matches (if given) and whose path (without version)
/// contains `path_contains`; `times` limits how often it fires (`None`: always).
#[derive(Debug, Clone)]
pub struct FaultRule {
    pub method: Option<String>,
    pub path_contains: String,
    pub fault: Fault,
    pub times: Option<u32>,
}

impl FaultRule {
    pub fn new(method: Option<&str>, path_contains: &str, fault: Fault) -> Self {
        Self {
            method: method.map(str::to_owned),
            path_contains: path_contains.to_owned(),
            fault,
            times: None,
        }
    }
}

/// Output of a running container: `None` marks the end of a run.
pub type Chunk = Option<(u8, Bytes)>;

#[derive(Debug)]
pub(crate) struct Shared {
    pub flavor: Flavor,
    state: Mutex<State>,
    log: Mutex<Vec<Logged>>,
    faults: Mutex<Vec<FaultRule>>,
    /// Per container: live output, and the signal that stops its program.
    /// Each container's output channel, made on first use (`None` until then).
    pub outputs: Mutex<HashMap<String, Option<broadcast::Sender<Chunk>>>>,
    pub stops: Mutex<HashMap<String, watch::Sender<Option<i64>>>>,
    /// Stdin attached before start (`docker run -i`), taken by the program when it starts.
    pub pending_stdin: Mutex<HashMap<String, tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>>>,
    /// Bumped on every state change; waiters re-check their condition.
    pub changed: watch::Sender<u64>,
    pub events: broadcast::Sender<serde_json::Value>,
    /// Events are not delivered while set (a subscriber that missed some, for tests).
    pub events_muted: std::sync::atomic::AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn new(flavor: Flavor) -> Self {
        Self {
            flavor,
            state: Mutex::new(State::new(u64::from(std::process::id()))),
            log: Mutex::new(Vec::new()),
            faults: Mutex::new(Vec::new()),
            outputs: Mutex::new(HashMap::new()),
            stops: Mutex::new(HashMap::new()),
            pending_stdin: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
            events: broadcast::channel(1024).0,
            events_muted: Default::default(),
        }
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    pub fn notify(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Sends an event to every subscriber, unless events are muted (`mute_events`). Decided
    /// here, when the event happens, not when a subscriber's task gets to it: an event made
    /// while muted must stay lost even if the mute is lifted before it is delivered.
    pub fn publish(&self, event: serde_json::Value) {
        if !self.events_muted.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = self.events.send(event);
        }
    }

    pub fn record(&self, entry: Logged) {
        lock(&self.log).push(entry);
    }

    /// The first matching fault, counting it down.
    pub fn fault_for(&self, method: &str, path: &str) -> Option<Fault> {
        let mut faults = lock(&self.faults);
        let rule = faults.iter_mut().find(|r| {
            r.method.as_deref().is_none_or(|m| m == method)
                && path.contains(&r.path_contains)
                && r.times != Some(0)
        })?;
        if let Some(t) = rule.times.as_mut() {
            *t -= 1;
        }
        Some(rule.fault)
    }
}

/// A running fake engine; dropping it stops the server and every fake container.
#[derive(Debug)]
pub struct FakeEngine {
    socket: PathBuf,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: Option<tempfile::TempDir>,
}

impl FakeEngine {
    /// Starts on a socket in a fresh temp dir.
    pub fn start(flavor: Flavor) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("fk")
            .tempdir()
            .expect("temp dir");
        let socket = dir.path().join("docker.sock");
        let mut engine = Self::start_at(&socket, flavor).expect("fake engine starts");
        engine._dir = Some(dir);
        engine
    }

    /// Starts on `socket` (which must not exist).
    pub fn start_at(socket: &Path, flavor: Flavor) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::new(flavor));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let listener = {
            let _g = rt.enter();
            tokio::net::UnixListener::bind(socket)?
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let thread_shared = shared.clone();
        let thread = std::thread::spawn(move || {
            rt.block_on(routes::serve(listener, thread_shared, rx));
            rt.shutdown_timeout(Duration::from_secs(1));
        });
        Ok(Self {
            socket: socket.to_owned(),
            shared,
            stop: Some(tx),
            thread: Some(thread),
            _dir: None,
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn flavor(&self) -> Flavor {
        self.shared.flavor
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<Logged> {
        lock(&self.shared.log).clone()
    }

    /// Every request received so far, as `METHOD /path?query` lines.
    pub fn request_lines(&self) -> Vec<String> {
        self.requests().iter().map(ToString::to_string).collect()
    }

    /// Drops every event made while `muted`: subscribers miss them, as after a slow or lost
    /// delivery.
    pub fn mute_events(&self, muted: bool) {
        self.shared
            .events_muted
            .store(muted, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
    }

    pub fn inject(&self, rule: FaultRule) {
        lock(&self.shared.faults).push(rule);
    }

    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    pub fn add_image(&self, tag: &str) {
        self.shared.state().add_image(tag);
    }

    /// Names of every container the engine holds (with their leading `/`).
    pub fn container_names(&self) -> Vec<String> {
        self.shared
            .state()
            .containers
            .iter()
            .map(|c| c.name.clone())
            .collect()
    }

    /// Blocks until the server stops (for the `fake-dockerd` binary).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Stops the server (the binary's signal handler).
    pub fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for FakeEngine {
    fn drop(&mut self) {
        self.shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}
