//! netproxy: the restricted-mode egress sidecar (DESIGN §3). `target` parses and canonicalizes
//! request targets; `rules` decides on the name before any lookup; `addr` refuses
//! special-purpose addresses after it.

pub mod addr;
pub mod rules;
pub mod target;
