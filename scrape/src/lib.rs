//! scrape: the metrics endpoint sockproxy and netproxy share (`--metrics-listen`, off by
//! default). `listen` reads the address (a Unix socket path or `tcp://HOST:PORT`) and binds it;
//! `serve` answers `GET /metrics` with the process's Prometheus text exposition and `GET
//! /healthz` with its health. The metric families themselves are each program's own (their
//! `metrics` modules); `encode` writes a registry in the classic text format. `listen`'s address
//! is every listening flag's (`lifecycle serve --listen` too), and `startup` is how each program
//! reports a start-up error, on one line.

pub mod activation;
pub mod labels;
pub mod listen;
pub mod process;
pub mod serve;
pub mod startup;

pub use listen::{bind, BindError, Listen, ListenError, Listener};
pub use serve::{serve, Exposition, Health};

/// `registry` in the Prometheus text format (0.0.4): `# HELP`, `# TYPE`, then the samples;
/// a counter registered as `x` is written `x_total`.
pub fn encode(registry: &prometheus_client::registry::Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail; an encoder error would leave what was written.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, registry);
    out
}
