//! How every program of the toolkit logs: tracing-subscriber's `fmt` layer to stderr, plain or
//! JSON (`--log-format`), filtered by the program's own variable (`SOCKPROXY_LOG`,
//! `NETPROXY_LOG`, `LIFECYCLE_LOG`: an `EnvFilter`, default `info`). Each line is written whole
//! with one `write(2)` by the thread that logs it, so a line is out before the answer it
//! describes is, and a SIGKILL loses none. tracing-appender's non-blocking writer was measured
//! and dropped: its channel woke its thread with two futex calls and four `sched_yield`s per
//! line, and sockproxy's `/_ping` cost 25.7-28.3 µs of CPU against 19.4-19.6 µs written
//! directly (docs/benchmarks.md, "Issue 39").

/// `--log-format`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Plain,
    Json,
}

/// Installs the process's subscriber, filtered by the variable `filter_env` (default `info`).
/// A second call keeps the first subscriber.
pub fn init(filter_env: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env(filter_env)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // sockproxy's decision line has a `target` field of its own (the request path).
        .with_target(false)
        // Colour codes only on a terminal: a log file or the journal gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
