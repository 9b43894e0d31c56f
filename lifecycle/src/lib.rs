//! lifecycle: sandboxes created, discovered, quarantined and torn down through the stack's
//! sockproxy (DESIGN §4). `naming` holds IDs, names and labels; `engine` the bollard client on
//! the one given socket; `ledger` the quarantine records; `ports` host-port reservations;
//! `decide` the pure teardown decisions; `ops` the operations (`create` the creation paths); `ready` the readiness probe;
//! `cli` the command line.

pub mod cli;
mod create;
pub mod decide;
pub mod engine;
pub mod ledger;
pub mod naming;
pub mod ops;
pub mod ports;
pub mod ready;
