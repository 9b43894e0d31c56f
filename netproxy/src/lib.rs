//! netproxy: the restricted-mode egress sidecar (DESIGN §3). `target` parses and canonicalizes
//! request targets; `rules` decides on the name before any lookup; `resolve` looks names up
//! (injectable); `addr` refuses special-purpose addresses; `proxy` is the one pipeline for
//! CONNECT and absolute-form requests; `server` the listener and its limits; `idle` tunnel
//! idleness; `splice` the zero-copy tunnel relay (Linux); `framing` judges every request head as
//! sent; `config` the flags.

pub mod addr;
pub mod config;
pub mod framing;
pub mod idle;
pub mod props;
pub mod proxy;
pub mod resolve;
pub mod rules;
pub mod server;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod splice;
pub mod target;
