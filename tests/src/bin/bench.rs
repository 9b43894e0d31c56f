//! `bench`: what sockproxy costs per request, side by side with going direct, in one run.
//! Starts a fake engine and a sockproxy in process on Unix sockets, runs bounded loads (a
//! request count and a time limit per load), and prints Markdown tables of medians over rounds.
//! Usage: `cargo run --release -p sockproxy-tests --bin bench [-- --requests N --rounds R]`.
//! Not yet covered (issue 8): the HAProxy comparison, the real engine, netproxy, footprint.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use sockproxy_tests::fake::{FakeEngine, Flavor};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;

/// Benchmarks sockproxy against direct access to a fake engine.
#[derive(Debug, Parser)]
struct Args {
    /// Requests per load (each load also stops after 20 s).
    #[arg(long, default_value_t = 4000)]
    requests: usize,
    /// Rounds per cell; the table shows medians.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Container counts for the list-filtering table.
    #[arg(long, value_delimiter = ',', default_value = "10,1000,10000")]
    list_sizes: Vec<usize>,
}

const PREFIX: &str = "bench-";

#[derive(Debug, Clone, Copy)]
struct Load {
    rps: f64,
    p50: Duration,
    p99: Duration,
}

/// `requests` requests over `concurrency` kept-alive connections to `sock`.
async fn load(
    sock: &Path,
    method: &'static str,
    path: &str,
    concurrency: usize,
    requests: usize,
) -> Load {
    let issued = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(20);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (sock, path, issued) = (sock.to_owned(), path.to_owned(), issued.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let Ok(stream) = tokio::net::UnixStream::connect(&sock).await else {
                return lat;
            };
            let Ok((mut sender, conn)) =
                hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
                    .await
            else {
                return lat;
            };
            tokio::spawn(conn);
            while issued.fetch_add(1, Ordering::Relaxed) < requests && Instant::now() < deadline {
                let req = hyper::Request::builder()
                    .method(method)
                    .uri(path.as_str())
                    .header("Host", "docker")
                    .body(Empty::new())
                    .expect("request");
                let t = Instant::now();
                let Ok(resp) = sender.send_request(req).await else {
                    break;
                };
                let _ = resp.into_body().collect().await;
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    let elapsed = start.elapsed();
    all.sort();
    let pick = |q: f64| {
        all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Load {
        rps: all.len() as f64 / elapsed.as_secs_f64(),
        p50: pick(0.50),
        p99: pick(0.99),
    }
}

fn median<T: Copy>(mut v: Vec<T>, key: impl Fn(&T) -> f64) -> T {
    v.sort_by(|a, b| key(a).total_cmp(&key(b)));
    v[v.len() / 2]
}

fn create(engine: &Path, name: &str) -> String {
    let body = serde_json::json!({ "Image": "busybox", "Cmd": ["sleep", "600"] }).to_string();
    let r = raw::request(
        engine,
        "POST",
        &format!("/containers/create?name={name}"),
        Some(body.as_bytes()),
    )
    .expect("create");
    r.json()["Id"].as_str().unwrap_or_default().to_owned()
}

/// `n` containers, half of them in the benchmark stack's scope.
fn populate(engine: &Path, n: usize) {
    for i in 0..n {
        let kind = if i % 2 == 0 {
            "bench-sandbox-"
        } else {
            "other-"
        };
        create(engine, &format!("{kind}{i}"));
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

fn main() {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("# sockproxy benchmark\n");
    println!(
        "Cores: {}. Each cell: median of {} rounds of {} requests (each load stops after 20 s).",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        args.rounds,
        args.requests
    );
    println!("Reproduce: `cargo run --release -p sockproxy-tests --bin bench -- --requests {} --rounds {}`\n", args.requests, args.rounds);

    let engine = FakeEngine::start(Flavor::Debian2010);
    let proxy = StackProxy::start(engine.socket(), PREFIX, false);
    populate(engine.socket(), 10);
    let own = create(engine.socket(), "bench-sandbox-stop");
    let targets: [(&str, &'static str, String); 3] = [
        ("HEAD /_ping", "HEAD", "/_ping".to_owned()),
        (
            "GET /containers/json?all=1",
            "GET",
            "/containers/json?all=1".to_owned(),
        ),
        (
            "POST /containers/{id}/stop",
            "POST",
            format!("/containers/{own}/stop"),
        ),
    ];
    println!(
        "## Per-request cost (fake engine; sockproxy opens one upstream connection per request)\n"
    );
    println!("| request | concurrency | direct req/s | proxy req/s | ratio | direct p50 ms | proxy p50 ms | direct p99 ms | proxy p99 ms |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let sockets: [PathBuf; 2] = [engine.socket().to_owned(), proxy.socket_buf()];
    for (label, method, path) in &targets {
        for c in [1, 16, 64] {
            let mut cells = Vec::new();
            for sock in &sockets {
                let rounds: Vec<Load> = (0..args.rounds)
                    .map(|_| rt.block_on(load(sock, method, path, c, args.requests)))
                    .collect();
                cells.push(median(rounds, |l| l.rps));
            }
            let (d, p) = (cells[0], cells[1]);
            println!(
                "| `{label}` | {c} | {:.0} | {:.0} | {:.2} | {} | {} | {} | {} |",
                d.rps,
                p.rps,
                p.rps / d.rps,
                ms(d.p50),
                ms(p.p50),
                ms(d.p99),
                ms(p.p99)
            );
        }
    }

    println!("\n## List filtering at scale (`GET /containers/json?all=1`, half the containers in scope)\n");
    println!("| containers | direct ms | proxy ms | added |");
    println!("|---|---|---|---|");
    for &n in &args.list_sizes {
        let engine = FakeEngine::start(Flavor::Debian2010);
        populate(engine.socket(), n);
        let proxy = StackProxy::start(engine.socket(), PREFIX, false);
        let per = |sock: &Path| {
            let rounds: Vec<Load> = (0..args.rounds.max(3))
                .map(|_| rt.block_on(load(sock, "GET", "/containers/json?all=1", 1, 20)))
                .collect();
            median(rounds, |l| l.p50.as_secs_f64()).p50
        };
        let (d, p) = (per(engine.socket()), per(proxy.socket()));
        println!(
            "| {n} | {} | {} | {:+.0}% |",
            ms(d),
            ms(p),
            (p.as_secs_f64() / d.as_secs_f64() - 1.0) * 100.0
        );
    }
}
