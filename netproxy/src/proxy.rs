//! The forward proxy: one pipeline for `CONNECT host:port` and absolute-form `http://`
//! requests — parse strictly, canonicalize once, decide on the name (a denied name is never
//! looked up), resolve with a timeout, refuse if any answer is special-purpose, dial exactly the
//! vetted address — and one JSON log line per decision.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::framing::HeadRefusal;
use crate::idle::{Clock, Tracked};
use crate::own::Interfaces;
pub use crate::policy::Policy;
use crate::resolve::Resolve;
use crate::rules::NameDecision;
use crate::target::{self, Host, Target};

pub type Body = BoxBody<Bytes, hyper::Error>;

/// What a connection holds of the limits (its global permit, its client's share). The server
/// puts it on every request; a tunnel keeps it for as long as it runs, since hyper lets go of
/// the connection as soon as it is upgraded.
#[derive(Clone)]
pub struct ConnectionHold(pub Arc<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for ConnectionHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnectionHold")
    }
}

/// The header every refusal carries (and that is stripped from upstream answers).
pub const ERROR_HEADER: &str = "x-netproxy-error";

#[derive(Debug)]
pub struct NetProxy {
    pub policy: std::sync::RwLock<Arc<Policy>>,
    pub resolver: Arc<dyn Resolve>,
    /// The sidecar's interfaces, read for every vetting (`own`).
    pub interfaces: Arc<dyn Interfaces>,
    pub dns_timeout: Duration,
    pub connect_timeout: Duration,
    /// A tunnel with no bytes either way for this long is closed.
    pub tunnel_idle: Duration,
}

/// Why a request was not carried, and how it is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub reason: String,
    pub host: String,
}

impl Refusal {
    fn new(status: StatusCode, reason: impl Into<String>, host: impl Into<String>) -> Self {
        Self {
            status,
            reason: reason.into(),
            host: host.into(),
        }
    }

    pub fn response(&self) -> Response<Body> {
        let error = match self.status {
            StatusCode::FORBIDDEN => "forbidden",
            StatusCode::BAD_REQUEST
            | StatusCode::REQUEST_TIMEOUT
            | StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "bad_request",
            StatusCode::GATEWAY_TIMEOUT => "upstream_timeout",
            StatusCode::SERVICE_UNAVAILABLE => "busy",
            _ => "upstream_unavailable",
        };
        let body = serde_json::json!({ "error": error, "reason": self.reason, "host": self.host });
        let mut resp = Response::new(full(body.to_string()));
        *resp.status_mut() = self.status;
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Ok(v) = HeaderValue::from_str(&self.reason) {
            h.insert(ERROR_HEADER, v);
        }
        if matches!(
            self.status,
            StatusCode::BAD_REQUEST
                | StatusCode::REQUEST_TIMEOUT
                | StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        ) {
            // After a malformed request the rest of the stream cannot be trusted.
            h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

fn bad(reason: impl Into<String>, host: &str) -> Refusal {
    Refusal::new(StatusCode::BAD_REQUEST, reason, host)
}

/// What the pipeline decided, for the log line.
#[derive(Debug, Default)]
struct Trace {
    raw_host: String,
    host: String,
    port: u16,
    rule: Option<String>,
    resolved: Vec<IpAddr>,
    chosen: Option<SocketAddr>,
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
    "proxy-authorization",
];

impl NetProxy {
    /// A proxy with the default timeouts (DNS 5 s, connect 10 s, tunnel idle 300 s) that reads
    /// this namespace's interfaces as its own networks.
    pub fn new(policy: Policy, resolver: Arc<dyn Resolve>) -> Self {
        Self {
            policy: std::sync::RwLock::new(Arc::new(policy)),
            resolver,
            interfaces: Arc::new(crate::own::System),
            dns_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            tunnel_idle: Duration::from_secs(300),
        }
    }

    pub fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .map(|p| p.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// `framing`: why this request's head, as the client sent it, was refused (from
    /// `framing::Verdicts`), if it was; the request is then a stand-in and only answered.
    pub async fn handle(
        self: Arc<Self>,
        client: SocketAddr,
        framing: Option<HeadRefusal>,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, Infallible> {
        let start = Instant::now();
        let mut trace = Trace::default();
        let method = req.method().clone();
        let result = match framing {
            // Ambiguous, malformed, too large or too slow: never parsed by hyper.
            Some(why) => Err(Refusal::new(why.status, why.reason, "")),
            None => self.process(req, &mut trace).await,
        };
        let (decision, reason, status) = match &result {
            Ok((resp, _)) => ("allow", "allowed".to_owned(), resp.status()),
            Err(r) => ("deny", r.reason.clone(), r.status),
        };
        tracing::info!(
            client = %client,
            method = %method,
            raw_host = %trace.raw_host,
            host = %trace.host,
            port = trace.port,
            rule = trace.rule.as_deref().unwrap_or(""),
            resolved = ?trace.resolved,
            chosen = %trace.chosen.map(|a| a.to_string()).unwrap_or_default(),
            decision,
            reason = %reason,
            status = status.as_u16(),
            duration_ms = start.elapsed().as_secs_f64() * 1000.0,
            "decision"
        );
        Ok(match result {
            Ok((resp, _)) => resp,
            Err(r) => {
                let mut resp = r.response();
                if method == Method::CONNECT {
                    // The client may already be sending tunnel bytes; they must never be read
                    // as the next request.
                    resp.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                resp
            }
        })
    }

    async fn process(
        &self,
        mut req: Request<Incoming>,
        trace: &mut Trace,
    ) -> Result<(Response<Body>, ()), Refusal> {
        if req.version() != http::Version::HTTP_11 && req.version() != http::Version::HTTP_10 {
            return Err(bad("only HTTP/1.1 is spoken here", ""));
        }
        let hosts: Vec<&HeaderValue> = req.headers().get_all(header::HOST).iter().collect();
        if hosts.len() > 1 {
            return Err(bad("duplicate Host header", ""));
        }
        let host_header = hosts
            .first()
            .map(|v| v.to_str().unwrap_or("\u{0}").to_owned());
        if req.method() == Method::CONNECT {
            let raw = req
                .uri()
                .authority()
                .map(|a| a.as_str().to_owned())
                .unwrap_or_default();
            trace.raw_host = raw.clone();
            let t = target::parse_authority(&raw).map_err(|e| bad(e.to_string(), &raw))?;
            if let Some(h) = host_header {
                // A Host naming another host than the tunnel's is a smuggling attempt.
                let same = target::parse_authority(&h)
                    .map(|ht| ht.host == t.host)
                    .or_else(|_| target::canonical_host(&h).map(|hh| hh == t.host))
                    .unwrap_or(false);
                if !same {
                    return Err(Refusal::new(
                        StatusCode::FORBIDDEN,
                        "host_header_mismatch",
                        t.host.to_string(),
                    ));
                }
            }
            let stream = self.vet_and_dial(&t, trace).await?;
            let hold = req.extensions().get::<ConnectionHold>().cloned();
            let on_upgrade = hyper::upgrade::on(&mut req);
            let (idle, host) = (self.tunnel_idle, t.host.to_string());
            tokio::spawn(async move {
                tunnel(on_upgrade, stream, host, idle).await;
                // The connection's share of the limits is held until the tunnel closes.
                drop(hold);
            });
            let mut resp = Response::new(full(Bytes::new()));
            *resp.status_mut() = StatusCode::OK;
            return Ok((resp, ()));
        }
        let raw = req.uri().to_string();
        trace.raw_host = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_owned())
            .unwrap_or_default();
        let (t, path) =
            target::parse_absolute(&raw).map_err(|e| bad(e.to_string(), &trace.raw_host))?;
        check_framing(req.headers()).map_err(|why| bad(why, &t.host.to_string()))?;
        let stream = self.vet_and_dial(&t, trace).await?;
        forward(req, stream, &t, &path).await.map(|r| (r, ()))
    }

    /// Decide on the name, resolve, vet every answer, dial the chosen one.
    async fn vet_and_dial(&self, t: &Target, trace: &mut Trace) -> Result<TcpStream, Refusal> {
        let policy = self.policy();
        let shown = t.host.to_string();
        trace.host = shown.clone();
        trace.port = t.port;
        match policy.decide_name(t) {
            NameDecision::Deny { reason, rule } => {
                trace.rule = rule;
                return Err(Refusal::new(StatusCode::FORBIDDEN, reason, shown));
            }
            NameDecision::Allow { rule } => trace.rule = Some(rule),
        }
        let answers = match &t.host {
            Host::Ip(ip) => vec![*ip],
            Host::Name(name) => {
                match tokio::time::timeout(self.dns_timeout, self.resolver.lookup(name)).await {
                    Err(_) => {
                        return Err(Refusal::new(
                            StatusCode::GATEWAY_TIMEOUT,
                            "dns_timeout",
                            shown,
                        ))
                    }
                    Ok(Err(_)) => {
                        return Err(Refusal::new(StatusCode::BAD_GATEWAY, "dns_failure", shown))
                    }
                    Ok(Ok(a)) if a.is_empty() => {
                        return Err(Refusal::new(
                            StatusCode::BAD_GATEWAY,
                            "dns_no_answer",
                            shown,
                        ))
                    }
                    Ok(Ok(a)) => a,
                }
            }
        };
        trace.resolved = answers.clone();
        // Own networks are read now, not at start: an interface added since is refused too.
        let vetted = policy
            .vet(&self.interfaces.networks(), &answers)
            .map_err(|why| Refusal::new(StatusCode::FORBIDDEN, why.reason(), shown.clone()))?;
        let chosen = SocketAddr::new(vetted[0], t.port);
        trace.chosen = Some(chosen);
        match tokio::time::timeout(self.connect_timeout, TcpStream::connect(chosen)).await {
            Err(_) => Err(Refusal::new(
                StatusCode::GATEWAY_TIMEOUT,
                "connect_timeout",
                shown,
            )),
            Ok(Err(_)) => Err(Refusal::new(
                StatusCode::BAD_GATEWAY,
                "connect_failed",
                shown,
            )),
            Ok(Ok(s)) => Ok(s),
        }
    }
}

/// Content-Length together with Transfer-Encoding, or two Content-Lengths, can be read two
/// ways by two parsers: refused.
fn check_framing(h: &HeaderMap) -> Result<(), &'static str> {
    let cl = h.get_all(header::CONTENT_LENGTH).iter().count();
    if cl > 1 {
        return Err("duplicate Content-Length");
    }
    if cl == 1 && h.contains_key(header::TRANSFER_ENCODING) {
        return Err("Content-Length with Transfer-Encoding");
    }
    Ok(())
}

/// Per direction. tokio's default (8 KiB) costs a read and a write per 8 KiB; 64 KiB is what
/// loopback and most sockets deliver in one read under load (docs/benchmarks.md, part 4).
const TUNNEL_BUFFER: usize = 64 * 1024;

/// Carries a tunnel until both directions end, an error, or `idle` without a byte either way;
/// then logs one `tunnel closed` line. On Linux the client's socket is taken back out of hyper
/// and the bytes are spliced (`splice`); if that cannot be done (the upgraded connection is not
/// ours, or no pipes can be made) they are copied through 64 KiB buffers.
async fn tunnel(
    on_upgrade: hyper::upgrade::OnUpgrade,
    upstream: TcpStream,
    host: String,
    idle: Duration,
) {
    let start = Instant::now();
    let Ok(upgraded) = on_upgrade.await else {
        return;
    };
    let clock = Clock::new();
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let upgraded = match spliced(upgraded, &upstream, &clock, idle).await {
        Ok((up, down, ended)) => {
            tracing::info!(host = %host, bytes_up = up, bytes_down = down, ended, relay = "splice", duration_ms = start.elapsed().as_secs_f64() * 1000.0, "tunnel closed");
            return;
        }
        Err(upgraded) => upgraded,
    };
    let mut client = Tracked::new(TokioIo::new(upgraded), clock.clone());
    let mut upstream = Tracked::new(upstream, clock.clone());
    let (up, down, ended) = tokio::select! {
        r = tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, TUNNEL_BUFFER, TUNNEL_BUFFER) => {
            match r {
                Ok((u, d)) => (u, d, "closed"),
                Err(e) => {
                    tracing::debug!(error = %e, "tunnel copy failed");
                    (0, 0, "error")
                }
            }
        }
        () = clock.expired(idle) => (0, 0, "idle_timeout"),
    };
    tracing::info!(host = %host, bytes_up = up, bytes_down = down, ended, relay = "copy", duration_ms = start.elapsed().as_secs_f64() * 1000.0, "tunnel closed");
}

/// The spliced tunnel: `(bytes_up, bytes_down, ended)` once it is over, or the upgraded
/// connection back, whole, when it cannot be spliced. The counts are what was delivered, also
/// when the idle timer or an error ended it.
#[cfg(any(target_os = "linux", target_os = "android"))]
async fn spliced(
    upgraded: hyper::upgrade::Upgraded,
    upstream: &TcpStream,
    clock: &Clock,
    idle: Duration,
) -> Result<(u64, u64, &'static str), hyper::upgrade::Upgraded> {
    use std::sync::atomic::Ordering;
    // Pipes first: if they cannot be made, the connection is still whole for copying.
    let Ok(mut pipes) = crate::splice::Pipes::new() else {
        return Err(upgraded);
    };
    let Some((client, pending)) = crate::server::client_socket(upgraded)? else {
        return Ok((0, 0, "error"));
    };
    let moved = crate::splice::Moved::default();
    let ended = tokio::select! {
        r = crate::splice::relay(client.stream(), &pending, upstream, &mut pipes, clock, &moved) => match r {
            Ok(()) => "closed",
            Err(e) => {
                tracing::debug!(error = %e, "tunnel relay failed");
                "error"
            }
        },
        () = clock.expired(idle) => "idle_timeout",
    };
    Ok((
        moved.up.load(Ordering::Relaxed),
        moved.down.load(Ordering::Relaxed),
        ended,
    ))
}

/// Sends an absolute-form request upstream in origin form, Host rewritten to the target,
/// hop-by-hop and `Proxy-*` headers removed; strips any `X-Netproxy-Error` from the answer.
async fn forward(
    req: Request<Incoming>,
    stream: TcpStream,
    t: &Target,
    path: &str,
) -> Result<Response<Body>, Refusal> {
    let shown = t.host.to_string();
    let (parts, body) = req.into_parts();
    let mut out = Request::builder()
        .method(parts.method.clone())
        .uri(path)
        .body(body.boxed())
        .map_err(|e| bad(e.to_string(), &shown))?;
    let connection_listed: Vec<String> = parts
        .headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|x| x.trim().to_ascii_lowercase()))
        .collect();
    for (name, value) in &parts.headers {
        let n = name.as_str();
        if HOP_BY_HOP.contains(&n)
            || n.starts_with("proxy-")
            || n == "host"
            || connection_listed.iter().any(|c| c == n)
        {
            continue;
        }
        out.headers_mut().append(name.clone(), value.clone());
    }
    let host_value = if matches!(t.port, 80) {
        shown.clone()
    } else {
        format!("{shown}:{}", t.port)
    };
    let hv = HeaderValue::from_str(&host_value).map_err(|_| bad("host", &shown))?;
    out.headers_mut().insert(header::HOST, hv);
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream))
        .await
        .map_err(|_| Refusal::new(StatusCode::BAD_GATEWAY, "upstream_handshake", shown.clone()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let resp = sender
        .send_request(out)
        .await
        .map_err(|_| Refusal::new(StatusCode::BAD_GATEWAY, "upstream_failed", shown.clone()))?;
    let (mut rparts, rbody) = resp.into_parts();
    rparts.headers.remove(ERROR_HEADER);
    for h in HOP_BY_HOP {
        rparts.headers.remove(h);
    }
    Ok(Response::from_parts(rparts, rbody.boxed()))
}
