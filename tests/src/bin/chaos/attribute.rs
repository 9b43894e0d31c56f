//! Which hostile move or fault the well-behaved calls were slow beside: every span of time a
//! move ran (on any stack) or a fault's recovery window lasted, and, for each kind of span,
//! how the successful chaos-phase calls that overlapped one compare with their own call's
//! quiet median. Pure: the report writes the table and `moves.csv`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::measure::{quantile, Call, Op, Phase};

/// One stretch of time something hostile went on.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// A hostile move's name, or a fault's ("fault: ...").
    pub what: String,
    /// The stack it ran in; `None` for the whole host (the engine's restart).
    pub stack: Option<usize>,
    /// Seconds since the run's start.
    pub from: f64,
    pub to: f64,
    /// Whether only that stack's calls can be slowed by it (a fault of its own processes);
    /// a hostile move is meant to reach nobody else, so every stack's calls are set beside it.
    pub own_stack_only: bool,
}

impl Span {
    fn touches(&self, c: &Call) -> bool {
        let end = c.at + c.took.as_secs_f64();
        let stack_ok = !self.own_stack_only || self.stack.is_none_or(|s| s == c.stack);
        stack_ok && c.at < self.to && end > self.from
    }
}

/// One row: calls beside one kind of span, and their latency as a ratio to the quiet median
/// of their own call, less one (0.10 is "10% slower than quiet").
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub what: String,
    pub calls: usize,
    pub p50_change: Option<f64>,
    pub p90_change: Option<f64>,
    /// The share of them slower than their call's quiet p99 (about 0.01 with no effect).
    pub over_p99: Option<f64>,
}

/// The quiet phase's own row first (what the same figures are with nothing hostile), then
/// one row per kind of span, in the order each first appears, then the chaos calls that no
/// span touched.
pub fn rows(calls: &[Call], spans: &[Span]) -> Vec<Row> {
    let mut quiet: BTreeMap<Op, Vec<Duration>> = BTreeMap::new();
    for c in calls.iter().filter(|c| c.ok && c.phase == Phase::Quiet) {
        quiet.entry(c.op).or_default().push(c.took);
    }
    // Each call's quiet median and p99.
    let quiet: BTreeMap<Op, (f64, Duration)> = quiet
        .into_iter()
        .filter_map(|(op, mut v)| {
            v.sort();
            let m = quantile(&v, 0.5)?.as_secs_f64();
            (m > 0.0).then_some((op, (m, quantile(&v, 0.99)?)))
        })
        .collect();
    let row = |what: String, beside: &mut dyn Iterator<Item = &Call>| {
        let mut r: Vec<f64> = Vec::new();
        let mut over = 0usize;
        for c in beside {
            if let Some((m, p99)) = quiet.get(&c.op) {
                r.push(c.took.as_secs_f64() / m);
                over += usize::from(c.took > *p99);
            }
        }
        r.sort_by(f64::total_cmp);
        let less_one = |q: f64| quantile(&r, q).map(|x| x - 1.0);
        Row {
            what,
            calls: r.len(),
            p50_change: less_one(0.5),
            p90_change: less_one(0.9),
            over_p99: (!r.is_empty()).then(|| over as f64 / r.len() as f64),
        }
    };
    let chaos: Vec<&Call> = calls
        .iter()
        .filter(|c| c.ok && c.phase == Phase::Chaos)
        .collect();
    let mut out = vec![row(
        "(the quiet phase)".into(),
        &mut calls.iter().filter(|c| c.ok && c.phase == Phase::Quiet),
    )];
    let mut kinds: Vec<&str> = Vec::new();
    for s in spans {
        if !kinds.contains(&s.what.as_str()) {
            kinds.push(&s.what);
        }
    }
    for k in kinds {
        let of_kind: Vec<&Span> = spans.iter().filter(|s| s.what == k).collect();
        out.push(row(
            k.to_string(),
            &mut chaos
                .iter()
                .copied()
                .filter(|c| of_kind.iter().any(|s| s.touches(c))),
        ));
    }
    out.push(row(
        "(no move or fault)".into(),
        &mut chaos
            .iter()
            .copied()
            .filter(|c| !spans.iter().any(|s| s.touches(c))),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn call(phase: Phase, op: Op, stack: usize, at: f64, ms: u64) -> Call {
        Call {
            phase,
            op,
            stack,
            at,
            took: Duration::from_millis(ms),
            ok: true,
        }
    }

    fn span(what: &str, stack: Option<usize>, from: f64, to: f64, own: bool) -> Span {
        Span {
            what: what.into(),
            stack,
            from,
            to,
            own_stack_only: own,
        }
    }

    #[test]
    fn calls_are_set_beside_the_spans_they_overlap_as_ratios_to_their_quiet_median() {
        let calls = vec![
            call(Phase::Quiet, Op::List, 0, 0.0, 10),
            call(Phase::Quiet, Op::List, 1, 1.0, 10),
            call(Phase::Quiet, Op::Create, 0, 2.0, 500),
            // During a log flood of stack 1: both stacks' calls count.
            call(Phase::Chaos, Op::List, 0, 100.0, 20),
            call(Phase::Chaos, Op::Create, 1, 100.5, 1000),
            // A kill of stack 0's proxy: only stack 0's calls count.
            call(Phase::Chaos, Op::List, 1, 200.0, 11),
            call(Phase::Chaos, Op::List, 0, 200.0, 30),
            // Nothing running.
            call(Phase::Chaos, Op::List, 0, 300.0, 10),
        ];
        let spans = vec![
            span("log flood", Some(1), 99.0, 101.0, false),
            span("fault: kill sockproxy", Some(0), 199.0, 229.0, true),
        ];
        let rows = rows(&calls, &spans);
        let by: HashMap<&str, &Row> = rows.iter().map(|r| (r.what.as_str(), r)).collect();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].what, "(the quiet phase)");
        assert_eq!(
            (
                by["(the quiet phase)"].calls,
                by["(the quiet phase)"].p50_change
            ),
            (3, Some(0.0))
        );
        let flood = by["log flood"];
        assert_eq!(flood.calls, 2);
        assert!(
            (flood.p50_change.unwrap_or(0.0) - 1.0).abs() < 1e-6,
            "{flood:?}"
        );
        let kill = by["fault: kill sockproxy"];
        assert_eq!(kill.calls, 1);
        assert!(
            (kill.p50_change.unwrap_or(0.0) - 2.0).abs() < 1e-6,
            "{kill:?}"
        );
        // Stack 1's call during stack 0's kill was touched by nothing.
        let none = by["(no move or fault)"];
        assert_eq!(none.calls, 2);
        assert!(
            (none.p90_change.unwrap_or(0.0) - 0.1).abs() < 1e-6,
            "{none:?}"
        );
        // Over the quiet p99 (10 ms for the list, 500 ms for the create): the flood's both,
        // the kill's one, and of the untouched calls the 11 ms list only.
        assert_eq!(flood.over_p99, Some(1.0));
        assert_eq!(kill.over_p99, Some(1.0));
        assert_eq!(none.over_p99, Some(0.5));
        assert_eq!(by["(the quiet phase)"].over_p99, Some(0.0));
    }

    #[test]
    fn the_engine_restart_touches_every_stack() {
        let calls = vec![
            call(Phase::Quiet, Op::List, 0, 0.0, 10),
            call(Phase::Chaos, Op::List, 3, 50.0, 40),
        ];
        let spans = vec![span("fault: dockerd restart", None, 45.0, 75.0, true)];
        let rows = rows(&calls, &spans);
        assert_eq!(rows[1].calls, 1);
        assert_eq!(rows[2].calls, 0);
        assert_eq!(rows[2].p50_change, None);
        assert_eq!(rows[2].over_p99, None);
    }
}
