//! Creating a sandbox (DESIGN §4): open mode publishes the sandbox port on a reserved loopback
//! port; restricted mode makes the internal network, the sidecar (on it and on the egress
//! network) and the sandbox (internal only, its proxy variables pointing at the sidecar). Then
//! the readiness wait; a failed create removes what it made, unless it lost a name race.

use std::collections::HashMap;

use bollard::container::Config;
use bollard::models::{HostConfig, PortBinding};

use crate::decide::Mode;
use crate::naming;
use crate::ops::{is_conflict, step, Created, Lifecycle, OpError};
use crate::ready;

impl Lifecycle {
    fn sandbox_config(
        &self,
        id: &str,
        host_config: HostConfig,
        env: Option<Vec<String>>,
    ) -> Config<String> {
        let port_key = format!("{}/tcp", self.settings.sandbox_port);
        Config {
            image: self.settings.image.clone(),
            cmd: self.settings.sandbox_cmd.clone(),
            env,
            labels: Some(self.labels(id, "sandbox")),
            exposed_ports: Some(HashMap::from([(port_key, HashMap::new())])),
            host_config: Some(host_config),
            ..Default::default()
        }
    }

    pub(crate) async fn create_open(&self, id: &str) -> Result<Created, OpError> {
        let names = self.names(id);
        let port = self.ports.reserve(id)?;
        let binding = PortBinding {
            host_ip: Some("127.0.0.1".into()),
            host_port: Some(port.to_string()),
        };
        let host = HostConfig {
            port_bindings: Some(HashMap::from([(
                format!("{}/tcp", self.settings.sandbox_port),
                Some(vec![binding]),
            )])),
            ..Default::default()
        };
        let made = self
            .create_and_start(&names.sandbox, self.sandbox_config(id, host, None))
            .await;
        let cid = match made {
            Ok(cid) => cid,
            Err(e) => return Err(self.failed_create(id, false, e).await),
        };
        let url = format!("http://127.0.0.1:{port}");
        self.await_ready(id, &url).await?;
        Ok(Created {
            sandbox_id: id.to_owned(),
            container_name: names.sandbox,
            container_id: cid,
            url,
            mode: Mode::Open,
            host_port: Some(port),
            discovered: false,
        })
    }

    pub(crate) async fn create_restricted(&self, id: &str) -> Result<Created, OpError> {
        let names = self.names(id);
        let made = async {
            let mut net_labels = self.labels(id, "network");
            self.engine
                .create_network(&names.network, true, net_labels.clone())
                .await
                .map_err(step(format!("create network {}", names.network)))?;
            net_labels.remove(naming::LABEL_SANDBOX_ID);
            self.engine
                .create_network(&names.egress, false, net_labels)
                .await
                .map_err(step(format!("create network {}", names.egress)))?;
            let sidecar_cmd = self.settings.sidecar_cmd.clone().unwrap_or_else(|| {
                let mut cmd = vec!["--listen".to_owned(), "0.0.0.0:3128".to_owned()];
                for rule in &self.settings.egress_allow {
                    cmd.push("--allow".into());
                    cmd.push(rule.clone());
                }
                for cidr in &self.settings.egress_allow_cidr {
                    cmd.push("--allow-cidr".into());
                    cmd.push(cidr.clone());
                }
                cmd
            });
            let sidecar = Config {
                image: self.settings.sidecar_image.clone(),
                cmd: Some(sidecar_cmd),
                labels: Some(self.labels(id, "netproxy")),
                host_config: Some(HostConfig {
                    network_mode: Some(names.network.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            };
            self.engine
                .create(&names.sidecar, sidecar)
                .await
                .map_err(step(format!("create {}", names.sidecar)))?;
            self.engine
                .connect_network(&names.egress, &names.sidecar)
                .await
                .map_err(step(format!(
                    "connect {} to {}",
                    names.sidecar, names.egress
                )))?;
            self.engine
                .start(&names.sidecar)
                .await
                .map_err(step(format!("start {}", names.sidecar)))?;
            let proxy = format!("http://{}:3128", names.sidecar);
            let env = vec![
                format!("HTTP_PROXY={proxy}"),
                format!("HTTPS_PROXY={proxy}"),
                format!("http_proxy={proxy}"),
                format!("https_proxy={proxy}"),
            ];
            let host = HostConfig {
                network_mode: Some(names.network.clone()),
                ..Default::default()
            };
            let cid = self
                .create_and_start(&names.sandbox, self.sandbox_config(id, host, Some(env)))
                .await?;
            let c = self
                .engine
                .inspect(&names.sandbox)
                .await
                .map_err(step(format!("inspect {}", names.sandbox)))?;
            let ip = c
                .and_then(|c| c.networks.get(&names.network).cloned())
                .unwrap_or_default();
            Ok::<_, OpError>((cid, ip))
        }
        .await;
        let (cid, ip) = match made {
            Ok(x) => x,
            Err(e) => return Err(self.failed_create(id, true, e).await),
        };
        let url = format!("http://{ip}:{}", self.settings.sandbox_port);
        self.await_ready(id, &url).await?;
        Ok(Created {
            sandbox_id: id.to_owned(),
            container_name: names.sandbox,
            container_id: cid,
            url,
            mode: Mode::Restricted,
            host_port: None,
            discovered: false,
        })
    }

    async fn await_ready(&self, id: &str, url: &str) -> Result<(), OpError> {
        let limit = self.settings.ready_timeout;
        if limit.is_zero() || ready::wait(url, limit).await {
            return Ok(());
        }
        self.undo(id, self.settings.mode == Mode::Restricted).await;
        Err(OpError::NotReady {
            id: id.to_owned(),
            url: url.to_owned(),
            secs: limit.as_secs(),
        })
    }

    async fn create_and_start(
        &self,
        name: &str,
        config: Config<String>,
    ) -> Result<String, OpError> {
        let cid = self
            .engine
            .create(name, config)
            .await
            .map_err(step(format!("create {name}")))?;
        self.engine
            .start(name)
            .await
            .map_err(step(format!("start {name}")))?;
        Ok(cid)
    }

    /// A create failed: undo what it made, unless the failure is a name conflict (then the
    /// objects are someone else's and stay).
    async fn failed_create(&self, id: &str, restricted: bool, e: OpError) -> OpError {
        if !is_conflict(&e) {
            self.undo(id, restricted).await;
        }
        e
    }

    /// Best-effort removal of what a failed create made (never called on a name conflict, when
    /// the objects are someone else's); the reservation goes with it.
    async fn undo(&self, id: &str, restricted: bool) {
        let names = self.names(id);
        let _ = self.engine.remove(&names.sandbox).await;
        if restricted {
            let _ = self.engine.remove(&names.sidecar).await;
            let _ = self.engine.remove_network(&names.network).await;
        }
        let _ = self.ports.release(id);
    }
}
