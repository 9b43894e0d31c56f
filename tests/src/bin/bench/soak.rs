//! `--soak SECS`: does either proxy drift under long mixed traffic? Starts the fake engine,
//! sockproxy and netproxy (with a loopback upstream served here), drives every kind of traffic
//! in `traffic` for SECS seconds, reads each proxy's open fds, RSS and threads every second,
//! and prints the traffic done, a table comparing the proxies at rest after warm-up and at the
//! end, a verdict, and the curve.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use crate::procs::{mib, Sample};
use crate::socket::{start_fake, start_sockproxy, PREFIX};
use crate::traffic::{self, Ctx, Kind};
use crate::tunnel::{start_netproxy, upstream};

/// How long operations in flight get to finish when traffic pauses or stops; past it the soak
/// goes on and says so (a worker stuck in a proxy is itself a finding).
const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// After traffic pauses, the time proxies get to close what they were closing.
const SETTLE: Duration = Duration::from_secs(1);
/// Fds may differ at rest by this much without counting as growth (a pooled upstream
/// connection open at one reading and not at the other).
const FD_SLACK: u64 = 2;
/// RSS growth from warm-up to end, in percent, still called flat.
const RSS_SLACK_PCT: f64 = 5.0;

/// The proxies at one instant, plus the operations done so far.
#[derive(Debug, Clone, Copy)]
struct Point {
    secs: u64,
    sockproxy: Sample,
    netproxy: Sample,
    done: u64,
}

/// A proxy's name and how to pick its reading out of a `Point`.
type Watched = (&'static str, fn(&Point) -> Sample);

/// Warm-up: 10% of the run or 5 s, whichever is larger, but at most half the run.
fn warm_up(secs: u64) -> u64 {
    (secs / 10).max(5).min(secs / 2)
}

pub fn soak(rt: &Runtime, secs: u64, bins: &Path, dir: &Path) -> anyhow::Result<()> {
    let engine = start_fake(bins, dir, "soak")?;
    let sockproxy = start_sockproxy(bins, dir, &engine.socket, "soak", &[])?;
    let up = rt.block_on(upstream())?;
    let (netproxy, port) = start_netproxy(bins, dir, up, "soak")?;

    // The long-lived containers exec and logs use; made through the proxy like the rest.
    let exec_target = format!("{PREFIX}sandbox-soak-exec");
    traffic::run_container(&sockproxy.socket, &exec_target, &["sleep", "86400"])?;
    // One container writes a line every half second for the whole run (followers get live
    // output), one writes once and goes quiet (followers wait on a silent stream, the case
    // where only the client leaving can end it).
    let ticking = format!("{PREFIX}sandbox-soak-ticking");
    let script = "echo tick; sleep 0.5; ".repeat(usize::try_from(secs * 2 + 120)?);
    traffic::run_container(&sockproxy.socket, &ticking, &["sh", "-c", &script])?;
    let quiet = format!("{PREFIX}sandbox-soak-quiet");
    traffic::run_container(
        &sockproxy.socket,
        &quiet,
        &["sh", "-c", "echo quiet; sleep 86400"],
    )?;

    let ctx = Arc::new(Ctx {
        sockproxy: sockproxy.socket.clone(),
        netproxy: port,
        upstream: up,
        rt: rt.handle().clone(),
        gate: traffic::Gate::default(),
        counts: traffic::Counts::default(),
        exec_target,
        logs_targets: [ticking, quiet],
    });
    let warm = warm_up(secs);
    println!("## Soak ({secs} s)\n");
    println!(
        "One worker per kind of traffic, each looping with a {} ms pause; every sockproxy request on a new connection. Resources are read every second under load; the warm-up ({warm} s) and end readings are taken at rest (traffic paused, {} s to settle).\n",
        traffic::PAUSE.as_millis(),
        SETTLE.as_secs()
    );
    let workers = traffic::spawn(&ctx);
    let start = Instant::now();
    let point = |secs: u64| Point {
        secs,
        sockproxy: sockproxy.proc.sample(),
        netproxy: netproxy.sample(),
        done: ctx.counts.total(),
    };
    let at_rest = |stop: bool| {
        let drained = ctx.gate.quiesce(stop, DRAIN_LIMIT);
        std::thread::sleep(SETTLE);
        let p = point(start.elapsed().as_secs());
        (p, drained)
    };
    let mut curve = Vec::new();
    let mut rest_warm = None;
    let mut undrained = Vec::new();
    // Readings on a fixed schedule from the start, so pauses do not stretch the run.
    for s in 1..=secs {
        let due = start + Duration::from_secs(s);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        curve.push(point(s));
        if s == warm && rest_warm.is_none() {
            let (p, drained) = at_rest(false);
            if !drained {
                undrained.push("warm-up");
            }
            rest_warm = Some(p);
            ctx.gate.resume();
        }
    }
    let (rest_end, drained) = at_rest(true);
    if !drained {
        undrained.push("end");
    }
    let elapsed = start.elapsed();
    for w in workers {
        // Only join the finished ones: a worker stuck past DRAIN_LIMIT is reported, not waited on.
        if w.is_finished() {
            let _ = w.join();
        }
    }
    let rest_warm = rest_warm.unwrap_or(rest_end);

    traffic_table(&ctx, elapsed);
    if !undrained.is_empty() {
        println!(
            "Operations still in flight {} s after traffic paused at: {}.\n",
            DRAIN_LIMIT.as_secs(),
            undrained.join(", ")
        );
    }
    let procs: [Watched; 2] = [("sockproxy", |p| p.sockproxy), ("netproxy", |p| p.netproxy)];
    resources_table(&procs, &rest_warm, &rest_end, &curve);
    curve_table(&curve, secs);
    Ok(())
}

fn traffic_table(ctx: &Ctx, elapsed: Duration) {
    println!("### Traffic\n");
    println!("| kind | through | done | errors | last error |");
    println!("|---|---|---|---|---|");
    for k in Kind::ALL {
        let last = ctx
            .counts
            .last_error(k)
            .map(|e| e.replace('|', "/").replace('\n', " "))
            .unwrap_or_default();
        println!(
            "| {} | {} | {} | {} | {last} |",
            k.label(),
            k.proxy(),
            ctx.counts.done(k),
            ctx.counts.errors(k)
        );
    }
    println!(
        "\n{} operations in {:.0} s ({:.0}/s).\n",
        ctx.counts.total(),
        elapsed.as_secs_f64(),
        ctx.counts.total() as f64 / elapsed.as_secs_f64().max(1e-9)
    );
}

fn growth(from: u64, to: u64) -> String {
    if from == 0 {
        return "n/a".to_owned();
    }
    format!("{:+.1}%", (to as f64 / from as f64 - 1.0) * 100.0)
}

fn resources_table(procs: &[Watched], warm: &Point, end: &Point, curve: &[Point]) {
    println!("### Resources\n");
    println!(
        "| proxy | metric | at rest after warm-up ({} s) | at rest at end ({} s) | min under load | max under load | growth | verdict |",
        warm.secs, end.secs
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut verdicts = Vec::new();
    for (name, pick) in procs {
        let (w, e) = (pick(warm), pick(end));
        let fds_flat = e.fds <= w.fds + FD_SLACK;
        let rss_flat = (e.rss_kib as f64) <= w.rss_kib as f64 * (1.0 + RSS_SLACK_PCT / 100.0);
        let threads_flat = e.threads <= w.threads + FD_SLACK;
        let word = |flat: bool| if flat { "flat" } else { "grows" };
        let all: Vec<Sample> = curve.iter().map(pick).collect();
        let range = |f: fn(&Sample) -> u64| {
            let min = all.iter().map(f).min().unwrap_or(0);
            let max = all.iter().map(f).max().unwrap_or(0);
            (min, max)
        };
        let (fmin, fmax) = range(|s| s.fds);
        let (rmin, rmax) = range(|s| s.rss_kib);
        let (tmin, tmax) = range(|s| s.threads);
        println!(
            "| {name} | open fds | {} | {} | {fmin} | {fmax} | {} | {} |",
            w.fds,
            e.fds,
            growth(w.fds, e.fds),
            word(fds_flat)
        );
        println!(
            "| {name} | RSS MiB | {} | {} | {} | {} | {} | {} |",
            mib(w.rss_kib),
            mib(e.rss_kib),
            mib(rmin),
            mib(rmax),
            growth(w.rss_kib, e.rss_kib),
            word(rss_flat)
        );
        println!(
            "| {name} | threads | {} | {} | {tmin} | {tmax} | {} | {} |",
            w.threads,
            e.threads,
            growth(w.threads, e.threads),
            word(threads_flat)
        );
        verdicts.push(format!("{name} {}", word(fds_flat && rss_flat)));
    }
    println!(
        "\nVerdict (flat: at most {FD_SLACK} more fds and at most {RSS_SLACK_PCT}% more RSS at rest at the end than after warm-up): {}.\n",
        verdicts.join(", ")
    );
}

/// One row per `step` seconds (about 20 rows whatever the length), for the docs.
fn curve_table(curve: &[Point], secs: u64) {
    let step = (secs / 20).max(1);
    println!("### Curve (under load, every {step} s)\n");
    println!("| s | sockproxy fds | sockproxy RSS MiB | sockproxy threads | netproxy fds | netproxy RSS MiB | netproxy threads | operations |");
    println!("|---|---|---|---|---|---|---|---|");
    for p in curve.iter().filter(|p| p.secs % step == 0) {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            p.secs,
            p.sockproxy.fds,
            mib(p.sockproxy.rss_kib),
            p.sockproxy.threads,
            p.netproxy.fds,
            mib(p.netproxy.rss_kib),
            p.netproxy.threads,
            p.done
        );
    }
    println!();
}
