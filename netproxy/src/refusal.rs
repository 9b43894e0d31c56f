//! Why a request was not carried (or was cut off), as a typed reason, and how that is answered:
//! the status the reason implies, `X-Netproxy-Error: REASON` and a JSON body
//! `{"error","reason","host"}`. Every refusal the proxy makes goes through here, the ones for
//! request heads (`framing`) and for a full server (`server::busy`) included.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

use crate::addr::AddrRefusal;
use crate::framing::HeadRefusal;
use crate::rules::NameDenial;
use crate::target::TargetError;

/// The header every refusal carries (and that is stripped from upstream answers).
pub const ERROR_HEADER: &str = "x-netproxy-error";

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Body = BoxBody<Bytes, BoxError>;

pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

/// Why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The request head as sent (`framing`).
    Head(HeadRefusal),
    Version,
    DuplicateHost,
    Target(TargetError),
    /// A header the upstream request cannot carry.
    BadHeader,
    HostHeaderMismatch,
    Name(NameDenial),
    Address(AddrRefusal),
    DnsTimeout,
    DnsFailure,
    DnsNoAnswer,
    ConnectTimeout,
    ConnectFailed,
    UpstreamHandshake,
    UpstreamFailed,
    /// No response head within the upstream response timeout after the request was sent.
    UpstreamResponseTimeout,
    /// The client's request body stalled longer than the body idle timeout.
    RequestBodyTimeout,
    /// The whole exchange took longer than the request timeout.
    RequestTimeout,
    ConnectionLimit,
    ClientConnectionLimit,
    /// The process is at its file descriptor limit.
    FdLimit,
    /// A reload between the decision and the first byte relayed no longer allows it.
    Revoked,
    /// The sidecar's own networks could not be read and no earlier list stands in (`own`).
    OwnNetworksUnknown,
}

impl Reason {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Head(h) => h.status,
            Self::Version | Self::DuplicateHost | Self::Target(_) | Self::BadHeader => {
                StatusCode::BAD_REQUEST
            }
            Self::HostHeaderMismatch | Self::Name(_) | Self::Address(_) | Self::Revoked => {
                StatusCode::FORBIDDEN
            }
            Self::DnsTimeout
            | Self::ConnectTimeout
            | Self::UpstreamResponseTimeout
            | Self::RequestBodyTimeout
            | Self::RequestTimeout => StatusCode::GATEWAY_TIMEOUT,
            Self::DnsFailure
            | Self::DnsNoAnswer
            | Self::ConnectFailed
            | Self::UpstreamHandshake
            | Self::UpstreamFailed => StatusCode::BAD_GATEWAY,
            Self::ConnectionLimit
            | Self::ClientConnectionLimit
            | Self::FdLimit
            | Self::OwnNetworksUnknown => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The reason as one of a fixed set of words, for a metric's label: `text()` where that is
    /// fixed, the family where it carries detail (a head's or a target's fault, the special
    /// range an address is in).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Head(_) => "bad_head",
            Self::Version => "version",
            Self::DuplicateHost => "duplicate_host",
            Self::Target(_) => "bad_target",
            Self::BadHeader => "bad_header",
            Self::HostHeaderMismatch => "host_header_mismatch",
            Self::Name(n) => n.as_str(),
            Self::Address(crate::addr::AddrRefusal::OwnNetwork) => "proxy_network",
            Self::Address(crate::addr::AddrRefusal::Special(_)) => "special_address",
            Self::Address(crate::addr::AddrRefusal::DeniedByRule) => "denied_by_rule",
            Self::DnsTimeout => "dns_timeout",
            Self::DnsFailure => "dns_failure",
            Self::DnsNoAnswer => "dns_no_answer",
            Self::ConnectTimeout => "connect_timeout",
            Self::ConnectFailed => "connect_failed",
            Self::UpstreamHandshake => "upstream_handshake",
            Self::UpstreamFailed => "upstream_failed",
            Self::UpstreamResponseTimeout => "upstream_response_timeout",
            Self::RequestBodyTimeout => "request_body_timeout",
            Self::RequestTimeout => "request_timeout",
            Self::ConnectionLimit => "connection_limit",
            Self::ClientConnectionLimit => "client_connection_limit",
            Self::FdLimit => "fd_limit",
            Self::OwnNetworksUnknown => "own_networks_unknown",
            Self::Revoked => "revoked",
        }
    }

    /// What `X-Netproxy-Error`, the JSON body and the logs say.
    pub fn text(&self) -> String {
        match self {
            Self::Head(h) => h.reason.to_owned(),
            Self::Version => "only HTTP/1.1 is spoken here".to_owned(),
            Self::DuplicateHost => "duplicate Host header".to_owned(),
            Self::Target(e) => e.to_string(),
            Self::BadHeader => "header not carried".to_owned(),
            Self::HostHeaderMismatch => "host_header_mismatch".to_owned(),
            Self::Name(n) => n.as_str().to_owned(),
            Self::Address(a) => a.reason(),
            Self::DnsTimeout => "dns_timeout".to_owned(),
            Self::DnsFailure => "dns_failure".to_owned(),
            Self::DnsNoAnswer => "dns_no_answer".to_owned(),
            Self::ConnectTimeout => "connect_timeout".to_owned(),
            Self::ConnectFailed => "connect_failed".to_owned(),
            Self::UpstreamHandshake => "upstream_handshake".to_owned(),
            Self::UpstreamFailed => "upstream_failed".to_owned(),
            Self::UpstreamResponseTimeout => "upstream_response_timeout".to_owned(),
            Self::RequestBodyTimeout => "request_body_timeout".to_owned(),
            Self::RequestTimeout => "request_timeout".to_owned(),
            Self::ConnectionLimit => "connection_limit".to_owned(),
            Self::ClientConnectionLimit => "client_connection_limit".to_owned(),
            Self::FdLimit => "fd_limit".to_owned(),
            Self::OwnNetworksUnknown => "own_networks_unknown".to_owned(),
            Self::Revoked => "revoked".to_owned(),
        }
    }
}

/// A refusal: why, and the host it was about (canonical, or as written for a target that does
/// not parse, cut to `audit::SHOWN_AT_MOST` bytes; empty when there was none yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub host: String,
}

impl Refusal {
    pub fn new(reason: Reason, host: impl Into<String>) -> Self {
        let mut host: String = host.into();
        let keep = crate::audit::shown(&host).len();
        host.truncate(keep);
        Self { reason, host }
    }

    pub fn status(&self) -> StatusCode {
        self.reason.status()
    }

    /// Status, reason text and JSON body.
    fn parts(&self) -> (StatusCode, String, String) {
        let status = self.status();
        let error = match status {
            StatusCode::FORBIDDEN => "forbidden",
            StatusCode::BAD_REQUEST
            | StatusCode::REQUEST_TIMEOUT
            | StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "bad_request",
            StatusCode::GATEWAY_TIMEOUT => "upstream_timeout",
            StatusCode::SERVICE_UNAVAILABLE => "busy",
            _ => "upstream_unavailable",
        };
        let reason = self.reason.text();
        let body = serde_json::json!({ "error": error, "reason": reason, "host": self.host });
        (status, reason, body.to_string())
    }

    pub fn response(&self) -> Response<Body> {
        let (status, reason, body) = self.parts();
        let mut resp = Response::new(full(body));
        *resp.status_mut() = status;
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Ok(v) = HeaderValue::from_str(&reason) {
            h.insert(ERROR_HEADER, v);
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if status.is_client_error() && status != StatusCode::FORBIDDEN
            || status == StatusCode::SERVICE_UNAVAILABLE
        {
            // After a malformed request the rest of the stream cannot be trusted; a full
            // server wants the connection back.
            h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }

    /// The same answer as raw bytes, for where no HTTP server runs yet (`server::busy`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let (status, _, body) = self.parts();
        scrape::raw_answer::bytes(status, self.response().headers(), body.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::special::Special;

    #[test]
    fn statuses_and_texts() {
        let cases = [
            (Reason::Name(NameDenial::NotAllowed), 403, "not_allowed"),
            (
                Reason::Address(AddrRefusal::Special(Special::Loopback)),
                403,
                "special_address:loopback",
            ),
            (
                Reason::Address(AddrRefusal::OwnNetwork),
                403,
                "proxy_network",
            ),
            (Reason::DnsTimeout, 504, "dns_timeout"),
            (Reason::ConnectFailed, 502, "connect_failed"),
            (
                Reason::UpstreamResponseTimeout,
                504,
                "upstream_response_timeout",
            ),
            (Reason::RequestBodyTimeout, 504, "request_body_timeout"),
            (
                Reason::Head(crate::framing::TOO_LARGE),
                431,
                "request head too large",
            ),
            (Reason::ConnectionLimit, 503, "connection_limit"),
        ];
        for (reason, status, text) in cases {
            assert_eq!(
                (reason.status().as_u16(), reason.text()),
                (status, text.to_owned())
            );
        }
        let raw = Refusal::new(Reason::ConnectionLimit, "").to_bytes();
        let raw = String::from_utf8(raw).expect("text");
        assert!(
            raw.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{raw}"
        );
        assert!(
            raw.contains("retry-after: 1\r\n")
                && raw.contains("x-netproxy-error: connection_limit\r\n"),
            "{raw}"
        );
        let body: serde_json::Value =
            serde_json::from_str(raw.split("\r\n\r\n").nth(1).unwrap_or("")).expect("JSON");
        assert_eq!(
            (
                body["error"].as_str(),
                body["reason"].as_str(),
                body["host"].as_str()
            ),
            (Some("busy"), Some("connection_limit"), Some(""))
        );
    }
}
