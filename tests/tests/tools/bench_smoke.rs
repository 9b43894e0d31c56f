//! The benchmark command, run end to end at a tiny size so it cannot rot: every part prints its
//! table, and the cells a reader compares hold measured numbers; a 20-second soak moves every
//! kind of traffic. The sizes here say nothing about speed and nothing is timed or judged;
//! `docs/benchmarks.md` has the real runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use sockproxy_tests::bins;
use sockproxy_tests::skip::skip;
use sockproxy_tests::step::step;

/// The rows of the first Markdown table after the line starting with `heading`, as cells,
/// without the header and separator rows.
fn table(text: &str, heading: &str) -> Vec<Vec<String>> {
    let section = text
        .split_once(&format!("\n{heading}"))
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no section {heading:?} in:\n{text}"));
    let rows: Vec<Vec<String>> = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect();
    rows
}

/// The cell's leading number, if it has one.
fn number(cell: &str) -> Option<f64> {
    cell.split_whitespace().next()?.parse().ok()
}

/// The machine-idle cell: one percentage per route, each within 0-100.
fn idle_cell(row: &[String], routes: usize) {
    let cell = &row[12];
    let pcts: Vec<f64> = cell.split(" / ").filter_map(number).collect();
    assert_eq!(pcts.len(), routes, "{row:?}");
    assert!(pcts.iter().all(|p| (0.0..=100.0).contains(p)), "{row:?}");
}

fn positive(row: &[String], col: usize) -> f64 {
    let v = number(&row[col]).unwrap_or_else(|| panic!("column {col} of {row:?} is not a number"));
    assert!(v > 0.0, "column {col} of {row:?}");
    v
}

/// Where the bench looks too: PATH, then /usr/sbin and /sbin.
fn installed(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .any(|d| d.join(program).is_file())
}

fn newest_change(path: &Path) -> Option<SystemTime> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_dir() {
        return meta.modified().ok();
    }
    std::fs::read_dir(path)
        .ok()?
        .flatten()
        .filter_map(|e| newest_change(&e.path()))
        .max()
}

/// This build's binary directory (`bins::dir`), for `--bin-dir`, when sockproxy, netproxy and
/// lifecycle-cli there are newer than every source they are built from (as after `cargo test --workspace`,
/// which builds them for their own tests). Otherwise none, and the bench builds them itself with
/// a nested `cargo build`, so a stale binary is never what runs.
fn prebuilt() -> Option<PathBuf> {
    let dir = bins::dir();
    let built = ["sockproxy", "netproxy", "lifecycle-cli"]
        .iter()
        .map(|b| {
            std::fs::metadata(dir.join(b))
                .and_then(|m| m.modified())
                .ok()
        })
        .min()??;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sources = [
        "sockproxy",
        "netproxy",
        "headguard",
        "stackmodel",
        "lifecycle",
        "Cargo.lock",
        "Cargo.toml",
    ]
    .iter()
    .map(|p| newest_change(&root.join(p)))
    .max()??;
    (built >= sources).then_some(dir)
}

/// The bench, given `--bin-dir` when the binaries are already built.
fn bench() -> Command {
    let mut cmd = Command::new(bins::bench());
    if let Some(dir) = prebuilt() {
        cmd.arg("--bin-dir").arg(dir);
    }
    cmd
}

/// Runs the bench with `args` (split at spaces); its standard output, after asserting it
/// succeeded.
fn run(args: &str) -> String {
    let out = bench()
        .args(args.split_whitespace())
        .output()
        .expect("bench runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// How to get the proxies the bench compares against.
const HOW: &str = "apt-get install haproxy tinyproxy squid, as .ci/run does";

/// How to get the real engine the bench's real-engine parts use.
const ENGINE_HOW: &str = "start dockerd and set DOCKER_HOST=unix://…, as .ci/run does";

#[test]
fn the_benchmark_runs_every_part_at_a_tiny_size() {
    const TEST: &str = "the_benchmark_runs_every_part_at_a_tiny_size";
    let text = step("the bench runs every part", || {
        let text = run(concat!(
            "--requests 30 --rounds 1 --list-sizes 10 --real-rounds 1 --tunnel-mb 2 --setups 5 ",
            "--real-requests 20 --real-stops 8 --real-concurrency 1,2 --connections 8"
        ));
        assert!(text.contains("Reproduce: `cargo run --release -p sockproxy-tests --bin bench"));
        text
    });

    step("1. requests through each proxy", || {
        let haproxy = installed("haproxy");
        if !haproxy {
            skip(TEST, "the HAProxy columns: haproxy is not installed", HOW);
        }
        let requests = table(&text, "## 1.");
        assert_eq!(
            requests.len(),
            9,
            "3 requests x 3 concurrencies: {requests:?}"
        );
        for row in &requests {
            positive(row, 2);
            positive(row, 3);
            positive(row, 5);
            positive(row, 10);
            idle_cell(row, if haproxy { 3 } else { 2 });
            if haproxy {
                positive(row, 4);
                positive(row, 6);
                positive(row, 11);
            }
        }
    });

    step("1b. per-request cost on the real engine", || {
        if text.contains("## 1b. Per-request cost (real engine)\n\nSkipped") {
            skip(
                TEST,
                "part 1 on the real engine: no engine answers at DOCKER_HOST",
                ENGINE_HOW,
            );
        } else {
            let quick = table(&text, "## 1b.");
            assert_eq!(quick.len(), 4, "2 requests x 2 concurrencies: {quick:?}");
            let cycles = table(&text, "Stop and start by name");
            assert_eq!(cycles.len(), 2, "2 concurrencies: {cycles:?}");
            for row in quick.iter().chain(&cycles) {
                assert!(!row[2].contains("error"), "{row:?}");
                assert!(!row[3].contains("error"), "{row:?}");
                positive(row, 2);
                positive(row, 3);
                positive(row, 10);
                if installed("haproxy") {
                    positive(row, 4);
                    positive(row, 11);
                }
            }
        }
    });

    step("2. list filtering", || {
        let lists = table(&text, "## 2.");
        assert_eq!(lists.len(), 1, "{lists:?}");
        assert_eq!(lists[0][0], "10");
        assert_eq!(lists[0][2], "5", "half of 10 containers are the stack's");
        positive(&lists[0], 3);
        positive(&lists[0], 4);
        positive(&lists[0], 6);
    });

    step("3. the real engine", || {
        if text.contains("## 3. Real engine (docker CLI wall time)\n\nSkipped") {
            skip(
                TEST,
                "the real-engine part: no engine answers at DOCKER_HOST",
                ENGINE_HOW,
            );
        } else {
            let real = table(&text, "## 3.");
            assert_eq!(real.len(), 3, "{real:?}");
            for row in &real {
                positive(row, 1);
                positive(row, 2);
            }
        }
    });

    step("4. tunnels", || {
        let tunnels = table(&text, "## 4.");
        let route = |name: &str| {
            tunnels
                .iter()
                .find(|r| r[0] == name)
                .unwrap_or_else(|| panic!("no {name} row in {tunnels:?}"))
        };
        for name in ["direct", "netproxy", "tinyproxy", "squid"] {
            let ours = name == "direct" || name == "netproxy";
            if !ours && !installed(name) {
                skip(
                    TEST,
                    &format!("the {name} row: {name} is not installed"),
                    HOW,
                );
                continue;
            }
            let row = route(name);
            positive(row, 1);
            positive(row, 3);
            if name != "direct" {
                positive(row, 5);
            }
        }
    });

    step("5. footprint", || {
        let footprint = table(&text, "## 5.");
        assert_eq!(footprint.len(), 2, "{footprint:?}");
        for row in &footprint {
            positive(row, 1);
            positive(row, 2);
            assert_eq!(row[4], "8", "every connection was held: {row:?}");
        }
    });
}

#[test]
fn a_short_soak_moves_every_kind_of_traffic_and_reports_numbers() {
    let text = run("--soak 20");
    assert!(text
        .contains("Reproduce: `cargo run --release -p sockproxy-tests --bin bench -- --soak 20`"));

    let traffic = table(&text, "### Traffic");
    assert_eq!(traffic.len(), 7, "{traffic:?}");
    for row in &traffic {
        positive(row, 2);
    }

    let resources = table(&text, "### Resources");
    assert_eq!(resources.len(), 6, "3 metrics x 2 proxies: {resources:?}");
    for row in &resources {
        for col in 2..=5 {
            positive(row, col);
        }
        let growth = row[6].trim_end_matches('%');
        assert!(growth.parse::<f64>().is_ok(), "growth of {row:?}");
        assert!(["flat", "grows"].contains(&row[7].as_str()), "{row:?}");
    }
    assert!(text.contains("Verdict ("), "{text}");

    let curve = table(&text, "### Curve");
    assert_eq!(curve.len(), 20, "one row a second: {curve:?}");
    for row in &curve {
        for col in 0..8 {
            positive(row, col);
        }
    }
}

#[test]
fn the_budget_part_prints_one_table_judging_the_after_build() {
    const TEST: &str = "the_budget_part_prints_one_table_judging_the_after_build";
    // The same binary as before and after: the point is that both columns fill and that the
    // verdict reads the after column, not what the figures are.
    let before = bins::dir().join("sockproxy");
    let text = run(&format!(
        "--parts budget --budget-samples 2 --budget-list-size 100 --requests 30 --rounds 1 \
         --real-requests 20 --connections 8 --before-bin {}",
        before.display()
    ));
    assert!(text.contains(" --budget-samples 2 "), "{text}");
    let rows = table(&text, "## Budget (issue 39)");
    assert_eq!(
        rows.len(),
        15,
        "5 commands x p50 and p99, inspect req/s, /_ping CPU, RSS, list and its context: {rows:?}"
    );
    let real_skipped = text.contains("not measured: no engine at DOCKER_HOST");
    if real_skipped {
        skip(
            TEST,
            "the real-engine lines: no engine answers at DOCKER_HOST",
            ENGINE_HOW,
        );
    }
    for row in &rows {
        assert_eq!(row.len(), 7, "{row:?}");
        let unmeasured = row[6].starts_with("not measured");
        if unmeasured {
            let haproxy_row = row[1].contains("HAProxy");
            assert!(
                real_skipped || (haproxy_row && !installed("haproxy")),
                "only a missing engine or HAProxy leaves a line unmeasured: {row:?}"
            );
            continue;
        }
        let context = row[0] == "(context for the line above)";
        let verdicts: &[&str] = if context {
            &["not judged"]
        } else {
            &["met", "**missed**"]
        };
        assert!(verdicts.contains(&row[6].as_str()), "{row:?}");
        positive(row, 3);
        positive(row, 4);
    }
}

#[test]
fn the_haproxy_part_prints_its_table_with_a_row_per_call() {
    const TEST: &str = "the_haproxy_part_prints_its_table_with_a_row_per_call";
    if !installed("haproxy") {
        skip(TEST, "the haproxy part: haproxy is not installed", HOW);
        return;
    }
    let text = run("--parts haproxy --haproxy-calls 20 --rounds 2");
    assert!(
        text.contains(" --parts haproxy --haproxy-calls 20"),
        "the command to reproduce it: {text}"
    );
    let rows = table(&text, "## 6. HAProxy in front of one provisioner");
    let calls: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(
        calls,
        [
            "`GET /health` (the engine's cached ping)",
            "`GET /api/capabilities`",
            "`GET /api/sandboxes/{id}` (absent: one inspect)",
            "`GET /api/sandboxes` (the engine's list)",
        ],
        "{text}"
    );
    for row in &rows {
        assert_eq!(row.len(), 6, "{row:?}");
        for col in 1..=4 {
            positive(row, col);
        }
        assert!(
            number(&row[5]).is_some(),
            "the difference is a number: {row:?}"
        );
    }
}
