//! Part 4: egress tunnels on loopback. An upstream of our own (echo one byte, or send N bytes),
//! reached direct, through netproxy, through Debian's tinyproxy and through Debian's squid, each
//! with CONNECT: set-up latency (connect, CONNECT, 200, one byte there and back) and throughput
//! of one large transfer.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

use crate::load::{median, ms, quantile};
use crate::procs::{free_port, installed, tcp_answers, Proc};
use crate::Args;

const START_LIMIT: Duration = Duration::from_secs(20);
/// Bounds each step of a tunnel, so a stuck proxy ends the part instead of the run hanging.
const STEP_LIMIT: Duration = Duration::from_secs(60);
const CHUNK: usize = 64 * 1024;

/// The upstream: first byte `e` → echo one byte and hold the connection until the client
/// closes; `s` + 8-byte length → send that many bytes and close.
pub async fn upstream() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut cmd = [0u8; 1];
                if s.read_exact(&mut cmd).await.is_err() {
                    return;
                }
                if cmd[0] == b's' {
                    let mut len = [0u8; 8];
                    if s.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let mut left = u64::from_be_bytes(len);
                    let buf = vec![0x5a; CHUNK];
                    while left > 0 {
                        let n = left.min(CHUNK as u64) as usize;
                        if s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        left -= n as u64;
                    }
                    let _ = s.shutdown().await;
                } else {
                    let _ = s.write_all(b"!").await;
                    let mut sink = [0u8; 64];
                    while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
                }
            });
        }
    });
    Ok(port)
}

/// How a client reaches the upstream.
#[derive(Debug, Clone, Copy)]
pub enum Route {
    Direct,
    Connect(u16),
}

/// A connection to the upstream at `up`, through `route`.
pub async fn open(route: Route, up: u16) -> anyhow::Result<TcpStream> {
    let port = match route {
        Route::Direct => return Ok(TcpStream::connect(("127.0.0.1", up)).await?),
        Route::Connect(p) => p,
    };
    let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
    s.set_nodelay(true)?;
    let head = format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\nHost: 127.0.0.1:{up}\r\n\r\n");
    s.write_all(head.as_bytes()).await?;
    // Byte by byte, so nothing after the answer's head is consumed here.
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        if s.read(&mut b).await? == 0 || answer.len() > 16 * 1024 {
            bail!("proxy closed before answering CONNECT");
        }
        answer.push(b[0]);
    }
    let status = String::from_utf8_lossy(&answer);
    let first = status.lines().next().unwrap_or_default();
    if first.split_whitespace().nth(1) != Some("200") {
        bail!("CONNECT refused: {first}");
    }
    Ok(s)
}

/// One byte there and back on an open connection.
pub async fn echo(s: &mut TcpStream) -> anyhow::Result<()> {
    s.set_nodelay(true)?;
    s.write_all(b"e").await?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b).await?;
    Ok(())
}

async fn setup_once(route: Route, up: u16) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let mut s = open(route, up).await?;
    echo(&mut s).await?;
    Ok(t.elapsed())
}

/// MB/s (10^6 bytes) of one download of `bytes` through `route`.
async fn throughput(route: Route, up: u16, bytes: u64) -> anyhow::Result<f64> {
    let mut s = open(route, up).await?;
    let t = Instant::now();
    s.write_all(b"s").await?;
    s.write_all(&bytes.to_be_bytes()).await?;
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    if got != bytes {
        bail!("received {got} of {bytes} bytes");
    }
    Ok(bytes as f64 / 1e6 / t.elapsed().as_secs_f64())
}

pub fn start_netproxy(bins: &Path, dir: &Path, up: u16, tag: &str) -> anyhow::Result<(Proc, u16)> {
    let port = free_port()?;
    let mut cmd = Command::new(bins.join("netproxy"));
    cmd.args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--allow-cidr", "127.0.0.1/32"])
        .args(["--allow", &format!("127.0.0.1:{up}")])
        // One client opens every connection here; the default per-client cap is 64.
        .args(["--max-connections-per-client", "1024"]);
    let mut proc = Proc::spawn("netproxy", cmd, dir.join(format!("netproxy-{tag}.log")))?;
    proc.wait(START_LIMIT, || tcp_answers(port))?;
    Ok((proc, port))
}

/// How to reach the upstream and which program (if any) carries the tunnel, or why that
/// program is not there.
type Reach<'a> = Result<(Route, Option<&'a Proc>), String>;

/// The route through a proxy that started, or why it did not.
fn via(started: &Result<(Proc, u16), String>) -> Reach<'_> {
    started
        .as_ref()
        .map(|(proc, port)| (Route::Connect(*port), Some(proc)))
        .map_err(Clone::clone)
}

fn start_tinyproxy(dir: &Path) -> Result<(Proc, u16), String> {
    let bin = installed("tinyproxy").ok_or("not installed (Debian: apt-get install tinyproxy)")?;
    let port = free_port().map_err(|e| e.to_string())?;
    let cfg = dir.join("tinyproxy.conf");
    let text = format!(
        "Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 1024\nAllow 127.0.0.1\nLogLevel Error\nLogFile \"{}\"\n",
        dir.join("tinyproxy.out").display()
    );
    std::fs::write(&cfg, text).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(bin);
    cmd.arg("-d").arg("-c").arg(&cfg);
    let mut proc =
        Proc::spawn("tinyproxy", cmd, dir.join("tinyproxy.log")).map_err(|e| e.to_string())?;
    proc.wait(START_LIMIT, || tcp_answers(port))
        .map_err(|e| format!("did not start: {e}"))?;
    Ok((proc, port))
}

fn start_squid(dir: &Path) -> Result<(Proc, u16), String> {
    let bin = installed("squid").ok_or("not installed (Debian: apt-get install squid)")?;
    let port = free_port().map_err(|e| e.to_string())?;
    let home = dir.join("squid");
    std::fs::create_dir_all(&home).map_err(|e| e.to_string())?;
    // Started as root, squid drops to its own user, which must write its logs and pid here.
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .map_err(|e| e.to_string())?;
    let cfg = home.join("squid.conf");
    let text = format!(
        "http_port 127.0.0.1:{port}\nvisible_hostname bench.invalid\nhttp_access allow localhost\nhttp_access deny all\ncache deny all\ncache_mem 8 MB\naccess_log none\ncache_log {h}/cache.log\npid_filename {h}/squid.pid\ncoredump_dir {h}\ndns_nameservers 127.0.0.1\n",
        h = home.display()
    );
    std::fs::write(&cfg, text).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(bin);
    cmd.arg("-N").arg("-f").arg(&cfg);
    let mut proc = Proc::spawn("squid", cmd, home.join("squid.out")).map_err(|e| e.to_string())?;
    proc.wait(START_LIMIT, || tcp_answers(port))
        .map_err(|e| format!("did not start: {e}"))?;
    Ok((proc, port))
}

/// One route's measurements.
#[derive(Debug, Default)]
struct Measured {
    rates: Vec<f64>,
    /// The proxy's CPU over the downloads only.
    cpu: Duration,
    failed: Option<String>,
}

async fn bounded<T>(
    what: &str,
    f: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(STEP_LIMIT, f)
        .await
        .with_context(|| format!("{what} timed out"))?
}

pub fn tunnels(rt: &Runtime, args: &Args, bins: &Path, dir: &Path) -> anyhow::Result<()> {
    println!("## 4. Egress tunnels (CONNECT on loopback)\n");
    let up = rt.block_on(upstream())?;
    let (netproxy, np) = start_netproxy(bins, dir, up, "part4")?;
    let tiny = start_tinyproxy(dir);
    let squid = start_squid(dir);
    let bytes = args.tunnel_mb * 1_000_000;
    println!(
        "Throughput: one {} MB download per round, median of {} rounds, rounds alternating between the routes. Set-up: {} connections one after another (connect, CONNECT, 200, one byte there and back). Proxy CPU: over the downloads only.\n",
        args.tunnel_mb, args.rounds, args.setups
    );
    println!("| route | MB/s | ratio | set-up p50 ms | set-up p99 ms | proxy CPU ms per 100 MB |");
    println!("|---|---|---|---|---|---|");
    let routes: Vec<(&str, Reach<'_>)> = vec![
        ("direct", Ok((Route::Direct, None))),
        ("netproxy", Ok((Route::Connect(np), Some(&netproxy)))),
        ("tinyproxy", via(&tiny)),
        ("squid", via(&squid)),
    ];
    let mut measured: Vec<Measured> = routes.iter().map(|_| Measured::default()).collect();
    // Rounds alternate between routes so a slow spell of the machine hits all of them.
    for _ in 0..args.rounds {
        for ((_, reach), m) in routes.iter().zip(measured.iter_mut()) {
            let (Ok((route, proc)), None) = (reach, &m.failed) else {
                continue;
            };
            let before = proc.map(|p| p.cpu());
            match rt.block_on(bounded("transfer", throughput(*route, up, bytes))) {
                Ok(rate) => m.rates.push(rate),
                Err(e) => m.failed = Some(format!("{e:#}")),
            }
            if let (Some(p), Some(before)) = (proc, before) {
                m.cpu += p.cpu().saturating_sub(before);
            }
        }
    }
    let mut direct = None;
    for ((name, reach), m) in routes.iter().zip(measured) {
        let route = match (reach, &m.failed) {
            (Err(why), _) => {
                println!("| {name} | {why} | | | | |");
                continue;
            }
            (_, Some(e)) => {
                println!("| {name} | failed: {e} | | | | |");
                continue;
            }
            (Ok((route, _)), None) => *route,
        };
        let setups = rt.block_on(async {
            let mut setups = Vec::new();
            for _ in 0..args.setups {
                setups.push(bounded("set-up", setup_once(route, up)).await?);
            }
            setups.sort();
            anyhow::Ok(setups)
        });
        let setups = match setups {
            Ok(s) => s,
            Err(e) => {
                println!("| {name} | failed: {e:#} | | | | |");
                continue;
            }
        };
        let downloaded_mb = args.tunnel_mb as f64 * m.rates.len() as f64;
        let cpu = if matches!(reach, Ok((_, Some(_)))) && downloaded_mb > 0.0 {
            format!(
                "{:.1}",
                m.cpu.as_secs_f64() * 1000.0 * 100.0 / downloaded_mb
            )
        } else {
            String::new()
        };
        let rate = median(m.rates, |r| *r);
        let ratio = if *name == "direct" {
            direct = Some(rate);
            "1.00".to_owned()
        } else {
            direct
                .map(|d| format!("{:.2}", rate / d))
                .unwrap_or_default()
        };
        println!(
            "| {name} | {rate:.0} | {ratio} | {} | {} | {cpu} |",
            ms(quantile(&setups, 0.5)),
            ms(quantile(&setups, 0.99))
        );
    }
    println!();
    Ok(())
}
