//! Part 5: resident memory of sockproxy and netproxy, idle and while holding many concurrent
//! connections, each a fresh process so nothing earlier in the run is counted.

use std::path::Path;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::runtime::Runtime;

use crate::procs::{mib, Memory, Proc};
use crate::socket::{create, start_fake, start_sockproxy};
use crate::tunnel::{echo, open, start_netproxy, upstream, Route};
use crate::Args;

/// Opens `n` connections to sockproxy at once, each asking for the container list, and keeps
/// them open (kept alive) until the returned senders are dropped.
pub async fn hold_sockproxy(
    sock: &Path,
    n: usize,
) -> anyhow::Result<Vec<hyper::client::conn::http1::SendRequest<Empty<Bytes>>>> {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let sock = sock.to_owned();
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::UnixStream::connect(&sock).await?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
                    .await?;
            tokio::spawn(conn);
            let req = hyper::Request::get("/containers/json?all=1")
                .header("Host", "docker")
                .body(Empty::new())?;
            let resp = sender.send_request(req).await?;
            resp.into_body().collect().await?;
            anyhow::Ok(sender)
        }));
    }
    let mut held = Vec::new();
    for t in tasks {
        held.push(t.await??);
    }
    Ok(held)
}

fn row(name: &str, n: usize, idle: Memory, busy: Memory) {
    println!(
        "| {name} | {} | {} | {} | {n} |",
        mib(idle.rss_kib),
        mib(busy.rss_kib),
        mib(busy.peak_kib)
    );
}

/// Lets the process settle before reading its memory.
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(200));
}

pub fn footprint(rt: &Runtime, args: &Args, bins: &Path, dir: &Path) -> anyhow::Result<()> {
    let n = args.connections;
    println!("## 5. Footprint (resident memory, MiB)\n");
    println!("Idle: after start and one request. Busy: {n} connections open at once, each after one request (sockproxy: the container list of 10; netproxy: a CONNECT tunnel with one byte echoed), read while they are still open.\n");
    println!("| program | idle RSS | RSS with connections | peak RSS | connections |");
    println!("|---|---|---|---|---|");

    let engine = start_fake(bins, dir, "footprint")?;
    for i in 0..10 {
        create(&engine.socket, &format!("bench-sandbox-{i}"))?;
    }
    let sockproxy = start_sockproxy(bins, dir, &engine.socket, "footprint", &args.sockproxy_flag)?;
    sockproxy_tests::raw::get(&sockproxy.socket, "/_ping")?;
    settle();
    let idle = sockproxy.proc.memory();
    let held = rt.block_on(hold_sockproxy(&sockproxy.socket, n))?;
    settle();
    row("sockproxy", held.len(), idle, sockproxy.proc.memory());
    drop(held);

    let up = rt.block_on(upstream())?;
    let (netproxy, port): (Proc, u16) = start_netproxy(bins, dir, up, "footprint")?;
    rt.block_on(async {
        let mut s = open(Route::Connect(port), up).await?;
        echo(&mut s).await
    })?;
    settle();
    let idle = netproxy.memory();
    let tunnels = rt.block_on(async {
        let mut open_tunnels = Vec::new();
        for _ in 0..n {
            let mut s = open(Route::Connect(port), up).await?;
            echo(&mut s).await?;
            open_tunnels.push(s);
        }
        anyhow::Ok(open_tunnels)
    })?;
    settle();
    row("netproxy", tunnels.len(), idle, netproxy.memory());
    drop(tunnels);
    println!();
    Ok(())
}
