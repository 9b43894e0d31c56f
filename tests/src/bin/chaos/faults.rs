//! Faults, from the seed: one after another until the chaos phase ends, each after a random
//! pause (5 to 15 s): SIGKILL of a random stack's sockproxy or of its `lifecycle serve`, each
//! started again at once by the harness, and exactly one dockerd restart (SIGTERM, start; the
//! engine runs with `--live-restore`) at a seeded place in the sequence. After each fault and
//! the recovery window W, the lost check: every stack's held sandbox must answer Running (its
//! URL answering, in either mode) or 404; anything else counts as lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sockproxy_tests::crash::Rng;

use crate::attribute::Span;
use crate::dockerd::Dockerd;
use crate::polite::{held_status, make_held};
use crate::stacks::Stacks;
use crate::watch::Watcher;
use crate::Config;

#[derive(Debug, Clone, Copy)]
enum Fault {
    KillProxy(usize),
    KillServe(usize),
    RestartDockerd,
}

impl Fault {
    /// The fault's span: from its start to the end of its recovery window, for the calls of
    /// the stack it struck (all of them for the engine's restart).
    fn span(self, from: f64, to: f64) -> Span {
        let (what, stack) = match self {
            Fault::KillProxy(k) => ("fault: SIGKILL of its sockproxy, W", Some(k)),
            Fault::KillServe(k) => ("fault: SIGKILL of its lifecycle serve, W", Some(k)),
            Fault::RestartDockerd => ("fault: dockerd restart, W", None),
        };
        Span {
            what: what.into(),
            stack,
            from,
            to,
            own_stack_only: true,
        }
    }
}

/// Runs faults until `end` (or `stop`); the number of lost sandboxes the checks found, and
/// each fault's span (seconds since `run_start`).
pub fn run(
    cfg: &Config,
    stacks: &Stacks,
    engine: &mut Dockerd,
    watcher: &Watcher,
    end: Instant,
    stop: &AtomicBool,
    run_start: Instant,
) -> (u64, Vec<Span>) {
    let mut rng = Rng::new(cfg.seed ^ 0xfa17);
    // How many fault cycles fit (each a pause, the fault, W and the check), and which one is
    // the dockerd restart: never the first, so a proxy or provider crash is seen on its own.
    let cycle = 10 + cfg.window.as_secs() + 5;
    let cycles = (cfg.seconds / cycle).max(1);
    let restart_at = if cycles > 1 {
        1 + rng.below(cycles - 1)
    } else {
        0
    };
    let start = Instant::now();
    let mut lost = 0;
    let mut n = 0;
    let mut restarted = false;
    let mut spans = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let pause = Duration::from_secs(5 + rng.below(11));
        let needs = pause + cfg.window + Duration::from_secs(5);
        if Instant::now() + needs > end {
            break;
        }
        std::thread::sleep(pause);
        let fault = if n == restart_at && !restarted {
            restarted = true;
            Fault::RestartDockerd
        } else {
            let k = rng.below(stacks.all.len() as u64) as usize;
            if rng.below(2) == 0 {
                Fault::KillProxy(k)
            } else {
                Fault::KillServe(k)
            }
        };
        n += 1;
        println!(
            "fault {n} at {:.0} s: {fault:?}",
            start.elapsed().as_secs_f64()
        );
        let from = run_start.elapsed().as_secs_f64();
        apply(fault, stacks, engine, watcher);
        std::thread::sleep(cfg.window);
        spans.push(fault.span(from, run_start.elapsed().as_secs_f64()));
        lost += check(stacks, n);
    }
    if !restarted {
        println!("faults: the run was too short for the dockerd restart");
    }
    (lost, spans)
}

fn apply(fault: Fault, stacks: &Stacks, engine: &mut Dockerd, watcher: &Watcher) {
    let again = |what: &str, r: anyhow::Result<()>| {
        if let Err(e) = r {
            println!("fault: {what} did not start again: {e:#}");
        }
    };
    match fault {
        Fault::KillProxy(k) => {
            let s = &stacks.all[k];
            s.kill_proxy();
            again("sockproxy", s.start_proxy());
        }
        Fault::KillServe(k) => {
            let s = &stacks.all[k];
            s.kill_serve();
            again("lifecycle serve", s.start_serve());
        }
        Fault::RestartDockerd => {
            watcher.engine_restart(true);
            again("dockerd", engine.restart());
            watcher.engine_restart(false);
        }
    }
}

/// The lost check after fault `n`; lost sandboxes found. One found 404 is made again, so the
/// next check has something to ask about.
fn check(stacks: &Stacks, n: u64) -> u64 {
    let mut lost = 0;
    for s in &stacks.all {
        match held_status(s) {
            Ok(true) => {}
            Ok(false) => {
                println!(
                    "check after fault {n}: stack {}'s held sandbox answers 404",
                    s.k
                );
                if let Err(e) = make_held(s) {
                    println!("  made again: failed, {e:#}");
                }
            }
            Err(what) => {
                println!("LOST after fault {n}: stack {}'s held sandbox: {what}", s.k);
                lost += 1;
            }
        }
    }
    lost
}
