//! Each container's limits (issue 48, point 4): a create that sets none gets the operator's
//! defaults (memory 2g, 2 CPUs, 512 processes), so deer-flow's `docker run` is held to them
//! unchanged; values above the bounds, and "unlimited", are refused at create and at update,
//! each refusal checked on what the engine holds. On the real engine the cgroup says so; the
//! fork bomb these limits hold is in the test binary `isolation`, which runs alone.

use serde_json::json;
use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{each_engine, Cleanup, Fakes};
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
