//! Well-behaved traffic, second half: deer-flow's local-backend docker CLI sequence
//! (`LocalContainerBackend`: `docker run --rm -d --name … -p 127.0.0.1:PORT:8080`, `ps --filter
//! name=…`, `inspect -f {{.State.Running}}`, `stop`, `rm -f`), replayed once a round with the real
//! docker CLI (`--docker-cli`, Debian's 20.10 by default) against the stack's own proxy socket.
//! Names are the stack's (`{P}sandbox-cli-…`); each command is timed into the latency log as a
//! call kind of its own. Upstream's `--security-opt seccomp=unconfined` is left out: these
//! stacks' proxies refuse it (the hostile tenant's creates count on that). Whatever a round
//! leaves (a failed stop, a proxy killed mid-round) is removed at the start of the next one and
//! by the teardown, whose leak check sees the engine after both.

use std::path::Path;
use std::time::{Duration, Instant};

use sockproxy_tests::cli::{docker_with, CliOutput};
use sockproxy_tests::engine::TEST_IMAGE;
use sockproxy_tests::provisioner::SERVING_CMD;

use crate::measure::{Log, Op, Phase};
use crate::procs::free_port;
use crate::stacks::Stack;

/// Bound on each CLI command (a `stop` waits at most its `-t` seconds).
const CLI_LIMIT: Duration = Duration::from_secs(60);

/// One CLI command against the stack's proxy.
fn docker(cli: &Path, s: &Stack, args: &[&str]) -> CliOutput {
    docker_with(cli, &s.socket(), args, None, CLI_LIMIT)
}

/// One replay of the sequence for round `round` of `phase`; each step timed and logged. A
/// failed `run` ends the round (after removing whatever it left).
pub fn round(cli: &Path, s: &Stack, log: &Log, phase: Phase, round: u64) {
    let name = format!("{}sandbox-cli-{}", s.prefix, round % 4);
    // A round cut short (a proxy killed under it) may have left its container.
    let _ = docker(cli, s, &["rm", "-f", &name]);
    let Ok(port) = free_port() else {
        return;
    };
    let publish = format!("127.0.0.1:{port}:8080");
    let label = format!("deerflow.sandbox_id=cli-{round}");
    let t = Instant::now();
    let run = docker(
        cli,
        s,
        &[
            "run",
            "--rm",
            "-d",
            "--name",
            &name,
            "-p",
            &publish,
            "--label",
            &label,
            "--label",
            "deerflow.role=sandbox",
            "-e",
            "TZ=UTC",
            TEST_IMAGE,
            "sh",
            "-c",
            SERVING_CMD,
        ],
    );
    log.record(phase, Op::CliRun, s.k, t, run.ok());
    if !run.ok() {
        let _ = docker(cli, s, &["rm", "-f", &name]);
        return;
    }
    let t = Instant::now();
    let filter = format!("name={name}");
    let ps = docker(
        cli,
        s,
        &["ps", "--filter", &filter, "--format", "{{.Names}}"],
    );
    log.record(
        phase,
        Op::CliPs,
        s.k,
        t,
        ps.ok() && ps.out().lines().any(|l| l.trim() == name),
    );
    let t = Instant::now();
    let alive = docker(cli, s, &["inspect", "-f", "{{.State.Running}}", &name]);
    log.record(
        phase,
        Op::CliInspect,
        s.k,
        t,
        alive.ok() && alive.out().trim() == "true",
    );
    // httpd as PID 1 ignores SIGTERM: a short grace instead of upstream's 10 s default.
    let t = Instant::now();
    let stop = docker(cli, s, &["stop", "-t", "1", &name]);
    log.record(phase, Op::CliStop, s.k, t, stop.ok());
    // `--rm` removes it once stopped, a moment later (upstream's `rm -f` after a stop may meet
    // that removal in progress): wait until it is gone, then `rm -f`, which answers 0 for a
    // container already gone.
    gone(s, &name);
    let t = Instant::now();
    let rm = docker(cli, s, &["rm", "-f", &name]);
    log.record(phase, Op::CliRm, s.k, t, rm.ok());
}

/// Waits (up to 10 s) until the proxy answers 404 for `name`.
fn gone(s: &Stack, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let r = sockproxy_tests::raw::get(&s.socket(), &format!("/containers/{name}/json"));
        if r.is_ok_and(|r| r.status == 404) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
