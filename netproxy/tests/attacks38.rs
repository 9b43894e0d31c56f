//! Issue 38's findings, each in its own network namespace (`unshare -n`, only `lo`), with the
//! forbidden addresses added to `lo` and a `Recorder` on each counting what really connected;
//! names come from a scripted resolver (only `.test` names), never from DNS.

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
