//! Real clients through sockproxy, each checked on what it prints or returns: every docker CLI on
//! `PATH` (`docker_cli`), bollard (`bollard_client`), docker-py (`docker_py`), deer-flow's gateway's
//! CLI sequences replayed directly and through the proxy (`deerflow_replay`), its binds pinned and
//! written through on the real engine (`deerflow_binds`), the program with
//! several event loops under concurrent clients and SIGTERM (`event_loops`), the
//! `fake-dockerd` program used the way docs/development.md shows a newcomer (`fake_dockerd_cli`), and
//! sockproxy's metrics endpoint read as a Prometheus scraper reads it (`metrics`).
//! Run on its own with `cargo test -p sockproxy-tests --test clients`.

mod bollard_client;
mod deerflow_binds;
mod deerflow_replay;
mod docker_cli;
mod docker_py;
mod event_loops;
mod fake_dockerd_cli;
mod metrics;
