//! Issue 48, point 4: on the real engine a fork bomb in one stack's sandbox leaves another
//! stack's sandbox answering HTTP: one made by `lifecycle serve` with its limits, one made by
//! deer-flow's `docker run` through sockproxy with the proxy's defaults. A test binary of its own
//! because cargo runs test binaries one after another, and its two tests take turns
//! (`ONE_BOMB`): what competes with a bomb for the host's CPUs is the other stack's sandbox and
//! the engine, not the rest of the suite's tests running beside it.
//! Run on its own with `cargo test -p sockproxy-tests --test isolation`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use lifecycle::decide::Mode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{real_engine, Cleanup, TEST_IMAGE};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

/// One fork bomb at a time.
static ONE_BOMB: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
use sockproxy_tests::provisioner::{hex, ApiStack};

fn create(id: &str, thread: &str) -> Value {
    json!({"sandbox_id": id, "thread_id": thread, "user_id": "user-1"})
}

fn derived(thread: &str) -> String {
    hex(&Sha256::digest(format!("user-1:{thread}").as_bytes()))[..16].to_owned()
}

/// One GET of `url` (`http://HOST:PORT`) within `limit`: whether any HTTP answer came.
fn answers(addr: &str, limit: Duration) -> bool {
    use std::io::{Read, Write};
    let Ok(addr) = addr.parse::<std::net::SocketAddr>() else {
        return false;
    };
    let Ok(mut t) = std::net::TcpStream::connect_timeout(&addr, limit) else {
        return false;
    };
    let _ = t.set_read_timeout(Some(limit));
    let _ = t.set_write_timeout(Some(limit));
    if t.write_all(b"GET / HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 12];
    matches!(t.read(&mut buf), Ok(n) if n >= 5 && buf.starts_with(b"HTTP/"))
}

/// A fork bomb runs for 60 s in one stack's sandbox: its process limit holds it (the engine
/// counts at most 512 processes in it), and another stack's sandbox answers HTTP within 5 s at
/// every probe throughout (the probes stop after 60 s or 240 probes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_in_one_sandbox_leaves_another_stacks_sandbox_answering() {
    let test = "a_fork_bomb_in_one_sandbox_leaves_another_stacks_sandbox_answering";
    if !sockproxy_tests::bindroot::can_pin(test) {
        return;
    }
    let Some(e) = real_engine(test) else {
        return;
    };
    let _turn = ONE_BOMB.lock().await;
    let key = sockproxy_tests::provisioner::KEY;
    let bomber = ApiStack::start(&e, Mode::Open, Some(key)).await;
    let victim = ApiStack::start(&e, Mode::Open, Some(key)).await;
    let (a, b) = (derived("bomb"), derived("victim"));
    assert_eq!(bomber.create(&create(&a, "bomb")).await.0, 200);
    let (status, text) = victim.create(&create(&b, "victim")).await;
    assert_eq!(status, 200, "{text}");
    let url: Value = serde_json::from_str(&text).expect("json");
    let port = url["sandbox_url"]
        .as_str()
        .and_then(|u| u.rsplit(':').next())
        .unwrap_or("")
        .to_owned();
    let addr = format!("127.0.0.1:{port}");
    let probe = addr.clone();
    let up = tokio::task::spawn_blocking(move || {
        (0..300).any(|_| {
            let ok = answers(&probe, Duration::from_secs(5));
            if !ok {
                std::thread::sleep(Duration::from_millis(100));
            }
            ok
        })
    })
    .await
    .expect("probe");
    assert!(up, "the other stack's sandbox serves before the bomb");
    let bomb_id = bomber.inspect(&bomber.name(&a))["Id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let exec = sockproxy_tests::raw::request(
        &e.socket,
        "POST",
        &format!("/containers/{bomb_id}/exec"),
        Some(
            json!({"Cmd": ["sh", "-c", "f() { f | f & }; f; sleep 120"]})
                .to_string()
                .as_bytes(),
        ),
    )
    .expect("exec create");
    assert_eq!(exec.status, 201, "{}", exec.text());
    let exec_id = exec.json()["Id"].as_str().unwrap_or_default().to_owned();
    let started = sockproxy_tests::raw::request(
        &e.socket,
        "POST",
        &format!("/exec/{exec_id}/start"),
        Some(json!({"Detach": true}).to_string().as_bytes()),
    )
    .expect("exec start");
    assert!(
        started.status == 200 || started.status == 204,
        "{}",
        started.text()
    );
    let (engine, bomb) = (e.socket.clone(), bomb_id.clone());
    let outcome = tokio::task::spawn_blocking(move || {
        let began = Instant::now();
        let mut probes = 0;
        let mut most_pids = 0;
        let mut slowest = Duration::ZERO;
        while began.elapsed() < Duration::from_secs(60) && probes < 240 {
            probes += 1;
            let asked = Instant::now();
            if !answers(&addr, Duration::from_secs(5)) {
                return Err(format!("probe {probes} got no answer within 5 s"));
            }
            slowest = slowest.max(asked.elapsed());
            if probes % 4 == 2 {
                let stats = sockproxy_tests::raw::get(
                    &engine,
                    &format!("/containers/{bomb}/stats?stream=false"),
                );
                if let Ok(r) = stats {
                    let n = r.json()["pids_stats"]["current"].as_i64().unwrap_or(0);
                    most_pids = most_pids.max(n);
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok((probes, most_pids, slowest))
    })
    .await
    .expect("prober");
    let (probes, most_pids, slowest) = outcome.expect("the other stack's sandbox kept answering");
    eprintln!(
        "{test}: {probes} probes answered, the slowest in {slowest:?}; the bomb's sandbox held at most {most_pids} processes"
    );
    let state = sockproxy_tests::raw::get(&e.socket, &format!("/containers/{bomb_id}/json"))
        .map(|r| r.json()["State"].clone())
        .unwrap_or_default();
    assert!(
        most_pids > 100,
        "the bomb ran: {most_pids} processes; its sandbox now: {state}"
    );
    assert!(most_pids <= 512, "the limit held: {most_pids} processes");
    // The bomb's sandbox goes with its processes.
    let (status, _) = bomber
        .call(
            "DELETE",
            &format!("/api/sandboxes/{a}"),
            &[("X-API-Key", key)],
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(bomber.inspect(&bomb_id), Value::Null);
}

/// An HTTP answer from 127.0.0.1:`port` within `limit` (connect, write, read).
fn answers_within(port: u16, limit: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), limit) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(limit));
    let _ = s.set_write_timeout(Some(limit));
    if s.write_all(b"GET / HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut got = [0u8; 5];
    s.read_exact(&mut got).is_ok() && &got == b"HTTP/"
}

/// Issue 48: another stack's sandbox answers HTTP within 5 s (the probe's own bound, not a
/// timing figure) throughout a 60 s fork bomb in one sandbox created with the defaults.
#[test]
fn a_fork_bomb_in_one_stack_leaves_another_stacks_sandbox_answering() {
    let test = "a_fork_bomb_in_one_stack_leaves_another_stacks_sandbox_answering";
    let Some(e) = real_engine(test) else { return };
    let _turn = ONE_BOMB.blocking_lock();
    let (pa, pb) = (unique_prefix(), unique_prefix());
    let mut clean = Cleanup::new(&e.socket);
    let a = StackProxy::start(&e.socket, &pa, false);
    let b = StackProxy::start(&e.socket, &pb, false);
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let served = clean.container(&format!("{pb}sandbox-served"));
    let publish = format!("127.0.0.1:{port}:8080");
    let out = docker(
        b.socket(),
        &[
            "run", "-d", "--name", &served, "-p", &publish, TEST_IMAGE, "httpd", "-f", "-p",
            "8080", "-h", "/tmp",
        ],
    );
    assert!(out.ok(), "{}", out.stderr);
    let start = Instant::now();
    while !answers_within(port, Duration::from_secs(5)) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the sandbox never served"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let bomb = clean.container(&format!("{pa}sandbox-bomb"));
    let out = docker(
        a.socket(),
        &[
            "run",
            "-d",
            "--name",
            &bomb,
            TEST_IMAGE,
            "sh",
            "-c",
            "b() { b | b & }; b; sleep 600",
        ],
    );
    assert!(out.ok(), "{}", out.stderr);
    let (mut probes, mut most, mut limit) = (0, 0, None);
    let began = Instant::now();
    // Bounded by time and by count.
    while began.elapsed() < Duration::from_secs(60) && probes < 120 {
        assert!(
            answers_within(port, Duration::from_secs(5)),
            "another stack's sandbox did not answer within 5 s, {:?} into the fork bomb",
            began.elapsed()
        );
        probes += 1;
        let stats = raw::get(&e.socket, &format!("/containers/{bomb}/stats?stream=false"))
            .expect("answer")
            .json();
        most = most.max(stats["pids_stats"]["current"].as_u64().unwrap_or(0));
        limit = stats["pids_stats"]["limit"].as_u64().or(limit);
        std::thread::sleep(Duration::from_secs(1));
    }
    // The bomb ran into its limit (the engine's stats count the cgroup's tasks).
    assert_eq!(limit, Some(512), "the default pids limit");
    assert!(most >= 400, "the fork bomb reached only {most} tasks");
    eprintln!("{probes} probes answered; the bomb held up to {most} processes");
    let r = raw::request(
        &e.socket,
        "DELETE",
        &format!("/containers/{bomb}?force=1"),
        None,
    )
    .expect("rm");
    assert_eq!(r.status, 204, "{}", r.text());
}
