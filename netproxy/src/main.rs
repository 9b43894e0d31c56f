//! The `netproxy` binary: flags → policy and limits, JSON logs, serve until SIGTERM/SIGINT.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use netproxy::config::{Args, LogFormat};
use netproxy::proxy::NetProxy;
use netproxy::resolve::Stub;

/// The networks of this sidecar's own interfaces: a sandbox may not use the proxy to reach them.
fn own_networks() -> Vec<ipnet::IpNet> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    addrs
        .filter_map(|a| {
            let ip = a.address.as_ref()?;
            let mask = a.netmask.as_ref()?;
            if let (Some(ip), Some(mask)) = (ip.as_sockaddr_in(), mask.as_sockaddr_in()) {
                let prefix = u32::from(mask.ip()).count_ones();
                return ipnet::Ipv4Net::new(ip.ip(), u8::try_from(prefix).ok()?)
                    .ok()
                    .map(|n| ipnet::IpNet::V4(n.trunc()));
            }
            let (ip, mask) = (ip.as_sockaddr_in6()?, mask.as_sockaddr_in6()?);
            let prefix = u128::from(mask.ip()).count_ones();
            ipnet::Ipv6Net::new(ip.ip(), u8::try_from(prefix).ok()?)
                .ok()
                .map(|n| ipnet::IpNet::V6(n.trunc()))
        })
        .collect()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let own = own_networks();
    let policy = args.policy(&own).context("invalid policy")?;
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        // Colour codes only on a terminal: a log file or the journal gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match args.log_format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    let proxy = Arc::new(NetProxy {
        policy: std::sync::RwLock::new(Arc::new(policy)),
        resolver: Arc::new(Stub::from_system_conf().context("reading /etc/resolv.conf")?),
        dns_timeout: Duration::from_millis(args.dns_timeout_ms),
        connect_timeout: Duration::from_millis(args.connect_timeout_ms),
        tunnel_idle: Duration::from_millis(args.tunnel_idle_timeout_ms),
    });
    let reload_proxy = proxy.clone();
    let reload_args = Args::parse();
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            // Validate the whole new policy first; only then swap it in.
            match reload_args.policy(&own) {
                Ok(p) => {
                    if let Ok(mut current) = reload_proxy.policy.write() {
                        *current = Arc::new(p);
                    }
                    tracing::info!("policy reloaded");
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
