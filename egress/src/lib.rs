//! egress: the egress rule language, shared by netproxy (which enforces it) and lifecycle (which
//! checks its `--egress-*` flags at start-up, before it starts a sidecar with them), so lifecycle
//! needs none of netproxy's proxy. `target` reads a host the way a client names it, `rules` the
//! host rules (`example.com`, `*.example.org:443`), `cidr` the networks, `nat64` a NAT64 prefix, `relay` an inbound relay and its fixed target.
//! Pure: no I/O.

pub mod cidr;
pub mod nat64;
pub mod relay;
pub mod rules;
pub mod target;
