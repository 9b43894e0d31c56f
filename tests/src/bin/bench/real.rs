//! The real engine: part 1's per-request loads on it (ping, a list of 50, stop/start by name),
//! and part 3, as an operator sees it: wall time of docker CLI commands direct to dockerd and
//! through sockproxy, alternating round by round.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sockproxy_tests::cli::{default_cli, docker_with, CliOutput};
use sockproxy_tests::engine::{candidate_socket, ensure_image, TEST_IMAGE};
use sockproxy_tests::raw;
use tokio::runtime::Runtime;

use crate::load::{median, ms, same, Requests};
use crate::socket::{start_haproxy, start_sockproxy, table, Routes, PREFIX};
use crate::{Args, Target};

const CLI_LIMIT: Duration = Duration::from_secs(60);
const INSPECTED: &str = "bench-sandbox-inspect";

fn docker(sock: &Path, args: &[&str]) -> CliOutput {
    docker_with(&default_cli(), sock, args, None, CLI_LIMIT)
}

/// Runs and times `args`; a failed command fails the part.
pub fn timed(sock: &Path, args: &[&str]) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let out = docker(sock, args);
    let took = t.elapsed();
    if !out.ok() {
        bail!("docker {} failed: {}", args.join(" "), out.stderr.trim());
    }
    Ok(took)
}

/// The real engine's socket, or `None` after saying why the part is skipped (an error under
/// `CI=true`, where it must not be).
pub fn reachable(part: &str) -> anyhow::Result<Option<PathBuf>> {
    let engine = candidate_socket();
    if raw::get(&engine, "/_ping").is_ok_and(|r| r.status == 200) {
        ensure_image(&engine);
        return Ok(Some(engine));
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        bail!(
            "CI=true but no Docker engine answers at {}",
            engine.display()
        );
    }
    println!(
        "Skipped: no Docker engine answers at {} (start dockerd and set DOCKER_HOST=unix://…).\n",
        engine.display()
    );
    eprintln!(
        "NOTICE: bench: {part} skipped, no engine at {}",
        engine.display()
    );
    Ok(None)
}

/// Containers part 1 lists on the real engine, and the prefix of the ones it stops and starts.
const LISTED: usize = 50;
const CYCLED: &str = "bench-sandbox-cycle-";

/// Removes every container of this part's own on the real engine: the bench's prefix, but not
/// the budget part's (`budget_real`), which may be running at the same time on the same engine
/// (the smoke tests run both parts side by side; removing its containers failed its inspect).
fn remove_bench_containers(engine: &Path) {
    let all = raw::get(engine, "/containers/json?all=1").map(|r| r.json());
    for c in all
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
    {
        let named = c["Names"]
            .as_array()
            .and_then(|n| n.first())
            .and_then(|n| n.as_str());
        if let (Some(name), Some(id)) = (named, c["Id"].as_str()) {
            if name.starts_with(&format!("/{PREFIX}"))
                && !name.starts_with(&format!("/{}", crate::budget_real::OURS))
            {
                let _ = raw::request(engine, "DELETE", &format!("/containers/{id}?force=1"), None);
            }
        }
    }
}

/// Part 1 on the real engine: `/_ping`, a list of the bench's 50 containers, and stop/start by
/// name (each client stops and starts its own running container in turn).
pub fn per_request(rt: &Runtime, args: &Args, bins: &Path, dir: &Path) -> anyhow::Result<()> {
    println!("## 1b. Per-request cost (real engine)\n");
    let Some(engine) = reachable("part 1 on the real engine")? else {
        return Ok(());
    };
    remove_bench_containers(&engine);
    let result = (|| {
        for i in 0..LISTED {
            create_on(&engine, &format!("{PREFIX}sandbox-list-{i}"), false)?;
        }
        let clients = args.real_concurrency.iter().copied().max().unwrap_or(1);
        for i in 0..clients {
            create_on(&engine, &format!("{CYCLED}{i}"), true)?;
        }
        let listed = raw::get(&engine, "/containers/json?all=1")?
            .json()
            .as_array()
            .map_or(0, Vec::len);
        let version = raw::get(&engine, "/version")?.json();
        println!(
            "Engine: Docker {}; it holds {listed} containers, {} of them the bench's. Medians of {} rounds; {} requests per load ({} for stop/start).\n",
            version["Version"].as_str().unwrap_or("?"),
            LISTED + clients,
            args.rounds,
            args.real_requests,
            args.real_stops
        );
        let sockproxy = start_sockproxy(bins, dir, &engine, "part1-real", &args.sockproxy_flag)?;
        let haproxy = start_haproxy(dir, &engine, "part1-real");
        let routes = Routes {
            engine: &engine,
            sockproxy: &sockproxy,
            haproxy: &haproxy,
        };
        let cycle: Requests = Arc::new(|client, nth| {
            let action = if nth % 2 == 0 { "stop?t=0" } else { "start" };
            ("POST", format!("/containers/{CYCLED}{client}/{action}"))
        });
        let quick: Vec<(&str, Requests)> = [
            (Target::Ping, "HEAD /_ping", same("HEAD", "/_ping")),
            (
                Target::List,
                "GET /containers/json?all=1",
                same("GET", "/containers/json?all=1"),
            ),
        ]
        .into_iter()
        .filter(|(t, ..)| args.targets.contains(t))
        .map(|(_, label, r)| (label, r))
        .collect();
        let c = &args.real_concurrency;
        table(rt, &routes, &quick, c, args.real_requests, args.rounds);
        if args.targets.contains(&Target::Stop) {
            println!("Stop and start by name, each request stopping or starting a container:\n");
            let stops = [("POST /containers/NAME/stop, then start", cycle)];
            table(rt, &routes, &stops, c, args.real_stops, args.rounds);
        }
        anyhow::Ok(())
    })();
    remove_bench_containers(&engine);
    result
}

/// Creates (and with `run`, starts) a sleeping container on the real engine.
pub fn create_on(engine: &Path, name: &str, run: bool) -> anyhow::Result<()> {
    let body = serde_json::json!({ "Image": TEST_IMAGE, "Cmd": ["sleep", "3600"] }).to_string();
    let r = raw::request(
        engine,
        "POST",
        &format!("/containers/create?name={name}"),
        Some(body.as_bytes()),
    )?;
    if r.status != 201 {
        bail!("creating {name}: {} {}", r.status, r.text());
    }
    if run {
        let r = raw::request(engine, "POST", &format!("/containers/{name}/start"), None)?;
        if r.status != 204 {
            bail!("starting {name}: {} {}", r.status, r.text());
        }
    }
    Ok(())
}

pub fn real_engine(args: &Args, bins: &Path, dir: &Path) -> anyhow::Result<()> {
    println!("## 3. Real engine (docker CLI wall time)\n");
    let Some(engine) = reachable("the real-engine part")? else {
        return Ok(());
    };
    let version = raw::get(&engine, "/version")?.json();
    let sockproxy = start_sockproxy(bins, dir, &engine, "real", &args.sockproxy_flag)?;
    let _ = docker(&engine, &["rm", "-f", INSPECTED]);
    timed(
        &engine,
        &["run", "-d", "--name", INSPECTED, TEST_IMAGE, "sleep", "600"],
    )
    .context("starting the inspected container")?;
    let routes: [&Path; 2] = [&engine, &sockproxy.socket];
    // [command][route] → one duration per round
    let mut times = vec![vec![Vec::new(); 2]; 3];
    let mut result = Ok(());
    'rounds: for round in 0..args.real_rounds {
        for (r, sock) in routes.iter().enumerate() {
            let name = format!("bench-sandbox-run-{r}-{round}");
            let steps = [
                timed(sock, &["ps", "-a"]),
                timed(sock, &["inspect", INSPECTED]),
                timed(
                    sock,
                    &["run", "-d", "--name", &name, TEST_IMAGE, "sleep", "600"],
                )
                .and_then(|a| Ok(a + timed(sock, &["rm", "-f", &name])?)),
            ];
            for (i, step) in steps.into_iter().enumerate() {
                match step {
                    Ok(d) => times[i][r].push(d),
                    Err(e) => {
                        let _ = docker(&engine, &["rm", "-f", &name]);
                        result = Err(e);
                        break 'rounds;
                    }
                }
            }
        }
    }
    let _ = docker(&engine, &["rm", "-f", INSPECTED]);
    // The stack's own network, which the proxy made for its runs.
    let _ = docker(&engine, &["network", "rm", &format!("{PREFIX}net")]);
    result?;
    println!(
        "Engine: Docker {} (API {}); CLI: `{}`. Median of {} rounds; each time includes the CLI's own start.\n",
        version["Version"].as_str().unwrap_or("?"),
        version["ApiVersion"].as_str().unwrap_or("?"),
        default_cli().display(),
        args.real_rounds
    );
    println!("| command | direct ms | sockproxy ms | ratio |");
    println!("|---|---|---|---|");
    let labels = [
        "docker ps -a",
        "docker inspect NAME",
        "docker run -d … + docker rm -f",
    ];
    for (label, per_route) in labels.iter().zip(times) {
        let m: Vec<Duration> = per_route
            .into_iter()
            .map(|v| median(v, Duration::as_secs_f64))
            .collect();
        println!(
            "| `{label}` | {} | {} | {:.2} |",
            ms(m[0]),
            ms(m[1]),
            m[1].as_secs_f64() / m[0].as_secs_f64()
        );
    }
    println!();
    Ok(())
}
