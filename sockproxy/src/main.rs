//! The `sockproxy` binary: flags → `Config`, logging, the engine reachability notice, serve
//! until SIGTERM or SIGINT.

use anyhow::Context;
use clap::Parser;
use sockproxy::config::{Args, Config};
use sockproxy::server;
use tokio::signal::unix::{signal, SignalKind};

/// A start-up failure and how the process exits with it: 2 for bad configuration (flags, the
/// policy file, a prefix that covers the proxy's own deployment), 1 for a failure at run time
/// (the socket, the runtime).
enum Failure {
    Config(anyhow::Error),
    Runtime(anyhow::Error),
}

fn main() -> std::process::ExitCode {
    let result = run();
    // One line per failure, never a backtrace: an operator reads it in a journal, where
    // anyhow's multi-line report repeated each cause.
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(Failure::Config(e)) => {
            eprintln!("sockproxy: {}", scrape::startup::error_line(e.as_ref()));
            std::process::ExitCode::from(2)
        }
        Err(Failure::Runtime(e)) => {
            eprintln!("sockproxy: {}", scrape::startup::error_line(e.as_ref()));
            std::process::ExitCode::from(1)
        }
    }
}

fn run() -> Result<(), Failure> {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => match scrape::startup::clap_line(&e) {
            Some(line) => return Err(Failure::Config(anyhow::Error::msg(line))),
            // `--help` and `--version`: clap prints them and exits 0.
            None => e.exit(),
        },
    };
    let print_policy = args.print_policy;
    let settings = sockproxy::policy_file::merged(args).map_err(|e| Failure::Config(e.into()))?;
    let cfg = Config::from_args(settings, std::env::var("DOCKER_HOST").ok())
        .map_err(|e| Failure::Config(e.into()))?;
    if print_policy {
        let text = sockproxy::policy_file::print(&cfg)
            .map_err(|e| Failure::Config(anyhow::Error::msg(e).context("printing the policy")))?;
        print!("{text}");
        return Ok(());
    }
    // Plain or JSON lines on stderr, each written whole by its thread (`scrape::logging`).
    scrape::logging::init("SOCKPROXY_LOG", cfg.log_format);
    // tokio's multi-thread runtime, `--worker-threads` workers; large bodies and lists are parsed
    // and filtered on its blocking pool.
    let runtime = server::runtime(cfg.worker_threads)
        .context("starting the runtime")
        .map_err(Failure::Runtime)?;
    let served = runtime.block_on(serve(cfg)).map_err(|e| {
        // A prefix that covers the proxy's own deployment is a setting to change, not a fault.
        let setting = e
            .downcast_ref::<sockproxy::deployment::DeploymentError>()
            .is_some_and(sockproxy::deployment::DeploymentError::is_config);
        if setting {
            Failure::Config(e)
        } else {
            Failure::Runtime(e)
        }
    });
    // What is still running is past its grace: dropped, with a second for it to go (a blocking
    // task past it is left to the process's exit).
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served
}

async fn serve(cfg: Config) -> anyhow::Result<()> {
    if let Err(e) = tokio::net::UnixStream::connect(&cfg.upstream).await {
        // Keep running: the proxy connects on demand, so it works as soon as an engine starts.
        use sockproxy::engine_reach::{found, notice};
        tracing::warn!("{}", notice(&cfg.upstream, &found(&cfg.upstream, &e)));
    }
    if cfg.create_rules.require_stack_label && cfg.stack == cfg.scope.prefix().as_str() {
        // The label is what tells stacks on one prefix apart; with the default name, every
        // such stack stamps and accepts the same one.
        tracing::warn!(
            stack = %cfg.stack,
            "--require-stack-label with the stack named after its prefix (the default): other stacks on this prefix get the same label; give each its own --stack"
        );
    }
    if cfg.old_worker_flag {
        tracing::warn!(
            "--event-loops (SOCKPROXY_EVENT_LOOPS) is now --worker-threads (SOCKPROXY_WORKER_THREADS); the old name goes in a later release"
        );
    }
    // Before the socket: a proxy that cannot pin bind sources does not serve.
    let pins = sockproxy::pins::Pins::open(&cfg.pins, &cfg.create_rules.bind_roots)?;
    let proxy = server::proxy_for(&cfg, pins);
    if let Some(pins) = &proxy.pins {
        sockproxy::pin_watch::probe(&proxy.upstream, pins).await?;
    }
    // Before the socket too: a prefix that covers the proxy's own container or its compose
    // project's objects would hand them to the stack.
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let checked = tokio::select! {
        checked = sockproxy::deployment::check_until_answered(&proxy.upstream, &cfg.scope) => checked?,
        // A proxy waiting for its engine stops when asked to (as PID 1 in a container it would
        // not die of the signal's default action).
        _ = term.recv() => return Ok(()),
        _ = int.recv() => return Ok(()),
    };
    match checked {
        sockproxy::deployment::Checked::Apart {
            name,
            project,
            objects,
        } => tracing::info!(
            container = %name,
            project = project.as_deref(),
            objects,
            "the stack's prefix is apart from the proxy's own deployment"
        ),
        other => tracing::debug!(checked = ?other, "the proxy's own deployment not checked"),
    }
    let bound = server::bind(&cfg).context("cannot listen")?;
    if bound.made.is_none() && (cfg.socket_gid.is_some() || cfg.socket_mode != 0o660) {
        tracing::warn!(
            "--socket-mode and --socket-group are not applied: systemd made the socket (set SocketMode= and SocketGroup= in the .socket unit)"
        );
    }
    tracing::info!(
        listen = %cfg.listen.display(),
        upstream = %cfg.upstream.display(),
        prefix = %cfg.scope.prefix(),
        restricted = cfg.scope.restricted(),
        stack = %cfg.stack,
        worker_threads = cfg.worker_threads,
        socket_activation = bound.made.is_none(),
        metrics_listen = cfg.metrics_listen.as_ref().map(|m| m.to_string()),
        "sockproxy listening"
    );
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        tracing::info!("shutting down");
    };
    server::serve(
        bound.listener,
        proxy.clone(),
        bound.made,
        bound.metrics,
        cfg.shutdown_grace,
        shutdown,
    )
    .await;
    if let Err(e) = sockproxy::stack_facts::retire_network(&proxy).await {
        tracing::warn!(error = %e, "the stack's network was left on the engine");
    }
    Ok(())
}
