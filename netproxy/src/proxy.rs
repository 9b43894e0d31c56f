//! The forward proxy: one pipeline for `CONNECT host:port` and absolute-form `http://`
//! requests — parse strictly, canonicalize once, decide on the name (a denied name is never
//! looked up), resolve with a timeout, vet every answer (`Policy::vet`), write the decision
//! line, dial the vetted addresses (`dial`, Happy Eyeballs) — then hand over to `tunnel` or
//! `forward`. Refusals are `refusal::Refusal`s; the audit lines are `audit`'s.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::addr::AddrRefusal;
use crate::audit::{Exchange, Trace};
use crate::forward::{forward, Guard, Timeouts};
use crate::framing::{self, HeadRefusal};
use crate::own::Interfaces;
pub use crate::policy::Policy;
use crate::refusal::{full, Reason};
pub use crate::refusal::{Body, Refusal, ERROR_HEADER};
use crate::rejudge::{Changes, Vetted};
use crate::resolve::Resolve;
use crate::rules::NameDecision;
use crate::target::{self, Host, Target};

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

#[derive(Debug)]
pub struct NetProxy {
    /// Changed only through `set_policy`, which also tells the open tunnels.
    pub policy: std::sync::RwLock<Arc<Policy>>,
    /// Bumped by every `set_policy`: each open tunnel judges itself again on the new policy.
    pub policy_changes: tokio::sync::watch::Sender<u64>,
    /// The network epoch (`own::Interfaces::epoch`) as last announced: each open tunnel judges
    /// itself again when it moves (`rejudge`).
    pub network_changes: tokio::sync::watch::Sender<u64>,
    /// `watch` has started the task that moves `network_changes`.
    pub watching: std::sync::atomic::AtomicBool,
    pub resolver: Arc<dyn Resolve>,
    /// The sidecar's interfaces, read for every vetting (`own`).
    pub interfaces: Arc<dyn Interfaces>,
    pub dns_timeout: Duration,
    /// For the whole Happy Eyeballs race over the vetted addresses.
    pub connect_timeout: Duration,
    /// A tunnel with no bytes either way for this long is closed.
    pub tunnel_idle: Duration,
    /// Absolute-form requests' timeouts.
    pub timeouts: Timeouts,
    /// Upstream connection attempts in flight, per client and in all (`dial::Budget`).
    pub dials: Arc<crate::dial::Budget>,
    /// The metric families `--metrics-listen` serves (`metrics`); counted whether served or not.
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// Upstream connection attempts in flight, in all and per client, unless configured.
pub const DEFAULT_MAX_DIALS: usize = 256;
pub const DEFAULT_MAX_DIALS_PER_CLIENT: usize = 8;

/// Refusals one client connection may have before it is closed (`NetProxy::handle`).
pub const REFUSALS_PER_CONNECTION: usize = 8;

pub use crate::connection::Connection;

fn bad(reason: Reason) -> Refusal {
    Refusal::new(reason, "")
}

impl NetProxy {
    /// A proxy with the default timeouts (DNS 5 s, connect 10 s, tunnel idle 300 s, and
    /// `Timeouts::default()`) that reads this namespace's interfaces as its own networks.
    pub fn new(policy: Policy, resolver: Arc<dyn Resolve>) -> Self {
        Self {
            policy: std::sync::RwLock::new(Arc::new(policy)),
            policy_changes: tokio::sync::watch::Sender::new(0),
            network_changes: tokio::sync::watch::Sender::new(0),
            watching: std::sync::atomic::AtomicBool::new(false),
            resolver,
            interfaces: Arc::new(crate::own::Watched::new()),
            dns_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            tunnel_idle: Duration::from_secs(300),
            timeouts: Timeouts::default(),
            dials: Arc::new(crate::dial::Budget::new(
                DEFAULT_MAX_DIALS,
                DEFAULT_MAX_DIALS_PER_CLIENT,
            )),
            metrics: Arc::default(),
        }
    }

    /// Puts a new policy in place; every open tunnel and every answer still streaming that it
    /// no longer allows is closed, and a request between its decision and its first byte is
    /// judged again (`process`). Each later request on a kept-alive connection is decided on
    /// its own.
    pub fn set_policy(&self, p: Policy) {
        match self.policy.write() {
            Ok(mut current) => *current = Arc::new(p),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(p),
        }
        self.policy_changes.send_modify(|g| *g = g.wrapping_add(1));
    }

    pub fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .map(|p| p.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// `framing`: why this request's head, as the client sent it, was refused (from
    /// `framing::Verdicts`), with what could be read of its request line, if it was; the
    /// request is then a stand-in and only answered.
    /// `conn`: what the connection's requests share (its refusal count).
    pub async fn handle(
        self: Arc<Self>,
        client: SocketAddr,
        framing: Option<(HeadRefusal, framing::RequestLine)>,
        conn: Arc<Connection>,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, Infallible> {
        let connect = req.method() == Method::CONNECT;
        let mut trace = Trace {
            client: Some(client),
            method: req.method().to_string(),
            ..Trace::default()
        };
        let result = match framing {
            // Ambiguous, malformed, too large or too slow: never parsed by hyper. The request
            // is a stand-in: the line shows what the client's own head said, as far as it
            // could be read.
            Some((why, line)) => {
                trace.method = line.method;
                trace.raw_host = line.target;
                Err(bad(Reason::Head(why)))
            }
            None => self.clone().process(req, &mut trace).await,
        };
        self.metrics
            .request(connect, result.as_ref().err().map(|r| &r.reason));
        Ok(match result {
            Ok(resp) => resp,
            Err(r) => {
                trace.deny(&r);
                let mut resp = r.response();
                let refusals = conn.refusals.fetch_add(1, Ordering::Relaxed) + 1;
                // A kept-alive connection survives a few refusals (a client may ask for several
                // names), but not a flood: at the budget it is closed with one summary line, so
                // pipelined refusals write a bounded number of lines. A refused CONNECT always
                // closes: the client may already be sending tunnel bytes, which must never be
                // read as the next request.
                if connect || refusals >= REFUSALS_PER_CONNECTION {
                    resp.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                if refusals == REFUSALS_PER_CONNECTION && !connect {
                    tracing::info!(
                        client = %client,
                        refusals,
                        "connection closed: too many refusals on it"
                    );
                }
                resp
            }
        })
    }

    async fn process(
        self: Arc<Self>,
        mut req: Request<Incoming>,
        trace: &mut Trace,
    ) -> Result<Response<Body>, Refusal> {
        if req.version() != http::Version::HTTP_11 && req.version() != http::Version::HTTP_10 {
            return Err(bad(Reason::Version));
        }
        let hosts: Vec<&HeaderValue> = req.headers().get_all(header::HOST).iter().collect();
        if hosts.len() > 1 {
            return Err(bad(Reason::DuplicateHost));
        }
        let host_header = hosts
            .first()
            .map(|v| v.to_str().unwrap_or("\u{0}").to_owned());
        // Subscribed before the policy is read for the decision: a reload from here on is
        // seen by the lookup's re-decision, the post-dial recheck and the relay's watch.
        let mut changes = self.changes();
        if req.method() == Method::CONNECT {
            let raw = req
                .uri()
                .authority()
                .map(|a| a.as_str().to_owned())
                .unwrap_or_default();
            trace.raw_host.clone_from(&raw);
            let t = target::parse_authority(&raw)
                .map_err(|e| Refusal::new(Reason::Target(e), raw.clone()))?;
            if let Some(h) = host_header {
                // A Host naming another host than the tunnel's is a smuggling attempt.
                let same = target::parse_authority(&h)
                    .map(|ht| ht.host == t.host)
                    .or_else(|_| target::canonical_host(&h).map(|hh| hh == t.host))
                    .unwrap_or(false);
                if !same {
                    return Err(Refusal::new(Reason::HostHeaderMismatch, t.host.to_string()));
                }
            }
            let vetted = self.vet(&t, trace, &mut changes).await?;
            let exchange = Exchange::new(trace);
            let (stream, chosen) = self.dial(&vetted, &t, &exchange).await?;
            self.recheck(&mut changes, &t, &vetted, chosen, &exchange)?;
            exchange.disarm();
            let hold = req.extensions().get::<ConnectionHold>().cloned();
            let on_upgrade = hyper::upgrade::on(&mut req);
            let who = crate::tunnel::Who {
                client: trace.client.map(|c| c.to_string()).unwrap_or_default(),
                host: t.host.to_string(),
                chosen,
            };
            let idle = self.tunnel_idle;
            let revoked = self.revoked(t, chosen, changes);
            let metrics = self.metrics.clone();
            tokio::spawn(async move {
                let open = metrics.tunnel_opened();
                let (up, down) =
                    crate::tunnel::tunnel(on_upgrade, stream, who, idle, revoked).await;
                drop(open);
                metrics.tunnel_closed(up, down);
                // The connection's share of the limits is held until the tunnel closes.
                drop(hold);
            });
            let mut resp = Response::new(full(Bytes::new()));
            *resp.status_mut() = StatusCode::OK;
            return Ok(resp);
        }
        let raw = req.uri().to_string();
        trace.raw_host = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_owned())
            .unwrap_or_default();
        let (t, path) = target::parse_absolute(&raw)
            .map_err(|e| Refusal::new(Reason::Target(e), trace.raw_host.clone()))?;
        check_framing(req.headers())
            .map_err(|why| Refusal::new(Reason::Head(why), t.host.to_string()))?;
        let vetted = self.vet(&t, trace, &mut changes).await?;
        let exchange = Arc::new(Exchange::new(trace));
        let connection = req.extensions().get::<Arc<Connection>>().cloned();
        if let Some(c) = &connection {
            exchange.cut_by_writes(c.write_timed_out.clone());
        }
        let (stream, chosen) = self.dial(&vetted, &t, &exchange).await?;
        self.recheck(&mut changes, &t, &vetted, chosen, &exchange)?;
        let guard = Guard {
            revoked: self.revoked(t.clone(), chosen, changes),
            connection,
        };
        forward(
            req,
            stream,
            &t,
            &path,
            self.timeouts,
            exchange.clone(),
            guard,
        )
        .await
        .inspect_err(|r| {
            exchange.status(r.status());
            exchange.end(r.reason.text());
        })
    }

    /// Decides on the name, resolves it, vets every answer; writes the decision line. The
    /// addresses that may be dialed.
    /// A reload during the lookup (`changes` moved) decides the name again on the new policy
    /// and vets the answers on it: the decision line is the policy in place when it is written.
    async fn vet(
        &self,
        t: &Target,
        trace: &mut Trace,
        changes: &mut Changes,
    ) -> Result<Vetted, Refusal> {
        let mut policy = self.policy();
        let shown = t.host.to_string();
        trace.host.clone_from(&shown);
        trace.port = t.port;
        decide(&policy, t, trace)?;
        let answers = match &t.host {
            Host::Ip(ip) => vec![*ip],
            Host::Name(name) => {
                use crate::metrics::Lookup;
                let started = std::time::Instant::now();
                let looked =
                    tokio::time::timeout(self.dns_timeout, self.resolver.lookup(name)).await;
                let (how, answer) = match looked {
                    Err(_) => (Lookup::Timeout, Err(Reason::DnsTimeout)),
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                        (Lookup::NoAddresses, Err(Reason::DnsFailure))
                    }
                    Ok(Err(_)) => (Lookup::Failed, Err(Reason::DnsFailure)),
                    Ok(Ok(a)) if a.is_empty() => (Lookup::NoAddresses, Err(Reason::DnsNoAnswer)),
                    Ok(Ok(a)) => (Lookup::Answered, Ok(a)),
                };
                self.metrics.lookup(started, how);
                answer.map_err(|r| Refusal::new(r, shown.clone()))?
            }
        };
        trace.resolved.clone_from(&answers);
        if changes.policy.has_changed().unwrap_or(false) {
            changes.policy.borrow_and_update();
            policy = self.policy();
            decide(&policy, t, trace)?;
        }
        // Own networks are read now, not at start: an interface added since is refused too.
        // The epoch first: a change announced from here on is one since this vetting.
        let epoch = self.interfaces.epoch();
        let own = self
            .interfaces
            .networks()
            .map_err(|_| Refusal::new(Reason::OwnNetworksUnknown, shown.clone()))?;
        let vetted = policy.vet(&own, &answers, t.port).map_err(|why| {
            if why == AddrRefusal::DeniedByRule {
                // The decision line names the deny rule that refused an answer.
                trace.rule = answers
                    .iter()
                    .find_map(|ip| policy.denial(*ip, t.port))
                    .map(|r| r.text.clone());
            }
            Refusal::new(Reason::Address(why), shown)
        })?;
        trace.allow();
        Ok(Vetted {
            addrs: vetted
                .into_iter()
                .map(|ip| SocketAddr::new(ip, t.port))
                .collect(),
            epoch,
        })
    }
}

/// The name decision on `policy`, its rule recorded in `trace`.
fn decide(policy: &Policy, t: &Target, trace: &mut Trace) -> Result<(), Refusal> {
    match policy.decide_name(t) {
        NameDecision::Deny { reason, rule } => {
            trace.rule = rule;
            Err(Refusal::new(Reason::Name(reason), t.host.to_string()))
        }
        NameDecision::Allow { rule } => {
            trace.rule = Some(rule);
            Ok(())
        }
    }
}

/// Content-Length together with Transfer-Encoding, or two Content-Lengths, can be read two
/// ways by two parsers: refused. (`framing` refuses them before hyper already; this is the
/// same rule on what hyper made of the head, in case the two ever disagree.)
fn check_framing(h: &HeaderMap) -> Result<(), HeadRefusal> {
    let cl = h.get_all(header::CONTENT_LENGTH).iter().count();
    if cl > 1 {
        return Err(framing::DUPLICATE_CL);
    }
    if cl == 1 && h.contains_key(header::TRANSFER_ENCODING) {
        return Err(framing::CL_WITH_TE);
    }
    Ok(())
}
