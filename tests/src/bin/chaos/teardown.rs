//! Teardown and the leak count. Teardown is what an operator does through each stack's own
//! doors: the held sandbox and every sandbox the provider still lists (one whose DELETE failed
//! while the provider was killed) deleted through the provisioner API, every container and network the
//! stack's proxy lists removed through that proxy (the hostile tenant's leftovers, the canary,
//! the stack's own network), the provider stopped (SIGTERM) and one reconciler pass
//! (`lifecycle retire`, through the proxy), then the proxy stopped and the stack's own network
//! `{P}net` removed on the engine (the proxy never lets the stack remove it). Leaked: whatever is left
//! after that on the engine (containers, networks but the engine's own three, volumes) and on
//! disk (port reservation files, quarantine ledger records), and on the host: a containerd
//! shim of this engine whose container the engine no longer has (`orphans`), unless it started
//! before the harness's dockerd restart ended (then a note: the engine's doing, see `orphans`),
//! each named; every orphan is then killed with its container's processes.
//! (`Dockerd::shut_down` then counts whatever of the engine outlives the engine.)

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use sockproxy_tests::raw;

use crate::polite::{api, held_id};
use crate::stacks::{Stack, Stacks};
use crate::watch::Watcher;

/// The leaks, each named, and the notes: the engine's orphaned shims excused as the harness's
/// restart's doing (`orphans::judge`).
pub fn run(
    stacks: &Stacks,
    engine: &Path,
    engine_root: &str,
    restarted_at: Option<f64>,
    watcher: &Watcher,
) -> (Vec<String>, Vec<String>) {
    for s in &stacks.all {
        teardown(s, engine);
    }
    let mut leaks = Vec::new();
    let list =
        |path: &str| -> Value { raw::get(engine, path).map(|r| r.json()).unwrap_or_default() };
    for c in list("/containers/json?all=1")
        .as_array()
        .into_iter()
        .flatten()
    {
        leaks.push(format!("container {} ({})", c["Names"][0], c["State"]));
    }
    for n in list("/networks").as_array().into_iter().flatten() {
        let name = n["Name"].as_str().unwrap_or_default();
        if !["bridge", "host", "none"].contains(&name) {
            leaks.push(format!("network {name}"));
        }
    }
    for v in list("/volumes")["Volumes"].as_array().into_iter().flatten() {
        leaks.push(format!("volume {}", v["Name"]));
    }
    for s in &stacks.all {
        for (p, port) in sockproxy_tests::crash::scan_ports(&s.state()) {
            leaks.push(format!("port file {} ({port:?})", p.display()));
        }
        for r in ledger_records(s) {
            leaks.push(format!("stack {} ledger record {r}", s.k));
        }
    }
    let (counted, excused) =
        crate::orphans::judge(crate::orphans::shims(engine, engine_root), restarted_at);
    let name = |p: &crate::orphans::Process| {
        let id = p.arg("-id").unwrap_or_default();
        watcher
            .name_of(id)
            .unwrap_or_else(|| "never seen in its events".into())
    };
    for p in &counted {
        leaks.push(format!(
            "containerd shim {} of a container the engine no longer has ({}): {}",
            p.pid,
            name(p),
            p.cmdline
        ));
    }
    let notes: Vec<String> = excused
        .iter()
        .map(|p| {
            format!(
                "containerd shim {} of a container the engine no longer has ({}), started \
                 before the harness's dockerd restart ended: the engine's orphan, killed, not \
                 counted: {}",
                p.pid,
                name(p),
                p.cmdline
            )
        })
        .collect();
    for p in counted.iter().chain(&excused) {
        crate::orphans::kill_with_its_container(p);
    }
    for l in &leaks {
        println!("LEAKED: {l}");
    }
    for n in &notes {
        println!("NOTE: {n}");
    }
    (leaks, notes)
}

fn teardown(s: &Stack, engine: &Path) {
    let _ = api(
        s.addr,
        "DELETE",
        &format!("/api/sandboxes/{}", held_id(s.k)),
        None,
    );
    // What the provider still keeps, as an operator ends a stack: through the provider, which
    // keeps a provisioner sandbox until it is deleted (one whose DELETE failed while the
    // provider was killed is still there). Removing it behind the provider's back would leave
    // its port reservation, which the leak count would then blame on lifecycle.
    let kept = api(s.addr, "GET", "/api/sandboxes", None)
        .ok()
        .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
        .unwrap_or_default();
    for id in kept["sandboxes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["sandbox_id"].as_str())
    {
        let _ = api(s.addr, "DELETE", &format!("/api/sandboxes/{id}"), None);
    }
    let sock = s.socket();
    // Twice: a sidecar or network may be held by a container removed in the first pass.
    for _ in 0..2 {
        let listed = raw::get(&sock, "/containers/json?all=1")
            .map(|r| r.json())
            .unwrap_or_default();
        for c in listed.as_array().into_iter().flatten() {
            if let Some(id) = c["Id"].as_str() {
                let _ = raw::request(&sock, "DELETE", &format!("/containers/{id}?force=1"), None);
            }
        }
        let nets = raw::get(&sock, "/networks")
            .map(|r| r.json())
            .unwrap_or_default();
        for n in nets.as_array().into_iter().flatten() {
            if let Some(name) = n["Name"].as_str().filter(|n| n.starts_with(&s.prefix)) {
                let _ = raw::request(&sock, "DELETE", &format!("/networks/{name}"), None);
            }
        }
    }
    if !s.stop_serve() {
        println!(
            "teardown: stack {}'s provider did not stop within 60 s",
            s.k
        );
    }
    let retire = sockproxy_tests::crash::output_within(
        {
            let mut c = s.lifecycle();
            c.arg("retire");
            c
        },
        Duration::from_secs(120),
    );
    if !retire.status.success() {
        println!(
            "teardown: stack {}'s lifecycle retire: {}",
            s.k,
            String::from_utf8_lossy(&retire.stderr)
        );
    }
    if !s.stop_proxy() {
        println!("teardown: stack {}'s proxy did not stop within 30 s", s.k);
    }
    // The stack's own network is the operator's to remove: the proxy makes it and, by design,
    // never lets the stack remove it.
    let _ = raw::request(
        engine,
        "DELETE",
        &format!("/networks/{}net", s.prefix),
        None,
    );
}

/// The quarantine ledger's records (`lifecycle quarantine ls`, one JSON line each).
fn ledger_records(s: &Stack) -> Vec<String> {
    let mut c = s.lifecycle();
    c.args(["quarantine", "ls"]);
    let out = sockproxy_tests::crash::output_within(c, Duration::from_secs(60));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}
