//! The listening side: TCP accept loop with a global connection cap (over it: 503 with
//! `Retry-After`), header size and header-read-time limits, and an in-process background handle
//! for tests.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::framing::{Scanner, Verdicts};
use crate::proxy::{ConnectionHold, NetProxy};

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub max_per_client: usize,
    pub max_headers: usize,
    pub tunnel_idle: Duration,
    /// hyper's read buffer, which bounds the request head (at least 8192).
    pub max_header_bytes: usize,
    pub header_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_per_client: 64,
            max_headers: 100,
            tunnel_idle: Duration::from_secs(300),
            max_header_bytes: 16 * 1024,
            header_timeout: Duration::from_secs(10),
        }
    }
}

pub async fn serve(
    listener: TcpListener,
    proxy: Arc<NetProxy>,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let per_client: Arc<Mutex<HashMap<IpAddr, usize>>> = Arc::default();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let Some(slot) = ClientSlot::take(&per_client, peer.ip(), limits.max_per_client) else {
                    tokio::spawn(busy(stream, "client_connection_limit"));
                    continue;
                };
                match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let proxy = proxy.clone();
                        let hold = ConnectionHold(Arc::new((permit, slot)));
                        tokio::spawn(connection(stream, peer, proxy, limits, hold));
                    }
                    Err(_) => {
                        tokio::spawn(busy(stream, "connection_limit"));
                    }
                }
            }
        }
    }
}

/// One client's share of the connections; released when dropped.
struct ClientSlot {
    map: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl ClientSlot {
    fn take(map: &Arc<Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr, max: usize) -> Option<Self> {
        let mut m = map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = m.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Self {
            map: map.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut m = self
            .map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

async fn busy(mut stream: TcpStream, reason: &'static str) {
    let body = format!(r#"{{"error":"busy","reason":"{reason}","host":""}}"#);
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nX-Netproxy-Error: {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Reads the first request head before hyper does, so a head that is too large or too slow is
/// answered in the proxy's own shape. (Framing is judged for every request by `framing`.)
async fn first_head(
    stream: &mut TcpStream,
    limits: Limits,
) -> Option<Result<Vec<u8>, &'static str>> {
    let mut buf = Vec::with_capacity(1024);
    let read = async {
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                return Some(if end > limits.max_header_bytes {
                    Err(TOO_LARGE)
                } else {
                    Ok(())
                });
            }
            if buf.len() > limits.max_header_bytes {
                return Some(Err(TOO_LARGE));
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    };
    match tokio::time::timeout(limits.header_timeout, read).await {
        Err(_) => Some(Err("request head too slow")),
        Ok(None) => None,
        Ok(Some(Err(why))) => Some(Err(why)),
        Ok(Some(Ok(()))) => Some(Ok(buf)),
    }
}

const TOO_LARGE: &str = "request head too large";

async fn reject(mut stream: TcpStream, reason: &str) {
    let body = format!(r#"{{"error":"bad_request","reason":"{reason}","host":""}}"#);
    let status = if reason == TOO_LARGE {
        "431 Request Header Fields Too Large"
    } else {
        "400 Bad Request"
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nX-Netproxy-Error: {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
    // Closing with unread input makes the kernel reset the connection, which can destroy the
    // answer in flight: read (bounded) what the client is still sending first.
    let drain = async {
        let mut sink = [0u8; 8192];
        let mut left: usize = 1 << 20;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

/// Exactly what hyper serves a client connection on (see `connection`): the type a tunnel
/// downcasts its `Upgraded` to, to reach the client's socket.
pub(crate) type ClientIo = TokioIo<
    tokio::io::Join<
        Scanner<tokio::io::Chain<std::io::Cursor<Vec<u8>>, OwnedReadHalf>>,
        OwnedWriteHalf,
    >,
>;

/// A client's socket taken back out of hyper: the two halves of its one `TcpStream`.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[derive(Debug)]
pub(crate) struct ClientSocket {
    read: OwnedReadHalf,
    // Held, not used: dropping it would shut the socket's write side down early.
    _write: OwnedWriteHalf,
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl ClientSocket {
    pub(crate) fn stream(&self) -> &TcpStream {
        self.read.as_ref()
    }
}

/// The client's socket back out of an upgraded connection, with every byte already read from
/// it that hyper did not consume, in order: hyper's read-ahead, then what `first_head` read
/// that hyper had not read yet (in practice hyper has read all of it; taking the rest keeps the
/// order from depending on that). The connection comes back untouched when it is not a
/// `ClientIo`.
///
/// The `Scanner` is dropped here without loss: it only looks at the bytes passing through it
/// (its head buffer is a copy for judging) and after a CONNECT it stops judging anyway.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn client_socket(
    upgraded: hyper::upgrade::Upgraded,
) -> Result<(ClientSocket, Vec<u8>), hyper::upgrade::Upgraded> {
    let parts = upgraded.downcast::<ClientIo>()?;
    let (reader, write) = parts.io.into_inner().into_inner();
    let (cursor, read) = reader.into_inner().into_inner();
    let mut pending = parts.read_buf.to_vec();
    let at = usize::try_from(cursor.position()).unwrap_or(usize::MAX);
    pending.extend_from_slice(cursor.get_ref().get(at..).unwrap_or_default());
    Ok((
        ClientSocket {
            read,
            _write: write,
        },
        pending,
    ))
}

async fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    proxy: Arc<NetProxy>,
    limits: Limits,
    hold: ConnectionHold,
) {
    let prefix = match first_head(&mut stream, limits).await {
        None => return,
        Some(Err(reason)) => {
            tracing::info!(client = %peer, decision = "deny", reason, status = 400u16, "decision");
            return reject(stream, reason).await;
        }
        Some(Ok(prefix)) => prefix,
    };
    let (rd, wr) = stream.into_split();
    let verdicts = Verdicts::default();
    let reader = Scanner::new(
        std::io::Cursor::new(prefix).chain(rd),
        verdicts.clone(),
        limits.max_header_bytes,
    );
    let io: ClientIo = TokioIo::new(tokio::io::join(reader, wr));
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let svc = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        let nth = served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        req.extensions_mut().insert(hold.clone());
        proxy.clone().handle(peer, verdicts.get(nth), req)
    });
    let _ = http1::Builder::new()
        .max_headers(limits.max_headers)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(io, svc)
        .with_upgrades()
        .await;
}

/// A proxy on its own thread and runtime; dropping it stops the listener.
#[derive(Debug)]
pub struct Background {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    pub fn start(
        listen: SocketAddr,
        proxy: Arc<NetProxy>,
        limits: Limits,
    ) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let listener = rt.block_on(TcpListener::bind(listen))?;
        let addr = listener.local_addr()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let thread = std::thread::spawn(move || {
            rt.block_on(serve(listener, proxy, limits, async {
                let _ = rx.await;
            }));
            rt.shutdown_background();
        });
        Ok(Self {
            addr,
            stop: Some(tx),
            thread: Some(thread),
        })
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
