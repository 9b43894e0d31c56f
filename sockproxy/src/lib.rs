//! sockproxy: a per-stack Docker Engine API proxy, the transport half. Every decision is
//! `sockproxy_policy`'s, made without I/O at one seam, `evaluate(request, facts, policy)`: the
//! transport serves the socket (`server`: tokio's multi-thread runtime, `--worker-threads` workers,
//! a task per connection behind headguard's scanner) and hands each request (`proxy`) to one
//! loop (`decide`): evaluate, gather the fact the plan needs (`exchange`: the JSON body, read
//! bounded by `body`; an inspect through `upstream` on `engine`'s one HTTP/1 client,
//! hyper-util's, or the name map `names`, kept coherent by `watch`; the stack's own objects;
//! the stack's network and its totals, under `stack_lock`), evaluate again, until the plan is
//! final. Then it acts (`act`): forwards (`forward`), cuts lists (`lists`), streams the stack's events (`event_stream`), and answers refusals
//! (`refused`). Beside requests, `log_guard` stops the stack's containers that flood their logs
//! (`sockproxy_policy::log_flood`), keeping its last stop in `--state-dir` (`guard_memory`). `wire` is the body type
//! both sides carry. `config`, `policy_file`, `spend_args` and `seccomp_profile` read the flags
//! and the policy file (`config_error` says why they do not make a `Config`); `metrics` holds the
//! metric families and what `--metrics-listen` serves; `decision_line` is the one `tracing`
//! event per decision, written by tracing-subscriber's `fmt` layer, written whole to stderr
//! (the binary's `main`).
mod act;
mod bind_root;
pub mod body;
mod client_body;
pub mod config;
pub mod config_error;
mod decide;
pub mod decision_line;
pub mod deployment;
mod engine;
pub mod engine_reach;
pub mod event_stream;
mod exchange;
pub mod exposed;
mod forward;
pub mod guard_memory;
pub mod host_paths;
pub mod inflight;
mod lists;
pub mod log_guard;
pub mod metrics;
pub mod names;
pub mod pin_dir;
pub mod pin_watch;
pub mod pins;
pub mod policy_file;
mod pooled_create;
pub mod props;
pub mod proxy;
mod refused;
pub mod seccomp_profile;
pub mod server;
pub mod spend_args;
pub mod stack_facts;
pub mod stack_lock;
pub mod upstream;
pub mod watch;
pub mod wire;
