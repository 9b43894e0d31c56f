//! Refusals: every answer the proxy gives instead of the engine's, in dockerd's error shape
//! (`{"message": …}`, which the transport sends with `Content-Type: application/json`), so every
//! Docker client prints it.

use bytes::Bytes;
use http::StatusCode;

/// Why the proxy answered instead of forwarding. `Display` is the exact `message` field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("sockproxy: {op}: {name} is not one of this stack's sandboxes")]
    ContainerOutOfScope { op: String, name: String },
    #[error("sockproxy: {op}: {name} is not one of this stack's networks")]
    NetworkOutOfScope { op: String, name: String },
    #[error("sockproxy: {op}: not allowed for this stack")]
    NotAllowed { op: String },
    /// A setting in an otherwise allowed request that the stack may not ask for.
    #[error("sockproxy: {op}: {why}")]
    Setting { op: String, why: String },
    /// An ID or ID prefix that is absent or belongs to another stack: indistinguishable on purpose.
    #[error("No such container: {0}")]
    NoSuchContainer(String),
    #[error("network {0} not found")]
    NoSuchNetwork(String),
    #[error("No such exec instance: {0}")]
    NoSuchExec(String),
    /// dockerd's wordings for an absent volume and plugin (daemon/volume and plugin stores).
    #[error("get {0}: no such volume")]
    NoSuchVolume(String),
    #[error("plugin \"{0}\" not found")]
    NoSuchPlugin(String),
    /// dockerd's wording for an image it does not hold (`daemon/images`, `ErrImageDoesNotExist`).
    #[error("No such image: {0}")]
    NoSuchImage(String),
    /// A create (or an update) past one of the stack's totals (`limits::totals`).
    #[error("sockproxy: {op}: {why}")]
    OverTotal { op: String, why: String },
    /// The network the stack's containers are put on exists but is not one the proxy made for
    /// this stack (`stack_net::judge`): nothing is placed on it.
    #[error("sockproxy: {op}: {why}")]
    StackNetwork { op: String, why: String },
    #[error("sockproxy: bad request: {0}")]
    BadRequest(String),
    /// A request body not complete within `--body-timeout`.
    #[error("sockproxy: bad request: request body not complete within {0} s")]
    SlowBody(u64),
    /// A request head refused before hyper parsed it (`headguard`), with its status (400,
    /// 408, 431).
    #[error("sockproxy: bad request: {why}")]
    BadHead {
        status: StatusCode,
        why: &'static str,
    },
    #[error("sockproxy: bad request: body larger than {0} bytes")]
    TooLarge(usize),
    #[error("sockproxy: upstream unavailable: {0}")]
    Upstream(String),
    /// The proxy is at a limit (connections, list buffers); try again later.
    #[error("sockproxy: busy: {0}")]
    Busy(String),
}

impl Refusal {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::ContainerOutOfScope { .. } | Self::NetworkOutOfScope { .. } => {
                StatusCode::FORBIDDEN
            }
            Self::NotAllowed { .. } | Self::Setting { .. } | Self::OverTotal { .. } => {
                StatusCode::FORBIDDEN
            }
            Self::StackNetwork { .. } => StatusCode::CONFLICT,
            Self::SlowBody(_) => StatusCode::REQUEST_TIMEOUT,
            Self::NoSuchContainer(_)
            | Self::NoSuchNetwork(_)
            | Self::NoSuchExec(_)
            | Self::NoSuchVolume(_)
            | Self::NoSuchPlugin(_)
            | Self::NoSuchImage(_) => StatusCode::NOT_FOUND,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::BadHead { status, .. } => *status,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Upstream(_) => StatusCode::BAD_GATEWAY,
            Self::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// A fixed tag for the decision log line.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ContainerOutOfScope { .. } | Self::NetworkOutOfScope { .. } => "out_of_scope",
            Self::NotAllowed { .. } => "endpoint_not_allowed",
            Self::Setting { .. } => "setting_not_allowed",
            Self::OverTotal { .. } => "stack_total",
            Self::StackNetwork { .. } => "stack_network_unusable",
            Self::SlowBody(_) => "body_too_slow",
            Self::NoSuchContainer(_) | Self::NoSuchNetwork(_) | Self::NoSuchExec(_) => {
                "absent_or_out_of_scope"
            }
            Self::NoSuchVolume(_) | Self::NoSuchPlugin(_) | Self::NoSuchImage(_) => {
                "not_in_stack_view"
            }
            Self::BadRequest(_) | Self::BadHead { .. } => "bad_request",
            Self::TooLarge(_) => "body_too_large",
            Self::Upstream(_) => "upstream_unavailable",
            Self::Busy(_) => "busy",
        }
    }

    /// The JSON body, byte for byte what dockerd's encoder writes for an error.
    pub fn body(&self) -> Bytes {
        let msg = serde_json::json!({ "message": self.to_string() });
        let mut out = msg.to_string().into_bytes();
        out.push(b'\n');
        Bytes::from(out)
    }
}

impl From<crate::canon::BadRequest> for Refusal {
    fn from(e: crate::canon::BadRequest) -> Self {
        Self::BadRequest(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_byte_exact() {
        let r = Refusal::ContainerOutOfScope {
            op: "containers.stop".into(),
            name: "deer-flow-netproxy-c1a44b2434411cc2".into(),
        };
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            &r.body()[..],
            b"{\"message\":\"sockproxy: containers.stop: deer-flow-netproxy-c1a44b2434411cc2 is not one of this stack's sandboxes\"}\n"
        );
        let r = Refusal::NotAllowed {
            op: "system.info".into(),
        };
        assert_eq!(
            r.to_string(),
            "sockproxy: system.info: not allowed for this stack"
        );
        let r = Refusal::NetworkOutOfScope {
            op: "networks.remove".into(),
            name: "bridge".into(),
        };
        assert_eq!(
            r.to_string(),
            "sockproxy: networks.remove: bridge is not one of this stack's networks"
        );
        assert_eq!(
            Refusal::Upstream("connection refused".into()).to_string(),
            "sockproxy: upstream unavailable: connection refused"
        );
        assert_eq!(
            Refusal::Upstream(String::new()).status(),
            StatusCode::BAD_GATEWAY
        );
    }
}
