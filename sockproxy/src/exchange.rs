//! One request on its way through the transport, as `Proxy::act` hands it to the plans that
//! name an object (`plans`).

use http::request::Parts;
use hyper::upgrade::OnUpgrade;
use sockproxy_policy::Target;

use crate::upstream::Body;

/// One request on its way through the transport: what the client sent, what was decided of it
/// (`op`, the canonical `target`), and its body until it is read or forwarded (it stays in its
/// slot so a refusal on the way can drain it).
#[derive(Debug)]
pub(crate) struct Exchange<'a> {
    pub op: &'a str,
    pub parts: Parts,
    pub body: &'a mut Option<Body>,
    pub target: &'a Target,
    pub upgrade: Option<OnUpgrade>,
}
