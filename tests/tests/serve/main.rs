//! `lifecycle serve`, the sandbox provider: the seed's behaviours through its HTTP API
//! (`provider`), shutdown (`shutdown`), its Redis ownership store and two providers sharing it
//! (`redis`), ownership claims around failures and orphans (`claims`), acquire/release/reclaim
//! on the real engine (`real`), the socket's header and write timeouts and connection cap
//! (`limits`), leases released by the reaper once not renewed within `--lease-timeout`
//! (`leases`), a restricted stack's egress refusals counted past its sandboxes
//! (`egress_refusals`), one provisioner URL over several hosts (`multi_host`, and
//! `multi_host_routes`: calls sent to the wrong host, a Redis outage; `multi_host_engine_down`: a
//! host's claims lapse while its engine is gone), and `/health` answering for the engine
//! (`health_engine`).
//! Run on its own with `cargo test -p sockproxy-tests --test serve`.

mod claims;
mod crash_steps;
mod egress_refusals;
mod findings;
mod health_engine;
mod keyed;
mod leases;
mod limits;
mod liveness;
mod multi_host;
mod multi_host_engine_down;
mod multi_host_routes;
mod provider;
mod provisioner;
mod provisioner_guards;
mod real;
mod redis;
mod resources;
mod seed;
mod seed_teardown;
mod shutdown;
mod shutdown_api;
