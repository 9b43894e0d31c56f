//! sockproxy-policy: what a stack may ask of the Docker Engine API, decided without I/O. The
//! seam is one function, `evaluate::evaluate(request, facts, policy) -> Decision`: the transport
//! (the `sockproxy` crate) hands it a request head and what its I/O found (`Facts`), and acts on
//! the `Plan` it answers, or sends the `Refusal`. A plan that names an object says which fact it
//! needs; only with that fact does it carry the `Pinned` ID, which nothing outside this crate
//! can make. The body and answer rules below are public too: the transport calls them when a
//! plan says to read a body or cut an answer.
//!
//! Within: a request is canonicalized (`canon`), typed (`api`, `reference`) and decided
//! (`policy`, `scope`, `spend`); an object the engine named is pinned (`pinning`, private: its
//! rules are reached through `evaluate` only, and the engine's other answers through `answers`). Bodies are
//! read with the key rule (`json`, `fields`) and decided by `create_body`, `host_config`,
//! `host_refs`, `mounts`, `paths` and `write_rules` under the operator's `create_rules`, and
//! `spend_host`; `bind_pins` says which host paths a create binds, for the transport to pin,
//! and writes the body forwarded with the staging paths it pinned them on. Answers are cut to the stack's view: lists (`list_query`, `filter`,
//! `volumes`), events (`events`) and `info`. A refusal (`refusal`) carries dockerd's error
//! shape. `props` and `evaluate_props` hold the properties the fuzz targets assert.

pub mod answers;
pub mod api;
pub mod bind_pins;
pub mod canon;
pub mod create_body;
pub mod create_props;
pub mod create_rules;
pub mod evaluate;
pub mod evaluate_props;
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
pub(crate) mod pinning;
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
