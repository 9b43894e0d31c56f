//! The property the `engine_answer` fuzz target asserts and the stable replay test
//! (`tests/tests/tools/fuzz_corpus.rs`) checks again on every committed corpus input: takes the
//! raw fuzz input and returns `Err(why)` when the property does not hold. The policy's own
//! properties (`request`, `create_body`, `list_filter`, `evaluate`) are `sockproxy_policy::props`.
//!
//! - `engine_answer`: whatever the engine sends, the proxy's upstream path (hyper's HTTP/1
//!   client and `upstream`'s bounded read of a whole answer) neither panics nor hangs, and
//!   never hands on more than the cap.

use http::Method;

/// Most of an answer's body `engine_answer` buffers: small, so that fuzzed answers go over it.
pub const ANSWER_CAP: usize = 64;

/// `engine_answer`: the first byte picks the request's method (`H` HEAD, anything else GET);
/// the rest is what the engine sent on the connection.
pub fn engine_answer(data: &[u8]) -> Result<(), String> {
    let Some((&m, rest)) = data.split_first() else {
        return Ok(());
    };
    let method = if m == b'H' { Method::HEAD } else { Method::GET };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    // Every byte is there at once and then the end: an answer that is not whole by then is an
    // error, never a wait.
    let within = std::time::Duration::from_secs(10);
    let read = rt.block_on(async { tokio::time::timeout(within, read_answer(rest, method)).await });
    match read {
        Err(_) => Err(format!("no outcome within {within:?}")),
        Ok(Ok(n)) if n > ANSWER_CAP => Err(format!("{n} bytes read, over the cap {ANSWER_CAP}")),
        Ok(_) => Ok(()),
    }
}

/// Sends `method /_ping` on a hyper HTTP/1 client connection (the kind `engine`'s pooled
/// client holds, with its settings) whose other end answers `raw` and closes, and reads the
/// answer as `Upstream::get` does: the body's length, or why it was not read.
async fn read_answer(raw: &[u8], method: Method) -> Result<usize, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (ours, mut engine) = tokio::io::duplex(16 * 1024);
    let engine = async move {
        // A write cut short by the client hanging up is the client's to report.
        let _ = engine.write_all(raw).await;
        let _ = engine.shutdown().await;
        let _ = engine.read_to_end(&mut Vec::new()).await;
    };
    let io = hyper_util::rt::TokioIo::new(ours);
    let (mut send, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    let client = async move {
        let req = http::Request::builder()
            .method(method)
            .uri("/_ping")
            .header(http::header::HOST, "docker")
            .body(crate::upstream::empty())
            .map_err(|e| e.to_string())?;
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        let budget = crate::upstream::ListBudget::new(ANSWER_CAP);
        let resp = resp.map(crate::upstream::EngineBody::new);
        let read = crate::upstream::read_budgeted(resp, ANSWER_CAP, Some(&budget)).await;
        read.map(|(answer, _)| answer.body.len())
            .map_err(|e| e.to_string())
    };
    let (read, _, ()) = tokio::join!(client, conn, engine);
    read
}

#[cfg(test)]
#[path = "props_tests.rs"]
mod tests;
