//! `deploy/systemd/sockproxy@.service` as systemd reads it: `systemd-analyze verify` accepts an
//! instance with no warning (it prints unknown keys and exits 0, so stderr must be empty too), and
//! the unit carries the sandboxing the deploy guide promises. Both units' system call filters
//! let their programs run: each program started as its unit's `ExecStart=` starts it, under
//! strace, and every call it made checked against the filter (`syscalls`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sockproxy_tests::bins;
use sockproxy_tests::engine::TEST_IMAGE;
use sockproxy_tests::fake::{FakeEngine, Flavor};
use sockproxy_tests::raw;
use sockproxy_tests::skip::skip;
use sockproxy_tests::stack::StackProxy;

use crate::syscalls;

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The shipped units, each with its ExecStart pointed at the binary this run built (it must
/// name something real), written into a temporary unit directory.
pub(crate) fn local_units(dir: &Path) {
    for (unit, binary, built) in [
        (
            "sockproxy@.service",
            "/usr/local/bin/sockproxy",
            bins::sockproxy(),
        ),
        (
            "lifecycle-provisioner@.service",
            "/usr/local/bin/lifecycle",
            bins::lifecycle(),
        ),
    ] {
        let text = std::fs::read_to_string(repo().join("deploy/systemd").join(unit)).expect("unit");
        let local = text.replace(binary, &built.display().to_string());
        std::fs::write(dir.join(unit), local).expect("write");
    }
    // The firewall rule set's unit runs the script as shipped.
    let unit = "sockproxy-firewall@.service";
    let text = std::fs::read_to_string(repo().join("deploy/systemd").join(unit)).expect("unit");
    let script = repo().join("deploy/firewall/sockproxy-firewall");
    let local = text.replace(
        "/usr/local/sbin/sockproxy-firewall",
        &script.display().to_string(),
    );
    std::fs::write(dir.join(unit), local).expect("write");
    std::fs::copy(
        repo().join("deploy/systemd/sockproxy@.socket"),
        dir.join("sockproxy@.socket"),
    )
    .expect("socket unit");
}

/// `systemd-analyze verify` of instance `deer-flow` of `template` (from `local_units`): no
/// error and no warning (it prints unknown keys and exits 0, so stderr must be empty too).
/// `false` (after a skip notice for `test`) where systemd-analyze is not installed.
pub(crate) fn verified(test: &str, template: &str) -> bool {
    let have_analyze = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_analyze {
        skip(
            test,
            "systemd-analyze verify: systemd-analyze is not installed",
            "apt-get install systemd, as .ci/run does",
        );
        return false;
    }
    let dir = tempfile::tempdir().expect("dir");
    local_units(dir.path());
    let instance = template.replace("@.", "@deer-flow.");
    std::os::unix::fs::symlink(template, dir.path().join(&instance)).expect("link");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.path().join(&instance))
        .current_dir(dir.path())
        .output()
        .expect("systemd-analyze runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{template}: {stderr}");
    assert_eq!(stderr.trim(), "", "{template}: no warnings");
    true
}

fn unit_lines(unit: &str, want: &[&str]) {
    let text = std::fs::read_to_string(repo().join("deploy/systemd").join(unit)).expect("unit");
    for line in want {
        assert!(text.lines().any(|l| l == *line), "{unit}: {line} missing");
    }
}

#[test]
fn systemd_accepts_the_unit_and_it_is_sandboxed() {
    unit_lines(
        "sockproxy@.service",
        &[
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "PrivateTmp=yes",
            "RestrictAddressFamilies=AF_UNIX",
            "CapabilityBoundingSet=",
            "RuntimeDirectory=sockproxy/%i",
            "EnvironmentFile=/etc/sockproxy/%i.env",
            "Restart=on-failure",
        ],
    );
    if !verified(
        "systemd_accepts_the_unit_and_it_is_sandboxed",
        "sockproxy@.service",
    ) {
        return;
    }
    let env =
        std::fs::read_to_string(repo().join("deploy/systemd/sockproxy.env.example")).expect("env");
    assert!(env.lines().any(|l| l.starts_with("SOCKPROXY_PREFIX=")));
}

/// The socket unit (socket activation) as systemd reads it, beside the service it starts: the
/// same path as the service's `--listen`, and the service keeps its runtime directory (where
/// the socket lives) when it stops.
#[test]
fn systemd_accepts_the_socket_unit_at_the_services_path() {
    unit_lines(
        "sockproxy@.socket",
        &[
            "ListenStream=/run/sockproxy/%i/docker.sock",
            "SocketMode=0660",
            "RemoveOnStop=yes",
        ],
    );
    let service =
        std::fs::read_to_string(repo().join("deploy/systemd/sockproxy@.service")).expect("unit");
    assert!(service.contains("--listen /run/sockproxy/%i/docker.sock"));
    assert!(service.lines().any(|l| l == "RuntimeDirectoryPreserve=yes"));
    verified(
        "systemd_accepts_the_socket_unit_at_the_services_path",
        "sockproxy@.socket",
    );
}

/// The provisioner unit (`lifecycle serve` on TCP for deer-flow) as systemd reads it.
#[test]
fn systemd_accepts_the_provisioner_unit() {
    unit_lines(
        "lifecycle-provisioner@.service",
        &[
            "NoNewPrivileges=yes",
            "LoadCredential=api-key:/etc/lifecycle/%i.key",
            "Environment=LIFECYCLE_DOCKER_HOST=unix:///run/sockproxy/%i/docker.sock",
            "Requires=sockproxy@%i.service",
            "CapabilityBoundingSet=",
        ],
    );
    verified(
        "systemd_accepts_the_provisioner_unit",
        "lifecycle-provisioner@.service",
    );
}

/// The provisioner unit's stop grace covers its shutdown as the unit bounds it (its own
/// `--stop-timeout`, `--max-replicas` and `--shutdown-parallel`), so systemd's SIGKILL never
/// cuts a teardown half way.
#[test]
fn the_provisioner_units_stop_grace_covers_its_bounded_shutdown() {
    let unit =
        std::fs::read_to_string(repo().join("deploy/systemd/lifecycle-provisioner@.service"))
            .expect("unit");
    let env: Vec<(String, String)> = syscalls::unit_values(&unit, "Environment")
        .iter()
        .flat_map(|v| env_file(v))
        .collect();
    let value = |key: &str| -> u64 {
        env.iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("the unit sets {key}"))
    };
    let need = lifecycle::serve::shutdown::stop_grace_secs(
        value("LIFECYCLE_STOP_TIMEOUT"),
        value("LIFECYCLE_MAX_REPLICAS") as usize,
        value("LIFECYCLE_SHUTDOWN_PARALLEL") as usize,
    )
    .expect("the unit caps the replicas");
    let grace: u64 = syscalls::unit_values(&unit, "TimeoutStopSec")
        .first()
        .and_then(|v| v.parse().ok())
        .expect("TimeoutStopSec in seconds");
    assert!(grace >= need, "TimeoutStopSec={grace} < {need}");
}

/// A program started the way a unit's `ExecStart=` starts it, under `strace -f`, with only the
/// environment given (systemd's is as clean); stopped with SIGTERM as `systemctl stop` does.
pub(crate) struct Traced {
    strace: std::process::Child,
    trace: PathBuf,
    log: PathBuf,
}

impl Traced {
    pub(crate) fn start(dir: &Path, argv: &[String], env: &[(String, String)]) -> Self {
        let trace = dir.join("strace.out");
        let log = dir.join("program.log");
        let out = std::fs::File::create(&log).expect("log");
        let strace = Command::new("strace")
            .args(["-f", "-qq", "-o"])
            .arg(&trace)
            .arg("--")
            .args(argv)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("strace starts");
        Self { strace, trace, log }
    }

    /// What the program printed so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until `ready` holds; panics with the program's output if it exits first.
    pub(crate) fn wait_ready(&mut self, what: &str, ready: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready() {
            if let Some(status) = self.strace.try_wait().expect("wait") {
                panic!(
                    "{what} exited ({status}) before it answered: {}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{what} never answered: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM to the traced program (strace's child), then strace's record once it exits.
    pub(crate) fn stop(mut self) -> syscalls::Traced {
        let me = self.strace.id();
        let children = format!("/proc/{me}/task/{me}/children");
        let pid: i32 = std::fs::read_to_string(&children)
            .expect("strace's children")
            .split_whitespace()
            .next()
            .expect("the traced program")
            .parse()
            .expect("a pid");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("SIGTERM");
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.strace.try_wait().expect("wait").is_none() {
            if Instant::now() > deadline {
                let _ = self.strace.kill();
                panic!("still running 60 s after SIGTERM: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        syscalls::read_trace(&self.trace)
    }
}

/// The unit's one `ExecStart=`, `%i` as `deer-flow`, split as systemd splits it, with each
/// `installed` path replaced by the program this run built.
pub(crate) fn exec_start(
    unit: &str,
    installed: &str,
    built: &Path,
    also: &[(&str, String)],
) -> Vec<String> {
    let lines = syscalls::unit_values(unit, "ExecStart");
    assert_eq!(lines.len(), 1, "one ExecStart: {lines:?}");
    let mut line = lines[0].clone();
    for (from, to) in also {
        line = line.replace(from, to);
    }
    let line = line.replace("%i", "deer-flow");
    let words = syscalls::exec_words(&line);
    assert!(
        words.iter().any(|w| w.contains(installed)),
        "{installed} in {words:?}"
    );
    words
        .into_iter()
        .map(|w| w.replace(installed, &built.display().to_string()))
        .collect()
}

/// `KEY=VALUE` lines of an environment file (comments and blank lines left out).
pub(crate) fn env_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// `env` with `key` set to `value` (replaced where it is already set).
pub(crate) fn set(env: &mut Vec<(String, String)>, key: &str, value: String) {
    env.retain(|(k, _)| k != key);
    env.push((key.to_owned(), value));
}

pub(crate) fn assert_allowed(unit_name: &str, unit: &str, trace: &syscalls::Traced) {
    let refused = syscalls::refused(unit, trace);
    assert!(
        refused.is_empty(),
        "{unit_name} would kill its program (SIGSYS) or refuse it: {refused:?} (of {} calls traced: {:?})",
        trace.syscalls.len(),
        trace.syscalls
    );
}

/// Issue 40: sockproxy run as `sockproxy@.service` runs it (its ExecStart, the example
/// environment file with its `SOCKPROXY_SOCKET_GROUP`, a group this user is in) makes no system
/// call the unit's `SystemCallFilter=` lines refuse, from start through requests to SIGTERM.
/// With `~@privileged` alone, `--socket-group`'s chown was refused: SIGSYS at every start.
#[test]
fn the_sockproxy_unit_filter_allows_every_call_sockproxy_makes() {
    let test = "the_sockproxy_unit_filter_allows_every_call_sockproxy_makes";
    if !syscalls::can_trace(test) {
        return;
    }
    let unit =
        std::fs::read_to_string(repo().join("deploy/systemd/sockproxy@.service")).expect("unit");
    let engine = FakeEngine::start(Flavor::Debian2010);
    let dir = tempfile::tempdir().expect("dir");
    // Stands for the unit's RuntimeDirectory, /run/sockproxy/%i.
    let run = dir.path().join("run");
    std::fs::create_dir(&run).expect("run dir");
    let argv = exec_start(
        &unit,
        "/usr/local/bin/sockproxy",
        &bins::sockproxy(),
        &[("/run/sockproxy/%i", run.display().to_string())],
    );
    let example = std::fs::read_to_string(repo().join("deploy/systemd/sockproxy.env.example"))
        .expect("env example");
    let mut env = env_file(&example);
    assert!(
        env.iter().any(|(k, _)| k == "SOCKPROXY_SOCKET_GROUP"),
        "the example sets a socket group"
    );
    let gid = nix::unistd::getegid();
    let group = nix::unistd::Group::from_gid(gid)
        .ok()
        .flatten()
        .map_or_else(|| gid.to_string(), |g| g.name);
    set(&mut env, "SOCKPROXY_SOCKET_GROUP", group);
    set(
        &mut env,
        "SOCKPROXY_UPSTREAM",
        format!("unix://{}", engine.socket().display()),
    );
    let mut p = Traced::start(dir.path(), &argv, &env);
    let sock = run.join("docker.sock");
    p.wait_ready("sockproxy", || {
        raw::get(&sock, "/_ping").is_ok_and(|r| r.status == 200)
    });
    for target in ["/v1.41/containers/json?all=1", "/v1.41/info", "/version"] {
        let r = raw::get(&sock, target).expect("answered");
        assert_eq!(r.status, 200, "{target}: {}", r.text());
    }
    // ExecStart's --state-dir, made in the preserved runtime directory: the log guard's memory.
    assert!(run.join("state").is_dir(), "no state directory");
    let meta = std::fs::metadata(&sock).expect("socket");
    assert_eq!(
        std::os::unix::fs::MetadataExt::gid(&meta),
        gid.as_raw(),
        "the socket's group was set"
    );
    let trace = p.stop();
    assert!(
        trace.syscalls.iter().any(|s| s.contains("chown")),
        "--socket-group's chown was traced: {:?}",
        trace.syscalls
    );
    assert_allowed("sockproxy@.service", &unit, &trace);
}

/// One HTTP/1.1 exchange on TCP: the status and the body.
fn http(addr: &str, request: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.write_all(request.as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    Ok((status, body))
}

/// Issue 40: `lifecycle serve` run as `lifecycle-provisioner@.service` runs it (its ExecStart
/// through `sh -c`, its `Environment=` lines, the API key as a credential, TCP on loopback, in
/// front of a stack's sockproxy and the fake engine) makes no system call the unit's filter
/// refuses and opens no socket of a family it refuses: start, an acquire (create and start on
/// the engine, the ledger and port files), the provisioner API's list, and the shutdown's
/// teardown at SIGTERM.
#[test]
fn the_provisioner_unit_filter_allows_every_call_lifecycle_serve_makes() {
    let test = "the_provisioner_unit_filter_allows_every_call_lifecycle_serve_makes";
    if !syscalls::can_trace(test) {
        return;
    }
    let unit =
        std::fs::read_to_string(repo().join("deploy/systemd/lifecycle-provisioner@.service"))
            .expect("unit");
    let engine = FakeEngine::start(Flavor::Debian2010);
    let stack = StackProxy::start(engine.socket(), "deer-flow-", false);
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("state dir");
    // Stands for $CREDENTIALS_DIRECTORY, where LoadCredential= puts the key.
    let creds = dir.path().join("credentials");
    std::fs::create_dir(&creds).expect("credentials");
    let key = "k".repeat(32);
    std::fs::write(creds.join("api-key"), format!("{key}\n")).expect("key");
    std::fs::set_permissions(
        creds.join("api-key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("key mode");
    let argv = exec_start(&unit, "/usr/local/bin/lifecycle", &bins::lifecycle(), &[]);
    let mut env: Vec<(String, String)> = syscalls::unit_values(&unit, "Environment")
        .iter()
        .flat_map(|v| env_file(&v.replace("%i", "deer-flow")))
        .collect();
    assert!(env.iter().any(|(k, _)| k == "LIFECYCLE_DOCKER_HOST"));
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    for (k, v) in [
        (
            "LIFECYCLE_DOCKER_HOST",
            format!("unix://{}", stack.socket().display()),
        ),
        ("LIFECYCLE_STATE_DIR", state.display().to_string()),
        ("CREDENTIALS_DIRECTORY", creds.display().to_string()),
        // What /etc/lifecycle/%i.env holds (the unit's comment names these).
        ("LIFECYCLE_PREFIX", "deer-flow-".into()),
        ("LIFECYCLE_MODE", "open".into()),
        ("LIFECYCLE_IMAGE", TEST_IMAGE.into()),
        ("LIFECYCLE_LISTEN", format!("tcp://{addr}")),
        ("LIFECYCLE_READY_TIMEOUT", "0".into()),
    ] {
        set(&mut env, k, v);
    }
    let mut p = Traced::start(dir.path(), &argv, &env);
    let get = |path: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nX-API-Key: {key}\r\nConnection: close\r\n\r\n")
    };
    p.wait_ready("lifecycle serve", || {
        http(&addr, &get("/healthz")).is_ok_and(|(s, _)| s == 200)
    });
    let body = r#"{"user_id":"u1","thread_id":"t1","holder":"syscalls"}"#;
    let acquire = format!(
        "POST /v1/acquire HTTP/1.1\r\nHost: x\r\nX-API-Key: {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, answer) = http(&addr, &acquire).expect("acquire");
    assert_eq!(status, 200, "acquire: {answer}");
    let (status, answer) = http(&addr, &get("/api/sandboxes")).expect("list");
    assert_eq!(status, 200, "list: {answer}");
    assert!(answer.contains("\"sandboxes\""), "{answer}");
    let trace = p.stop();
    assert!(
        trace.families.contains("AF_INET") && trace.families.contains("AF_UNIX"),
        "TCP and the engine's socket were traced: {:?}",
        trace.families
    );
    assert_allowed("lifecycle-provisioner@.service", &unit, &trace);
}
