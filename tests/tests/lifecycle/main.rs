//! The `lifecycle` command's rules and its processes: every rule on the fake behind sockproxy
//! (`rules`), the CLI's output, exit codes and bad input (`cli`), races of two or three processes
//! (`races`), lock waits with signals (`signals`), SIGKILL at any instant of the ledger's writes
//! (`ledger_crash`), what a sandbox that is gone left removed by `destroy` (`leftovers`),
//! start-up errors and their exit codes (`startup`), the incident end to end on the real engine
//! (`real`), and a restricted sandbox's networks on it: its sidecar only, reached through the
//! sidecar's relay (`isolation`). Run on its own with `cargo test -p sockproxy-tests --test lifecycle`.

mod cli;
mod fences;
mod isolation;
mod ledger_crash;
mod leftovers;
mod races;
mod real;
mod rules;
mod signals;
mod startup;
