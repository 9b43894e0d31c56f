//! A fault-injecting pass-through on a Unix socket, put between lifecycle and the stack's proxy:
//! it forwards every request as it is, except one matching a rule, which it answers with an
//! error without forwarding, holds until the test releases it (a "delayed" request with no
//! clock in it), or forwards and then answers with an error in place of the real answer (the
//! engine did the work, the client hears it failed). It also counts engine steps (requests that
//! change the engine: POST, PUT, DELETE) and cuts the client off after the k-th (`cut_at`):
//! either the engine acted and its answer never comes back, or the answer came back and the
//! next request never leaves; from then on every request hangs, so the test can kill the client
//! right there. Requests are buffered whole; lifecycle's calls are all small and none is
//! upgraded.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::sync::watch;

/// How long a test waits for a request it expects to hold before calling it missing.
const NEVER_CAME: Duration = Duration::from_secs(60);

/// A held request: the test learns when it arrived and decides when it goes on.
#[derive(Debug, Clone)]
pub struct Gate {
    arrived: watch::Sender<bool>,
    released: watch::Sender<bool>,
}

impl Gate {
    fn new() -> Self {
        Self {
            arrived: watch::channel(false).0,
            released: watch::channel(false).0,
        }
    }

    /// Waits until the held request has arrived (from async tests). Panics after
    /// `NEVER_CAME`: a request that never comes is a failure, not a reason to hang.
    pub async fn arrived(&self) {
        let mut rx = self.arrived.subscribe();
        let came = tokio::time::timeout(NEVER_CAME, rx.wait_for(|a| *a)).await;
        assert!(came.is_ok_and(|r| r.is_ok()), "the held request never came");
    }

    /// Waits until the held request has arrived (from a plain thread); `false` if it did not
    /// within `NEVER_CAME`.
    pub fn wait_arrived(&self) -> bool {
        let start = std::time::Instant::now();
        while !*self.arrived.borrow() {
            if start.elapsed() > NEVER_CAME {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Whether the held request has arrived, waiting at most `within` (from a plain thread).
    pub fn wait_arrived_within(&self, within: Duration) -> bool {
        let start = std::time::Instant::now();
        loop {
            if *self.arrived.borrow() {
                return true;
            }
            if start.elapsed() >= within {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Lets the held request go on to the proxy.
    pub fn release(&self) {
        self.released.send_replace(true);
    }
}

/// What to do to a matching request.
#[derive(Debug, Clone)]
pub enum Action {
    /// Answer with this status and a dockerd-shaped `{"message"}` body; forward nothing.
    Answer(u16, String),
    /// Forward only once the gate is released.
    Hold(Gate),
    /// Forward, wait for the real answer, then answer this status and message instead.
    ForwardThenAnswer(u16, String),
}

#[derive(Debug, Clone)]
struct Rule {
    method: String,
    path_contains: String,
    action: Action,
    times: u32,
}

/// Where `cut_at` stops the client: after its k-th engine step (counted from the call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The k-th step is forwarded and done by the engine; its answer never comes back.
    Acted(u32),
    /// The k-th step is answered; the next request (of any kind) never leaves.
    Answered(u32),
}

#[derive(Debug)]
struct Cutting {
    cut: Cut,
    gate: Gate,
    steps: u32,
    /// The k-th step was answered (`Cut::Answered`): the next request is held.
    next_held: bool,
    /// The cut happened: every request from now on hangs.
    fired: bool,
}

/// What the cut does to one request.
enum CutAction {
    Pass,
    /// Hang before forwarding (the cut happened, or this is the request after it).
    HoldBefore(Gate),
    /// Forward, then hang instead of answering.
    HoldAfter(Gate),
}

#[derive(Debug, Default)]
struct Shared {
    rules: Mutex<Vec<Rule>>,
    log: Mutex<Vec<String>>,
    cutting: Mutex<Option<Cutting>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn cut_action(&self, method: &str) -> CutAction {
        let mut cutting = lock(&self.cutting);
        let Some(c) = cutting.as_mut() else {
            return CutAction::Pass;
        };
        if c.fired || c.next_held {
            c.fired = true;
            return CutAction::HoldBefore(c.gate.clone());
        }
        if !matches!(method, "POST" | "PUT" | "DELETE") {
            return CutAction::Pass;
        }
        c.steps += 1;
        match c.cut {
            Cut::Acted(k) if c.steps == k => {
                c.fired = true;
                CutAction::HoldAfter(c.gate.clone())
            }
            Cut::Answered(k) if c.steps == k => {
                c.next_held = true;
                CutAction::Pass
            }
            _ => CutAction::Pass,
        }
    }

    fn take(&self, method: &str, path: &str) -> Option<Action> {
        let mut rules = lock(&self.rules);
        let rule = rules
            .iter_mut()
            .find(|r| r.times > 0 && r.method == method && path.contains(&r.path_contains))?;
        rule.times -= 1;
        Some(rule.action.clone())
    }
}

/// The relay; dropping it stops it.
#[derive(Debug)]
pub struct FaultRelay {
    socket: PathBuf,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl FaultRelay {
    /// Relays to the Unix socket `upstream`.
    pub fn start(upstream: &Path) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("fr")
            .tempdir()
            .expect("temp dir");
        let socket = dir.path().join("relay.sock");
        let shared = Arc::new(Shared::default());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = {
            let _g = rt.enter();
            tokio::net::UnixListener::bind(&socket).expect("bind relay")
        };
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let (thread_shared, upstream) = (shared.clone(), upstream.to_owned());
        let thread = std::thread::spawn(move || {
            rt.block_on(async move {
                loop {
                    tokio::select! {
                        _ = &mut rx => break,
                        Ok((stream, _)) = listener.accept() => {
                            let (shared, upstream) = (thread_shared.clone(), upstream.clone());
                            tokio::spawn(async move {
                                let svc = service_fn(move |req| {
                                    relay(req, shared.clone(), upstream.clone())
                                });
                                let _ = http1::Builder::new()
                                    .serve_connection(TokioIo::new(stream), svc)
                                    .await;
                            });
                        }
                    }
                }
            });
            rt.shutdown_timeout(Duration::from_secs(1));
        });
        Self {
            socket,
            shared,
            stop: Some(tx),
            thread: Some(thread),
            _dir: dir,
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The next `times` requests with this method whose path and query contain `path_contains`
    /// get `action`.
    pub fn on(&self, method: &str, path_contains: &str, action: Action, times: u32) {
        lock(&self.shared.rules).push(Rule {
            method: method.to_owned(),
            path_contains: path_contains.to_owned(),
            action,
            times,
        });
    }

    /// Answers the next matching request 500 without forwarding it.
    pub fn fail_once(&self, method: &str, path_contains: &str) {
        let msg = format!("fault relay: injected 500 for {method} {path_contains}");
        self.on(method, path_contains, Action::Answer(500, msg), 1);
    }

    /// Holds the next matching request until the returned gate is released.
    pub fn hold_once(&self, method: &str, path_contains: &str) -> Gate {
        let gate = Gate::new();
        self.on(method, path_contains, Action::Hold(gate.clone()), 1);
        gate
    }

    /// Counts engine steps from now and cuts the client off at `cut` (see `Cut`); the gate
    /// arrives when the cut happened, and nothing is answered after it.
    pub fn cut_at(&self, cut: Cut) -> Gate {
        let gate = Gate::new();
        *lock(&self.shared.cutting) = Some(Cutting {
            cut,
            gate: gate.clone(),
            steps: 0,
            next_held: false,
            fired: false,
        });
        gate
    }

    /// Every request line relayed or answered so far (`METHOD /path?query`, version included).
    pub fn requests(&self) -> Vec<String> {
        lock(&self.shared.log).clone()
    }
}

impl Drop for FaultRelay {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn answer(status: u16, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({ "message": message }).to_string();
    Response::builder()
        .status(status)
        .header("Content-Type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_default()
}

async fn relay(
    req: Request<hyper::body::Incoming>,
    shared: Arc<Shared>,
    upstream: PathBuf,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let (parts, body) = req.into_parts();
    let target = parts
        .uri
        .path_and_query()
        .map(ToString::to_string)
        .unwrap_or_default();
    lock(&shared.log).push(format!("{} {target}", parts.method));
    let hang_after = match shared.cut_action(parts.method.as_str()) {
        CutAction::Pass => None,
        CutAction::HoldBefore(gate) => {
            gate.arrived.send_replace(true);
            std::future::pending::<()>().await;
            None
        }
        CutAction::HoldAfter(gate) => Some(gate),
    };
    let action = shared.take(parts.method.as_str(), &target);
    let replace = match action {
        Some(Action::Answer(status, message)) => return Ok(answer(status, &message)),
        Some(Action::Hold(gate)) => {
            gate.arrived.send_replace(true);
            let mut rx = gate.released.subscribe();
            let _ = rx.wait_for(|r| *r).await;
            None
        }
        Some(Action::ForwardThenAnswer(status, message)) => Some((status, message)),
        None => None,
    };
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let forwarded = forward(Request::from_parts(parts, Full::new(body)), &upstream).await;
    if let Some(gate) = hang_after {
        // The engine acted; its answer never reaches the client.
        gate.arrived.send_replace(true);
        std::future::pending::<()>().await;
    }
    Ok(match (replace, forwarded) {
        (Some((status, message)), _) => answer(status, &message),
        (None, Ok(r)) => r,
        (None, Err(e)) => answer(502, &format!("fault relay: upstream: {e}")),
    })
}

async fn forward(
    req: Request<Full<Bytes>>,
    upstream: &Path,
) -> Result<Response<Full<Bytes>>, Box<dyn std::error::Error + Send + Sync>> {
    let stream = tokio::net::UnixStream::connect(upstream).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let resp = sender.send_request(req).await?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Response::from_parts(parts, Full::new(body)))
}
