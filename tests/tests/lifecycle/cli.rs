//! The `lifecycle` command as an operator runs it, against the fake engine behind sockproxy:
//! JSON output, the skip line logged once verbatim, records that survive a restart, only the
//! given address used, and bad input answered with one line, exit 1 or 2, and no change on
//! disk or in the engine.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sockproxy_tests::bins;
use sockproxy_tests::bounded::{OutputWithin, LONG, SHORT};
use sockproxy_tests::engine::{Engine, TEST_IMAGE};
use sockproxy_tests::fake::Flavor;
use sockproxy_tests::lc::{lifecycle_command, LcStack};
use sockproxy_tests::step::step;

fn lifecycle(docker_host: &Path, prefix: &str, mode: &str, state: &Path, args: &[&str]) -> Output {
    lifecycle_command(docker_host, prefix, mode, state)
        .args(["--sandbox-cmd", "sleep 600", "--ready-timeout", "0"])
        .args(args)
        .output_within(LONG)
        .expect("lifecycle runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn create_prints_one_json_object_and_retire_logs_the_skip_once() {
    let s = LcStack::new(false);
    let sock = s.proxy.socket_buf();
    let state = s.state_dir();
    let (id, port) = step("create prints one JSON object", || {
        let out = lifecycle(
            &sock,
            &s.prefix,
            "open",
            &state,
            &["create", "--user", "user-1", "--thread", "t1"],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let created = json_lines(&out);
        assert_eq!(created.len(), 1);
        let c = &created[0];
        let id = s.id("t1");
        assert_eq!(c["sandbox_id"], id.as_str());
        assert_eq!(c["container_name"], s.names(&id).sandbox.as_str());
        assert_eq!(c["mode"], "open");
        let port = c["host_port"].as_u64().expect("a host port");
        assert_eq!(c["url"], format!("http://127.0.0.1:{port}").as_str());
        assert_eq!(c["container_id"].as_str().map(str::len), Some(64));
        (id, port)
    });

    step("ls lists it running", || {
        let ls = lifecycle(&sock, &s.prefix, "open", &state, &["ls"]);
        let listed = json_lines(&ls);
        assert_eq!(listed.len(), 1, "{}", stderr(&ls));
        assert_eq!(listed[0]["sandbox_id"], id.as_str());
        assert_eq!(listed[0]["state"], "running");
        assert_eq!(listed[0]["mode"], "open");
    });

    // Quarantine it in one process, see it from another (the ledger survives a restart).
    step("a mark by one process is seen by another", || {
        let mark = lifecycle(
            &sock,
            &s.prefix,
            "open",
            &state,
            &["quarantine", "mark", &id],
        );
        assert!(mark.status.success(), "{}", stderr(&mark));
        let ls = lifecycle(&sock, &s.prefix, "open", &state, &["quarantine", "ls"]);
        let entries = json_lines(&ls);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["sandbox_id"], id.as_str());
    });

    // While the container is present, retire keeps the record.
    step(
        "retire keeps the record while the container is there",
        || {
            let kept = lifecycle(&sock, &s.prefix, "open", &state, &["retire"]);
            assert!(kept.status.success(), "{}", stderr(&kept));
            assert_eq!(json_lines(&kept)[0]["result"], "kept");
        },
    );

    step(
        "retire retires it once the container is gone, logging the skip once",
        || {
            let rm = sockproxy_tests::raw::request(
                &s.engine.socket,
                "DELETE",
                &format!("/containers/{}?force=1", s.names(&id).sandbox),
                None,
            )
            .expect("rm");
            assert_eq!(rm.status, 204);
            let retired = lifecycle(&sock, &s.prefix, "open", &state, &["retire"]);
            assert!(retired.status.success(), "{}", stderr(&retired));
            let line = &json_lines(&retired)[0];
            assert_eq!(line["result"], "retired");
            assert_eq!(line["strict"], false);
            assert_eq!(line["ports_released"], serde_json::json!([port]));
            let skip = format!(
        "Retiring open-mode sandbox {id} without restricted cleanup: no network proxy {} is listed.",
        s.names(&id).sidecar
    );
            assert_eq!(
                stderr(&retired).matches(&skip).count(),
                1,
                "{}",
                stderr(&retired)
            );
            assert_eq!(s.proxy.decisions().1, 0, "no call was refused");
            assert!(json_lines(&lifecycle(
                &sock,
                &s.prefix,
                "open",
                &state,
                &["quarantine", "ls"]
            ))
            .is_empty());
        },
    );
}

#[test]
fn a_restricted_process_defers_with_exit_3_and_the_refusal() {
    let s = LcStack::new(false);
    let sock = s.proxy.socket_buf();
    let state = s.state_dir();
    let id = s.id("t2");
    s.ledger().mark(&id, "unknown").expect("mark");
    let out = lifecycle(
        &sock,
        &s.prefix,
        "restricted",
        &state,
        &["create", "--user", "user-1", "--thread", "t2"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // No sidecar exists (its inspect answers 404), so the first step the proxy refuses is
    // the removal of the sandbox's network.
    let refusal = "sockproxy: networks.remove: not allowed for this stack";
    assert!(stderr(&out).contains(refusal), "{}", stderr(&out));
    assert!(s.ledger().is_quarantined(&id).expect("read"));
    let retire = lifecycle(&sock, &s.prefix, "restricted", &state, &["retire"]);
    assert_eq!(retire.status.code(), Some(3));
    assert_eq!(json_lines(&retire)[0]["result"], "deferred");
}

#[test]
fn only_the_given_address_is_used() {
    let s = LcStack::new(false);
    let elsewhere = Engine::start_fake(Flavor::Debian2010);
    let out = Command::new(bins::lifecycle())
        .arg("--docker-host")
        .arg(format!("unix://{}", s.proxy.socket().display()))
        .args(["--prefix", &s.prefix, "--mode", "open", "--state-dir"])
        .arg(s.state_dir())
        .args([
            "--image",
            TEST_IMAGE,
            "--ready-timeout",
            "0",
            "create",
            "--user",
            "u",
            "--thread",
            "t",
        ])
        .env(
            "DOCKER_HOST",
            format!("unix://{}", elsewhere.socket.display()),
        )
        .output_within(LONG)
        .expect("runs");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        elsewhere.fake.as_ref().expect("fake").requests().is_empty(),
        "DOCKER_HOST was not used"
    );
    assert!(
        s.asked()
            .iter()
            .any(|l| l.starts_with("POST /containers/create")),
        "the given address was"
    );
}

/// (what, --docker-host, --state-dir, arguments, exit code, what stderr says)
type Case<'a> = (&'a str, PathBuf, PathBuf, Vec<&'a str>, i32, &'a str);

#[test]
fn bad_input_gets_one_line_and_changes_nothing() {
    let s = LcStack::new(false);
    let sock = s.proxy.socket_buf();
    let fresh = |name: &str| s.state_dir().join(name);
    let blocker = s.state_dir().join("a-file");
    std::fs::write(&blocker, b"x").expect("write");
    let missing_sock = s.state_dir().join("nothing.sock");
    let long_thread = "t".repeat(65);
    let cases: Vec<Case> = vec![
        (
            "empty user",
            sock.clone(),
            fresh("s1"),
            vec!["create", "--user", "", "--thread", "t"],
            2,
            "user ID must not be empty",
        ),
        (
            "newline in thread",
            sock.clone(),
            fresh("s2"),
            vec!["create", "--user", "u", "--thread", "a\nb"],
            2,
            "thread ID must not contain a newline",
        ),
        (
            "colon in user (two tenants would hash alike)",
            sock.clone(),
            fresh("s2a"),
            vec!["create", "--user", "org1:bob", "--thread", "t1"],
            2,
            "user ID may contain only A-Z, a-z, 0-9, '_' and '-' (found ':')",
        ),
        (
            "thread over 64 characters",
            sock.clone(),
            fresh("s2b"),
            vec!["create", "--user", "u", "--thread", &long_thread],
            2,
            "thread ID must be at most 64 characters (got 65)",
        ),
        (
            "malformed sandbox ID",
            sock.clone(),
            fresh("s3"),
            vec!["destroy", "not-an-id"],
            2,
            "is not a sandbox ID",
        ),
        (
            "malformed ID to mark",
            sock.clone(),
            fresh("s4"),
            vec!["quarantine", "mark", "XYZ"],
            2,
            "is not a sandbox ID",
        ),
        (
            "unknown sandbox",
            sock.clone(),
            fresh("s5"),
            vec!["destroy", "0123456789abcdef"],
            1,
            "no sandbox 0123456789abcdef",
        ),
        (
            "unwritable state dir",
            sock.clone(),
            blocker.join("state"),
            vec!["create", "--user", "u", "--thread", "t"],
            1,
            "Not a directory",
        ),
        (
            "unreachable socket",
            missing_sock,
            fresh("s6"),
            vec!["create", "--user", "u", "--thread", "t"],
            1,
            "nothing.sock",
        ),
    ];
    step("each bad input: one line, its exit code, no change", || {
        for (what, docker_host, state, args, code, says) in cases {
            s.fake().clear_requests();
            let out = lifecycle(&docker_host, &s.prefix, "open", &state, &args);
            assert_eq!(out.status.code(), Some(code), "{what}: {}", stderr(&out));
            let err = stderr(&out);
            assert_eq!(err.trim_end().lines().count(), 1, "{what}: one line: {err}");
            assert!(err.contains(says), "{what}: {err}");
            // Only a lock file may be made (an operation on a sandbox ID takes its lock first).
            for kept in ["sandbox-quarantine", "ports"] {
                assert!(!state.join(kept).exists(), "{what}: nothing in {kept}");
            }
            assert!(
                !s.asked()
                    .iter()
                    .any(|l| l.starts_with("POST") || l.starts_with("DELETE")),
                "{what}: nothing changed in the engine: {:?}",
                s.asked()
            );
        }
    });
    step(
        "a bad prefix and a non-unix address are usage errors",
        || {
            let bad_prefix = lifecycle(&sock, "abc", "open", &fresh("s7"), &["ls"]);
            assert_eq!(bad_prefix.status.code(), Some(2));
            let bad_addr = Command::new(bins::lifecycle())
                .args([
                    "--docker-host",
                    "tcp://127.0.0.1:2375",
                    "--prefix",
                    "p-",
                    "--mode",
                    "open",
                    "--state-dir",
                    "/nonexistent",
                    "ls",
                ])
                .output_within(LONG)
                .expect("runs");
            assert_eq!(bad_addr.status.code(), Some(2));
            assert!(stderr(&bad_addr).contains("only unix:// addresses"));
        },
    );
    step(
        "a sidecar flag netproxy would refuse is a usage error before anything is made",
        || {
            let cases: &[(&[&str], &str)] = &[
                (
                    &["--egress-allow", "a..b.test"],
                    "--egress-allow \"a..b.test\": ",
                ),
                (
                    &["--egress-allow-cidr", "10.0.0.0/33"],
                    "--egress-allow-cidr \"10.0.0.0/33\": not a CIDR network",
                ),
                (
                    &["--egress-own-cidr", "host.test"],
                    "--egress-own-cidr \"host.test\": not a CIDR network",
                ),
                (
                    &["--egress-nat64-prefix", "2001:db8::/80"],
                    "--egress-nat64-prefix \"2001:db8::/80\": a NAT64 prefix is /32",
                ),
            ];
            for (flags, says) in cases {
                s.fake().clear_requests();
                let mut args = flags.to_vec();
                args.extend(["create", "--user", "user-1", "--thread", "t-flags"]);
                let out = lifecycle(&sock, &s.prefix, "restricted", &fresh("s8"), &args);
                let err = stderr(&out);
                assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
                assert!(err.contains(says), "{flags:?}: {err}");
                assert!(
                    s.asked().is_empty(),
                    "{flags:?}: nothing asked of the engine"
                );
            }
        },
    );
}

#[test]
fn a_sandbox_that_never_answers_is_destroyed_with_failed_to_become_ready() {
    let s = LcStack::new(false);
    // A fake container serves nothing; the probe goes to its loopback port and gets no answer.
    let out = lifecycle_command(s.proxy.socket(), &s.prefix, "open", &s.state_dir())
        .args(["--sandbox-cmd", "sleep 600", "--ready-timeout", "1"])
        .args(["create", "--user", "user-1", "--thread", "slow"])
        .output_within(LONG)
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("failed to become ready"),
        "{}",
        stderr(&out)
    );
    let id = s.id("slow");
    assert!(
        !s.exists(&format!("/containers/{}/json", s.names(&id).sandbox)),
        "what was made is destroyed"
    );
    assert_eq!(
        s.ports().held(&id).expect("read"),
        Vec::<u16>::new(),
        "and its port released"
    );
}

/// `.sandbox_id` is read from disk: a retire acts only on an ID that is a sandbox ID and whose
/// key is the record's directory. A path-like value, or another sandbox's ID, is reported as a
/// corrupt record, kept, and nothing is asked of the engine for it.
#[test]
fn retire_keeps_a_record_whose_sandbox_id_file_is_corrupt_and_asks_the_engine_nothing() {
    let s = LcStack::new(false);
    let sock = s.proxy.socket_buf();
    let state = s.state_dir();
    let (a, b) = (s.id("corrupt-a"), s.id("corrupt-b"));
    let ledger = s.ledger();
    for id in [&a, &b] {
        ledger.mark(id, "unknown").expect("mark");
    }
    let id_file = |id: &str| {
        ledger
            .dir()
            .join(lifecycle::naming::k(id))
            .join(".sandbox_id")
    };
    std::fs::write(id_file(&a), "zz/../../x").expect("write");
    // b's directory now names a: a retire of it would retire a's records.
    std::fs::write(id_file(&b), &a).expect("write");
    s.fake().clear_requests();
    let out = lifecycle(&sock, &s.prefix, "open", &state, &["retire"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for line in &lines {
        assert_eq!(line["result"], "kept", "{line}");
        assert!(line.get("sandbox_id").is_none(), "{line}");
        assert!(
            line["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("corrupt record")),
            "{line}"
        );
    }
    let asked = s.asked();
    assert!(asked.is_empty(), "the engine was asked {asked:?}");
    assert_eq!(
        s.proxy.decisions().1,
        0,
        "nothing reached the proxy to refuse"
    );
    for id in [&a, &b] {
        assert!(ledger.is_quarantined(id).expect("read"), "records kept");
    }
}

/// `lifecycle serve --help` says which global flags it needs and that they come before `serve`
/// (an operator reading only the subcommand's help could not have known).
#[test]
fn serve_help_names_the_global_flags_it_needs() {
    let out = std::process::Command::new(sockproxy_tests::bins::lifecycle())
        .args(["serve", "--help"])
        .output_within(SHORT)
        .expect("runs");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    for want in [
        "Needs the global flags before `serve`",
        "--docker-host",
        "--prefix",
        "--mode",
        "--state-dir",
        "tcp://HOST:PORT",
        "--api-key-file",
    ] {
        assert!(help.contains(want), "{want} in\n{help}");
    }
}

/// `LIFECYCLE_EGRESS_ALLOW=` (compose's `${EGRESS_ALLOW:-}` left unset) is no egress at all,
/// not a bad rule (issue 51): every command runs, destroy included, and the sidecar is started
/// with no allow rule (deer-flow's isolated mode), its relay to the sandbox's port its only other
/// flag.
#[test]
fn an_empty_egress_allow_is_deny_all_not_an_error() {
    let s = LcStack::new(true);
    let sock = s.proxy.socket_buf();
    let state = s.state_dir();
    let run = |args: &[&str]| {
        sockproxy_tests::lc::lifecycle_base(&sock, &s.prefix, "restricted", &state)
            .args(["--sidecar-image", TEST_IMAGE, "--sandbox-cmd", "sleep 600"])
            .args(["--ready-timeout", "0"])
            .env("LIFECYCLE_EGRESS_ALLOW", "")
            .args(args)
            .output()
            .expect("lifecycle runs")
    };
    let ls = run(&["ls"]);
    assert!(ls.status.success(), "{}", stderr(&ls));
    let out = run(&["create", "--user", "user-1", "--thread", "isolated"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = s.id("isolated");
    let sidecar = sockproxy_tests::raw::get(
        s.proxy.socket(),
        &format!("/containers/{}/json", s.names(&id).sidecar),
    )
    .expect("inspect")
    .json();
    let cmd: Vec<String> = sidecar["Config"]["Cmd"]
        .as_array()
        .expect("a command")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    let relay = format!("0.0.0.0:8080={}:8080", s.names(&id).sandbox);
    assert_eq!(
        cmd,
        ["--listen", "0.0.0.0:3128", "--relay", relay.as_str()],
        "no --allow: no egress (the relay is the way in, not out)"
    );
    let out = run(&["destroy", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
}
