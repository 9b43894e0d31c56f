//! Creating a sandbox in restricted mode (docs/architecture.md, lifecycle): its internal
//! network (host-less: the host has no address on it) and egress network (one found under a
//! name is used only if it is what lifecycle makes), the netproxy sidecar on both, and the
//! sandbox on the internal network only, its proxy variables pointing at the sidecar. The host
//! reaches the sandbox only through the sidecar's relay: a port reserved like an open-mode
//! sandbox's, published from the sidecar's egress network and carried to the sandbox's port
//! (`netproxy --relay`); the URL and the readiness wait use it. What it made goes into `Made`
//! as it goes, for an honest undo.

use std::collections::HashMap;

use bollard::container::Config;
use bollard::models::{HostConfig, PortBinding};

use crate::create::{binds, scope_of, Extras, Made};
use crate::decide::{self, Mode};
use crate::engine::NetworkMade;
use crate::ops::{step, Created, Lifecycle, OpError};

impl Lifecycle {
    pub(crate) async fn create_restricted(
        &self,
        id: &str,
        extras: &Extras,
        made: &mut Made,
    ) -> Result<Created, OpError> {
        let names = self.names(id);
        made.restricted = true;
        // The relay's host port, reserved before anything holds it (a pending reservation,
        // given to the sandbox's generation once it has an ID, as in open mode).
        let port = self.ports.reserve(id)?;
        // One internal and one egress network per sandbox, both labelled with its ID.
        let net_labels = self.made_labels(id, "network", &made.token);
        for (network, internal) in [(&names.network, true), (&names.egress, false)] {
            let answer = self
                .engine
                .create_network(network, internal, net_labels.clone())
                .await
                .map_err(step(format!("create network {network}")))?;
            if answer == NetworkMade::Existed {
                self.check_existing_network(network, internal, made).await?;
            }
        }
        let service = format!("{}/tcp", self.settings.sandbox_port);
        let sidecar_cmd = self.settings.sidecar_cmd.clone().unwrap_or_else(|| {
            let s = &self.settings;
            let mut cmd = vec![
                "--listen".to_owned(),
                "0.0.0.0:3128".to_owned(),
                // Inbound: the sidecar's port carried to its own sandbox's, and nowhere else.
                "--relay".to_owned(),
                relay_rule(s.sandbox_port, &names.sandbox),
            ];
            for (flag, values) in [
                ("--allow", &s.egress_allow),
                ("--allow-cidr", &s.egress_allow_cidr),
                ("--own-cidr", &s.egress_own_cidr),
                ("--nat64-prefix", &s.egress_nat64_prefix),
            ] {
                for value in values {
                    cmd.push(flag.into());
                    cmd.push(value.clone());
                }
            }
            cmd
        });
        let sidecar = Config {
            image: self.settings.sidecar_image.clone(),
            cmd: Some(sidecar_cmd),
            labels: Some(self.made_labels(id, "netproxy", &made.token)),
            exposed_ports: Some(HashMap::from([(service.clone(), HashMap::new())])),
            host_config: Some(self.settings.sidecar_resources.apply(HostConfig {
                network_mode: Some(names.network.clone()),
                // Published from the egress network (an internal network publishes nothing).
                port_bindings: Some(HashMap::from([(
                    service,
                    Some(vec![PortBinding {
                        host_ip: Some(self.settings.publish_address.clone()),
                        host_port: Some(port.to_string()),
                    }]),
                )])),
                ..Default::default()
            })),
            ..Default::default()
        };
        let sidecar_id = self
            .engine
            .create(&names.sidecar, sidecar)
            .await
            .map_err(step(format!("create {}", names.sidecar)))?;
        made.sidecar = Some(sidecar_id.clone());
        self.engine
            .connect_network(&names.egress, &sidecar_id)
            .await
            .map_err(step(format!(
                "connect {} ({sidecar_id}) to {}",
                names.sidecar, names.egress
            )))?;
        self.engine
            .start(&sidecar_id)
            .await
            .map_err(step(format!("start {} ({sidecar_id})", names.sidecar)))?;
        let proxy = format!("http://{}:3128", names.sidecar);
        let env = vec![
            format!("HTTP_PROXY={proxy}"),
            format!("HTTPS_PROXY={proxy}"),
            format!("http_proxy={proxy}"),
            format!("https_proxy={proxy}"),
        ];
        let host = self.settings.sandbox_resources.apply(HostConfig {
            network_mode: Some(names.network.clone()),
            binds: binds(extras),
            ..Default::default()
        });
        self.create_and_start(
            id,
            self.sandbox_config(id, &made.token, &made.scope, extras, host, Some(env)),
            made,
        )
        .await?;
        let cid = made.sandbox.clone().unwrap_or_default();
        let mut created = self.created(id, &cid, Mode::Restricted, Some(port), false);
        created.scope = scope_of(made);
        Ok(created)
    }

    /// A network already under one of the sandbox's names is used only if it is what this
    /// create would have made (`decide::existing_network`); otherwise it goes into
    /// `made.foreign` (so the undo leaves it alone) and the create fails closed.
    async fn check_existing_network(
        &self,
        network: &str,
        internal: bool,
        made: &mut Made,
    ) -> Result<(), OpError> {
        let found = self
            .engine
            .inspect_network(network)
            .await
            .map_err(step(format!("inspect network {network}")))?;
        let verdict = match &found {
            Some(n) => decide::existing_network(
                &n.driver,
                n.internal,
                decide::host_less(&n.options),
                internal,
            ),
            // Gone between the create's 409 and this inspect: whatever that was, it is not
            // known to be ours, and retrying is the caller's call.
            None => Err("it vanished right after the create reported it existing".to_owned()),
        };
        verdict.map_err(|reason| {
            tracing::warn!(
                network,
                reason,
                "refusing to use a network found under a sandbox's name"
            );
            made.foreign.push(network.to_owned());
            OpError::UnsafeNetwork {
                name: network.to_owned(),
                reason,
            }
        })
    }
}

/// netproxy's `--relay` rule for a sandbox: every address of the sidecar on `port`, carried to
/// the sandbox's container name (looked up at each connection on the internal network) and the
/// same port.
pub(crate) fn relay_rule(port: u16, sandbox: &str) -> String {
    format!("0.0.0.0:{port}={sandbox}:{port}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_relay_rule_names_the_sandbox_and_its_port() {
        assert_eq!(
            super::relay_rule(8080, "deer-flow-sandbox-7d9ac0ff9b98cd06"),
            "0.0.0.0:8080=deer-flow-sandbox-7d9ac0ff9b98cd06:8080"
        );
    }
}
