//! The `netproxy` binary: flags → policy and limits, JSON logs, serve until SIGTERM/SIGINT.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use netproxy::config::{Args, LogFormat};
use netproxy::proxy::NetProxy;
use netproxy::resolve::Stub;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, the causes joined by ": " (`{:#}`): no `Caused by:` block, no
            // backtrace, and nothing printed twice.
            eprintln!("netproxy: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let args = Args::load();
    let policy = args.policy().context("invalid policy")?;
    // Like SOCKPROXY_LOG and LIFECYCLE_LOG: an EnvFilter, default info.
    let filter = tracing_subscriber::EnvFilter::try_from_env("NETPROXY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        // Colour codes only on a terminal: a log file or the journal gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match args.log_format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    // Before anything opens a descriptor: the soft limit up to the hard one, and the dial
    // budget kept under it with a reserve (`fds`).
    let limit = netproxy::fds::raise_to_hard().context("reading the descriptor limit")?;
    let max_dials = netproxy::fds::dial_cap(limit, args.max_dials);
    tracing::info!(
        nofile = limit,
        max_dials,
        max_dials_per_client = args.max_dials_per_client,
        "descriptor limit"
    );
    let resolver = Arc::new(Stub::from_system_conf().context("reading /etc/resolv.conf")?);
    let proxy = Arc::new(NetProxy {
        dns_timeout: Duration::from_millis(args.dns_timeout_ms),
        connect_timeout: Duration::from_millis(args.connect_timeout_ms),
        tunnel_idle: Duration::from_millis(args.tunnel_idle_timeout_ms),
        timeouts: args.timeouts(),
        dials: Arc::new(netproxy::dial::Budget::new(
            max_dials,
            args.max_dials_per_client,
        )),
        ..NetProxy::new(policy, resolver)
    });
    let reload_proxy = proxy.clone();
    let reload_args = Args::load();
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            // Validate the whole new policy first; only then swap it in.
            match reload_args.policy() {
                Ok(p) => {
                    reload_proxy.set_policy(p);
                    tracing::info!("policy reloaded; open tunnels and streaming answers it no longer allows are closed");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "policy reload refused; the running policy stays")
                }
            }
        }
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(listen = %args.listen, "netproxy listening");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    netproxy::server::serve(listener, proxy, args.limits(), async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    })
    .await;
    Ok(())
}
