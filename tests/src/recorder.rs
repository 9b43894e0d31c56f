//! A stand-in upstream that records every request it receives and answers a fixed body, to
//! prove what the proxy forwarded, and that it forwarded nothing when it refused. The proxy's
//! own event subscription is refused and not recorded (`not_watched`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// How a recorder answers: (method, path and query) → (status, JSON body).
pub type Answer = Arc<dyn Fn(&str, &str) -> (u16, String) + Send + Sync>;

pub struct Recorder {
    socket: PathBuf,
    answer: Answer,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Recorder {
    /// Answers `200` with `body` (as JSON) to everything.
    pub fn fixed(body: &'static str) -> Self {
        Self::start(move |_, _| (200, body.to_owned()))
    }

    /// Answers each request with `answer(method, path_and_query)` → (status, JSON body).
    pub fn start(answer: impl Fn(&str, &str) -> (u16, String) + Send + Sync + 'static) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("rec")
            .tempdir()
            .expect("temp dir");
        Self::start_at(dir, Arc::new(answer))
    }

    pub fn start_at(dir: tempfile::TempDir, answer: Answer) -> Self {
        let socket = dir.path().join("engine.sock");
        let log = Arc::new(Mutex::new(Vec::new()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let listener = {
            let _g = rt.enter();
            tokio::net::UnixListener::bind(&socket).expect("bind recorder")
        };
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let thread_log = log.clone();
        let thread_answer = answer.clone();
        let thread = std::thread::spawn(move || {
            let answer = thread_answer;
            rt.block_on(async move {
                loop {
                    tokio::select! {
                        _ = &mut rx => break,
                        Ok((stream, _)) = listener.accept() => {
                            let log = thread_log.clone();
                            let answer = answer.clone();
                            tokio::spawn(async move {
                                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                                    let log = log.clone();
                                    let answer = answer.clone();
                                    async move {
                                        let uri = req.uri().to_string();
                                        if uri.starts_with(&sockproxy::watch::subscription()) {
                                            return Ok(not_watched());
                                        }
                                        let line = format!("{} {uri}", req.method());
                                        log.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                                        let (status, body) = answer(req.method().as_str(), &uri);
                                        Ok::<_, std::convert::Infallible>(
                                            Response::builder()
                                                .status(status)
                                                .header("Content-Type", "application/json")
                                                .header("Api-Version", "1.41")
                                                .body(Full::new(Bytes::from(body)))
                                                .unwrap_or_default(),
                                        )
                                    }
                                });
                                let _ = http1::Builder::new()
                                    .serve_connection(TokioIo::new(stream), svc)
                                    .await;
                            });
                        }
                    }
                }
            });
        });
        Self {
            socket,
            answer: answer.clone(),
            log,
            _dir: dir,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Every request line received so far (`METHOD /path?query`).
    pub fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops the recorder, keeping its directory and answer so a new one can bind the same
    /// path (an engine restart).
    pub fn stop(mut self) -> (tempfile::TempDir, Answer) {
        self.shutdown();
        let _ = std::fs::remove_file(&self.socket);
        let dir = tempfile::Builder::new()
            .prefix("x")
            .tempdir()
            .expect("temp dir");
        (std::mem::replace(&mut self._dir, dir), self.answer.clone())
    }

    fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The answer to the proxy's own event subscription, which is not recorded: a recorder sends
/// no events, so the proxy's name map stays off and every request is inspected, as the tests
/// here expect.
fn not_watched() -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(
        br#"{"message":"recorder: no events"}"#,
    )));
    *resp.status_mut() = hyper::StatusCode::NOT_FOUND;
    resp
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("socket", &self.socket)
            .finish()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.shutdown();
    }
}
