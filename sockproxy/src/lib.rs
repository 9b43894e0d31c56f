//! sockproxy: a per-stack Docker Engine API proxy. A request is canonicalized (`canon`), typed
//! (`api`), decided without I/O (`policy`, `scope`), then resolved, pinned and forwarded
//! (`proxy`, `upstream`, on `engine`'s one HTTP/1 client, hyper-util's); list answers are
//! filtered (`filter`); refusals look like dockerd's errors (`refusal`). What a stack may write
//! is read field by field (`fields`) and decided by `create_body`, `host_config`, `mounts` and
//! `write_rules`;
//! `events` filters the event stream; `names` remembers the stack's own names and IDs, kept
//! coherent by `watch`'s event subscription. `server` owns the socket, the runtime (tokio's
//! multi-thread one, `--event-loops` workers) and a task per connection behind headguard's
//! scanner; `config` the flags, `metrics` the metric families and what `--metrics-listen`
//! serves. Log lines, the decision line (`decision_line`) among them, go through
//! tracing-subscriber's `fmt` layer and tracing-appender's non-blocking writer (the binary's
//! `main`).

mod answer;
pub mod api;
pub mod body;
pub mod canon;
pub mod config;
pub mod create_body;
pub mod decision_line;
mod engine;
pub mod events;
pub mod exposed;
pub mod fields;
pub mod filter;
mod forward;
pub mod host_config;
pub mod inflight;
pub mod info;
pub mod list_query;
mod lists;
pub mod metrics;
pub mod mounts;
pub mod names;
pub mod pinning;
mod plans;
pub mod policy;
pub mod policy_file;
pub mod props;
pub mod proxy;
pub mod refusal;
mod resolve;
pub mod scope;
pub mod seccomp;
pub mod server;
pub mod spend;
pub mod spend_host;
pub mod upstream;
pub mod volumes;
pub mod watch;
pub mod wire;
pub mod write_rules;
