//! Counters and the acquire-latency histogram behind `GET /metrics` (Prometheus text format).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

const BUCKETS: [f64; 9] = [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];

#[derive(Debug, Default)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Debug, Default)]
pub struct Metrics {
    acquire: Mutex<BTreeMap<&'static str, Histogram>>,
    counters: Mutex<BTreeMap<(&'static str, String), u64>>,
    /// Counters whose labels are written whole (`a="x",b="y"`).
    labelled: Mutex<BTreeMap<(&'static str, String), u64>>,
}

impl Metrics {
    pub fn observe_acquire(&self, source: &'static str, took: Duration) {
        if let Ok(mut m) = self.acquire.lock() {
            let h = m.entry(source).or_default();
            let secs = took.as_secs_f64();
            for (i, le) in BUCKETS.iter().enumerate() {
                if secs <= *le {
                    h.buckets[i] += 1;
                }
            }
            h.count += 1;
            h.sum += secs;
        }
    }

    /// Adds one to counter `name` with label value `label` (its label name is fixed per name).
    pub fn inc(&self, name: &'static str, label: &str) {
        if let Ok(mut c) = self.counters.lock() {
            *c.entry((name, label.to_owned())).or_default() += 1;
        }
    }

    /// Adds one to counter `name` with the label set `labels`, written as is (`a="x",b="y"`).
    pub fn inc_labels(&self, name: &'static str, labels: &str) {
        if let Ok(mut c) = self.labelled.lock() {
            *c.entry((name, labels.to_owned())).or_default() += 1;
        }
    }

    /// The text exposition; `gauges` are (name, label, value) read at scrape time.
    pub fn render(&self, gauges: &[(&str, &str, u64)]) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# TYPE lifecycle_acquire_seconds histogram");
        if let Ok(m) = self.acquire.lock() {
            for (source, h) in m.iter() {
                for (i, le) in BUCKETS.iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "lifecycle_acquire_seconds_bucket{{source=\"{source}\",le=\"{le}\"}} {}",
                        h.buckets[i]
                    );
                }
                let _ = writeln!(
                    out,
                    "lifecycle_acquire_seconds_bucket{{source=\"{source}\",le=\"+Inf\"}} {}",
                    h.count
                );
                let _ = writeln!(
                    out,
                    "lifecycle_acquire_seconds_sum{{source=\"{source}\"}} {}",
                    h.sum
                );
                let _ = writeln!(
                    out,
                    "lifecycle_acquire_seconds_count{{source=\"{source}\"}} {}",
                    h.count
                );
            }
        }
        let label_name = |name: &str| match name {
            "lifecycle_destroys_total" => "result",
            "lifecycle_failures_total" => "kind",
            "lifecycle_lease_renewals_total" => "result",
            "lifecycle_leases_lapsed_total" => "result",
            _ => "kind",
        };
        if let Ok(c) = self.counters.lock() {
            let mut last = "";
            for ((name, label), v) in c.iter() {
                if *name != last {
                    let _ = writeln!(out, "# TYPE {name} counter");
                    last = name;
                }
                let _ = writeln!(out, "{name}{{{}=\"{label}\"}} {v}", label_name(name));
            }
        }
        if let Ok(c) = self.labelled.lock() {
            let mut last = "";
            for ((name, labels), v) in c.iter() {
                if *name != last {
                    let _ = writeln!(out, "# TYPE {name} counter");
                    last = name;
                }
                let _ = writeln!(out, "{name}{{{labels}}} {v}");
            }
        }
        // One TYPE line per name, then all of its series: the text format's parsers
        // (Prometheus' own, `promtool check metrics`) refuse a second TYPE line for a name.
        let mut names: Vec<&str> = Vec::new();
        for (name, _, _) in gauges {
            if !names.contains(name) {
                names.push(name);
            }
        }
        for name in names {
            let _ = writeln!(out, "# TYPE {name} gauge");
            for (_, label, v) in gauges.iter().filter(|g| g.0 == name) {
                if label.is_empty() {
                    let _ = writeln!(out, "{name} {v}");
                } else {
                    let _ = writeln!(out, "{name}{{{label}}} {v}");
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Metrics;

    #[test]
    fn every_metric_name_is_typed_once() {
        let m = Metrics::default();
        m.inc("lifecycle_destroys_total", "destroyed");
        m.inc("lifecycle_destroys_total", "failed");
        let text = m.render(&[
            ("lifecycle_pool_sandboxes", "state=\"active\"", 1),
            ("lifecycle_pool_sandboxes", "state=\"warm\"", 2),
            ("lifecycle_quarantine_records", "", 0),
            ("lifecycle_pool_sandboxes", "state=\"destroying\"", 0),
        ]);
        for name in [
            "lifecycle_pool_sandboxes",
            "lifecycle_destroys_total",
            "lifecycle_quarantine_records",
        ] {
            let typed = text
                .lines()
                .filter(|l| l.starts_with(&format!("# TYPE {name} ")))
                .count();
            assert_eq!(typed, 1, "{name} in\n{text}");
        }
        // And its series follow it together.
        let lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| *l == "# TYPE lifecycle_pool_sandboxes gauge")
            .expect("typed");
        assert_eq!(
            lines[at + 1..at + 4],
            [
                "lifecycle_pool_sandboxes{state=\"active\"} 1",
                "lifecycle_pool_sandboxes{state=\"warm\"} 2",
                "lifecycle_pool_sandboxes{state=\"destroying\"} 0",
            ],
            "{text}"
        );
    }
}
