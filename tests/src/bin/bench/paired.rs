//! Part 1's paired comparison: sockproxy ÷ HAProxy in each round, summarised over the rounds.
//!
//! The two proxies' loads of one round run back to back, so each round's ratio compares them
//! under the same state of the machine. On two shared cores a single round's ratio swings by
//! about ±10% (docs/benchmarks.md, issue 18's eleventh round), so a median over three rounds can
//! land on either side of a target by chance. This module turns the rounds' ratios into a geometric mean
//! with a 95% confidence interval (Student's t over the log ratios) and a verdict that says
//! "met" or "missed" only when the whole interval is on one side of the target.

use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::load::Load;

/// A geometric mean and its 95% confidence interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub mean: f64,
    pub low: f64,
    pub high: f64,
}

/// The geometric mean of `ratios` and its 95% confidence interval; `None` with fewer than two
/// ratios, or if any is not a positive finite number (a load with no answers has no ratio, and
/// dropping it would bias what is left).
pub fn interval(ratios: &[f64]) -> Option<Interval> {
    if ratios.len() < 2 || ratios.iter().any(|r| !r.is_finite() || *r <= 0.0) {
        return None;
    }
    let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
    let n = logs.len() as f64;
    let mean = logs.iter().sum::<f64>() / n;
    let var = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let t = StudentsT::new(0.0, 1.0, n - 1.0).ok()?.inverse_cdf(0.975);
    let half = t * (var / n).sqrt();
    Some(Interval {
        mean: mean.exp(),
        low: (mean - half).exp(),
        high: (mean + half).exp(),
    })
}

impl std::fmt::Display for Interval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3} [{:.3}, {:.3}]", self.mean, self.low, self.high)
    }
}

/// Which side of a target a ratio should be on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// At least the target (requests per second).
    AtLeast,
    /// At most the target (CPU per request).
    AtMost,
}

impl Want {
    /// Whether `value` is on the wanted side of `target` (or on it).
    fn holds(self, value: f64, target: f64) -> bool {
        match self {
            Want::AtLeast => value >= target,
            Want::AtMost => value <= target,
        }
    }
}

/// Whether an interval settles a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Met,
    Missed,
    /// The interval straddles the target: these rounds cannot tell.
    Undecided,
}

pub fn verdict(i: &Interval, want: Want, target: f64) -> Verdict {
    // The interval's far end decides "met", its near end "missed".
    let (far, near) = match want {
        Want::AtLeast => (i.low, i.high),
        Want::AtMost => (i.high, i.low),
    };
    let (good, bad) = (want.holds(far, target), !want.holds(near, target));
    match (good, bad) {
        (true, _) => Verdict::Met,
        (_, true) => Verdict::Missed,
        _ => Verdict::Undecided,
    }
}

/// One cell of the summary table: the rounds' ratios, how many meet `target`, and the interval
/// with its verdict.
pub fn cell(ratios: &[f64], want: Want, target: f64) -> String {
    let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    let meeting = ratios.iter().filter(|r| want.holds(**r, target)).count();
    let summary = match interval(ratios) {
        Some(i) => {
            let v = match verdict(&i, want, target) {
                Verdict::Met => "met",
                Verdict::Missed => "missed",
                Verdict::Undecided => "undecided",
            };
            format!("{i} {v}")
        }
        None => "no interval".to_owned(),
    };
    format!(
        "{} | {meeting} of {} | {summary}",
        each.join(" "),
        ratios.len()
    )
}

/// One row of the summary: `sockproxy` and `haproxy` hold the loads of the same rounds, in
/// round order.
pub fn row(label: &str, concurrency: usize, sockproxy: &[Load], haproxy: &[Load]) -> String {
    let ratio = |f: &dyn Fn(&Load) -> f64| -> Vec<f64> {
        sockproxy
            .iter()
            .zip(haproxy)
            .map(|(s, h)| f(s) / f(h))
            .collect()
    };
    let rps = ratio(&|l| l.rps);
    let cpu = ratio(&|l| l.cpu_per_req.as_secs_f64());
    let engine = ratio(&|l| l.engine_cpu_per_req.as_secs_f64());
    let engine = interval(&engine).map_or_else(|| "no interval".to_owned(), |i| i.to_string());
    format!(
        "| `{label}` | {concurrency} | {} | {} | {engine} |",
        cell(&rps, Want::AtLeast, 1.0),
        cell(&cpu, Want::AtMost, 1.0)
    )
}

/// The summary table under part 1's table.
pub fn print(rows: &[String]) {
    println!("sockproxy ÷ HAProxy round by round: each round's ratio, the rounds at or past parity with HAProxy (req/s ≥ 1.0, CPU ≤ 1.0: issue 18's targets for `/_ping` at 16 clients; a list costs sockproxy more, since it filters what HAProxy passes through), and the geometric mean with its 95% confidence interval, \"met\" or \"missed\" only when the whole interval is on one side of parity. The last column is the engine's own CPU per request behind sockproxy ÷ behind HAProxy.\n");
    println!("| request | concurrency | req/s ratio by round | rounds ≥ 1.0 | req/s ratio, mean [95% CI] | CPU ratio by round | rounds ≤ 1.0 | CPU ratio, mean [95% CI] | engine CPU ratio, mean [95% CI] |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    println!();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within 0.01% of each other (the test's t quantile is given to five digits).
    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-4 * b.abs()
    }

    #[test]
    fn equal_ratios_give_an_interval_of_no_width() {
        let i = interval(&[1.1, 1.1, 1.1]).expect("three ratios");
        assert!(
            close(i.mean, 1.1) && close(i.low, 1.1) && close(i.high, 1.1),
            "{i:?}"
        );
    }

    #[test]
    fn the_interval_uses_students_t_over_log_ratios() {
        // logs 0 and ln 2: mean ln√2, standard error ln2/2, t(0.975, 1) = 12.706.
        let i = interval(&[1.0, 2.0]).expect("two ratios");
        let half = 12.7062 * 2f64.ln() / 2.0;
        assert!(close(i.mean, 2f64.sqrt()), "{i:?}");
        assert!(close(i.low, (2f64.sqrt().ln() - half).exp()), "{i:?}");
        assert!(close(i.high, (2f64.sqrt().ln() + half).exp()), "{i:?}");
    }

    #[test]
    fn no_interval_from_one_round_or_a_ratio_that_is_not_a_number() {
        assert_eq!(interval(&[1.0]), None);
        assert_eq!(interval(&[1.0, f64::NAN, 1.2]), None);
        assert_eq!(interval(&[1.0, 0.0, 1.2]), None);
        assert_eq!(interval(&[1.0, f64::INFINITY]), None);
    }

    #[test]
    fn a_verdict_needs_the_whole_interval_on_one_side() {
        let i = |low, high| Interval {
            mean: (low + high) / 2.0,
            low,
            high,
        };
        let cases = [
            (i(1.01, 1.10), Want::AtLeast, Verdict::Met),
            (i(1.00, 1.10), Want::AtLeast, Verdict::Met),
            (i(0.99, 1.10), Want::AtLeast, Verdict::Undecided),
            (i(0.90, 0.99), Want::AtLeast, Verdict::Missed),
            (i(0.85, 0.99), Want::AtMost, Verdict::Met),
            (i(0.85, 1.00), Want::AtMost, Verdict::Met),
            (i(0.85, 1.01), Want::AtMost, Verdict::Undecided),
            (i(1.01, 1.20), Want::AtMost, Verdict::Missed),
        ];
        for (interval, want, expected) in cases {
            assert_eq!(
                verdict(&interval, want, 1.0),
                expected,
                "{interval:?} {want:?}"
            );
        }
    }

    #[test]
    fn a_cell_lists_the_rounds_counts_those_meeting_and_gives_the_verdict() {
        let c = cell(&[1.05, 0.98, 1.10, 1.07], Want::AtLeast, 1.0);
        assert!(c.starts_with("1.05 0.98 1.10 1.07 | 3 of 4 | "), "{c}");
        assert!(c.ends_with("undecided"), "{c}");
        let c = cell(&[0.90, 0.92, 0.91, 0.89, 0.93], Want::AtMost, 1.0);
        assert!(c.contains("| 5 of 5 |") && c.ends_with(" met"), "{c}");
        assert!(cell(&[1.0], Want::AtLeast, 1.0).ends_with("no interval"));
    }
}
