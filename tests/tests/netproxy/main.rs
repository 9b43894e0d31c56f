//! netproxy, the egress proxy: on loopback with an injected resolver, its decisions
//! (`loopback`), what it passes back from an upstream (`answers`), its limits (`limits`), a
//! policy reload reaching open tunnels (`reload`), its metrics endpoint scraped as Prometheus
//! does (`metrics`), and restricted mode end to end on the real engine with the real sidecar
//! image (`restricted_e2e`). Run on its own with
//! `cargo test -p sockproxy-tests --test netproxy`.

mod answers;
mod limits;
mod loopback;
mod metrics;
mod reload;
mod restricted_e2e;
