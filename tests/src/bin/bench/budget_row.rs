//! The budget part's table, without I/O: its rows, how a figure is judged against its limit
//! (a ratio to the reference column, or the figure itself), and how each row prints.

use std::path::{Path, PathBuf};

/// Concurrent clients for the req/s and CPU lines.
pub const CONCURRENCY: usize = 16;

/// The two sockproxy builds compared: `before` is optional, so the part can run with one.
#[derive(Debug, Clone)]
pub struct Builds {
    pub before: Option<PathBuf>,
    pub after: PathBuf,
}

impl Builds {
    /// The builds to start, with their log tags, in the order they take turns.
    pub fn each(&self) -> Vec<(&'static str, &Path)> {
        let mut v = Vec::new();
        if let Some(b) = &self.before {
            v.push(("before", b.as_path()));
        }
        v.push(("after", self.after.as_path()));
        v
    }
}

/// Which side of its limit a figure must be on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    AtMost(f64),
    AtLeast(f64),
}

impl Limit {
    fn holds(self, v: f64) -> bool {
        match self {
            Limit::AtMost(l) => v <= l,
            Limit::AtLeast(l) => v >= l,
        }
    }
}

/// How a row's figure is judged: its ratio to the reference's, or the figure itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Judge {
    Ratio(Limit),
    Value(Limit),
    /// Ratios shown for context, judged against nothing.
    Context,
}

/// One line of the table. `reference` is direct's figure (or HAProxy's, as `measure` says);
/// a `None` figure was not measured, and `note` says why.
#[derive(Debug, Clone)]
pub struct Row {
    pub line: &'static str,
    pub measure: String,
    pub reference: Option<f64>,
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub judge: Judge,
    pub note: Option<String>,
}

impl Row {
    pub fn new(line: &'static str, measure: impl Into<String>, judge: Judge) -> Self {
        Self {
            line,
            measure: measure.into(),
            reference: None,
            before: None,
            after: None,
            judge,
            note: None,
        }
    }

    /// The same line, not measured, saying why.
    pub fn unmeasured(mut self, why: &str) -> Self {
        self.note = Some(why.to_owned());
        self
    }

    /// `figure` and, when judged as a ratio, its ratio to the reference.
    fn cell(&self, figure: Option<f64>) -> String {
        let Some(v) = figure else {
            return "—".to_owned();
        };
        match (self.judge, self.reference) {
            (Judge::Ratio(_) | Judge::Context, Some(r)) if r > 0.0 => {
                format!("{} ({:.2}×)", num(v), v / r)
            }
            _ => num(v),
        }
    }

    /// Whether "after" is within the budget; `None` when a figure it needs is missing.
    pub fn met(&self) -> Option<bool> {
        let after = self.after?;
        match self.judge {
            Judge::Context => None,
            Judge::Value(limit) => Some(limit.holds(after)),
            Judge::Ratio(limit) => {
                let r = self.reference.filter(|r| *r > 0.0)?;
                Some(limit.holds(after / r))
            }
        }
    }

    fn budget(&self) -> String {
        let (limit, unit) = match self.judge {
            Judge::Ratio(l) => (l, "×"),
            Judge::Value(l) => (l, ""),
            Judge::Context => return "—".to_owned(),
        };
        match limit {
            Limit::AtMost(v) => format!("≤ {v}{unit}"),
            Limit::AtLeast(v) => format!("≥ {v}{unit}"),
        }
    }

    pub fn markdown(&self) -> String {
        let verdict = match (self.met(), &self.note) {
            _ if self.judge == Judge::Context => "not judged".to_owned(),
            (Some(true), _) => "met".to_owned(),
            (Some(false), _) => "**missed**".to_owned(),
            (None, Some(why)) => format!("not measured: {why}"),
            (None, None) => "not measured".to_owned(),
        };
        format!(
            "| {} | {} | {} | {} | {} | {} | {verdict} |",
            self.line,
            self.measure,
            self.reference.map_or_else(|| "—".to_owned(), num),
            self.cell(self.before),
            self.cell(self.after),
            self.budget(),
        )
    }
}

/// Three significant digits or whole numbers, whichever is longer.
fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Puts the builds' figures into `row`, which holds the reference already; `figures` is in
/// `Builds::each` order.
pub fn fill(mut row: Row, builds: &Builds, figures: &[f64]) -> Row {
    let (before, after) = match figures {
        [b, a] if builds.before.is_some() => (Some(*b), Some(*a)),
        [a] => (None, Some(*a)),
        _ => (None, None),
    };
    row.before = before;
    row.after = after;
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(judge: Judge, reference: Option<f64>, after: Option<f64>) -> Row {
        let mut r = Row::new("line", "measure", judge);
        r.reference = reference;
        r.after = after;
        r
    }

    #[test]
    fn a_ratio_is_judged_against_the_reference() {
        let within = Judge::Ratio(Limit::AtMost(1.05));
        assert_eq!(row(within, Some(100.0), Some(105.0)).met(), Some(true));
        assert_eq!(row(within, Some(100.0), Some(105.1)).met(), Some(false));
        let at_least = Judge::Ratio(Limit::AtLeast(0.8));
        assert_eq!(row(at_least, Some(1000.0), Some(800.0)).met(), Some(true));
        assert_eq!(row(at_least, Some(1000.0), Some(799.0)).met(), Some(false));
    }

    #[test]
    fn a_value_is_judged_by_itself() {
        let rss = Judge::Value(Limit::AtMost(25.0));
        assert_eq!(row(rss, None, Some(24.9)).met(), Some(true));
        assert_eq!(row(rss, None, Some(25.1)).met(), Some(false));
    }

    #[test]
    fn nothing_is_judged_without_the_figures_it_needs() {
        let within = Judge::Ratio(Limit::AtMost(1.05));
        assert_eq!(row(within, None, Some(1.0)).met(), None);
        assert_eq!(row(within, Some(0.0), Some(1.0)).met(), None);
        assert_eq!(row(within, Some(1.0), None).met(), None);
        let r = row(within, None, None).unmeasured("no engine");
        assert!(
            r.markdown().ends_with("| not measured: no engine |"),
            "{}",
            r.markdown()
        );
    }

    #[test]
    fn a_row_shows_each_builds_ratio_and_the_verdict_for_after() {
        let mut r = row(Judge::Ratio(Limit::AtMost(1.05)), Some(200.0), Some(220.0));
        r.before = Some(210.0);
        assert_eq!(
            r.markdown(),
            "| line | measure | 200 | 210 (1.05×) | 220 (1.10×) | ≤ 1.05× | **missed** |"
        );
        r.judge = Judge::Context;
        assert_eq!(
            r.markdown(),
            "| line | measure | 200 | 210 (1.05×) | 220 (1.10×) | — | not judged |"
        );
        assert_eq!(r.met(), None);
    }

    #[test]
    fn the_figures_go_to_the_builds_given() {
        let b = |before: bool| Builds {
            before: before.then(|| PathBuf::from("b")),
            after: PathBuf::from("a"),
        };
        let r = fill(
            row(Judge::Value(Limit::AtMost(1.0)), None, None),
            &b(true),
            &[1.0, 2.0],
        );
        assert_eq!((r.before, r.after), (Some(1.0), Some(2.0)));
        let r = fill(
            row(Judge::Value(Limit::AtMost(1.0)), None, None),
            &b(false),
            &[2.0],
        );
        assert_eq!((r.before, r.after), (None, Some(2.0)));
    }
}
