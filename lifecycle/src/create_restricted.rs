//! Creating a sandbox in restricted mode (docs/architecture.md, lifecycle): its internal and
//! egress networks (one found under a name is used only if it is what lifecycle makes), the
//! netproxy sidecar on both, and the sandbox on the internal network only, its proxy variables
//! pointing at the sidecar. What it made goes into `Made` as it goes, for an honest undo.

use bollard::container::Config;
use bollard::models::HostConfig;

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
        let sidecar_cmd = self.settings.sidecar_cmd.clone().unwrap_or_else(|| {
            let mut cmd = vec!["--listen".to_owned(), "0.0.0.0:3128".to_owned()];
            let s = &self.settings;
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
            host_config: Some(self.settings.sidecar_resources.apply(HostConfig {
                network_mode: Some(names.network.clone()),
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
        let c = self
            .engine
            .inspect(&cid)
            .await
            .map_err(step(format!("inspect {} ({cid})", names.sandbox)))?;
        let ip = c
            .and_then(|c| c.networks.get(&names.network).cloned())
            .unwrap_or_default();
        let mut created = self.created(id, &cid, Mode::Restricted, None, &ip, false);
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
            Some(n) => decide::existing_network(&n.driver, n.internal, internal),
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
