//! What operators look at (issue 51): `deploy/prometheus/alerts.yaml` as `promtool check rules`
//! reads it, with every alert's unit test passing (`promtool test rules`); the example scrape
//! configuration as `promtool check config` reads it; every query of
//! `deploy/grafana/sandbox-stacks.json` valid PromQL.

use std::path::{Path, PathBuf};
use std::process::Command;

use sockproxy_tests::skip::skip;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `promtool ARGS` in `dir`; `None` (with the notice) where promtool is not installed.
fn promtool(test: &str, dir: &Path, args: &[&str]) -> Option<std::process::Output> {
    match Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
    {
        Ok(out) => Some(out),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            skip(
                test,
                "promtool is not installed",
                "apt-get install prometheus",
            );
            None
        }
        Err(e) => panic!("promtool: {e}"),
    }
}

fn passes(out: &std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_alerts_check_and_each_has_a_passing_unit_test() {
    let test = "the_alerts_check_and_each_has_a_passing_unit_test";
    let dir = repo().join("deploy/prometheus");
    let Some(out) = promtool(test, &dir, &["check", "rules", "alerts.yaml"]) else {
        return;
    };
    passes(&out, "promtool check rules");
    let out = promtool(test, &dir, &["test", "rules", "alerts.test.yaml"]).expect("promtool");
    passes(&out, "promtool test rules");
    let out =
        promtool(test, &dir, &["check", "config", "prometheus.example.yml"]).expect("promtool");
    passes(&out, "promtool check config");
    // Every alert is tested: each name in the rules appears as a tested alertname.
    let rules = std::fs::read_to_string(dir.join("alerts.yaml")).expect("rules");
    let tests = std::fs::read_to_string(dir.join("alerts.test.yaml")).expect("tests");
    for name in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests.contains(&format!("alertname: {name}\n")),
            "{name} has no unit test"
        );
    }
}

/// The dashboard's queries, with its variables given values, as PromQL promtool parses.
#[test]
fn every_dashboard_query_is_valid_promql() {
    let test = "every_dashboard_query_is_valid_promql";
    let exprs = dashboard_queries();
    assert!(exprs.len() >= 10, "the dashboard has its panels");
    let dir = tempfile::tempdir().expect("dir");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let concrete = e.replace("$stack", ".*").replace("$__rate_interval", "5m");
        rules.push_str(&format!(
            "      - record: dashboard:query{i}\n        expr: {}\n",
            serde_json::to_string(&concrete).expect("quoted")
        ));
    }
    std::fs::write(dir.path().join("q.yaml"), rules).expect("write");
    let Some(out) = promtool(test, dir.path(), &["check", "rules", "q.yaml"]) else {
        return;
    };
    passes(&out, "the dashboard's queries");
}

/// Every query on the dashboard.
pub(crate) fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("deploy/grafana/sandbox-stacks.json"))
        .expect("dashboard");
    let v: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    v["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_owned))
        .collect()
}
