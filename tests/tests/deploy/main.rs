//! What `deploy/` ships, as its tools read it: the compose example brought up with
//! docker-compose on the real engine (`compose`), and deer-flow's route brought up as shipped and
//! driven with deer-flow's remote-backend calls (`compose_deerflow`), the restricted overlay
//! brought up and driven (`compose_restricted`), the multi-host override brought up as one host
//! with a shared Redis and driven the same way (`compose_multihost`), the proxy refusing a
//! prefix that covers its own compose project (`compose_prefix`); the systemd units as `systemd-analyze verify`
//! reads them and as their system call filters let their programs run (`systemd`, with
//! `syscalls` reading the filters and strace's record), and with the drop-in for pinned bind
//! sources (`pins_unit`); the host firewall rule set that lets only a stack's gateway reach
//! its sandboxes' ports, run as shipped on the engine's host, with its unit (`firewall`), and
//! sockproxy's `--allow-publish-address` it goes with (`publish_address`); compose.yaml's
//! gateway network per run (`gateway_net`); socket activation as systemd hands a
//! socket over (`activation`); the images as `docker build` makes them (`images`). Run on its
//! own with `cargo test -p sockproxy-tests --test deploy`.

mod activation;
mod compose;
mod compose_deerflow;
mod compose_multihost;
mod compose_prefix;
mod compose_restricted;
mod dashboards;
mod examples;
mod firewall;
mod gateway_net;
mod images;
mod monitoring;
mod pins_unit;
mod publish_address;
mod syscalls;
mod systemd;
