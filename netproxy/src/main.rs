//! The `netproxy` binary: flags → `Config` (startup.rs), JSON logs, serve until SIGTERM/SIGINT.
//! A start-up error is one line on stderr: exit 2 for bad configuration, 1 at run time.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use netproxy::config::Args;
use netproxy::proxy::NetProxy;
use netproxy::resolve::Stub;
use netproxy::startup::{Config, EXIT_CONFIG, EXIT_RUNTIME};
use scrape::startup::clap_line;

fn main() -> ExitCode {
    // SIGHUP held back from the first instruction: its default action ends the process, and
    // until `run` has tokio's handler in place a reload asked for (lifecycle sends it right
    // after start) would kill the sidecar. Blocked, it stays pending; `run` unblocks it once
    // the handler is there, and the pending one is delivered as a reload. Every thread made
    // from here on (the runtime's) keeps it blocked, so it is delivered to this one.
    let hup = hup_set();
    if let Err(e) = hup.thread_block() {
        return fail(EXIT_RUNTIME, &format!("blocking SIGHUP: {e}"));
    }
    // Bad configuration first, before the runtime or a log line: exit 2.
    let args = match Args::try_load() {
        Ok(a) => a,
        Err(e) => match clap_line(&e) {
            Some(line) => return fail(EXIT_CONFIG, &line),
            // `--help` and `--version`: clap prints them and exits 0.
            None => e.exit(),
        },
    };
    let cfg = match Config::from_args(args) {
        Ok(c) => c,
        Err(e) => return fail(EXIT_CONFIG, &e.to_string()),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime");
    match runtime.and_then(|r| r.block_on(run(cfg))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(EXIT_RUNTIME, &scrape::startup::error_line(e.as_ref())),
    }
}

/// The one line a start-up error is (no `Caused by:` block, no backtrace), and its exit status.
fn fail(code: u8, line: &str) -> ExitCode {
    eprintln!("netproxy: {line}");
    ExitCode::from(code)
}

fn hup_set() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    set.add(nix::sys::signal::Signal::SIGHUP);
    set
}

async fn run(cfg: Config) -> anyhow::Result<()> {
    // The reload handler first of all, then SIGHUP let through on this thread (the one
    // `block_on` runs `run` on): one sent since start is delivered now, as a reload.
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("SIGHUP handler")?;
    hup_set().thread_unblock().context("unblocking SIGHUP")?;
    // Like SOCKPROXY_LOG and LIFECYCLE_LOG: an EnvFilter, default info.
    scrape::logging::init("NETPROXY_LOG", cfg.log_format);
    // Before anything opens a descriptor: the soft limit up to the hard one, and the dial
    // budget kept under it with a reserve (`fds`).
    let limit = netproxy::fds::raise_to_hard().context("reading the descriptor limit")?;
    let max_dials = netproxy::fds::dial_cap(limit, cfg.max_dials);
    tracing::info!(
        nofile = limit,
        max_dials,
        max_dials_per_client = cfg.max_dials_per_client,
        "descriptor limit"
    );
    let resolver = Arc::new(Stub::from_system_conf().context("reading /etc/resolv.conf")?);
    let proxy = Arc::new(NetProxy {
        dns_timeout: cfg.dns_timeout,
        connect_timeout: cfg.connect_timeout,
        tunnel_idle: cfg.tunnel_idle,
        timeouts: cfg.timeouts,
        dials: Arc::new(netproxy::dial::Budget::new(
            max_dials,
            cfg.max_dials_per_client,
        )),
        ..NetProxy::new(cfg.policy, resolver)
    });
    // Before any listener accepts (each would start it too): the announcements' descriptor is
    // taken while the table has room.
    proxy.watch();
    let reload_proxy = proxy.clone();
    let metrics_listen = cfg.args.metrics_listen.clone();
    let reload_args = cfg.args;
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
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    // Each relay on a listener of its own, bound before the process says it listens.
    let mut relays = Vec::with_capacity(cfg.relays.len());
    for relay in cfg.relays {
        let listener = tokio::net::TcpListener::bind(relay.listen)
            .await
            .with_context(|| format!("cannot listen on {} (--relay {relay})", relay.listen))?;
        relays.push((listener, relay));
    }
    let relays_shown: Vec<String> = relays.iter().map(|(_, r)| r.to_string()).collect();
    for (listener, relay) in relays {
        tokio::spawn(netproxy::relay::serve(
            listener,
            relay,
            proxy.clone(),
            cfg.limits,
            std::future::pending(),
        ));
    }
    if let Some(at) = &metrics_listen {
        let metrics = scrape::bind(at, scrape::METRICS_MODE, None)
            .with_context(|| format!("--metrics-listen {at}"))?;
        let exposed = Arc::new(netproxy::metrics::Exposed(proxy.metrics.clone()));
        tokio::spawn(scrape::serve(metrics, exposed, std::future::pending()));
    }
    tracing::info!(
        listen = %cfg.listen,
        relays = ?relays_shown,
        metrics_listen = metrics_listen.as_ref().map(|m| m.to_string()),
        "netproxy listening"
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("SIGTERM handler")?;
    netproxy::server::serve(listener, proxy, cfg.limits, async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    })
    .await;
    Ok(())
}
