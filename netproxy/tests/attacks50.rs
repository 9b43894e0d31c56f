//! Issue 50's netproxy findings 2 and 3 (what is refused, logged and resolved), each test in its
//! own network namespace (`unshare -n`, only `lo`), the addresses it needs added to `lo` and a
//! `Recorder` on each counting what really connected. Names come from a scripted resolver (only
//! `.test` names), or from a scripted DNS server on the namespace's loopback for the stub
//! resolver's own findings; nothing asks real DNS. Finding 1 is `own50.rs`.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;

use common::ns::{self, Recorder};
use common::scripted::Scripted;
use common::{free_port, http_get};
use netproxy::config::Args;
use netproxy::proxy::NetProxy;
use netproxy::server::{Background, Limits};

/// netproxy in process on 127.0.0.1, its policy from these flags (read as the binary reads
/// them), with `resolver`.
fn from_flags(
    flags: &[&str],
    resolver: Arc<dyn netproxy::resolve::Resolve>,
) -> (Background, Arc<NetProxy>, Args) {
    let args =
        Args::load_from(std::iter::once("netproxy").chain(flags.iter().copied())).expect("flags");
    let np = Arc::new(NetProxy::new(args.policy().expect("policy"), resolver));
    let p = Background::start(
        "127.0.0.1:0".parse().expect("addr"),
        np.clone(),
        Limits::default(),
    )
    .expect("netproxy starts");
    (p, np, args)
}

fn refused_with(out: &str, status: &str, reason: &str) -> bool {
    out.starts_with(&format!("HTTP/1.1 {status}"))
        && out
            .to_ascii_lowercase()
            .contains(&format!("x-netproxy-error: {reason}\r\n"))
}

fn get(p: SocketAddr, url: &str) -> String {
    http_get(p.port(), url)
}

/// Finding 2: a deny rule naming an IP (`--deny 11.0.0.1`, `[2600::1]`) or a network
/// (`11.0.0.0/24`, `[2600:5::/32]`), on the flags or in the policy file, refuses every allowed
/// name that resolves to it (the whole answer, also when another address is fine, and the IPv4
/// a trusted NAT64 prefix carries), not only a request that spells it. Nothing denied is
/// dialed; the decision line names the deny rule.
#[test]
fn f2_ip_deny_rules_apply_to_every_resolved_address() {
    if !ns::enter(
        "f2_ip_deny_rules_apply_to_every_resolved_address",
        &[
            "addr add 11.0.0.1/32 dev lo",
            "addr add 11.0.0.9/32 dev lo",
            "addr add 12.0.0.1/32 dev lo",
            "addr add 2600::1/128 dev lo nodad",
            "addr add 2600:5::7/128 dev lo nodad",
        ],
    ) {
        return;
    }
    let logs = common::logs::Logs::capture();
    let port = free_port();
    let denied: Vec<Recorder> = ["11.0.0.1", "11.0.0.9", "[2600::1]", "[2600:5::7]"]
        .iter()
        .map(|a| Recorder::bind(&format!("{a}:{port}")))
        .collect();
    let fine = Recorder::bind(&format!("12.0.0.1:{port}"));
    let r = Scripted::with(&[
        ("one.test", &["11.0.0.1"]),
        ("net.test", &["11.0.0.9"]),
        ("v6.test", &["2600::1"]),
        ("v6net.test", &["2600:5::7"]),
        ("mixed.test", &["12.0.0.1", "11.0.0.1"]),
        ("nat64.test", &["64:ff9b::b00:1"]),
        ("ok.test", &["12.0.0.1"]),
    ]);
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("policy.json");
    std::fs::write(&file, r#"{"deny":["11.0.0.0/24","[2600::1]"]}"#).expect("write");
    let rule = format!("*.test:{port}");
    let (p, np, args) = from_flags(
        &[
            "--allow",
            &rule,
            "--deny",
            "11.0.0.1",
            "--deny",
            "[2600:5::/32]:80,443",
            "--deny",
            &format!("[2600:5::/32]:{port}"),
            "--allow-cidr",
            "64:ff9b::/96",
            "--policy",
            file.to_str().expect("utf-8 path"),
        ],
        r,
    );
    for (name, rule) in [
        ("one.test", "11.0.0.1"),
        ("net.test", "11.0.0.0/24"),
        ("v6.test", "[2600::1]"),
        ("v6net.test", &format!("[2600:5::/32]:{port}")),
        ("mixed.test", "11.0.0.1"),
        ("nat64.test", "11.0.0.1"),
    ] {
        let out = get(p.addr, &format!("http://{name}:{port}/"));
        assert!(refused_with(&out, "403", "denied_by_rule"), "{name}: {out}");
        let d = logs.wait_for("decision", |v| v["host"] == name);
        assert_eq!(
            (d["decision"].as_str(), d["rule"].as_str()),
            (Some("deny"), Some(rule)),
            "{d}"
        );
    }
    // A literal inside a denied network is refused before anything (no address to vet).
    let out = get(p.addr, &format!("http://11.0.0.9:{port}/"));
    assert!(refused_with(&out, "403", "denied_by_rule"), "{out}");
    let out = get(p.addr, &format!("http://ok.test:{port}/"));
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert_eq!(fine.hits(), 1);
    for d in &denied {
        assert_eq!(d.hits(), 0, "{} was dialed", d.addr);
    }
    // A reload whose file denies the address an open tunnel is connected to closes it.
    let mut t = std::net::TcpStream::connect(p.addr).expect("connect");
    t.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    write!(
        t,
        "CONNECT ok.test:{port} HTTP/1.1\r\nHost: ok.test:{port}\r\n\r\n"
    )
    .expect("write");
    let mut head = [0u8; 12];
    t.read_exact(&mut head).expect("an answer");
    assert_eq!(&head, b"HTTP/1.1 200");
    std::fs::write(&file, r#"{"deny":["12.0.0.0/8"]}"#).expect("write");
    np.set_policy(args.policy().expect("the file as SIGHUP reads it"));
    let closed = logs.wait_for("tunnel closed", |_| true);
    assert_eq!(closed["ended"].as_str(), Some("revoked"), "{closed}");
    let out = get(p.addr, &format!("http://ok.test:{port}/"));
    assert!(refused_with(&out, "403", "denied_by_rule"), "{out}");
}

/// A resolver that never answers (every lookup times out).
#[derive(Debug)]
struct Silent;

impl netproxy::resolve::Resolve for Silent {
    fn lookup(&self, _name: &str) -> netproxy::resolve::Lookup {
        Box::pin(std::future::pending())
    }
}

/// `GET path` on the metrics endpoint at `at`: status and body.
fn scrape_get(at: SocketAddr, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(at).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

/// Finding 3: `/healthz` says whether the process serves, not whether the last lookup of some
/// allowed name was answered: a lookup that times out leaves it 200 (it used to turn 503
/// `resolver_failing` for a minute after one), with the resolver's figures in its body.
#[test]
fn f3_healthz_stays_200_after_a_failed_lookup() {
    if !ns::enter("f3_healthz_stays_200_after_a_failed_lookup", &[]) {
        return;
    }
    let policy = Args::load_from(["netproxy", "--allow", "hang.test"])
        .expect("flags")
        .policy()
        .expect("policy");
    let np = Arc::new(NetProxy {
        dns_timeout: std::time::Duration::from_millis(200),
        ..NetProxy::new(policy, Arc::new(Silent))
    });
    let p = Background::start(
        "127.0.0.1:0".parse().expect("addr"),
        np.clone(),
        Limits::default(),
    )
    .expect("netproxy starts");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt
        .block_on(async {
            scrape::bind(
                &scrape::Listen::Tcp("127.0.0.1:0".parse().expect("addr")),
                scrape::METRICS_MODE,
                None,
            )
        })
        .expect("binds");
    let at = listener.local_tcp().expect("tcp");
    rt.spawn(scrape::serve(
        listener,
        Arc::new(netproxy::metrics::Exposed(np.metrics.clone())),
        std::future::pending(),
    ));
    // The accept loop starts on the proxy's own thread, just after `start` returns.
    let serving = (0..500).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        scrape_get(at, "/healthz").0 == 200
    });
    assert!(serving, "/healthz is 200 once the proxy serves");
    let out = get(p.addr, "http://hang.test/");
    assert!(refused_with(&out, "504", "dns_timeout"), "{out}");
    let (status, body) = scrape_get(at, "/healthz");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(v["status"], "ok", "{body}");
    assert!(v["resolver_failed_secs_ago"].is_u64(), "{body}");
    // Once the proxy no longer serves, it says so.
    drop(p);
    let (status, body) = scrape_get(at, "/healthz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("\"not_serving\""), "{body}");
}

/// Threads of process `pid` (0 once it is gone).
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count)
}

/// Finding 3: a SIGHUP right after start never kills netproxy (it did in 11 of 20 starts:
/// SIGHUP's default action until the handler was in place), and is not lost: the reload it asks
/// for happens once the handler is there. 20 starts, each signalled as soon as the process has
/// more than one thread (its runtime is up: before the fix, the handler came later).
#[test]
fn f3_a_sighup_right_after_start_reloads_and_never_kills() {
    use std::io::BufRead;
    if !ns::enter("f3_a_sighup_right_after_start_reloads_and_never_kills", &[]) {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("policy.json");
    std::fs::write(&file, r#"{"allow":["a.test"]}"#).expect("write");
    for start in 0..20 {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_netproxy"))
            .args([
                "--listen",
                &format!("127.0.0.1:{}", free_port()),
                "--policy",
            ])
            .arg(&file)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("netproxy starts");
        let pid = child.id();
        // Bounded (10 s): the runtime comes up within milliseconds.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while threads(pid) == 1 && std::time::Instant::now() < deadline {}
        let hup = std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(hup.success(), "start {start}: signalled");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(l);
            }
        });
        let mut seen = Vec::new();
        let reloaded = loop {
            match lines.recv_timeout(std::time::Duration::from_secs(10)) {
                Ok(l) if l.contains("policy reloaded") => break true,
                Ok(l) => seen.push(l),
                Err(_) => break false,
            }
        };
        // Alive: the kill is the test's; dead already: its status says how it ended.
        let alive = child.try_wait().expect("wait").is_none() && child.kill().is_ok();
        let status = child.wait().expect("wait");
        assert!(
            reloaded && alive,
            "start {start}: ended {status:?}, lines {seen:?}"
        );
    }
}

/// Finding 3: a refused target's host is shown capped, at `audit::SHOWN_AT_MOST` (256) bytes,
/// in the decision line (`raw_host`, `host`) and in the refusal's body (`host`): a 5 KB name
/// used to be written whole, once per refusal.
#[test]
fn f3_a_refused_targets_host_is_shown_capped() {
    if !ns::enter("f3_a_refused_targets_host_is_shown_capped", &[]) {
        return;
    }
    let logs = common::logs::Logs::capture();
    let (p, _np, _args) = from_flags(&["--allow", "a.test"], Scripted::with(&[]));
    let long = format!("{}.test", "a".repeat(5000));
    let cap = netproxy::audit::SHOWN_AT_MOST;
    for (connect, head) in [
        (
            true,
            format!("CONNECT {long}:443 HTTP/1.1\r\nHost: {long}:443\r\n\r\n"),
        ),
        (
            false,
            format!("GET http://{long}/ HTTP/1.1\r\nHost: {long}\r\nConnection: close\r\n\r\n"),
        ),
    ] {
        let before = logs.with_message("decision").len();
        let mut s = std::net::TcpStream::connect(p.addr).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(head.as_bytes()).expect("write");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(refused_with(&out, "400", "malformed host"), "{out}");
        let body: serde_json::Value =
            serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap_or("")).expect("JSON");
        let host = body["host"].as_str().expect("host");
        assert!(
            host.len() <= cap && long.starts_with(host) && !host.is_empty(),
            "body host of {} bytes",
            host.len()
        );
        logs.wait_for("decision", |_| logs.with_message("decision").len() > before);
        let d = logs.with_message("decision").split_off(before).remove(0);
        for field in ["raw_host", "host"] {
            let v = d[field].as_str().unwrap_or("");
            assert!(v.len() <= cap, "{connect}: {field} of {} bytes", v.len());
        }
        assert!(
            d["raw_host"].as_str().is_some_and(|h| h.len() == cap),
            "{connect}: {d}"
        );
    }
}

/// netproxy in process with the stub resolver asking only `dns`, allowing `*.test:PORT`.
fn with_stub(dns: &common::dns::Dns, port: u16) -> Background {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let stub = rt
        .block_on(async { netproxy::resolve::Stub::with_nameserver(dns.addr) })
        .expect("resolver");
    let rule = format!("*.test:{port}");
    from_flags(&["--allow", &rule], Arc::new(stub)).0
}

/// Finding 3: a name with `_` in a label (Docker's embedded DNS answers for compose's
/// `project_service_1` containers; DNS allows any octet) is asked and served; it used to be
/// refused `dns_failure` without a question being sent.
#[test]
fn f3_names_with_underscores_are_resolved() {
    use common::dns::{Answer, Dns, Rec};
    if !ns::enter(
        "f3_names_with_underscores_are_resolved",
        &["addr add 12.0.0.1/32 dev lo"],
    ) {
        return;
    }
    let port = free_port();
    let up = Recorder::bind(&format!("12.0.0.1:{port}"));
    let a = |name| Answer {
        answers: vec![Rec::A(name, "12.0.0.1")],
        additionals: vec![],
    };
    let dns = Dns::serve(&[
        ("stack_web_1.test", a("stack_web_1.test")),
        ("_svc.b.test", a("_svc.b.test")),
    ]);
    let p = with_stub(&dns, port);
    for name in ["stack_web_1.test", "STACK_web_1.test.", "_svc.b.test"] {
        let out = get(p.addr, &format!("http://{name}:{port}/"));
        assert!(out.starts_with("HTTP/1.1 200"), "{name}: {out}");
    }
    assert_eq!(up.hits(), 3);
    assert!(
        dns.asked().iter().all(|n| n.ends_with(".test.")),
        "{:?}",
        dns.asked()
    );
}

/// Finding 3: an answer that carries A/AAAA records for other names (in the answer section or
/// the additional one) is used only for the name asked (and the names its CNAME chain leads
/// to): when the asked name's own address refuses connections, the other name's address is
/// not tried, and the decision line lists only the asked name's addresses.
#[test]
fn f3_records_for_other_names_in_an_answer_are_not_used() {
    use common::dns::{Answer, Dns, Rec};
    if !ns::enter(
        "f3_records_for_other_names_in_an_answer_are_not_used",
        &[
            "addr add 12.0.0.2/32 dev lo",
            "addr add 11.0.0.66/32 dev lo",
            "addr add 2600::66/128 dev lo nodad",
        ],
    ) {
        return;
    }
    let logs = common::logs::Logs::capture();
    let port = free_port();
    // 12.0.0.2 is the asked names' own address: nothing listens there (refused at once).
    let others: Vec<Recorder> = ["11.0.0.66", "[2600::66]"]
        .iter()
        .map(|a| Recorder::bind(&format!("{a}:{port}")))
        .collect();
    let extra = vec![
        Rec::A("other.test", "11.0.0.66"),
        Rec::Aaaa("other.test", "2600::66"),
    ];
    let dns = Dns::serve(&[
        (
            "multi.test",
            Answer {
                answers: [vec![Rec::A("multi.test", "12.0.0.2")], extra.clone()].concat(),
                additionals: extra.clone(),
            },
        ),
        (
            "alias.test",
            Answer {
                answers: [
                    vec![
                        Rec::Cname("alias.test", "real.test"),
                        Rec::A("real.test", "12.0.0.2"),
                    ],
                    extra.clone(),
                ]
                .concat(),
                additionals: extra,
            },
        ),
    ]);
    let p = with_stub(&dns, port);
    for name in ["multi.test", "alias.test"] {
        let out = get(p.addr, &format!("http://{name}:{port}/"));
        assert!(refused_with(&out, "502", "connect_failed"), "{name}: {out}");
        let d = logs.wait_for("decision", |v| v["host"] == name);
        assert_eq!(d["resolved"].as_str(), Some("[12.0.0.2]"), "{d}");
    }
    for o in &others {
        assert_eq!(o.hits(), 0, "{} was dialed", o.addr);
    }
}
