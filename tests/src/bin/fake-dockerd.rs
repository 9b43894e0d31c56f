//! `fake-dockerd --listen PATH [--flavor debian-20.10|docker-29]`: the fake engine as a server
//! the docker CLI, docker-py and bollard can use (`DOCKER_HOST=unix://PATH`), until SIGTERM or
//! SIGINT.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use sockproxy_tests::fake::{FakeEngine, Flavor};

/// A fake Docker engine on a Unix socket, for trying the toolkit without a Docker host.
#[derive(Debug, Parser)]
#[command(name = "fake-dockerd", version, about)]
struct Args {
    /// Unix socket to serve.
    #[arg(long, env = "FAKE_DOCKERD_LISTEN")]
    listen: PathBuf,
    /// Engine behaviour to imitate: debian-20.10 (API 1.41) or docker-29 (API 1.52, min 1.44).
    #[arg(long, env = "FAKE_DOCKERD_FLAVOR", default_value = "debian-20.10")]
    flavor: Flavor,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.listen.exists() {
        let live = std::os::unix::net::UnixStream::connect(&args.listen).is_ok();
        anyhow::ensure!(
            !live,
            "{}: something is already listening there",
            args.listen.display()
        );
        std::fs::remove_file(&args.listen)
            .with_context(|| format!("removing stale {}", args.listen.display()))?;
    }
    let mut engine = FakeEngine::start_at(&args.listen, args.flavor)
        .with_context(|| format!("cannot listen on {}", args.listen.display()))?;
    eprintln!(
        "fake-dockerd ({}, API {}) listening on unix://{}",
        args.flavor.name(),
        args.flavor.api_version(),
        args.listen.display()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        anyhow::Ok(())
    })?;
    engine.shutdown();
    drop(engine);
    Ok(())
}
