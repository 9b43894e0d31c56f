//! Tables of the limits: defaults filled at create, bounds at create and update, and the
//! stack's totals.

use std::path::Path;

use serde_json::json;

use super::*;
use crate::create_rules::{CreateRules, Disk};
use crate::scope::Scope;

fn prefix() -> Prefix {
    Prefix::parse("deer-flow-").expect("valid")
}

/// The forwarded `HostConfig` limits of a create with `host`, or the refusal.
fn created(host: Value) -> Result<Value, String> {
    crate::create_body::check(
        json!({ "HostConfig": host }),
        &Scope::new(prefix(), false),
        &CreateRules::default(),
        Path::new("/x"),
        &Disk,
        "atlas",
    )
    .map(|o| {
        let h = &o["HostConfig"];
        json!({
            "Memory": h["Memory"], "MemorySwap": h["MemorySwap"], "NanoCpus": h["NanoCpus"],
            "CpuQuota": h["CpuQuota"], "CpuPeriod": h["CpuPeriod"], "PidsLimit": h["PidsLimit"],
        })
    })
    .map_err(|e| e.to_string())
}

#[test]
fn a_create_with_no_limit_gets_the_defaults_and_none_is_unlimited() {
    let (mem, cpu, pids) = (DEFAULT_MEMORY, DEFAULT_NANO_CPUS, DEFAULT_PIDS_LIMIT);
    let full = |m: Value, s: Value, n: Value, q: Value, p: Value, pl: Value| json!({ "Memory": m, "MemorySwap": s, "NanoCpus": n, "CpuQuota": q, "CpuPeriod": p, "PidsLimit": pl });
    let n = Value::Null;
    let rows: Vec<(Value, Result<Value, String>)> = vec![
        // The docker CLI's `docker run` with no limit: zeros.
        (
            json!({ "Memory": 0, "NanoCpus": 0, "CpuQuota": 0, "CpuPeriod": 0, "PidsLimit": 0, "MemorySwap": 0 }),
            Ok(full(mem.into(), 0.into(), cpu.into(), 0.into(), 0.into(), pids.into())),
        ),
        (
            json!({}),
            Ok(full(mem.into(), n.clone(), cpu.into(), n.clone(), n.clone(), pids.into())),
        ),
        // `null` is Go's "not set" too.
        (
            json!({ "Memory": null, "NanoCpus": null, "PidsLimit": null }),
            Ok(full(mem.into(), n.clone(), cpu.into(), n.clone(), n.clone(), pids.into())),
        ),
        // The stack's own limits within the bounds stand.
        (
            json!({ "Memory": 1 << 30, "NanoCpus": 500_000_000, "PidsLimit": 64 }),
            Ok(full((1 << 30).into(), n.clone(), 500_000_000.into(), n.clone(), n.clone(), 64.into())),
        ),
        // A quota is a CPU limit: no NanoCpus is added beside it.
        (
            json!({ "CpuQuota": 50_000, "CpuPeriod": 100_000 }),
            Ok(full(mem.into(), n.clone(), n.clone(), 50_000.into(), 100_000.into(), pids.into())),
        ),
        (
            json!({ "Memory": -1 }),
            Err("sockproxy: containers.create: HostConfig.Memory -1 is not allowed for this stack (allowed: 0..=8589934592; --max-container-memory)".into()),
        ),
        (
            json!({ "Memory": (8_i64 << 30) + 1 }),
            Err("sockproxy: containers.create: HostConfig.Memory 8589934593 is not allowed for this stack (allowed: 0..=8589934592; --max-container-memory)".into()),
        ),
        (
            json!({ "MemorySwap": -1 }),
            Err("sockproxy: containers.create: HostConfig.MemorySwap -1 is not allowed for this stack (allowed: 0..=17179869184; twice --max-container-memory)".into()),
        ),
        (
            json!({ "NanoCpus": 5_000_000_000_i64 }),
            Err("sockproxy: containers.create: HostConfig.NanoCpus 5000000000 is not allowed for this stack (allowed: 0..=4000000000; --max-container-cpus)".into()),
        ),
        (
            json!({ "CpuQuota": -1 }),
            Err("sockproxy: containers.create: HostConfig.CpuQuota -1 is not allowed for this stack (that is no quota at all)".into()),
        ),
        (
            json!({ "CpuQuota": 500_000, "CpuPeriod": 100_000 }),
            Err("sockproxy: containers.create: HostConfig.CpuQuota 500000 over a period of 100000 is not allowed for this stack (at most 4; --max-container-cpus)".into()),
        ),
        // A period alone sets no limit.
        (
            json!({ "CpuPeriod": 100_000 }),
            Err("sockproxy: containers.create: HostConfig.CpuPeriod without a CpuQuota is not allowed for this stack (it sets no CPU limit, or scales the one the container has)".into()),
        ),
        (
            json!({ "PidsLimit": -1 }),
            Err("sockproxy: containers.create: HostConfig.PidsLimit -1 is not allowed for this stack (allowed: 0..=32768; --max-pids-limit)".into()),
        ),
    ];
    for (host, want) in rows {
        assert_eq!(created(host.clone()), want, "{host}");
    }
}

#[test]
fn an_update_changes_limits_within_the_bounds_and_never_to_unlimited() {
    let spend = Spend::default();
    let update =
        |body: Value| crate::write_rules::update(body, None, &spend).map_err(|e| e.to_string());
    // 0 leaves a limit as it is: nothing is filled in.
    assert_eq!(update(json!({ "Memory": 0 })), Ok(json!({ "Memory": 0 })));
    assert_eq!(
        update(json!({ "Memory": 1 << 30, "NanoCpus": 1_000_000_000 })),
        Ok(json!({ "Memory": 1 << 30, "NanoCpus": 1_000_000_000 }))
    );
    for (body, why) in [
        (json!({ "Memory": -1 }), "Memory -1 is not allowed for this stack (allowed: 0..=8589934592; --max-container-memory)"),
        (json!({ "CpuQuota": -1 }), "CpuQuota -1 is not allowed for this stack (that is no quota at all)"),
        (json!({ "CpuPeriod": 1000 }), "HostConfig.CpuPeriod without a CpuQuota is not allowed for this stack (it sets no CPU limit, or scales the one the container has)"),
        (json!({ "MemorySwap": -1 }), "MemorySwap -1 is not allowed for this stack (allowed: 0..=17179869184; twice --max-container-memory)"),
    ] {
        assert_eq!(
            update(body.clone()),
            Err(format!("sockproxy: containers.update: {why}")),
            "{body}"
        );
    }
}

fn usage(name: &str, memory: i64) -> Usage {
    Usage {
        id: name.repeat(2),
        name: format!("/{name}"),
        memory,
    }
}

#[test]
fn totals_count_the_stack_families_in_any_state_with_defaults_for_no_limit() {
    let l = Limits {
        max_containers: 3,
        max_memory: 6 << 30,
        ..Limits::default()
    };
    let total = |u: &[Usage], adds| totals("containers.create", &l, &prefix(), u, adds);
    let two = [
        usage("deer-flow-sandbox-a", 2 << 30),
        // A sidecar counts; one made past the proxy with no limit counts as the default.
        usage("deer-flow-netproxy-a", 0),
        // Not one of the stack's families (made by hand under the prefix): not counted.
        usage("deer-flow-other", 1 << 40),
    ];
    assert_eq!(total(&two, Adds::Container { memory: 2 << 30 }), Ok(()));
    assert_eq!(
        total(&two, Adds::Container { memory: (2 << 30) + 1 }).map_err(|e| e.to_string()),
        Err("sockproxy: containers.create: this stack's containers would hold 6442450945 bytes of memory limits in all, more than it may (--max-memory 6442450944)".into())
    );
    let three = [
        usage("deer-flow-sandbox-a", 1),
        usage("deer-flow-sandbox-b", 1),
        usage("deer-flow-sandbox-c", 1),
    ];
    let over = total(&three, Adds::Container { memory: 1 }).expect_err("refused");
    assert_eq!(
        over.to_string(),
        "sockproxy: containers.create: this stack has 3 containers, the most it may have (--max-containers 3)"
    );
    assert_eq!(over.status(), http::StatusCode::FORBIDDEN);
    assert_eq!(over.reason(), "stack_total");
    // An update counts the container's new limit in place of its own.
    let id = three[0].id.clone();
    assert_eq!(
        total(
            &three,
            Adds::Memory {
                id: &id,
                memory: (6 << 30) - 2
            }
        ),
        Ok(())
    );
    assert!(total(
        &three,
        Adds::Memory {
            id: &id,
            memory: (6 << 30) - 1
        }
    )
    .is_err());
}

#[test]
fn cpus_are_shown_as_docker_takes_them() {
    assert_eq!(cpus(2_000_000_000), "2");
    assert_eq!(cpus(1_500_000_000), "1.5");
    assert_eq!(cpus(10_000_000), "0.01");
}
