//! A server running on a thread and runtime of its own, stopped when its handle is dropped: how
//! tests and tools embed sockproxy (`sockproxy::server::Background`) and netproxy
//! (`netproxy::server::Background`) in their own process.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

/// The running server: dropping it resolves its `Stop` and waits for its thread to end.
#[derive(Debug)]
pub struct Background {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Resolves when the `Background` serving it is dropped: the shutdown future its server is
/// given.
#[derive(Debug)]
pub struct Stop(oneshot::Receiver<()>);

impl Future for Stop {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // A sent stop and a dropped sender mean the same: the handle is gone.
        Pin::new(&mut self.0).poll(cx).map(|_| ())
    }
}

impl Background {
    /// Runs `serve(stop)` on `runtime` in a new thread until it returns; then the runtime is
    /// shut down without waiting for what is left on it.
    pub fn spawn<S, F>(runtime: tokio::runtime::Runtime, serve: S) -> Self
    where
        S: FnOnce(Stop) -> F + Send + 'static,
        F: Future<Output = ()>,
    {
        let (tx, rx) = oneshot::channel();
        let thread = std::thread::spawn(move || {
            runtime.block_on(serve(Stop(rx)));
            runtime.shutdown_background();
        });
        Self {
            stop: Some(tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn dropping_the_handle_stops_the_server_and_waits_for_it() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let ended = Arc::new(AtomicBool::new(false));
        let flag = ended.clone();
        let bg = Background::spawn(runtime, move |stop| async move {
            stop.await;
            flag.store(true, Ordering::SeqCst);
        });
        assert!(!ended.load(Ordering::SeqCst));
        drop(bg);
        assert!(ended.load(Ordering::SeqCst), "the server saw its stop");
    }
}
