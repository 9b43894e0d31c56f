//! The proxy's event loops: the caller's own (the one `main` runs, index 0) and `n - 1` more,
//! each a thread with a single-threaded runtime. Accepted connections are handed out in turn,
//! and a connection stays on its loop for its whole life, together with the engine connections
//! it uses (`Upstream` keeps a pool per loop), so the two halves of a request never wake each
//! other across threads.
//!
//! Why more than one: with one loop, the client, the proxy and the engine take turns on one
//! core while the other sits idle: over the bench's `/_ping` at 16 clients the machine was
//! 16-18% idle through sockproxy against 5-7% through HAProxy's two threads, and 16% through
//! HAProxy with one thread (`docs/benchmarks.md`, issue 18). A work-stealing runtime was tried
//! earlier and was slower: its tasks moved between threads and woke each other across them.

use std::cell::Cell;
use std::future::Future;
use std::io;

use tokio::sync::mpsc;

thread_local! {
    static INDEX: Cell<usize> = const { Cell::new(0) };
}

/// The index of the event loop running on this thread: 0 for the caller's (and for any thread
/// that is not one of the proxy's loops).
pub fn index() -> usize {
    INDEX.with(Cell::get)
}

/// A timer that always expires within a few seconds, for every loop (`serve` runs it on the
/// caller's, `Loops::start` on the others). hyper arms a request-head
/// timer after every response; when the loop went to sleep with no timer pending, arming one
/// writes to the loop's eventfd to wake it and recompute its deadline: one extra system call per
/// request (strace). With this tick pending, every head timer is later than the loop's next
/// wake-up and needs no wake.
async fn keep_a_timer_pending() {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
    loop {
        tick.tick().await;
    }
}

/// What every loop runs beside its connections: the pending timer. Never ends.
pub async fn housekeeping() {
    keep_a_timer_pending().await;
}

/// A single-threaded runtime for one event loop.
pub fn runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// The loops besides the caller's, and whose turn is next.
#[derive(Debug)]
pub struct Loops<T> {
    workers: Vec<Worker<T>>,
    turn: usize,
}

/// One of the loops besides the caller's.
#[derive(Debug)]
pub struct Worker<T> {
    jobs: mpsc::UnboundedSender<T>,
    thread: std::thread::JoinHandle<()>,
}

impl<T> Worker<T> {
    /// Gives `job` to this loop, or back when the loop has gone.
    pub fn send(&self, job: T) -> Result<(), T> {
        self.jobs.send(job).map_err(|e| e.0)
    }
}

impl<T: Send + 'static> Loops<T> {
    /// Starts `n - 1` loops; each runs `serve(job)` as a task of its own for every job it gets.
    /// A loop that cannot start (no thread, no runtime) is left out, with a warning: the
    /// others serve its share.
    pub fn start<F, Fut>(n: usize, serve: F) -> Self
    where
        F: Fn(T) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut workers = Vec::new();
        for i in 1..n.max(1) {
            match Self::start_one(i, serve.clone()) {
                Ok(w) => workers.push(w),
                Err(e) => {
                    tracing::warn!(error = %e, "event loop {i} did not start; serving on {i}");
                    break;
                }
            }
        }
        Self { workers, turn: 0 }
    }

    fn start_one<F, Fut>(i: usize, serve: F) -> io::Result<Worker<T>>
    where
        F: Fn(T) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (jobs, mut rx) = mpsc::unbounded_channel::<T>();
        let (started_tx, started) = std::sync::mpsc::channel();
        // The runtime is built on its own thread: built here, a failed spawn would drop it
        // inside the caller's runtime, and tokio panics on that.
        let thread = std::thread::Builder::new()
            .name(format!("sp-loop-{i}"))
            .spawn(move || {
                INDEX.with(|x| x.set(i));
                let rt = match runtime() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = started_tx.send(Err(e));
                        return;
                    }
                };
                let _ = started_tx.send(Ok(()));
                rt.block_on(async move {
                    tokio::spawn(housekeeping());
                    while let Some(job) = rx.recv().await {
                        tokio::spawn(serve(job));
                    }
                });
                // What is still running when the caller stops the loops is past its grace.
                rt.shutdown_background();
            })?;
        // Waits for the thread's runtime, once per loop at start-up.
        match started.recv() {
            Ok(Ok(())) => Ok(Worker { jobs, thread }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::other("the loop's thread ended at start")),
        }
    }

    /// Whose turn the next connection is: `None` for the caller's own loop, or another loop
    /// (whose `send` hands the job back if that loop has gone).
    pub fn next_turn(&mut self) -> Option<&Worker<T>> {
        let turn = self.turn;
        self.turn = (turn + 1) % (self.workers.len() + 1);
        turn.checked_sub(1).and_then(|w| self.workers.get(w))
    }

    /// Stops the loops: each stops taking jobs, drops what is still running and ends.
    pub fn stop(self) {
        for w in self.workers {
            drop(w.jobs);
            let _ = w.thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Jobs go to the loops in turn, each runs on its loop's own thread, and the caller's turn
    /// comes back to the caller.
    #[test]
    fn jobs_are_handed_out_in_turn_and_run_on_their_loop() {
        let seen: Arc<Mutex<Vec<(usize, usize, std::thread::ThreadId)>>> = Arc::default();
        let record = seen.clone();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let mut loops = Loops::start(3, move |job: usize| {
            let (record, done) = (record.clone(), done_tx.clone());
            async move {
                let at = (job, index(), std::thread::current().id());
                record.lock().expect("lock").push(at);
                let _ = done.send(());
            }
        });
        let mut local = Vec::new();
        for job in 0..9 {
            match loops.next_turn() {
                None => local.push(job),
                Some(w) => w.send(job).expect("the loop takes it"),
            }
        }
        for _ in 0..6 {
            done_rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .expect("a loop ran its job");
        }
        loops.stop();
        assert_eq!(local, vec![0, 3, 6], "every third job is the caller's");
        let mut seen = seen.lock().expect("lock").clone();
        seen.sort_by_key(|s| s.0);
        let loops_of: Vec<(usize, usize)> = seen.iter().map(|&(j, l, _)| (j, l)).collect();
        assert_eq!(
            loops_of,
            vec![(1, 1), (2, 2), (4, 1), (5, 2), (7, 1), (8, 2)]
        );
        let me = std::thread::current().id();
        for l in [1, 2] {
            let threads: std::collections::HashSet<_> =
                seen.iter().filter(|s| s.1 == l).map(|s| s.2).collect();
            assert_eq!(threads.len(), 1, "loop {l} is one thread");
            assert!(
                !threads.contains(&me),
                "loop {l} is not the caller's thread"
            );
        }
    }

    /// Started from inside a runtime, as `serve` does, the loops start, run and stop without
    /// dropping a runtime where tokio forbids it.
    #[test]
    fn loops_start_and_stop_from_inside_a_runtime() {
        let rt = runtime().expect("runtime");
        let ran = rt.block_on(async {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let mut loops = Loops::start(2, move |job: usize| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send((job, index()));
                }
            });
            assert!(
                loops.next_turn().is_none(),
                "the first turn is the caller's"
            );
            loops
                .next_turn()
                .expect("the second is the other loop's")
                .send(7)
                .expect("taken");
            let ran = rx.recv().await;
            loops.stop();
            ran
        });
        assert_eq!(ran, Some((7, 1)));
    }

    /// One loop is the caller's alone: every turn is the caller's.
    #[test]
    fn one_loop_leaves_every_job_to_the_caller() {
        let mut loops = Loops::start(1, |_: usize| async {});
        assert!((0..4).all(|_| loops.next_turn().is_none()));
        loops.stop();
    }
}
