//! sockproxy-policy: what a stack may ask of the Docker Engine API, decided without I/O. The
//! transport (the `sockproxy` crate) hands it what it read and acts on what it answers.
//!
//! A request is canonicalized (`canon`), typed (`api`) and decided (`policy`, `scope`); an
//! object the engine resolved is pinned to its ID (`pinning`). What a stack may write is read
//! field by field (`fields`, `json`) and decided by `create_body`, `host_config`, `mounts`,
//! `paths` and `write_rules` under the operator's `create_rules`; what it may spend by `spend`
//! and `spend_host`. Answers are cut to the stack's view: lists (`list_query`, `filter`,
//! `volumes`), events (`events`) and `info`. A refusal (`refusal`) carries dockerd's error
//! shape. `props` holds the properties the fuzz targets assert.

pub mod api;
pub mod canon;
pub mod create_body;
pub mod create_rules;
pub mod evaluate;
pub mod events;
pub mod fields;
pub mod filter;
pub mod host_config;
pub mod host_refs;
pub mod images;
pub mod info;
pub mod json;
pub mod list_query;
pub mod mounts;
pub mod paths;
pub mod pinning;
pub mod policy;
pub mod props;
pub mod reference;
pub mod refusal;
pub mod scope;
pub mod seccomp;
pub mod spend;
pub mod spend_host;
pub mod volumes;
pub mod write_rules;
