//! Egress refusals per stack that outlive the sandbox: netproxy sidecars run with no metrics
//! listener and their logs go with their containers, so `lifecycle serve` follows each running
//! sidecar of its stack (`{P}netproxy-*`, role `netproxy`) and, for every `decision` line that
//! says `deny`, counts `lifecycle_egress_refusals_total{reason}` and writes one line of its own
//! (sandbox ID, reason, host, port). The reason is one of netproxy's refusal kinds
//! (`netproxy::metrics::REFUSAL_KINDS`) or `other`: a bounded label set, never a host.
//!
//! Sidecars are found by a listing every scan period; each is followed from this process's
//! start (one made before it is counted from then on, not again for what an earlier process
//! saw) and, when its stream ends while it still runs, again from the end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use super::provider::Provider;
use crate::naming;

/// The label for a refusal whose kind this build does not know (a newer or older sidecar).
pub const OTHER: &str = "other";

/// Every label value of `lifecycle_egress_refusals_total`, registered at zero.
pub fn reasons() -> impl Iterator<Item = &'static str> {
    netproxy::metrics::REFUSAL_KINDS
        .iter()
        .copied()
        .chain(std::iter::once(OTHER))
}

/// One refusal read from a sidecar's decision line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub reason: &'static str,
    pub host: String,
    pub port: u16,
}

/// A sidecar's log line read as a refusal, if it is one: a JSON `decision` line with
/// `"decision":"deny"`. The reason is its `kind` field, or (a sidecar that does not write one)
/// its `reason` up to the first `:`, mapped onto the known kinds; anything else is `OTHER`.
pub fn refusal(line: &[u8]) -> Option<Refused> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    if v.get("message")?.as_str()? != "decision" || v.get("decision")?.as_str()? != "deny" {
        return None;
    }
    let said = v
        .get("kind")
        .and_then(|k| k.as_str())
        .or_else(|| v.get("reason")?.as_str()?.split(':').next())
        .unwrap_or("");
    let reason = netproxy::metrics::REFUSAL_KINDS
        .iter()
        .copied()
        .find(|&k| k == said)
        .unwrap_or(OTHER);
    Some(Refused {
        reason,
        host: v
            .get("host")
            .and_then(|h| h.as_str())
            .unwrap_or("")
            .chars()
            .take(256)
            .collect(),
        port: v
            .get("port")
            .and_then(serde_json::Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(0),
    })
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Where each sidecar stands: `None` while followed, `Some(t)` when its stream ended at `t`.
type Followed = Arc<Mutex<HashMap<String, Option<i64>>>>;

/// Scans for the stack's running sidecars every `every` and follows each, until `stop`.
pub async fn run(p: Arc<Provider>, every: Duration, mut stop: watch::Receiver<bool>) {
    let started = unix_now();
    let followed: Followed = Arc::default();
    let prefix = p.lc.settings.prefix.as_str().to_owned();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tick.tick() => {}
        }
        let listed = match p
            .lc
            .engine
            .list_role(&prefix, "netproxy", &format!("{prefix}netproxy-"))
            .await
        {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "egress refusals: the stack's sidecars could not be listed");
                continue;
            }
        };
        let mut seen = followed.lock().unwrap_or_else(|e| e.into_inner());
        // Gone from the listing: forgotten (the map stays as large as the stack).
        seen.retain(|id, _| listed.iter().any(|c| &c.id == id));
        for c in listed.iter().filter(|c| c.state == "running") {
            let since = match seen.get(&c.id) {
                Some(None) => continue,
                Some(Some(ended)) => *ended,
                None => started,
            };
            seen.insert(c.id.clone(), None);
            let sandbox = c
                .labels
                .get(naming::LABEL_SANDBOX_ID)
                .cloned()
                .unwrap_or_default();
            tokio::spawn(follow(
                p.clone(),
                c.id.clone(),
                sandbox,
                since,
                followed.clone(),
                stop.clone(),
            ));
        }
    }
}

async fn follow(
    p: Arc<Provider>,
    id: String,
    sandbox: String,
    since: i64,
    followed: Followed,
    mut stop: watch::Receiver<bool>,
) {
    let count = |line: &[u8]| {
        if let Some(r) = refusal(line) {
            p.metrics.egress_refusal(r.reason);
            tracing::info!(sandbox_id = %sandbox, sidecar_id = %id, reason = r.reason, host = %r.host, port = r.port, "egress refused by the sandbox's sidecar");
        }
    };
    tokio::select! {
        _ = stop.wait_for(|s| *s) => {}
        r = p.lc.engine.follow_log_lines(&id, since, count) => {
            if let Err(e) = r {
                tracing::debug!(sidecar_id = %id, error = %e, "egress refusals: a sidecar's log stream ended");
            }
        }
    }
    followed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, Some(unix_now()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_lines_are_read_as_refusals() {
        let deny = |extra: &str| {
            format!(
                r#"{{"timestamp":"t","level":"INFO","message":"decision","client":"10.0.0.2:5","method":"GET","host":"forbidden.invalid","port":80,"decision":"deny"{extra}}}"#
            )
        };
        // (line, (reason, host, port) when it is a refusal)
        type Want = Option<(&'static str, &'static str, u16)>;
        let cases: [(String, Want); 8] = [
            (
                deny(r#","reason":"not_allowed","kind":"not_allowed""#),
                Some(("not_allowed", "forbidden.invalid", 80)),
            ),
            // The kind field decides; the reason text may say more.
            (
                deny(r#","reason":"special_address:link_local","kind":"special_address""#),
                Some(("special_address", "forbidden.invalid", 80)),
            ),
            // A sidecar without the kind field: the reason's first word.
            (
                deny(r#","reason":"special_address:link_local""#),
                Some(("special_address", "forbidden.invalid", 80)),
            ),
            (
                deny(r#","reason":"only HTTP/1.1 is spoken here""#),
                Some((OTHER, "forbidden.invalid", 80)),
            ),
            (
                deny(r#","kind":"a-host-name.test""#),
                Some((OTHER, "forbidden.invalid", 80)),
            ),
            (
                r#"{"message":"decision","decision":"allow","reason":"allowed","host":"ok.test"}"#
                    .to_owned(),
                None,
            ),
            (
                r#"{"message":"relay refused","decision":"deny","reason":"not_sidecar_network"}"#
                    .to_owned(),
                None,
            ),
            ("netproxy listening on 0.0.0.0:3128".to_owned(), None),
        ];
        for (line, want) in cases {
            let got = refusal(line.as_bytes()).map(|r| (r.reason, r.host, r.port));
            let want = want.map(|(r, h, p)| (r, h.to_owned(), p));
            assert_eq!(got, want, "{line}");
        }
    }

    #[test]
    fn the_label_set_is_netproxys_kinds_and_other() {
        let all: Vec<&str> = reasons().collect();
        assert_eq!(all.len(), netproxy::metrics::REFUSAL_KINDS.len() + 1);
        assert!(all.contains(&"not_allowed") && all.contains(&OTHER));
    }
}
