//! Parts 1 and 2: the Docker API path. Starts the fake engine, sockproxy and an HAProxy
//! path-ACL proxy as separate programs on Unix sockets, then measures each route with the same
//! loads: per-request cost, and list filtering at scale with each program's peak memory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use sockproxy_tests::raw;
use tokio::runtime::Runtime;

use crate::load::{load, load_with, median, ms, same, Load, Requests};
use crate::procs::{
    cpu_of, idle_pct, installed, listener_pid, machine_ticks, mib, own_cpu, unix_answers, Proc,
};
use crate::{Args, Target};

pub const PREFIX: &str = "bench-";
const START_LIMIT: Duration = Duration::from_secs(15);

/// A program listening on a Unix socket.
#[derive(Debug)]
pub struct Served {
    pub proc: Proc,
    pub socket: PathBuf,
}

pub fn start_fake(bins: &Path, dir: &Path, tag: &str) -> anyhow::Result<Served> {
    let socket = dir.join(format!("engine-{tag}.sock"));
    let mut cmd = Command::new(bins.join("fake-dockerd"));
    cmd.arg("--listen").arg(&socket);
    let mut proc = Proc::spawn("fake-dockerd", cmd, dir.join(format!("engine-{tag}.log")))?;
    proc.wait(START_LIMIT, || unix_answers(&socket))?;
    Ok(Served { proc, socket })
}

/// sockproxy as deployed: default logging (one decision line per request) to a file, with
/// `extra` flags (`--sockproxy-flag`).
pub fn start_sockproxy(
    bins: &Path,
    dir: &Path,
    engine: &Path,
    tag: &str,
    extra: &[String],
) -> anyhow::Result<Served> {
    start_sockproxy_bin(&bins.join("sockproxy"), dir, engine, tag, extra)
}

/// `start_sockproxy` with the binary `bin`, for the budget's before and after builds.
pub fn start_sockproxy_bin(
    bin: &Path,
    dir: &Path,
    engine: &Path,
    tag: &str,
    extra: &[String],
) -> anyhow::Result<Served> {
    let socket = dir.join(format!("sockproxy-{tag}.sock"));
    let mut cmd = Command::new(bin);
    cmd.arg("--listen")
        .arg(&socket)
        .arg("--upstream")
        .arg(format!("unix://{}", engine.display()))
        .args(["--prefix", PREFIX])
        .args(extra)
        // Every build measured shares the prefix and its containers: the stack's totals are
        // lifted out of the way (by variable, which an older build ignores).
        .env("SOCKPROXY_MAX_CONTAINERS", "100000")
        .env("SOCKPROXY_MAX_MEMORY", "1p");
    let mut proc = Proc::spawn("sockproxy", cmd, dir.join(format!("sockproxy-{tag}.log")))?;
    proc.wait(START_LIMIT, || unix_answers(&socket))?;
    Ok(Served { proc, socket })
}

/// `start_sockproxy_bin` for each named build, in turn order, tagged `{tag}-{name}`.
pub fn start_each(
    builds: &[(&str, &Path)],
    dir: &Path,
    engine: &Path,
    tag: &str,
    extra: &[String],
) -> anyhow::Result<Vec<Served>> {
    builds
        .iter()
        .map(|(name, bin)| start_sockproxy_bin(bin, dir, engine, &format!("{tag}-{name}"), extra))
        .collect()
}

/// An HAProxy configuration in the style of the widely used HAProxy socket proxies: a path
/// allowlist by regular expression per method class, everything else 403, kept-alive
/// connections to the engine (HAProxy's default `http-reuse safe`).
fn haproxy_config(listen: &Path, engine: &Path) -> String {
    format!(
        r#"global
    maxconn 4096
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout tunnel 1h
frontend api
    bind unix@{listen}
    acl reading method GET HEAD
    acl writing method POST
    acl ping path,url_dec -m reg -i ^(/v[0-9.]+)?/_ping$
    acl containers path,url_dec -m reg -i ^(/v[0-9.]+)?/containers(/|$)
    http-request allow if ping
    http-request allow if containers reading
    http-request allow if containers writing
    http-request deny deny_status 403
    default_backend engine
backend engine
    server engine unix@{engine}
"#,
        listen = listen.display(),
        engine = engine.display()
    )
}

/// HAProxy in front of `engine`, or why not.
pub fn start_haproxy(dir: &Path, engine: &Path, tag: &str) -> Result<Served, String> {
    let bin = installed("haproxy").ok_or("not installed (Debian: apt-get install haproxy)")?;
    let socket = dir.join(format!("haproxy-{tag}.sock"));
    let cfg = dir.join(format!("haproxy-{tag}.cfg"));
    std::fs::write(&cfg, haproxy_config(&socket, engine)).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(bin);
    cmd.arg("-db").arg("-f").arg(&cfg);
    let mut proc = Proc::spawn("haproxy", cmd, dir.join(format!("haproxy-{tag}.log")))
        .map_err(|e| e.to_string())?;
    proc.wait(START_LIMIT, || unix_answers(&socket))
        .map_err(|e| format!("did not start: {e}"))?;
    Ok(Served { proc, socket })
}

/// Creates container `name` on the fake engine; its ID.
pub fn create(engine: &Path, name: &str) -> anyhow::Result<String> {
    let body = serde_json::json!({ "Image": "busybox", "Cmd": ["sleep", "600"] }).to_string();
    let r = raw::request(
        engine,
        "POST",
        &format!("/containers/create?name={name}"),
        Some(body.as_bytes()),
    )
    .with_context(|| format!("creating {name}"))?;
    r.json()["Id"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("creating {name}: {}", r.text()))
}

/// `n` containers, half of them in the benchmark stack's scope.
pub fn populate(engine: &Path, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        let kind = if i % 2 == 0 {
            "bench-sandbox-"
        } else {
            "other-"
        };
        create(engine, &format!("{kind}{i}"))?;
    }
    Ok(())
}

fn rps_cell(l: &Load) -> String {
    let mut cell = format!("{:.0}", l.rps);
    if l.failed > 0 {
        cell.push_str(&format!(" ({} clients failed)", l.failed));
    }
    if l.refused > 0 {
        cell.push_str(&format!(" ({} error answers)", l.refused));
    }
    cell
}

/// One figure per route, `direct / sockproxy / HAProxy`.
fn per_route(loads: &[Load], figure: impl Fn(&Load) -> f64) -> String {
    loads
        .iter()
        .map(|l| format!("{:.1}", figure(l)))
        .collect::<Vec<_>>()
        .join(" / ")
}

fn cpu_cell(l: &Load) -> String {
    format!("{:.1}", l.cpu_per_req.as_secs_f64() * 1e6)
}

/// Part 1: per-request cost, direct vs sockproxy vs HAProxy, on the fake engine.
pub fn per_request(rt: &Runtime, args: &Args, bins: &Path, dir: &Path) -> anyhow::Result<()> {
    let engine = start_fake(bins, dir, "part1")?;
    populate(&engine.socket, 10)?;
    let own = create(&engine.socket, "bench-sandbox-stop")?;
    let sockproxy = start_sockproxy(bins, dir, &engine.socket, "part1", &args.sockproxy_flag)?;
    let haproxy = start_haproxy(dir, &engine.socket, "part1");
    println!("## 1. Per-request cost (fake engine)\n");
    let targets: Vec<(Target, &str, Requests)> = vec![
        (Target::Ping, "HEAD /_ping", same("HEAD", "/_ping")),
        (
            Target::List,
            "GET /containers/json?all=1",
            same("GET", "/containers/json?all=1"),
        ),
        (
            Target::Stop,
            "POST /containers/{id}/stop",
            same("POST", &format!("/containers/{own}/stop")),
        ),
    ];
    let targets: Vec<(&str, Requests)> = targets
        .into_iter()
        .filter(|(t, ..)| args.targets.contains(t))
        .map(|(_, label, r)| (label, r))
        .collect();
    let routes = Routes {
        engine: &engine.socket,
        sockproxy: &sockproxy,
        haproxy: &haproxy,
    };
    table(
        rt,
        &routes,
        &targets,
        &args.concurrency,
        args.requests,
        args.rounds,
    );
    Ok(())
}

/// The three ways to the engine part 1 compares.
pub struct Routes<'a> {
    pub engine: &'a Path,
    pub sockproxy: &'a Served,
    pub haproxy: &'a Result<Served, String>,
}

/// One load per route at each of `rounds`, the routes taking turns within a round (and each
/// round starting with the next route) so a slow spell of the machine hits all of them; each
/// route's loads in round order. A route's `Proc` is the proxy whose CPU is counted.
pub fn rounds_of_loads(
    rt: &Runtime,
    engine_pid: Option<u32>,
    ways: &[(&Path, Option<&Proc>)],
    next: &Requests,
    concurrency: usize,
    requests: usize,
    rounds: usize,
) -> Vec<Vec<Load>> {
    let mut cells: Vec<Vec<Load>> = vec![Vec::new(); ways.len()];
    for round in 0..rounds {
        // Each round starts one route later, so over as many rounds as there are routes each
        // takes every place in the order once: a route is not always the one that follows
        // another's load (the engine's garbage, the caches).
        for k in 0..ways.len() {
            let i = (k + round) % ways.len();
            let (sock, proxy) = ways[i];
            let before = proxy.map(Proc::cpu);
            let (client_before, engine_before) = (own_cpu(), engine_pid.map(cpu_of));
            let ticks = machine_ticks();
            let mut l = rt.block_on(load_with(sock, next, concurrency, requests));
            l.idle_pct = idle_pct(ticks, machine_ticks());
            let answered = u32::try_from(l.answered.max(1)).unwrap_or(u32::MAX);
            l.client_cpu_per_req = own_cpu().saturating_sub(client_before) / answered;
            if let (Some(pid), Some(before)) = (engine_pid, engine_before) {
                l.engine_cpu_per_req = cpu_of(pid).saturating_sub(before) / answered;
            }
            if let Some(before) = before {
                let used = proxy.map(Proc::cpu).unwrap_or_default() - before;
                l.cpu_per_req = used / answered;
            }
            cells[i].push(l);
        }
    }
    cells
}

/// Prints part 1's table: each target at each concurrency, `rounds` loads over every route
/// (`rounds_of_loads`), each cell the median round by requests per second.
pub fn table(
    rt: &Runtime,
    routes: &Routes,
    targets: &[(&str, Requests)],
    concurrency: &[usize],
    requests: usize,
    rounds: usize,
) {
    if let Err(why) = routes.haproxy {
        println!("HAProxy: {why}; its columns are empty.\n");
    }
    println!("| request | concurrency | direct req/s | sockproxy req/s | HAProxy req/s | sockproxy ratio | HAProxy ratio | direct p50 / p99 ms | sockproxy p50 / p99 ms | HAProxy p50 / p99 ms | sockproxy CPU µs/req | HAProxy CPU µs/req | machine idle % direct / sockproxy / HAProxy | load generator CPU µs/req direct / sockproxy / HAProxy | engine CPU µs/req direct / sockproxy / HAProxy |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    // The engine's process, found from its socket's peer credentials, so its CPU per request
    // behind each route can be compared too.
    let engine_pid = rt.block_on(listener_pid(routes.engine));
    let mut ways: Vec<(&Path, Option<&Proc>)> = vec![
        (routes.engine, None),
        (&routes.sockproxy.socket, Some(&routes.sockproxy.proc)),
    ];
    if let Ok(h) = routes.haproxy {
        ways.push((&h.socket, Some(&h.proc)));
    }
    for (label, next) in targets {
        for &c in concurrency {
            let cells = rounds_of_loads(rt, engine_pid, &ways, next, c, requests, rounds);
            let m: Vec<Load> = cells.into_iter().map(|r| median(r, |l| l.rps)).collect();
            let d = m[0];
            let col = |i: usize, f: &dyn Fn(&Load) -> String| m.get(i).map(f).unwrap_or_default();
            println!(
                "| `{label}` | {c} | {} | {} | {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} | {} |",
                rps_cell(&d),
                col(1, &rps_cell),
                col(2, &rps_cell),
                col(1, &|l| format!("{:.2}", l.rps / d.rps)),
                col(2, &|l| format!("{:.2}", l.rps / d.rps)),
                ms(d.p50),
                ms(d.p99),
                col(1, &|l| format!("{} / {}", ms(l.p50), ms(l.p99))),
                col(2, &|l| format!("{} / {}", ms(l.p50), ms(l.p99))),
                col(1, &cpu_cell),
                col(2, &cpu_cell),
                per_route(&m, |l| l.idle_pct),
                per_route(&m, |l| l.client_cpu_per_req.as_secs_f64() * 1e6),
                per_route(&m, |l| l.engine_cpu_per_req.as_secs_f64() * 1e6),
            );
        }
    }
    println!();
}

/// Part 2: one client listing all containers, a fresh engine and sockproxy per size.
pub fn list_filtering(rt: &Runtime, args: &Args, bins: &Path, dir: &Path) -> anyhow::Result<()> {
    println!("## 2. List filtering at scale (`GET /containers/json?all=1`, half the containers in scope)\n");
    println!("| containers | answer direct | listed through sockproxy | direct ms | sockproxy ms | added | sockproxy peak RSS MiB | engine peak RSS MiB |");
    println!("|---|---|---|---|---|---|---|---|");
    for &n in &args.list_sizes {
        let tag = format!("list{n}");
        let engine = start_fake(bins, dir, &tag)?;
        populate(&engine.socket, n)?;
        let sockproxy = start_sockproxy(bins, dir, &engine.socket, &tag, &args.sockproxy_flag)?;
        let size = raw::get(&engine.socket, "/containers/json?all=1")?
            .body
            .len();
        let listed = raw::get(&sockproxy.socket, "/containers/json?all=1")?
            .json()
            .as_array()
            .map_or(0, Vec::len);
        let [d, p] = list_p50s(
            rt,
            [(&engine.socket, LIST), (&sockproxy.socket, LIST)],
            args.rounds,
        );
        println!(
            "| {n} | {:.1} KiB | {listed} | {} | {} | {:+.0}% | {} | {} |",
            size as f64 / 1024.0,
            ms(d),
            ms(p),
            (p.as_secs_f64() / d.as_secs_f64() - 1.0) * 100.0,
            mib(sockproxy.proc.memory().peak_kib),
            mib(engine.proc.memory().peak_kib),
        );
    }
    println!();
    Ok(())
}

/// Requests per list load: one client, the p50 of this many lists is the load's figure.
const LISTS_PER_LOAD: usize = 20;

/// Every container, as a client lists them.
pub const LIST: &str = "/containers/json?all=1";

/// The median over `rounds` (at least 3) of one client's p50 sending each route's list request
/// to its socket, the routes taking turns within a round; one figure per route, in order.
pub fn list_p50s<const N: usize>(
    rt: &Runtime,
    routes: [(&Path, &str); N],
    rounds: usize,
) -> [Duration; N] {
    let mut p50s: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::new());
    for _ in 0..rounds.max(3) {
        for (i, (sock, target)) in routes.iter().enumerate() {
            let l = rt.block_on(load(sock, "GET", target, 1, LISTS_PER_LOAD));
            p50s[i].push(l.p50);
        }
    }
    p50s.map(|v| median(v, Duration::as_secs_f64))
}
