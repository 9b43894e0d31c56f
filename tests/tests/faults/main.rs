//! Failures between the components: the engine killed, restarted, gone, silent or answering
//! garbage under the proxy (`engine`), and a fault relay between lifecycle and the proxy
//! answering 500, holding a request or answering 409 (`relay`). Run on its own with
//! `cargo test -p sockproxy-tests --test faults`.

mod engine;
mod relay;
