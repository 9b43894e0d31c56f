//! The proxy's metric families (one registry per proxy: in the binary, one per process), the
//! operation an engine round trip is counted under, and what `--metrics-listen` answers
//! (`Exposed`, served by `scrape`). docs/metrics.md lists every family and what to alert on.
//!
//! Every label value is one of a fixed set (`Endpoint::op_label`, `Refusal::reason`, the kinds
//! below): never a name, an ID or anything else a client wrote. Counting is a hash of the
//! labels and an atomic add (a histogram takes an uncontended lock), on paths that already
//! write a log line.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use scrape::labels::{counters_at_zero, registered};
use scrape::labels::{KindLabel, ResultLabel};

tokio::task_local! {
    /// The operation of the request a task is serving, for its engine round trips.
    static OP: Cell<&'static str>;
}

/// Runs `f` with its engine round trips counted under `op` (`set_op` may name it later).
pub async fn with_op<F: Future>(op: &'static str, f: F) -> F::Output {
    OP.scope(Cell::new(op), f).await
}

/// Names the operation of the request being served, once it is known.
pub fn set_op(op: &'static str) {
    let _ = OP.try_with(|c| c.set(op));
}

/// Outside any request (no `with_op`): the proxy's own business.
fn current_op() -> &'static str {
    OP.try_with(Cell::get).unwrap_or("internal")
}

/// Engine round trips: a ping takes well under a millisecond, a create or a stop seconds.
const ENGINE_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0,
];

/// `/healthz` asks the engine itself (`GET /_ping`) when nothing else has for this long...
pub const PROBE_AFTER: Duration = Duration::from_secs(10);
/// ...giving it this long to answer...
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// ...and answers 503 when the engine's last answer is older than this.
pub const HEALTHY_WITHIN: Duration = Duration::from_secs(10);

/// `sockproxy_engine_errors_total{kind}`: the socket refused or is absent; connecting took
/// over 5 s; the request or the answer's head failed on the connection (reset, closed,
/// unreadable); an inspect or list got no whole answer within 30 s; an answer over the
/// proxy's cap; an answer's body broke off.
pub const ENGINE_ERROR_KINDS: [&str; 6] = [
    "connect",
    "connect_timeout",
    "exchange",
    "timeout",
    "answer_too_large",
    "answer_body",
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    op: &'static str,
    decision: &'static str,
    reason: &'static str,
    rule: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

type Histograms = Family<OpLabel, Histogram, fn() -> Histogram>;

fn engine_histogram() -> Histogram {
    Histogram::new(ENGINE_BUCKETS)
}

/// The families, and when the engine last answered.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    engine_seconds: Histograms,
    engine_errors: Family<KindLabel, Counter>,
    name_map: Family<ResultLabel, Counter>,
    name_map_live: Gauge,
    name_map_entries: Family<KindLabel, Gauge>,
    connections_open: Gauge,
    connections_refused: Counter,
    started: Instant,
    /// Milliseconds from `started` to the engine's last answer, plus one; 0 for never.
    engine_answered: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        scrape::process::register_standard(&mut registry, "sockproxy", env!("CARGO_PKG_VERSION"));
        let decisions = registered(
            &mut registry,
            "sockproxy_decisions",
            "Requests decided, by operation, decision (allow, deny), reason and rule (the body field or total a refusal applied)",
            Family::<DecisionLabels, Counter>::default(),
        );
        let engine_seconds = registered(
            &mut registry,
            "sockproxy_engine_request_duration_seconds",
            "Engine round trips, request to answer head, by the operation they were made for",
            Histograms::new_with_constructor(engine_histogram),
        );
        let engine_errors = counters_at_zero(
            &mut registry,
            "sockproxy_engine_errors",
            "Engine round trips that failed, by kind",
            ENGINE_ERROR_KINDS
                .into_iter()
                .map(|kind| KindLabel { kind }),
        );
        let name_map = counters_at_zero(
            &mut registry,
            "sockproxy_name_map_lookups",
            "Name map lookups (hit: no inspect needed; miss: the proxy inspected)",
            ["hit", "miss"]
                .into_iter()
                .map(|result| ResultLabel { result }),
        );
        let name_map_live = registered(
            &mut registry,
            "sockproxy_name_map_live",
            "1 while the engine event subscription keeping the name map coherent is up",
            Gauge::default(),
        );
        let name_map_entries = registered(
            &mut registry,
            "sockproxy_name_map_entries",
            "Objects the name map holds, by kind",
            Family::<KindLabel, Gauge>::default(),
        );
        let connections_open = registered(
            &mut registry,
            "sockproxy_connections_open",
            "Client connections being served",
            Gauge::default(),
        );
        let connections_refused = registered(
            &mut registry,
            "sockproxy_connections_refused",
            "Client connections answered 503 at --max-connections",
            Counter::default(),
        );
        Self {
            registry,
            decisions,
            engine_seconds,
            engine_errors,
            name_map,
            name_map_live,
            name_map_entries,
            connections_open,
            connections_refused,
            started: Instant::now(),
            engine_answered: AtomicU64::new(0),
        }
    }
}

/// A client connection counted open until it is dropped.
#[derive(Debug)]
pub struct Open(Gauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// One decision (the decision line's `op`, as `Endpoint::op_label` names it).
    pub fn decision(
        &self,
        op: &'static str,
        decision: &'static str,
        reason: &'static str,
        rule: &'static str,
    ) {
        self.decisions
            .get_or_create(&DecisionLabels {
                op,
                decision,
                reason,
                rule,
            })
            .inc();
    }

    /// An engine round trip that began at `started`: its latency and the engine's liveness
    /// when it answered (`failed` is `None`), its kind when it failed.
    pub fn engine(&self, started: Instant, failed: Option<Option<&'static str>>) {
        match failed {
            None => {
                self.engine_seconds
                    .get_or_create(&OpLabel { op: current_op() })
                    .observe(started.elapsed().as_secs_f64());
                self.engine_answered_now();
            }
            Some(kind) => self.engine_error(kind),
        }
    }

    /// An engine failure of `kind` (one of `ENGINE_ERROR_KINDS`, from
    /// `UpstreamError::engine_kind`; `None`: not the engine's, counted nowhere here).
    pub fn engine_error(&self, kind: Option<&'static str>) {
        if let Some(kind) = kind {
            self.engine_errors.get_or_create(&KindLabel { kind }).inc();
        }
    }

    fn engine_answered_now(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.engine_answered.store(ms + 1, Ordering::Relaxed);
    }

    /// How long ago the engine last answered anything; `None` if it never has.
    pub fn engine_answered_ago(&self) -> Option<Duration> {
        match self.engine_answered.load(Ordering::Relaxed) {
            0 => None,
            at => Some(
                self.started
                    .elapsed()
                    .saturating_sub(Duration::from_millis(at - 1)),
            ),
        }
    }

    /// A name map lookup while the map is kept (`--no-name-cache` counts none).
    pub fn name_lookup(&self, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        self.name_map.get_or_create(&ResultLabel { result }).inc();
    }

    pub fn connection_opened(&self) -> Open {
        self.connections_open.inc();
        Open(self.connections_open.clone())
    }

    pub fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// The text exposition, with the name map's state read now.
    /// The text exposition, with the name map's state read now: whether it is live, and the
    /// containers and networks it holds.
    pub fn render(&self, live: bool, (containers, networks): (usize, usize)) -> String {
        self.name_map_live.set(i64::from(live));
        for (kind, n) in [("container", containers), ("network", networks)] {
            self.name_map_entries
                .get_or_create(&KindLabel { kind })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        scrape::encode(&self.registry)
    }
}
