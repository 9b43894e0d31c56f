//! The sidecar's metric families (one registry per `NetProxy`: in the binary, one per process)
//! and what `--metrics-listen` answers (`Exposed`, served by `scrape`). docs/metrics.md lists
//! every family and what to alert on. Every label value is one of a fixed set
//! (`Reason::kind`, the words below): never a host, an address or a client.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use scrape::labels::ResultLabel;
use scrape::labels::{counters_at_zero, registered};

use crate::refusal::Reason;

/// Name lookups: a cached answer takes microseconds, a resolver abroad a few hundred
/// milliseconds; the default `--dns-timeout-ms` is 5 s.
const DNS_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// How a name lookup ended, for `netproxy_dns_lookups_total{result}`.
/// Every `X-Netproxy-Error` kind (`Reason::kind`), for `netproxy_refusals_total`'s series at 0.
pub const REFUSAL_KINDS: [&str; 25] = [
    "not_allowed",
    "denied_by_rule",
    "special_address",
    "proxy_network",
    "dns_timeout",
    "dns_failure",
    "dns_no_answer",
    "connect_timeout",
    "connect_failed",
    "upstream_handshake",
    "upstream_failed",
    "upstream_response_timeout",
    "request_body_timeout",
    "request_timeout",
    "connection_limit",
    "client_connection_limit",
    "fd_limit",
    "own_networks_unknown",
    "revoked",
    "host_header_mismatch",
    "bad_head",
    "bad_target",
    "bad_header",
    "duplicate_host",
    "version",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Addresses.
    Answered,
    /// The resolver answered that the name has no addresses (NXDOMAIN, no records, empty).
    NoAddresses,
    /// No answer within `--dns-timeout-ms`.
    Timeout,
    /// No answer: the resolver could not be asked, or failed.
    Failed,
}

impl Lookup {
    fn label(self) -> &'static str {
        match self {
            Self::Answered => "answered",
            Self::NoAddresses => "no_addresses",
            Self::Timeout => "timeout",
            Self::Failed => "failed",
        }
    }

    /// Whether the resolver answered at all.
    fn answered(self) -> bool {
        matches!(self, Self::Answered | Self::NoAddresses)
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    op: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    direction: &'static str,
}

/// The families, and when the resolver last answered and last failed.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    refusals: Family<ReasonLabel, Counter>,
    dns_seconds: Histogram,
    dns_lookups: Family<ResultLabel, Counter>,
    tunnels_open: Gauge,
    tunnel_bytes: Family<DirectionLabel, Counter>,
    connections_open: Gauge,
    connections_refused: Family<ReasonLabel, Counter>,
    relay_connections: Family<OutcomeLabel, Counter>,
    relay_open: Gauge,
    relay_bytes: Family<DirectionLabel, Counter>,
    started: Instant,
    /// The proxy's accept loop is running (`server::serve`): what `/healthz` answers on.
    serving: std::sync::atomic::AtomicBool,
    /// Milliseconds from `started`, plus one; 0 for never.
    dns_answered: AtomicU64,
    dns_failed: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        scrape::process::register_standard(&mut registry, "netproxy", env!("CARGO_PKG_VERSION"));
        let requests = registered(
            &mut registry,
            "netproxy_requests",
            "Requests, by op (connect, http) and outcome (carried, refused)",
            Family::default(),
        );
        // Every kind at 0 from the start, so an alert on `increase()` sees the first refusal.
        let refusals = counters_at_zero(
            &mut registry,
            "netproxy_refusals",
            "Refusals answered, by reason (the X-Netproxy-Error kinds)",
            REFUSAL_KINDS.iter().map(|&reason| ReasonLabel { reason }),
        );
        let dns_seconds = registered(
            &mut registry,
            "netproxy_dns_lookup_duration_seconds",
            "Name lookups, answered or not",
            Histogram::new(DNS_BUCKETS),
        );
        let dns_lookups = counters_at_zero(
            &mut registry,
            "netproxy_dns_lookups",
            "Name lookups, by result (answered, no_addresses, timeout, failed)",
            [
                Lookup::Answered,
                Lookup::NoAddresses,
                Lookup::Timeout,
                Lookup::Failed,
            ]
            .map(|l| ResultLabel { result: l.label() }),
        );
        let tunnels_open = registered(
            &mut registry,
            "netproxy_tunnels_open",
            "CONNECT tunnels open",
            Gauge::default(),
        );
        let tunnel_bytes = counters_at_zero(
            &mut registry,
            "netproxy_tunnel_bytes",
            "Bytes carried by tunnels, counted as each closes (up: client to upstream)",
            ["up", "down"]
                .into_iter()
                .map(|direction| DirectionLabel { direction }),
        );
        let connections_open = registered(
            &mut registry,
            "netproxy_connections_open",
            "Client connections open, tunnels included",
            Gauge::default(),
        );
        let connections_refused = counters_at_zero(
            &mut registry,
            "netproxy_connections_refused",
            "Client connections answered 503 at a cap, by reason",
            ["connection_limit", "client_connection_limit", "fd_limit"]
                .into_iter()
                .map(|reason| ReasonLabel { reason }),
        );
        let relay_connections = counters_at_zero(
            &mut registry,
            "netproxy_relay_connections",
            "Inbound connections to a --relay listener, by outcome: relayed, or why not",
            crate::relay::OUTCOMES
                .into_iter()
                .map(|outcome| OutcomeLabel { outcome }),
        );
        let relay_open = registered(
            &mut registry,
            "netproxy_relay_connections_open",
            "Relayed connections open",
            Gauge::default(),
        );
        let relay_bytes = counters_at_zero(
            &mut registry,
            "netproxy_relay_bytes",
            "Bytes relayed, counted as each relayed connection closes (up: client to target)",
            ["up", "down"]
                .into_iter()
                .map(|direction| DirectionLabel { direction }),
        );
        Self {
            registry,
            requests,
            refusals,
            dns_seconds,
            dns_lookups,
            tunnels_open,
            tunnel_bytes,
            connections_open,
            connections_refused,
            relay_connections,
            relay_open,
            relay_bytes,
            started: Instant::now(),
            serving: std::sync::atomic::AtomicBool::new(false),
            dns_answered: AtomicU64::new(0),
            dns_failed: AtomicU64::new(0),
        }
    }
}

/// Something counted open (a connection, a tunnel) until it is dropped.
#[derive(Debug)]
pub struct Open(Gauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// One request's outcome: `refused` with the refusal's reason, else carried.
    pub fn request(&self, connect: bool, refused: Option<&Reason>) {
        let op = if connect { "connect" } else { "http" };
        let outcome = if refused.is_some() {
            "refused"
        } else {
            "carried"
        };
        self.requests
            .get_or_create(&RequestLabels { op, outcome })
            .inc();
        if let Some(r) = refused {
            self.refusal(r);
        }
    }

    /// A refusal answered, a connection's at a cap included.
    pub fn refusal(&self, r: &Reason) {
        self.refusals
            .get_or_create(&ReasonLabel { reason: r.kind() })
            .inc();
    }

    /// A connection answered 503 at a cap (`reason`: which).
    pub fn connection_refused(&self, r: &Reason) {
        self.connections_refused
            .get_or_create(&ReasonLabel { reason: r.kind() })
            .inc();
        self.refusal(r);
    }

    /// A name lookup that began at `started`.
    pub fn lookup(&self, started: Instant, how: Lookup) {
        self.dns_seconds.observe(started.elapsed().as_secs_f64());
        self.dns_lookups
            .get_or_create(&ResultLabel {
                result: how.label(),
            })
            .inc();
        let at = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1;
        let when = if how.answered() {
            &self.dns_answered
        } else {
            &self.dns_failed
        };
        when.store(at, Ordering::Relaxed);
    }

    pub fn connection_opened(&self) -> Open {
        self.connections_open.inc();
        Open(self.connections_open.clone())
    }

    pub fn tunnel_opened(&self) -> Open {
        self.tunnels_open.inc();
        Open(self.tunnels_open.clone())
    }

    pub fn tunnel_closed(&self, up: u64, down: u64) {
        for (direction, n) in [("up", up), ("down", down)] {
            self.tunnel_bytes
                .get_or_create(&DirectionLabel { direction })
                .inc_by(n);
        }
    }

    fn ago(&self, at: &AtomicU64) -> Option<Duration> {
        match at.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(
                self.started
                    .elapsed()
                    .saturating_sub(Duration::from_millis(ms - 1)),
            ),
        }
    }

    /// An inbound connection to a relay listener ended up `outcome` (`relay::OUTCOMES`).
    pub fn relay_connection(&self, outcome: &'static str) {
        self.relay_connections
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    pub fn relay_opened(&self) -> Open {
        self.relay_open.inc();
        Open(self.relay_open.clone())
    }

    pub fn relay_closed(&self, up: u64, down: u64) {
        for (direction, n) in [("up", up), ("down", down)] {
            self.relay_bytes
                .get_or_create(&DirectionLabel { direction })
                .inc_by(n);
        }
    }

    /// The accept loop started (`true`) or ended (`false`).
    pub fn serving(&self, on: bool) {
        self.serving.store(on, Ordering::Relaxed);
    }

    /// 200 while the proxy serves: its accept loop runs on the runtime that answers this (a
    /// wedged runtime answers nothing). Not whether the resolver answered lately: a failed
    /// lookup of one allowed name says nothing about the process, and a health check that a
    /// sandbox can flip by asking for a name that does not resolve would have an orchestrator
    /// restart its sidecar. When the resolver last answered and last failed are in the body;
    /// alert on `netproxy_dns_lookups_total` for the resolver (docs/metrics.md).
    pub fn health(&self) -> scrape::Health {
        let serving = self.serving.load(Ordering::Relaxed);
        let answered = self.ago(&self.dns_answered);
        let failed = self.ago(&self.dns_failed);
        scrape::Health {
            ok: serving,
            body: serde_json::json!({
                "status": if serving { "ok" } else { "not_serving" },
                "resolver_answered_secs_ago": answered.map(|a| a.as_secs()),
                "resolver_failed_secs_ago": failed.map(|f| f.as_secs()),
            }),
        }
    }
}

/// What `--metrics-listen` serves for a proxy.
#[derive(Debug)]
pub struct Exposed(pub Arc<Metrics>);

impl scrape::Exposition for Exposed {
    fn metrics(&self) -> String {
        scrape::encode(&self.0.registry)
    }

    async fn health(&self) -> scrape::Health {
        self.0.health()
    }
}
