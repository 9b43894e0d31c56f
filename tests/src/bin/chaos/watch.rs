//! Cross-stack effects seen in the engine's own event stream (read from the engine directly,
//! from before the first stack starts until the chaos phase ends; picked up again with `since`
//! after the dockerd restart). Each stack's objects carry its prefix, and only its own proxy
//! may act on them; stack k's own tenants never touch its canary. So an effect is:
//! - any event on a canary container but its create and start (the harness's), outside the
//!   engine restart (which the harness causes);
//! - a container of stack k carrying another stack's `sockproxy.stack` label (made through
//!   another stack's proxy);
//! - a network connect or disconnect joining one stack's container and another's network.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// What the watcher found.
#[derive(Debug, Clone, Default)]
pub struct Found {
    pub count: u64,
    pub lines: Vec<String>,
    pub events: u64,
    /// Each of the hostile tenants' log-flood sandboxes, start to die (the engine's own event
    /// times): the log guard's reaction, as the engine saw it.
    pub flood_runs: Vec<FloodRun>,
}

/// One log flood as the engine's events saw it.
#[derive(Debug, Clone, Copy)]
pub struct FloodRun {
    /// Its start event's time, nanoseconds since the Unix epoch.
    pub started_ns: u64,
    /// The stack whose prefix its name has.
    pub stack: Option<usize>,
    pub secs: f64,
}

#[derive(Debug, Default)]
struct Shared {
    /// (stack, prefix, token) of each canary.
    canaries: Vec<(usize, String, String)>,
    found: Found,
    names: HashMap<String, String>,
    /// The start time (ns) and stack of each running log-flood sandbox, by ID.
    flood_started: HashMap<String, (u64, Option<usize>)>,
}

#[derive(Debug, Clone)]
pub struct Watcher {
    shared: Arc<Mutex<Shared>>,
    restarting: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    handle: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl Watcher {
    pub fn start(engine: &Path) -> Self {
        let w = Self {
            shared: Arc::new(Mutex::new(Shared::default())),
            restarting: Arc::new(AtomicBool::new(false)),
            stop: Arc::new(AtomicBool::new(false)),
            handle: Arc::new(Mutex::new(None)),
        };
        let (me, engine) = (w.clone(), engine.to_owned());
        let h = std::thread::spawn(move || me.follow(&engine));
        *w.handle.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
        w
    }

    pub fn set_canaries(&self, canaries: Vec<(usize, String, String)>) {
        self.lock().canaries = canaries;
    }

    /// Marks the harness's dockerd restart (its events are the harness's doing).
    pub fn engine_restart(&self, on: bool) {
        self.restarting.store(on, Ordering::SeqCst);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The name a container had in the events seen (`None`: never seen).
    pub fn name_of(&self, id: &str) -> Option<String> {
        self.lock().names.get(id).cloned()
    }

    /// (stack, token) of every canary, for the hostile tenants' scans.
    pub fn tokens(&self) -> Vec<(usize, String)> {
        self.lock()
            .canaries
            .iter()
            .map(|(k, _, t)| (*k, t.clone()))
            .collect()
    }

    /// Stops following (after a last read of what the engine already sent) and returns what
    /// was found.
    pub fn stop(&self) -> Found {
        std::thread::sleep(Duration::from_secs(2));
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = h.join();
        }
        self.lock().found.clone()
    }

    fn follow(&self, engine: &Path) {
        let mut since = now_secs();
        while !self.stop.load(Ordering::SeqCst) {
            if let Some(last) = self.follow_once(engine, since) {
                since = last;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// One subscription until it breaks or the watcher stops; the time of the last event.
    fn follow_once(&self, engine: &Path, since: u64) -> Option<u64> {
        let mut s = UnixStream::connect(engine).ok()?;
        s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
        let filters = r#"{"type":["container","network"]}"#;
        let q: String = form_urlencoded::byte_serialize(filters.as_bytes()).collect();
        let req = format!(
            "GET /events?since={since}&filters={q} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).ok()?;
        let mut r = BufReader::new(s);
        let mut line = String::new();
        let mut last = None;
        let mut quiet_since = Instant::now();
        loop {
            if self.stop.load(Ordering::SeqCst) && quiet_since.elapsed() > Duration::from_secs(1) {
                return last;
            }
            match r.read_line(&mut line) {
                Ok(0) => return last,
                Ok(_) => {
                    let l = line.trim();
                    if l.starts_with('{') {
                        if let Ok(v) = serde_json::from_str::<Value>(l) {
                            last = v["time"].as_u64().or(last);
                            self.judge(&v);
                        }
                    }
                    line.clear();
                    quiet_since = Instant::now();
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return last,
            }
        }
    }

    fn judge(&self, v: &Value) {
        let action = v["Action"].as_str().unwrap_or_default();
        let attrs = &v["Actor"]["Attributes"];
        let id = v["Actor"]["ID"].as_str().unwrap_or_default().to_owned();
        let restarting = self.restarting.load(Ordering::SeqCst);
        let mut g = self.lock();
        g.found.events += 1;
        let stack_of = |g: &Shared, name: &str| {
            g.canaries
                .iter()
                .find(|(_, p, _)| name.starts_with(p.as_str()))
                .map(|(k, _, _)| *k)
        };
        let mut effect = None;
        match v["Type"].as_str() {
            Some("container") => {
                let name = attrs["name"].as_str().unwrap_or_default().to_owned();
                if !name.is_empty() {
                    g.names.insert(id.clone(), name.clone());
                }
                if name.ends_with(crate::hostile_moves::LOG_FLOOD_SANDBOX) {
                    let at = v["timeNano"].as_u64().unwrap_or_default();
                    match action {
                        "start" => {
                            let stack = stack_of(&g, &name);
                            g.flood_started.insert(id.clone(), (at, stack));
                        }
                        "die" => {
                            if let Some((from, stack)) = g.flood_started.remove(&id) {
                                g.found.flood_runs.push(FloodRun {
                                    started_ns: from,
                                    stack,
                                    secs: at.saturating_sub(from) as f64 / 1e9,
                                });
                            }
                        }
                        _ => {}
                    }
                }
                if let Some(k) = stack_of(&g, &name) {
                    let label = attrs["sockproxy.stack"].as_str();
                    if label.is_some_and(|l| l != format!("chaos-{k}")) {
                        effect = Some(format!("{name} of stack {k} labelled {label:?}"));
                    }
                    let canary = name.ends_with("sandbox-canary");
                    let harness = matches!(action, "create" | "start");
                    if canary && !harness && !restarting {
                        effect = Some(format!("{action} on canary {name}"));
                    }
                }
            }
            Some("network") if matches!(action, "connect" | "disconnect") => {
                let net = attrs["name"].as_str().unwrap_or_default();
                let cid = attrs["container"].as_str().unwrap_or_default();
                let cname = g.names.get(cid).cloned().unwrap_or_default();
                if let (Some(a), Some(b)) = (stack_of(&g, net), stack_of(&g, &cname)) {
                    if a != b {
                        effect = Some(format!("{action} of {cname} and network {net}"));
                    }
                }
            }
            _ => {}
        }
        if let Some(e) = effect {
            println!("CROSS-STACK (engine event): {e}");
            g.found.count += 1;
            g.found.lines.push(e);
        }
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
