//! The `budget` part: issue 39's performance budget as one table, with a "before" and an
//! "after" sockproxy binary measured in the same run, taking turns, beside going direct (or
//! HAProxy, for `/_ping`'s CPU). This file owns the part's course: the fake engine's lines
//! (`/_ping` CPU, RSS, list filtering), the order they run in, and the printed table;
//! `budget_row` holds the rows and their verdicts, `budget_real` the real engine's lines.

use std::path::Path;
use std::time::Duration;

use tokio::runtime::Runtime;

use crate::budget_row::{fill, Builds, Judge, Limit, Row, CONCURRENCY};
use crate::footprint::hold_sockproxy;
use crate::load::{median, same};
use crate::procs::{listener_pid, Proc};
use crate::socket::{
    create, list_p50s, populate, rounds_of_loads, start_each, start_fake, start_haproxy,
    start_sockproxy_bin, LIST,
};
use crate::{budget_real, Args};

/// The name filter sockproxy adds to a list for `--prefix bench-` (issue 37).
const NAME_FILTER: &str = r#"{"name":["^/?bench-"]}"#;

/// The part: the real engine's lines, then the fake engine's, then one table.
pub fn budget(rt: &Runtime, args: &Args, bins: &Path, dir: &Path) -> anyhow::Result<()> {
    let builds = Builds {
        before: args.before_bin.clone(),
        after: args
            .after_bin
            .clone()
            .unwrap_or_else(|| bins.join("sockproxy")),
    };
    println!("## Budget (issue 39)\n");
    let mut rows = budget_real::rows(rt, args, &builds, dir)?;
    rows.extend(ping_cpu(rt, args, bins, &builds, dir)?);
    rows.push(rss(rt, args, bins, &builds, dir)?);
    rows.extend(list(rt, args, bins, &builds, dir)?);
    print(args, &builds, &rows);
    Ok(())
}

fn print(args: &Args, builds: &Builds, rows: &[Row]) {
    let before = builds
        .before
        .as_ref()
        .map_or_else(|| "not given".to_owned(), |p| format!("`{}`", p.display()));
    println!(
        "Before: {before}; after: `{}`. Every route takes turns: the docker CLI lines sample by sample ({} samples per command and route, at most {} s per command), the loads round by round ({} rounds, medians). A ratio in brackets is to the reference column (direct, or HAProxy where the line says so); \"met\" judges the after build.\n",
        builds.after.display(),
        args.budget_samples,
        args.budget_time,
        args.rounds
    );
    println!("| budget line | measure | direct (reference) | before | after | budget | after |");
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        println!("{}", r.markdown());
    }
    println!();
}

/// `HEAD /_ping` CPU per request at `CONCURRENCY` clients on the fake engine, each build ÷
/// HAProxy.
fn ping_cpu(
    rt: &Runtime,
    args: &Args,
    bins: &Path,
    builds: &Builds,
    dir: &Path,
) -> anyhow::Result<Vec<Row>> {
    let row = Row::new(
        "`/_ping` CPU per request ≤ 1.5× HAProxy's",
        format!("`HEAD /_ping`, {CONCURRENCY} clients, proxy CPU µs/req (reference: HAProxy)"),
        Judge::Ratio(Limit::AtMost(1.5)),
    );
    let engine = start_fake(bins, dir, "budget-ping")?;
    let haproxy = match start_haproxy(dir, &engine.socket, "budget-ping") {
        Ok(h) => h,
        Err(why) => return Ok(vec![row.unmeasured(&format!("HAProxy {why}"))]),
    };
    let proxies = start_each(
        &builds.each(),
        dir,
        &engine.socket,
        "budget-ping",
        &args.sockproxy_flag,
    )?;
    let mut ways: Vec<(&Path, Option<&Proc>)> = vec![(&haproxy.socket, Some(&haproxy.proc))];
    ways.extend(proxies.iter().map(|p| (p.socket.as_path(), Some(&p.proc))));
    let engine_pid = rt.block_on(listener_pid(&engine.socket));
    let next = same("HEAD", "/_ping");
    let cells = rounds_of_loads(
        rt,
        engine_pid,
        &ways,
        &next,
        CONCURRENCY,
        args.requests,
        args.rounds,
    );
    let cpu: Vec<f64> = cells
        .into_iter()
        .map(|loads| {
            let m = median(loads, |l| l.cpu_per_req.as_secs_f64());
            m.cpu_per_req.as_secs_f64() * 1e6
        })
        .collect();
    let mut row = row;
    row.reference = cpu.first().copied();
    Ok(vec![fill(row, builds, &cpu[1..])])
}

/// Resident memory of each build, a fresh process each, holding `--connections` kept-alive
/// connections after one list request each.
fn rss(rt: &Runtime, args: &Args, bins: &Path, builds: &Builds, dir: &Path) -> anyhow::Result<Row> {
    let n = args.connections;
    let row = Row::new(
        "RSS at 256 open connections ≤ 25 MiB",
        format!("sockproxy RSS MiB with {n} connections open"),
        Judge::Value(Limit::AtMost(25.0)),
    );
    let engine = start_fake(bins, dir, "budget-rss")?;
    for i in 0..10 {
        create(&engine.socket, &format!("bench-sandbox-{i}"))?;
    }
    let mut figures = Vec::new();
    for (name, bin) in builds.each() {
        let p = start_sockproxy_bin(
            bin,
            dir,
            &engine.socket,
            &format!("budget-rss-{name}"),
            &args.sockproxy_flag,
        )?;
        let held = rt.block_on(hold_sockproxy(&p.socket, n))?;
        // Let the process settle before reading its memory, as the footprint part does.
        std::thread::sleep(Duration::from_millis(200));
        figures.push(p.proc.memory().rss_kib as f64 / 1024.0);
        drop(held);
    }
    Ok(fill(row, builds, &figures))
}

/// One client listing `--budget-list-size` containers on the fake engine, direct and through
/// each build, taking turns; the median p50. A second row compares the same builds with the
/// engine answering direct with the name filter sockproxy adds (issue 37), so the filter's own
/// cost on the engine can be told from the proxy's.
fn list(
    rt: &Runtime,
    args: &Args,
    bins: &Path,
    builds: &Builds,
    dir: &Path,
) -> anyhow::Result<Vec<Row>> {
    let n = args.budget_list_size;
    let row = Row::new(
        "List filtering of 10,000 containers ≤ +10% over direct",
        format!(
            "`GET /containers/json?all=1`, {n} containers (half the stack's), one client, p50 ms"
        ),
        Judge::Ratio(Limit::AtMost(1.10)),
    );
    let context = Row::new(
        "(context for the line above)",
        format!(
            "the same, reference: direct with the name filter sockproxy adds (`{NAME_FILTER}`)"
        ),
        Judge::Context,
    );
    let engine = start_fake(bins, dir, "budget-list")?;
    populate(&engine.socket, n)?;
    let proxies = start_each(
        &builds.each(),
        dir,
        &engine.socket,
        "budget-list",
        &args.sockproxy_flag,
    )?;
    let filtered = format!(
        "{LIST}&filters={}",
        form_urlencoded::byte_serialize(NAME_FILTER.as_bytes()).collect::<String>()
    );
    let direct = [(engine.socket.as_path(), LIST), (&engine.socket, &filtered)];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (references, figures) = match &proxies[..] {
        [b, a] => {
            let [d, f, b, a] = list_p50s(
                rt,
                [direct[0], direct[1], (&b.socket, LIST), (&a.socket, LIST)],
                args.rounds,
            );
            ([d, f], vec![ms(b), ms(a)])
        }
        [a] => {
            let [d, f, a] = list_p50s(rt, [direct[0], direct[1], (&a.socket, LIST)], args.rounds);
            ([d, f], vec![ms(a)])
        }
        _ => anyhow::bail!("one or two sockproxy builds"),
    };
    Ok([row, context]
        .into_iter()
        .zip(references)
        .map(|(mut r, reference)| {
            r.reference = Some(ms(reference));
            fill(r, builds, &figures)
        })
        .collect())
}
