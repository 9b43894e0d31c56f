//! The quarantine ledger and port reservations survive SIGKILL at any instant (issue 17).
//! `lifecycle` processes run one after another against the fake engine behind the real
//! sockproxy — `quarantine mark`, `retire` and open-mode `create` (which reserves a port and
//! hands it to the new generation) — and most are SIGKILLed after a random delay, hundreds of
//! times (bounded by a kill count and a wall-clock budget, which only ends the loop early and
//! never decides a verdict). Then, from the files alone: no record is torn (records are empty
//! files, `.sandbox_id` names a sandbox of the test, nothing else lies beside them that a later
//! run could misread), every record a process printed as made is there (unless a later
//! `retire` may have retired it), an acknowledged `retire` left no retirable record, every
//! port an acknowledged create printed is still reserved for its generation, and no port is
//! reserved twice.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use lifecycle::naming::k;
use serde_json::Value;
use sockproxy_tests::bounded::{OutputWithin, LONG};
use sockproxy_tests::crash::{run_and_kill, scan_ledger, scan_ports, Rng};
use sockproxy_tests::lc::{lifecycle_command, LcStack};
use sockproxy_tests::step::step;

const KILLS: usize = 300;
const BUDGET: Duration = Duration::from_secs(60);

/// Sandboxes whose container exists: `retire` keeps their records.
const KEPT: [&str; 2] = ["kept-1", "kept-2"];
/// Sandboxes with no container: `retire` retires their records.
const RETIRABLE: [&str; 3] = ["gone-1", "gone-2", "gone-3"];
/// Threads creates cycle through.
const CREATE_THREADS: u64 = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Mark,
    Retire,
    Create,
}

fn cmd(s: &LcStack) -> Command {
    let mut c = lifecycle_command(s.proxy.socket(), &s.prefix, "open", &s.state_dir());
    c.args(["--sandbox-cmd", "sleep 600", "--ready-timeout", "0"])
        .args(["--lock-timeout", "30", "--list-timeout", "5"]);
    c
}

fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn the_ledger_and_port_reservations_survive_sigkill_anywhere() {
    let s = LcStack::new(false);
    let seed = std::env::var("LEDGER_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("LEDGER_CRASH_SEED={seed}");
    let mut rng = Rng::new(seed);
    step("containers for the kept sandboxes", || {
        for thread in KEPT {
            let id = s.id(thread);
            s.make(
                &s.names(&id).sandbox,
                serde_json::json!({ "deerflow.role": "sandbox", "deerflow.network_mode": "open" }),
            );
        }
    });
    let kept: Vec<String> = KEPT.iter().map(|t| s.id(t)).collect();
    let retirable: Vec<String> = RETIRABLE.iter().map(|t| s.id(t)).collect();
    let all_ids: BTreeSet<String> = kept.iter().chain(&retirable).cloned().collect();
    let ledger_dir = s.ledger().dir().to_owned();

    // (sandbox ID, generation, sequence number) of every mark a process printed.
    let mut marked: Vec<(String, String, usize)> = Vec::new();
    let mut generations: BTreeSet<String> = BTreeSet::new();
    let mut last_retire_started: Option<usize> = None;
    // (sandbox ID, container ID, port) of every fresh create a process printed.
    let mut created: Vec<(String, String, u16)> = Vec::new();
    step("run lifecycle processes and SIGKILL most of them", || {
        let mut typical: BTreeMap<Op, Duration> = BTreeMap::new();
        let mut tally: BTreeMap<(Op, &str), usize> = BTreeMap::new();
        let (mut kills, mut seq) = (0usize, 0usize);
        let started = Instant::now();

        while kills < KILLS && started.elapsed() < BUDGET {
            seq += 1;
            let op = match rng.below(10) {
                0..=3 => Op::Mark,
                4..=5 => Op::Retire,
                _ => Op::Create,
            };
            let mut c = cmd(&s);
            let mut mark_of = None;
            match op {
                Op::Mark => {
                    let pool = if rng.below(2) == 0 { &kept } else { &retirable };
                    let id = pool[rng.below(pool.len() as u64) as usize].clone();
                    let generation = format!("gen-{seq}");
                    generations.insert(generation.clone());
                    c.args(["quarantine", "mark", &id, "--generation", &generation]);
                    mark_of = Some((id, generation));
                }
                Op::Retire => {
                    last_retire_started = Some(seq);
                    c.arg("retire");
                }
                Op::Create => {
                    let thread = format!("c{}", rng.below(CREATE_THREADS));
                    c.args(["create", "--user", "user-1", "--thread", &thread]);
                }
            }
            // Kill somewhere in (0, 1.5 × a typical run]; a quarter run to completion.
            let full = *typical.get(&op).unwrap_or(&Duration::from_millis(40));
            let delay = if rng.below(4) == 0 {
                Duration::from_secs(600)
            } else {
                full.mul_f64(rng.below(1500) as f64 / 1000.0)
            };
            let t0 = Instant::now();
            let run = if delay >= Duration::from_secs(600) {
                let out = c.output_within(LONG).expect("lifecycle runs");
                sockproxy_tests::crash::Run {
                    killed: false,
                    code: out.status.code(),
                    stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                    stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                }
            } else {
                run_and_kill(c, delay)
            };
            if !run.killed && run.code == Some(0) {
                let was = typical.get(&op).copied().unwrap_or(t0.elapsed());
                typical.insert(op, (was * 3 + t0.elapsed()) / 4);
            }
            kills += usize::from(run.killed);
            let outcome = match (run.killed, run.code) {
                (true, _) => "killed",
                (false, Some(0)) => "ok",
                _ => "failed",
            };
            *tally.entry((op, outcome)).or_default() += 1;
            let lines = json_lines(&run.stdout);
            match op {
                Op::Mark => {
                    if let (Some((id, generation)), Some(v)) = (mark_of, lines.first()) {
                        assert_eq!(v["generation"], generation.as_str(), "{v}");
                        marked.push((id, generation, seq));
                    }
                }
                Op::Retire if outcome == "ok" => {
                    // Finished: no record of a sandbox without a container is left.
                    // (A record whose `.sandbox_id` an interrupted retire already removed names
                    // no sandbox: `retire` keeps it for the next create in its thread.)
                    for id in &retirable {
                        let left = scan_ledger(&ledger_dir)
                            .get(&k(id))
                            .filter(|d| d.sandbox_id.is_some())
                            .map_or(0, |d| d.records.len());
                        assert_eq!(left, 0, "retire exited 0 and left records of {id}: {run:?}");
                    }
                }
                Op::Create => {
                    for v in lines {
                        if v["discovered"] == false {
                            if let (Some(id), Some(cid), Some(port)) = (
                                v["sandbox_id"].as_str(),
                                v["container_id"].as_str(),
                                v["host_port"].as_u64(),
                            ) {
                                let port = u16::try_from(port).expect("a port");
                                created.push((id.to_owned(), cid.to_owned(), port));
                            }
                        }
                    }
                }
                Op::Retire => {}
            }
            if outcome == "failed" {
                let why = run.stderr.lines().last().unwrap_or_default();
                println!("seq {seq} {op:?} failed ({:?}): {why}", run.code);
            }
        }
        println!(
            "{kills} kills in {seq} runs, {:?}; outcomes {tally:?}; typical {typical:?}",
            started.elapsed()
        );
        assert!(kills > 0, "no run was killed");
    });

    // No torn or foreign file in the ledger.
    let ledger = step("no torn or foreign file in the ledger", || {
        let gen_keys: BTreeSet<String> = generations.iter().map(|g| k(g)).collect();
        let id_keys: BTreeMap<String, String> = all_ids.iter().map(|i| (k(i), i.clone())).collect();
        let ledger = scan_ledger(&ledger_dir);
        let (mut temps, mut orphans) = (0, 0);
        for (key, dir) in &ledger {
            let id = id_keys
                .get(key)
                .unwrap_or_else(|| panic!("sandbox dir {key} names no sandbox of the test"));
            for (rec, len) in &dir.records {
                assert_eq!(*len, 0, "record {key}/{rec} is not empty");
                assert!(
                    gen_keys.contains(rec),
                    "record {key}/{rec} is no generation marked"
                );
            }
            // `.sandbox_id` is whole when present; a retire killed inside its directory removal
            // may have taken it before the records (those retire on the next create instead).
            match &dir.sandbox_id {
                Some(named) => assert_eq!(named, id, "{key}: torn or foreign .sandbox_id"),
                None => orphans += usize::from(!dir.records.is_empty()),
            }
            assert!(
                dir.other.is_empty(),
                "{key}: unexpected files {:?}",
                dir.other
            );
            temps += dir.temps.len();
        }
        println!(
            "{temps} temp files of interrupted writes left (never read as records); \
         {orphans} sandbox dirs with records but no .sandbox_id"
        );
        ledger
    });

    // A fresh process reads the same ledger without error.
    step("a fresh process reads the same ledger", || {
        let mut ls = cmd(&s);
        ls.args(["quarantine", "ls"]);
        let out = ls.output_within(LONG).expect("quarantine ls");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for v in json_lines(&String::from_utf8_lossy(&out.stdout)) {
            let id = v["sandbox_id"]
                .as_str()
                .expect("each entry names its sandbox");
            assert!(all_ids.contains(id), "{v}");
        }
    });

    // Every acknowledged record is there, unless a retire started after it.
    step("every acknowledged record is there", || {
        let l = s.ledger();
        for (id, generation, at) in &marked {
            let may_be_retired =
                retirable.contains(id) && last_retire_started.is_some_and(|r| r > *at);
            if !may_be_retired {
                assert!(
                    l.fences(id, generation).expect("read ledger"),
                    "acknowledged record {id}/{generation} (run {at}) is gone"
                );
            }
        }
    });

    // No port reserved twice, none torn, and each acknowledged create's port still held.
    let ports = step(
        "no port reserved twice or torn, every acknowledged one held",
        || {
            let ports = scan_ports(&s.state_dir());
            let mut seen: BTreeMap<u16, &std::path::Path> = BTreeMap::new();
            let mut temps = 0;
            for (path, port) in &ports {
                // Temp files of interrupted writes (dot-names) are never read as reservations.
                if path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                {
                    temps += 1;
                    continue;
                }
                let Some(port) = *port else {
                    panic!("torn port reservation {}", path.display());
                };
                if let Some(other) = seen.insert(port, path) {
                    panic!(
                        "port {port} reserved twice: {} and {}",
                        other.display(),
                        path.display()
                    );
                }
            }
            let p = s.ports();
            for (id, cid, port) in &created {
                assert_eq!(
                    p.get(id, cid).expect("read ports"),
                    Some(*port),
                    "acknowledged create {id} ({cid}) lost its port"
                );
            }
            println!("{temps} temp files of interrupted port writes left (never read)");
            ports
        },
    );
    println!(
        "{} records, {} reservations, {} acknowledged marks, {} acknowledged creates",
        ledger.values().map(|d| d.records.len()).sum::<usize>(),
        ports.len(),
        marked.len(),
        created.len()
    );
}

/// A reservation is written to a temp file and linked into place, so a kill never leaves an
/// empty `pending`; one left by an older lifecycle (whose writes were not atomic) is replaced by
/// the next reservation instead of failing it with "File exists".
#[test]
fn a_torn_pending_reservation_does_not_block_the_next_create() {
    let state = tempfile::tempdir().expect("state dir");
    let id = "aaaaaaaaaaaaaaaa";
    let dir = state.path().join("ports").join(k(id));
    std::fs::create_dir_all(&dir).expect("ports dir");
    // What a kill right after the file's creation leaves.
    std::fs::write(dir.join("pending"), b"").expect("empty pending file");
    let ports = lifecycle::ports::Ports::new(state.path());
    let port = ports
        .reserve(id)
        .expect("a reservation after a torn pending file");
    assert_eq!(ports.pending(id).expect("read"), Some(port));
}

/// `Ledger::retire` removes the records before the sandbox's `.sandbox_id`, so a kill part-way
/// leaves, at worst, fewer records under a directory that still names its sandbox: the next
/// retire finishes the job.
#[tokio::test]
async fn records_left_by_a_killed_retire_are_retired_by_the_next_retire() {
    let s = LcStack::new(false);
    let id = s.id("orphan");
    s.ledger().mark(&id, "gen-1").expect("mark");
    s.ledger().mark(&id, "gen-2").expect("mark");
    // What a kill after the first record's removal leaves.
    std::fs::remove_file(s.ledger().dir().join(k(&id)).join(k("gen-1"))).expect("unlink");
    let lc = s.through_proxy(lifecycle::decide::Mode::Open).await;
    let out = lc.retire_all().await.expect("retire");
    assert!(
        matches!(out.as_slice(), [lifecycle::ops::Retired::Retired { .. }]),
        "{out:?}"
    );
    assert!(!s.ledger().is_quarantined(&id).expect("read"));
}
