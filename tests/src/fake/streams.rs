//! Everything in the fake engine that runs or streams: container programs, `wait` (headers
//! flushed before the container exits), `logs` (optionally following), attach and exec start
//! (101 upgrades with stdin and half-close, or plain streamed answers), and `/events`.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Response};
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{broadcast, mpsc, watch};

use super::routes::{container_index, flag, param, Body, Reply};
use super::state::{self, RunState, State};
use super::{program, render, Chunk, Flavor, Shared};

/// A response body fed from a channel; it ends when the sender is dropped.
struct ChanBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChanBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

fn streamed(content_type: &'static str) -> (mpsc::Sender<Bytes>, Response<Body>) {
    let (tx, rx) = mpsc::channel(64);
    let mut resp = Response::new(ChanBody(rx).boxed());
    resp.headers_mut()
        .insert("Content-Type", HeaderValue::from_static(content_type));
    (tx, resp)
}

fn upgraded(content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(super::routes::full(Bytes::new()));
    *resp.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert("Content-Type", HeaderValue::from_static(content_type));
    h.insert("Connection", HeaderValue::from_static("Upgrade"));
    h.insert("Upgrade", HeaderValue::from_static("tcp"));
    resp
}

/// stdcopy framing when there is no TTY: stream byte, three zeros, big-endian length.
fn frame(tty: bool, stream: u8, data: &[u8]) -> Bytes {
    if tty {
        return Bytes::copy_from_slice(data);
    }
    let mut out = Vec::with_capacity(data.len() + 8);
    out.extend_from_slice(&[stream, 0, 0, 0]);
    out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(data);
    Bytes::from(out)
}

pub fn register(shared: &Shared, id: &str) {
    if let Ok(mut m) = shared.outputs.lock() {
        // The channel is made on first use: 4096 slots each for 10,000 idle containers
        // took the fake 3 GB in the benchmark.
        m.insert(id.to_owned(), None);
    }
}

pub fn unregister(shared: &Shared, id: &str) {
    if let Ok(mut m) = shared.outputs.lock() {
        m.remove(id);
    }
    if let Ok(mut m) = shared.pending_stdin.lock() {
        m.remove(id);
    }
}

fn output(shared: &Shared, id: &str) -> Option<broadcast::Sender<Chunk>> {
    let mut m = shared.outputs.lock().ok()?;
    let slot = m.get_mut(id)?;
    Some(
        slot.get_or_insert_with(|| broadcast::channel(4096).0)
            .clone(),
    )
}

/// Resolves when `pred` holds for the engine's state.
pub async fn until(shared: &Shared, mut pred: impl FnMut(&State) -> bool) {
    let mut rx = shared.changed.subscribe();
    loop {
        if pred(&shared.state()) {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Starts the container's program; its output goes to the logs and to live subscribers.
pub fn run_container(shared: &Arc<Shared>, id: &str) {
    let Some(out_tx) = output(shared, id) else {
        return;
    };
    let (steps, name, run) = {
        let mut st = shared.state();
        let Some(c) = st.containers.iter_mut().find(|c| c.id == id) else {
            return;
        };
        c.state = RunState::Running;
        c.started_at = Some(state::now());
        c.finished_at = None;
        (program::parse(&c.cmd), c.name[1..].to_owned(), c.exits)
    };
    let stdin = shared
        .pending_stdin
        .lock()
        .ok()
        .and_then(|mut m| m.remove(id));
    let (stop_tx, stop_rx) = watch::channel(None);
    if let Ok(mut m) = shared.stops.lock() {
        m.insert(id.to_owned(), stop_tx);
    }
    shared.publish(render::event("container", "start", id, &name));
    shared.notify();
    let shared = shared.clone();
    let id = id.to_owned();
    tokio::spawn(async move {
        let logs_shared = shared.clone();
        let logs_id = id.clone();
        let logs_tx = out_tx.clone();
        let code = program::run(
            &steps,
            stdin,
            move |stream, bytes| {
                // Appending and broadcasting under one lock keeps a log snapshot plus a
                // subscription (taken under the same lock) free of gaps and repeats.
                let mut st = logs_shared.state();
                if let Some(c) = st.containers.iter_mut().find(|c| c.id == logs_id) {
                    c.logs.push((stream, bytes.clone()));
                }
                let _ = logs_tx.send(Some((stream, Bytes::from(bytes))));
            },
            stop_rx,
        )
        .await;
        {
            let mut st = shared.state();
            if let Some(c) = st
                .containers
                .iter_mut()
                .find(|c| c.id == id && c.exits == run)
            {
                c.state = RunState::Exited;
                c.exit_code = code;
                c.finished_at = Some(state::now());
                c.exits += 1;
            }
            let _ = out_tx.send(None);
        }
        if let Ok(mut m) = shared.stops.lock() {
            m.remove(&id);
        }
        shared.publish(render::event("container", "die", &id, &name));
        shared.notify();
        // `docker run --rm` sets HostConfig.AutoRemove and waits for `condition=removed`.
        let auto_remove = shared
            .state()
            .containers
            .iter()
            .any(|c| c.id == id && c.host_config["AutoRemove"].as_bool() == Some(true));
        if auto_remove {
            super::containers::remove(&shared, &id, true).await;
        }
    });
}

pub fn wait(shared: &Arc<Shared>, r: &str, condition: Option<&str>) -> Reply {
    let cond = condition
        .filter(|c| !c.is_empty())
        .unwrap_or("not-running")
        .to_owned();
    if !["not-running", "next-exit", "removed"].contains(&cond.as_str())
        && shared.flavor == Flavor::Docker29
    {
        return Reply::Error(400, format!("invalid condition: {cond:?}"));
    }
    let (id, exits0, mut code) = {
        let st = shared.state();
        match container_index(shared, &st, r) {
            Ok(i) => {
                let c = &st.containers[i];
                (c.id.clone(), c.exits, c.exit_code)
            }
            Err(e) => return e,
        }
    };
    let (tx, resp) = streamed("application/json");
    let shared = shared.clone();
    tokio::spawn(async move {
        until(&shared, |st| {
            match st.containers.iter().find(|c| c.id == id) {
                None => true,
                Some(c) => {
                    code = c.exit_code;
                    match cond.as_str() {
                        "next-exit" => c.exits > exits0,
                        "removed" => false,
                        _ => c.state != RunState::Running,
                    }
                }
            }
        })
        .await;
        let mut body = shared.flavor.wait_body(code).to_string().into_bytes();
        body.push(b'\n');
        let _ = tx.send(Bytes::from(body)).await;
    });
    Reply::Raw(Box::new(resp))
}

/// Past output, and a subscription to what comes next if the container may still write.
struct Tap {
    tty: bool,
    past: Vec<(u8, Vec<u8>)>,
    live: Option<broadcast::Receiver<Chunk>>,
}

fn tap(
    shared: &Shared,
    r: &str,
    with_past: bool,
    follow: bool,
) -> Result<(String, RunState, Tap), Reply> {
    let st = shared.state();
    let i = container_index(shared, &st, r)?;
    let c = &st.containers[i];
    let live = (follow && c.state != RunState::Exited)
        .then(|| output(shared, &c.id).map(|tx| tx.subscribe()))
        .flatten();
    let past = if with_past {
        c.logs.clone()
    } else {
        Vec::new()
    };
    Ok((
        c.id.clone(),
        c.state,
        Tap {
            tty: c.tty,
            past,
            live,
        },
    ))
}

/// Sends a tap's frames for the wanted streams to `tx` until the run ends.
async fn pump(mut t: Tap, wanted: [bool; 3], tx: mpsc::Sender<Bytes>) {
    for (s, data) in std::mem::take(&mut t.past) {
        if wanted[usize::from(s.min(2))] && tx.send(frame(t.tty, s, &data)).await.is_err() {
            return;
        }
    }
    let Some(mut rx) = t.live else { return };
    loop {
        match rx.recv().await {
            Ok(Some((s, data))) => {
                if wanted[usize::from(s.min(2))] && tx.send(frame(t.tty, s, &data)).await.is_err() {
                    return;
                }
            }
            Ok(None) | Err(broadcast::error::RecvError::Closed) => return,
            Err(broadcast::error::RecvError::Lagged(_)) => {}
        }
    }
}

pub fn logs(shared: &Arc<Shared>, r: &str, params: &[(String, String)]) -> Reply {
    let (out, err) = (flag(params, "stdout"), flag(params, "stderr"));
    if !out && !err {
        return Reply::Error(
            400,
            "Bad parameters: you must choose at least one stream".into(),
        );
    }
    let (_, _, mut t) = match tap(shared, r, true, flag(params, "follow")) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if let Some(n) = param(params, "tail").and_then(|v| v.parse::<usize>().ok()) {
        let skip = t.past.len().saturating_sub(n);
        t.past.drain(..skip);
    }
    let (tx, resp) = streamed(shared.flavor.raw_stream_type(t.tty));
    tokio::spawn(pump(t, [false, out, err], tx));
    Reply::Raw(Box::new(resp))
}

pub fn attach(
    shared: &Arc<Shared>,
    r: &str,
    params: &[(String, String)],
    on_upgrade: Option<OnUpgrade>,
) -> Reply {
    let wanted = [false, flag(params, "stdout"), flag(params, "stderr")];
    let (id, run_state, t) = match tap(shared, r, flag(params, "logs"), flag(params, "stream")) {
        Ok(x) => x,
        Err(e) => return e,
    };
    // Stdin reaches a program only if attached before it starts (as `docker run -i` does);
    // attaching stdin to an already running fake container is a deliberate no-op.
    let stdin_tx = (flag(params, "stdin") && run_state == RunState::Created).then(|| {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut m) = shared.pending_stdin.lock() {
            m.insert(id.clone(), rx);
        }
        tx
    });
    let content_type = shared.flavor.raw_stream_type(t.tty);
    let Some(on_upgrade) = on_upgrade else {
        let (tx, resp) = streamed(content_type);
        tokio::spawn(pump(t, wanted, tx));
        return Reply::Raw(Box::new(resp));
    };
    tokio::spawn(async move {
        let Ok(up) = on_upgrade.await else { return };
        let (rd, mut wr) = tokio::io::split(TokioIo::new(up));
        if let Some(tx) = stdin_tx {
            tokio::spawn(copy_stdin(rd, tx));
        }
        let (tx, mut rx) = mpsc::channel::<Bytes>(64);
        tokio::spawn(pump(t, wanted, tx));
        while let Some(b) = rx.recv().await {
            if wr.write_all(&b).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    Reply::Raw(Box::new(upgraded(content_type)))
}

/// Client → program stdin until the client half-closes (or goes away).
async fn copy_stdin<R: tokio::io::AsyncRead + Unpin>(
    mut rd: R,
    tx: mpsc::UnboundedSender<Vec<u8>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match rd.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
        }
    }
}

pub fn exec_start(
    shared: &Arc<Shared>,
    id: &str,
    body: &Value,
    on_upgrade: Option<OnUpgrade>,
) -> Reply {
    let (steps, tty, attach_stdin) = {
        let mut st = shared.state();
        let Some(i) = st.find_exec(id) else {
            return Reply::Error(404, shared.flavor.no_such_exec(id));
        };
        let e = &mut st.execs[i];
        e.running = true;
        (program::parse(&e.cmd), e.tty, e.attach_stdin)
    };
    let detach = body["Detach"].as_bool().unwrap_or(false);
    let shared = shared.clone();
    let exec_id = id.to_owned();
    let finish = move |code: i64| {
        let mut st = shared.state();
        if let Some(i) = st.find_exec(&exec_id) {
            st.execs[i].running = false;
            st.execs[i].exit_code = Some(code);
        }
    };
    // Nothing stops an exec early in the fake; the sender lives as long as the program.
    let (stop_tx, stop_rx) = watch::channel(None);
    if detach || on_upgrade.is_none() {
        let (tx, resp) = streamed("application/vnd.docker.raw-stream");
        tokio::spawn(async move {
            let _keep = stop_tx;
            let mut frames = Vec::new();
            let code =
                program::run(&steps, None, |s, b| frames.push(frame(tty, s, &b)), stop_rx).await;
            finish(code);
            for f in frames {
                if !detach && tx.send(f).await.is_err() {
                    break;
                }
            }
        });
        return Reply::Raw(Box::new(if detach {
            Response::new(super::routes::full(Bytes::new()))
        } else {
            resp
        }));
    }
    let content_type = if tty {
        "application/vnd.docker.raw-stream"
    } else {
        "application/vnd.docker.multiplexed-stream"
    };
    let on_upgrade = on_upgrade.expect("checked above");
    tokio::spawn(async move {
        let _keep = stop_tx;
        let Ok(up) = on_upgrade.await else { return };
        let (rd, mut wr) = tokio::io::split(TokioIo::new(up));
        let stdin = attach_stdin.then(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(copy_stdin(rd, tx));
            rx
        });
        // dockerd's exec'd process starts tens of milliseconds after the 101 (runc); clients
        // such as docker-py read the head through a buffer and then the raw socket, so output
        // arriving in the same burst as the head would be lost to them. Start like dockerd does.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Bytes>();
        let writer = tokio::spawn(async move {
            while let Some(b) = out_rx.recv().await {
                if wr.write_all(&b).await.is_err() {
                    break;
                }
            }
            let _ = wr.shutdown().await;
        });
        let code = program::run(
            &steps,
            stdin,
            |s, b| {
                let _ = out_tx.send(frame(tty, s, &b));
            },
            stop_rx,
        )
        .await;
        // The exit code is recorded before the stream ends: the CLI asks for it right after.
        finish(code);
        drop(out_tx);
        let _ = writer.await;
    });
    Reply::Raw(Box::new(upgraded(content_type)))
}

pub fn events(shared: &Arc<Shared>) -> Reply {
    let mut rx = shared.events.subscribe();
    let (tx, resp) = streamed("application/json");
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(ev) => {
                    let mut line = ev.to_string().into_bytes();
                    line.push(b'\n');
                    if tx.send(Bytes::from(line)).await.is_err() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    Reply::Raw(Box::new(resp))
}
