//! Issue 38's findings on what is refused and logged, each in its own network namespace
//! (`unshare -n`, only `lo`), with the forbidden addresses added to `lo` and a `Recorder` on
//! each counting what really connected: addresses (finding 8), cap 503s and refusal floods
//! (6, 9), unreadable interfaces (2). The races and budgets are in `races38.rs`. Names come
//! from a scripted resolver (only `.test` names), never from DNS.

mod common;

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
fn from_flags(flags: &[&str], resolver: Arc<Scripted>) -> Background {
    let args =
        Args::load_from(std::iter::once("netproxy").chain(flags.iter().copied())).expect("flags");
    let np = NetProxy::new(args.policy().expect("policy"), resolver);
    Background::start(
        "127.0.0.1:0".parse().expect("addr"),
        Arc::new(np),
        Limits::default(),
    )
    .expect("netproxy starts")
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

/// Finding 8: IPv6 outside 2000::/3 is refused as a literal and as an AAAA answer unless an
/// `--allow-cidr` names it; ISATAP's embedded IPv4 is judged; `--own-cidr` in IPv4-mapped
/// form is never dialed.
#[test]
fn f8_addresses_outside_global_unicast_isatap_and_mapped_own_cidr() {
    if !ns::enter(
        "f8_addresses_outside_global_unicast_isatap_and_mapped_own_cidr",
        &[
            "addr add 4000::1/128 dev lo nodad",
            "addr add 2600:1::5efe:a9fe:a9fe/128 dev lo nodad",
            "addr add 11.0.0.7/32 dev lo",
        ],
    ) {
        return;
    }
    let port = free_port();
    let odd = Recorder::bind(&format!("[4000::1]:{port}"));
    let isatap = Recorder::bind(&format!("[2600:1::5efe:a9fe:a9fe]:{port}"));
    let own = Recorder::bind(&format!("11.0.0.7:{port}"));
    let r = Scripted::with(&[
        ("odd.test", &["4000::1"]),
        ("isatap.test", &["2600:1::5efe:a9fe:a9fe"]),
        ("own.test", &["11.0.0.7"]),
    ]);
    let rule = format!("*.test:{port}");
    let literal = format!("[4000::1]:{port}");
    let own_literal = format!("11.0.0.7:{port}");
    let flags = [
        "--allow",
        &rule,
        "--allow",
        &literal,
        "--allow",
        &own_literal,
        "--own-cidr",
        "::ffff:11.0.0.0/120",
        "--allow-cidr",
        "::ffff:11.0.0.0/104",
    ];
    let p = from_flags(&flags, r.clone());
    for (url, reason) in [
        (
            format!("http://[4000::1]:{port}/"),
            "special_address:not_global_unicast",
        ),
        (
            format!("http://odd.test:{port}/"),
            "special_address:not_global_unicast",
        ),
        (
            format!("http://isatap.test:{port}/"),
            "special_address:link_local",
        ),
        (format!("http://11.0.0.7:{port}/"), "proxy_network"),
        (format!("http://own.test:{port}/"), "proxy_network"),
    ] {
        let out = get(p.addr, &url);
        assert!(refused_with(&out, "403", reason), "{url}: {out}");
    }
    assert_eq!((odd.hits(), isatap.hits(), own.hits()), (0, 0, 0));
    drop(p);

    // The control: an operator who names 4000::/16 trusts it, literal and answer alike.
    let mut trusting = flags.to_vec();
    trusting.extend(["--allow-cidr", "4000::/16"]);
    let p = from_flags(&trusting, r);
    for url in [
        format!("http://[4000::1]:{port}/"),
        format!("http://odd.test:{port}/"),
    ] {
        let out = get(p.addr, &url);
        assert!(out.starts_with("HTTP/1.1 200"), "{url}: {out}");
    }
    assert_eq!((odd.hits(), isatap.hits(), own.hits()), (2, 0, 0));
}

/// `raw` written on one connection (errors ignored: the proxy may close first); everything
/// that came back until the proxy closed.
fn exchange(p: SocketAddr, raw: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(p).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let _ = s.write_all(raw);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Finding 6: a 503 at `connection_limit` or `client_connection_limit` writes its decision
/// line, one per refused connection. (`fd_limit`'s is checked through the binary, in
/// `f6_fd_limit_503s_write_their_decision_lines`.)
#[test]
fn f6_cap_503s_write_their_decision_lines() {
    if !ns::enter("f6_cap_503s_write_their_decision_lines", &[]) {
        return;
    }
    let logs = common::logs::Logs::capture();
    for (limits, reason) in [
        (
            Limits {
                max_connections: 1,
                ..Limits::default()
            },
            "connection_limit",
        ),
        (
            Limits {
                max_per_client: 1,
                ..Limits::default()
            },
            "client_connection_limit",
        ),
    ] {
        let np = NetProxy::new(Default::default(), Scripted::with(&[]));
        let p = Background::start("127.0.0.1:0".parse().expect("addr"), Arc::new(np), limits)
            .expect("netproxy starts");
        // The first connection holds the slot: its head never ends (the header timeout is
        // 10 s). Whether it has been accepted yet shows in the answers to the next ones.
        let mut held = std::net::TcpStream::connect(p.addr).expect("first connection");
        std::io::Write::write_all(&mut held, b"GET http://x.test/ HTTP/1.1\r\n").expect("write");
        let full = (0..100).any(|_| {
            let out = exchange(
                p.addr,
                b"GET http://x.test/ HTTP/1.1\r\nHost: x.test\r\n\r\n",
            );
            refused_with(&out, "503", reason)
        });
        assert!(full, "the cap is reached");
        let before = logs.with_message("decision").len();
        let mut refused = 0;
        for _ in 0..3 {
            let out = exchange(
                p.addr,
                b"GET http://x.test/ HTTP/1.1\r\nHost: x.test\r\n\r\n",
            );
            if refused_with(&out, "503", reason) {
                refused += 1;
            }
        }
        assert_eq!(refused, 3, "each gets 503 {reason}");
        let lines: Vec<_> = logs
            .with_message("decision")
            .into_iter()
            .skip(before)
            .collect();
        assert_eq!(lines.len(), 3, "one line per 503: {lines:?}");
        for l in &lines {
            assert_eq!(
                (
                    l["decision"].as_str(),
                    l["reason"].as_str(),
                    l["status"].as_u64()
                ),
                (Some("deny"), Some(reason), Some(503)),
                "{l}"
            );
            assert!(
                l["client"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("127.0.0.1:")),
                "{l}"
            );
        }
        drop(held);
    }
}

/// Finding 9: one connection pipelining thousands of refused requests gets at most
/// `REFUSALS_PER_CONNECTION` answers and decision lines, then one summary line and the close;
/// a refused head's line says what could be read of its method and target.
#[test]
fn f9_a_pipelined_flood_of_refusals_writes_a_bounded_number_of_lines() {
    if !ns::enter(
        "f9_a_pipelined_flood_of_refusals_writes_a_bounded_number_of_lines",
        &[],
    ) {
        return;
    }
    let budget = netproxy::proxy::REFUSALS_PER_CONNECTION;
    let logs = common::logs::Logs::capture();
    let np = NetProxy::new(Default::default(), Scripted::with(&[]));
    let p = Background::start(
        "127.0.0.1:0".parse().expect("addr"),
        Arc::new(np),
        Limits::default(),
    )
    .expect("netproxy starts");
    let one = b"GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n";
    let flood: Vec<u8> = one
        .iter()
        .copied()
        .cycle()
        .take(one.len() * 20_000)
        .collect();
    let out = exchange(p.addr, &flood);
    assert!(out.matches("HTTP/1.1 403").count() <= budget, "{out}");
    let lines = logs.with_message("decision");
    assert_eq!(lines.len(), budget, "{lines:?}");
    assert!(
        lines.iter().all(|l| l["reason"] == "not_allowed"),
        "{lines:?}"
    );
    let summary = logs.with_message("connection closed: too many refusals on it");
    assert_eq!(summary.len(), 1, "{summary:?}");
    assert_eq!(summary[0]["refusals"].as_u64(), Some(budget as u64));

    // A refused head (bare LF): its line carries the method and target as sent.
    let out = exchange(
        p.addr,
        b"POST http://bare.test/x HTTP/1.1\nHost: bare.test\n\n",
    );
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    let line = logs.wait_for("decision", |v| v["reason"] == "bare LF line ending");
    assert_eq!(
        (line["method"].as_str(), line["raw_host"].as_str()),
        (Some("POST"), Some("http://bare.test/x")),
        "{line}"
    );
}

/// Interface reads that always fail (EMFILE), as at the descriptor limit.
fn never_readable() -> std::io::Result<Vec<ipnet::IpNet>> {
    Err(std::io::Error::from_raw_os_error(24))
}

/// Finding 2: when the interfaces cannot be read and no list has been read yet, a request
/// that needs the check is refused (`own_networks_unknown`), even inside an `--allow-cidr`
/// that covers the sidecar's own interface; nothing is dialed; one warning for the episode.
#[test]
fn f2_unreadable_interfaces_refuse_rather_than_fail_open() {
    if !ns::enter(
        "f2_unreadable_interfaces_refuse_rather_than_fail_open",
        &[
            "link add own0 type veth peer name own1",
            "addr add 10.77.0.1/24 dev own0",
            "link set own0 up",
            "link set own1 up",
        ],
    ) {
        return;
    }
    let logs = common::logs::Logs::capture();
    let port = free_port();
    let own = Recorder::bind(&format!("10.77.0.1:{port}"));
    let r = Scripted::with(&[("own.test", &["10.77.0.1"])]);
    let args = Args::load_from([
        "netproxy",
        "--allow",
        &format!("*.test:{port}"),
        "--allow",
        &format!("10.77.0.1:{port}"),
        "--allow-cidr",
        "10.0.0.0/8",
    ])
    .expect("flags");
    let np = NetProxy {
        interfaces: Arc::new(netproxy::own::Watched::with_reader(never_readable)),
        ..NetProxy::new(args.policy().expect("policy"), r)
    };
    let p = Background::start(
        "127.0.0.1:0".parse().expect("addr"),
        Arc::new(np),
        Limits::default(),
    )
    .expect("netproxy starts");
    for url in [
        format!("http://own.test:{port}/"),
        format!("http://10.77.0.1:{port}/"),
        format!("http://own.test:{port}/"),
    ] {
        let out = get(p.addr, &url);
        assert!(
            refused_with(&out, "503", "own_networks_unknown"),
            "{url}: {out}"
        );
    }
    assert_eq!(own.hits(), 0, "the own interface was never dialed");
    let warned: Vec<_> = logs
        .lines()
        .into_iter()
        .filter(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("cannot read the interfaces"))
        })
        .collect();
    assert_eq!(warned.len(), 1, "one warning per episode: {warned:?}");
    let decisions = logs.with_message("decision");
    assert_eq!(decisions.len(), 3, "{decisions:?}");
    assert!(decisions
        .iter()
        .all(|d| d["reason"] == "own_networks_unknown"));

    // The control, same namespace and flags: with reads working, the own interface is
    // refused as the sidecar's network (and never dialed), whatever --allow-cidr says.
    drop(p);
    let np = NetProxy::new(args.policy().expect("policy"), Scripted::with(&[]));
    let p = Background::start(
        "127.0.0.1:0".parse().expect("addr"),
        Arc::new(np),
        Limits::default(),
    )
    .expect("netproxy starts");
    let out = get(p.addr, &format!("http://10.77.0.1:{port}/"));
    assert!(refused_with(&out, "403", "proxy_network"), "{out}");
    assert_eq!(own.hits(), 0);
}
