//! sockproxy: a per-stack Docker Engine API proxy, the transport half. Every decision is
//! `sockproxy_policy`'s, made without I/O at one seam, `evaluate(request, facts, policy)`: the
//! transport serves the socket (`server`, on `loops`' event-loop threads, watched by `quiet`),
//! evaluates each request (`proxy`), gathers the fact a plan names (`resolve`: an inspect
//! through `upstream`, or the name map `names`, kept coherent by `watch`), evaluates again and
//! acts: reads and checks bodies (`body`), forwards (`forward`, `plans`, `lists`), streams the
//! stack's events (`event_stream`) and answers refusals (`refused`). `config`, `policy_file`,
//! `spend_args` and `seccomp_profile` read the flags; `metrics` holds the metric families and
//! what `--metrics-listen` serves; `decision_line` writes one log line per decision.

mod answer;
pub mod body;
pub mod config;
pub mod decision_line;
pub mod event_stream;
mod exchange;
pub mod exposed;
mod forward;
pub mod h1;
mod h1conn;
pub mod heads;
pub mod host_paths;
pub mod inflight;
mod lists;
pub mod logfmt;
pub mod logwrite;
pub mod loops;
pub mod metrics;
pub mod names;
mod plans;
pub mod policy_file;
mod pool;
pub mod props;
pub mod proxy;
mod quiet;
mod refused;
mod resolve;
pub mod seccomp_profile;
pub mod server;
pub mod spend_args;
pub mod upstream;
pub mod watch;
