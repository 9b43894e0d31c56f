//! sockproxy: a per-stack Docker Engine API proxy. A request is canonicalized (`canon`), typed
//! (`api`), decided without I/O (`policy`, `scope`), then resolved, pinned and forwarded
//! (`proxy`, `upstream`); list answers are filtered (`filter`); refusals look like dockerd's
//! errors (`refusal`). What a stack may write is read field by field (`fields`) and decided by
//! `create_body`, `host_config`, `mounts` and `write_rules`;
//! `events` filters the event stream; `names` remembers the stack's own names and IDs, kept
//! coherent by `watch`'s event subscription. `server` owns the socket, `loops` the event-loop
//! threads its connections are served on, `quiet` how those loops watch each socket, `config`
//! the flags, `metrics` the metric families and what `--metrics-listen` serves.

mod answer;
pub mod body;
pub mod config;
pub mod decision_line;
pub mod event_stream;
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
