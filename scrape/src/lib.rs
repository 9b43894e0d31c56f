//! scrape: what the toolkit's three programs (sockproxy, netproxy, `lifecycle serve`) share to
//! serve. The metrics endpoint (`--metrics-listen`, off by default): `serve` answers `GET
//! /metrics` with the process's Prometheus text exposition and `GET /healthz` with its health;
//! the metric families themselves are each program's own (their `metrics` modules), and
//! `encode` writes a registry in the classic text format. Around it, what every listening
//! program needs once: `listen` reads a listening address (a Unix socket path or
//! `tcp://HOST:PORT`) and `bind` makes the socket (stale file, mode, group); `activation` takes
//! a socket systemd passed; `write_timeout` ends a connection whose client takes no bytes;
//! `raw_answer` tells a connection over a cap 503 before hyper is involved; `logging` sets up
//! the log lines; `startup` reports a start-up error on one line; `background` runs a server on
//! a thread of its own, for tests and tools.

pub mod activation;
pub mod background;
pub mod labels;
pub mod listen;
pub mod logging;
pub mod process;
pub mod raw_answer;
pub mod serve;
pub mod startup;
pub mod write_timeout;

pub use background::Background;
pub use listen::{bind, BindError, Listen, ListenError, Listener, SocketFile, METRICS_MODE};
pub use logging::LogFormat;
pub use serve::{serve, Exposition, Health};
pub use write_timeout::{is_write_stall, WriteStalled, WriteTimeout};

/// `registry` in the Prometheus text format (0.0.4): `# HELP`, `# TYPE`, then the samples;
/// a counter registered as `x` is written `x_total`.
pub fn encode(registry: &prometheus_client::registry::Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail; an encoder error would leave what was written.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, registry);
    out
}
