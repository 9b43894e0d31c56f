//! The listening side: TCP accept loop with a global connection cap (over it: 503 with
//! `Retry-After`), each connection served by hyper through the `framing::Scanner` (which
//! enforces the head size, count and time limits), and an in-process background handle for
//! tests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};

use crate::audit::Trace;
use crate::caps::Caps;
use crate::client::{ClientIo, ClientRead};
use crate::framing::{HeadLimits, Scanner, Verdicts};
use crate::proxy::{ConnectionHold, NetProxy};
use crate::refusal::{Reason, Refusal};

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub max_per_client: usize,
    pub max_headers: usize,
    /// hyper's read buffer, which bounds the request head (at least 8192).
    pub max_header_bytes: usize,
    pub header_timeout: Duration,
    /// How long one write to a client may wait for it to take bytes (`scrape::write_timeout`).
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_per_client: 64,
            max_headers: 100,
            max_header_bytes: 16 * 1024,
            header_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(60),
        }
    }
}

pub async fn serve(
    listener: TcpListener,
    proxy: Arc<NetProxy>,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    // Announced network changes reach the open tunnels from here on.
    proxy.watch();
    // `/healthz` is 200 while this loop runs, and not once it has returned.
    let _serving = Serving::start(proxy.metrics.clone());
    let caps = Caps::new(limits.max_connections, limits.max_per_client);
    tokio::pin!(shutdown);
    let mut spare = Spare::new();
    let mut backoff = BACKOFF_MIN;
    let mut at_limit = false;
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => {
                        backoff = BACKOFF_MIN;
                        at_limit = false;
                        spare.refill();
                        a
                    }
                    Err(e) => {
                        if is_fd_limit(&e) {
                            if !std::mem::replace(&mut at_limit, true) {
                                // Once per episode, not per client: a flood must not flood the log.
                                tracing::warn!(error = %e, "at the file descriptor limit: answering 503");
                            }
                            if spare.answer_one(&listener, &proxy.metrics).await {
                                // A client was answered: that is progress, not a spin.
                                continue;
                            }
                        }
                        // The waiting connection stays queued; retrying at once would spin.
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                        continue;
                    }
                };
                match caps.admit(peer.ip()) {
                    Ok(held) => {
                        let proxy = proxy.clone();
                        // Counted open as long as the limits hold it: a tunnel keeps it.
                        let open = proxy.metrics.connection_opened();
                        let hold = ConnectionHold(Arc::new((held, open)));
                        tokio::spawn(connection(stream, peer, proxy, limits, hold));
                    }
                    Err(reason) => {
                        let m = proxy.metrics.clone();
                        tokio::spawn(async move { busy(stream, peer, reason, &m).await });
                    }
                }
            }
        }
    }
}

/// The accept loop running, for `/healthz`: set when it starts, cleared when it returns.
struct Serving(Arc<crate::metrics::Metrics>);

impl Serving {
    fn start(m: Arc<crate::metrics::Metrics>) -> Self {
        m.serving(true);
        Self(m)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.serving(false);
    }
}

/// How long an accept loop waits after a failed accept, doubling up to `BACKOFF_MAX`.
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(5);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(1);

pub(crate) fn is_fd_limit(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if code == nix::libc::EMFILE || code == nix::libc::ENFILE)
}

/// One descriptor kept in reserve: at the descriptor limit, giving it back makes room to accept
/// one waiting connection and tell it 503, instead of leaving every client queued in silence.
#[derive(Debug)]
struct Spare(Option<std::fs::File>);

impl Spare {
    fn new() -> Self {
        let mut s = Self(None);
        s.refill();
        s
    }

    fn refill(&mut self) {
        if self.0.is_none() {
            self.0 = std::fs::File::open("/dev/null").ok();
        }
    }

    /// Whether a waiting client was answered.
    async fn answer_one(
        &mut self,
        listener: &TcpListener,
        metrics: &crate::metrics::Metrics,
    ) -> bool {
        // A spare lost to a full table (`refill` after an accept that took the last
        // descriptor) is sought again here, or this limit episode would never answer anyone.
        self.refill();
        if self.0.take().is_none() {
            return false;
        }
        // The connection that could not be accepted is waiting: this returns at once.
        let answered =
            match tokio::time::timeout(Duration::from_millis(100), listener.accept()).await {
                Ok(Ok((stream, peer))) => {
                    busy(stream, peer, Reason::FdLimit, metrics).await;
                    true
                }
                _ => false,
            };
        self.refill();
        answered
    }
}

/// A 503 at a cap, with its decision line (one per refused connection: nothing of the
/// request is read, so the line has the client and the reason).
async fn busy(
    mut stream: TcpStream,
    peer: SocketAddr,
    reason: Reason,
    metrics: &crate::metrics::Metrics,
) {
    metrics.connection_refused(&reason);
    let refusal = Refusal::new(reason, "");
    Trace {
        client: Some(peer),
        ..Trace::default()
    }
    .deny(&refusal);
    // Not waiting for the client: the descriptor limit's answer runs in the accept loop.
    scrape::raw_answer::send(&mut stream, &refusal.to_bytes(), Duration::ZERO).await;
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    proxy: Arc<NetProxy>,
    limits: Limits,
    hold: ConnectionHold,
) {
    let (rd, wr) = stream.into_split();
    let shared = Arc::new(crate::proxy::Connection::default());
    let verdicts = Verdicts::default();
    let head_limits = HeadLimits {
        max_bytes: limits.max_header_bytes,
        max_headers: limits.max_headers,
        timeout: limits.header_timeout,
        upgrades: false,
    };
    let reader = ClientRead::new(Scanner::new(rd, verdicts.clone(), head_limits));
    let wr = scrape::WriteTimeout::new(wr, limits.write_timeout)
        .flagging(shared.write_timed_out.clone());
    let io: ClientIo = TokioIo::new(tokio::io::join(reader, wr));
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let abort = shared.clone();
    let svc = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        let nth = served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        req.extensions_mut().insert(hold.clone());
        req.extensions_mut().insert(shared.clone());
        let framing = verdicts
            .get(nth)
            .map(|why| (why, verdicts.refused_line().unwrap_or_default()));
        proxy.clone().handle(peer, framing, shared.clone(), req)
    });
    let served = http1::Builder::new()
        // The scanner has judged every head hyper sees against these limits already; hyper's
        // own are only a backstop, set wider so that it never answers in its own shape.
        .max_headers(limits.max_headers.saturating_add(1))
        .max_buf_size(limits.max_header_bytes.saturating_mul(2).max(16 * 1024))
        .timer(TokioTimer::new())
        // An idle kept-alive connection is closed after this; a head that has started is the
        // scanner's to time.
        .header_read_timeout(limits.header_timeout.saturating_mul(2))
        // A client that half-closes after its request still gets the answer.
        .half_close(true)
        .serve_connection(io, svc)
        .with_upgrades();
    // An answer cut off from outside (a revocation, the request deadline: `forward::watch`)
    // drops the connection, whatever hyper is waiting on.
    tokio::select! {
        _ = served => {}
        () = abort.abort.notified() => {}
    }
}

/// A proxy on its own thread and runtime; dropping it stops the listener.
#[derive(Debug)]
pub struct Background {
    pub addr: SocketAddr,
    _run: scrape::Background,
}

impl Background {
    pub fn start(
        listen: SocketAddr,
        proxy: Arc<NetProxy>,
        limits: Limits,
    ) -> std::io::Result<Self> {
        Self::run(listen, move |listener, stop| {
            serve(listener, proxy, limits, stop)
        })
    }

    /// A relay listener (`relay::serve`) for `proxy`, on its own thread and runtime.
    pub fn relay(
        relay: crate::relay::Relay,
        proxy: Arc<NetProxy>,
        limits: Limits,
    ) -> std::io::Result<Self> {
        Self::run(relay.listen, move |listener, stop| {
            crate::relay::serve(listener, relay, proxy, limits, stop)
        })
    }

    /// `serve` on a listener bound to `listen`, until the handle is dropped.
    fn run<S, F>(listen: SocketAddr, serve: S) -> std::io::Result<Self>
    where
        S: FnOnce(TcpListener, scrape::background::Stop) -> F + Send + 'static,
        F: std::future::Future<Output = ()>,
    {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let listener = rt.block_on(TcpListener::bind(listen))?;
        let addr = listener.local_addr()?;
        let run = scrape::Background::spawn(rt, move |stop| serve(listener, stop));
        Ok(Self { addr, _run: run })
    }
}
