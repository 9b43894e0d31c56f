//! One hostile tenant per stack, on a thread of its own for the chaos phase: the moves of
//! `hostile_moves` in a seeded order, over and over, through its own stack's proxy and
//! provisioner port (from 127.0.0.K+2, so per-peer limits see a second peer) and from inside
//! its own sandboxes (egress attempts: `hostile_egress`). Every answer is searched for every
//! other stack's canary token; a request that must be refused and was served counts as a
//! cross-stack effect too (each of them names another stack's object, or the host, through
//! which every stack's data is reached).

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use sockproxy_tests::crash::Rng;

use crate::attribute::Span;
use crate::hostile_egress::HostCanary;
use crate::hostile_moves::{Move, MOVES};
use crate::stacks::{Stack, Stacks};
use crate::watch::Watcher;
use crate::Config;

/// What a move expects of one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A refusal (a status of 400 or more, or no answer at all).
    Refused,
    /// Anything; only its body is searched.
    Any,
}

/// One answer a move got.
#[derive(Debug)]
pub struct Answer {
    pub label: String,
    /// `None`: no answer (closed, timed out).
    pub status: Option<u16>,
    pub body: String,
    pub expect: Expect,
}

impl Answer {
    pub fn new(label: impl Into<String>, r: std::io::Result<(u16, String)>, e: Expect) -> Self {
        let (status, body) = match r {
            Ok((s, b)) => (Some(s), b),
            Err(_) => (None, String::new()),
        };
        Self {
            label: label.into(),
            status,
            body,
            expect: e,
        }
    }
}

/// What a tenant did, for the report.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub stack: usize,
    pub moves: u64,
    pub answers: u64,
    pub refused: u64,
    pub cross: u64,
    pub lines: Vec<String>,
    /// When each move ran, for the report's table of what the well-behaved calls were slow
    /// beside.
    pub spans: Vec<Span>,
}

/// What a move may use.
pub struct Ctx<'a> {
    pub me: &'a Stack,
    pub others: Vec<&'a Stack>,
    /// The tenant's own loopback address for TCP (127.0.0.K+2).
    pub source: IpAddr,
    pub rng: Rng,
    pub max_containers: usize,
    pub stop: &'a AtomicBool,
    /// The harness's host canary (what a sandbox reaching the host would read).
    pub host: HostCanary,
}

impl Ctx<'_> {
    /// Another stack, at random (itself when it is alone).
    pub fn other(&mut self) -> &Stack {
        if self.others.is_empty() {
            return self.me;
        }
        let i = self.rng.below(self.others.len() as u64) as usize;
        self.others[i]
    }
}

pub fn start_all(
    stacks: &Arc<Stacks>,
    cfg: &Config,
    stop: &Arc<AtomicBool>,
    watcher: &Watcher,
    host: &HostCanary,
    start: Instant,
) -> Vec<JoinHandle<Tally>> {
    let max_containers = stacks.all.first().map_or(0, Stack::max_containers);
    let seed = cfg.seed;
    let moves: Arc<Vec<&'static Move>> = Arc::new(
        MOVES
            .iter()
            .filter(|m| !cfg.skip_moves.iter().any(|s| s == m.name))
            .collect(),
    );
    (0..stacks.all.len())
        .map(|k| {
            let (stacks, stop, tokens) = (stacks.clone(), stop.clone(), watcher.tokens());
            let (host, moves) = (host.clone(), moves.clone());
            std::thread::spawn(move || {
                let me = &stacks.all[k];
                let mut ctx = Ctx {
                    me,
                    others: stacks.all.iter().filter(|s| s.k != k).collect(),
                    source: IpAddr::from([127, 0, 0, u8::try_from(k + 2).unwrap_or(254)]),
                    rng: Rng::new(seed ^ (0x4057_11e0 + k as u64)),
                    max_containers,
                    stop: &stop,
                    host,
                };
                let foreign: Vec<(usize, String)> =
                    tokens.into_iter().filter(|(o, _)| *o != k).collect();
                tenant(&mut ctx, &moves, &foreign, start)
            })
        })
        .collect()
}

fn tenant(
    ctx: &mut Ctx<'_>,
    moves: &[&'static Move],
    foreign: &[(usize, String)],
    start: Instant,
) -> Tally {
    let mut order: Vec<&Move> = moves.to_vec();
    for i in (1..order.len()).rev() {
        let j = ctx.rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    let mut t = Tally {
        stack: ctx.me.k,
        ..Tally::default()
    };
    'run: loop {
        for m in &order {
            if ctx.stop.load(Ordering::SeqCst) {
                break 'run;
            }
            t.moves += 1;
            let from = start.elapsed().as_secs_f64();
            let answers = (m.run)(ctx);
            t.spans.push(Span {
                what: m.name.to_string(),
                stack: Some(ctx.me.k),
                from,
                to: start.elapsed().as_secs_f64(),
                own_stack_only: false,
            });
            for a in answers {
                judge(&mut t, m.name, &a, foreign);
            }
        }
    }
    t
}

fn judge(t: &mut Tally, move_name: &str, a: &Answer, foreign: &[(usize, String)]) {
    t.answers += 1;
    let refused = a.status.is_none_or(|s| s >= 400);
    if refused {
        t.refused += 1;
    }
    let mut flag = |what: String| {
        println!("CROSS-STACK (hostile tenant of stack {}): {what}", t.stack);
        t.cross += 1;
        t.lines.push(what);
    };
    for (o, token) in foreign {
        if a.body.contains(token.as_str()) {
            flag(format!(
                "{move_name}: {} answered stack {o}'s canary",
                a.label
            ));
        }
    }
    if a.expect == Expect::Refused && !refused {
        flag(format!(
            "{move_name}: {} was served ({:?}): {}",
            a.label,
            a.status,
            a.body.chars().take(200).collect::<String>()
        ));
    }
}
