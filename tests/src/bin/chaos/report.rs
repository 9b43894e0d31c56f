//! The report a person reads, printed and written to the run's folder: `report.md` (the run,
//! the latency table quiet vs chaos, the host, the hostile tenants' tallies, every finding,
//! what the well-behaved calls were slow beside), `latencies.csv` (every well-behaved call),
//! `host.csv` (the host every two seconds) and `moves.csv` (when each hostile move ran and
//! each fault's recovery window lasted).

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context;

use crate::attribute::{self, Span};
use crate::hostile::Tally;
use crate::hostile_moves::LOG_FLOOD_SECS;
use crate::measure::{quantile, HostPoint, Log, Op, Phase};
use crate::watch::{FloodRun, Found};
use crate::{Config, Counts};

pub struct Inputs<'a> {
    pub log: &'a Log,
    pub host: &'a [HostPoint],
    pub hostile: &'a [Tally],
    /// Each fault and its recovery window.
    pub fault_spans: &'a [Span],
    pub cross: &'a Found,
    pub leaks: &'a [String],
    /// What was seen and is not counted (the engine's orphans after the harness's restart).
    pub notes: &'a [String],
    pub panics: &'a [String],
    pub counts: Counts,
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("–".into(), |d| format!("{:.1}", d.as_secs_f64() * 1000.0))
}

fn change(quiet: Option<Duration>, chaos: Option<Duration>) -> String {
    match (quiet, chaos) {
        (Some(q), Some(c)) if !q.is_zero() => {
            format!("{:+.0}%", 100.0 * (c.as_secs_f64() / q.as_secs_f64() - 1.0))
        }
        _ => "–".into(),
    }
}

pub fn write(cfg: &Config, i: &Inputs<'_>) -> anyhow::Result<()> {
    let mut md = String::new();
    let c = i.counts;
    let _ = writeln!(md, "# Chaos run, seed {}\n", cfg.seed);
    let _ = writeln!(
        md,
        "{} stacks ({} restricted), quiet phase {} s, chaos phase {} s, recovery window W = {} s, \
         --max-containers {}, sandboxes {} CPU each.\n",
        cfg.stacks,
        cfg.stacks / 2,
        cfg.quiet.as_secs(),
        cfg.seconds,
        cfg.window.as_secs(),
        cfg.max_containers,
        crate::stacks::SANDBOX_CPUS
    );
    if !cfg.skip_moves.is_empty() {
        let _ = writeln!(
            md,
            "Hostile moves left out (`--skip-move`): {}.\n",
            cfg.skip_moves.join(", ")
        );
    }
    let _ = writeln!(
        md,
        "Counts: cross-stack {}, lost {}, leaked {}, panics {}.\n",
        c.cross, c.lost, c.leaked, c.panics
    );
    let calls = i.log.calls();
    let _ = writeln!(md, "## Well-behaved calls, quiet vs chaos (ms)\n");
    let _ = writeln!(
        md,
        "| Call | quiet n (failed) | chaos n (failed) | quiet p50 | chaos p50 | p50 change | quiet p99 | chaos p99 | p99 change |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
    for op in Op::ALL {
        let of = |phase: Phase| {
            let mine: Vec<_> = calls
                .iter()
                .filter(|c| c.op == op && c.phase == phase)
                .collect();
            let failed = mine.iter().filter(|c| !c.ok).count();
            let mut ok: Vec<Duration> = mine.iter().filter(|c| c.ok).map(|c| c.took).collect();
            ok.sort();
            (mine.len(), failed, ok)
        };
        let (qn, qf, q) = of(Phase::Quiet);
        let (cn, cf, ch) = of(Phase::Chaos);
        let (q50, c50, q99, c99) = (
            quantile(&q, 0.5),
            quantile(&ch, 0.5),
            quantile(&q, 0.99),
            quantile(&ch, 0.99),
        );
        let _ = writeln!(
            md,
            "| {} | {qn} ({qf}) | {cn} ({cf}) | {} | {} | {} | {} | {} | {} |",
            op.name(),
            ms(q50),
            ms(c50),
            change(q50, c50),
            ms(q99),
            ms(c99),
            change(q99, c99)
        );
    }
    let _ = writeln!(
        md,
        "\nFailed calls are those that got no answer or an error status (a provider or proxy \
         being restarted, a sandbox killed with the engine's restart); latencies are of the \
         successful ones. The HTTP call goes to the sandbox URL in both modes (in restricted \
         mode through the netproxy sidecar's relay).\n"
    );
    let failures = i.log.http_failures();
    if !failures.is_empty() {
        let _ = writeln!(md, "Why each failed HTTP call to a sandbox URL failed:\n");
        for (at, stack, why) in &failures {
            let _ = writeln!(md, "- {at:.1} s, stack {stack}: {why}");
        }
        let _ = writeln!(md);
    }
    let spans: Vec<Span> = i
        .hostile
        .iter()
        .flat_map(|t| t.spans.iter().cloned())
        .chain(i.fault_spans.iter().cloned())
        .collect();
    beside_table(&mut md, &calls, &spans);
    host_table(&mut md, i.host);
    cpu_table(&mut md, i.host, cfg.quiet.as_secs_f64());
    let _ = writeln!(md, "## Hostile tenants\n");
    let _ = writeln!(md, "| Stack | moves | answers | refused | cross-stack |");
    let _ = writeln!(md, "|---|---|---|---|---|");
    for t in i.hostile {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            t.stack, t.moves, t.answers, t.refused, t.cross
        );
    }
    let _ = writeln!(md, "\nEngine events judged: {}.\n", i.cross.events);
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
        - i.log.start.elapsed().as_secs_f64();
    flood_runs(&mut md, &i.cross.flood_runs, i.fault_spans, started_unix);
    let _ = writeln!(md, "## Findings\n");
    let findings: Vec<&String> = i
        .cross
        .lines
        .iter()
        .chain(i.hostile.iter().flat_map(|t| t.lines.iter()))
        .chain(i.leaks.iter())
        .chain(i.panics.iter())
        .collect();
    if findings.is_empty() {
        let _ = writeln!(md, "None.");
    }
    for f in findings {
        let _ = writeln!(md, "- {f}");
    }
    if !i.notes.is_empty() {
        let _ = writeln!(md, "\nNot counted:\n");
        for n in i.notes {
            let _ = writeln!(md, "- {n}");
        }
    }
    print!("\n{md}");
    std::fs::write(cfg.report.join("report.md"), &md).context("report.md")?;
    let mut csv = String::from("at_s,stack,phase,call,ms,ok\n");
    for c in &calls {
        let _ = writeln!(
            csv,
            "{:.3},{},{:?},{:?},{:.3},{}",
            c.at,
            c.stack,
            c.phase,
            c.op,
            c.took.as_secs_f64() * 1000.0,
            c.ok
        );
    }
    std::fs::write(cfg.report.join("latencies.csv"), csv).context("latencies.csv")?;
    let mut csv =
        String::from("at_s,dockerd_rss_kib,dockerd_cpu_pct,shims,proxies_rss_kib,serves_rss_kib,host_busy_pct,proxies_cpu_pct,serves_cpu_pct,harness_cpu_pct,containerd_cpu_pct\n");
    for p in i.host {
        let _ = writeln!(
            csv,
            "{:.1},{},{:.1},{},{},{},{:.1},{:.1},{:.1},{:.1},{:.1}",
            p.secs,
            p.dockerd_rss_kib,
            p.dockerd_cpu_pct,
            p.shims,
            p.proxies_rss_kib,
            p.serves_rss_kib,
            p.host_busy_pct,
            p.proxies_cpu_pct,
            p.serves_cpu_pct,
            p.harness_cpu_pct,
            p.containerd_cpu_pct
        );
    }
    std::fs::write(cfg.report.join("host.csv"), csv).context("host.csv")?;
    let mut csv = String::from("from_s,to_s,stack,what\n");
    for sp in &spans {
        let stack = sp.stack.map_or("all".into(), |k| k.to_string());
        let _ = writeln!(csv, "{:.3},{:.3},{stack},{}", sp.from, sp.to, sp.what);
    }
    std::fs::write(cfg.report.join("moves.csv"), csv).context("moves.csv")?;
    println!("report: {}", cfg.report.display());
    Ok(())
}

fn beside_table(md: &mut String, calls: &[crate::measure::Call], spans: &[Span]) {
    let pct = |x: Option<f64>| x.map_or("–".into(), |x| format!("{:+.0}%", 100.0 * x));
    let _ = writeln!(md, "## What the well-behaved calls were slow beside\n");
    let _ = writeln!(
        md,
        "Each successful chaos-phase call, as a ratio to its own call's quiet median, set \
         beside every hostile move (of any stack) or fault recovery window (of its own stack; \
         the engine's restart: every stack) it overlapped, and the share of them slower than \
         their call's quiet p99. Several tenants move at once, so a call counts in several \
         rows; the quiet phase's own row is the noise.\n"
    );
    let _ = writeln!(
        md,
        "| Beside | calls | median change | p90 change | over the quiet p99 |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|");
    for r in attribute::rows(calls, spans) {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            r.what,
            r.calls,
            pct(r.p50_change),
            pct(r.p90_change),
            r.over_p99
                .map_or("–".into(), |x| format!("{:.1}%", 100.0 * x))
        );
    }
    let _ = writeln!(md);
}

/// How long the log floods lasted, as the engine's events saw them; each one over 2 s with
/// when it started (seconds since the run's start, `started_unix` being that start), its stack
/// and whether it was the stack's first or the first since a SIGKILL of its proxy (`faults`).
fn flood_runs(md: &mut String, runs: &[FloodRun], faults: &[Span], started_unix: f64) {
    let mut v: Vec<f64> = runs.iter().map(|r| r.secs).collect();
    v.sort_by(f64::total_cmp);
    let q = |p: f64| quantile(&v, p).map_or("–".into(), |x| format!("{x:.2}"));
    let whole = LOG_FLOOD_SECS as f64;
    let _ = writeln!(
        md,
        "Log floods (the move's `yes` sandbox, start to die in the engine's events): {} ran, \
         for p50 {} s, p90 {} s, at most {} s; {} ran the move's whole {whole:.0} s (not \
         stopped by the log guard).\n",
        v.len(),
        q(0.5),
        q(0.9),
        q(1.0),
        v.iter().filter(|x| **x >= whole).count()
    );
    let at = |r: &FloodRun| r.started_ns as f64 / 1e9 - started_unix;
    let mut ordered: Vec<&FloodRun> = runs.iter().collect();
    ordered.sort_by_key(|a| a.started_ns);
    let mut long = Vec::new();
    for (i, r) in ordered.iter().enumerate() {
        if r.secs < 2.0 {
            continue;
        }
        let before = ordered[..i].iter().rev().find(|p| p.stack == r.stack);
        let since = before.map_or(f64::MIN, |p| at(p));
        let killed = faults.iter().any(|f| {
            f.stack == r.stack && f.what.contains("sockproxy") && f.from > since && f.from < at(r)
        });
        let why = match (before, killed) {
            (None, _) => "its stack's first",
            (Some(_), true) => "the first since its proxy was killed",
            (Some(_), false) => "within the repeat window",
        };
        let stack = r.stack.map_or("?".into(), |k| k.to_string());
        long.push(format!(
            "{:.2} s at {:.0} s (stack {stack}, {why})",
            r.secs,
            at(r)
        ));
    }
    if !long.is_empty() {
        let _ = writeln!(md, "Floods over 2 s: {}.\n", long.join("; "));
    }
}

fn host_table(md: &mut String, host: &[HostPoint]) {
    let _ = writeln!(md, "## Host\n");
    let _ = writeln!(md, "| Figure | first | median | max | last |");
    let _ = writeln!(md, "|---|---|---|---|---|");
    type Figure = fn(&HostPoint) -> f64;
    let rows: [(&str, Figure); 5] = [
        ("dockerd RSS (MiB)", |p| p.dockerd_rss_kib as f64 / 1024.0),
        ("dockerd CPU (% of a core)", |p| p.dockerd_cpu_pct),
        ("containerd shims", |p| p.shims as f64),
        ("all proxies' RSS (MiB)", |p| {
            p.proxies_rss_kib as f64 / 1024.0
        }),
        ("all providers' RSS (MiB)", |p| {
            p.serves_rss_kib as f64 / 1024.0
        }),
    ];
    for (name, f) in rows {
        let mut v: Vec<f64> = host.iter().map(f).collect();
        let (first, last) = (
            v.first().copied().unwrap_or(0.0),
            v.last().copied().unwrap_or(0.0),
        );
        v.sort_by(f64::total_cmp);
        let med = v.get(v.len() / 2).copied().unwrap_or(0.0);
        let max = v.last().copied().unwrap_or(0.0);
        let _ = writeln!(
            md,
            "| {name} | {first:.1} | {med:.1} | {max:.1} | {last:.1} |"
        );
    }
    let _ = writeln!(
        md,
        "\nSampled every 2 s over both phases ({} samples).\n",
        host.len()
    );
}

/// Where the machine's CPU went, mean per phase (samples from the sampler's start, which is the
/// quiet phase's, split at `quiet_secs`): the machine's busy time and the parts the run can
/// name; the rest is the sandboxes, the docker CLI and docker-proxy processes and the kernel.
fn cpu_table(md: &mut String, host: &[HostPoint], quiet_secs: f64) {
    type Figure = fn(&HostPoint) -> f64;
    let rows: [(&str, Figure); 7] = [
        ("the whole machine, busy", |p| p.host_busy_pct),
        ("dockerd", |p| p.dockerd_cpu_pct),
        ("containerd and the shims (with the runc they ran)", |p| {
            p.containerd_cpu_pct
        }),
        ("all proxies", |p| p.proxies_cpu_pct),
        ("all providers", |p| p.serves_cpu_pct),
        (
            "the harness (every stack's clients, well-behaved and hostile)",
            |p| p.harness_cpu_pct,
        ),
        (
            "the rest (sandboxes, docker CLI, docker-proxy, kernel)",
            |p| {
                p.host_busy_pct
                    - p.dockerd_cpu_pct
                    - p.containerd_cpu_pct
                    - p.proxies_cpu_pct
                    - p.serves_cpu_pct
                    - p.harness_cpu_pct
            },
        ),
    ];
    // The first sample has no interval before it.
    let measured = host.get(1..).unwrap_or_default();
    let mean = |f: Figure, chaos: bool| {
        let v: Vec<f64> = measured
            .iter()
            .filter(|p| (p.secs >= quiet_secs) == chaos)
            .map(f)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let _ = writeln!(
        md,
        "## Where the CPU went
"
    );
    let _ = writeln!(md, "| Mean % of one core | quiet | chaos | change |");
    let _ = writeln!(md, "|---|---|---|---|");
    let show = |x: Option<f64>| x.map_or("–".into(), |x| format!("{x:.1}"));
    for (name, f) in rows {
        let (q, c) = (mean(f, false), mean(f, true));
        let d = match (q, c) {
            (Some(q), Some(c)) => format!("{:+.1}", c - q),
            _ => "–".into(),
        };
        let _ = writeln!(md, "| {name} | {} | {} | {d} |", show(q), show(c));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let _ = writeln!(
        md,
        "\nThe machine has {cores} cores ({} % of one core in all); samples every 2 s, each the \
         mean over its interval.\n",
        cores * 100
    );
}
