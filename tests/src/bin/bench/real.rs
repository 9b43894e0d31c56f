//! Part 3: the real engine, as an operator sees it: wall time of docker CLI commands direct to
//! dockerd and through sockproxy, alternating round by round.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sockproxy_tests::cli::{default_cli, docker_with, CliOutput};
use sockproxy_tests::engine::{candidate_socket, ensure_image, TEST_IMAGE};
use sockproxy_tests::raw;

use crate::load::{median, ms};
use crate::socket::start_sockproxy;
use crate::Args;

const CLI_LIMIT: Duration = Duration::from_secs(60);
const INSPECTED: &str = "bench-sandbox-inspect";

fn docker(sock: &Path, args: &[&str]) -> CliOutput {
    docker_with(&default_cli(), sock, args, None, CLI_LIMIT)
}

/// Runs and times `args`; a failed command fails the part.
fn timed(sock: &Path, args: &[&str]) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let out = docker(sock, args);
    let took = t.elapsed();
    if !out.ok() {
        bail!("docker {} failed: {}", args.join(" "), out.stderr.trim());
    }
    Ok(took)
}

pub fn real_engine(args: &Args, bins: &Path, dir: &Path) -> anyhow::Result<()> {
    println!("## 3. Real engine (docker CLI wall time)\n");
    let engine = candidate_socket();
    let ping = raw::get(&engine, "/_ping").is_ok_and(|r| r.status == 200);
    if !ping {
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
            "NOTICE: bench: real-engine part skipped, no engine at {}",
            engine.display()
        );
        return Ok(());
    }
    ensure_image(&engine);
    let version = raw::get(&engine, "/version")?.json();
    let sockproxy = start_sockproxy(bins, dir, &engine, "real")?;
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
