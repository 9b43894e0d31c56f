//! The spending rules, as tables: each row a create body (or a query) and the exact decision,
//! with the default bounds and with the operator's own.

use std::path::Path;

use serde_json::json;

use super::*;
use crate::canon::Query;
use crate::create_body::check;
use crate::create_rules::{CreateRules, Disk};
use crate::scope::{Prefix, Scope};

/// A create body checked against `rules` (prefix `deer-flow-`): "allow" or the refusal's text;
/// `spend_host`'s tables use it too.
pub(crate) fn decide_with(rules: &CreateRules, body: Value) -> String {
    let scope = Scope::new(Prefix::parse("deer-flow-").expect("valid"), false);
    match check(
        body,
        &scope,
        rules,
        Path::new("/run/docker.sock"),
        &Disk,
        "s",
    ) {
        Ok(_) => "allow".into(),
        Err(r) => r.to_string(),
    }
}

/// `decide_with` the default rules.
pub(crate) fn decide(body: Value) -> String {
    decide_with(&CreateRules::default(), body)
}

const S: i64 = 1_000_000_000;

#[test]
fn healthchecks_run_no_more_often_than_the_operator_allows() {
    let hc = |h: Value| decide(json!({ "Image": "img", "Healthcheck": h }));
    let rows = [
        (json!({ "Test": ["CMD", "true"], "Interval": 30 * S, "Timeout": 5 * S, "StartPeriod": 0, "Retries": 3 }), "allow".to_owned()),
        (json!({ "Test": ["NONE"] }), "allow".into()),
        (json!({ "Interval": 0, "Timeout": 0, "StartPeriod": 0, "StartInterval": 0, "Retries": 0 }), "allow".into()),
        (json!({ "Interval": S, "StartInterval": S }), "allow".into()),
        (json!({ "Interval": null }), "allow".into()),
        (
            json!({ "Interval": 1_000_000 }),
            "sockproxy: containers.create: Healthcheck.Interval 1ms is not allowed for this stack (0 or at least 1s; --min-healthcheck-interval)".into(),
        ),
        (
            json!({ "interval": S - 1 }),
            "sockproxy: containers.create: Healthcheck.Interval 999999999ns is not allowed for this stack (0 or at least 1s; --min-healthcheck-interval)".into(),
        ),
        (
            json!({ "Timeout": 1 }),
            "sockproxy: containers.create: Healthcheck.Timeout 1ns is not allowed for this stack (0 or at least 1s; --min-healthcheck-interval)".into(),
        ),
        (
            json!({ "StartPeriod": 500_000_000 }),
            "sockproxy: containers.create: Healthcheck.StartPeriod 500ms is not allowed for this stack (0 or at least 1s; --min-healthcheck-interval)".into(),
        ),
        (
            json!({ "StartInterval": 1_000_000 }),
            "sockproxy: containers.create: Healthcheck.StartInterval 1ms is not allowed for this stack (0 or at least 1s; --min-healthcheck-interval)".into(),
        ),
        (
            json!({ "Interval": -1 }),
            "sockproxy: containers.create: Healthcheck.Interval -1ns is not allowed for this stack (0 or at least 1s; --min-healthcheck-interval)".into(),
        ),
        (
            json!({ "Retries": 101 }),
            "sockproxy: containers.create: Healthcheck.Retries 101 is not allowed for this stack (allowed: 0..=100; --max-healthcheck-retries)".into(),
        ),
        (
            json!({ "Retries": -1 }),
            "sockproxy: containers.create: Healthcheck.Retries -1 is not allowed for this stack (allowed: 0..=100; --max-healthcheck-retries)".into(),
        ),
        (
            json!({ "Interval": 1.5e9 }),
            "sockproxy: bad request: Healthcheck.Interval must be an integer".into(),
        ),
    ];
    for (h, want) in rows {
        assert_eq!(hc(h.clone()), want, "{h}");
    }
    // The operator's own minimum.
    let rules = CreateRules {
        spend: Spend {
            min_healthcheck_interval_ns: 10 * S,
            max_healthcheck_retries: 3,
            ..Spend::default()
        },
        ..CreateRules::default()
    };
    let hc = |h: Value| decide_with(&rules, json!({ "Healthcheck": h }));
    assert_eq!(hc(json!({ "Interval": 10 * S, "Retries": 3 })), "allow");
    assert_eq!(
        hc(json!({ "Interval": 5 * S })),
        "sockproxy: containers.create: Healthcheck.Interval 5s is not allowed for this stack (0 or at least 10s; --min-healthcheck-interval)"
    );
    assert!(hc(json!({ "Retries": 4 })).contains("Retries 4"));
}

#[test]
fn stops_end_in_bounded_time_with_a_signal_that_ends_the_process() {
    let rows = [
        (json!({ "StopTimeout": 10 }), "allow".to_owned()),
        (json!({ "StopTimeout": 0 }), "allow".into()),
        (json!({ "StopTimeout": 300 }), "allow".into()),
        (json!({ "StopTimeout": null }), "allow".into()),
        (
            json!({ "StopTimeout": -1 }),
            "sockproxy: containers.create: StopTimeout -1 is not allowed for this stack (allowed: 0..=300; --max-stop-timeout)".into(),
        ),
        (
            json!({ "stoptimeout": 301 }),
            "sockproxy: containers.create: StopTimeout 301 is not allowed for this stack (allowed: 0..=300; --max-stop-timeout)".into(),
        ),
        (json!({ "StopSignal": "" }), "allow".into()),
        (json!({ "StopSignal": "SIGTERM" }), "allow".into()),
        (json!({ "StopSignal": "term" }), "allow".into()),
        (json!({ "StopSignal": "SigInt" }), "allow".into()),
        (json!({ "StopSignal": "9" }), "allow".into()),
        (json!({ "StopSignal": "SIGKILL" }), "allow".into()),
        (json!({ "StopSignal": "QUIT" }), "allow".into()),
        (json!({ "StopSignal": "SIGUSR1" }), "allow".into()),
        (json!({ "StopSignal": "SIGHUP" }), "allow".into()),
        (json!({ "StopSignal": "SIGABRT" }), "allow".into()),
    ];
    for (b, want) in rows {
        assert_eq!(decide(b.clone()), want, "{b}");
    }
    for refused in [
        "SIGCONT",
        "cont",
        "18",
        "SIGSTOP",
        "19",
        "SIGTSTP",
        "SIGCHLD",
        "17",
        "SIGWINCH",
        "SIGURG",
        "SIGTTIN",
        "SIGTTOU",
        "0",
        "-15",
        "+15",
        "99",
        "RTMIN+3",
        "SIGSIGTERM",
        "TERM ",
    ] {
        let got = decide(json!({ "StopSignal": refused }));
        assert_eq!(
            got,
            format!("sockproxy: containers.create: StopSignal {refused} is not allowed for this stack (a stop signal must end the process: HUP, INT, QUIT, ABRT, KILL, USR1, USR2, PIPE, ALRM, TERM, XCPU, VTALRM)"),
        );
    }
    let rules = CreateRules {
        spend: Spend {
            max_stop_timeout: 30,
            ..Spend::default()
        },
        ..CreateRules::default()
    };
    assert_eq!(decide_with(&rules, json!({ "StopTimeout": 30 })), "allow");
    assert!(decide_with(&rules, json!({ "StopTimeout": 31 })).contains("allowed: 0..=30"));
}

#[test]
fn stop_and_restart_queries_are_bounded_too() {
    let q = |raw: &str| Query::parse(Some(raw)).expect("query");
    let spend = Spend::default();
    let check = |raw: &str| {
        stop_query(&spend, "containers.stop", &q(raw))
            .map_err(|r| r.to_string())
            .err()
            .unwrap_or_else(|| "allow".into())
    };
    assert_eq!(check(""), "allow");
    assert_eq!(check("t=10"), "allow");
    assert_eq!(check("t=0"), "allow");
    assert_eq!(check("t=300"), "allow");
    assert_eq!(check("t="), "allow");
    assert_eq!(check("signal=SIGTERM&t=5"), "allow");
    assert_eq!(
        check("t=-1"),
        "sockproxy: containers.stop: query parameter t -1 is not allowed for this stack (allowed: 0..=300; --max-stop-timeout)"
    );
    assert_eq!(
        check("t=301"),
        "sockproxy: containers.stop: query parameter t 301 is not allowed for this stack (allowed: 0..=300; --max-stop-timeout)"
    );
    assert_eq!(
        check("t=abc"),
        "sockproxy: bad request: containers.stop: query parameter t \"abc\" is not a number of seconds"
    );
    assert!(check("signal=SIGCONT").contains("query parameter signal SIGCONT is not allowed"));
    // Only stop and restart: kill's signal is what the client asks the process to get.
    use crate::api::ContainerOp;
    use crate::reference::ObjRef;
    let plan = |op| crate::policy::Route::Container {
        op,
        target: ObjRef::Name("deer-flow-sandbox-a".into()),
        access: crate::scope::Access::Change,
    };
    assert_eq!(
        plan_query(
            &spend,
            &plan(ContainerOp::Restart),
            "containers.restart",
            &q("t=-1")
        )
        .map_err(|e| e.to_string()),
        Err("sockproxy: containers.restart: query parameter t -1 is not allowed for this stack (allowed: 0..=300; --max-stop-timeout)".into())
    );
    assert_eq!(
        plan_query(
            &spend,
            &plan(ContainerOp::Stop),
            "containers.stop",
            &q("t=301")
        )
        .map_err(|e| e.to_string()),
        Err("sockproxy: containers.stop: query parameter t 301 is not allowed for this stack (allowed: 0..=300; --max-stop-timeout)".into())
    );
    assert_eq!(
        plan_query(
            &spend,
            &plan(ContainerOp::Kill),
            "containers.kill",
            &q("signal=SIGSTOP")
        ),
        Ok(())
    );
}

#[test]
fn port_bindings_are_few_and_above_the_host_services() {
    let pb = |ports: Value| decide(json!({ "HostConfig": { "PortBindings": ports } }));
    let lo = |port: &str| json!([{ "HostIp": "127.0.0.1", "HostPort": port }]);
    assert_eq!(pb(json!({ "8080/tcp": lo("40001") })), "allow");
    assert_eq!(
        pb(json!({ "8080/tcp": lo("") })),
        "allow",
        "the engine picks"
    );
    assert_eq!(
        pb(json!({ "8080/tcp": lo("0") })),
        "allow",
        "the engine picks"
    );
    assert_eq!(pb(json!({ "8080/tcp": lo("1024") })), "allow");
    assert_eq!(pb(json!({ "8080/tcp": lo("40000-40010") })), "allow");
    assert_eq!(pb(json!({ "8080/tcp": null })), "allow");
    assert_eq!(
        pb(json!({ "80/tcp": lo("80") })),
        "sockproxy: containers.create: HostConfig.PortBindings.80/tcp.HostPort 80 is not allowed for this stack (host ports below 1024 only when named; --min-host-port, --allow-host-port)"
    );
    assert!(pb(json!({ "80/tcp": lo("1023") })).contains("HostPort 1023 is not allowed"));
    assert!(pb(json!({ "80/tcp": lo("22-2000") })).contains("HostPort 22-2000 is not allowed"));
    assert_eq!(
        pb(json!({ "80/tcp": lo("http") })),
        "sockproxy: bad request: HostConfig.PortBindings.80/tcp: HostPort \"http\" is not a port or a port range"
    );
    let four = json!({
        "1/tcp": lo("40001"), "2/tcp": lo("40002"),
        "3/tcp": [{ "HostIp": "127.0.0.1", "HostPort": "40003" }, { "HostIp": "::1", "HostPort": "40003" }],
    });
    assert_eq!(pb(four), "allow");
    let five = json!({
        "1/tcp": lo("40001"), "2/tcp": lo("40002"), "3/tcp": lo("40003"),
        "4/udp": [{ "HostIp": "127.0.0.1", "HostPort": "" }, { "HostIp": "::1", "HostPort": "" }],
    });
    assert_eq!(
        pb(five),
        "sockproxy: containers.create: HostConfig.PortBindings publishes 5 host ports, more than this stack may (at most 4; --max-port-bindings)"
    );
    // 300 bindings in one body, as the finding sent them.
    let many: Map<String, Value> = (0..300)
        .map(|i| (format!("{}/tcp", 1000 + i), lo(&(40000 + i).to_string())))
        .collect();
    assert!(pb(Value::Object(many)).contains("publishes 300 host ports"));
    // The operator's own bounds.
    let rules = CreateRules {
        spend: Spend {
            max_port_bindings: 1,
            allow_host_ports: vec![80],
            ..Spend::default()
        },
        ..CreateRules::default()
    };
    let pb = |ports: Value| decide_with(&rules, json!({ "HostConfig": { "PortBindings": ports } }));
    assert_eq!(pb(json!({ "80/tcp": lo("80") })), "allow");
    assert!(pb(json!({ "80/tcp": lo("81") })).contains("HostPort 81 is not allowed"));
    assert!(pb(json!({ "1/tcp": lo("40001"), "2/tcp": lo("40002") })).contains("at most 1"));
    // The legacy top-level shape is read the same way.
    assert!(
        decide(json!({ "Image": "img", "PortBindings": { "80/tcp": lo("80") } }))
            .contains("HostPort 80 is not allowed")
    );
}

#[test]
fn durations_read_as_go_writes_them() {
    assert_eq!(parse_duration("1s"), Ok(S));
    assert_eq!(parse_duration("2"), Ok(2 * S));
    assert_eq!(parse_duration("500ms"), Ok(S / 2));
    assert_eq!(parse_duration("1m30s"), Ok(90 * S));
    assert_eq!(parse_duration("1h"), Ok(3600 * S));
    for bad in ["", "1x", "s", "99999999999h"] {
        assert_eq!(
            parse_duration(bad),
            Err(format!(
                "{bad:?}: expected a duration such as 1s, 500ms or 2m"
            )),
            "{bad:?}"
        );
    }
    for ns in [0, 1, 1_000, S / 2, S, 90 * S] {
        assert_eq!(parse_duration(&show_duration(ns)), Ok(ns), "{ns}");
    }
}

/// A range is one binding, but the engine may take any free port of it: every port of it below
/// `--min-host-port` must be named, not only its low end.
#[test]
fn a_range_below_the_floor_needs_every_port_named() {
    let spend = Spend {
        allow_host_ports: vec![80, 81],
        ..Spend::default()
    };
    let check = |port: &str| {
        let out = json!({ "80/tcp": [{ "HostIp": "127.0.0.1", "HostPort": port }] });
        port_bindings(
            &spend,
            "containers.create",
            "HostConfig.PortBindings",
            out.as_object().expect("map"),
        )
        .map_err(|r| r.to_string())
    };
    assert_eq!(check("80"), Ok(()));
    assert_eq!(check("80-81"), Ok(()), "both named");
    assert_eq!(check("1024-2000"), Ok(()), "above the floor");
    for bad in ["80-82", "80-1100", "79-81", "1023-1024"] {
        let e = check(bad).expect_err("refused");
        assert!(
            e.contains(&format!("HostPort {bad} is not allowed")),
            "{bad}: {e}"
        );
    }
}
