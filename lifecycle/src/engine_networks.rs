//! The engine client's network calls (`engine`): create (finding one under the name is
//! `Existed`, for the caller to judge; an internal one is made host-less), inspect, list by
//! name, remove and connect, each answer reduced to what lifecycle decides on.

use std::collections::HashMap;

use bollard::network::{ConnectNetworkOptions, CreateNetworkOptions, InspectNetworkOptions};

use crate::decide::{Object, INHIBIT_IPV4};
use crate::engine::{absent, gone_or, Done, Engine, EngineError, Network, NetworkMade};

impl Engine {
    /// Creates a network; an internal one with `decide::INHIBIT_IPV4` set, so the host holds no
    /// address on it (its members reach nothing but each other). One that already exists under
    /// this name is `Existed`: the caller must inspect it before using it, since anyone allowed
    /// that name may have made it with other settings (a non-internal network under the
    /// internal network's name, say).
    pub async fn create_network(
        &self,
        name: &str,
        internal: bool,
        labels: HashMap<String, String>,
    ) -> Result<NetworkMade, EngineError> {
        let opts = CreateNetworkOptions {
            name: name.to_owned(),
            check_duplicate: true,
            driver: "bridge".to_owned(),
            internal,
            labels,
            options: match internal {
                true => HashMap::from([(INHIBIT_IPV4.to_owned(), "true".to_owned())]),
                false => HashMap::new(),
            },
            ..Default::default()
        };
        match self.client().await?.create_network(opts).await {
            Ok(_) => Ok(NetworkMade::Made),
            Err(e) => match EngineError::from_bollard(e, self.address()) {
                EngineError::Api { status: 409, .. } => Ok(NetworkMade::Existed),
                other => Err(other),
            },
        }
    }

    /// Inspect a network by exact name; `None` only for "no such network" about this name.
    pub async fn inspect_network(&self, name: &str) -> Result<Option<Network>, EngineError> {
        match self
            .client()
            .await?
            .inspect_network(name, None::<InspectNetworkOptions<String>>)
            .await
        {
            Ok(n) => Ok(Some(Network {
                name: n.name.unwrap_or_default(),
                driver: n.driver.unwrap_or_default(),
                // Unset reads as not internal: the unsafe answer, so it never passes a check
                // that wants an internal network.
                internal: n.internal.unwrap_or(false),
                options: n.options.unwrap_or_default(),
                labels: n.labels.unwrap_or_default(),
            })),
            Err(e) => {
                let e = EngineError::from_bollard(e, self.address());
                if absent(&e, Object::Network, name) {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Networks whose names start `name_prefix` (the proxy lists the stack's only).
    pub async fn list_networks(&self, name_prefix: &str) -> Result<Vec<Network>, EngineError> {
        let mut filters = HashMap::new();
        filters.insert("name".to_owned(), vec![name_prefix.to_owned()]);
        let opts = bollard::network::ListNetworksOptions { filters };
        let listed = self
            .client()
            .await?
            .list_networks(Some(opts))
            .await
            .map_err(|e| EngineError::from_bollard(e, self.address()))?;
        Ok(listed
            .into_iter()
            .map(|n| Network {
                name: n.name.unwrap_or_default(),
                driver: n.driver.unwrap_or_default(),
                internal: n.internal.unwrap_or(false),
                options: n.options.unwrap_or_default(),
                labels: n.labels.unwrap_or_default(),
            })
            .collect())
    }

    pub async fn remove_network(&self, name: &str) -> Result<Done, EngineError> {
        match self.client().await?.remove_network(name).await {
            Ok(()) => Ok(Done::Done),
            Err(e) => gone_or(
                EngineError::from_bollard(e, self.address()),
                Object::Network,
                name,
            ),
        }
    }

    pub async fn connect_network(&self, network: &str, container: &str) -> Result<(), EngineError> {
        let opts = ConnectNetworkOptions {
            container: container.to_owned(),
            endpoint_config: Default::default(),
        };
        self.client()
            .await?
            .connect_network(network, opts)
            .await
            .map_err(|e| EngineError::from_bollard(e, self.address()))
    }
}
