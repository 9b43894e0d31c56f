//! The budget's lines on the real engine (`DOCKER_HOST`): docker CLI wall time of real
//! operations direct and through each sockproxy build, sample by sample in turn, and
//! `GET /containers/NAME/json` requests per second at 16 clients. Every container it makes is
//! named `bench-sandbox-budget-…` (under the proxy's prefix), and only those are removed: at
//! the end, on an error, and on ^C.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::bail;
use sockproxy_tests::deerflow::UPSTREAM_MOUNTS;
use sockproxy_tests::engine::TEST_IMAGE;
use sockproxy_tests::raw;
use tokio::runtime::Runtime;

use crate::budget_row::{fill, Builds, Judge, Limit, Row, CONCURRENCY};
use crate::load::{median, quantile, same};
use crate::procs::{self, listener_pid, Proc};
use crate::real::{create_on, reachable, timed};
use crate::socket::{rounds_of_loads, start_each};
use crate::Args;

/// Every container of this part's is named with this, and only these are removed.
pub const OURS: &str = "bench-sandbox-budget-";
/// The stack's containers present while `docker ps -a` is timed.
const LISTED: usize = 50;

/// The commands timed, in the table's order; `stop` and `start` are sampled as a pair.
const OPS: [&str; 5] = [
    "`docker run -d` + `docker rm -f`",
    "`docker inspect NAME`",
    "`docker ps -a` (50 of the stack's)",
    "`docker stop -t 0 NAME`",
    "`docker start NAME`",
];

/// What one sample runs: one timed command or pair per op group.
#[derive(Debug, Clone, Copy)]
enum Group {
    RunRm,
    Inspect,
    Ps,
    StopStart,
}

const GROUPS: [Group; 4] = [Group::RunRm, Group::Inspect, Group::Ps, Group::StopStart];

/// With `--bind-root`: the `--mount` arguments of deer-flow's thread binds from it (each
/// directory made), as its gateway's `docker run` passes them.
fn thread_binds(args: &Args) -> anyhow::Result<Vec<String>> {
    let Some(root) = &args.bind_root else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (src, dst, ro) in UPSTREAM_MOUNTS {
        std::fs::create_dir_all(root.join(src))?;
        out.push("--mount".to_owned());
        let ro = if ro { ",readonly" } else { "" };
        out.push(format!(
            "type=bind,src={}/{src},dst={dst}{ro}",
            root.display()
        ));
    }
    Ok(out)
}

/// One sample of `group` through `sock`: (index into `OPS`, wall time) for each command timed;
/// `binds` are the run's `--mount` arguments.
fn sample(
    group: Group,
    sock: &Path,
    name: &str,
    binds: &[String],
) -> anyhow::Result<Vec<(usize, Duration)>> {
    let inspected = format!("{OURS}inspect");
    let cycled = format!("{OURS}cycle");
    Ok(match group {
        Group::RunRm => {
            let mut run: Vec<&str> = vec!["run", "-d", "--name", name];
            run.extend(binds.iter().map(String::as_str));
            run.extend([TEST_IMAGE, "sleep", "600"]);
            let run = timed(sock, &run)?;
            vec![(0, run + timed(sock, &["rm", "-f", name])?)]
        }
        Group::Inspect => vec![(1, timed(sock, &["inspect", &inspected])?)],
        Group::Ps => vec![(2, timed(sock, &["ps", "-a"])?)],
        // `sleep` as PID 1 ignores SIGTERM, so without `-t 0` every stop would be the 10 s
        // grace period and say nothing about the proxy.
        Group::StopStart => vec![
            (3, timed(sock, &["stop", "-t", "0", &cycled])?),
            (4, timed(sock, &["start", &cycled])?),
        ],
    })
}

/// Removes every container named `OURS…` on `engine`, and nothing else.
fn remove_ours(engine: &Path) {
    let all = raw::get(engine, "/containers/json?all=1").map(|r| r.json());
    for c in all
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
    {
        let ours = c["Names"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_str())
            .any(|n| n.starts_with(&format!("/{OURS}")));
        if let (true, Some(id)) = (ours, c["Id"].as_str()) {
            let _ = raw::request(engine, "DELETE", &format!("/containers/{id}?force=1"), None);
        }
    }
    // The stack's own network, which its proxies made for those containers.
    let net = format!("/networks/{}net", crate::socket::PREFIX);
    let _ = raw::request(engine, "DELETE", &net, None);
}

/// The rows of the real-engine lines, measured or saying why not.
pub fn rows(rt: &Runtime, args: &Args, builds: &Builds, dir: &Path) -> anyhow::Result<Vec<Row>> {
    let blank = blank_rows();
    let Some(engine) = reachable("the budget's real-engine lines")? else {
        let why = "no engine at DOCKER_HOST";
        return Ok(blank.into_iter().map(|r| r.unmeasured(why)).collect());
    };
    remove_ours(&engine);
    let cleanup = engine.clone();
    procs::on_interrupt(move || remove_ours(&cleanup));
    let result = measure(rt, args, builds, dir, &engine, blank);
    remove_ours(&engine);
    result
}

/// The lines before measuring: each command's p50 and p99, then the inspect load.
fn blank_rows() -> Vec<Row> {
    let mut rows = Vec::new();
    for op in OPS {
        for q in ["p50", "p99"] {
            rows.push(Row::new(
                "Real operations: p50 and p99 within 5% of direct",
                format!("{op}, {q} ms"),
                Judge::Ratio(Limit::AtMost(1.05)),
            ));
        }
    }
    rows.push(Row::new(
        "`GET /containers/NAME/json` ≥ 0.8× direct req/s at c=16",
        format!("`GET /containers/NAME/json`, {CONCURRENCY} clients, req/s"),
        Judge::Ratio(Limit::AtLeast(0.8)),
    ));
    rows
}

fn measure(
    rt: &Runtime,
    args: &Args,
    builds: &Builds,
    dir: &Path,
    engine: &Path,
    blank: Vec<Row>,
) -> anyhow::Result<Vec<Row>> {
    for i in 0..LISTED {
        create_on(engine, &format!("{OURS}list-{i}"), false)?;
    }
    create_on(engine, &format!("{OURS}inspect"), false)?;
    create_on(engine, &format!("{OURS}cycle"), true)?;
    let mut flags = args.sockproxy_flag.clone();
    if let Some(root) = &args.bind_root {
        flags.extend(["--allow-bind-root".to_owned(), root.display().to_string()]);
        println!(
            "`docker run -d` binds deer-flow's {} thread directories from `{}`, each proxy's bind root.\n",
            UPSTREAM_MOUNTS.len(),
            root.display()
        );
    }
    let proxies = start_each(&builds.each(), dir, engine, "budget-real", &flags)?;
    let mut socks: Vec<PathBuf> = vec![engine.to_owned()];
    socks.extend(proxies.iter().map(|p| p.socket.clone()));
    let listed = raw::get(engine, "/containers/json?all=1")?
        .json()
        .as_array()
        .map_or(0, Vec::len);
    let version = raw::get(engine, "/version")?.json();
    println!(
        "Real engine: Docker {} (API {}); it holds {listed} containers, {} of them this part's. CLI times include the CLI's own start.\n",
        version["Version"].as_str().unwrap_or("?"),
        version["ApiVersion"].as_str().unwrap_or("?"),
        LISTED + 2
    );
    let times = cli_times(args, &socks)?;
    let mut rows = Vec::new();
    let mut blank = blank.into_iter();
    for per_route in &times {
        for q in [0.50, 0.99] {
            let Some(row) = blank.next() else { break };
            let figures: Vec<f64> = per_route
                .iter()
                .map(|v| quantile(v, q).as_secs_f64() * 1e3)
                .collect();
            let mut row = row;
            let n = per_route.iter().map(Vec::len).min().unwrap_or(0);
            row.measure = format!("{} (n={n})", row.measure);
            row.reference = figures.first().copied();
            rows.push(fill(row, builds, &figures[1..]));
        }
    }
    let Some(mut row) = blank.next() else {
        return Ok(rows);
    };
    let engine_pid = rt.block_on(listener_pid(engine));
    let mut ways: Vec<(&Path, Option<&Proc>)> = vec![(engine, None)];
    ways.extend(proxies.iter().map(|p| (p.socket.as_path(), Some(&p.proc))));
    let target = format!("/containers/{OURS}inspect/json");
    let next = same("GET", &target);
    let cells = rounds_of_loads(
        rt,
        engine_pid,
        &ways,
        &next,
        CONCURRENCY,
        args.real_requests,
        args.rounds,
    );
    let mut rps = Vec::new();
    for loads in cells {
        let m = median(loads, |l| l.rps);
        if m.failed > 0 || m.refused > 0 {
            bail!(
                "GET {target}: {} clients failed, {} error answers",
                m.failed,
                m.refused
            );
        }
        rps.push(m.rps);
    }
    row.reference = rps.first().copied();
    rows.push(fill(row, builds, &rps[1..]));
    Ok(rows)
}

/// `times[op][route]`, sorted: each group sampled `--budget-samples` times per route, the
/// routes taking turns within a sample (each sample starting one route later), until the
/// group's `--budget-time` is spent.
fn cli_times(args: &Args, socks: &[PathBuf]) -> anyhow::Result<Vec<Vec<Vec<Duration>>>> {
    let mut times = vec![vec![Vec::new(); socks.len()]; OPS.len()];
    let cap = Duration::from_secs(args.budget_time);
    let binds = thread_binds(args)?;
    for group in GROUPS {
        let start = Instant::now();
        for i in 0..args.budget_samples {
            if start.elapsed() >= cap {
                eprintln!("NOTICE: bench: {group:?} stopped at {i} samples, its time cap");
                break;
            }
            for k in 0..socks.len() {
                let r = (k + i) % socks.len();
                let name = format!("{OURS}run-{r}-{i}");
                for (op, took) in sample(group, &socks[r], &name, &binds)? {
                    times[op][r].push(took);
                }
            }
        }
    }
    for per_route in &mut times {
        for v in per_route.iter_mut() {
            v.sort();
        }
    }
    Ok(times)
}
