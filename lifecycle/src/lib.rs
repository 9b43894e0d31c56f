//! lifecycle: sandboxes created, discovered, quarantined and torn down through the stack's
//! sockproxy (docs/architecture.md, "lifecycle"). `naming` holds IDs, names and labels (from `stackmodel`); `engine` the
//! bollard client on the one given socket (`engine_networks` its network calls); `ledger` the
//! quarantine records; `intent` the record of a multi-object step under way (`converge`
//! finishes or undoes an interrupted one); `ports` host-port reservations per generation; `lock`
//! the per-sandbox-ID lock; `private` the state tree's modes (0700/0600); `decide` the pure
//! decisions (and `teardown_plan` what a teardown of a present container does); `ops` the
//! `Lifecycle` value and what operations return, `create` (with `create_restricted` and
//! `create_undo`) and `teardown` the operations; `ready` the readiness probe; `resources` the
//! memory, CPU and process limits of what it makes; `cli` the command line; `serve` the
//! long-running provider (`lifecycle serve`).

pub mod cli;
mod converge;
mod create;
mod create_restricted;
mod create_undo;
pub mod decide;
pub mod engine;
mod engine_networks;
pub mod intent;
pub mod ledger;
pub mod lock;
pub mod naming;
pub mod ops;
pub mod ports;
mod private;
pub mod props;
pub mod ready;
pub mod resources;
pub mod serve;
mod teardown;
pub mod teardown_plan;

pub use create::{BeforeUndo, Unguarded};
