//! What the requests of one client connection share (its refusal count, the signal that cuts
//! an answer off, whether a write timed out): below both the proxy and the forwarding of
//! absolute-form requests, which each hold it.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// What the requests of one client connection share.
#[derive(Debug, Default)]
pub struct Connection {
    /// Requests refused on it so far.
    pub refusals: AtomicUsize,
    /// Told when an answer on it must be cut off whatever hyper is doing (a reload revoked
    /// it, or the request timeout passed while the client read nothing): the server then
    /// drops the connection.
    pub abort: tokio::sync::Notify,
    /// A write to the client waited past the write timeout (`scrape::write_timeout`): the end line of
    /// the exchange it cut says `write_timeout`.
    pub write_timed_out: Arc<std::sync::atomic::AtomicBool>,
}
