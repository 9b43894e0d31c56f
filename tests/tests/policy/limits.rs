//! Each container's limits (issue 48, point 4): a create that sets none gets the operator's
//! defaults (memory 2g, 2 CPUs, 512 processes), so deer-flow's `docker run` is held to them
//! unchanged; values above the bounds, and "unlimited", are refused at create and at update,
//! each refusal checked on what the engine holds. On the real engine the cgroup says so, and a
//! fork bomb in one stack's sandbox leaves another stack's sandbox answering.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;
use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{each_engine, real_engine, Cleanup, Fakes, TEST_IMAGE};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::bypasses::{inspect, refused, send};

const GIB: i64 = 1 << 30;

#[test]
fn a_create_with_no_limit_gets_the_defaults_and_none_may_be_unlimited() {
    let test = "a_create_with_no_limit_gets_the_defaults_and_none_may_be_unlimited";
    each_engine(test, Fakes::Debian, |e| {
        let p = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let proxy = StackProxy::start(&e.socket, &p, false);
        let held = |name: &str| inspect(&e, "containers", &format!("{name}/json")).json();

        let plain = step("deer-flow's docker run, no limit of its own", || {
            let name = clean.container(&format!("{p}sandbox-plain"));
            let out = docker(
                proxy.socket(),
                &["run", "-d", "--name", &name, &e.image, "sleep", "600"],
            );
            assert!(out.ok(), "{}", out.stderr);
            let h = &held(&name)["HostConfig"];
            assert_eq!(
                (&h["Memory"], &h["NanoCpus"], &h["PidsLimit"]),
                (&json!(2 * GIB), &json!(2_000_000_000), &json!(512)),
                "{h}"
            );
            name
        });

        step("limits of its own within the bounds stand", || {
            let name = clean.container(&format!("{p}sandbox-own"));
            let out = docker(
                proxy.socket(),
                &[
                    "create",
                    "--name",
                    &name,
                    "--memory",
                    "1g",
                    "--cpus",
                    "0.5",
                    "--pids-limit",
                    "64",
                    &e.image,
                ],
            );
            assert!(out.ok(), "{}", out.stderr);
            let h = &held(&name)["HostConfig"];
            assert_eq!(
                (&h["Memory"], &h["NanoCpus"], &h["PidsLimit"]),
                (&json!(GIB), &json!(500_000_000), &json!(64)),
                "{h}"
            );
        });

        step(
            "above the bounds, or unlimited, is refused and nothing is made",
            || {
                for (i, (host, why)) in [
                    (json!({ "Memory": 9 * GIB }), "--max-container-memory"),
                    (
                        json!({ "NanoCpus": 5_000_000_000_i64 }),
                        "--max-container-cpus",
                    ),
                    (json!({ "PidsLimit": -1 }), "--max-pids-limit"),
                    (json!({ "MemorySwap": -1 }), "twice --max-container-memory"),
                    (json!({ "CpuQuota": -1 }), "that is no quota at all"),
                ]
                .into_iter()
                .enumerate()
                {
                    let name = clean.container(&format!("{p}sandbox-over{i}"));
                    let body = json!({ "Image": e.image, "HostConfig": host });
                    let r = send(
                        proxy.socket(),
                        "POST",
                        &format!("/containers/create?name={name}"),
                        &body,
                    );
                    refused(&r, 403, why);
                    assert_eq!(
                        inspect(&e, "containers", &format!("{name}/json")).status,
                        404,
                        "{host}"
                    );
                }
            },
        );

        step(
            "an update cannot lift a limit past its bound or off",
            || {
                for body in [
                    json!({ "Memory": 9 * GIB }),
                    json!({ "PidsLimit": -1 }),
                    json!({ "PidsLimit": 0 }),
                    json!({ "CpuQuota": -1 }),
                ] {
                    let r = send(
                        proxy.socket(),
                        "POST",
                        &format!("/containers/{plain}/update"),
                        &body,
                    );
                    refused(&r, 403, "is not allowed for this stack");
                }
                let h = &held(&plain)["HostConfig"];
                assert_eq!(
                    (&h["Memory"], &h["PidsLimit"]),
                    (&json!(2 * GIB), &json!(512)),
                    "{h}"
                );
            },
        );

        if e.is_fake() {
            return;
        }
        step("the sandbox's cgroup holds the defaults", || {
            let out = docker(
                proxy.socket(),
                &[
                    "exec",
                    &plain,
                    "cat",
                    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                    "/sys/fs/cgroup/pids/pids.max",
                    "/sys/fs/cgroup/cpu/cpu.cfs_quota_us",
                ],
            );
            assert!(out.ok(), "{}", out.stderr);
            let lines: Vec<String> = out.out().lines().map(str::to_owned).collect();
            assert_eq!(
                lines,
                [(2 * GIB).to_string(), "512".into(), "200000".into()]
            );
        });
    });
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
