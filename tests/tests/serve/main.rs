//! `lifecycle serve`, the sandbox provider: the seed's behaviours through its HTTP API
//! (`provider`), shutdown (`shutdown`), its Redis ownership store and two providers sharing it
//! (`redis`), ownership claims around failures and orphans (`claims`), and acquire/release/reclaim
//! on the real engine (`real`). Run on its own with `cargo test -p sockproxy-tests --test serve`.

mod claims;
mod provider;
mod real;
mod redis;
mod shutdown;
