//! netproxy: the restricted-mode egress sidecar (docs/architecture.md, "netproxy"). `target` parses and canonicalizes
//! request targets; `rules` decides on the name before any lookup; `resolve` looks names up
//! (injectable); `addr` refuses special-purpose addresses (`special` is the table, `own` the
//! sidecar's networks, `nat64` the translator prefixes); `policy` joins them into the pure halves of the pipeline; `proxy` is
//! the one pipeline for CONNECT and absolute-form requests, which `dial` connects (Happy
//! Eyeballs) and hands to `tunnel` or `forward`; `rejudge` what is judged again after the decision (at dial time, on a reload, on a network change); `connection` what one client connection's requests share; `refusal` says why not; `audit` writes the
//! decision and end lines; `server` is the listener and its limits (`caps` the connection caps every listener keeps), `client` a connection as hyper gets it; `framing` judges every
//! request head before hyper; `relay` the inbound relay listener (`--relay`) and `relay_target` where it may connect; `idle` tunnel idleness; `splice` the zero-copy relay (Linux);
//! `config` the flags, `startup` their validated `Config` and the one-line start-up errors; `fds`
//! the descriptor limit; `metrics` the metric families and what `--metrics-listen` serves. The
//! limit on a write the client does not take is `scrape::write_timeout`, shared with
//! `lifecycle serve`.

pub mod addr;
// The rule language lives in `egress` (lifecycle reads it too); its paths stay as they were.
pub use egress::{nat64, rules, target};
pub mod audit;
pub mod caps;
mod client;
pub mod config;
pub mod connection;
pub mod dial;
pub mod fds;
pub mod forward;
pub use headguard as framing;
pub mod idle;
pub mod metrics;
pub mod own;
pub mod policy;
pub mod props;
pub mod proxy;
pub mod refusal;
pub mod rejudge;
pub mod relay;
pub mod relay_target;
pub mod resolve;
pub mod server;
pub mod special;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod splice;
pub mod startup;
pub mod tunnel;
