//! The metric families behind `GET /metrics` (Prometheus text format, written by
//! prometheus-client through `scrape::encode`, as both proxies' are): acquires and their
//! latency, failures, destroys, leases, the provisioner API's requests, the stack's egress
//! refusals (`egress_log`), and the pool's sizes read at scrape time. Every label value is one
//! of a fixed set (an outcome word, a route template, a status code, a refusal kind).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use scrape::labels::registered;
use scrape::labels::{KindLabel, ResultLabel};

const BUCKETS: [f64; 9] = [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabel {
    source: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabels {
    route: &'static str,
    code: u16,
}

type Histograms = Family<SourceLabel, Histogram, fn() -> Histogram>;

fn acquire_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    acquire: Histograms,
    failures: Family<KindLabel, Counter>,
    cap_refusals: Family<KindLabel, Counter>,
    destroys: Family<ResultLabel, Counter>,
    lease_renewals: Family<ResultLabel, Counter>,
    leases_lapsed: Family<ResultLabel, Counter>,
    api_requests: Family<ApiLabels, Counter>,
    connections_refused: Family<ReasonLabel, Counter>,
    egress_refusals: Family<ReasonLabel, Counter>,
    pool: Family<StateLabel, Gauge>,
    quarantined: Gauge,
    abandoned: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        scrape::process::register_standard(&mut registry, "lifecycle", env!("CARGO_PKG_VERSION"));
        let acquire = registered(
            &mut registry,
            "lifecycle_acquire_seconds",
            "Successful acquires, by where the sandbox came from",
            Histograms::new_with_constructor(acquire_histogram),
        );
        // Counters are registered without `_total`: the encoder adds it.
        // Every kind at 0 from the start, so an alert on `increase()` sees the first failure.
        let failures = scrape::labels::counters_at_zero(
            &mut registry,
            "lifecycle_failures",
            "Failed acquires, by kind",
            crate::serve::error::FAILURE_KINDS
                .iter()
                .map(|&kind| KindLabel { kind }),
        );
        let cap_refusals = registered(
            &mut registry,
            "lifecycle_cap_refusals",
            "Acquires refused at --max-replicas",
            Family::default(),
        );
        let destroys = registered(
            &mut registry,
            "lifecycle_destroys",
            "Destroys, by result",
            Family::default(),
        );
        let lease_renewals = registered(
            &mut registry,
            "lifecycle_lease_renewals",
            "Ownership renewals, by result",
            Family::default(),
        );
        let leases_lapsed = registered(
            &mut registry,
            "lifecycle_leases_lapsed",
            "Leases released for not being renewed within --lease-timeout, by result",
            Family::default(),
        );
        let abandoned = registered(
            &mut registry,
            "lifecycle_acquires_abandoned",
            "Acquires whose client left before the answer (what they got is released)",
            Counter::default(),
        );
        let api_requests = registered(
            &mut registry,
            "lifecycle_api_requests",
            "Provisioner API requests, by route template and status code",
            Family::default(),
        );
        let connections_refused = registered(
            &mut registry,
            "lifecycle_connections_refused",
            "API connections refused before any request was read, by why",
            Family::default(),
        );
        // Every reason at 0, as netproxy's own refusal counter is.
        let egress_refusals = scrape::labels::counters_at_zero(
            &mut registry,
            "lifecycle_egress_refusals",
            "Egress requests the stack's sidecars refused, read from their logs, by netproxy's reason",
            super::egress_log::reasons().map(|reason| ReasonLabel { reason }),
        );
        let pool = registered(
            &mut registry,
            "lifecycle_pool_sandboxes",
            "Sandboxes in the pool, by state",
            Family::default(),
        );
        let quarantined = registered(
            &mut registry,
            "lifecycle_quarantine_records",
            "Records in the quarantine ledger",
            Gauge::default(),
        );
        Self {
            registry,
            acquire,
            failures,
            cap_refusals,
            destroys,
            lease_renewals,
            leases_lapsed,
            api_requests,
            connections_refused,
            egress_refusals,
            pool,
            quarantined,
            abandoned,
        }
    }
}

impl Metrics {
    pub fn observe_acquire(&self, source: &'static str, took: Duration) {
        self.acquire
            .get_or_create(&SourceLabel { source })
            .observe(took.as_secs_f64());
    }

    pub fn failure(&self, kind: &'static str) {
        self.failures.get_or_create(&KindLabel { kind }).inc();
    }

    pub fn cap_refusal(&self) {
        self.cap_refusals
            .get_or_create(&KindLabel { kind: "full" })
            .inc();
    }

    pub fn destroy(&self, result: &'static str) {
        self.destroys.get_or_create(&ResultLabel { result }).inc();
    }

    pub fn lease_renewal(&self, result: &'static str) {
        self.lease_renewals
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    pub fn lease_lapsed(&self, result: &'static str) {
        self.leases_lapsed
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// An acquire whose client left before its answer (hyper dropped the request).
    pub fn acquire_abandoned(&self) {
        self.abandoned.inc();
    }

    /// One provisioner API request: its route template (never the path) and status.
    pub fn api_request(&self, route: &'static str, code: u16) {
        self.api_requests
            .get_or_create(&ApiLabels { route, code })
            .inc();
    }

    /// A connection refused unread: `max_connections` (every slot taken) or
    /// `unauthenticated_per_peer` (its peer holds as many connections without the key as it may).
    /// One refusal a sidecar of the stack logged (`egress_log`).
    pub fn egress_refusal(&self, reason: &'static str) {
        self.egress_refusals
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    pub fn connection_refused(&self, reason: &'static str) {
        self.connections_refused
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// The text exposition, with the pool's (active, warm, destroying) sizes and the ledger's
    /// record count read now.
    pub fn render(
        &self,
        (active, warm, destroying): (usize, usize, usize),
        quarantined: usize,
    ) -> String {
        let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        for (state, v) in [
            ("active", active),
            ("warm", warm),
            ("destroying", destroying),
        ] {
            self.pool.get_or_create(&StateLabel { state }).set(n(v));
        }
        self.quarantined.set(n(quarantined));
        scrape::encode(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::Metrics;

    #[test]
    fn every_metric_name_is_typed_once_and_keeps_its_name() {
        let m = Metrics::default();
        m.destroy("destroyed");
        m.destroy("failed");
        m.api_request("sandboxes", 401);
        m.observe_acquire("created", std::time::Duration::from_millis(20));
        m.acquire_abandoned();
        m.connection_refused("unauthenticated_per_peer");
        let text = m.render((1, 2, 0), 0);
        for (name, kind) in [
            ("lifecycle_pool_sandboxes", "gauge"),
            ("lifecycle_destroys_total", "counter"),
            ("lifecycle_quarantine_records", "gauge"),
            ("lifecycle_api_requests_total", "counter"),
            ("lifecycle_acquire_seconds", "histogram"),
            ("lifecycle_acquires_abandoned_total", "counter"),
            ("lifecycle_connections_refused_total", "counter"),
        ] {
            let typed: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with(&format!("# TYPE {name} ")))
                .collect();
            assert_eq!(typed, [format!("# TYPE {name} {kind}")], "{text}");
        }
        for line in [
            "lifecycle_pool_sandboxes{state=\"active\"} 1",
            "lifecycle_pool_sandboxes{state=\"warm\"} 2",
            "lifecycle_pool_sandboxes{state=\"destroying\"} 0",
            "lifecycle_quarantine_records 0",
            "lifecycle_destroys_total{result=\"failed\"} 1",
            "lifecycle_api_requests_total{route=\"sandboxes\",code=\"401\"} 1",
            "lifecycle_acquire_seconds_bucket{source=\"created\",le=\"0.05\"} 1",
            "lifecycle_acquire_seconds_count{source=\"created\"} 1",
            "lifecycle_acquires_abandoned_total 1",
            "lifecycle_connections_refused_total{reason=\"unauthenticated_per_peer\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
