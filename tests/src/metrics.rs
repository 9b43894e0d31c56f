//! A metrics endpoint read as a scraper reads it (`--metrics-listen`, the `scrape` crate): GET
//! over a Unix socket or TCP, the Prometheus text parsed into its TYPE lines and samples, and
//! `promtool check metrics` (Debian's `prometheus` package) run on it where it is installed.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::raw::{self, RawResponse};

/// Where an endpoint listens.
#[derive(Debug, Clone, Copy)]
pub enum At<'a> {
    Unix(&'a Path),
    Tcp(SocketAddr),
}

/// `GET target` on the endpoint, read to its end.
pub fn get(at: At<'_>, target: &str) -> RawResponse {
    match at {
        At::Unix(path) => raw::get(path, target).expect("the metrics endpoint answers"),
        At::Tcp(addr) => {
            let mut s = std::net::TcpStream::connect(addr).expect("connects");
            s.set_read_timeout(Some(Duration::from_secs(30)))
                .expect("timeout");
            write!(
                s,
                "GET {target} HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n"
            )
            .expect("writes");
            let mut out = Vec::new();
            s.read_to_end(&mut out).expect("reads");
            raw::parse(&out).expect("an HTTP answer")
        }
    }
}

/// One scrape: each family's TYPE, and each series' value (keyed `name{labels}` as written).
#[derive(Debug, Clone)]
pub struct Scrape {
    pub text: String,
    pub types: BTreeMap<String, String>,
    pub samples: BTreeMap<String, f64>,
}

impl Scrape {
    /// `GET /metrics`, checked to be 200 in the text format, and parsed.
    pub fn take(at: At<'_>) -> Self {
        let r = get(at, "/metrics");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(
            r.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        Self::parse(&r.text())
    }

    /// The text format, strictly: every line a comment, a HELP or TYPE line, or `series value`.
    pub fn parse(text: &str) -> Self {
        let mut types = BTreeMap::new();
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
                let before = types.insert(name.to_owned(), kind.to_owned());
                assert!(before.is_none(), "{name} typed twice in\n{text}");
            } else if line.starts_with('#') || line.is_empty() {
                continue;
            } else {
                let (series, value) = line.rsplit_once(' ').expect("series value");
                let value: f64 = value
                    .parse()
                    .unwrap_or_else(|_| panic!("value in {line:?}"));
                samples.insert(series.to_owned(), value);
            }
        }
        Self {
            text: text.to_owned(),
            types,
            samples,
        }
    }

    /// A series' value; 0 for one not (yet) written, as for a counter never incremented.
    pub fn value(&self, series: &str) -> f64 {
        self.samples.get(series).copied().unwrap_or(0.0)
    }

    /// Asserts each (family, TYPE) is typed so.
    pub fn assert_types(&self, want: &[(&str, &str)]) {
        for (name, kind) in want {
            assert_eq!(
                self.types.get(*name).map(String::as_str),
                Some(*kind),
                "# TYPE {name} {kind} in\n{}",
                self.text
            );
        }
    }

    /// The series of `family` (its samples' names start `family{` or are `family`) whose value
    /// differs from `before`, with the difference.
    pub fn moved(&self, before: &Scrape, family: &str) -> Vec<(String, f64)> {
        let mine = |s: &str| s == family || s.starts_with(&format!("{family}{{"));
        let mut out: Vec<(String, f64)> = self
            .samples
            .iter()
            .filter(|(s, _)| mine(s))
            .map(|(s, v)| (s.clone(), v - before.value(s)))
            .filter(|(_, d)| *d != 0.0)
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// `promtool check metrics` on `text`, which must pass (lint included); skipped with a notice
/// where promtool is not installed (a failure under CI=true, which installs it).
pub fn promtool_check(test: &str, text: &str) {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::skip::skip(
                test,
                "promtool is not installed",
                "apt-get install prometheus",
            );
            return;
        }
        Err(e) => panic!("promtool: {e}"),
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feeds promtool");
    let out = child.wait_with_output().expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\non\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
