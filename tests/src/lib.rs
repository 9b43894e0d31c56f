//! Test support for the toolkit's integration tests: engines to test against (`engine`), a
//! stack's proxy started in-process (`stack`), the docker CLI with deadlines (`cli`), a raw
//! HTTP/1.1 client for requests no well-behaved client would send (`raw`), and a recording
//! upstream that proves what was (not) forwarded (`recorder`), and deer-flow's gateway replayed
//! as docker CLI steps (`deerflow`). Every test finds this build's programs through `bins`,
//! runs a case on each engine with `engine::each_engine`, skips only through `skip::skip`, and
//! names the steps of a long scenario with `step::step`, and waits for a program it runs with
//! `bounded`.

pub mod bindroot;
pub mod bins;
pub mod bounded;
pub mod cli;
/// SIGKILLed runs and on-disk state readers for the crash-safety test (`ledger_crash`).
pub mod crash;
pub mod deerflow;
pub mod engine;
pub mod fake;
pub mod lc;
/// A metrics endpoint scraped and checked (`--metrics-listen`).
pub mod metrics;
/// One provisioner URL over several hosts: calls, deer-flow's client, HAProxy as shipped.
pub mod multihost;
/// A dockerd of a test's own, which it may restart.
pub mod own_dockerd;
pub mod provisioner;
pub mod raw;
pub mod recorder;
pub mod redis_server;
pub mod reference;
pub mod serve;
pub mod serve_process;
pub mod skip;
pub mod stack;
pub mod step;
pub mod subject;
pub mod unpin;

use std::sync::atomic::{AtomicU32, Ordering};

/// A stack prefix no other test (or test process) uses: `t{pid}x{n}-`, never all-hex.
pub fn unique_prefix() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "t{:x}x{}-",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
