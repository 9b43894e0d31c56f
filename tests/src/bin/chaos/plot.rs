//! The run's plots, drawn from the CSV files the report wrote (so `chaos --plot DIR` redraws a
//! finished run's): `latency.png` (each well-behaved call's p50 and p99 per time window, both
//! phases, the chaos phase's start marked) and `host.png` (dockerd's, the proxies' and the
//! providers' memory, dockerd's CPU and the containerd shims over time).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

/// The font the labels are drawn in (Debian's `fonts-dejavu-core`).
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Seconds per point of the latency plot.
const WINDOW_S: f64 = 30.0;

/// One well-behaved call, as `latencies.csv` holds it.
struct Call {
    at: f64,
    chaos: bool,
    op: String,
    ms: f64,
}

/// One host sample, as `host.csv` holds it.
struct Sample {
    at: f64,
    dockerd_mib: f64,
    dockerd_cpu: f64,
    shims: f64,
    proxies_mib: f64,
    serves_mib: f64,
}

/// Draws both plots into `dir`, returning their paths.
pub fn draw(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let font = std::fs::read(FONT)
        .with_context(|| format!("{FONT}: the plots' font (apt-get install fonts-dejavu-core)"))?;
    // plotters keeps a registered font for the life of the process.
    register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(font.into_boxed_slice()),
    )
    .map_err(|_| anyhow!("{FONT}: not a font plotters can read"))?;
    let calls = read_calls(&dir.join("latencies.csv"))?;
    let host = read_host(&dir.join("host.csv"))?;
    let latency = dir.join("latency.png");
    draw_latency(&latency, &calls).map_err(|e| anyhow!("{}: {e}", latency.display()))?;
    let hostp = dir.join("host.png");
    draw_host(&hostp, &host).map_err(|e| anyhow!("{}: {e}", hostp.display()))?;
    Ok(vec![latency, hostp])
}

fn rows(path: &Path) -> anyhow::Result<Vec<Vec<String>>> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    Ok(text
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| l.split(',').map(str::to_owned).collect())
        .collect())
}

fn num(row: &[String], i: usize, path: &Path) -> anyhow::Result<f64> {
    row.get(i)
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("{}: column {i} of {row:?} is not a number", path.display()))
}

fn read_calls(path: &Path) -> anyhow::Result<Vec<Call>> {
    rows(path)?
        .into_iter()
        // at_s,stack,phase,call,ms,ok: only the calls that succeeded have a latency to plot.
        .filter(|r| r.get(5).is_some_and(|ok| ok == "true"))
        .map(|r| {
            Ok(Call {
                at: num(&r, 0, path)?,
                chaos: r.get(2).is_some_and(|p| p == "Chaos"),
                op: r.get(3).cloned().unwrap_or_default(),
                ms: num(&r, 4, path)?,
            })
        })
        .collect()
}

fn read_host(path: &Path) -> anyhow::Result<Vec<Sample>> {
    rows(path)?
        .into_iter()
        .map(|r| {
            Ok(Sample {
                at: num(&r, 0, path)?,
                dockerd_mib: num(&r, 1, path)? / 1024.0,
                dockerd_cpu: num(&r, 2, path)?,
                shims: num(&r, 3, path)?,
                proxies_mib: num(&r, 4, path)? / 1024.0,
                serves_mib: num(&r, 5, path)? / 1024.0,
            })
        })
        .collect()
}

/// `q` (0..=1) of `v`, sorted in place.
fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or(0.0)
}

type Series = BTreeMap<String, Vec<(f64, f64)>>;

/// Per call, the `q` quantile of each window's latencies, at the window's middle.
fn windows(calls: &[Call], q: f64) -> Series {
    let mut by: BTreeMap<(String, i64), Vec<f64>> = BTreeMap::new();
    for c in calls {
        let w = (c.at / WINDOW_S).floor() as i64;
        by.entry((c.op.clone(), w)).or_default().push(c.ms);
    }
    let mut out = Series::new();
    for ((op, w), mut v) in by {
        let x = (w as f64 + 0.5) * WINDOW_S;
        out.entry(op).or_default().push((x, quantile(&mut v, q)));
    }
    out
}

fn draw_latency(path: &Path, calls: &[Call]) -> Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::new(path, (1400, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let halves = root.split_evenly((2, 1));
    let x_max = calls.iter().map(|c| c.at).fold(WINDOW_S, f64::max);
    let chaos_at = calls
        .iter()
        .filter(|c| c.chaos)
        .map(|c| c.at)
        .reduce(f64::min);
    for (area, (name, q)) in halves.iter().zip([("p50", 0.5), ("p99", 0.99)]) {
        let series = windows(calls, q);
        let y_max = series.values().flatten().map(|p| p.1).fold(10.0, f64::max) * 1.5;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("Well-behaved calls, {name} per {WINDOW_S:.0} s window (ms)"),
                ("sans-serif", 22),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, (1f64..y_max).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("seconds since the run began")
            .y_desc("ms")
            .draw()?;
        if let Some(at) = chaos_at {
            chart
                .draw_series(LineSeries::new(
                    [(at, 1.0), (at, y_max)],
                    BLACK.stroke_width(2),
                ))?
                .label("chaos phase begins")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
        }
        lines_with_legend(&mut chart, series.into_iter().collect())?;
    }
    root.present()?;
    Ok(())
}

fn draw_host(path: &Path, host: &[Sample]) -> Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::new(path, (1400, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let halves = root.split_evenly((2, 1));
    let x_max = host.iter().map(|s| s.at).fold(1.0, f64::max);
    type Line = (&'static str, fn(&Sample) -> f64);
    let panels: [(&str, &str, [Line; 3]); 2] = [
        (
            "Memory (MiB)",
            "MiB",
            [
                ("dockerd RSS", |s| s.dockerd_mib),
                ("all proxies' RSS", |s| s.proxies_mib),
                ("all providers' RSS", |s| s.serves_mib),
            ],
        ),
        (
            "dockerd CPU (% of a core) and containerd shims",
            "% / count",
            [
                ("dockerd CPU %", |s| s.dockerd_cpu),
                ("containerd shims", |s| s.shims),
                ("", |_| 0.0),
            ],
        ),
    ];
    for (area, (caption, unit, lines)) in halves.iter().zip(panels) {
        let y_max = host
            .iter()
            .flat_map(|s| lines.iter().map(move |l| (l.1)(s)))
            .fold(1.0, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the run began")
            .y_desc(unit)
            .draw()?;
        let series = lines
            .into_iter()
            .filter(|(name, _)| !name.is_empty())
            .map(|(name, f)| (name.to_owned(), host.iter().map(|s| (s.at, f(s))).collect()))
            .collect();
        lines_with_legend(&mut chart, series)?;
    }
    root.present()?;
    Ok(())
}

/// Draws each named series as a line in a colour of its own, then the legend.
fn lines_with_legend<'a, Y: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    series: Vec<(String, Vec<(f64, f64)>)>,
) -> Result<(), Box<dyn std::error::Error>> {
    for (i, (name, points)) in series.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(at: f64, op: &str, ms: f64) -> Call {
        Call {
            at,
            chaos: false,
            op: op.into(),
            ms,
        }
    }

    /// Each call's points are its windows' quantiles, at the windows' middles.
    #[test]
    fn windows_hold_each_calls_quantile_per_window() {
        let calls = [
            call(1.0, "Create", 10.0),
            call(2.0, "Create", 30.0),
            call(3.0, "Create", 20.0),
            call(31.0, "Create", 5.0),
            call(4.0, "List", 7.0),
        ];
        let p50 = windows(&calls, 0.5);
        assert_eq!(p50["Create"], [(15.0, 20.0), (45.0, 5.0)]);
        assert_eq!(p50["List"], [(15.0, 7.0)]);
        assert_eq!(windows(&calls, 0.99)["Create"], [(15.0, 30.0), (45.0, 5.0)]);
    }
}
