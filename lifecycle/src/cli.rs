//! The `lifecycle` command line: flags (each with a `LIFECYCLE_*` fallback) validated into
//! `Settings` once, one JSON value or line per result on stdout, one-line errors on stderr, and
//! the exit codes below. It only parses and prints: every operation is a `Lifecycle` method.
//! SIGINT/SIGTERM make a process that is still waiting for a sandbox's lock give up (exit 130);
//! one that holds it finishes what it sent the engine first, so no step is cut off halfway.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::json;

use crate::decide::Mode;
use crate::engine::Engine;
use crate::lock::LockError;
use crate::naming::Prefix;
use crate::ops::{Lifecycle, OpError, Retired, Settings};

/// `--log-format`: the toolkit's one (`scrape::logging`).
pub use scrape::LogFormat;

/// Create, discover, quarantine and tear down a stack's sandboxes through its sockproxy.
#[derive(Debug, Parser)]
#[command(name = "lifecycle", version, about)]
pub struct Args {
    /// The stack's sockproxy socket (the only engine address lifecycle uses).
    #[arg(help_heading = "Stack", long, env = "LIFECYCLE_DOCKER_HOST")]
    pub docker_host: String,
    /// The stack's prefix P (sandboxes are named {P}sandbox-{id}).
    #[arg(help_heading = "Stack", long, env = "LIFECYCLE_PREFIX")]
    pub prefix: String,
    /// The process's network mode.
    #[arg(help_heading = "Stack", long, env = "LIFECYCLE_MODE", value_enum)]
    pub mode: Mode,
    /// Where the quarantine ledger and port reservations live.
    #[arg(help_heading = "Stack", long, env = "LIFECYCLE_STATE_DIR")]
    pub state_dir: PathBuf,
    /// Sandbox image (needed by create).
    #[arg(help_heading = "Sandboxes", long, env = "LIFECYCLE_IMAGE")]
    pub image: Option<String>,
    /// Port the sandbox serves HTTP on.
    #[arg(
        help_heading = "Sandboxes",
        long,
        env = "LIFECYCLE_SANDBOX_PORT",
        default_value_t = 8080
    )]
    pub sandbox_port: u16,
    /// Host address an open-mode sandbox's port is published on (an IP address). The
    /// default keeps sandboxes reachable from this host only; a gateway in a container needs
    /// an address it can reach (the docker bridge's gateway address, say).
    #[arg(help_heading = "Sandboxes", long, env = "LIFECYCLE_PUBLISH_ADDRESS", default_value = "127.0.0.1", value_parser = publish_address)]
    pub publish_address: String,
    /// Command for the sandbox, run with `sh -c` [default: the image's].
    #[arg(help_heading = "Sandboxes", long, env = "LIFECYCLE_SANDBOX_CMD")]
    pub sandbox_cmd: Option<String>,
    /// Sidecar image (restricted mode).
    #[arg(
        help_heading = "Restricted mode",
        long,
        env = "LIFECYCLE_SIDECAR_IMAGE"
    )]
    pub sidecar_image: Option<String>,
    /// Command for the sidecar, run with `sh -c` [default: netproxy arguments from --egress-allow].
    #[arg(help_heading = "Restricted mode", long, env = "LIFECYCLE_SIDECAR_CMD")]
    pub sidecar_cmd: Option<String>,
    /// Egress rules passed to the sidecar (repeatable, or space-separated in the env var; a
    /// rule's own ports are comma-separated, `example.com:80,8080`, as netproxy reads them).
    /// None, or an empty value, allows no egress at all (deer-flow's isolated mode).
    #[arg(
        help_heading = "Restricted mode",
        long = "egress-allow",
        env = "LIFECYCLE_EGRESS_ALLOW",
        value_delimiter = ' '
    )]
    pub egress_allow: Vec<String>,
    /// Special-purpose ranges the sidecar may dial anyway (its --allow-cidr; repeatable).
    #[arg(
        help_heading = "Restricted mode",
        long = "egress-allow-cidr",
        env = "LIFECYCLE_EGRESS_ALLOW_CIDR",
        value_delimiter = ' '
    )]
    pub egress_allow_cidr: Vec<String>,
    /// More networks the sidecar must never dial, such as the Docker host's own addresses (its
    /// --own-cidr; repeatable).
    #[arg(
        help_heading = "Restricted mode",
        long = "egress-own-cidr",
        env = "LIFECYCLE_EGRESS_OWN_CIDR",
        value_delimiter = ' '
    )]
    pub egress_own_cidr: Vec<String>,
    /// The network's own NAT64 translator prefixes (the sidecar's --nat64-prefix; repeatable).
    #[arg(
        long = "egress-nat64-prefix",
        env = "LIFECYCLE_EGRESS_NAT64_PREFIX",
        value_delimiter = ' '
    )]
    pub egress_nat64_prefix: Vec<String>,
    /// Seconds to wait for the sandbox to answer HTTP (0: do not wait).
    #[arg(
        help_heading = "Timeouts",
        long,
        env = "LIFECYCLE_READY_TIMEOUT",
        default_value_t = 60
    )]
    pub ready_timeout: u64,
    /// Seconds an open-mode absent teardown waits for its listing before keeping strict cleanup.
    #[arg(
        help_heading = "Timeouts",
        long,
        env = "LIFECYCLE_LIST_TIMEOUT",
        default_value_t = 10
    )]
    pub list_timeout: u64,
    /// Seconds `stop` gives a container before the engine kills it.
    #[arg(
        help_heading = "Timeouts",
        long,
        env = "LIFECYCLE_STOP_TIMEOUT",
        default_value_t = 5
    )]
    pub stop_timeout: i64,
    /// Seconds to wait for another lifecycle operation on the same sandbox ID (exit 5 after).
    #[arg(
        help_heading = "Timeouts",
        long,
        env = "LIFECYCLE_LOCK_TIMEOUT",
        default_value_t = 120
    )]
    pub lock_timeout: u64,
    /// Seconds to wait for a container the engine is already removing to be gone.
    #[arg(
        help_heading = "Timeouts",
        long,
        env = "LIFECYCLE_REMOVAL_WAIT",
        default_value_t = 30
    )]
    pub removal_wait: u64,
    #[command(flatten)]
    pub resources: crate::resources::ResourceArgs,
    /// Logs on stderr as plain text or JSON objects, one per line; `LIFECYCLE_LOG` filters them
    /// (an EnvFilter, default `info`).
    #[arg(
        help_heading = "Logging",
        long,
        env = "LIFECYCLE_LOG_FORMAT",
        value_enum,
        default_value = "plain"
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create (or discover) the sandbox of a user's thread; prints one JSON object.
    Create {
        /// The user's ID: 1 to 128 of A-Z, a-z, 0-9, '_' and '-'.
        #[arg(long, env = "LIFECYCLE_USER")]
        user: String,
        /// The thread's ID: 1 to 64 of A-Z, a-z, 0-9, '_' and '-'.
        #[arg(long, env = "LIFECYCLE_THREAD")]
        thread: String,
    },
    /// Stop and remove a sandbox (and its restricted resources).
    Destroy {
        /// The sandbox ID, as `create` or `ls` printed it.
        id: String,
    },
    /// List the stack's sandboxes, one JSON line each.
    Ls,
    /// The quarantine ledger.
    #[command(subcommand)]
    Quarantine(QuarantineCommand),
    /// Absent teardown for every record whose container is confirmed absent.
    Retire,
    /// Serve the provider's HTTP/JSON API (acquire, release, destroy, list) and deer-flow's
    /// provisioner API, on a Unix socket or TCP.
    #[command(
        after_help = "Needs the global flags before `serve`: lifecycle --docker-host unix:///PATH/stack.sock --prefix P --mode open|restricted --state-dir DIR [--image IMAGE] serve --listen ..."
    )]
    Serve(Box<crate::serve::cmd::ServeArgs>),
}

#[derive(Debug, Subcommand)]
pub enum QuarantineCommand {
    /// Quarantine a sandbox's generation (default: its current container, else `unknown`).
    Mark {
        /// The sandbox ID, as `create` or `ls` printed it.
        id: String,
        /// The generation to quarantine: a container ID [default: the sandbox's current
        /// container, else `unknown`].
        #[arg(long, env = "LIFECYCLE_GENERATION")]
        generation: Option<String>,
    },
    /// Every record, one JSON line per sandbox.
    Ls,
}

/// Exit codes (documented in the README).
const ERROR: u8 = 1;
const USAGE: u8 = 2;
/// Teardown not finished; the quarantine record is kept.
const DEFERRED: u8 = 3;
/// A create failed and so did its rollback: objects are left, quarantined, their port kept.
const ROLLBACK_FAILED: u8 = 4;
/// Another operation on the same sandbox ID held its lock for --lock-timeout.
const LOCK_TIMEOUT: u8 = 5;
/// SIGINT/SIGTERM while waiting for the lock (nothing was done).
const INTERRUPTED: u8 = 130;

fn split_cmd(cmd: Option<String>) -> Option<Vec<String>> {
    cmd.map(|c| vec!["sh".into(), "-c".into(), c])
}

fn print(v: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
}

fn exit_code(e: &OpError) -> u8 {
    match e {
        OpError::Invalid(_) | OpError::Usage(_) => USAGE,
        OpError::Deferred { .. } => DEFERRED,
        OpError::RollbackFailed { .. } => ROLLBACK_FAILED,
        OpError::Lock(LockError::Timeout { .. }) => LOCK_TIMEOUT,
        OpError::Lock(LockError::Interrupted { .. }) => INTERRUPTED,
        _ => ERROR,
    }
}

fn fail(e: &OpError) -> ExitCode {
    eprintln!("lifecycle: {e}");
    ExitCode::from(exit_code(e))
}

/// The sidecar's flags, read now by netproxy's own parsers: a typo would otherwise be found by
/// every restricted sandbox's sidecar as it starts, and exit it, leaving the sandbox no way out.
fn check_egress(a: &Args) -> Result<(), String> {
    for rule in &a.egress_allow {
        egress::rules::Rule::parse(rule).map_err(|e| format!("--egress-allow {rule:?}: {e}"))?;
    }
    for (flag, list) in [
        ("--egress-allow-cidr", &a.egress_allow_cidr),
        ("--egress-own-cidr", &a.egress_own_cidr),
    ] {
        egress::cidr::cidrs(flag, list).map_err(|e| e.to_string())?;
    }
    for prefix in &a.egress_nat64_prefix {
        prefix
            .parse::<egress::nat64::Nat64Prefix>()
            .map_err(|e| format!("--egress-nat64-prefix {e}"))?;
    }
    Ok(())
}

/// The whole program; `main` only calls this.
pub fn main() -> ExitCode {
    let mut args = match Args::try_parse() {
        Ok(a) => a,
        // One line, as every start-up error (netproxy words clap's refusals the same way).
        Err(e) => match scrape::startup::clap_line(&e) {
            Some(line) => {
                eprintln!("lifecycle: {line}");
                return ExitCode::from(USAGE);
            }
            // `--help`, `--version`, and the bare command's help: clap prints them.
            None => e.exit(),
        },
    };
    scrape::logging::init("LIFECYCLE_LOG", args.log_format);
    // `LIFECYCLE_EGRESS_ALLOW=` (compose's `${EGRESS_ALLOW:-}`) is no rule, not an empty one:
    // the sidecar then allows nothing, and every command, destroy included, still runs.
    args.egress_allow.retain(|r| !r.trim().is_empty());
    // The same rule sockproxy enforces (docs/architecture.md, "Names"), from the one place it is written.
    let prefix = match Prefix::parse(&args.prefix) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("lifecycle: --prefix: {e}");
            return ExitCode::from(USAGE);
        }
    };
    if let Err(e) = check_egress(&args) {
        eprintln!("lifecycle: {e}");
        return ExitCode::from(USAGE);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lifecycle: cannot start: {e}");
            return ExitCode::from(ERROR);
        }
    };
    runtime.block_on(run(args, prefix))
}

/// Turns SIGINT/SIGTERM into `true` on the returned channel; only a lock wait listens, so an
/// operation that holds its lock is never cut off mid-step.
fn signals() -> tokio::sync::watch::Receiver<bool> {
    use tokio::signal::unix::{signal, SignalKind};
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (int, term) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    );
    if let (Ok(mut int), Ok(mut term)) = (int, term) {
        tokio::spawn(async move {
            tokio::select! {
                _ = int.recv() => {},
                _ = term.recv() => {},
            }
            tracing::warn!(
                "signal received: giving up any lock wait; an operation under way finishes first"
            );
            let _ = tx.send(true);
        });
    }
    rx
}

async fn serve_main(
    lc: Lifecycle,
    serve: &crate::serve::cmd::ServeArgs,
    stop: tokio::sync::watch::Receiver<bool>,
) -> ExitCode {
    use crate::serve::cmd;
    let setup = cmd::limits(serve).and_then(|l| Ok((l, cmd::provider(lc, serve)?)));
    let setup = match setup {
        Ok((l, p)) => match cmd::bind(serve).await {
            Ok(b) => cmd::bind_metrics(serve).map(|m| (l, p, (b, m))),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    let (limits, provider, (listener, metrics)) = match setup {
        Ok(v) => v,
        Err(e) => {
            eprintln!("lifecycle serve: {e}");
            return ExitCode::from(if e.is_runtime() { ERROR } else { USAGE });
        }
    };
    let provider = std::sync::Arc::new(provider);
    let all_done = cmd::run(provider, listener, metrics, serve, limits, stop).await;
    ExitCode::from(if all_done { 0 } else { DEFERRED })
}

async fn run(args: Args, prefix: Prefix) -> ExitCode {
    let engine = match Engine::new(&args.docker_host) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("lifecycle: {e}");
            return ExitCode::from(USAGE);
        }
    };
    let (sandbox_resources, sidecar_resources) = match args.resources.resources() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lifecycle: {e}");
            return ExitCode::from(USAGE);
        }
    };
    let settings = Settings {
        prefix,
        mode: args.mode,
        image: args.image,
        sandbox_port: args.sandbox_port,
        publish_address: args.publish_address,
        sandbox_cmd: split_cmd(args.sandbox_cmd),
        sidecar_image: args.sidecar_image,
        sidecar_cmd: split_cmd(args.sidecar_cmd),
        egress_allow: args.egress_allow,
        egress_allow_cidr: args.egress_allow_cidr,
        egress_own_cidr: args.egress_own_cidr,
        egress_nat64_prefix: args.egress_nat64_prefix,
        ready_timeout: Duration::from_secs(args.ready_timeout),
        list_timeout: Duration::from_secs(args.list_timeout),
        stop_timeout: args.stop_timeout,
        lock_timeout: Duration::from_secs(args.lock_timeout),
        removal_wait: Duration::from_secs(args.removal_wait),
        sandbox_resources,
        sidecar_resources,
    };
    let signalled = signals();
    let lc = Lifecycle::new(engine, &args.state_dir, settings);
    // serve's shutdown tears down under the locks after the signal, so its lock waits must not
    // give up at it; the one-shot commands' waits do.
    let lc = if matches!(args.command, Command::Serve(_)) {
        lc
    } else {
        lc.with_cancel(signalled.clone())
    };
    let printed = match args.command {
        Command::Serve(serve) => return serve_main(lc, &serve, signalled).await,
        Command::Create { user, thread } => {
            lc.create(&user, &thread).await.map(|c| print(&json!(c)))
        }
        Command::Destroy { id } => lc.destroy(&id).await.map(|d| {
            print(&json!({
                "sandbox_id": d.sandbox_id,
                "destroyed": true,
                "container_id": d.container_id,
                "ports_released": d.ports_released,
                "absent_teardown": d.absent_teardown,
                "leftovers": d.leftovers,
            }))
        }),
        Command::Ls => lc.list().await.map(|list| {
            for l in list {
                print(&json!(l));
            }
        }),
        Command::Quarantine(QuarantineCommand::Mark { id, generation }) => {
            lc.mark(&id, generation).await.map(|(generation, path)| {
                print(&json!({ "sandbox_id": id, "generation": generation, "record": path }))
            })
        }
        Command::Quarantine(QuarantineCommand::Ls) => lc
            .ledger
            .entries()
            .map(|entries| {
                for e in entries {
                    print(&json!(e));
                }
            })
            .map_err(OpError::from),
        Command::Retire => {
            return match lc.retire_all().await {
                Ok(lines) => {
                    let deferred = lines.iter().any(|l| {
                        !matches!(
                            l,
                            Retired::Retired { .. }
                                | Retired::Kept {
                                    sandbox_id: Some(_),
                                    ..
                                }
                        )
                    });
                    for l in lines {
                        print(&json!(l));
                    }
                    // A record kept because its container is present is not a failure.
                    ExitCode::from(if deferred { DEFERRED } else { 0 })
                }
                Err(e) => fail(&e),
            };
        }
    };
    match printed {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// `--publish-address`: an IP address (a name would be resolved by the engine, where the
/// operator cannot see what it exposes).
fn publish_address(raw: &str) -> Result<String, String> {
    raw.parse::<std::net::IpAddr>()
        .map(|ip| ip.to_string())
        .map_err(|_| format!("{raw:?}: expected an IP address such as 127.0.0.1"))
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
