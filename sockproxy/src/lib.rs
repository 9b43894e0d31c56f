//! sockproxy: a per-stack Docker Engine API proxy, the transport half. Every decision is
//! `sockproxy_policy`'s, made without I/O at one seam, `evaluate(request, facts, policy)`: the
//! transport serves the socket (`server`: tokio's multi-thread runtime, `--event-loops` workers,
//! a task per connection behind headguard's scanner), evaluates each request (`proxy`), gathers
//! the fact a plan names (`resolve`: an inspect through `upstream` on `engine`'s one HTTP/1
//! client, hyper-util's; or the name map `names`, kept coherent by `watch`), evaluates again and
//! acts: reads and checks bodies (`body`), forwards (`forward`, `plans`, `lists`), streams the
//! stack's events (`event_stream`) and answers refusals (`refused`). `wire` is the body type
//! both sides carry. `config`, `policy_file`, `spend_args` and `seccomp_profile` read the flags
//! and the policy file; `metrics` holds the metric families and what `--metrics-listen` serves;
//! `decision_line` is the one `tracing` event per decision, written by tracing-subscriber's `fmt`
//! layer, written whole to stderr (the binary's `main`).

mod answer;
pub mod body;
pub mod config;
pub mod decision_line;
mod engine;
pub mod event_stream;
mod exchange;
pub mod exposed;
mod forward;
pub mod host_paths;
pub mod inflight;
mod lists;
pub mod metrics;
pub mod names;
pub mod pin_dir;
pub mod pin_watch;
pub mod pins;
mod plans;
pub mod policy_file;
pub mod props;
pub mod proxy;
mod refused;
mod resolve;
pub mod seccomp_profile;
pub mod server;
pub mod spend_args;
pub mod upstream;
pub mod watch;
pub mod wire;
