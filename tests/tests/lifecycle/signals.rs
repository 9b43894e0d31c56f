//! The per-sandbox lock as processes see it (issue 15), on the fake engine behind sockproxy: a
//! process waiting for the lock gives up at its `--lock-timeout` (exit 5) or at SIGTERM (exit
//! 130) without leaking it, and a process holding it finishes the step it sent the engine
//! before it exits, SIGTERM or not. Nothing here waits on a clock to decide: the test knows a
//! process is waiting once it has the lock file open, and holds engine steps in the fault relay.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use lifecycle::decide::Mode;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sockproxy_tests::bounded::{OutputWithin, WaitWithin, LONG, SHORT};
use sockproxy_tests::lc::fault_relay::FaultRelay;
use sockproxy_tests::lc::{lifecycle_command, LcStack};

fn cmd(s: &LcStack, sock: &Path, args: &[&str]) -> Command {
    let mut c = lifecycle_command(sock, &s.prefix, "open", &s.state_dir());
    c.args(["--sandbox-cmd", "sleep 600", "--ready-timeout", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Blocks until process `child` has `path` open (it is then waiting for, or holding, the lock).
fn wait_until_open(child: &Child, path: &Path) {
    let fds = PathBuf::from(format!("/proc/{}/fd", child.id()));
    loop {
        let open = std::fs::read_dir(&fds).is_ok_and(|d| {
            d.filter_map(Result::ok)
                .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == path))
        });
        if open {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn term(child: &Child) {
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGTERM).expect("kill");
}

#[tokio::test]
async fn a_lock_waiter_gives_up_at_its_timeout_or_a_signal_and_leaks_nothing() {
    let s = LcStack::new(false);
    let lc = s.through_proxy(Mode::Open).await;
    let made = lc.create("user-1", "locked").await.expect("create");
    let id = made.sandbox_id.clone();
    let lock_file = lc.locks.path(&id);
    let held = lc
        .locks
        .acquire(&id)
        .await
        .expect("the test holds the lock");

    let timed_out = cmd(
        &s,
        s.proxy.socket(),
        &["--lock-timeout", "1", "destroy", &id],
    )
    .output_within(LONG)
    .expect("runs");
    assert_eq!(timed_out.status.code(), Some(5), "{}", stderr(&timed_out));
    assert!(stderr(&timed_out).contains("still holds its lock"));

    let waiter = cmd(&s, s.proxy.socket(), &["destroy", &id])
        .spawn()
        .expect("starts");
    wait_until_open(&waiter, &lock_file);
    term(&waiter);
    let interrupted = waiter.output_within(SHORT).expect("wait");
    assert_eq!(
        interrupted.status.code(),
        Some(130),
        "{}",
        stderr(&interrupted)
    );
    assert!(
        s.exists(&format!("/containers/{}/json", made.container_id)),
        "nothing was done"
    );

    drop(held);
    let done = cmd(
        &s,
        s.proxy.socket(),
        &["--lock-timeout", "5", "destroy", &id],
    )
    .output_within(LONG)
    .expect("runs");
    assert!(
        done.status.success(),
        "neither waiter left the lock held: {}",
        stderr(&done)
    );
}

#[tokio::test]
async fn a_lock_holder_finishes_the_step_it_sent_before_it_exits() {
    let s = LcStack::new(false);
    let relay = FaultRelay::start(s.proxy.socket());
    let lc = s.through_proxy(Mode::Open).await;
    let made = lc.create("user-1", "finish").await.expect("create");
    let gate = relay.hold_once("POST", "/stop");
    let holder = cmd(&s, relay.socket(), &["destroy", &made.sandbox_id])
        .spawn()
        .expect("starts");
    gate.arrived().await;
    term(&holder);
    gate.release();
    let out = tokio::task::spawn_blocking(move || holder.output_within(LONG))
        .await
        .expect("join")
        .expect("wait");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !s.exists(&format!("/containers/{}/json", made.container_id)),
        "the stop that was under way, and the rest of the destroy, were finished"
    );
    assert!(!s.ledger().is_quarantined(&made.sandbox_id).expect("read"));
}
