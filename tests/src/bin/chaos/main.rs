//! `chaos`: several stacks on one Docker host, one hostile tenant in each, processes killed and
//! the engine restarted, and what the well-behaved tenants noticed. Starts its own dockerd (in
//! the network namespace it runs in, which must not be the host's: `.ci/chaos.sh` makes one),
//! N stacks of real `sockproxy` and `lifecycle serve` processes, a quiet phase of well-behaved
//! traffic alone, then the chaos phase, then teardown; prints a report and one summary line,
//! `chaos: N stacks, S s, seed K, cross-stack C, lost L, leaked X, panics P`, and exits 0 only
//! when all four counts are 0.
//! Usage: `.ci/chaos.sh --stacks N --seconds S [--seed K]` (as root).

mod attribute;
mod dockerd;
mod faults;
mod hostile;
mod hostile_egress;
mod hostile_moves;
mod hostile_sockets;
mod measure;
mod orphans;
mod plot;
mod polite;
mod polite_cli;
mod report;
mod stacks;
mod teardown;
mod watch;

// The bench's process handling (start with a log, wait until answering, memory, CPU).
#[allow(dead_code)]
#[path = "../bench/procs.rs"]
mod procs;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;

/// A chaos soak: well-behaved and hostile tenants in N stacks on one engine, with faults.
#[derive(Debug, Parser)]
struct Args {
    /// Stacks (each a sockproxy and a `lifecycle serve`; every second one in restricted mode).
    #[arg(long, env = "CHAOS_STACKS", default_value_t = 4)]
    stacks: usize,
    /// Seconds of the chaos phase.
    #[arg(long, env = "CHAOS_SECONDS", default_value_t = 600)]
    seconds: u64,
    /// Seed of every random choice (fault order, kinds, stacks, gaps, attack order) [default:
    /// from the clock, printed].
    #[arg(long, env = "CHAOS_SEED")]
    seed: Option<u64>,
    /// Seconds of the quiet phase before it (well-behaved traffic alone) [default: a quarter
    /// of --seconds, 20 to 120].
    #[arg(long, env = "CHAOS_QUIET_SECONDS")]
    quiet_seconds: Option<u64>,
    /// The recovery window W: seconds after a fault (and the restart of what it killed) at the
    /// end of which every held sandbox must answer Running (its URL answering) or 404.
    #[arg(long, env = "CHAOS_RECOVERY_WINDOW", default_value_t = 30)]
    recovery_window: u64,
    /// Containers each stack's proxy lets it hold (`sockproxy --max-containers`).
    #[arg(long, env = "CHAOS_MAX_CONTAINERS", default_value_t = 10)]
    max_containers: usize,
    /// dockerd's `--default-address-pool` base, cut in /24s (room for every stack's networks).
    #[arg(long, env = "CHAOS_ADDRESS_POOL", default_value = "10.123.0.0/16")]
    address_pool: String,
    /// The docker CLI the well-behaved traffic replays deer-flow's local backend with.
    #[arg(long, env = "CHAOS_DOCKER_CLI", default_value = "/usr/bin/docker")]
    docker_cli: PathBuf,
    /// Where sockproxy and lifecycle-cli are [default: beside this program].
    #[arg(long, env = "CHAOS_BIN_DIR")]
    bin_dir: Option<PathBuf>,
    /// The report folder (report.md, latencies.csv, host.csv, latency.png, host.png)
    /// [default: ./chaos-report-SEED].
    #[arg(long, env = "CHAOS_REPORT")]
    report: Option<PathBuf>,
    /// Only draw the plots of a finished run's report folder again (from its CSV files), then
    /// exit; nothing is started.
    #[arg(long, env = "CHAOS_PLOT", value_name = "DIR")]
    plot: Option<PathBuf>,
    /// A hostile move the tenants leave out (repeatable, by its name in the report, e.g.
    /// `--skip-move "log flood"`), to find which move costs the well-behaved stacks their
    /// latency; the run's counts then judge only the moves made.
    #[arg(
        long = "skip-move",
        env = "CHAOS_SKIP_MOVES",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    skip_moves: Vec<String>,
}

/// The run's settings, checked.
#[derive(Debug, Clone)]
pub struct Config {
    pub stacks: usize,
    pub seconds: u64,
    pub seed: u64,
    pub quiet: Duration,
    pub window: Duration,
    pub max_containers: usize,
    pub address_pool: String,
    pub bin_dir: PathBuf,
    pub docker_cli: PathBuf,
    pub report: PathBuf,
    /// The hostile moves left out (`--skip-move`), each a name of `hostile_moves::MOVES`.
    pub skip_moves: Vec<String>,
}

impl Config {
    fn from_args(a: Args) -> anyhow::Result<Self> {
        if !(1..=40).contains(&a.stacks) {
            bail!("--stacks {}: 1 to 40", a.stacks);
        }
        if a.seconds < 30 {
            bail!("--seconds {}: at least 30", a.seconds);
        }
        if !(5..=600).contains(&a.recovery_window) {
            bail!("--recovery-window {}: 5 to 600", a.recovery_window);
        }
        if !(6..=500).contains(&a.max_containers) {
            bail!("--max-containers {}: 6 to 500", a.max_containers);
        }
        let seed = a.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        });
        let quiet = a.quiet_seconds.unwrap_or((a.seconds / 4).clamp(20, 120));
        let bin_dir = a.bin_dir.unwrap_or_else(sockproxy_tests::bins::dir);
        for b in ["sockproxy", "lifecycle-cli"] {
            if !bin_dir.join(b).is_file() {
                bail!(
                    "{} is not built (cargo build -p sockproxy -p sockproxy-tests --bins)",
                    bin_dir.join(b).display()
                );
            }
        }
        for m in &a.skip_moves {
            if !hostile_moves::MOVES.iter().any(|known| known.name == m) {
                let names: Vec<&str> = hostile_moves::MOVES.iter().map(|m| m.name).collect();
                bail!(
                    "--skip-move {m:?}: no such move (moves: {})",
                    names.join(", ")
                );
            }
        }
        if !a.docker_cli.is_file() {
            bail!(
                "--docker-cli {}: not found (apt-get install docker.io)",
                a.docker_cli.display()
            );
        }
        Ok(Self {
            stacks: a.stacks,
            seconds: a.seconds,
            seed,
            quiet: Duration::from_secs(quiet),
            window: Duration::from_secs(a.recovery_window),
            max_containers: a.max_containers,
            address_pool: a.address_pool,
            bin_dir,
            docker_cli: a.docker_cli,
            report: a
                .report
                .unwrap_or_else(|| PathBuf::from(format!("chaos-report-{seed}"))),
            skip_moves: a.skip_moves,
        })
    }
}

/// Copies each stack's proxy and provider logs into `into/sK/`, before the stacks' temporary
/// folder goes.
fn keep_stack_logs(stacks: &stacks::Stacks, into: &std::path::Path) {
    for s in &stacks.all {
        let to = into.join(format!("s{}", s.k));
        let Ok(entries) = std::fs::read_dir(&s.dir) else {
            continue;
        };
        let _ = std::fs::create_dir_all(&to);
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "log") {
                let _ = std::fs::copy(&path, to.join(e.file_name()));
            }
        }
    }
    println!("the stacks' logs: {}", into.display());
}

/// The four counts the summary line carries.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub cross: u64,
    pub lost: u64,
    pub leaked: u64,
    pub panics: u64,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let args = Args::parse();
    if let Some(dir) = &args.plot {
        for p in plot::draw(dir)? {
            println!("plot: {}", p.display());
        }
        return Ok(());
    }
    let cfg = Config::from_args(args)?;
    dockerd::refuse_host_namespace()?;
    let counts = run(&cfg)?;
    println!(
        "chaos: {} stacks, {} s, seed {}, cross-stack {}, lost {}, leaked {}, panics {}",
        cfg.stacks, cfg.seconds, cfg.seed, counts.cross, counts.lost, counts.leaked, counts.panics
    );
    if counts.cross + counts.lost + counts.leaked + counts.panics > 0 {
        std::process::exit(1);
    }
    Ok(())
}

fn run(cfg: &Config) -> anyhow::Result<Counts> {
    println!(
        "chaos: seed {} (replay with --seed {}), {} stacks, quiet {} s, chaos {} s, W = {} s",
        cfg.seed,
        cfg.seed,
        cfg.stacks,
        cfg.quiet.as_secs(),
        cfg.seconds,
        cfg.window.as_secs()
    );
    std::fs::create_dir_all(&cfg.report).context("report folder")?;
    let mut engine = dockerd::Dockerd::start(&cfg.address_pool)?;
    let sock = engine.socket();
    sockproxy_tests::engine::ensure_image(&sock);
    let restricted = cfg.stacks > 1;
    let sidecar = restricted.then(|| sockproxy_tests::engine::ensure_netproxy_image(&sock));
    let watcher = watch::Watcher::start(&sock);
    let stacks = Arc::new(stacks::Stacks::start(cfg, &sock, sidecar.as_deref())?);
    watcher.set_canaries(stacks.canaries());
    for s in &stacks.all {
        polite::make_held(s)?;
    }
    let log = Arc::new(measure::Log::default());
    let sampler = measure::Sampler::start(engine.pid_file(), stacks.clone());

    let t0 = Instant::now();
    println!("== quiet phase: well-behaved traffic alone");
    let quiet_end = Instant::now() + cfg.quiet;
    polite::run_all(
        &stacks,
        &log,
        &cfg.docker_cli,
        measure::Phase::Quiet,
        quiet_end,
    );

    println!("== chaos phase: hostile tenants, faults");
    let end = Instant::now() + Duration::from_secs(cfg.seconds);
    let stop = Arc::new(AtomicBool::new(false));
    let host_canary = hostile_egress::HostCanary::start(
        format!(
            "HOST-CANARY-{}-{:016x}",
            cfg.seed,
            stacks::canary_salt(cfg.seed, 999)
        ),
        stop.clone(),
    )
    .context("host canary")?;
    let hostiles = hostile::start_all(&stacks, cfg, &stop, &watcher, &host_canary, log.start);
    let fault_stacks = stacks.clone();
    let run_start = log.start;
    let (fault_cfg, fault_watcher, fault_stop) = (cfg.clone(), watcher.clone(), stop.clone());
    let faults = std::thread::spawn(move || {
        let (lost, spans) = faults::run(
            &fault_cfg,
            &fault_stacks,
            &mut engine,
            &fault_watcher,
            end,
            &fault_stop,
            run_start,
        );
        (engine, lost, spans)
    });
    polite::run_all(&stacks, &log, &cfg.docker_cli, measure::Phase::Chaos, end);
    stop.store(true, Ordering::SeqCst);
    let hostile_done: Vec<hostile::Tally> = hostiles
        .into_iter()
        .map(|h| h.join().unwrap_or_default())
        .collect();
    let (mut engine, lost, fault_spans) = faults
        .join()
        .map_err(|_| anyhow::anyhow!("the fault thread panicked"))?;
    let host = sampler.stop();
    let cross = watcher.stop();

    println!("== teardown");
    let t1 = Instant::now();
    let (mut leaks, notes) = teardown::run(
        &stacks,
        &engine.socket(),
        &engine.root_dir(),
        engine.restarted_at(),
        &watcher,
    );
    // The engine goes now, so what of it outlives it counts too.
    leaks.extend(engine.shut_down());
    engine.save_log(&cfg.report.join("dockerd.log"));
    if !leaks.is_empty() {
        // The stacks' own logs go with the stacks' folder: a leak's cause is in them.
        keep_stack_logs(&stacks, &cfg.report.join("stacks"));
    }
    for l in leaks.iter().filter(|l| l.starts_with("process ")) {
        println!("LEAKED: {l}");
    }
    println!(
        "phases took {:.0} s, teardown {:.0} s",
        t1.duration_since(t0).as_secs_f64(),
        t1.elapsed().as_secs_f64()
    );
    let panics = stacks.panics();
    let counts = Counts {
        cross: cross.count + hostile_done.iter().map(|h| h.cross).sum::<u64>(),
        lost,
        leaked: leaks.len() as u64,
        panics: panics.len() as u64,
    };
    report::write(
        cfg,
        &report::Inputs {
            log: &log,
            host: &host,
            hostile: &hostile_done,
            fault_spans: &fault_spans,
            cross: &cross,
            leaks: &leaks,
            notes: &notes,
            panics: &panics,
            counts,
        },
    )?;
    // A plot that cannot be drawn costs the report its pictures, not the run its counts.
    match plot::draw(&cfg.report) {
        Ok(paths) => paths.iter().for_each(|p| println!("plot: {}", p.display())),
        Err(e) => println!("plots not drawn: {e:#}"),
    }
    drop(engine);
    Ok(counts)
}
