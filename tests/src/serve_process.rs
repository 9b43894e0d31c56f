//! A `lifecycle serve` process for tests (the program `bins::lifecycle` finds): started on a
//! socket in a test's temp dir, killed with SIGKILL when dropped unless the test took it (to
//! kill it itself, or to SIGTERM it and read what its shutdown printed). Its stderr goes to a
//! file beside the socket (a pipe nobody drains could fill and stall it), read by `stderr`.

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::bounded::{WaitWithin, LONG};
use crate::lc::lifecycle_base;
use crate::serve::call;

#[derive(Debug)]
pub struct ServeProcess {
    pub child: Option<Child>,
    pub sock: PathBuf,
}

impl ServeProcess {
    /// `global`: flags before `serve` (e.g. `--ready-timeout`); `serve`: flags after it.
    pub fn start(
        proxy: &Path,
        prefix: &str,
        state: &Path,
        sock: PathBuf,
        global: &[&str],
        serve: &[&str],
    ) -> Self {
        Self::start_in("open", proxy, prefix, state, sock, global, serve)
    }

    /// `start` in `mode` (`open` or `restricted`).
    pub fn start_in(
        mode: &str,
        proxy: &Path,
        prefix: &str,
        state: &Path,
        sock: PathBuf,
        global: &[&str],
        serve: &[&str],
    ) -> Self {
        let log = std::fs::File::create(sock.with_extension("stderr")).expect("stderr file");
        let mut child = lifecycle_base(proxy, prefix, mode, state)
            .args(global)
            .arg("serve")
            .arg("--listen")
            .arg(&sock)
            .args(serve)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start lifecycle serve");
        for _ in 0..1000 {
            if std::os::unix::net::UnixStream::connect(&sock).is_ok() {
                return Self {
                    child: Some(child),
                    sock,
                };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("lifecycle serve did not listen on {}", sock.display());
    }

    /// The (sandbox_id, owner) pairs it lists.
    pub async fn ids(&self) -> Vec<(String, String)> {
        let (status, v) = call(&self.sock, "GET", "/v1/sandboxes", None).await;
        assert_eq!(status, 200, "{v}");
        v["sandboxes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| {
                        let s = |k: &str| e[k].as_str().unwrap_or("").to_owned();
                        (s("sandbox_id"), s("owner"))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub async fn acquire(&self, user: &str, thread: &str) -> (u16, Value) {
        let body = serde_json::json!({"user_id": user, "thread_id": thread, "holder": "test"});
        call(&self.sock, "POST", "/v1/acquire", Some(body)).await
    }

    pub async fn release(&self, acquired: &Value) -> (u16, Value) {
        let lease = acquired["lease"].as_str().unwrap_or("");
        call(
            &self.sock,
            "POST",
            &format!("/v1/leases/{lease}/release"),
            None,
        )
        .await
    }

    /// SIGTERM, then what it printed and how it exited.
    pub fn terminate(&mut self) -> Output {
        let child = self.child.take().expect("still running");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("SIGTERM");
        // Bounded: a provider that no longer heeds SIGTERM fails the test, not the suite.
        child.output_within(LONG).expect("exits")
    }

    /// What it wrote on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.sock.with_extension("stderr")).unwrap_or_default()
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}
