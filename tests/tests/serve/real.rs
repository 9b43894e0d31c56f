//! `lifecycle serve` on the real dockerd through sockproxy (CI; locally when an engine answers):
//! acquire creates a serving sandbox, release keeps it warm, the next acquire reclaims the same
//! container, SIGTERM destroys what the process owns. Also prints acquire latency by source
//! (cold create vs warm reclaim) as a table; nothing is asserted about time.

use std::time::{Duration, Instant};

use lifecycle::naming::sandbox_id;
use sockproxy_tests::engine::{real_engine, Cleanup};
use sockproxy_tests::lc::names;
use sockproxy_tests::raw;
use sockproxy_tests::serve_process::ServeProcess;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::{step, step_async};
use sockproxy_tests::unique_prefix;

/// busybox's httpd answers every request, which is all readiness needs.
const SANDBOX_CMD: &str = "httpd -f -p 8080 -h /tmp";
const THREADS: usize = 4;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_engine_acquire_release_reclaim_and_shutdown() {
    let Some(e) = real_engine("real_engine_acquire_release_reclaim_and_shutdown") else {
        return;
    };
    let prefix = unique_prefix();
    let proxy = StackProxy::start(&e.socket, &prefix, false);
    let state = tempfile::tempdir().expect("state");
    let dir = tempfile::tempdir().expect("dir");
    let mut clean = Cleanup::new(&e.socket);
    let threads: Vec<String> = (0..THREADS).map(|i| format!("real-{i}")).collect();
    for t in &threads {
        let id = sandbox_id("user-1", t).expect("id");
        clean.container(&names(&prefix, &id).sandbox);
    }
    let mut serve = ServeProcess::start(
        proxy.socket(),
        &prefix,
        state.path(),
        dir.path().join("serve.sock"),
        &[
            "--sandbox-cmd",
            SANDBOX_CMD,
            "--ready-timeout",
            "30",
            "--stop-timeout",
            "1",
        ],
        &["--idle-timeout", "600"],
    );
    let (mut cold, mut warm) = step_async(
        "each thread: a created sandbox serves, is released warm and reclaimed",
        async {
            let (mut cold, mut warm) = (Vec::new(), Vec::new());
            for t in &threads {
                let started = Instant::now();
                let (status, first) = serve.acquire("user-1", t).await;
                cold.push(started.elapsed());
                assert_eq!(status, 200, "{first}");
                assert_eq!(first["source"], "created");
                let url = first["url"].as_str().unwrap_or_default().to_owned();
                let addr = url.trim_start_matches("http://").to_owned();
                let answered = tokio::task::spawn_blocking(move || {
                    std::net::TcpStream::connect(addr)
                        .map(drop)
                        .map_err(|e| e.to_string())
                })
                .await
                .expect("probe");
                assert_eq!(answered, Ok(()), "the sandbox serves at {url}");
                assert_eq!(serve.release(&first).await.1["result"], "warm");
                let started = Instant::now();
                let (status, again) = serve.acquire("user-1", t).await;
                warm.push(started.elapsed());
                assert_eq!(status, 200, "{again}");
                assert_eq!(again["source"], "warm");
                assert_eq!(again["generation"], first["generation"]);
                serve.release(&again).await;
            }
            (cold, warm)
        },
    )
    .await;
    cold.sort();
    warm.sort();
    let ratio =
        percentile(&cold, 0.5).as_secs_f64() / percentile(&warm, 0.5).as_secs_f64().max(1e-9);
    println!("\nacquire latency, real engine through sockproxy ({THREADS} threads)");
    println!("| source  | p50 | p99 |");
    println!("|---|---|---|");
    println!(
        "| created | {:?} | {:?} |",
        percentile(&cold, 0.5),
        percentile(&cold, 0.99)
    );
    println!(
        "| warm    | {:?} | {:?} |",
        percentile(&warm, 0.5),
        percentile(&warm, 0.99)
    );
    println!("warm reclaim is {ratio:.0}x faster than a cold create (p50)");
    step("SIGTERM destroys every sandbox the process owns", || {
        let out = serve.terminate();
        assert!(out.status.success(), "{out:?}");
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            printed
                .lines()
                .filter(|l| l.contains("\"destroyed\""))
                .count(),
            THREADS,
            "{printed}"
        );
        for t in &threads {
            let id = sandbox_id("user-1", t).expect("id");
            let name = names(&prefix, &id).sandbox;
            let r = raw::get(&e.socket, &format!("/containers/{name}/json")).expect("answer");
            assert_eq!(r.status, 404, "{name} destroyed at shutdown");
        }
    });
}
