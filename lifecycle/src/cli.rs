//! The `lifecycle` command line: flags (each with a `LIFECYCLE_*` fallback) validated into
//! `Settings` once, one JSON value or line per result on stdout, one-line errors on stderr, and
//! exit codes 0 done, 1 error, 2 usage, 3 deferred (teardown not finished; the record is kept).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::json;

use crate::decide::Mode;
use crate::engine::Engine;
use crate::ledger::{Ledger, UNKNOWN_GENERATION};
use crate::naming;
use crate::ops::{Lifecycle, OpError, Settings};
use crate::ports::Ports;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

/// Create, discover, quarantine and tear down a stack's sandboxes through its sockproxy.
#[derive(Debug, Parser)]
#[command(name = "lifecycle", version, about)]
pub struct Args {
    /// The stack's sockproxy socket (the only engine address lifecycle uses).
    #[arg(long, env = "LIFECYCLE_DOCKER_HOST")]
    pub docker_host: String,
    /// The stack's prefix P (sandboxes are named {P}sandbox-{id}).
    #[arg(long, env = "LIFECYCLE_PREFIX")]
    pub prefix: String,
    /// The process's network mode.
    #[arg(long, env = "LIFECYCLE_MODE", value_enum)]
    pub mode: Mode,
    /// Where the quarantine ledger and port reservations live.
    #[arg(long, env = "LIFECYCLE_STATE_DIR")]
    pub state_dir: PathBuf,
    /// Sandbox image (needed by create).
    #[arg(long, env = "LIFECYCLE_IMAGE")]
    pub image: Option<String>,
    /// Port the sandbox serves HTTP on.
    #[arg(long, env = "LIFECYCLE_SANDBOX_PORT", default_value_t = 8080)]
    pub sandbox_port: u16,
    /// Command for the sandbox, run with `sh -c` [default: the image's].
    #[arg(long, env = "LIFECYCLE_SANDBOX_CMD")]
    pub sandbox_cmd: Option<String>,
    /// Sidecar image (restricted mode).
    #[arg(long, env = "LIFECYCLE_SIDECAR_IMAGE")]
    pub sidecar_image: Option<String>,
    /// Command for the sidecar, run with `sh -c` [default: netproxy arguments from --egress-allow].
    #[arg(long, env = "LIFECYCLE_SIDECAR_CMD")]
    pub sidecar_cmd: Option<String>,
    /// Egress rules passed to the sidecar (repeatable, or comma-separated in the env var).
    #[arg(
        long = "egress-allow",
        env = "LIFECYCLE_EGRESS_ALLOW",
        value_delimiter = ','
    )]
    pub egress_allow: Vec<String>,
    /// Special-purpose ranges the sidecar may dial anyway (its --allow-cidr; repeatable).
    #[arg(
        long = "egress-allow-cidr",
        env = "LIFECYCLE_EGRESS_ALLOW_CIDR",
        value_delimiter = ','
    )]
    pub egress_allow_cidr: Vec<String>,
    /// Seconds to wait for the sandbox to answer HTTP (0: do not wait).
    #[arg(long, env = "LIFECYCLE_READY_TIMEOUT", default_value_t = 60)]
    pub ready_timeout: u64,
    /// Seconds an open-mode absent teardown waits for its listing before keeping strict cleanup.
    #[arg(long, env = "LIFECYCLE_LIST_TIMEOUT", default_value_t = 10)]
    pub list_timeout: u64,
    /// Seconds `stop` gives a container before the engine kills it.
    #[arg(long, env = "LIFECYCLE_STOP_TIMEOUT", default_value_t = 5)]
    pub stop_timeout: i64,
    #[arg(
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
        #[arg(long)]
        user: String,
        #[arg(long)]
        thread: String,
    },
    /// Stop and remove a sandbox (and its restricted resources).
    Destroy { id: String },
    /// List the stack's sandboxes, one JSON line each.
    Ls,
    /// The quarantine ledger.
    #[command(subcommand)]
    Quarantine(QuarantineCommand),
    /// Absent teardown for every record whose container is confirmed absent.
    Retire,
}

#[derive(Debug, Subcommand)]
pub enum QuarantineCommand {
    /// Quarantine a sandbox's generation (default: its current container, else `unknown`).
    Mark {
        id: String,
        #[arg(long)]
        generation: Option<String>,
    },
    /// Every record, one JSON line per sandbox.
    Ls,
}

const DEFERRED: u8 = 3;

fn split_cmd(cmd: Option<String>) -> Option<Vec<String>> {
    cmd.map(|c| vec!["sh".into(), "-c".into(), c])
}

fn print(v: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
}

fn fail(e: &OpError) -> ExitCode {
    eprintln!("lifecycle: {e}");
    ExitCode::from(match e {
        OpError::Invalid(_) | OpError::Usage(_) => 2,
        OpError::Deferred { .. } => DEFERRED,
        _ => 1,
    })
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LIFECYCLE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        // Colour codes only on a terminal: a log file or the journal gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// The whole program; `main` only calls this.
pub fn main() -> ExitCode {
    let args = Args::parse();
    init_logging(args.log_format);
    // The same rule sockproxy enforces (DESIGN §1), from the one place it is written.
    if let Err(e) = sockproxy::scope::Prefix::parse(&args.prefix) {
        eprintln!("lifecycle: --prefix: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lifecycle: cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let engine = match Engine::new(&args.docker_host) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("lifecycle: {e}");
            return ExitCode::from(2);
        }
    };
    let lc = Lifecycle {
        engine,
        ledger: Ledger::new(&args.state_dir, &args.prefix),
        ports: Ports::new(&args.state_dir),
        settings: Settings {
            prefix: args.prefix.clone(),
            mode: args.mode,
            image: args.image,
            sandbox_port: args.sandbox_port,
            sandbox_cmd: split_cmd(args.sandbox_cmd),
            sidecar_image: args.sidecar_image,
            sidecar_cmd: split_cmd(args.sidecar_cmd),
            egress_allow: args.egress_allow,
            egress_allow_cidr: args.egress_allow_cidr,
            ready_timeout: Duration::from_secs(args.ready_timeout),
            list_timeout: Duration::from_secs(args.list_timeout),
            stop_timeout: args.stop_timeout,
        },
    };
    match args.command {
        Command::Create { user, thread } => match lc.create(&user, &thread).await {
            Ok(c) => {
                print(&json!(c));
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        Command::Destroy { id } => match lc.destroy(&id).await {
            Ok(port) => {
                print(&json!({ "sandbox_id": id, "destroyed": true, "port_released": port }));
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        Command::Ls => match lc.engine.list_sandboxes(&args.prefix).await {
            Ok(list) => {
                for (name, id, state, labels) in list {
                    print(&json!({
                        "sandbox_id": labels.get(naming::LABEL_SANDBOX_ID),
                        "container_name": name,
                        "container_id": id,
                        "state": state,
                        "mode": labels.get(naming::LABEL_NETWORK_MODE),
                    }));
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("lifecycle: listing sandboxes: {e}");
                ExitCode::from(1)
            }
        },
        Command::Quarantine(QuarantineCommand::Mark { id, generation }) => {
            let id = match naming::parse_sandbox_id(&id) {
                Ok(id) => id,
                Err(e) => return fail(&OpError::Invalid(e)),
            };
            let generation = match generation {
                Some(g) => g,
                None => match lc
                    .engine
                    .inspect(&naming::Names::new(&args.prefix, &id).sandbox)
                    .await
                {
                    Ok(Some(c)) if !c.id.is_empty() => c.id,
                    _ => UNKNOWN_GENERATION.to_owned(),
                },
            };
            match lc.ledger.mark(&id, &generation) {
                Ok(path) => {
                    print(&json!({ "sandbox_id": id, "generation": generation, "record": path }));
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&OpError::Ledger(e)),
            }
        }
        Command::Quarantine(QuarantineCommand::Ls) => match lc.ledger.entries() {
            Ok(entries) => {
                for e in entries {
                    print(&json!(e));
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(&OpError::Ledger(e)),
        },
        Command::Retire => retire_all(&lc).await,
    }
}

/// `retire`: one JSON line per record; exit 3 if any teardown is deferred.
async fn retire_all(lc: &Lifecycle) -> ExitCode {
    let entries = match lc.ledger.entries() {
        Ok(e) => e,
        Err(e) => return fail(&OpError::Ledger(e)),
    };
    let mut deferred = false;
    for entry in entries {
        let Some(id) = entry.sandbox_id.clone() else {
            deferred = true;
            print(
                &json!({ "key": entry.key, "result": "kept", "reason": "record names no sandbox ID; it retires on the next create in its thread" }),
            );
            continue;
        };
        let line = match lc.is_absent(&id).await {
            Ok(false) => {
                json!({ "sandbox_id": id, "result": "kept", "reason": "container present" })
            }
            Ok(true) => match lc.complete_absent_teardown(&id).await {
                Ok(t) => {
                    json!({ "sandbox_id": id, "result": "retired", "strict": t.strict, "port_released": t.port_released })
                }
                Err(e) => {
                    deferred = true;
                    json!({ "sandbox_id": id, "result": "deferred", "error": e.to_string() })
                }
            },
            Err(e) => {
                deferred = true;
                json!({ "sandbox_id": id, "result": "deferred", "error": e.to_string() })
            }
        };
        print(&line);
    }
    if deferred {
        ExitCode::from(DEFERRED)
    } else {
        ExitCode::SUCCESS
    }
}
