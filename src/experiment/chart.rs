//! PNG charts rendered from a results folder's files (never from memory): ms/token against context per
//! path, the A/B ratio against the first path, the per-instruction time breakdown, and bandwidth as a
//! fraction of the measured ceiling. One fixed colour per path in every chart.
//!
//! Owns: chart style constants and rendering. Refuses: measuring; a chart that fails is reported and
//! the measurements stay on disk.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::record::{read_instructions, read_steps, summarise, Record};
use crate::error::{Context, Result};

const SIZE: (u32, u32) = (960, 560);
const FONT: &str = "sans-serif";

/// One colour per path, the same in every chart.
pub fn colour(path: &str) -> RGBColor {
    match path {
        "reference" => RGBColor(31, 119, 180),
        "interpreter" => RGBColor(255, 127, 14),
        "graph" => RGBColor(44, 160, 44),
        "megakernel" => RGBColor(214, 39, 40),
        _ => RGBColor(110, 110, 110),
    }
}

pub(super) fn fonts() -> Result<()> {
    static ONCE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = ONCE.get_or_init(|| {
        register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
            && register_font(FONT, FontStyle::Bold, dejavu::sans::bold()).is_ok()
    });
    if *ok {
        Ok(())
    } else {
        Err(crate::error::Error::new("chart: cannot register the bundled font"))
    }
}

fn err<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> crate::error::Error + '_ {
    move |e| crate::error::Error::new(format!("chart {what}: {e}"))
}

/// Median ms/token per (path, context).
fn medians(steps: &[(String, u32, f64)]) -> BTreeMap<String, BTreeMap<u32, f64>> {
    let mut by: BTreeMap<(String, u32), Vec<f64>> = BTreeMap::new();
    for (p, c, ms) in steps {
        by.entry((p.clone(), *c)).or_default().push(*ms);
    }
    let mut out: BTreeMap<String, BTreeMap<u32, f64>> = BTreeMap::new();
    for ((p, c), v) in by {
        if let Some((m, _, _)) = summarise(&v) {
            out.entry(p).or_default().insert(c, m);
        }
    }
    out
}

/// A line chart of per-path series over context length; bars when every series has one context (a line
/// over one point would draw an axis of fractional token counts).
fn lines(file: &Path, title: &str, y_desc: &str, series: &BTreeMap<String, BTreeMap<u32, f64>>) -> Result<()> {
    let contexts: std::collections::BTreeSet<u32> = series.values().flat_map(|m| m.keys().copied()).collect();
    if contexts.len() == 1 {
        let c = contexts.iter().next().copied().unwrap_or(0);
        let items: Vec<(String, f64, RGBColor)> =
            series.iter().filter_map(|(p, m)| m.get(&c).map(|v| (p.clone(), *v, colour(p)))).collect();
        return bars(file, &format!("{title} (context {c})"), y_desc, &items);
    }
    let xs: Vec<f64> = series.values().flat_map(|m| m.keys().map(|c| *c as f64)).collect();
    let ys: Vec<f64> = series.values().flat_map(|m| m.values().copied()).collect();
    let (x0, x1) = (xs.iter().cloned().fold(f64::MAX, f64::min), xs.iter().cloned().fold(f64::MIN, f64::max));
    let (x0, x1) = if x1 > x0 { (x0, x1) } else { (x0 - 1.0, x0 + 1.0) };
    let pad = (x1 - x0) * 0.05;
    let y1 = ys.iter().cloned().fold(0.0, f64::max) * 1.15 + 1e-9;
    let root = BitMapBackend::new(file, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err(title))?;
    let mut ch = ChartBuilder::on(&root)
        .caption(title, (FONT, 24).into_font().style(FontStyle::Bold))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d((x0 - pad)..(x1 + pad), 0f64..y1)
        .map_err(err(title))?;
    ch.configure_mesh()
        .x_desc("context length [tokens]")
        .y_desc(y_desc)
        .axis_desc_style((FONT, 17))
        .label_style((FONT, 14))
        .draw()
        .map_err(err(title))?;
    for (path, pts) in series {
        let c = colour(path);
        let v: Vec<(f64, f64)> = pts.iter().map(|(x, y)| (*x as f64, *y)).collect();
        ch.draw_series(LineSeries::new(v.clone(), c.stroke_width(2)))
            .map_err(err(title))?
            .label(path.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], c.stroke_width(3)));
        ch.draw_series(v.iter().map(|p| Circle::new(*p, 4, c.filled()))).map_err(err(title))?;
    }
    ch.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 15))
        .draw()
        .map_err(err(title))?;
    root.present().map_err(err(title))
}

/// A horizontal bar chart of (label, value, colour), each bar labelled with its name and value.
fn bars(file: &Path, title: &str, x_desc: &str, items: &[(String, f64, RGBColor)]) -> Result<()> {
    let rows: Vec<_> = items.iter().map(|(l, v, c)| (l.clone(), vec![(*v, *c)])).collect();
    hbars(file, title, x_desc, &rows, &[], 3, 1.6)
}

/// Horizontal stacked bars: a row per (label, parts), the parts' names and colours in `legend`, each row
/// labelled with its total.
pub fn stacked_bars(
    file: &Path,
    title: &str,
    x_desc: &str,
    rows: &[(String, Vec<f64>)],
    legend: &[(&str, RGBColor)],
) -> Result<()> {
    fonts()?;
    let rows: Vec<_> = rows
        .iter()
        .map(|(l, parts)| (l.clone(), parts.iter().zip(legend).map(|(v, (_, c))| (*v, *c)).collect()))
        .collect();
    hbars(file, title, x_desc, &rows, legend, 1, 1.35)
}

/// Horizontal bars, first row on top: each row's parts (value, colour) end to end, the row labelled with
/// its name and total (`decimals`); a legend when `legend` names the parts; the x axis `headroom` times
/// the longest row.
fn hbars(
    file: &Path,
    title: &str,
    x_desc: &str,
    rows: &[(String, Vec<(f64, RGBColor)>)],
    legend: &[(&str, RGBColor)],
    decimals: usize,
    headroom: f64,
) -> Result<()> {
    let total = |r: &[(f64, RGBColor)]| r.iter().map(|p| p.0).sum::<f64>();
    let x1 = rows.iter().map(|r| total(&r.1)).fold(0.0, f64::max) * headroom + 1e-9;
    let n = rows.len().max(1);
    let extra = if legend.is_empty() { 90 } else { 120 };
    let root = BitMapBackend::new(file, (SIZE.0, SIZE.1.max(extra + 26 * n as u32))).into_drawing_area();
    root.fill(&WHITE).map_err(err(title))?;
    let mut ch = ChartBuilder::on(&root)
        .caption(title, (FONT, 24).into_font().style(FontStyle::Bold))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(10)
        .build_cartesian_2d(0f64..x1, 0f64..n as f64)
        .map_err(err(title))?;
    ch.configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc(x_desc)
        .axis_desc_style((FONT, 17))
        .label_style((FONT, 14))
        .draw()
        .map_err(err(title))?;
    let row = |i: usize| (n - 1 - i) as f64;
    let parts = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    for k in 0..parts {
        let bars: Vec<_> = rows
            .iter()
            .enumerate()
            .filter(|(_, (_, p))| k < p.len())
            .map(|(i, (_, p))| {
                let x0: f64 = p[..k].iter().map(|q| q.0).sum();
                Rectangle::new([(x0, row(i) + 0.15), (x0 + p[k].0, row(i) + 0.85)], p[k].1.filled())
            })
            .collect();
        let series = ch.draw_series(bars).map_err(err(title))?;
        if let Some(&(name, c)) = legend.get(k) {
            series.label(name).legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
        }
    }
    ch.draw_series(rows.iter().enumerate().map(|(i, (l, p))| {
        let t = total(p);
        Text::new(format!("{l}  {t:.decimals$}"), (t + x1 * 0.01, row(i) + 0.7), (FONT, 14).into_font())
    }))
    .map_err(err(title))?;
    if !legend.is_empty() {
        ch.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font((FONT, 14))
            .draw()
            .map_err(err(title))?;
    }
    root.present().map_err(err(title))
}

/// Renders every chart of a results folder from its files; returns the PNGs written.
pub fn render(dir: &Path, unfinished: bool) -> Result<Vec<PathBuf>> {
    fonts()?;
    let rec = Record::load_finished(dir, unfinished)?;
    let steps = read_steps(dir)?;
    let mut out = Vec::new();
    let med = medians(&steps);
    if med.is_empty() {
        return Ok(out);
    }
    let f = dir.join("ms_per_token.png");
    let model = rec.model.split(':').next().unwrap_or("");
    lines(
        &f,
        &format!("{}: time per token, {model}, {}", rec.experiment.name, rec.machine),
        "ms / token (median)",
        &med,
    )?;
    out.push(f);
    // A/B: every path against the first one that ran.
    if let Some(base) = rec.paths.iter().find(|p| p.status == "ran").map(|p| p.name.clone()) {
        if let Some(b) = med.get(&base) {
            let ratios: BTreeMap<String, BTreeMap<u32, f64>> = med
                .iter()
                .map(|(p, m)| (p.clone(), m.iter().filter_map(|(c, v)| b.get(c).map(|bv| (*c, bv / v))).collect()))
                .collect();
            let f = dir.join("ratio.png");
            lines(
                &f,
                &format!("speed-up against {base} (higher is faster)"),
                &format!("{base} ms / path ms"),
                &ratios,
            )?;
            out.push(f);
        }
    }
    // Bandwidth: weight bytes per step / time, as a percentage of the measured ceiling.
    // (GPU paths only, against the ceiling measured in the run; a CPU run draws none.)
    if rec.weight_bytes_per_step > 0 && rec.ceiling_gbps > 0.0 {
        let bw: BTreeMap<String, BTreeMap<u32, f64>> = med
            .iter()
            .filter(|(p, _)| p.as_str() == "graph" || p.as_str() == "megakernel")
            .map(|(p, m)| {
                let v = m
                    .iter()
                    .map(|(c, ms)| {
                        (*c, 100.0 * rec.weight_bytes_per_step as f64 / (ms * 1e-3) / (rec.ceiling_gbps * 1e9))
                    })
                    .collect();
                (p.clone(), v)
            })
            .collect();
        let f = dir.join("bandwidth.png");
        lines(
            &f,
            &format!("weight-streaming bandwidth, % of {:.0} GB/s", rec.ceiling_gbps),
            "% of measured read ceiling",
            &bw,
        )?;
        out.push(f);
    }
    // Per-instruction breakdown: with GPU kernel figures, each instruction kind's ms per step for every
    // path side by side (the graph's launches timed word by word and the timelines' in-step times),
    // with its share of the measured read ceiling; else (CPU paths) the instruction CSV's times.
    let mut kinds: BTreeMap<String, Vec<(String, f64, f64)>> = BTreeMap::new();
    for k in &rec.kernels {
        kinds.entry(k.opcode.clone()).or_default().push((k.path.clone(), k.ms_per_step, k.fraction_of_ceiling));
    }
    let instr = read_instructions(dir)?;
    if !kinds.is_empty() {
        let mut order: Vec<(String, f64)> =
            kinds.iter().map(|(op, v)| (op.clone(), v.iter().map(|x| x.1).fold(0.0, f64::max))).collect();
        order.sort_by(|a, b| b.1.total_cmp(&a.1));
        let mut items = Vec::new();
        for (op, _) in order {
            for (path, ms, frac) in &kinds[&op] {
                let base = path.split(' ').next().unwrap_or(path);
                let pct = if *frac > 0.0 {
                    format!(" ({:.0} % of {:.0} GB/s)", 100.0 * frac, rec.ceiling_gbps)
                } else {
                    String::new()
                };
                items.push((format!("{op} [{path}]{pct}"), *ms, colour(base)));
            }
        }
        let f = dir.join("breakdown.png");
        bars(&f, "time per step by instruction kind, path by path", "ms / step", &items)?;
        out.push(f);
    } else if !instr.is_empty() {
        let mut by: BTreeMap<(String, String), f64> = BTreeMap::new();
        for (p, op, ms) in &instr {
            *by.entry((p.clone(), op.clone())).or_default() += ms;
        }
        let mut items: Vec<(String, f64, RGBColor)> =
            by.into_iter().map(|((p, op), ms)| (format!("{p}: {op}"), ms, colour(&p))).collect();
        items.sort_by(|a, b| b.1.total_cmp(&a.1));
        let f = dir.join("breakdown.png");
        bars(
            &f,
            "time per step by instruction kind (all words of a kind)",
            "ms / step (mean over the sequence)",
            &items,
        )?;
        out.push(f);
    }
    Ok(out)
}

/// An A/B report of two runs: a table of medians and their ratio, and a chart in the second folder.
pub fn compare(a: &Path, b: &Path, unfinished: bool) -> Result<String> {
    fonts()?;
    let (ra, rb) = (Record::load_finished(a, unfinished)?, Record::load_finished(b, unfinished)?);
    let (ma, mb) = (medians(&read_steps(a)?), medians(&read_steps(b)?));
    let mut s = format!(
        "A: {}\nB: {}\n{:12} {:>8} {:>12} {:>12} {:>8}\n",
        a.display(),
        b.display(),
        "path",
        "context",
        "A ms/tok",
        "B ms/tok",
        "A/B"
    );
    let mut series: BTreeMap<String, BTreeMap<u32, f64>> = BTreeMap::new();
    for (p, ca) in &ma {
        for (c, va) in ca {
            if let Some(vb) = mb.get(p).and_then(|m| m.get(c)) {
                s += &format!("{p:12} {c:>8} {va:>12.4} {vb:>12.4} {:>8.3}\n", va / vb);
                series.entry(p.clone()).or_default().insert(*c, va / vb);
            }
        }
    }
    if series.is_empty() {
        s += "no (path, context) measured in both runs\n";
        return Ok(s);
    }
    let name = a.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let f = b.join(format!("compare_vs_{name}.png"));
    let title = format!("A/B: {} ({}) vs {} ({})", ra.git_sha, ra.machine, rb.git_sha, rb.machine);
    lines(&f, &title, "A ms / B ms (higher: B faster)", &series).context("compare chart")?;
    s += &format!("chart: {}\n", f.display());
    Ok(s)
}

/// The crossover (issue 6): for each results folder and each context where both paths were timed, the
/// speed-up of path `b` over path `a` (a's ms / b's ms, medians) against a's ms/token, one series per
/// model, as a table and `out/crossover.png`: when does the second path pay, by the size of the step?
pub fn crossover(dirs: &[PathBuf], a: &str, b: &str, out: &Path, unfinished: bool) -> Result<String> {
    fonts()?;
    let mut pts: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut s = format!(
        "{:40} {:>8} {:>12} {:>12} {:>8}\n",
        "model",
        "context",
        &format!("{a} ms"),
        &format!("{b} ms"),
        "speed-up"
    );
    for d in dirs {
        let rec = Record::load_finished(d, unfinished)?;
        let model = rec.model.split(':').next().unwrap_or("?").to_string();
        let m = medians(&read_steps(d)?);
        let (Some(ma), Some(mb)) = (m.get(a), m.get(b)) else {
            s += &format!("{:40} (no {a} and {b} timings in {})\n", model, d.display());
            continue;
        };
        for (c, va) in ma {
            if let Some(vb) = mb.get(c) {
                s += &format!("{model:40} {c:>8} {va:>12.4} {vb:>12.4} {:>8.3}\n", va / vb);
                pts.entry(model.clone()).or_default().push((*va, va / vb));
            }
        }
    }
    if pts.is_empty() {
        crate::bail!("crossover: no folder has both {a} and {b} timed at one context");
    }
    let all: Vec<(f64, f64)> = pts.values().flatten().copied().collect();
    let (x0, x1) = all.iter().fold((f64::MAX, f64::MIN), |r, p| (r.0.min(p.0), r.1.max(p.0)));
    let (y0, y1) = all.iter().fold((1f64, 1f64), |r, p| (r.0.min(p.1), r.1.max(p.1)));
    let f = out.join("crossover.png");
    let e = err("crossover");
    let root = BitMapBackend::new(&f, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    let mut ch = ChartBuilder::on(&root)
        .caption(format!("{b} over {a}: speed-up against {a} ms/token"), (FONT, 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d((x0 * 0.8).log10()..(x1 * 1.25).log10(), (y0 * 0.9)..(y1 * 1.1))
        .map_err(&e)?;
    ch.configure_mesh()
        .x_desc(format!("log10 {a} ms/token"))
        .y_desc(format!("{a} ms / {b} ms (above 1: {b} faster)"))
        .draw()
        .map_err(&e)?;
    ch.draw_series(LineSeries::new([((x0 * 0.8).log10(), 1.0), ((x1 * 1.25).log10(), 1.0)], BLACK.mix(0.4)))
        .map_err(&e)?;
    let palette = [RGBColor(31, 119, 180), RGBColor(214, 39, 40), RGBColor(44, 160, 44), RGBColor(148, 103, 189)];
    for (i, (model, p)) in pts.iter().enumerate() {
        let col = palette[i % palette.len()];
        ch.draw_series(p.iter().map(|(x, y)| Circle::new((x.log10(), *y), 5, col.filled())))
            .map_err(&e)?
            .label(model.as_str())
            .legend(move |(x, y)| Circle::new((x, y), 5, col.filled()));
    }
    ch.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(&e)?;
    root.present().map_err(&e)?;
    s += &format!("chart: {}\n", f.display());
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacked_bars_render_a_png_and_refuse_an_unwritable_path() {
        let d = crate::model::tempdir::Dir::new("stacked");
        let f = d.path().join("s.png");
        let rows = vec![("t01".to_string(), vec![3.0, 1.0, 2.0]), ("t02".to_string(), vec![1.0, 0.0, 4.0])];
        let legend = [("a", RGBColor(1, 2, 3)), ("b", RGBColor(4, 5, 6)), ("c", RGBColor(7, 8, 9))];
        stacked_bars(&f, "t", "ms", &rows, &legend).unwrap();
        assert!(std::fs::read(&f).unwrap().starts_with(b"\x89PNG"));
        assert!(stacked_bars(&d.path().join("no/such/dir/s.png"), "t", "ms", &rows, &legend).is_err());
    }
}
