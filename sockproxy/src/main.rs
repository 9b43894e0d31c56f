//! The `sockproxy` binary: flags → `Config`, logging, the engine reachability notice, serve
//! until SIGTERM or SIGINT.

use anyhow::Context;
use clap::Parser;
use sockproxy::config::{Args, Config, LogFormat};
use sockproxy::server;
use tokio::signal::unix::{signal, SignalKind};

// mimalloc: per request, hyper's read buffers (8 KiB, past glibc's thread cache) and the
// frees of memory another loop allocated cost glibc's allocator more (see the commit). Built
// with `no_thp`: with transparent huge pages its RSS doubled.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SOCKPROXY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Each event loop batches its lines and writes them at most 50 ms later (logwrite.rs).
        .with_writer(sockproxy::logwrite::Batched)
        // The decision line has a `target` field of its own (the request path).
        .with_target(false)
        // Colour codes only on a terminal: a log file or the journal gets plain text.
        .with_ansi(terminal)
        // The same text as the default timer, formatted once per second (logfmt.rs).
        .with_timer(sockproxy::logfmt::Timestamp);
    match format {
        // On a terminal the default fields (field names in italics); elsewhere the same text
        // as the default, with less work per line (logfmt.rs).
        LogFormat::Plain if terminal => builder.init(),
        LogFormat::Plain => builder.fmt_fields(sockproxy::logfmt::Fields).init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    // The same text, without the trip through tracing, where the filter lets the line through
    // (the filter is read once: SOCKPROXY_LOG is fixed at start-up).
    let plain_file = format == LogFormat::Plain && !terminal;
    let shown = tracing::enabled!(target: "sockproxy::proxy", tracing::Level::INFO);
    sockproxy::decision_line::write_directly(plain_file && shown);
}

/// A start-up failure and how the process exits with it: 2 for bad configuration (flags, the
/// policy file), 1 for a failure at run time (the socket, the runtime).
enum Failure {
    Config(anyhow::Error),
    Runtime(anyhow::Error),
}

fn main() -> std::process::ExitCode {
    // This thread is the first event loop; `serve` starts the others (`--event-loops`, loops.rs),
    // each single-threaded, so the client and engine halves of a request stay on one thread.
    // Large list filtering runs on the blocking pool (proxy.rs). Each loop writes its log lines
    // in batches, about 50 ms after the first (logwrite.rs).
    let result = match sockproxy::loops::runtime().context("starting the event loop") {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => Err(Failure::Runtime(e)),
    };
    sockproxy::logwrite::flush();
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

async fn run() -> Result<(), Failure> {
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
    serve(cfg).await.map_err(Failure::Runtime)
}

async fn serve(cfg: Config) -> anyhow::Result<()> {
    init_logging(cfg.log_format);
    if tokio::net::UnixStream::connect(&cfg.upstream)
        .await
        .is_err()
    {
        // Keep running: the proxy connects on demand, so it works as soon as an engine starts.
        tracing::warn!(
            "no Docker engine answers at unix://{}: start one (sudo systemctl start docker, or dockerd --host unix://{}) or pass --upstream; requests get 502 until then",
            cfg.upstream.display(),
            cfg.upstream.display()
        );
    }
    if cfg.create_rules.require_stack_label && cfg.stack == cfg.scope.prefix().as_str() {
        // The label is what tells stacks on one prefix apart; with the default name, every
        // such stack stamps and accepts the same one.
        tracing::warn!(
            stack = %cfg.stack,
            "--require-stack-label with the stack named after its prefix (the default): other stacks on this prefix get the same label; give each its own --stack"
        );
    }
    let bound = server::bind(&cfg).context("cannot listen")?;
    if !bound.made_here && (cfg.socket_gid.is_some() || cfg.socket_mode != 0o660) {
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
        event_loops = cfg.event_loops,
        socket_activation = !bound.made_here,
        metrics_listen = cfg.metrics_listen.as_ref().map(|m| m.to_string()),
        "sockproxy listening"
    );
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        tracing::info!("shutting down");
    };
    server::serve(
        bound.listener,
        server::proxy_for(&cfg),
        bound.made_here.then(|| cfg.listen.clone()),
        bound.metrics,
        cfg.shutdown_grace,
        shutdown,
    )
    .await;
    Ok(())
}
