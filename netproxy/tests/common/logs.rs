//! netproxy's log lines in process: a JSON subscriber writing into memory, for tests that run
//! the proxy in process (one per test process: each namespace test runs in its own).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Installs the capture as this process's subscriber.
    pub fn capture() -> Self {
        let logs = Self::default();
        let writer = logs.clone();
        tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_writer(move || writer.clone())
            .init();
        logs
    }

    /// Every line so far, parsed.
    pub fn lines(&self) -> Vec<serde_json::Value> {
        let text = String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Lines whose message is `message`.
    pub fn with_message(&self, message: &str) -> Vec<serde_json::Value> {
        self.lines()
            .into_iter()
            .filter(|v| v["message"] == message)
            .collect()
    }

    /// Waits (10 s at most) for a line with `message` that `pred` accepts.
    pub fn wait_for(
        &self,
        message: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(v) = self.with_message(message).into_iter().find(|v| pred(v)) {
                return v;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no {message:?} line; lines: {:?}", self.lines());
    }
}
