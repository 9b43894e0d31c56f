//! The gateway network each compose run of `deploy/compose.yaml` or
//! `deploy/compose.deerflow.yaml` gets, and the firewall step of the file's header run as
//! written there for that network.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::compose::repo;
use crate::firewall::HostState;

/// The gateway network a compose run gets (`GATEWAY_NETWORK`, `GATEWAY_BRIDGE`,
/// `GATEWAY_SUBNET`, `GATEWAY_ADDRESS`): the shipped defaults would collide between runs on one
/// engine.
pub(crate) struct GatewayNet {
    /// The network's name where the file names it (compose.deerflow.yaml); it carries the
    /// run's project, so the checks after `down` see it gone.
    pub(crate) name: String,
    pub(crate) bridge: String,
    pub(crate) subnet: String,
    pub(crate) address: String,
}

impl GatewayNet {
    /// One for `stack` (a `unique_prefix`), on a /24 of 10.213.0.0/16, outside dockerd's
    /// default address pools.
    pub(crate) fn new(stack: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let k = (std::process::id().wrapping_mul(7) + N.fetch_add(1, Ordering::Relaxed)) % 250;
        let id: String = stack.chars().filter(char::is_ascii_alphanumeric).collect();
        Self {
            name: format!("{id}-gateway"),
            bridge: format!("gw{id}"),
            subnet: format!("10.213.{k}.0/24"),
            address: format!("10.213.{k}.1"),
        }
    }

    pub(crate) fn env(&self) -> Vec<(String, String)> {
        vec![
            ("GATEWAY_NETWORK".into(), self.name.clone()),
            ("GATEWAY_BRIDGE".into(), self.bridge.clone()),
            ("GATEWAY_SUBNET".into(), self.subnet.clone()),
            ("GATEWAY_ADDRESS".into(), self.address.clone()),
        ]
    }

    /// The firewall step of `file`'s header (under deploy/), as written there, with this
    /// network's bridge and address and rule set `name` in place of the defaults; made in
    /// `host`.
    pub(crate) fn shipped_firewall(&self, file: &str, host: &mut HostState, name: &str) {
        let header = std::fs::read_to_string(repo().join("deploy").join(file)).expect("compose");
        let line = header
            .lines()
            .find_map(|l| {
                l.trim_start_matches('#')
                    .trim()
                    .strip_prefix("deploy/firewall/sockproxy-firewall ")
            })
            .unwrap_or_else(|| panic!("{file}'s header runs deploy/firewall/sockproxy-firewall"));
        let args: Vec<String> = line
            .split_whitespace()
            .map(|a| match a {
                "deer-flow" => name.to_owned(),
                "172.30.0.1" => self.address.clone(),
                "dfgw0" => self.bridge.clone(),
                other => other.to_owned(),
            })
            .collect();
        assert_eq!(
            args.iter().map(String::as_str).collect::<Vec<_>>(),
            [
                "--name",
                name,
                "--address",
                &self.address,
                "--from-interface",
                &self.bridge
            ],
            "{line}"
        );
        let args: Vec<&str> = args.iter().map(String::as_str).skip(2).collect();
        host.firewall(name, &args);
    }
}
