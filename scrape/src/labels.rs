//! Label sets more than one program's metric families use (one label each, its value one of a
//! fixed set of words, never a client's string), and the one way each program registers a
//! metric.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Metric, Registry};

/// `metric` registered under `name` with `help`, and returned for recording.
pub fn registered<M: Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// A counter family with each of `labels` written at 0 from the start (an alert on
/// `increase()` then sees the first one), registered under `name`.
pub fn counters_at_zero<L>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    labels: impl IntoIterator<Item = L>,
) -> Family<L, Counter>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    let family = Family::<L, Counter>::default();
    for l in labels {
        let _ = family.get_or_create(&l);
    }
    registered(registry, name, help, family)
}

/// `kind`: what sort of failure, refusal or object.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

/// `result`: how an operation ended.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}
