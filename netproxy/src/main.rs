//! The `netproxy` binary: flags → policy and limits, JSON logs, serve until SIGTERM/SIGINT.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use netproxy::config::{Args, LogFormat};
use netproxy::proxy::NetProxy;
use netproxy::resolve::Stub;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let policy = args.policy().context("invalid rule")?;
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false);
    match args.log_format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    let proxy = Arc::new(NetProxy {
        policy: std::sync::RwLock::new(Arc::new(policy)),
        resolver: Arc::new(Stub::from_system_conf().context("reading /etc/resolv.conf")?),
        dns_timeout: Duration::from_millis(args.dns_timeout_ms),
        connect_timeout: Duration::from_millis(args.connect_timeout_ms),
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
