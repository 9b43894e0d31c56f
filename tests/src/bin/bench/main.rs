//! `bench`: what the proxies cost, side by side with going direct and with the alternatives,
//! in one run. Starts every program it measures (our binaries, the fake engine, HAProxy,
//! tinyproxy, squid) on Unix sockets and loopback, runs bounded loads (a count and a time limit
//! each), stops everything, and prints one Markdown table per part with medians over rounds.
//! The `budget` part (not run by default) judges issue 39's performance budget, comparing a
//! before and an after sockproxy binary in one run; the `haproxy` part (not run by default)
//! measures what HAProxy in front of the provisioners adds per call (issue 53).
//! Usage: `cargo run --release -p sockproxy-tests --bin bench [-- --help]`.

mod budget;
mod budget_real;
mod budget_row;
mod footprint;
mod haproxy;
mod load;
mod procs;
mod real;
mod soak;
mod socket;
mod traffic;
mod tunnel;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, ValueEnum};

/// Benchmarks sockproxy and netproxy against direct access and common alternatives.
#[derive(Debug, Parser)]
pub struct Args {
    /// Requests per load in part 1 and in the budget's fake-engine loads (each load also stops
    /// after 20 s).
    #[arg(long, env = "BENCH_REQUESTS", default_value_t = 4000)]
    requests: usize,
    /// Requests measured in part 1.
    #[arg(
        long,
        env = "BENCH_TARGETS",
        value_enum,
        value_delimiter = ',',
        default_value = "ping,list,stop"
    )]
    targets: Vec<Target>,
    /// Concurrent clients per load in part 1.
    #[arg(
        long,
        env = "BENCH_CONCURRENCY",
        value_delimiter = ',',
        default_value = "1,16,64"
    )]
    concurrency: Vec<usize>,
    /// Rounds per cell (loads, the routes taking turns); the tables show medians.
    #[arg(long, env = "BENCH_ROUNDS", default_value_t = 3)]
    rounds: usize,
    /// Container counts for the list-filtering part.
    #[arg(
        long,
        env = "BENCH_LIST_SIZES",
        value_delimiter = ',',
        default_value = "10,1000,10000"
    )]
    list_sizes: Vec<usize>,
    /// Requests per load of part 1 on the real engine (`/_ping` and the list), and of the
    /// budget's `GET /containers/NAME/json`.
    #[arg(long, env = "BENCH_REAL_REQUESTS", default_value_t = 2000)]
    real_requests: usize,
    /// Requests per load of part 1's stop/start by name on the real engine (each one stops or
    /// starts a container).
    #[arg(long, env = "BENCH_REAL_STOPS", default_value_t = 200)]
    real_stops: usize,
    /// Concurrent clients per load of part 1 on the real engine.
    #[arg(
        long,
        env = "BENCH_REAL_CONCURRENCY",
        value_delimiter = ',',
        default_value = "1,16"
    )]
    real_concurrency: Vec<usize>,
    /// A flag for every sockproxy the bench starts (repeatable), e.g.
    /// `--sockproxy-flag=--no-name-cache` to compare.
    #[arg(
        long,
        env = "BENCH_SOCKPROXY_FLAGS",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    sockproxy_flag: Vec<String>,
    /// Rounds of docker CLI commands against the real engine.
    #[arg(long, env = "BENCH_REAL_ROUNDS", default_value_t = 5)]
    real_rounds: usize,
    /// Megabytes (10^6 bytes) per tunnel download.
    #[arg(long, env = "BENCH_TUNNEL_MB", default_value_t = 500)]
    tunnel_mb: u64,
    /// Tunnel set-ups timed one after another, per route.
    #[arg(long, env = "BENCH_SETUPS", default_value_t = 500)]
    setups: usize,
    /// Concurrent connections held open for the footprint part and the budget's RSS line.
    #[arg(long, env = "BENCH_CONNECTIONS", default_value_t = 256)]
    connections: usize,
    /// Parts to run; `budget` only when named.
    #[arg(
        long,
        env = "BENCH_PARTS",
        value_enum,
        value_delimiter = ',',
        default_value = DEFAULT_PARTS
    )]
    parts: Vec<Part>,
    /// The budget part's "before" sockproxy binary [default: none, its column stays empty].
    #[arg(long, env = "BENCH_BEFORE_BIN")]
    before_bin: Option<PathBuf>,
    /// The budget part's "after" sockproxy binary [default: sockproxy in the binary
    /// directory, see `--bin-dir`].
    #[arg(long, env = "BENCH_AFTER_BIN")]
    after_bin: Option<PathBuf>,
    /// Samples of each docker CLI command per route in the budget part.
    #[arg(long, env = "BENCH_BUDGET_SAMPLES", default_value_t = 100)]
    budget_samples: usize,
    /// Seconds each docker CLI command of the budget part may take over all its samples and
    /// routes; it stops sampling there.
    #[arg(long, env = "BENCH_BUDGET_TIME", default_value_t = 300)]
    budget_time: u64,
    /// A directory on a nosuid,nodev mount: the budget's `docker run` then binds deer-flow's
    /// 11 thread directories from it (made there), and each sockproxy has it as its
    /// --allow-bind-root, pinning them (issue 46) [default: no binds].
    #[arg(long, env = "BENCH_BIND_ROOT")]
    bind_root: Option<PathBuf>,
    /// Containers on the fake engine for the budget's list-filtering line (the budget is set
    /// at 10,000; the smoke test lists fewer).
    #[arg(long, env = "BENCH_BUDGET_LIST_SIZE", default_value_t = 10_000)]
    budget_list_size: usize,
    /// Calls per route and round in the `haproxy` part.
    #[arg(long, env = "BENCH_HAPROXY_CALLS", default_value_t = 2000)]
    haproxy_calls: usize,
    /// Directory with the sockproxy, netproxy, fake-dockerd and lifecycle-cli binaries [default: build them
    /// with this bench's profile, beside it].
    #[arg(long, env = "BENCH_BIN_DIR")]
    bin_dir: Option<PathBuf>,
    /// Instead of the parts, run only the soak: mixed traffic through sockproxy and netproxy
    /// for this many seconds, watching their fds, RSS and threads.
    #[arg(long, env = "BENCH_SOAK")]
    soak: Option<u64>,
}

/// Part 1's requests: `HEAD /_ping`, `GET /containers/json?all=1`, `POST /containers/{id}/stop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Target {
    Ping,
    List,
    Stop,
}

/// The parts run when `--parts` is not given: all but `budget`.
const DEFAULT_PARTS: &str = "requests,lists,real,tunnels,footprint";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Part {
    Requests,
    Lists,
    Real,
    Tunnels,
    Footprint,
    /// Issue 39's performance budget: one table, direct vs `--before-bin` vs `--after-bin`.
    Budget,
    /// Issue 53: one provisioner called directly and through HAProxy (the shipped config).
    Haproxy,
}

fn header(args: &Args) {
    println!("# Benchmarks\n");
    println!(
        "Machine: {} cores. Load generator: hyper HTTP/1.1 clients in the bench process (kept-alive connections, one per concurrent client); every program measured runs as its own process on the same cores.",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let versions: Vec<String> = [
        ("haproxy", &["-v"][..]),
        ("tinyproxy", &["-v"][..]),
        ("squid", &["-v"][..]),
    ]
    .iter()
    .filter_map(|(p, a)| procs::installed(p).map(|path| procs::version(&path, a)))
    .collect();
    if !versions.is_empty() {
        println!("Alternatives: {}.", versions.join("; "));
    }
    let sizes: Vec<String> = args.list_sizes.iter().map(ToString::to_string).collect();
    let conc: Vec<String> = args.concurrency.iter().map(ToString::to_string).collect();
    let names: Vec<String> = args
        .parts
        .iter()
        .filter_map(|p| p.to_possible_value().map(|v| v.get_name().to_owned()))
        .collect();
    let mut parts = if names.join(",") == DEFAULT_PARTS {
        String::new()
    } else {
        format!(" --parts {}", names.join(","))
    };
    if args.parts.contains(&Part::Budget) {
        for (flag, bin) in [
            ("--before-bin", &args.before_bin),
            ("--after-bin", &args.after_bin),
        ] {
            if let Some(bin) = bin {
                parts.push_str(&format!(" {flag} {}", bin.display()));
            }
        }
        parts.push_str(&format!(
            " --budget-samples {} --budget-time {} --budget-list-size {}",
            args.budget_samples, args.budget_time, args.budget_list_size
        ));
        if let Some(root) = &args.bind_root {
            parts.push_str(&format!(" --bind-root {}", root.display()));
        }
    }
    if args.parts.contains(&Part::Haproxy) {
        parts.push_str(&format!(" --haproxy-calls {}", args.haproxy_calls));
    }
    if args.targets.len() != Target::value_variants().len() {
        let names: Vec<String> = args
            .targets
            .iter()
            .filter_map(|t| t.to_possible_value().map(|v| v.get_name().to_owned()))
            .collect();
        parts.push_str(&format!(" --targets {}", names.join(",")));
    }
    for f in &args.sockproxy_flag {
        parts.push_str(&format!(" --sockproxy-flag={f}"));
    }
    let real_conc: Vec<String> = args
        .real_concurrency
        .iter()
        .map(ToString::to_string)
        .collect();
    println!(
        "\nReproduce: `cargo run --release -p sockproxy-tests --bin bench -- --requests {} --concurrency {} --rounds {} --list-sizes {} --real-requests {} --real-stops {} --real-concurrency {} --real-rounds {} --tunnel-mb {} --setups {} --connections {}{parts}`\n",
        args.requests,
        conc.join(","),
        args.rounds,
        sizes.join(","),
        args.real_requests,
        args.real_stops,
        real_conc.join(","),
        args.real_rounds,
        args.tunnel_mb,
        args.setups,
        args.connections
    );
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.rounds >= 1
            && args.real_rounds >= 1
            && args.budget_samples >= 1
            && args.haproxy_calls >= 1,
        "--rounds, --real-rounds, --budget-samples and --haproxy-calls must be at least 1"
    );
    let bins = procs::bin_dir(args.bin_dir.clone())?;
    let dir = tempfile::tempdir().context("a temporary directory for sockets and logs")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    rt.spawn(async {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        // Drop never runs on a signal; without this the programs would outlive the run.
        procs::stop_all();
        std::process::exit(130);
    });
    if let Some(secs) = args.soak {
        anyhow::ensure!(secs >= 2, "--soak needs at least 2 seconds");
        println!("# Soak\n");
        println!(
            "Machine: {} cores.\n\nReproduce: `cargo run --release -p sockproxy-tests --bin bench -- --soak {secs}`\n",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        return soak::soak(&rt, secs, &bins, dir.path());
    }
    header(&args);
    for part in &args.parts {
        match part {
            Part::Requests => {
                socket::per_request(&rt, &args, &bins, dir.path())?;
                real::per_request(&rt, &args, &bins, dir.path())?;
            }
            Part::Lists => socket::list_filtering(&rt, &args, &bins, dir.path())?,
            Part::Real => real::real_engine(&args, &bins, dir.path())?,
            Part::Tunnels => tunnel::tunnels(&rt, &args, &bins, dir.path())?,
            Part::Footprint => footprint::footprint(&rt, &args, &bins, dir.path())?,
            Part::Budget => budget::budget(&rt, &args, &bins, dir.path())?,
            Part::Haproxy => haproxy::haproxy(&args, &bins, dir.path())?,
        }
    }
    Ok(())
}
