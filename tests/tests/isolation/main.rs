//! Issue 48, point 4: on the real engine a fork bomb in one stack's sandbox leaves another
//! stack's sandbox answering HTTP. A test binary of its own because cargo runs test binaries one
//! after another: what competes with the bomb for the host's CPUs is the other stack's sandbox and
//! the engine, not the rest of the suite's tests running beside it.
//! Run on its own with `cargo test -p sockproxy-tests --test isolation`.

use std::time::{Duration, Instant};

use lifecycle::decide::Mode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sockproxy_tests::engine::real_engine;
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
            if probes % 10 == 1 {
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
    assert!(most_pids > 100, "the bomb ran: {most_pids} processes");
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
