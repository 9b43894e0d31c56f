//! What `--metrics-listen` serves for the provider (`scrape`): its metrics, with the pool's
//! sizes and the ledger's record count read at scrape time, and `/healthz`. The API's own
//! listener serves no metrics: a scraper cannot send the API key, and the metrics listener is
//! bound where only the scraper reaches.

use std::sync::Arc;

use super::provider::Provider;

/// What `--metrics-listen` serves for a provider.
#[derive(Debug)]
pub struct Exposed(pub Arc<Provider>);

impl Provider {
    /// The Prometheus text exposition, sizes read now.
    pub fn render_metrics(&self) -> String {
        let quarantined = self.lc.ledger.entries().map(|e| e.len()).unwrap_or(0);
        let sizes = self.pool().sizes();
        self.metrics.render(sizes, quarantined)
    }
}

impl scrape::Exposition for Exposed {
    fn metrics(&self) -> String {
        self.0.render_metrics()
    }

    /// The provider answering is its health: what it depends on (the engine, the store) is
    /// asked by each request, which fails closed on its own.
    async fn health(&self) -> scrape::Health {
        scrape::Health {
            ok: true,
            body: serde_json::json!({ "status": "ok", "owner": self.0.own.me }),
        }
    }
}
