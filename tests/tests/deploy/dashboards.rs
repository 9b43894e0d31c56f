//! Every metric the dashboard (`deploy/grafana/sandbox-stacks.json`) and the alerts
//! (`deploy/prometheus/alerts.yaml`) name is one the three programs serve (issue 51): sockproxy,
//! netproxy and `lifecycle serve` started with `--metrics-listen`, given known traffic (an
//! allowed and a refused request, a refused egress target, a provisioner call, an acquire and a
//! release), then scraped.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sockproxy_tests::fake::{FakeEngine, Flavor};
use sockproxy_tests::metrics::{At, Scrape};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The metric names a PromQL text uses: the programs' families and the process families.
fn names_in(text: &str) -> BTreeSet<String> {
    let re = regex::Regex::new(r"\b((?:sockproxy|netproxy|lifecycle|process)_[a-z_]+)\b")
        .expect("regex");
    re.captures_iter(text).map(|c| c[1].to_owned()).collect()
}

/// A family as a scrape names it: histograms' series end `_bucket`, `_sum`, `_count`.
fn family(name: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name)
}

fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{} did not appear",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_alerts_name_is_served() {
    let dir = tempfile::tempdir().expect("dir");
    let engine = FakeEngine::start(Flavor::Debian2010);

    // sockproxy, with an allowed and a refused request behind it.
    let sm = dir.path().join("sockproxy-metrics.sock");
    let sm_at = sm.clone();
    let stack = StackProxy::start_with(engine.socket(), "deer-flow-", false, move |c| {
        c.metrics_listen = Some(scrape::Listen::Unix(sm_at));
    });
    assert_eq!(
        raw::get(stack.socket(), "/_ping").expect("ping").status,
        200
    );
    let refused =
        raw::request(stack.socket(), "POST", "/containers/other/stop", None).expect("answer");
    assert_eq!(refused.status, 403);
    let listed = raw::get(stack.socket(), "/containers/json?all=1").expect("list");
    assert_eq!(listed.status, 200);

    // netproxy, with a refused target.
    let nm = dir.path().join("netproxy-metrics.sock");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut netproxy = Command::new(sockproxy_tests::bins::path("netproxy"))
        .args(["--listen", &listen, "--allow", "allowed.test"])
        .arg("--metrics-listen")
        .arg(&nm)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("netproxy starts");
    wait_for(&nm);
    let refused = {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(&listen).expect("netproxy answers");
        c.write_all(
            b"GET http://refused.test/ HTTP/1.1\r\nHost: refused.test\r\nConnection: close\r\n\r\n",
        )
        .expect("writes");
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out
    };
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");

    // lifecycle serve in front of the stack's proxy, with a call made.
    let lm = dir.path().join("lifecycle-metrics.sock");
    let serve = sockproxy_tests::serve_process::ServeProcess::start(
        stack.socket(),
        "deer-flow-",
        dir.path(),
        dir.path().join("api.sock"),
        &["--ready-timeout", "0"],
        &["--metrics-listen", &lm.display().to_string()],
    );
    let listed = raw::get(&serve.sock, "/api/sandboxes").expect("answer");
    assert_eq!(listed.status, 200, "{}", listed.text());
    let (status, acquired) = serve.acquire("u1", "t1").await;
    assert_eq!(status, 200, "{acquired}");
    let (status, released) = serve.release(&acquired).await;
    assert_eq!(status, 200, "{released}");

    let mut served = BTreeSet::new();
    for at in [&sm, &nm, &lm] {
        let s = Scrape::take(At::Unix(at));
        served.extend(s.types.keys().map(|n| family(n).to_owned()));
        served.extend(
            s.samples
                .keys()
                .map(|series| family(series.split('{').next().unwrap_or(series)).to_owned()),
        );
    }
    let _ = netproxy.kill();
    let _ = netproxy.wait();
    drop(serve);

    let dashboard = std::fs::read_to_string(repo().join("deploy/grafana/sandbox-stacks.json"))
        .expect("dashboard");
    let alerts =
        std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yaml")).expect("alerts");
    let named: BTreeSet<String> = names_in(&dashboard)
        .into_iter()
        .chain(names_in(&alerts))
        .collect();
    assert!(named.len() >= 12, "the files name their metrics: {named:?}");
    let missing: Vec<&String> = named
        .iter()
        .filter(|n| {
            let f = family(n);
            !served.contains(f) && !served.contains(&format!("{f}_total"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "named by the dashboard or the alerts, served by no program: {missing:?}\nserved: {served:?}"
    );
}
