//! The chaos soak (`.ci/chaos.sh`, the `chaos` program) run short: three stacks, one of them
//! restricted, for 120 s of hostile tenants and faults after a quiet phase, on a dockerd of its
//! own in a network namespace of its own. What it asserts is the run's counts, from its one
//! summary line: no cross-stack effect, no lost sandbox, nothing leaked, no panic, and exit 0;
//! and that the report holds deer-flow's docker-CLI replay in both phases, every hostile move's
//! spans (`moves.csv`) and the log floods timed from the engine's events. Its latencies are a
//! benchmark figure (docs/benchmarks.md), never judged here.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sockproxy_tests::bins;
use sockproxy_tests::bounded::OutputWithin;
use sockproxy_tests::skip::skip;

/// Where a program is on PATH or in the sbin directories.
fn installed(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .any(|d| d.join(program).is_file())
}

#[test]
fn a_short_chaos_run_counts_no_cross_stack_effect_loss_leak_or_panic() {
    const TEST: &str = "a_short_chaos_run_counts_no_cross_stack_effect_loss_leak_or_panic";
    if !nix::unistd::geteuid().is_root() {
        skip(
            TEST,
            "the chaos run needs root",
            "run the tests as root, as .ci/run does",
        );
        return;
    }
    if let Some(p) = ["dockerd", "ip", "nsenter"].iter().find(|p| !installed(p)) {
        skip(
            TEST,
            &format!("{p} is not installed"),
            "apt-get install docker.io iproute2 util-linux, as .ci/run does",
        );
        return;
    }
    let report = tempfile::tempdir().expect("report dir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/chaos.sh");
    // The programs this build made (cargo test --workspace builds sockproxy for its own tests).
    bins::sockproxy();
    let out = Command::new(script)
        .args(["--stacks", "3", "--seconds", "120"])
        .arg("--report")
        .arg(report.path())
        .env("CHAOS_BIN_DIR", bins::dir())
        .output_within(Duration::from_secs(900))
        .expect("chaos.sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .lines()
        .rfind(|l| l.starts_with("chaos: 3 stacks, 120 s, seed "))
        .unwrap_or_default();
    let counts = summary.split_once(", seed ").map(|(_, rest)| rest);
    let zero = counts.is_some_and(|c| {
        c.ends_with(", cross-stack 0, lost 0, leaked 0, panics 0")
            && c.split(',')
                .next()
                .is_some_and(|seed| seed.parse::<u64>().is_ok())
    });
    assert!(
        zero && out.status.success(),
        "exit {:?}, summary {summary:?}:\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(report.path().join("report.md")).expect("report.md");
    assert!(
        md.contains("## Well-behaved calls, quiet vs chaos (ms)"),
        "{md}"
    );
    // deer-flow's docker-CLI replay ran in the well-behaved loop, in both phases.
    let cli_row = md
        .lines()
        .find(|l| l.starts_with("| docker run -d --rm -p (CLI"))
        .unwrap_or_default();
    let runs: Vec<&str> = cli_row.split('|').map(str::trim).collect();
    assert!(
        runs.len() > 3 && !runs[2].starts_with("0 ") && !runs[3].starts_with("0 "),
        "no docker CLI replay in the report: {cli_row:?}\n{md}"
    );
    // What the calls were slow beside: every hostile move of every stack has its spans in
    // moves.csv and its row in the table, and the log floods were timed from the engine's
    // events (each stopped or removed, so each has a run time).
    let moves = std::fs::read_to_string(report.path().join("moves.csv")).unwrap_or_default();
    for what in ["log flood", "fork bomb", "container flood", "lists"] {
        assert!(
            (0..3).all(|k| moves.lines().any(|l| l.ends_with(&format!(",{k},{what}")))),
            "moves.csv has no {what:?} span for every stack:\n{moves}"
        );
        assert!(
            md.contains(&format!("\n| {what} | ")),
            "no {what:?} row:\n{md}"
        );
    }
    let floods = md
        .lines()
        .find_map(|l| l.strip_prefix("Log floods (the move's `yes` sandbox"))
        .and_then(|l| l.split_once("): ")?.1.split_once(" ran,"))
        .and_then(|(n, _)| n.parse::<u32>().ok());
    assert!(
        floods.is_some_and(|n| n >= 3),
        "floods timed: {floods:?}\n{md}"
    );
    // The plots a person reads: PNG files of the size the program draws.
    for name in ["latency.png", "host.png"] {
        let png = std::fs::read(report.path().join(name)).unwrap_or_default();
        let size = png.get(16..24).map(|b| {
            (
                u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            )
        });
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n") && size == Some((1400, 1000)),
            "{name}: not a 1400x1000 PNG ({} bytes, size {size:?}):\n{stdout}",
            png.len()
        );
    }
}
