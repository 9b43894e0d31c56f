//! `lifecycle serve`: the sandbox provider a gateway calls (docs/architecture.md, "The provider (`lifecycle serve`)"). `pool` is the pure
//! state (leases, holders, warm pool, expiry, cap), table-tested; `plan` what an acquire, a
//! provisioner create and a destroy must do first (one acquire decision for both routes);
//! `clock` the injectable monotonic clock; `claims` the pure ownership rule, `store` the
//! ownership store (memory), `redis_store` the shared one; `error` the provider's errors and
//! identity rule; `cap` the replica cap (pure, on the pool); `provider` does the I/O around the
//! pool (acquire; `release` the releases), `destroy` its teardowns and the reaper's pass;
//! `reclaim` where a handed-out sandbox came from; `listen` Unix or TCP listeners, `apikey` the
//! provisioner API's key, `provision` its pure input and mount rules, `provisioner` its work and
//! `api_http` its answers, `v1_http` the project API's; `routes` the one route table of both
//! APIs, `http` the server, `gate` its cap on connections that have not shown the key;
//! `exposed` what `--metrics-listen` serves; `engine_health` the engine check behind
//! deer-flow's `/health`; `hosts` one provisioner URL over several Docker
//! hosts (routing by the Redis claim, stale removal), `registry` its shared registry in Redis;
//! `background` the reaper and heartbeat loops, `reconcile` the reconciliation, `shutdown` the
//! shutdown; `limits` the socket's header
//! and write timeouts (the write timeout enforced by `scrape::write_timeout`) and connection
//! cap; `cmd` the command's flags and main loop.

mod answer;
pub mod api_http;
pub mod apikey;
pub mod background;
pub mod cap;
pub mod claims;
pub mod clock;
pub mod cmd;
pub mod destroy;
pub mod egress_log;
pub mod engine_health;
pub mod error;
pub mod exposed;
pub mod gate;
pub mod host_dirs;
pub mod hosts;
pub mod http;
pub mod limits;
pub mod listen;
pub mod metrics;
pub mod plan;
pub mod pool;
pub mod provider;
pub mod provision;
pub mod provisioner;
pub mod reclaim;
pub mod reconcile;
pub mod redis_store;
pub mod registry;
pub mod release;
pub mod routes;
pub mod shutdown;
pub mod store;
pub mod v1_http;
