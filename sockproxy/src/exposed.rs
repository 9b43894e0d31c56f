//! What `--metrics-listen` serves for a running proxy (issue 40): its metrics rendered with the
//! name map's sizes, and `/healthz` from the engine's last answer (asking it with a ping of its
//! own when nothing else has lately). Kept apart from `metrics`, which the engine client records
//! into, so that the client's layer does not reach up to the proxy.

use std::sync::Arc;

use crate::metrics::{with_op, HEALTHY_WITHIN, PROBE_AFTER, PROBE_TIMEOUT};
use crate::proxy::Proxy;

/// What `--metrics-listen` serves for a proxy.
#[derive(Debug)]
pub struct Exposed(pub Arc<Proxy>);

impl scrape::Exposition for Exposed {
    fn metrics(&self) -> String {
        self.0
            .metrics
            .render(self.0.names.is_live(), self.0.names.len())
    }

    /// 200 while the engine has answered within `HEALTHY_WITHIN`, any request's round trip
    /// counting; when none has lately, a `GET /_ping` of its own asks. 503 otherwise. The
    /// proxy's own liveness is that this answers at all (on the proxy's runtime).
    async fn health(&self) -> scrape::Health {
        let (proxy, m) = (&self.0, &self.0.metrics);
        if m.engine_answered_ago().is_none_or(|ago| ago > PROBE_AFTER) {
            let probe = with_op("health_probe", proxy.upstream.get("/_ping", 4096));
            let _ = tokio::time::timeout(PROBE_TIMEOUT, probe).await;
        }
        let ago = m.engine_answered_ago();
        let ok = ago.is_some_and(|a| a <= HEALTHY_WITHIN);
        scrape::Health {
            ok,
            body: serde_json::json!({
                "status": if ok { "ok" } else { "engine_unreachable" },
                "engine_answered_secs_ago": ago.map(|a| a.as_secs()),
                "name_map_live": proxy.names.is_live(),
            }),
        }
    }
}
