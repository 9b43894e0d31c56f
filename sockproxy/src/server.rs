//! The listening side: the Unix socket (mode, group, stale-file handling), the runtime the proxy
//! runs on, the accept loop with peer credentials (one task per connection, headguard's scanner
//! in front of hyper's server), and a background handle for embedding the proxy in tests and
//! tools.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use headguard::{Answered, ClientRead, HeadLimits, Scanner, Verdicts};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use sockproxy_policy::Policy;
use tokio::net::{UnixListener, UnixStream};

use crate::client_body::ClientBody;
use crate::config::Config;
use crate::proxy::{Peer, Proxy, Serving};
use crate::upstream::Upstream;
use sockproxy_policy::Refusal;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Bind(scrape::BindError),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Activation(#[from] scrape::activation::ActivationError),
    #[error("--metrics-listen {0}")]
    Metrics(scrape::BindError),
    #[error(transparent)]
    Pins(#[from] crate::pin_dir::PinError),
}

/// The proxy's listening socket, and its file if the proxy made it (removed at exit; `None`
/// when systemd passed the socket, which keeps it for the next start); and the metrics
/// endpoint's, if asked for.
#[derive(Debug)]
pub struct Bound {
    pub listener: UnixListener,
    pub made: Option<scrape::SocketFile>,
    pub metrics: Option<scrape::Listener>,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ServerError + '_ {
    move |source| ServerError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Binds the proxy's socket (`scrape::bind`: a stale socket file is replaced only if nothing
/// answers on it; `--socket-group`, then `--socket-mode`). With systemd socket activation, the
/// socket systemd passed is used as it is (its mode and group are the unit's).
/// The metrics endpoint (`--metrics-listen`) is bound here too, first: a start-up failure
/// either way.
pub fn bind(cfg: &Config) -> Result<Bound, ServerError> {
    let metrics = cfg
        .metrics_listen
        .as_ref()
        .map(|at| scrape::bind(at, scrape::METRICS_MODE, None))
        .transpose()
        .map_err(ServerError::Metrics)?;
    let path = &cfg.listen;
    let at = scrape::Listen::Unix(path.clone());
    if let Some(scrape::activation::Inherited::Unix(std)) = scrape::activation::inherited(&at)? {
        let listener = UnixListener::from_std(std).map_err(io_err(path))?;
        return Ok(Bound {
            listener,
            made: None,
            metrics,
        });
    }
    let (listener, file) = scrape::listen::bind_unix(path, cfg.socket_mode, cfg.socket_gid)
        .map_err(ServerError::Bind)?;
    Ok(Bound {
        listener,
        made: Some(file),
        metrics,
    })
}

/// The policy a configuration gives the proxy. One switch,
/// `create_rules.require_stack_label`, for what the proxy stamps and what it then lets the
/// stack see: lists and events read the label through the scope.
pub fn policy_of(cfg: &Config) -> Policy {
    Policy {
        scope: cfg.scope.clone().with_required_label(
            cfg.create_rules
                .require_stack_label
                .then_some(cfg.stack.as_str()),
        ),
        stack: cfg.stack.clone(),
        create_rules: cfg.create_rules.clone(),
        allow_images: cfg.allow_images.clone(),
        min_api_version: cfg.min_api_version,
        host: sockproxy_policy::Host {
            engine_socket: cfg.upstream.clone(),
            paths: Arc::new(crate::host_paths::ProxyView),
        },
    }
}

/// The proxy for `cfg`, with its pinned bind sources (`pins::Pins::open`) when it has bind
/// roots.
pub fn proxy_for(cfg: &Config, pins: Option<crate::pins::Pins>) -> Arc<Proxy> {
    let metrics = Arc::new(crate::metrics::Metrics::default());
    Arc::new(Proxy {
        policy: policy_of(cfg),
        upstream: Upstream::new(cfg.upstream.clone(), metrics.clone()),
        names: Default::default(),
        name_cache: cfg.name_cache,
        serving: Serving {
            connection_slots: Arc::new(tokio::sync::Semaphore::new(cfg.max_connections)),
            header_timeout: cfg.header_timeout,
            body_timeout: cfg.body_timeout,
            inflight: Default::default(),
            max_list_bytes: cfg.max_list_bytes,
            list_budget: crate::upstream::ListBudget::new(cfg.max_list_bytes_total),
        },
        counters: Default::default(),
        metrics,
        pins: pins.map(Arc::new),
        stack_lock: crate::stack_lock::StackLock::new(cfg.stack_lock.clone()),
        log_flood: cfg.log_flood,
        state_dir: cfg.state_dir.clone(),
    })
}

/// Accepts until `shutdown` resolves; then closes the listener and removes the socket file at
/// once (new clients are refused), asks every connection to finish gracefully (idle keep-alive
/// connections close, responses in progress complete) and waits for in-flight work, upgrade
/// streams included, up to `grace`.
/// `made`: the socket file to remove at the end (`None` for one systemd passed). `metrics`: the
/// metrics endpoint's listener, served until the main listener closes.
pub async fn serve(
    listener: UnixListener,
    proxy: Arc<Proxy>,
    made: Option<scrape::SocketFile>,
    metrics: Option<scrape::Listener>,
    grace: std::time::Duration,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let metrics = metrics.map(|l| {
        let exposed = Arc::new(crate::exposed::Exposed(proxy.clone()));
        AbortOnDrop(tokio::spawn(scrape::serve(
            l,
            exposed,
            std::future::pending(),
        )))
    });
    // Ends with this function; until the subscription is up every request inspects.
    let _watch = proxy.name_cache.then(|| {
        let watch = crate::watch::run(
            proxy.upstream.clone(),
            proxy.names.clone(),
            proxy.policy.scope.clone(),
        );
        AbortOnDrop(tokio::spawn(crate::metrics::with_op("watch", watch)))
    });
    // Releases the pins no container refers to (start-up's leftovers too), until this ends.
    let _pins = proxy.pins.clone().map(|pins| {
        let run = crate::pin_watch::run(
            proxy.upstream.clone(),
            pins,
            proxy.policy.stack.clone(),
            proxy.serving.max_list_bytes,
        );
        AbortOnDrop(tokio::spawn(crate::metrics::with_op("pins", run)))
    });
    // Stops the stack's containers that flood their logs, until this ends.
    let _log_guard = proxy.log_flood.map(|limit| {
        let run = crate::log_guard::run(
            proxy.upstream.clone(),
            proxy.policy.clone(),
            limit,
            proxy.serving.max_list_bytes,
            proxy.metrics.clone(),
            proxy
                .state_dir
                .as_deref()
                .map(crate::guard_memory::Memory::in_dir),
        );
        AbortOnDrop(tokio::spawn(crate::metrics::with_op("log_guard", run)))
    });
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => match proxy.serving.connection_slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        // Read once, here: the connection keeps it for every request.
                        let peer = stream
                            .peer_cred()
                            .map(|c| Peer {
                                uid: Some(c.uid()),
                                pid: c.pid(),
                            })
                            .unwrap_or_default();
                        let held = Held {
                            peer,
                            slot,
                            _open: proxy.metrics.connection_opened(),
                            _inflight: proxy.serving.inflight.enter(),
                            proxy: proxy.clone(),
                            stop: stop_rx.clone(),
                        };
                        drop(tokio::spawn(held.serve(stream)));
                    }
                    Err(_) => {
                        tokio::spawn(reject_busy(stream, proxy.clone()));
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    // Out of file descriptors and the like: back off instead of spinning.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    // The metrics endpoint goes with the main socket: a replacement started during the grace
    // period binds both (one left bound made it exit), and no scrape reports a proxy that no
    // longer takes clients.
    if let Some(mut m) = metrics {
        m.stop().await;
    }
    if let Some(file) = made {
        let path = file.path().map(Path::to_path_buf).unwrap_or_default();
        if let Err(e) = file.remove() {
            tracing::warn!(path = %path.display(), error = %e, "could not remove socket file");
        }
    }
    let _ = stop_tx.send(true);
    let inflight = proxy.serving.inflight.count();
    if inflight > 0 {
        tracing::info!(
            inflight,
            grace_secs = grace.as_secs(),
            "waiting for in-flight streams"
        );
        if tokio::time::timeout(grace, proxy.serving.inflight.idle())
            .await
            .is_err()
        {
            tracing::warn!(
                left = proxy.serving.inflight.count(),
                "shutdown deadline reached; closing what is left"
            );
        }
    }
}

/// An accepted connection's slot under `--max-connections`, its place among the work a
/// shutdown waits for, and what serving it needs.
struct Held {
    peer: Peer,
    slot: tokio::sync::OwnedSemaphorePermit,
    /// In `sockproxy_connections_open` until served.
    _open: crate::metrics::Open,
    _inflight: crate::inflight::Guard,
    proxy: Arc<Proxy>,
    stop: tokio::sync::watch::Receiver<bool>,
}

impl Held {
    async fn serve(self, stream: UnixStream) {
        serve_connection(stream, self.peer, self.proxy, self.stop).await;
        drop(self.slot);
    }
}

/// Stops a background task when its owner goes.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl AbortOnDrop {
    /// Stops the task and waits until it is gone, with what it held (a listener: closed).
    async fn stop(&mut self) {
        self.0.abort();
        let _ = (&mut self.0).await;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The limits on a request head. hyper's own are a backstop set wider, so that it never
/// answers in its own shape (a bare 400 or 431): the scanner refuses first, in dockerd's.
const HEAD_MAX_BYTES: usize = 256 * 1024;
const HEAD_MAX_HEADERS: usize = 100;

async fn serve_connection(
    stream: UnixStream,
    peer: Peer,
    proxy: Arc<Proxy>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let (rd, wr) = stream.into_split();
    let verdicts = Verdicts::default();
    let limits = HeadLimits {
        max_bytes: HEAD_MAX_BYTES,
        max_headers: HEAD_MAX_HEADERS,
        timeout: proxy.serving.header_timeout,
        upgrades: true,
    };
    let answered = Answered::default();
    // An idle kept-alive connection is closed after twice the head limit; a head that has
    // started is the scanner's to time.
    let reader = ClientRead::new(Scanner::new(rd, verdicts.clone(), limits).close_when_idle(
        proxy.serving.header_timeout.saturating_mul(2),
        answered.clone(),
    ));
    let io = TokioIo::new(tokio::io::join(reader, wr));
    let served = std::sync::atomic::AtomicUsize::new(0);
    let svc_proxy = proxy.clone();
    let svc = service_fn(move |req| {
        let nth = served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let verdict = verdicts.get(nth);
        let p = svc_proxy.clone();
        let answered = answered.clone();
        async move {
            let resp = match verdict {
                // A stand-in for a refused head: answered, never read.
                Some(why) => Ok(p.refuse_head(peer, why)),
                None => p.handle(peer, req).await,
            };
            resp.map(|r| r.map(|body| ClientBody::new(body, answered)))
        }
    });
    // No `max_headers`: hyper's default is 100, the scanner's limit, and the scanner refuses a
    // longer head before hyper reads it. Setting it makes hyper allocate two 3 KiB header arrays
    // per request instead of using the stack (callgrind: see the commit).
    const _: () = assert!(HEAD_MAX_HEADERS == 100);
    let conn = http1::Builder::new()
        .max_buf_size(HEAD_MAX_BYTES * 2)
        // No timer: hyper would arm one per head for `header_read_timeout`; the scanner times
        // heads and idle connections itself (`headguard::idle`).
        .serve_connection(io, svc)
        .with_upgrades();
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = async {
            // The guard `wait_for` returns must not live across an await.
            let _ = stop.wait_for(|stopping| *stopping).await;
        } => {
            conn.as_mut().graceful_shutdown();
            conn.as_mut().await
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "client connection ended with an error");
    }
}

/// Over `--max-connections`: a 503 in dockerd's shape, then close.
async fn reject_busy(mut stream: UnixStream, proxy: Arc<Proxy>) {
    proxy.metrics.connection_refused();
    let refusal = Refusal::Busy("too many connections (--max-connections)".into());
    reject(&mut stream, &proxy, refusal).await;
}

/// Answers before hyper is involved, in dockerd's error shape, and closes.
async fn reject(stream: &mut UnixStream, proxy: &Proxy, refusal: Refusal) {
    proxy.counters.count(false);
    proxy
        .metrics
        .decision("connection", "deny", refusal.reason(), refusal.rule());
    let status = refusal.status();
    tracing::info!(
        stack = %proxy.policy.stack,
        op = "connection",
        target = "",
        decision = "deny",
        reason = refusal.reason(),
        status = status.as_u16(),
        duration_ms = 0.0,
        "decision"
    );
    let mut headers = hyper::HeaderMap::new();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    headers.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    let answer = scrape::raw_answer::bytes(status, &headers, &refusal.body());
    scrape::raw_answer::send(stream, &answer, std::time::Duration::from_millis(500)).await;
}

/// The multi-thread runtime the proxy runs on: `workers` worker threads (`--worker-threads`),
/// named `sp-loop-0`, `sp-loop-1`…, and the blocking pool's threads (large bodies and lists),
/// `sp-blocking`. tokio starts its workers as it builds the runtime, before any blocking
/// thread, so the first `workers` names are theirs.
pub fn runtime(workers: usize) -> io::Result<tokio::runtime::Runtime> {
    let workers = workers.max(1);
    let named = AtomicUsize::new(0);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name_fn(move || match named.fetch_add(1, Ordering::Relaxed) {
            n if n < workers => format!("sp-loop-{n}"),
            _ => "sp-blocking".to_owned(),
        })
        .enable_all()
        .build()
}

/// A proxy running on its own thread and runtime; dropping the handle stops it.
#[derive(Debug)]
pub struct Background {
    path: PathBuf,
    proxy: Arc<Proxy>,
    metrics_tcp: Option<std::net::SocketAddr>,
    /// Last: stopped when the handle goes.
    _run: scrape::Background,
}

impl Background {
    pub fn start(cfg: Config) -> Result<Self, ServerError> {
        // As the binary's (main.rs).
        let runtime = runtime(cfg.worker_threads).map_err(io_err(&cfg.listen))?;
        let pins = crate::pins::Pins::open(&cfg.pins, &cfg.create_rules.bind_roots)?;
        let proxy = proxy_for(&cfg, pins);
        if let Some(pins) = &proxy.pins {
            // On a thread of its own: the caller may be on a runtime, where none may block.
            let probe = crate::pin_watch::probe(&proxy.upstream, pins);
            std::thread::scope(|s| s.spawn(|| runtime.block_on(probe)).join())
                .map_err(|_| io_err(&cfg.listen)(io::Error::other("the pin probe panicked")))??;
        }
        let bound = {
            let _guard = runtime.enter();
            bind(&cfg)?
        };
        let metrics_tcp = bound.metrics.as_ref().and_then(scrape::Listener::local_tcp);
        let served = proxy.clone();
        let run = scrape::Background::spawn(runtime, move |stop| {
            // Tests stop proxies often; a short grace keeps teardown quick.
            let grace = std::time::Duration::from_secs(2);
            serve(
                bound.listener,
                served,
                bound.made,
                bound.metrics,
                grace,
                stop,
            )
        });
        Ok(Self {
            path: cfg.listen,
            proxy,
            metrics_tcp,
            _run: run,
        })
    }

    pub fn socket(&self) -> &Path {
        &self.path
    }

    /// Where the metrics endpoint listens, when it is on TCP (the port chosen for port 0).
    pub fn metrics_tcp(&self) -> Option<std::net::SocketAddr> {
        self.metrics_tcp
    }

    /// Client connections and upgrade streams in flight.
    pub fn inflight(&self) -> usize {
        self.proxy.serving.inflight.count()
    }

    /// (allowed, denied) decisions so far.
    pub fn decisions(&self) -> (u64, u64) {
        self.proxy.counters.snapshot()
    }

    /// Whether the name map is live (its event subscription is up), and the containers and
    /// networks it holds.
    pub fn names(&self) -> (bool, (usize, usize)) {
        (self.proxy.names.is_live(), self.proxy.names.len())
    }
}
